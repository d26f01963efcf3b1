package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

func readFrames(t testing.TB, name string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		b, err := hex.DecodeString(line)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, b)
	}
	return frames
}

func u64(v uint64) *uint64 { return &v }

func eq(a, b *uint64) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

func TestDecodeFixtureFrames(t *testing.T) {
	tests := []struct {
		file      string
		pid, seq  uint64
		published uint64
		load      wire.ActiveLoad
	}{
		{"kv_metrics_map.frames", 0x1f3a4b, 0, 0x18bcfe56800, wire.ActiveLoad{WorkerID: 1186445869714687, KVUsedBlocks: u64(30)}},
		{"kv_metrics_array.frames", 0x1234, 5, 1700000000, wire.ActiveLoad{WorkerID: 7, DPRank: 2, ActiveDecodeBlocks: u64(100), ActivePrefillTokens: u64(2048), KVUsedBlocks: u64(150)}},
		{"kv_metrics_scope.frames", 1, 0, 0, wire.ActiveLoad{WorkerID: 9, KVUsedBlocks: u64(17)}},
		{"kv_metrics_old.frames", 2, 3, 4, wire.ActiveLoad{WorkerID: 10, DPRank: 1, ActiveDecodeBlocks: u64(5), ActivePrefillTokens: u64(6)}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			env, rej := wire.DecodeEventMessage(readFrames(t, tt.file), "kv_metrics", wire.MaxLoadPayloadBytes)
			if rej != nil {
				t.Fatal(rej)
			}
			if env.PublisherID != tt.pid || env.Sequence != tt.seq || env.PublishedAt != tt.published || env.Topic != "kv_metrics" {
				t.Errorf("envelope %+v", env)
			}
			l, err := wire.DecodeActiveLoad(env.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if l.WorkerID != tt.load.WorkerID || l.DPRank != tt.load.DPRank || !eq(l.ActiveDecodeBlocks, tt.load.ActiveDecodeBlocks) ||
				!eq(l.ActivePrefillTokens, tt.load.ActivePrefillTokens) || !eq(l.KVUsedBlocks, tt.load.KVUsedBlocks) {
				t.Errorf("load %+v", l)
			}
		})
	}
}

// TestEncodeMatchesReference: our encoder writes the frames of
// kv_metrics_map.frames, a named-envelope message as Dynamo's publisher
// writes it.
func TestEncodeMatchesReference(t *testing.T) {
	want := readFrames(t, "kv_metrics_map.frames")
	payload := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 1186445869714687, KVUsedBlocks: u64(30)})
	if len(payload) != 90 {
		t.Errorf("payload %d bytes, want 90", len(payload))
	}
	got := wire.EncodeEventMessage("kv_metrics", 0x1f3a4b, 0, 0x18bcfe56800, payload)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("frame %d:\n got %x\nwant %x", i, got[i], want[i])
		}
	}
}

func TestRejects(t *testing.T) {
	good := func() [][]byte { return readFrames(t, "kv_metrics_map.frames") }
	mutate := func(f func([][]byte) [][]byte) [][]byte { return f(good()) }
	tests := []struct {
		name   string
		frames [][]byte
		topic  string
		result string
	}{
		{"three frames", mutate(func(f [][]byte) [][]byte { return f[:3] }), "kv_metrics", wire.ResultMalformed},
		{"short id", mutate(func(f [][]byte) [][]byte { f[1] = f[1][:7]; return f }), "kv_metrics", wire.ResultMalformed},
		{"frame topic", good(), "kv-events", wire.ResultTopicMismatch},
		{"version 2", mutate(func(f [][]byte) [][]byte { f[3][0] = 2; return f }), "kv_metrics", wire.ResultUnknownVersion},
		{"oversized", mutate(func(f [][]byte) [][]byte { binary.BigEndian.PutUint32(f[3][1:], 16<<10+1); return f }), "kv_metrics", wire.ResultOversized},
		{"length lies", mutate(func(f [][]byte) [][]byte { binary.BigEndian.PutUint32(f[3][1:], 10); return f }), "kv_metrics", wire.ResultMalformed},
		{"no header", mutate(func(f [][]byte) [][]byte { f[3] = f[3][:3]; return f }), "kv_metrics", wire.ResultMalformed},
		{"garbage envelope", mutate(func(f [][]byte) [][]byte { f[3] = append([]byte{1, 0, 0, 0, 2}, 0xc1, 0xc1); return f }), "kv_metrics", wire.ResultMalformed},
		{"publisher differs", mutate(func(f [][]byte) [][]byte { f[1][7]++; return f }), "kv_metrics", wire.ResultIdentityMismatch},
		{"sequence differs", mutate(func(f [][]byte) [][]byte { f[2][7]++; return f }), "kv_metrics", wire.ResultMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rej := wire.DecodeEventMessage(tt.frames, tt.topic, wire.MaxLoadPayloadBytes)
			if rej == nil || rej.Result != tt.result {
				t.Fatalf("reject %v, want %s", rej, tt.result)
			}
		})
	}
	// Envelope topic differing from the frame topic.
	f := wire.EncodeEventMessage("kv-events", 1, 0, 0, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 1}))
	f[0] = []byte("kv_metrics")
	if _, rej := wire.DecodeEventMessage(f, "kv_metrics", wire.MaxLoadPayloadBytes); rej == nil || rej.Result != wire.ResultTopicMismatch {
		t.Fatalf("envelope topic: %v", rej)
	}
}

func TestActiveLoadRejects(t *testing.T) {
	for name, b := range map[string][]byte{
		"no worker":     {0x81, 0xa7, 'd', 'p', '_', 'r', 'a', 'n', 'k', 0x00},
		"negative":      {0x91, 0xd0, 0xff},
		"trailing":      {0x91, 0x01, 0x01},
		"huge array":    {0xdd, 0xff, 0xff, 0xff, 0xff},
		"string worker": {0x91, 0xa1, 'x'},
		"deep":          append(append([]byte{0x82, 0xa1, 'z'}, bytes.Repeat([]byte{0x91}, 100)...), 0x01),
	} {
		if _, err := wire.DecodeActiveLoad(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	// Unknown keys, extension types and floats are skipped.
	b := []byte{0x83, 0xa9, 'w', 'o', 'r', 'k', 'e', 'r', '_', 'i', 'd', 0x05, 0xa3, 'e', 'x', 't', 0xd4, 0x01, 0x02, 0xa1, 'f', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}
	if l, err := wire.DecodeActiveLoad(b); err != nil || l.WorkerID != 5 {
		t.Errorf("%+v %v", l, err)
	}
}

func FuzzDecodeEventMessage(f *testing.F) {
	for _, name := range []string{"kv_metrics_map.frames", "kv_metrics_array.frames", "kv_metrics_scope.frames", "kv_metrics_old.frames"} {
		f.Add(readFrames(f, name)[3])
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		pid := make([]byte, 8)
		if len(frame) > 13 {
			copy(pid, frame[len(frame)-8:])
		}
		env, rej := wire.DecodeEventMessage([][]byte{[]byte("kv_metrics"), pid, make([]byte, 8), frame}, "kv_metrics", wire.MaxLoadPayloadBytes)
		if rej == nil {
			_, _ = wire.DecodeActiveLoad(env.Payload)
		}
		_, _ = wire.DecodeActiveLoad(frame)
	})
}
