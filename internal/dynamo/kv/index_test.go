package kv_test

import (
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// Events in the tests: tokens hashes are small numbers (1, 2, 3…) so a
// chain reads as its token path; engine hashes are given beside them.

func ph(h uint64) *uint64 { return &h }

func key(w uint64, r uint32) load.Key {
	return load.Key{Namespace: load.NS("dynamo"), WorkerID: w, DPRank: r}
}

// chain is a stored event of worker w rank 0: engine hashes first,
// first+1…, tokens hashes as given.
func chain(w uint64, parent *uint64, first uint64, tokens ...uint64) wire.RouterEvent {
	ev := wire.RouterEvent{WorkerID: w, Kind: wire.KVStored, ParentHash: parent}
	for i, t := range tokens {
		ev.Blocks = append(ev.Blocks, wire.StoredBlock{BlockHash: first + uint64(i), TokensHash: t})
	}
	return ev
}

func removed(w uint64, hashes ...uint64) wire.RouterEvent {
	return wire.RouterEvent{WorkerID: w, Kind: wire.KVRemoved, Removed: hashes}
}

func cleared(w uint64) wire.RouterEvent { return wire.RouterEvent{WorkerID: w, Kind: wire.KVCleared} }

func onRank(ev wire.RouterEvent, r uint32) wire.RouterEvent { ev.DPRank = r; return ev }

func withID(ev wire.RouterEvent, id uint64) wire.RouterEvent { ev.EventID = id; return ev }

// liveWorkers makes workers 1..n live with dp ranks 0..size-1.
func liveWorkers(n int, size uint32) map[fleet.WorkerID]load.LiveWorker {
	live := map[fleet.WorkerID]load.LiveWorker{}
	for w := 1; w <= n; w++ {
		live[fleet.WorkerID{Namespace: "dynamo", InstanceID: uint64(w)}] = load.LiveWorker{DPSize: size}
	}
	return live
}

// feeder applies events with consecutive ids per (subscription, rank); the
// subscription is the worker's id.
type feeder struct {
	ix  *kv.Index
	ids map[load.Key]uint64
}

func newFeeder(ix *kv.Index) *feeder { return &feeder{ix: ix, ids: map[load.Key]uint64{}} }

func (f *feeder) apply(ev wire.RouterEvent) kv.Outcome {
	k := key(ev.WorkerID, ev.DPRank)
	f.ids[k]++
	ev.EventID = f.ids[k]
	return f.ix.Apply(kv.SubscriptionID(ev.WorkerID), load.NS("dynamo"), &ev)
}

func matches(ix *kv.Index, tokens ...uint64) map[load.Key]int {
	got := map[load.Key]int{}
	for _, m := range ix.FindMatches(tokens, nil) {
		if _, dup := got[m.Rank]; dup {
			got[m.Rank] = -1
		}
		got[m.Rank] = m.Blocks
	}
	return got
}

type query struct {
	tokens []uint64
	want   map[load.Key]int
}

func q(want map[load.Key]int, tokens ...uint64) query { return query{tokens, want} }

type shape struct{ nodes, ownerships, ranks int }

func checkIndex(t *testing.T, ix *kv.Index, queries []query, want shape) {
	t.Helper()
	if msg := ix.CheckInvariants(); msg != "" {
		t.Fatal(msg)
	}
	for _, qq := range queries {
		got := matches(ix, qq.tokens...)
		if qq.want == nil {
			qq.want = map[load.Key]int{}
		}
		if !maps.Equal(got, qq.want) {
			t.Errorf("matches %v = %v, want %v", qq.tokens, got, qq.want)
		}
	}
	st := ix.Stats()
	if got := (shape{st.Nodes, st.Ownerships, st.Ranks}); got != want {
		t.Errorf("nodes, ownerships, ranks = %+v, want %+v", got, want)
	}
}

var accepted = kv.Outcome{Result: kv.ResultAccepted}

func TestIndexStoredRemovedCleared(t *testing.T) {
	t.Parallel()
	w1, w2, w1r1 := key(1, 0), key(2, 0), key(1, 1)
	cases := []struct {
		name    string
		events  []wire.RouterEvent
		want    []kv.Outcome // accepted when nil
		queries []query
		shape   shape
	}{{
		name:   "one chain",
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2, 3)},
		queries: []query{
			q(map[load.Key]int{w1: 3}, 1, 2, 3, 4),
			q(map[load.Key]int{w1: 3}, 1, 2, 3),
			q(map[load.Key]int{w1: 2}, 1, 2),
			q(map[load.Key]int{w1: 2}, 1, 2, 4),
			q(nil, 2, 3),
			q(nil),
		},
		shape: shape{3, 3, 1},
	}, {
		name:   "a chain in two events",
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2), chain(1, ph(11), 12, 3)},
		queries: []query{
			q(map[load.Key]int{w1: 3}, 1, 2, 3),
		},
		shape: shape{3, 3, 1},
	}, {
		name:   "branching prefixes shared by two workers",
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2, 3), chain(2, nil, 20, 1, 2, 4, 5)},
		queries: []query{
			q(map[load.Key]int{w1: 3, w2: 2}, 1, 2, 3),
			q(map[load.Key]int{w1: 2, w2: 4}, 1, 2, 4, 5, 6),
			q(map[load.Key]int{w1: 1, w2: 1}, 1, 3),
		},
		shape: shape{5, 7, 2},
	}, {
		name:   "dp ranks of one worker are apart",
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2), onRank(chain(1, nil, 10, 1), 1)},
		queries: []query{
			q(map[load.Key]int{w1: 2, w1r1: 1}, 1, 2),
		},
		shape: shape{2, 3, 2},
	}, {
		name:   "equal tokens at other places are other nodes",
		events: []wire.RouterEvent{chain(1, nil, 10, 7, 7, 7)},
		queries: []query{
			q(map[load.Key]int{w1: 3}, 7, 7, 7, 7),
			q(map[load.Key]int{w1: 1}, 7, 8),
		},
		shape: shape{3, 3, 1},
	}, {
		// The rank keeps blocks 1, 3 and 4; the node of block 2 stays,
		// without owners, because its children hang from it.
		name:   "removed in the middle of a chain",
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2, 3, 4), chain(2, nil, 20, 1, 2), removed(1, 11)},
		queries: []query{
			q(map[load.Key]int{w1: 1, w2: 2}, 1, 2, 3, 4),
		},
		shape: shape{4, 5, 2},
	}, {
		// Once its children go, the ownerless node goes with them.
		name:   "removed leaves free their ownerless parents",
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2, 3, 4), removed(1, 11), removed(1, 13, 12)},
		queries: []query{
			q(map[load.Key]int{w1: 1}, 1, 2, 3, 4),
		},
		shape: shape{1, 1, 1},
	}, {
		name:   "removed first block leaves no match",
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2, 3), removed(1, 10)},
		queries: []query{
			q(nil, 1, 2, 3),
		},
		shape: shape{3, 2, 1},
	}, {
		name:    "removed everything frees the tree and the rank",
		events:  []wire.RouterEvent{chain(1, nil, 10, 1, 2, 3), removed(1, 12, 10, 11)},
		queries: []query{q(nil, 1, 2, 3)},
		shape:   shape{0, 0, 0},
	}, {
		name:    "removed hashes the rank does not hold",
		events:  []wire.RouterEvent{chain(1, nil, 10, 1), removed(1, 99), removed(2, 10)},
		queries: []query{q(map[load.Key]int{w1: 1}, 1)},
		shape:   shape{1, 1, 1},
	}, {
		name:    "two engine hashes on one node: held until both go",
		events:  []wire.RouterEvent{chain(1, nil, 10, 1), chain(1, nil, 11, 1), removed(1, 10)},
		queries: []query{q(map[load.Key]int{w1: 1}, 1)},
		shape:   shape{1, 1, 1},
	}, {
		name:    "two engine hashes on one node: both removed",
		events:  []wire.RouterEvent{chain(1, nil, 10, 1), chain(1, nil, 11, 1), removed(1, 10), removed(1, 11)},
		queries: []query{q(nil, 1)},
		shape:   shape{0, 0, 0},
	}, {
		// An engine hash names one block: stored again, it is still held
		// once, and the publisher's one removal (it passes on only the
		// removal of the last copy) releases it.
		name:    "one engine hash stored twice: gone after one remove",
		events:  []wire.RouterEvent{chain(1, nil, 10, 1, 2), chain(1, nil, 10, 1), removed(1, 10)},
		queries: []query{q(nil, 1, 2)},
		shape:   shape{2, 1, 1},
	}, {
		name:    "one engine hash stored twice, removed twice",
		events:  []wire.RouterEvent{chain(1, nil, 10, 1), chain(1, nil, 10, 1), removed(1, 10, 10)},
		queries: []query{q(nil, 1)},
		shape:   shape{0, 0, 0},
	}, {
		// The engine holds one block per hash: the newer place wins.
		name:   "an engine hash stored at another place moves",
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2), chain(1, nil, 11, 5)},
		queries: []query{
			q(map[load.Key]int{w1: 1}, 1, 2),
			q(map[load.Key]int{w1: 1}, 5),
		},
		shape: shape{2, 2, 1},
	}, {
		name:   "an engine hash moves, then is removed",
		events: []wire.RouterEvent{chain(1, nil, 10, 1), chain(1, nil, 10, 5), removed(1, 10)},
		shape:  shape{0, 0, 0},
	}, {
		name:   "cleared drops one rank only",
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2), onRank(chain(1, nil, 10, 1), 1), chain(2, nil, 20, 1, 2, 3), cleared(1)},
		queries: []query{
			q(map[load.Key]int{w1r1: 1, w2: 3}, 1, 2, 3),
		},
		shape: shape{3, 4, 2},
	}, {
		name:    "cleared on an empty rank",
		events:  []wire.RouterEvent{cleared(1), chain(1, nil, 10, 1)},
		queries: []query{q(map[load.Key]int{w1: 1}, 1)},
		shape:   shape{1, 1, 1},
	}, {
		name:   "unknown parent drops the chain",
		events: []wire.RouterEvent{chain(1, nil, 10, 1), chain(1, ph(99), 11, 2, 3), chain(2, ph(10), 20, 2)},
		want:   []kv.Outcome{accepted, {Result: kv.ResultUnknownParent}, {Result: kv.ResultUnknownParent}},
		queries: []query{
			q(map[load.Key]int{w1: 1}, 1, 2, 3),
		},
		shape: shape{1, 1, 1},
	}, {
		name: "other tiers are not indexed",
		events: []wire.RouterEvent{
			func() wire.RouterEvent { e := chain(1, nil, 10, 1); e.StorageTier = "host_pinned"; return e }(),
			func() wire.RouterEvent { e := chain(2, nil, 20, 1); e.StorageTier = "device"; return e }(),
			func() wire.RouterEvent { e := removed(2, 20); e.StorageTier = "disk"; return e }(),
		},
		want: []kv.Outcome{{Result: kv.ResultOtherTier}, accepted, {Result: kv.ResultOtherTier}},
		queries: []query{
			q(map[load.Key]int{w2: 1}, 1),
		},
		shape: shape{1, 1, 1},
	}, {
		// Dynamo's indexer applies a clear to the device tier whatever
		// tier the event names (a clear resets the rank in every tier).
		name: "a clear of another tier clears the device tier too",
		events: []wire.RouterEvent{
			chain(1, nil, 10, 1, 2),
			chain(2, nil, 20, 1),
			func() wire.RouterEvent { e := cleared(1); e.StorageTier = "host_pinned"; return e }(),
			func() wire.RouterEvent { e := cleared(2); e.StorageTier = "disk"; return e }(),
		},
		queries: []query{q(nil, 1, 2)},
		shape:   shape{0, 0, 0},
	}, {
		name: "malformed events",
		events: []wire.RouterEvent{
			{WorkerID: 1, Kind: "evicted", Removed: []uint64{1}},
			{WorkerID: 1},
		},
		want:  []kv.Outcome{{Result: kv.ResultMalformed}, {Result: kv.ResultMalformed}},
		shape: shape{0, 0, 0},
	}, {
		name: "events without blocks change nothing",
		events: []wire.RouterEvent{
			chain(1, nil, 10, 1),
			{WorkerID: 1, Kind: wire.KVStored},
			{WorkerID: 1, Kind: wire.KVRemoved},
			{WorkerID: 1, Kind: wire.KVStored, ParentHash: ph(10)},
		},
		queries: []query{q(map[load.Key]int{w1: 1}, 1)},
		shape:   shape{1, 1, 1},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := kv.NewIndex()
			ix.SetLive(liveWorkers(3, 2))
			f := newFeeder(ix)
			for i, ev := range tc.events {
				want := accepted
				if tc.want != nil {
					want = tc.want[i]
				}
				if got := f.apply(ev); got != want {
					t.Fatalf("event %d: %+v, want %+v", i, got, want)
				}
			}
			checkIndex(t, ix, tc.queries, tc.shape)
		})
	}
}

func TestIndexCursors(t *testing.T) {
	t.Parallel()
	w1 := key(1, 0)
	gap := func(res string) kv.Outcome { return kv.Outcome{Result: res, Gap: true} }
	replay := kv.Outcome{Result: kv.ResultReplay}
	type step struct {
		sub  kv.SubscriptionID
		ev   wire.RouterEvent
		want kv.Outcome
	}
	cases := []struct {
		name    string
		steps   []step
		queries []query
		shape   shape
	}{{
		name: "the first event sets the cursor; lower ids are replays",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1), 100), accepted},
			{1, withID(chain(1, ph(10), 11, 2), 101), accepted},
			{1, withID(chain(1, nil, 20, 9), 99), replay},
			{1, withID(removed(1, 10), 1), replay},
		},
		queries: []query{q(map[load.Key]int{w1: 2}, 1, 2)},
		shape:   shape{2, 2, 1},
	}, {
		name: "an equal id with equal content is a replay",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1), 5), accepted},
			{1, withID(removed(1, 10), 6), accepted},
			{1, withID(removed(1, 10), 6), replay},
		},
		shape: shape{0, 0, 0},
	}, {
		// An older publisher numbers a batch alike: each new event of it is
		// taken, a repeat of the last one is not.
		name: "an equal id with other content goes on",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1), 5), accepted},
			{1, withID(chain(1, ph(10), 11, 2), 5), accepted},
			{1, withID(chain(1, ph(11), 12, 3), 5), accepted},
			{1, withID(chain(1, ph(11), 12, 3), 5), replay},
			{1, withID(removed(1, 12), 6), accepted},
		},
		queries: []query{q(map[load.Key]int{w1: 2}, 1, 2, 3)},
		shape:   shape{2, 2, 1},
	}, {
		name: "a gap clears the rank; a chain from the root refills it",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1, 2), 1), accepted},
			{1, withID(chain(1, nil, 20, 5), 3), gap(kv.ResultAccepted)},
		},
		queries: []query{
			q(nil, 1, 2),
			q(map[load.Key]int{w1: 1}, 5),
		},
		shape: shape{1, 1, 1},
	}, {
		name: "after a gap, a chain whose parent was cleared has an unknown parent",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1, 2), 1), accepted},
			{1, withID(chain(1, ph(11), 12, 3), 4), gap(kv.ResultUnknownParent)},
			{1, withID(chain(1, ph(12), 13, 4), 5), kv.Outcome{Result: kv.ResultUnknownParent}},
			{1, withID(chain(1, nil, 10, 1, 2, 3), 6), accepted},
		},
		queries: []query{q(map[load.Key]int{w1: 3}, 1, 2, 3, 4)},
		shape:   shape{3, 3, 1},
	}, {
		name: "a gap spares other ranks",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1), 1), accepted},
			{2, withID(chain(2, nil, 20, 1), 1), accepted},
			{1, withID(onRank(chain(1, nil, 30, 1), 1), 7), accepted},
			{1, withID(removed(1, 99), 9), gap(kv.ResultAccepted)},
		},
		queries: []query{q(map[load.Key]int{key(2, 0): 1, key(1, 1): 1}, 1)},
		shape:   shape{1, 2, 2},
	}, {
		name: "a malformed event does not move the cursor, so the next is a gap",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1), 1), accepted},
			{1, withID(wire.RouterEvent{WorkerID: 1, Kind: "evicted", Removed: []uint64{10}}, 2), kv.Outcome{Result: kv.ResultMalformed}},
			{1, withID(chain(1, nil, 20, 2), 3), gap(kv.ResultAccepted)},
		},
		queries: []query{q(nil, 1), q(map[load.Key]int{w1: 1}, 2)},
		shape:   shape{1, 1, 1},
	}, {
		name: "an event without blocks moves the cursor",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1), 1), accepted},
			{1, withID(wire.RouterEvent{WorkerID: 1, Kind: wire.KVStored}, 2), accepted},
			{1, withID(wire.RouterEvent{WorkerID: 1, Kind: wire.KVRemoved}, 3), accepted},
			{1, withID(chain(1, ph(10), 20, 2), 4), accepted},
		},
		queries: []query{q(map[load.Key]int{w1: 2}, 1, 2)},
		shape:   shape{2, 2, 1},
	}, {
		name: "other-tier events move the cursor",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1), 1), accepted},
			{1, func() wire.RouterEvent { e := withID(chain(1, nil, 50, 9), 2); e.StorageTier = "host_pinned"; return e }(), kv.Outcome{Result: kv.ResultOtherTier}},
			{1, withID(chain(1, ph(10), 11, 2), 3), accepted},
			{1, func() wire.RouterEvent { e := withID(removed(1, 50), 5); e.StorageTier = "disk"; return e }(), gap(kv.ResultOtherTier)},
		},
		queries: []query{q(nil, 1, 2)},
		shape:   shape{0, 0, 0},
	}, {
		name: "events of a kind or domain the router does not read move the cursor",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1), 1), accepted},
			{1, withID(wire.RouterEvent{WorkerID: 1, Kind: wire.KVUnknown}, 2), kv.Outcome{Result: kv.ResultUnsupported}},
			{1, func() wire.RouterEvent {
				e := withID(chain(1, nil, 50, 9), 3)
				e.Residency = wire.ResidencyUnknown
				return e
			}(), kv.Outcome{Result: kv.ResultUnsupported}},
			{1, withID(chain(1, ph(10), 11, 2), 4), accepted},
		},
		queries: []query{q(map[load.Key]int{w1: 2}, 1, 2)},
		shape:   shape{2, 2, 1},
	}, {
		name: "cursors belong to the subscription",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1), 10), accepted},
			{2, withID(chain(1, ph(10), 11, 2), 1), accepted},
			{2, withID(chain(1, ph(11), 12, 3), 2), accepted},
			{1, withID(chain(1, ph(12), 13, 4), 11), accepted},
			{1, withID(chain(1, ph(12), 13, 4), 11), replay},
		},
		queries: []query{q(map[load.Key]int{w1: 4}, 1, 2, 3, 4)},
		shape:   shape{4, 4, 1},
	}, {
		name: "cleared moves the cursor like any event",
		steps: []step{
			{1, withID(chain(1, nil, 10, 1), 1), accepted},
			{1, withID(cleared(1), 2), accepted},
			{1, withID(chain(1, nil, 10, 1), 3), accepted},
			{1, withID(cleared(1), 2), replay},
		},
		queries: []query{q(map[load.Key]int{w1: 1}, 1)},
		shape:   shape{1, 1, 1},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := kv.NewIndex()
			ix.SetLive(liveWorkers(2, 2))
			for i, s := range tc.steps {
				if got := ix.Apply(s.sub, load.NS("dynamo"), &s.ev); got != s.want {
					t.Fatalf("step %d: %+v, want %+v", i, got, s.want)
				}
			}
			checkIndex(t, ix, tc.queries, tc.shape)
		})
	}
}

func TestIndexGapCounted(t *testing.T) {
	t.Parallel()
	ix := kv.NewIndex()
	ix.SetLive(liveWorkers(1, 1))
	for _, id := range []uint64{1, 2, 4, 5, 9} {
		ev := withID(chain(1, nil, id, 1), id)
		ix.Apply(1, load.NS("dynamo"), &ev)
	}
	if st := ix.Stats(); st.Gaps != 2 {
		t.Fatalf("gaps %d, want 2", st.Gaps)
	}
}

func TestIndexIdentityGate(t *testing.T) {
	t.Parallel()
	ix := kv.NewIndex()
	mismatch := kv.Outcome{Result: kv.ResultIdentityMismatch}
	ev := chain(1, nil, 10, 1)
	if got := ix.Apply(1, load.NS("dynamo"), &ev); got != mismatch {
		t.Fatalf("before SetLive: %+v", got)
	}
	// Worker 1 declares ranks 4..5; worker 2 no size (one rank, 0).
	ix.SetLive(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPStartRank: 4, DPSize: 2}, {Namespace: "dynamo", InstanceID: 2}: {}})
	for _, tc := range []struct {
		ev   wire.RouterEvent
		want kv.Outcome
	}{
		{onRank(chain(1, nil, 10, 1), 3), mismatch},
		{onRank(chain(1, nil, 10, 1), 4), accepted},
		{onRank(chain(1, nil, 10, 1), 5), accepted},
		{onRank(chain(1, nil, 10, 1), 6), mismatch},
		{onRank(chain(2, nil, 10, 1), 0), accepted},
		{onRank(chain(2, nil, 10, 1), 1), mismatch},
		{onRank(chain(3, nil, 10, 1), 0), mismatch},
		{onRank(chain(3, nil, 10, 1), 0), mismatch},
	} {
		ev := withID(tc.ev, 1)
		if got := ix.Apply(kv.SubscriptionID(ev.WorkerID), load.NS("dynamo"), &ev); got != tc.want {
			t.Errorf("worker %d rank %d: %+v, want %+v", ev.WorkerID, ev.DPRank, got, tc.want)
		}
	}
	checkIndex(t, ix, []query{q(map[load.Key]int{key(1, 4): 1, key(1, 5): 1, key(2, 0): 1}, 1)}, shape{1, 3, 3})
	if st := ix.Stats(); st.Cursors != 3 || st.Subscriptions != 2 {
		t.Fatalf("cursors %d subscriptions %d, want 3 and 2", st.Cursors, st.Subscriptions)
	}

	// Worker 1 shrinks to rank 5 only; worker 2 leaves: their blocks and
	// cursors go in the same call.
	ix.SetLive(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPStartRank: 5, DPSize: 1}})
	checkIndex(t, ix, []query{q(map[load.Key]int{key(1, 5): 1}, 1)}, shape{1, 1, 1})
	if st := ix.Stats(); st.Cursors != 1 {
		t.Fatalf("cursors %d, want 1", st.Cursors)
	}
	ev = withID(chain(2, nil, 10, 1), 2)
	if got := ix.Apply(2, load.NS("dynamo"), &ev); got != mismatch {
		t.Fatalf("departed worker: %+v", got)
	}
	// Back again, its first event sets a new cursor: no gap, no replay.
	ix.SetLive(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPStartRank: 5, DPSize: 1}, {Namespace: "dynamo", InstanceID: 2}: {}})
	ev = withID(chain(2, nil, 10, 1), 1)
	if got := ix.Apply(2, load.NS("dynamo"), &ev); got != accepted {
		t.Fatalf("returned worker: %+v", got)
	}
	checkIndex(t, ix, []query{q(map[load.Key]int{key(1, 5): 1, key(2, 0): 1}, 1)}, shape{1, 2, 2})
}

func TestIndexClearSubscription(t *testing.T) {
	t.Parallel()
	ix := kv.NewIndex()
	ix.SetLive(liveWorkers(3, 2))
	steps := []struct {
		sub kv.SubscriptionID
		ev  wire.RouterEvent
	}{
		{1, withID(chain(1, nil, 10, 1, 2), 1)},
		{1, withID(onRank(chain(1, nil, 10, 1), 1), 1)},
		{2, withID(chain(2, nil, 20, 1, 2, 3), 1)},
		{2, withID(chain(3, nil, 30, 1), 1)},
	}
	for _, s := range steps {
		if got := ix.Apply(s.sub, load.NS("dynamo"), &s.ev); got != accepted {
			t.Fatalf("%+v", got)
		}
	}
	ix.ClearSubscription(1)
	ix.ClearSubscription(99)
	checkIndex(t, ix, []query{q(map[load.Key]int{key(2, 0): 3, key(3, 0): 1}, 1, 2, 3)}, shape{3, 4, 2})
	if st := ix.Stats(); st.Cursors != 2 || st.Subscriptions != 1 {
		t.Fatalf("cursors %d subscriptions %d, want 2 and 1", st.Cursors, st.Subscriptions)
	}
	// Its cursors went too: an old id starts afresh instead of a replay.
	ev := withID(chain(1, nil, 10, 1), 1)
	if got := ix.Apply(1, load.NS("dynamo"), &ev); got != accepted {
		t.Fatalf("after ClearSubscription: %+v", got)
	}
	ix.ClearSubscription(2)
	checkIndex(t, ix, []query{q(map[load.Key]int{key(1, 0): 1}, 1, 2, 3)}, shape{1, 1, 1})
}

// TestIndexClearRanks: an aged subscription's ranks lose their blocks but
// its cursors stay, so that when it connects again a replay is skipped and
// the events it missed are counted as a gap.
func TestIndexClearRanks(t *testing.T) {
	t.Parallel()
	ix := kv.NewIndex()
	ix.SetLive(liveWorkers(3, 2))
	parent := uint64(11)
	for _, ev := range []wire.RouterEvent{withID(chain(1, nil, 10, 1, 2), 1), withID(chain(1, &parent, 12, 3), 2)} {
		if got := ix.Apply(1, load.NS("dynamo"), &ev); got != accepted {
			t.Fatalf("%+v", got)
		}
	}
	ix.ClearRanks(1)
	ix.ClearRanks(99)
	checkIndex(t, ix, []query{q(map[load.Key]int{}, 1, 2, 3)}, shape{0, 0, 0})
	if st := ix.Stats(); st.Cursors != 1 || st.Subscriptions != 1 {
		t.Fatalf("cursors %d subscriptions %d, want 1 and 1", st.Cursors, st.Subscriptions)
	}
	replay := withID(chain(1, nil, 10, 1, 2), 1)
	if got := ix.Apply(1, load.NS("dynamo"), &replay); got.Result != kv.ResultReplay {
		t.Fatalf("a replay after ageing: %+v", got)
	}
	later := withID(chain(1, nil, 10, 1), 5)
	if got := ix.Apply(1, load.NS("dynamo"), &later); got.Result != kv.ResultAccepted || !got.Gap {
		t.Fatalf("the first event after missed ones: %+v, want accepted after a gap", got)
	}
}

// TestIndexBatchNumberedAlike: an older worker-side publisher numbers
// every event of one engine batch alike and sends each in a message of its
// own: an event with the cursor's id and new content is the batch going
// on, taken; one whose content was taken under that id is a resend,
// skipped, wherever it comes; an older id is a resend whatever its content.
func TestIndexBatchNumberedAlike(t *testing.T) {
	t.Parallel()
	ix := kv.NewIndex()
	ix.SetLive(liveWorkers(3, 2))
	replay := kv.Outcome{Result: kv.ResultReplay}
	a, b := withID(chain(1, nil, 10, 1, 2), 1), withID(chain(1, nil, 20, 5, 6), 1)
	for _, ev := range []*wire.RouterEvent{&a, &b} {
		if got := ix.Apply(1, load.NS("dynamo"), ev); got != accepted {
			t.Fatalf("batch 1 event %+v: %+v, want accepted", ev, got)
		}
	}
	for _, ev := range []*wire.RouterEvent{&a, &b} {
		if got := ix.Apply(1, load.NS("dynamo"), ev); got != replay {
			t.Fatalf("batch 1 event received again: %+v, want a replay", got)
		}
	}
	parent := uint64(11)
	batch := []wire.RouterEvent{withID(chain(1, &parent, 12, 3), 2), withID(chain(1, &parent, 14, 4), 2)}
	for i := range batch {
		if got := ix.Apply(1, load.NS("dynamo"), &batch[i]); got != accepted {
			t.Fatalf("batch 2 event %d: %+v", i, got)
		}
	}
	for i := range batch {
		if got := ix.Apply(1, load.NS("dynamo"), &batch[i]); got != replay {
			t.Fatalf("batch 2 event %d received again: %+v, want a replay", i, got)
		}
	}
	late := withID(chain(1, nil, 30, 7), 1)
	if got := ix.Apply(1, load.NS("dynamo"), &late); got != replay {
		t.Fatalf("an event of an older id: %+v, want a replay", got)
	}
	checkIndex(t, ix, []query{q(map[load.Key]int{key(1, 0): 3}, 1, 2, 3), q(map[load.Key]int{key(1, 0): 2}, 5, 6)}, shape{6, 6, 1})
}

func TestIndexCaps(t *testing.T) {
	t.Parallel()
	over := kv.Outcome{Result: kv.ResultOverCapacity}
	roomy := kv.Limits{Blocks: 100, PerRank: 100, Ownerships: 100, PerNode: 100, Cursors: 100}
	with := func(f func(*kv.Limits)) kv.Limits { l := roomy; f(&l); return l }
	cases := []struct {
		name    string
		lim     kv.Limits
		events  []wire.RouterEvent
		want    []kv.Outcome
		refused uint64
		queries []query
		shape   shape
	}{{
		name:   "nodes: at the cap",
		lim:    with(func(l *kv.Limits) { l.Blocks = 3 }),
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2, 3), chain(2, nil, 20, 1, 2, 3)},
		want:   []kv.Outcome{accepted, accepted},
		shape:  shape{3, 6, 2},
	}, {
		// Blocks before the refused one stay; the rest of the event goes.
		name:    "nodes: one past",
		lim:     with(func(l *kv.Limits) { l.Blocks = 3 }),
		events:  []wire.RouterEvent{chain(1, nil, 10, 1, 2), chain(1, ph(11), 12, 3, 4, 5), chain(2, nil, 20, 1, 2, 3, 4), chain(1, ph(12), 13, 4)},
		want:    []kv.Outcome{accepted, over, over, over},
		refused: 2 + 1 + 1,
		queries: []query{q(map[load.Key]int{key(1, 0): 3, key(2, 0): 3}, 1, 2, 3, 4, 5)},
		shape:   shape{3, 6, 2},
	}, {
		name:    "nodes: freed nodes make room",
		lim:     with(func(l *kv.Limits) { l.Blocks = 2 }),
		events:  []wire.RouterEvent{chain(1, nil, 10, 1, 2), chain(1, nil, 20, 3), removed(1, 11), chain(1, nil, 20, 3)},
		want:    []kv.Outcome{accepted, over, accepted, accepted},
		refused: 1,
		shape:   shape{2, 2, 1},
	}, {
		name:   "per rank: at the cap",
		lim:    with(func(l *kv.Limits) { l.PerRank = 2 }),
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2), chain(1, nil, 10, 1), chain(2, nil, 20, 1, 2)},
		want:   []kv.Outcome{accepted, accepted, accepted},
		shape:  shape{2, 4, 2},
	}, {
		name:    "per rank: one past",
		lim:     with(func(l *kv.Limits) { l.PerRank = 2 }),
		events:  []wire.RouterEvent{chain(1, nil, 10, 1, 2, 3), chain(1, nil, 20, 1), onRank(chain(1, nil, 10, 1, 2), 1)},
		want:    []kv.Outcome{over, over, accepted},
		refused: 1 + 1,
		queries: []query{q(map[load.Key]int{key(1, 0): 2, key(1, 1): 2}, 1, 2, 3)},
		shape:   shape{2, 4, 2},
	}, {
		name:   "ownerships: at the cap",
		lim:    with(func(l *kv.Limits) { l.Ownerships = 3 }),
		events: []wire.RouterEvent{chain(1, nil, 10, 1, 2), chain(2, nil, 20, 1), chain(2, nil, 21, 1)},
		want:   []kv.Outcome{accepted, accepted, accepted},
		shape:  shape{2, 3, 2},
	}, {
		name:    "ownerships: one past",
		lim:     with(func(l *kv.Limits) { l.Ownerships = 3 }),
		events:  []wire.RouterEvent{chain(1, nil, 10, 1, 2), chain(2, nil, 20, 1, 2), chain(3, nil, 30, 5)},
		want:    []kv.Outcome{accepted, over, over},
		refused: 1 + 1,
		queries: []query{q(map[load.Key]int{key(1, 0): 2, key(2, 0): 1}, 1, 2)},
		shape:   shape{2, 3, 2},
	}, {
		name:   "owners per node: at the cap",
		lim:    with(func(l *kv.Limits) { l.PerNode = 2 }),
		events: []wire.RouterEvent{chain(1, nil, 10, 1), chain(2, nil, 20, 1), chain(2, nil, 21, 1)},
		want:   []kv.Outcome{accepted, accepted, accepted},
		shape:  shape{1, 2, 2},
	}, {
		name:    "owners per node: one past",
		lim:     with(func(l *kv.Limits) { l.PerNode = 2 }),
		events:  []wire.RouterEvent{chain(1, nil, 10, 1, 2), chain(2, nil, 20, 1, 3), chain(3, nil, 30, 1, 2), chain(3, nil, 31, 2)},
		want:    []kv.Outcome{accepted, accepted, over, accepted},
		refused: 2,
		queries: []query{q(map[load.Key]int{key(1, 0): 2, key(2, 0): 1}, 1, 2), q(map[load.Key]int{key(3, 0): 1}, 2)},
		shape:   shape{4, 5, 3},
	}, {
		name:   "cursors: at the cap",
		lim:    with(func(l *kv.Limits) { l.Cursors = 2 }),
		events: []wire.RouterEvent{chain(1, nil, 10, 1), onRank(chain(1, nil, 10, 1), 1), chain(1, nil, 11, 2)},
		want:   []kv.Outcome{accepted, accepted, accepted},
		shape:  shape{2, 3, 2},
	}, {
		name:    "cursors: one past",
		lim:     with(func(l *kv.Limits) { l.Cursors = 2 }),
		events:  []wire.RouterEvent{chain(1, nil, 10, 1), onRank(chain(1, nil, 10, 1), 1), onRank(chain(1, nil, 10, 1), 2)},
		want:    []kv.Outcome{accepted, accepted, over},
		queries: []query{q(map[load.Key]int{key(1, 0): 1, key(1, 1): 1}, 1)},
		shape:   shape{1, 2, 2},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := kv.NewIndexWithLimits(tc.lim)
			ix.SetLive(liveWorkers(3, 3))
			f := newFeeder(ix)
			for i, ev := range tc.events {
				if got := f.apply(ev); got != tc.want[i] {
					t.Fatalf("event %d: %+v, want %+v", i, got, tc.want[i])
				}
			}
			checkIndex(t, ix, tc.queries, tc.shape)
			if st := ix.Stats(); st.RefusedBlocks != tc.refused {
				t.Errorf("refused blocks %d, want %d", st.RefusedBlocks, tc.refused)
			}
		})
	}
}

// TestIndexRealCaps fills the per-rank, per-node and per-subscription caps
// of the real constants.
func TestIndexRealCaps(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fills the real caps")
	}
	t.Run("blocks per rank", func(t *testing.T) {
		t.Parallel()
		ix := kv.NewIndex()
		ix.SetLive(liveWorkers(1, 1))
		tokens := make([]uint64, kv.MaxBlocksPerRank+1)
		for i := range tokens {
			tokens[i] = uint64(i)
		}
		ev := withID(chain(1, nil, 1, tokens...), 1)
		if got := ix.Apply(1, load.NS("dynamo"), &ev); got.Result != kv.ResultOverCapacity {
			t.Fatalf("%+v", got)
		}
		m := ix.FindMatches(tokens, nil)
		if len(m) != 1 || m[0].Blocks != kv.MaxBlocksPerRank {
			t.Fatalf("matches %+v", m)
		}
		if st := ix.Stats(); st.Nodes != kv.MaxBlocksPerRank || st.RefusedBlocks != 1 {
			t.Fatalf("%+v", st)
		}
	})
	t.Run("owners per node and cursors per subscription", func(t *testing.T) {
		t.Parallel()
		ix := kv.NewIndex()
		ix.SetLive(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPSize: kv.MaxOwnersPerNode + 1}})
		for r := range uint32(kv.MaxCursorsPerSubscription) {
			ev := withID(onRank(chain(1, nil, 10, 1), r), 1)
			if got := ix.Apply(1, load.NS("dynamo"), &ev); got != accepted {
				t.Fatalf("rank %d: %+v", r, got)
			}
		}
		ev := withID(onRank(chain(1, nil, 10, 1), kv.MaxCursorsPerSubscription), 1)
		if got := ix.Apply(1, load.NS("dynamo"), &ev); got.Result != kv.ResultOverCapacity {
			t.Fatalf("one cursor past: %+v", got)
		}
		// Through another subscription: the node is full.
		if got := ix.Apply(2, load.NS("dynamo"), &ev); got.Result != kv.ResultOverCapacity {
			t.Fatalf("one owner past: %+v", got)
		}
		if m := ix.FindMatches([]uint64{1}, nil); len(m) != kv.MaxOwnersPerNode {
			t.Fatalf("%d matches", len(m))
		}
		if msg := ix.CheckInvariants(); msg != "" {
			t.Fatal(msg)
		}
	})
}

// TestIndexCompaction drops most owners of a wide tree: the owner arena is
// rewritten and the index stays whole.
func TestIndexCompaction(t *testing.T) {
	t.Parallel()
	ix := kv.NewIndex()
	const ranks, blocks = 16, 8192
	ix.SetLive(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPSize: ranks}})
	tokens := make([]uint64, blocks)
	for i := range tokens {
		tokens[i] = uint64(i) + 1
	}
	for r := range uint32(ranks) {
		ev := withID(onRank(chain(1, nil, 1, tokens...), r), 1)
		ix.Apply(1, load.NS("dynamo"), &ev)
	}
	full := ix.Stats()
	for r := range uint32(ranks - 1) {
		ev := withID(onRank(cleared(1), r), 2)
		ix.Apply(1, load.NS("dynamo"), &ev)
	}
	st := ix.Stats()
	if st.Compactions == 0 || st.Bytes >= full.Bytes || st.Ownerships != blocks {
		t.Fatalf("full %+v, after %+v", full, st)
	}
	checkIndex(t, ix, []query{q(map[load.Key]int{key(1, ranks-1): blocks}, tokens...)}, shape{blocks, blocks, 1})
}

func TestIndexSteadyStateAllocations(t *testing.T) {
	ix := kv.NewIndex()
	ix.SetLive(liveWorkers(2, 1))
	tokens := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	id := uint64(0)
	store, remove := chain(1, nil, 10, tokens...), removed(1, 14, 15, 16, 17)
	other := chain(2, nil, 20, tokens[:6]...)
	ix.Apply(2, load.NS("dynamo"), &other)
	cycle := func() {
		id++
		store.EventID = id
		ix.Apply(1, load.NS("dynamo"), &store)
		id++
		remove.EventID = id
		ix.Apply(1, load.NS("dynamo"), &remove)
	}
	for range 100 {
		cycle()
	}
	if a := testing.AllocsPerRun(100, cycle); a != 0 {
		t.Errorf("Apply: %v allocations per stored and removed event", a)
	}
	dst := make([]kv.Match, 0, 8)
	if a := testing.AllocsPerRun(100, func() { dst = ix.FindMatches(tokens, dst[:0]) }); a != 0 {
		t.Errorf("FindMatches: %v allocations", a)
	}
	got := map[load.Key]int{}
	for _, m := range dst {
		got[m.Rank] = m.Blocks
	}
	if want := map[load.Key]int{key(1, 0): 4, key(2, 0): 6}; !maps.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// TestIndexConcurrent runs writers (one subscription each), readers and
// gate updates together; run it with -race.
func TestIndexConcurrent(t *testing.T) {
	t.Parallel()
	ix := kv.NewIndex()
	const writers, rounds = 4, 300
	ix.SetLive(liveWorkers(writers, 1))
	var wg sync.WaitGroup
	for w := 1; w <= writers; w++ {
		wg.Go(func() {
			id := uint64(0)
			for i := range rounds {
				tokens := []uint64{1, 2, uint64(i%7 + 3), uint64(i%5 + 10)}
				base := uint64(w*1000 + i*10)
				evs := []wire.RouterEvent{chain(uint64(w), nil, base, tokens...), removed(uint64(w), base+2, base+3)}
				if i%50 == 0 {
					evs = append(evs, cleared(uint64(w)))
				}
				for _, ev := range evs {
					id++
					ev.EventID = id
					if got := ix.Apply(kv.SubscriptionID(w), load.NS("dynamo"), &ev); got.Result != kv.ResultAccepted || got.Gap {
						t.Errorf("writer %d: %+v", w, got)
						return
					}
				}
			}
		})
	}
	for range 3 {
		wg.Go(func() {
			var dst []kv.Match
			for i := range rounds * 4 {
				dst = ix.FindMatches([]uint64{1, 2, uint64(i%7 + 3)}, dst[:0])
				for _, m := range dst {
					if m.Blocks < 1 || m.Blocks > 3 {
						t.Errorf("match %+v", m)
						return
					}
				}
				_ = ix.Stats()
			}
		})
	}
	wg.Go(func() {
		for range rounds {
			ix.SetLive(liveWorkers(writers, 1))
		}
	})
	wg.Wait()
	if msg := ix.CheckInvariants(); msg != "" {
		t.Fatal(msg)
	}
	got := matches(ix, 1, 2)
	want := map[load.Key]int{}
	for w := 1; w <= writers; w++ {
		want[key(uint64(w), 0)] = 2
	}
	if !maps.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

func ExampleIndex() {
	ix := kv.NewIndex()
	ix.SetLive(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 7}: {DPSize: 1}})
	ev := wire.RouterEvent{WorkerID: 7, EventID: 1, Kind: wire.KVStored, Blocks: []wire.StoredBlock{
		{BlockHash: 0xa1, TokensHash: 0x11}, {BlockHash: 0xa2, TokensHash: 0x22},
	}}
	fmt.Println(ix.Apply(1, load.NS("dynamo"), &ev).Result)
	for _, m := range ix.FindMatches([]uint64{0x11, 0x22, 0x33}, nil) {
		fmt.Println(m.Rank.WorkerID, m.Rank.DPRank, m.Blocks)
	}
	// Output:
	// accepted
	// 7 0 2
}

// TestIndexResidencyMultimodalStart: cache-owner events and chains that
// start with a multimodal block move the cursor and index nothing; a chain
// reaching a multimodal block is indexed up to it; a chain without a
// parent that does not start at block 0 cannot be placed.
func TestIndexResidencyMultimodalStart(t *testing.T) {
	t.Parallel()
	ix := kv.NewIndex()
	ix.SetLive(liveWorkers(1, 1))
	f := newFeeder(ix)
	owner := chain(1, nil, 100, 1, 2)
	owner.Residency = wire.ResidencyCacheOwner
	if out := f.apply(owner); out != (kv.Outcome{Result: kv.ResultCacheOwner}) {
		t.Errorf("cache owner: %+v", out)
	}
	worker := chain(1, nil, 110, 1, 2)
	worker.Residency = wire.ResidencyWorker
	if out := f.apply(worker); out != accepted {
		t.Errorf("worker residency: %+v", out)
	}
	mmFirst := chain(1, nil, 200, 7, 8)
	mmFirst.Blocks[0].Multimodal = true
	if out := f.apply(mmFirst); out != (kv.Outcome{Result: kv.ResultMultimodal}) {
		t.Errorf("multimodal first block: %+v", out)
	}
	mmLater := chain(1, ph(111), 300, 3, 4, 5)
	mmLater.Blocks[1].Multimodal = true
	if out := f.apply(mmLater); out != accepted {
		t.Errorf("multimodal later block: %+v", out)
	}
	start := uint32(3)
	offset := chain(1, nil, 400, 9)
	offset.StartPosition = &start
	if out := f.apply(offset); out != (kv.Outcome{Result: kv.ResultUnknownParent}) {
		t.Errorf("a chain starting at block 3 without a parent: %+v", out)
	}
	zero := uint32(0)
	root := chain(1, nil, 500, 6)
	root.StartPosition = &zero
	if out := f.apply(root); out != accepted {
		t.Errorf("a chain starting at block 0: %+v", out)
	}
	// No gap was seen: every event above moved the cursor.
	checkIndex(t, ix, []query{
		q(map[load.Key]int{key(1, 0): 3}, 1, 2, 3, 4, 5),
		q(nil, 7, 8),
		q(map[load.Key]int{key(1, 0): 1}, 6),
	}, shape{4, 4, 1})
}
