// Package loopport picks loopback TCP ports for servers that must be told
// their port before they bind it (an etcd member, a kube-apiserver, a
// listener a reload moves to). A port is only known to be free when it is
// asked for, so the pick avoids the kernel's ephemeral range: ports for
// port-0 listeners and for outgoing connections come from there, and they
// are what takes a free port in the meantime on a busy machine.
//
// Imports: no internal package.
package loopport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// span is how far below the ephemeral range ports are picked.
const span = 16384

// Free returns a loopback port free now, below the ephemeral range when the
// range is known and leaves room below it, else one the kernel assigns.
func Free() (int, error) {
	lo := ephemeralLow()
	if lo > 2048 {
		base := max(1024, lo-span)
		for range 64 {
			port := base + rand.IntN(lo-base)
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				_ = l.Close()
				return port, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr is Free as a host:port address.
func FreeAddr() (string, error) {
	port, err := Free()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}
