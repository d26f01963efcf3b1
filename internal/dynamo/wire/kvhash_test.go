package wire_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// Known block hashes of tokens 0..63 at block size 16, with and without a
// LoRA adapter and a cache salt, and their sequence hashes. A change here
// means the router's hashes no longer match the ones workers publish.
func TestBlockHashVectors(t *testing.T) {
	if got := xxh3.HashSeed([]byte("test data"), 1337); got != 13226331709069118873 {
		t.Fatalf("upstream vector: %d", got)
	}
	tokens := make([]uint32, 64)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	hexes := func(hs []uint64) string {
		var out []string
		for _, h := range hs {
			out = append(out, fmt.Sprintf("%016x", h))
		}
		return strings.Join(out, ", ")
	}
	for _, c := range []struct {
		lora, salt string
		seed       uint64
		want       string
	}{
		{"", "", 1337, "d47a8f41c833328a, d43939178abd00db, 4cc8f942aaf401a2, cf2d99a33cc42682"},
		{"adapter-a", "", 0x7ab77913e9c918d6, "f1e20c61558f16bb, 17eab4607c24352e, 35be62ed7fc2fd5d, e13dc0b7734f1eda"},
		{"", "tenant-a", 0x1b095b6229544fb6, "1d92885ff53eb398, c70af6a11539679f, a176a983959e5042, 35caedfa42d0902d"},
		{"adapter-a", "tenant-a", 0x95c0d476131d6353, "5a0ecf8de5cbed28, f26c467a955da07c, ed6cf9c8d972bfe5, 1bf403f9d1342d72"},
	} {
		seed := wire.BlockHashSeed(c.lora, c.salt)
		if seed != c.seed {
			t.Errorf("seed(%q, %q) = %#x, want %#x", c.lora, c.salt, seed, c.seed)
		}
		if got := hexes(wire.LocalBlockHashes(tokens, 16, seed)); got != c.want {
			t.Errorf("local(%q, %q)\n got %s\nwant %s", c.lora, c.salt, got, c.want)
		}
	}
	local := wire.LocalBlockHashes(tokens, 16, 1337)
	if local[0] != 15310707395893867146 {
		t.Errorf("decimal local[0] = %d", local[0])
	}
	if got := hexes(wire.SequenceHashes(local, 1337)); got != "d47a8f41c833328a, bf15dffb16447f38, a4dda066f3c1e1a0, 35f7c0d119848950" {
		t.Errorf("sequence seed 1337: %s", got)
	}
	if got := hexes(wire.SequenceHashes(local, 0)); got != "d47a8f41c833328a, 370b01e5f7d1cfa7, 0d72e1c27fd8a4e8, bf32b1b9a97703ab" {
		t.Errorf("sequence seed 0: %s", got)
	}
	if n := len(wire.LocalBlockHashes(append(tokens, 64), 16, 1337)); n != 4 {
		t.Errorf("65 tokens: %d blocks", n)
	}
}

// Block hashes at the other block sizes workers run with, computed by an
// XXH3-64 written independently from the algorithm's description (it
// reproduces the upstream "test data" vector): the byte lengths of these
// blocks (128 to 262,144) take each of XXH3's input-length paths, where
// block size 16 (64 bytes) takes only one, and a seeded hash of a long
// input derives its secret from the seed. Tokens are an LCG's high words,
// so that every byte of each u32 varies.
func TestBlockHashVectorsAcrossSizes(t *testing.T) {
	tokens := make([]uint32, 2*65536+65536/2)
	x := uint64(7)
	for i := range tokens {
		x = x*6364136223846793005 + 1442695040888963407
		tokens[i] = uint32(x >> 32)
	}
	for _, c := range []struct {
		blockSize  int
		lora, salt string
		want       string
	}{
		{32, "", "", "e2a315a92a2c94a1, cf41b4a7d4deeebd"},
		{32, "adapter-a", "tenant-a", "413b0f8473635348, cd9b4d902bfc39f1"},
		{48, "", "", "9a530de4bd13f285, 31fbcfe2fe73b142"},
		{48, "adapter-a", "tenant-a", "763da284f2ff1b64, 4fbb458ce9b7709a"},
		{60, "", "", "80d5e468a16e5013, 378168c11e7d2efe"},
		{60, "adapter-a", "tenant-a", "b61325fab691cf21, 31d40103ad6518f5"},
		{64, "", "", "c4d5222c8bd871ba, 5fae6f5e7dd4d671"},
		{64, "adapter-a", "tenant-a", "ba2827bf70581991, b06837ff0f0a8b25"},
		{1024, "", "", "9fd513759113c013, 3f52d4df948c9249"},
		{1024, "adapter-a", "tenant-a", "566a7a5916b90e19, ad5012ab97eeff9e"},
		{65536, "", "", "310707b9751c0f11, 4a2b93c0afef1a33"},
		{65536, "adapter-a", "tenant-a", "69f41112fecee802, 233e409993ec4445"},
	} {
		hs := wire.LocalBlockHashes(tokens[:2*c.blockSize+c.blockSize/2], c.blockSize, wire.BlockHashSeed(c.lora, c.salt))
		if len(hs) != 2 {
			t.Fatalf("block size %d: %d blocks of 2.5 blocks' tokens", c.blockSize, len(hs))
		}
		if got := fmt.Sprintf("%016x, %016x", hs[0], hs[1]); got != c.want {
			t.Errorf("block size %d (%q, %q)\n got %s\nwant %s", c.blockSize, c.lora, c.salt, got, c.want)
		}
	}
}

// TestEncodeRouterEvent: a stored event encodes byte for byte as rmp_serde's
// named msgpack writes it.
func TestEncodeRouterEvent(t *testing.T) {
	mp := func(parts ...string) string {
		var b strings.Builder
		for _, p := range parts {
			if strings.HasPrefix(p, `"`) {
				s := strings.Trim(p, `"`)
				b.WriteString(hex.EncodeToString([]byte(s)))
			} else {
				b.WriteString(strings.ReplaceAll(p, " ", ""))
			}
		}
		return b.String()
	}
	stored := wire.EncodeRouterEvent(wire.RouterEvent{WorkerID: 7, EventID: 1, Kind: wire.KVStored,
		Blocks: []wire.StoredBlock{{BlockHash: 42, TokensHash: 0xd47a8f41c833328a}}})
	want := mp("83 a9", `"worker_id"`, "07 ac", `"storage_tier"`, "a6", `"device"`, "a5", `"event"`, "83 a8", `"event_id"`, "01 a4", `"data"`,
		"81 a6", `"stored"`, "83 ab", `"parent_hash"`, "c0 ae", `"start_position"`, "c0 a6", `"blocks"`, "91 83 aa", `"block_hash"`, "2a ab",
		`"tokens_hash"`, "cfd47a8f41c833328a ad", `"mm_extra_info"`, "c0 a7", `"dp_rank"`, "00")
	if got := hex.EncodeToString(stored); got != want {
		t.Errorf("stored\n got %s\nwant %s", got, want)
	}
	cleared := wire.EncodeRouterEvent(wire.RouterEvent{WorkerID: 7, EventID: 2, Kind: wire.KVCleared})
	if got := hex.EncodeToString(cleared); !strings.Contains(got, mp("a4", `"data"`, "a7", `"cleared"`, "a7", `"dp_rank"`, "00")) {
		t.Errorf("cleared %s", got)
	}
	removed := wire.EncodeRouterEvent(wire.RouterEvent{WorkerID: 7, EventID: 3, Kind: wire.KVRemoved, Removed: []uint64{42, 43}, DPRank: 1})
	if got := hex.EncodeToString(removed); !strings.Contains(got, mp("81 a7", `"removed"`, "81 ac", `"block_hashes"`, "92 2a 2b a7", `"dp_rank"`, "01")) {
		t.Errorf("removed %s", got)
	}
}

// TestEagleBlockHashes: an Eagle worker's block i is hashed over tokens
// i*bs .. i*bs+bs (one past the block), as XXH3 of their u32
// little-endian bytes; a block is complete when that window is, so 64
// tokens make 3 blocks of 16 and 65 make 4.
func TestEagleBlockHashes(t *testing.T) {
	t.Parallel()
	tokens := make([]uint32, 65)
	for i := range tokens {
		tokens[i] = uint32(i * 7919)
	}
	window := func(ts []uint32) uint64 {
		b := make([]byte, 0, 4*len(ts))
		for _, tk := range ts {
			b = append(b, byte(tk), byte(tk>>8), byte(tk>>16), byte(tk>>24))
		}
		return xxh3.HashSeed(b, wire.XXH3Seed)
	}
	for _, n := range []int{0, 1, 16, 17, 64, 65} {
		got := wire.EagleBlockHashes(tokens[:n], 16, wire.XXH3Seed)
		want := max(0, (n-1)/16)
		if len(got) != want {
			t.Fatalf("%d tokens: %d blocks, want %d", n, len(got), want)
		}
		for i, h := range got {
			if w := window(tokens[i*16 : i*16+17]); h != w {
				t.Errorf("%d tokens, block %d: %x, want %x", n, i, h, w)
			}
		}
	}
	if p, e := wire.LocalBlockHashes(tokens[:17], 16, wire.XXH3Seed), wire.EagleBlockHashes(tokens[:17], 16, wire.XXH3Seed); p[0] == e[0] {
		t.Error("an Eagle block hashed as a plain one")
	}
}
