package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
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
		{"kv_metrics_scope_nil.frames", 4, 2, 6, wire.ActiveLoad{WorkerID: 12, DPRank: 1, ActivePrefillTokens: u64(256), KVUsedBlocks: u64(9)}},
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
		{"payload past the frame's end", mutate(func(f [][]byte) [][]byte { binary.BigEndian.PutUint32(f[3][1:], uint32(len(f[3])-4)); return f }), "kv_metrics", wire.ResultMalformed},
		{"trailing bytes past the declared payload, which is over the limit", mutate(func(f [][]byte) [][]byte {
			f[3] = append(f[3], make([]byte, 16<<10)...)
			binary.BigEndian.PutUint32(f[3][1:], 16<<10+1)
			return f
		}), "kv_metrics", wire.ResultOversized},
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

// TestTrailingBytesIgnored: bytes after the declared payload, and bytes
// after the envelope's value inside it, are ignored, as Dynamo's frame
// parser and msgpack decoder ignore them; the message decodes as without.
func TestTrailingBytesIgnored(t *testing.T) {
	want, rej := wire.DecodeEventMessage(readFrames(t, "kv_metrics_map.frames"), "kv_metrics", wire.MaxLoadPayloadBytes)
	if rej != nil {
		t.Fatal(rej)
	}
	for _, tail := range [][]byte{{0}, []byte("trailing junk \xc1\xc1"), make([]byte, 16<<10)} {
		frames := readFrames(t, "kv_metrics_map.frames")
		frames[3] = append(frames[3], tail...)
		env, rej := wire.DecodeEventMessage(frames, "kv_metrics", wire.MaxLoadPayloadBytes)
		if rej != nil {
			t.Fatalf("%d trailing bytes: %v", len(tail), rej)
		}
		if env.PublisherID != want.PublisherID || env.Sequence != want.Sequence || !bytes.Equal(env.Payload, want.Payload) {
			t.Fatalf("%d trailing bytes: envelope %+v, want %+v", len(tail), env, want)
		}
		// The same bytes inside the declared payload, after the envelope's
		// value: Dynamo's decoder reads the one value and stops there.
		frames = readFrames(t, "kv_metrics_map.frames")
		inner := append(append([]byte{}, frames[3][wire.FrameHeaderSize:]...), tail...)
		if len(inner) > wire.MaxLoadPayloadBytes {
			continue
		}
		frames[3] = binary.BigEndian.AppendUint32([]byte{wire.FrameVersion}, uint32(len(inner)))
		frames[3] = append(frames[3], inner...)
		env, rej = wire.DecodeEventMessage(frames, "kv_metrics", wire.MaxLoadPayloadBytes)
		if rej != nil {
			t.Fatalf("%d bytes after the envelope: %v", len(tail), rej)
		}
		if env.PublisherID != want.PublisherID || env.Sequence != want.Sequence || !bytes.Equal(env.Payload, want.Payload) {
			t.Fatalf("%d bytes after the envelope: envelope %+v, want %+v", len(tail), env, want)
		}
	}
}

// TestActiveLoadTooLong: an array longer than every layout Dynamo has
// shipped arrives in a valid message, and its payload is malformed: the
// place of kv_used_blocks in it is not guessed.
func TestActiveLoadTooLong(t *testing.T) {
	env, rej := wire.DecodeEventMessage(readFrames(t, "kv_metrics_too_long.frames"), "kv_metrics", wire.MaxLoadPayloadBytes)
	if rej != nil {
		t.Fatal(rej)
	}
	if l, err := wire.DecodeActiveLoad(env.Payload); err == nil || !strings.Contains(err.Error(), "array of 7 elements") {
		t.Fatalf("decoded %+v, %v", l, err)
	}
}

// TestActiveLoadLayouts: each array layout Dynamo has shipped is read by
// its places (4 fields; 5 with kv_used_blocks; 6 with scheduler_load_scope
// before kv_used_blocks), and arrays that fit none are malformed.
func TestActiveLoadLayouts(t *testing.T) {
	local := []byte{0xa5, 'l', 'o', 'c', 'a', 'l'}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name    string
		payload []byte
		want    wire.ActiveLoad
		err     string // a substring of the error; "" to decode
	}{
		{"4 fields", []byte{0x94, 0x01, 0x02, 0x03, 0x04}, wire.ActiveLoad{WorkerID: 1, DPRank: 2, ActiveDecodeBlocks: u64(3), ActivePrefillTokens: u64(4)}, ""},
		{"4 fields, nil loads", []byte{0x94, 0x01, 0x00, 0xc0, 0xc0}, wire.ActiveLoad{WorkerID: 1}, ""},
		{"dp_rank nil: a u32, not an option", []byte{0x94, 0x01, 0xc0, 0xc0, 0xc0}, wire.ActiveLoad{}, "dp_rank"},
		{"5 fields: kv_used_blocks last", []byte{0x95, 0x01, 0x00, 0xc0, 0xc0, 0x1e}, wire.ActiveLoad{WorkerID: 1, KVUsedBlocks: u64(30)}, ""},
		{"5 fields, kv_used_blocks nil", []byte{0x95, 0x01, 0x00, 0x03, 0x04, 0xc0}, wire.ActiveLoad{WorkerID: 1, ActiveDecodeBlocks: u64(3), ActivePrefillTokens: u64(4)}, ""},
		{"6 fields: scope, then kv_used_blocks", cat([]byte{0x96, 0x01, 0x00, 0x03, 0x04}, local, []byte{0x1e}),
			wire.ActiveLoad{WorkerID: 1, ActiveDecodeBlocks: u64(3), ActivePrefillTokens: u64(4), KVUsedBlocks: u64(30)}, ""},
		{"6 fields, scope nil", []byte{0x96, 0x01, 0x00, 0xc0, 0xc0, 0xc0, 0x1e}, wire.ActiveLoad{WorkerID: 1, KVUsedBlocks: u64(30)}, ""},
		// Every layout's first four places are required: rmp-serde 1.1.1
		// (serde_derive 1.0.152) refuses [1, 2] for each revision's struct
		// with "invalid length 2, expected struct ActiveLoad with 4
		// elements" (5, 6 for the later ones), and [] and [1, 2, 3] alike.
		{"fewer than 4", []byte{0x92, 0x01, 0x02}, wire.ActiveLoad{}, "array of 2 elements"},
		{"3 fields", []byte{0x93, 0x01, 0x02, 0x03}, wire.ActiveLoad{}, "array of 3 elements"},
		{"1 field", []byte{0x91, 0x01}, wire.ActiveLoad{}, "array of 1 elements"},
		{"empty array", []byte{0x90}, wire.ActiveLoad{}, "array of 0 elements"},
		{"5 fields with a scope where kv_used_blocks goes", cat([]byte{0x95, 0x01, 0x00, 0xc0, 0xc0}, local), wire.ActiveLoad{}, "kv_used_blocks"},
		// The newer layout: kv_used_blocks, then waiting_requests.
		{"6 fields with a number where the scope goes", []byte{0x96, 0x01, 0x00, 0xc0, 0xc0, 0x1e, 0x1f}, wire.ActiveLoad{WorkerID: 1, KVUsedBlocks: u64(30)}, ""},
		{"6 fields, newer layout, a string for waiting_requests", cat([]byte{0x96, 0x01, 0x00, 0xc0, 0xc0, 0x1e}, local), wire.ActiveLoad{}, "waiting_requests"},
		{"6 fields with a string where kv_used_blocks goes", cat([]byte{0x96, 0x01, 0x00, 0xc0, 0xc0}, local, local), wire.ActiveLoad{}, "kv_used_blocks"},
		{"7 fields", cat([]byte{0x97, 0x01, 0x00, 0xc0, 0xc0}, local, []byte{0x1e, 0x05}), wire.ActiveLoad{}, "array of 7 elements"},
		{"7 fields, all numbers", []byte{0x97, 0x01, 0x00, 0x03, 0x04, 0x05, 0x06, 0x07}, wire.ActiveLoad{}, "array of 7 elements"},
		{"16-bit array of 20", append([]byte{0xdc, 0x00, 0x14}, bytes.Repeat([]byte{0x01}, 20)...), wire.ActiveLoad{}, "array of 20 elements"},
		// The named form has no layout: any extra key is skipped.
		{"map with later fields", cat([]byte{0x84, 0xa9}, []byte("worker_id"), []byte{0x01, 0xb4}, []byte("scheduler_load_scope"), local,
			[]byte{0xae}, []byte("kv_used_blocks"), []byte{0x1e, 0xb0}, []byte("waiting_requests"), []byte{0x05}), wire.ActiveLoad{WorkerID: 1, KVUsedBlocks: u64(30)}, ""},
	}
	for _, tt := range tests {
		l, err := wire.DecodeActiveLoad(tt.payload)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: decoded %+v, %v; want an error about %s", tt.name, l, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if l.WorkerID != tt.want.WorkerID || l.DPRank != tt.want.DPRank || !eq(l.ActiveDecodeBlocks, tt.want.ActiveDecodeBlocks) ||
			!eq(l.ActivePrefillTokens, tt.want.ActivePrefillTokens) || !eq(l.KVUsedBlocks, tt.want.KVUsedBlocks) {
			t.Errorf("%s: %+v", tt.name, l)
		}
	}
}

func TestActiveLoadRejects(t *testing.T) {
	for name, b := range map[string][]byte{
		"no worker":     {0x81, 0xa7, 'd', 'p', '_', 'r', 'a', 'n', 'k', 0x00},
		"negative":      {0x94, 0xd0, 0xff, 0x00, 0xc0, 0xc0},
		"huge array":    {0xdd, 0xff, 0xff, 0xff, 0xff},
		"string worker": {0x94, 0xa1, 'x', 0x00, 0xc0, 0xc0},
		"deep":          append(append([]byte{0x82, 0xa1, 'z'}, bytes.Repeat([]byte{0x91}, 100)...), 0x01),
	} {
		if _, err := wire.DecodeActiveLoad(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	// Bytes after the value are ignored, as Dynamo's decoder ignores them.
	for _, tt := range []struct {
		b    []byte
		want uint64
	}{
		{[]byte{0x94, 0x01, 0x00, 0xc0, 0xc0, 0x01}, 1},
		{[]byte{0x94, 0x07, 0x00, 0xc0, 0xc0, 0xc1, 0xc1}, 7},
		{[]byte{0x81, 0xa9, 'w', 'o', 'r', 'k', 'e', 'r', '_', 'i', 'd', 0x09, 0x91}, 9},
	} {
		if l, err := wire.DecodeActiveLoad(tt.b); err != nil || l.WorkerID != tt.want {
			t.Errorf("% x: %+v %v, want worker %d", tt.b, l, err, tt.want)
		}
	}
	// Unknown keys, extension types and floats are skipped.
	b := []byte{0x83, 0xa9, 'w', 'o', 'r', 'k', 'e', 'r', '_', 'i', 'd', 0x05, 0xa3, 'e', 'x', 't', 0xd4, 0x01, 0x02, 0xa1, 'f', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}
	if l, err := wire.DecodeActiveLoad(b); err != nil || l.WorkerID != 5 {
		t.Errorf("%+v %v", l, err)
	}
}

func FuzzDecodeEventMessage(f *testing.F) {
	for _, name := range []string{"kv_metrics_map.frames", "kv_metrics_array.frames", "kv_metrics_scope.frames", "kv_metrics_old.frames",
		"kv_metrics_scope_nil.frames", "kv_metrics_too_long.frames"} {
		f.Add(readFrames(f, name)[3])
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		pid := make([]byte, 8)
		if len(frame) > 13 {
			copy(pid, frame[len(frame)-8:])
		}
		env, rej := wire.DecodeEventMessage([][]byte{[]byte("kv_metrics"), pid, make([]byte, 8), frame}, "kv_metrics", wire.MaxLoadPayloadBytes)
		if rej == nil && wire.PayloadCut(frame) {
			t.Fatalf("a frame cut short (%q) accepted", frame)
		}
		if rej == nil {
			// What is accepted is the message's own identity, and a payload
			// within the bound.
			if env.Topic != "kv_metrics" || env.PublisherID != binary.BigEndian.Uint64(pid) || env.Sequence != 0 {
				t.Fatalf("accepted as %q publisher %d sequence %d", env.Topic, env.PublisherID, env.Sequence)
			}
			if len(env.Payload) > wire.MaxLoadPayloadBytes {
				t.Fatalf("a payload of %d bytes accepted", len(env.Payload))
			}
			loadRoundTrip(t, env.Payload)
		}
		loadRoundTrip(t, frame)
	})
}

// loadRoundTrip checks that a payload DecodeActiveLoad accepts decodes to
// the same sample once written again by EncodeActiveLoad.
func loadRoundTrip(t *testing.T, payload []byte) {
	t.Helper()
	l, err := wire.DecodeActiveLoad(payload)
	if err != nil {
		return
	}
	back, err := wire.DecodeActiveLoad(wire.EncodeActiveLoad(l))
	if err != nil || !reflect.DeepEqual(back, l) {
		t.Fatalf("%+v written and read again: %+v, %v", l, back, err)
	}
}

// TestEnvelopeArrayOrders: a positional envelope is read in both field
// orders Dynamo has declared: topic first, and topic after publisher_id,
// sequence and published_at.
func TestEnvelopeArrayOrders(t *testing.T) {
	payload := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 7, KVUsedBlocks: u64(3)})
	topic := append([]byte{0xaa}, "kv_metrics"...)
	pid := []byte{0xce, 0x00, 0x01, 0x00, 0x00} // 65536
	seq, published := []byte{0x05}, []byte{0xcf, 0, 0, 1, 0x8b, 0xcf, 0xe5, 0x68, 0}
	bin := append([]byte{0xc4, byte(len(payload))}, payload...)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for name, env := range map[string][]byte{
		"topic first":  cat([]byte{0x95}, topic, pid, seq, published, bin),
		"topic fourth": cat([]byte{0x95}, pid, seq, published, topic, bin),
	} {
		t.Run(name, func(t *testing.T) {
			frame := binary.BigEndian.AppendUint32([]byte{1}, uint32(len(env)))
			frames := [][]byte{[]byte("kv_metrics"), binary.BigEndian.AppendUint64(nil, 65536), binary.BigEndian.AppendUint64(nil, 5), append(frame, env...)}
			got, rej := wire.DecodeEventMessage(frames, "kv_metrics", wire.MaxLoadPayloadBytes)
			if rej != nil {
				t.Fatal(rej)
			}
			if got.Topic != "kv_metrics" || got.PublisherID != 65536 || got.Sequence != 5 || got.PublishedAt != 0x18bcfe56800 || !bytes.Equal(got.Payload, payload) {
				t.Fatalf("envelope %+v", got)
			}
		})
	}
}
