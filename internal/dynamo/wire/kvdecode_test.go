package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// mpb builds msgpack bytes from parts: hex bytes ("83 a9"), or a quoted
// string (`"worker_id"`) written as its bytes, which must follow its own
// fixstr header (checked, so that a miscounted header fails loudly).
func mpb(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		if strings.HasPrefix(p, `"`) {
			s := strings.Trim(p, `"`)
			if len(b) == 0 || b[len(b)-1] != 0xa0|byte(len(s)) || len(s) > 31 {
				panic(fmt.Sprintf("%s does not follow its fixstr header", p))
			}
			b = append(b, s...)
			continue
		}
		h, err := hex.DecodeString(strings.ReplaceAll(p, " ", ""))
		if err != nil {
			panic(err)
		}
		b = append(b, h...)
	}
	return b
}

func u32p(v uint32) *uint32 { return &v }

// kvFixture is one payload and the events it holds.
type kvFixture struct {
	name    string
	payload []byte
	want    []wire.RouterEvent
}

// The events the fixtures hold; a named and a positional fixture of each.
var (
	// The reference example: worker 7, one block at the root.
	evStoredRoot = wire.RouterEvent{WorkerID: 7, StorageTier: wire.TierDevice, EventID: 1, Kind: wire.KVStored,
		Blocks: []wire.StoredBlock{{BlockHash: 42, TokensHash: 0xd47a8f41c833328a}}}
	// Parent, start position, a multimodal block, hashes with the top bit
	// set, the newest fields.
	evStoredFull = wire.RouterEvent{WorkerID: 0x0001020304050607, StorageTier: wire.TierHostPinned, Residency: wire.ResidencyWorker,
		EventID: 65536, DPRank: 3, Kind: wire.KVStored, ParentHash: u64(0xffffffffffffffff), StartPosition: u32p(32),
		Blocks: []wire.StoredBlock{
			{BlockHash: 0x8000000000000001, TokensHash: 0x11, Multimodal: true},
			{BlockHash: 0xfffffffffffffffe, TokensHash: 0x1234},
		}}
	evRemoved = wire.RouterEvent{WorkerID: 9, StorageTier: wire.TierDisk, EventID: 2, DPRank: 1, Kind: wire.KVRemoved,
		Removed: []uint64{0x8000000000000000, 0x8000000000000000, 0xffffffffffffffff, 0xffffffffffffffe0}}
	evClearedOwner = wire.RouterEvent{WorkerID: 9, StorageTier: wire.TierExternal, Residency: wire.ResidencyCacheOwner, EventID: 3, Kind: wire.KVCleared}
	evClearedNil   = wire.RouterEvent{WorkerID: 9, StorageTier: wire.TierDevice, EventID: 4, Kind: wire.KVCleared}
)

// Named form (rmp_serde to_vec_named): maps keyed by field name.
var (
	namedStoredRoot = mpb(
		"83",                      // RouterEvent: map of 3
		"a9", `"worker_id"`, "07", // worker_id 7
		"ac", `"storage_tier"`, "a6", `"device"`,
		"a5", `"event"`, "83", // KvCacheEvent: map of 3
		"a8", `"event_id"`, "01",
		"a4", `"data"`, "81", "a6", `"stored"`, "83", // {"stored": KvCacheStoreData, map of 3}
		"ab", `"parent_hash"`, "c0", // None
		"ae", `"start_position"`, "c0", // None
		"a6", `"blocks"`, "91", "83", // one block, map of 3
		"aa", `"block_hash"`, "2a", // 42
		"ab", `"tokens_hash"`, "cf d47a8f41c833328a", // uint64
		"ad", `"mm_extra_info"`, "c0", // None
		"a7", `"dp_rank"`, "00",
	)
	// Fields in another order, and unknown ones (skipped) at every level.
	namedStoredFull = mpb(
		"86",                  // RouterEvent: map of 6
		"a5", `"event"`, "83", // KvCacheEvent, dp_rank first
		"a7", `"dp_rank"`, "03",
		"a4", `"data"`, "81", "a6", `"stored"`, "84", // KvCacheStoreData: map of 4, blocks first
		"a6", `"blocks"`, "92", // two blocks
		"83",                                                      // block 0, mm_extra_info first
		"ad", `"mm_extra_info"`, "81", "aa", `"mm_objects"`, "91", // {"mm_objects": [one object]}
		"82", "a7", `"mm_hash"`, "05", "a7", `"offsets"`, "91", "92 00 04", // {mm_hash 5, offsets [[0, 4]]}
		"ab", `"tokens_hash"`, "11",
		"aa", `"block_hash"`, "cf 8000000000000001", // top bit set, uint64
		"82",                                        // block 1, no mm_extra_info at all
		"aa", `"block_hash"`, "d3 fffffffffffffffe", // -2 as int64: 0xfffffffffffffffe
		"ab", `"tokens_hash"`, "cd 1234", // uint16
		"ae", `"start_position"`, "20", // 32
		"ab", `"parent_hash"`, "cf ffffffffffffffff",
		"b5", `"shared_cache_eligible"`, "c3", // unknown: skipped
		"a8", `"event_id"`, "ce 00010000", // 65536, uint32
		"ac", `"storage_tier"`, "ab", `"host_pinned"`,
		"b0", `"residency_domain"`, "a6", `"worker"`,
		"a9", `"worker_id"`, "cf 0001020304050607",
		"ac", `"state_source"`, "82", "a4", `"pool"`, "91", "a1", `"x"`, "a4", `"slot"`, "c4 02 0102", // unknown: skipped
		"aa", `"session_id"`, "a3", `"abc"`, // unknown: skipped
	)
	namedRemoved = mpb(
		"83",
		"a9", `"worker_id"`, "09",
		"ac", `"storage_tier"`, "a4", `"disk"`,
		"a5", `"event"`, "83",
		"a8", `"event_id"`, "02",
		"a4", `"data"`, "81", "a7", `"removed"`, "81", // {"removed": {block_hashes}}
		"ac", `"block_hashes"`, "94", // four hashes:
		"cf 8000000000000000", // uint64
		"d3 8000000000000000", // int64 minimum: the same bits
		"d0 ff",               // -1 as int8: every bit set
		"e0",                  // -32 as a negative fixint
		"a7", `"dp_rank"`, "01",
	)
	namedClearedOwner = mpb(
		"84",
		"a9", `"worker_id"`, "09",
		"ac", `"storage_tier"`, "a8", `"external"`,
		"b0", `"residency_domain"`, "ab", `"cache_owner"`,
		"a5", `"event"`, "83",
		"a8", `"event_id"`, "03",
		"a4", `"data"`, "a7", `"cleared"`, // a unit variant: its name
		"a7", `"dp_rank"`, "00",
	)
	// No storage_tier (device), no dp_rank (0), cleared as {"cleared": nil}.
	namedClearedNil = mpb(
		"82",
		"a9", `"worker_id"`, "09",
		"a5", `"event"`, "82",
		"a8", `"event_id"`, "04",
		"a4", `"data"`, "81", "a7", `"cleared"`, "c0",
	)
)

// Positional form (rmp_serde to_vec): arrays in declaration order.
var (
	// An older writer: no residency_domain, no start_position, blocks of
	// two elements (no mm_extra_info).
	posStoredRoot = mpb(
		"93",                   // RouterEvent: [worker_id, storage_tier, event]
		"07", "a6", `"device"`, // 7, "device"
		"93", "01", // KvCacheEvent: [event_id 1, data, dp_rank]
		"81", "a6", `"stored"`, "92", // {"stored": [parent_hash, blocks]}
		"c0",                              // parent_hash None
		"91", "92 2a cf d47a8f41c833328a", // blocks: [[42, tokens_hash]]
		"00", // dp_rank 0
	)
	// The newest writer: residency_domain before the event, state_source
	// after it.
	posStoredFull = mpb(
		"95", // [worker_id, storage_tier, residency_domain, event, state_source]
		"cf 0001020304050607", "ab", `"host_pinned"`, "a6", `"worker"`,
		"93", "ce 00010000", // KvCacheEvent: [65536, data, dp_rank]
		"81", "a6", `"stored"`, "93", // [parent_hash, start_position, blocks]
		"cf ffffffffffffffff", "20", "92",
		"93 cf 8000000000000001 11", "91 91 92 05 91 92 00 04", // [hash, tokens, [[[5, [[0, 4]]]]]]
		"93 d3 fffffffffffffffe cd 1234 c0", // [hash, tokens, None]
		"03",                                // dp_rank
		"92", "a1", `"p"`, "07",             // state_source: skipped
	)
	posRemoved = mpb(
		"93", "09", "a4", `"disk"`,
		"93", "02", "81", "a7", `"removed"`, "91", // {"removed": [block_hashes]}
		"94 cf 8000000000000000 d3 8000000000000000 d0 ff e0",
		"01",
	)
	posClearedOwner = mpb(
		"94", "09", "a8", `"external"`, "ab", `"cache_owner"`,
		"93", "03", "a7", `"cleared"`, "00",
	)
	// No dp_rank (0): older writers of KvCacheEvent end at data.
	posClearedNil = mpb(
		"93", "09", "a6", `"device"`,
		"92", "04", "81", "a7", `"cleared"`, "c0",
	)
)

func kvFixtures() []kvFixture {
	batch := append([]byte{0x95}, namedStoredRoot...) // a batch: an array of five RouterEvents, mixed forms
	for _, b := range [][]byte{posStoredFull, namedRemoved, posClearedOwner, namedClearedNil} {
		batch = append(batch, b...)
	}
	one := func(e wire.RouterEvent) []wire.RouterEvent { return []wire.RouterEvent{e} }
	return []kvFixture{
		{"named stored root", namedStoredRoot, one(evStoredRoot)},
		{"named stored full", namedStoredFull, one(evStoredFull)},
		{"named removed", namedRemoved, one(evRemoved)},
		{"named cleared cache_owner", namedClearedOwner, one(evClearedOwner)},
		{"named cleared nil", namedClearedNil, one(evClearedNil)},
		{"positional stored root", posStoredRoot, one(evStoredRoot)},
		{"positional stored full", posStoredFull, one(evStoredFull)},
		{"positional removed", posRemoved, one(evRemoved)},
		{"positional cleared cache_owner", posClearedOwner, one(evClearedOwner)},
		{"positional cleared nil", posClearedNil, one(evClearedNil)},
		{"batch", batch, []wire.RouterEvent{evStoredRoot, evStoredFull, evRemoved, evClearedOwner, evClearedNil}},
		{"batch of one", append([]byte{0x91}, posStoredRoot...), one(evStoredRoot)},
		{"empty batch", []byte{0x90}, nil},
		{"host_pinned tier, positional start without parent", mpb(
			"93", "01", "ab", `"host_pinned"`, "92", "06", "81", "a6", `"stored"`,
			"94", "c0", "05", "c3", "91 92 01 02", // [None, 5, a newer field, [[1, 2]]]
		), one(wire.RouterEvent{WorkerID: 1, StorageTier: wire.TierHostPinned, EventID: 6, Kind: wire.KVStored, StartPosition: u32p(5),
			Blocks: []wire.StoredBlock{{BlockHash: 1, TokensHash: 2}}})},
		{"another tier kept", mpb(
			"83", "a9", `"worker_id"`, "01", "ac", `"storage_tier"`, "a5", `"g4ssd"`,
			"a5", `"event"`, "82", "a8", `"event_id"`, "05", "a4", `"data"`, "a7", `"cleared"`,
		), one(wire.RouterEvent{WorkerID: 1, StorageTier: "g4ssd", EventID: 5, Kind: wire.KVCleared})},
	}
}

func TestDecodeRouterEvents(t *testing.T) {
	for _, tt := range kvFixtures() {
		t.Run(tt.name, func(t *testing.T) {
			prior := wire.RouterEvent{WorkerID: 99, Kind: wire.KVCleared}
			got, err := wire.DecodeRouterEvents(tt.payload, []wire.RouterEvent{prior})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got[0], prior) {
				t.Errorf("dst[0] changed: %+v", got[0])
			}
			if !reflect.DeepEqual(got[1:], append([]wire.RouterEvent{}, tt.want...)) {
				t.Errorf("\n got %s\nwant %s", dump(got[1:]), dump(tt.want))
			}
		})
	}
}

func dump(evs []wire.RouterEvent) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "{%d %q %q id=%d rank=%d %s", e.WorkerID, e.StorageTier, e.Residency, e.EventID, e.DPRank, e.Kind)
		if e.ParentHash != nil {
			fmt.Fprintf(&b, " parent=%x", *e.ParentHash)
		}
		if e.StartPosition != nil {
			fmt.Fprintf(&b, " start=%d", *e.StartPosition)
		}
		for _, k := range e.Blocks {
			fmt.Fprintf(&b, " block=%x/%x/%t", k.BlockHash, k.TokensHash, k.Multimodal)
		}
		fmt.Fprintf(&b, " removed=%x} ", e.Removed)
	}
	return b.String()
}

// TestDecodeRouterEventsForwardCompatible: what a newer publisher may send
// (a variant or a residency domain this decoder does not know, a domain
// that is not a string) decodes as an event of unknown kind or domain, its data skipped,
// not as a malformed payload that would cost the rank its blocks.
func TestDecodeRouterEventsForwardCompatible(t *testing.T) {
	event := mpb("a5", `"event"`, "82", "a8", `"event_id"`, "01", "a4", `"data"`, "a7", `"cleared"`)
	named := func(field ...string) []byte {
		b := append([]byte{0x83}, mpb("a9", `"worker_id"`, "01")...)
		b = append(b, mpb(field...)...)
		return append(b, event...)
	}
	withData := func(data ...string) []byte {
		return mpb(append([]string{"82", "a9", `"worker_id"`, "01", "a5", `"event"`, "82", "a8", `"event_id"`, "01", "a4", `"data"`}, data...)...)
	}
	tests := []struct {
		name            string
		payload         []byte
		kind, residency string
	}{
		{"residency unknown", named("b0", `"residency_domain"`, "a6", `"future"`), wire.KVCleared, wire.ResidencyUnknown},
		// Present or omitted, never null: upstream refuses such an event
		// (an invalid domain), not the batch around it.
		{"residency nil", named("b0", `"residency_domain"`, "c0"), wire.KVCleared, wire.ResidencyUnknown},
		{"residency integer", named("b0", `"residency_domain"`, "01"), wire.KVCleared, wire.ResidencyUnknown},
		{"residency map", named("b0", `"residency_domain"`, "81 a1", `"x"`, "c0"), wire.KVCleared, wire.ResidencyUnknown},
		{"residency nil, positional", mpb("94 01", "a6", `"device"`, "c0", "92 01", "a7", `"cleared"`), wire.KVCleared, wire.ResidencyUnknown},
		{"unknown unit variant", withData("ac", `"tier_cleared"`), wire.KVUnknown, ""},
		{"unknown variant", withData("81", "a5", `"moved"`, "80"), wire.KVUnknown, ""},
		{"unknown variant with nested data", withData("81", "b2", `"hybrid_keys_stored"`, "82", "a4", `"keys"`, "92 01 cf ffffffffffffffff", "a3", `"tag"`, "81 a1", `"x"`, "c0"), wire.KVUnknown, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := wire.DecodeRouterEvents(tt.payload, nil)
			if err != nil || len(got) != 1 || got[0].Kind != tt.kind || got[0].Residency != tt.residency || got[0].EventID != 1 {
				t.Fatalf("%v: %s", err, dump(got))
			}
		})
	}
}

// TestDecodeRouterEventsRejects: each payload is malformed; the error
// names what was wrong, and dst comes back as it was.
func TestDecodeRouterEventsRejects(t *testing.T) {
	// event is a valid KvCacheEvent (cleared) to complete RouterEvents.
	event := mpb("a5", `"event"`, "82", "a8", `"event_id"`, "01", "a4", `"data"`, "a7", `"cleared"`)
	named := func(field ...string) []byte { // a RouterEvent map: worker_id, one more field, event
		b := append([]byte{0x83}, mpb("a9", `"worker_id"`, "01")...)
		b = append(b, mpb(field...)...)
		return append(b, event...)
	}
	withData := func(data ...string) []byte { // a RouterEvent whose data is given
		return mpb(append([]string{"82", "a9", `"worker_id"`, "01", "a5", `"event"`, "82", "a8", `"event_id"`, "01", "a4", `"data"`}, data...)...)
	}
	tests := []struct {
		name    string
		payload []byte
		want    string
	}{
		{"empty", nil, "empty"},
		{"nil", []byte{0xc0}, "neither"},
		{"integer", []byte{0x07}, "neither"},
		{"string", mpb("a7", `"cleared"`), "neither"},
		{"tier integer", named("ac", `"storage_tier"`, "01"), "storage_tier: msgpack: 0x01 is not a string"},
		{"tier nil", named("ac", `"storage_tier"`, "c0"), "storage_tier"},
		{"tier empty", named("ac", `"storage_tier"`, "a0"), "storage_tier: msgpack: empty"},
		{"tier missing, positional", mpb("92 01", "92 01", "a7", `"cleared"`), "storage_tier"},
		{"worker twice", named("a9", `"worker_id"`, "02"), "worker_id given twice"},
		{"no worker", mpb("81", "a5", `"event"`, "82", "a8", `"event_id"`, "01", "a4", `"data"`, "a7", `"cleared"`), "no worker_id"},
		{"no event", mpb("81", "a9", `"worker_id"`, "01"), "no event"},
		{"no event, positional", mpb("92 01", "a6", `"device"`), "no event"},
		{"negative worker as float", mpb("92", "cb 0000000000000000", "a6", `"device"`), "worker_id"},
		// Ids are u64 upstream: a negative one would read as a huge id (an
		// event_id of -1 would take the rank's cursor to the top for good).
		{"negative worker", mpb("92", "ff", "a6", `"device"`), "worker_id"},
		{"negative event_id", mpb("82", "a9", `"worker_id"`, "01", "a5", `"event"`, "82", "a8", `"event_id"`, "ff", "a4", `"data"`, "a7", `"cleared"`), "event_id"},
		{"no event_id", mpb("82", "a9", `"worker_id"`, "01", "a5", `"event"`, "81", "a4", `"data"`, "a7", `"cleared"`), "no event_id"},
		{"no data", mpb("82", "a9", `"worker_id"`, "01", "a5", `"event"`, "81", "a8", `"event_id"`, "01"), "no data"},
		{"dp_rank past u32", mpb("93 01", "a6", `"device"`, "93 01", "a7", `"cleared"`, "cf 0000000100000000"), "dp_rank"},
		{"dp_rank negative", mpb("93 01", "a6", `"device"`, "93 01", "a7", `"cleared"`, "ff"), "dp_rank"},
		{"dp_rank nil", mpb("93 01", "a6", `"device"`, "93 01", "a7", `"cleared"`, "c0"), "dp_rank"},
		{"stored as a unit variant", withData("a6", `"stored"`), `unit variant "stored"`},
		{"cleared with an empty map", withData("81", "a7", `"cleared"`, "80"), "cleared: msgpack: 0x80 where nil is required"},
		{"two variants", withData("82", "a7", `"cleared"`, "c0", "a7", `"removed"`, "c0"), "map of one entry"},
		{"data integer", withData("05"), "0x05 is not a map or an array"},
		{"no blocks", withData("81", "a6", `"stored"`, "81", "ab", `"parent_hash"`, "c0"), "stored: msgpack: no blocks"},
		{"blocks a map", withData("81", "a6", `"stored"`, "81", "a6", `"blocks"`, "80"), "blocks: msgpack: a map"},
		{"start past u32", withData("81", "a6", `"stored"`, "82", "ae", `"start_position"`, "cf 0000000100000000", "a6", `"blocks"`, "90"), "start_position"},
		{"start negative", withData("81", "a6", `"stored"`, "82", "ae", `"start_position"`, "ff", "a6", `"blocks"`, "90"), "start_position"},
		{"parent a string", withData("81", "a6", `"stored"`, "82", "ab", `"parent_hash"`, "a1", `"x"`, "a6", `"blocks"`, "90"), "parent_hash"},
		{"no tokens_hash", withData("81", "a6", `"stored"`, "81", "a6", `"blocks"`, "91", "81", "aa", `"block_hash"`, "01"), "block 0: msgpack: no tokens_hash"},
		{"no block_hash", withData("81", "a6", `"stored"`, "81", "a6", `"blocks"`, "91", "81", "a1", `"x"`, "01"), "no block_hash"},
		{"hash a float", withData("81", "a6", `"stored"`, "81", "a6", `"blocks"`, "91", "92", "cb 0000000000000000", "01"), "block_hash"},
		{"mm_extra_info an integer", withData("81", "a6", `"stored"`, "81", "a6", `"blocks"`, "91", "93 01 02 03"), "mm_extra_info"},
		{"no block_hashes", withData("81", "a7", `"removed"`, "80"), "no block_hashes"},
		{"block_hashes nil", withData("81", "a7", `"removed"`, "81", "ac", `"block_hashes"`, "c0"), "block_hashes"},
		{"removed hash nil", withData("81", "a7", `"removed"`, "91", "91 c0"), "hash 0"},
		{"huge array", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}, "container"},
		{"batch element an integer", append(append([]byte{0x92}, namedClearedNil...), 0x01), "event 1: msgpack: 0x01 is not a map or an array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prior := []wire.RouterEvent{{WorkerID: 99}}
			got, err := wire.DecodeRouterEvents(tt.payload, prior)
			if err == nil {
				t.Fatalf("decoded %s", dump(got))
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to say %q", err, tt.want)
			}
			if len(got) != 1 || got[0].WorkerID != 99 {
				t.Errorf("dst came back as %s", dump(got))
			}
		})
	}
}

// TestDecodeRouterEventsTruncated: every strict prefix of every fixture is
// an error (and none panics). Bytes after the payload's value are ignored,
// as Dynamo's decoder reads one value from the front of the slice: every
// fixture with bytes appended decodes as it does alone.
func TestDecodeRouterEventsTruncated(t *testing.T) {
	for _, tt := range kvFixtures() {
		for i := range len(tt.payload) {
			if got, err := wire.DecodeRouterEvents(tt.payload[:i], nil); err == nil {
				t.Errorf("%s: %d of %d bytes decoded as %s", tt.name, i, len(tt.payload), dump(got))
			}
		}
		for _, tail := range [][]byte{{0xc0}, {0xc1, 0xff}, posRemoved} {
			got, err := wire.DecodeRouterEvents(append(bytes.Clone(tt.payload), tail...), nil)
			if err != nil || !reflect.DeepEqual(got, append([]wire.RouterEvent(nil), tt.want...)) {
				t.Errorf("%s with % x appended: %s %v", tt.name, tail, dump(got), err)
			}
		}
	}
}

func storedN(n int) wire.RouterEvent {
	ev := wire.RouterEvent{WorkerID: 1, Kind: wire.KVStored, Blocks: make([]wire.StoredBlock, n)}
	for i := range ev.Blocks {
		ev.Blocks[i] = wire.StoredBlock{BlockHash: uint64(i) | 1<<63, TokensHash: uint64(i)}
	}
	return ev
}

func removedN(n int) wire.RouterEvent {
	ev := wire.RouterEvent{WorkerID: 1, Kind: wire.KVRemoved, Removed: make([]uint64, n)}
	for i := range ev.Removed {
		ev.Removed[i] = uint64(i)
	}
	return ev
}

// batchOf writes events as one batch payload: an array of named events.
func batchOf(events ...wire.RouterEvent) []byte {
	b := []byte{0xdc, 0, 0}
	binary.BigEndian.PutUint16(b[1:], uint16(len(events)))
	for _, e := range events {
		b = append(b, wire.EncodeRouterEvent(e)...)
	}
	return b
}

// TestDecodeRouterEventsBounds: each bound holds at its limit and refuses
// one past it.
func TestDecodeRouterEventsBounds(t *testing.T) {
	cleared := wire.RouterEvent{WorkerID: 1, Kind: wire.KVCleared}
	events := func(n int) []wire.RouterEvent {
		out := make([]wire.RouterEvent, n)
		for i := range out {
			out[i] = cleared
		}
		return out
	}
	// A payload of exactly n bytes: a cleared event with an unknown field
	// of padding bytes.
	sized := func(n int) []byte {
		enc := wire.EncodeRouterEvent(cleared)
		b := append([]byte{0x84}, enc[1:]...) // one more field
		b = append(b, mpb("a3", `"pad"`, "c6")...)
		pad := n - len(b) - 4
		b = binary.BigEndian.AppendUint32(b, uint32(pad))
		return append(b, make([]byte, pad)...)
	}
	nest := func(depth int) []byte { // an unknown field nested depth arrays deep
		enc := wire.EncodeRouterEvent(cleared)
		b := append([]byte{0x84}, enc[1:]...)
		b = append(b, mpb("a3", `"dee"`)...)
		b = append(b, bytes.Repeat([]byte{0x91}, depth)...)
		return append(b, 0x01)
	}
	tests := []struct {
		name    string
		payload []byte
		events  int
		want    string // "" when it decodes
	}{
		// The frame cap is the bound, not upstream's batch sizes: an event
		// of more blocks than a batch holds comes alone (a long prompt's).
		{"128 events", batchOf(events(128)...), 128, ""},
		{"129 events", batchOf(events(129)...), 129, ""},
		{"10000 events", batchOf(events(10000)...), 10000, ""},
		{"8193 stored blocks", wire.EncodeRouterEvent(storedN(8193)), 1, ""},
		{"stored blocks of a 300k-token prompt", wire.EncodeRouterEvent(storedN(300_000 / 16)), 1, ""},
		{"65536 removed hashes", wire.EncodeRouterEvent(removedN(65536)), 1, ""},
		{"8193 blocks over a batch", batchOf(storedN(4096), cleared, removedN(4097)), 3, ""},
		// A count the payload cannot hold, at the fewest bytes a valid
		// element takes, is refused before anything is allocated for it.
		{"more blocks than bytes", mpb("93", "01", "a1", `"x"`, "92", "01", "81", "a6", `"stored"`, "92", "c0", "dc", "0004", "920102", "920102", "920102"), 0,
			"4 elements cannot fit in the 9 bytes left"},
		{"more events than bytes", append(mpb("dc", "0014"), append(wire.EncodeRouterEvent(cleared), wire.EncodeRouterEvent(cleared)...)...), 0,
			"batch: msgpack: 20 elements cannot fit"},
		{"payload of 1 MiB", sized(wire.MaxKVEventsPayloadBytes), 1, ""},
		{"payload of 1 MiB and a byte", sized(wire.MaxKVEventsPayloadBytes + 1), 0, "payload of 1048577 bytes; at most 1048576"},
		{"unknown field 32 deep", nest(32), 1, ""},
		{"unknown field 33 deep", nest(33), 0, "nesting deeper than 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := wire.DecodeRouterEvents(tt.payload, nil)
			if tt.want == "" {
				if err != nil || len(got) != tt.events {
					t.Fatalf("%d events, %v", len(got), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to say %q", err, tt.want)
			}
		})
	}
}

func randomEvent(r *rand.Rand) wire.RouterEvent {
	tiers := []string{wire.TierDevice, wire.TierHostPinned, wire.TierDisk, wire.TierExternal, "g4ssd"}
	domains := []string{"", wire.ResidencyWorker, wire.ResidencyCacheOwner}
	ev := wire.RouterEvent{
		WorkerID:    r.Uint64(),
		StorageTier: tiers[r.IntN(len(tiers))],
		Residency:   domains[r.IntN(len(domains))],
		EventID:     r.Uint64() >> r.IntN(64),
		DPRank:      r.Uint32() >> r.IntN(32),
	}
	switch r.IntN(3) {
	case 0:
		ev.Kind = wire.KVStored
		if r.IntN(2) == 0 {
			ev.ParentHash = u64(r.Uint64())
		}
		if r.IntN(2) == 0 {
			ev.StartPosition = u32p(r.Uint32() >> r.IntN(32))
		}
		for range r.IntN(20) {
			ev.Blocks = append(ev.Blocks, wire.StoredBlock{BlockHash: r.Uint64(), TokensHash: r.Uint64() >> r.IntN(64), Multimodal: r.IntN(4) == 0})
		}
	case 1:
		ev.Kind = wire.KVRemoved
		for range r.IntN(20) {
			ev.Removed = append(ev.Removed, r.Uint64()>>r.IntN(64))
		}
	default:
		ev.Kind = wire.KVCleared
	}
	return ev
}

// TestRouterEventRoundTrip: what the encoder writes decodes to the event
// it was given, alone and in batches.
func TestRouterEventRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		ev := randomEvent(r)
		got, err := wire.DecodeRouterEvents(wire.EncodeRouterEvent(ev), nil)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if len(got) != 1 || !reflect.DeepEqual(got[0], ev) {
			t.Fatalf("event %d:\n got %s\nwant %s", i, dump(got), dump([]wire.RouterEvent{ev}))
		}
	}
	for i := range 200 {
		batch := make([]wire.RouterEvent, 1+r.IntN(wire.KVBatchEvents))
		for j := range batch {
			batch[j] = randomEvent(r)
		}
		got, err := wire.DecodeRouterEvents(batchOf(batch...), make([]wire.RouterEvent, 0, 4))
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, batch) {
			t.Fatalf("batch %d differs", i)
		}
	}
}

// TestEncodeRouterEventNewFields: residency_domain, start_position and a
// multimodal block, byte for byte.
func TestEncodeRouterEventNewFields(t *testing.T) {
	got := wire.EncodeRouterEvent(wire.RouterEvent{WorkerID: 7, Residency: wire.ResidencyCacheOwner, EventID: 1, Kind: wire.KVStored,
		StartPosition: u32p(16), Blocks: []wire.StoredBlock{{BlockHash: 42, TokensHash: 43, Multimodal: true}}})
	want := mpb("84", "a9", `"worker_id"`, "07", "ac", `"storage_tier"`, "a6", `"device"`,
		"b0", `"residency_domain"`, "ab", `"cache_owner"`, // after storage_tier, as declared
		"a5", `"event"`, "83", "a8", `"event_id"`, "01", "a4", `"data"`, "81", "a6", `"stored"`, "83",
		"ab", `"parent_hash"`, "c0", "ae", `"start_position"`, "10",
		"a6", `"blocks"`, "91", "83", "aa", `"block_hash"`, "2a", "ab", `"tokens_hash"`, "2b",
		"ad", `"mm_extra_info"`, "81", "aa", `"mm_objects"`, "90", // {"mm_objects": []}
		"a7", `"dp_rank"`, "00")
	if !bytes.Equal(got, want) {
		t.Errorf("\n got %x\nwant %x", got, want)
	}
}

// TestDecodeRouterEventsAllocs: with room in dst, a batch allocates each
// stored event's blocks and one slot array for its parents and start
// positions, nothing else.
func TestDecodeRouterEventsAllocs(t *testing.T) {
	ev := storedN(16)
	ev.ParentHash = u64(1 << 63)
	ev.StartPosition = u32p(4)
	ev.Residency = wire.ResidencyWorker
	payload := batchOf(ev, ev, ev, ev, removedN(8), wire.RouterEvent{WorkerID: 1, Kind: wire.KVCleared})
	dst := make([]wire.RouterEvent, 0, 8)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if dst, err = wire.DecodeRouterEvents(payload, dst[:0]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 6 { // 4 block slices, 1 removed slice, 1 slot array
		t.Errorf("%v allocations, want 6", allocs)
	}
}

func BenchmarkDecodeRouterEvents(b *testing.B) {
	ev := storedN(16)
	ev.WorkerID = 0x43710f49c0cff
	ev.EventID = 1 << 20
	ev.ParentHash = u64(0x9e3779b97f4a7c15)
	payload := wire.EncodeRouterEvent(ev)
	dst := make([]wire.RouterEvent, 0, 1)
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		var err error
		if dst, err = wire.DecodeRouterEvents(payload, dst[:0]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func FuzzDecodeRouterEvents(f *testing.F) {
	for _, tt := range kvFixtures() {
		f.Add(tt.payload)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		prior := wire.RouterEvent{WorkerID: 99}
		got, err := wire.DecodeRouterEvents(payload, []wire.RouterEvent{prior})
		if err != nil {
			if len(got) != 1 || !reflect.DeepEqual(got[0], prior) {
				t.Fatalf("on error dst came back as %s", dump(got))
			}
			return
		}
		if !reflect.DeepEqual(got[0], prior) {
			t.Fatal("dst[0] changed")
		}
		events := got[1:]
		if len(events) > max(1, len(payload)/12) { // a cleared event takes 12 bytes at least
			t.Fatalf("%d events from %d bytes", len(events), len(payload))
		}
		blocks := 0
		for _, e := range events {
			blocks += len(e.Blocks) + len(e.Removed)
			if e.StorageTier == "" {
				t.Fatal("empty storage tier")
			}
			switch e.Residency {
			case "", wire.ResidencyWorker, wire.ResidencyCacheOwner, wire.ResidencyUnknown:
			default:
				t.Fatalf("residency %q", e.Residency)
			}
			switch e.Kind {
			case wire.KVStored, wire.KVRemoved, wire.KVCleared:
			case wire.KVUnknown:
				if len(e.Blocks)+len(e.Removed) > 0 || e.ParentHash != nil || e.StartPosition != nil {
					t.Fatalf("an event of an unknown kind kept data: %s", dump([]wire.RouterEvent{e}))
				}
			default:
				t.Fatalf("kind %q", e.Kind)
			}
			// What was accepted survives our own encoder.
			again, err := wire.DecodeRouterEvents(wire.EncodeRouterEvent(e), nil)
			if err != nil || len(again) != 1 || !reflect.DeepEqual(again[0], e) {
				t.Fatalf("re-encoded %s: %s %v", dump([]wire.RouterEvent{e}), dump(again), err)
			}
		}
		if blocks > len(payload) { // a removed hash takes a byte at least
			t.Fatalf("%d blocks from %d bytes", blocks, len(payload))
		}
	})
}
