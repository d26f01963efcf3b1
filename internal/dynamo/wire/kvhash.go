package wire

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// XXH3Seed is the seed of Dynamo's block hashes without LoRA or salt.
const XXH3Seed = 1337

// BlockHashSeed is the seed of a request's block hashes: XXH3Seed, plus
// (wrapping) XXH3_64(lora, seed 0) with a LoRA adapter and XXH3_64(salt,
// seed 1) with a cache salt. Empty strings are absent.
func BlockHashSeed(lora, salt string) uint64 {
	seed := uint64(XXH3Seed)
	if lora != "" {
		seed += xxh3.HashSeed([]byte(lora), 0)
	}
	if salt != "" {
		seed += xxh3.HashSeed([]byte(salt), 1)
	}
	return seed
}

// LocalBlockHashes returns the tokens_hash of every complete block: XXH3_64
// with seed over the block's token ids as u32 little-endian. A trailing
// partial block has none. Blocks are hashed independently.
func LocalBlockHashes(tokens []uint32, blockSize int, seed uint64) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	n := len(tokens) / blockSize
	out := make([]uint64, n)
	buf := make([]byte, 4*blockSize)
	for i := range n {
		for j, t := range tokens[i*blockSize : (i+1)*blockSize] {
			binary.LittleEndian.PutUint32(buf[4*j:], t)
		}
		out[i] = xxh3.HashSeed(buf, seed)
	}
	return out
}

// EagleBlockHashes returns the tokens_hash of every complete block of an
// Eagle worker (speculative decoding keeps one token past each block): a
// window of blockSize+1 tokens every blockSize tokens, hashed as
// LocalBlockHashes hashes a block. A block is complete when its window
// is, so len(tokens)-1 tokens give (len(tokens)-1)/blockSize blocks.
func EagleBlockHashes(tokens []uint32, blockSize int, seed uint64) []uint64 {
	if blockSize <= 0 || len(tokens) == 0 {
		return nil
	}
	n := (len(tokens) - 1) / blockSize
	out := make([]uint64, n)
	buf := make([]byte, 4*(blockSize+1))
	for i := range n {
		for j, t := range tokens[i*blockSize : i*blockSize+blockSize+1] {
			binary.LittleEndian.PutUint32(buf[4*j:], t)
		}
		out[i] = xxh3.HashSeed(buf, seed)
	}
	return out
}

// SequenceHashes chains local hashes: seq[0] = local[0] and seq[i] =
// XXH3_64(LE64(seq[i-1]) ‖ LE64(local[i]), seed).
func SequenceHashes(local []uint64, seed uint64) []uint64 {
	out := make([]uint64, len(local))
	var buf [16]byte
	for i, h := range local {
		if i == 0 {
			out[0] = h
			continue
		}
		binary.LittleEndian.PutUint64(buf[:8], out[i-1])
		binary.LittleEndian.PutUint64(buf[8:], h)
		out[i] = xxh3.HashSeed(buf[:], seed)
	}
	return out
}
