// Package kube holds the Kubernetes discovery sources' pure parts. This
// file: the instance id Dynamo derives from a pod's name.
//
// Imports: discovery, config, fleet and wire.
package kube

import (
	"encoding/binary"
	"math/bits"
)

// maxPodName is the longest pod name Kubernetes accepts (a DNS-1123
// subdomain).
const maxPodName = 253

// InstanceIDMask keeps 53 bits, so that ids survive JSON numbers (f64).
const InstanceIDMask = 1<<53 - 1

// HashPodName is Dynamo's hash_pod_name: Rust's DefaultHasher (SipHash-1-3
// with both keys zero) over what `str::hash` feeds it, the UTF-8 bytes and
// one 0xFF byte, masked to 53 bits.
func HashPodName(name string) uint64 {
	// A pod name is a DNS subdomain, at most 253 characters: with the 0xFF
	// byte it fits the buffer, and hashing allocates nothing.
	var buf [maxPodName + 1]byte
	msg := append(append(buf[:0], name...), 0xff)
	return sipHash13(0, 0, msg) & InstanceIDMask
}

// sipHash13 is SipHash with one compression and three finalization rounds.
func sipHash13(k0, k1 uint64, msg []byte) uint64 {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13)
		v1 ^= v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16)
		v3 ^= v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21)
		v3 ^= v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17)
		v1 ^= v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	n := len(msg)
	for len(msg) >= 8 {
		m := binary.LittleEndian.Uint64(msg)
		v3 ^= m
		round()
		v0 ^= m
		msg = msg[8:]
	}
	var last [8]byte
	copy(last[:], msg)
	last[7] = byte(n)
	m := binary.LittleEndian.Uint64(last[:])
	v3 ^= m
	round()
	v0 ^= m
	v2 ^= 0xff
	round()
	round()
	round()
	return v0 ^ v1 ^ v2 ^ v3
}
