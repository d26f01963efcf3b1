package wire_test

// Decoders and hashes checked against the bytes Dynamo's newest producers
// write.

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// TestActiveLoadNewestPositionalLayout: Dynamo's newest ActiveLoad is
// worker_id, dp_rank, active_decode_blocks, active_prefill_tokens,
// kv_used_blocks, waiting_requests; in its positional form an integer in
// place 4 is kv_used_blocks (an older revision had the scheduler's load
// scope there, nil or a string), and the sample is read, not refused.
func TestActiveLoadNewestPositionalLayout(t *testing.T) {
	// [worker_id=7, dp_rank=0, active_decode_blocks=nil,
	//  active_prefill_tokens=nil, kv_used_blocks=30, waiting_requests=2]
	payload := []byte{0x96, 0x07, 0x00, 0xc0, 0xc0, 0x1e, 0x02}
	// It travels in a well-formed event-plane message.
	frames := wire.EncodeEventMessage("kv_metrics", 0x1f3a4b, 0, 1700000000000, payload)
	env, rej := wire.DecodeEventMessage(frames, "kv_metrics", wire.MaxLoadPayloadBytes)
	if rej != nil {
		t.Fatalf("message rejected: %v", rej)
	}
	l, err := wire.DecodeActiveLoad(env.Payload)
	if err != nil {
		t.Fatalf("newest upstream positional ActiveLoad refused: %v", err)
	}
	if l.WorkerID != 7 || l.DPRank != 0 || l.ActiveDecodeBlocks != nil || l.ActivePrefillTokens != nil || !eq(l.KVUsedBlocks, u64(30)) {
		t.Fatalf("decoded %+v; want worker 7, kv_used_blocks 30", l)
	}
}

// TestUpstreamSaltSeed: the seed Dynamo's block hashes take under a LoRA
// name and a cache salt is
//
//	let mut seed = CHAIN_XXH3_SEED; // 1337
//	if let Some(name) = lora_name { seed = seed.wrapping_add(compute_hash_v2(name.as_bytes(), 0)); }
//	if let Some(s) = salt { seed = seed.wrapping_add(compute_hash_v2(s.as_bytes(), 1)); }
//
// with empty strings normalised to None; tokens are hashed as u32 LE over
// chunks_exact(block_size). Recomputed here from first principles.
func TestUpstreamSaltSeed(t *testing.T) {
	for _, c := range []struct{ lora, salt string }{{"", ""}, {"adapter-a", ""}, {"", "tenant-a"}, {"adapter-a", "tenant-a"}} {
		seed := uint64(1337)
		if c.lora != "" {
			seed += xxh3.HashSeed([]byte(c.lora), 0)
		}
		if c.salt != "" {
			seed += xxh3.HashSeed([]byte(c.salt), 1)
		}
		if got := wire.BlockHashSeed(c.lora, c.salt); got != seed {
			t.Fatalf("seed(%q,%q) = %#x, want %#x", c.lora, c.salt, got, seed)
		}
		tokens := make([]uint32, 40)
		for i := range tokens {
			tokens[i] = uint32(i*7919 + 3)
		}
		got := wire.LocalBlockHashes(tokens, 16, seed)
		if len(got) != 2 {
			t.Fatalf("%d blocks for 40 tokens at 16", len(got))
		}
		for b := 0; b < 2; b++ {
			var buf bytes.Buffer
			for _, tok := range tokens[b*16 : (b+1)*16] {
				_ = binary.Write(&buf, binary.LittleEndian, tok)
			}
			if want := xxh3.HashSeed(buf.Bytes(), seed); got[b] != want {
				t.Fatalf("block %d = %#x, want %#x", b, got[b], want)
			}
		}
	}
	// Upstream vector (kv-router protocols.rs test): XXH3_64("test data", 1337).
	if got := xxh3.HashSeed([]byte("test data"), 1337); got != 13226331709069118873 {
		t.Fatalf("xxh3 vector %d", got)
	}
}

// TestNegativeI64Hashes: vLLM block hashes are i64 values the
// Dynamo worker reinterprets; a decoder fed the msgpack int64 form (0xd3)
// must keep the bits.
func TestNegativeI64Hashes(t *testing.T) {
	// [worker_id 7, "device", [event_id 1, {"removed": [[-1]]}, 0]]
	p := []byte{0x93, 0x07, 0xa6, 'd', 'e', 'v', 'i', 'c', 'e', 0x93, 0x01, 0x81, 0xa7, 'r', 'e', 'm', 'o', 'v', 'e', 'd', 0x91, 0x91,
		0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00}
	evs, err := wire.DecodeRouterEvents(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Kind != wire.KVRemoved || len(evs[0].Removed) != 1 || evs[0].Removed[0] != ^uint64(0) {
		t.Fatalf("%+v", evs)
	}
}
