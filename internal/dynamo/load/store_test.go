package load_test

import (
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
)

var t0 = time.Unix(1_800_000_000, 0)

func u64(v uint64) *uint64 { return &v }

func sample(worker uint64, rank uint32, pid, seq uint64, decode uint64) load.Sample {
	return load.Sample{Load: wire.ActiveLoad{WorkerID: worker, DPRank: rank, ActiveDecodeBlocks: u64(decode)}, Namespace: load.NS("dynamo"), PublisherID: pid, Sequence: seq, ReceivedAt: t0}
}

// key is rank of worker in namespace dynamo.
func key(worker uint64, rank uint32) load.Key {
	return load.Key{Namespace: load.NS("dynamo"), WorkerID: worker, DPRank: rank}
}

func TestStoreGatesAndDedupe(t *testing.T) {
	t.Parallel()
	m := telemetry.NewLoadMetrics(nil)
	s := load.NewStore(3*time.Second, load.Gauges{M: m})
	s.SetClock(func() time.Time { return t0.Add(time.Second) })
	if r := s.Apply(sample(1, 0, 7, 1, 10)); r != wire.ResultIdentityMismatch {
		t.Fatalf("sample before the gate: %q", r)
	}
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPStartRank: 2, DPSize: 2}})
	for _, tt := range []struct {
		s    load.Sample
		want string
	}{
		{sample(1, 2, 7, 1, 10), ""},
		{sample(1, 3, 7, 2, 11), ""},
		{sample(1, 4, 7, 3, 12), ""},                          // rank outside 2..3: the worker is live
		{sample(2, 0, 7, 4, 12), wire.ResultIdentityMismatch}, // not a live worker
		{sample(1, 2, 7, 1, 99), wire.ResultDuplicate},        // same publisher, old sequence
		{sample(1, 2, 8, 0, 20), ""},                          // a restarted publisher replaces it
	} {
		if got := s.Apply(tt.s); got != tt.want {
			t.Errorf("apply %+v: %q, want %q", tt.s, got, tt.want)
		}
	}
	got, ok := s.FreshDefault(key(1, 2))
	if !ok || *got.Load.ActiveDecodeBlocks != 20 || got.PublisherID != 8 {
		t.Fatalf("fresh %+v %v", got, ok)
	}
	if v := promtest.ToFloat64(m.ActiveDecodeBlocks.WithLabelValues("dynamo", "1", "2")); v != 20 {
		t.Errorf("gauge %v", v)
	}
	if promtest.CollectAndCount(m.KVUsedBlocks) != 0 {
		t.Error("a nil field made a series")
	}
	if _, ok := s.Fresh(key(1, 2), 500*time.Millisecond); ok {
		t.Error("a 1 s old sample is fresh within 500 ms")
	}
	// Dropping a publisher drops its samples and their series.
	s.DropPublisher(8)
	if _, ok := s.Latest(key(1, 2)); ok {
		t.Error("sample of a dropped publisher kept")
	}
	if _, ok := s.Latest(key(1, 3)); !ok {
		t.Error("another publisher's sample dropped")
	}
	// A departed worker: samples and series go with it.
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{})
	if s.Len() != 0 || promtest.CollectAndCount(m.ActiveDecodeBlocks) != 0 {
		t.Errorf("after departure: %d samples, %d series", s.Len(), promtest.CollectAndCount(m.ActiveDecodeBlocks))
	}
}

// TestStoreGateIsTheWorker: the gate admits live workers, whatever rank a
// sample names; only a worker missing from the snapshot is an identity
// mismatch. A worker is its namespace and id: a sample counts for the
// worker of its publisher's namespace, the same id live in another
// namespace is another worker (joining afresh, its own samples and
// series), and each leaves with its own samples only.
func TestStoreGateIsTheWorker(t *testing.T) {
	t.Parallel()
	now := t0
	m := telemetry.NewLoadMetrics(nil)
	s := load.NewStore(3*time.Second, load.Gauges{M: m})
	s.SetClock(func() time.Time { return now })
	in := func(ns string, smp load.Sample) load.Sample { smp.Namespace = load.NS(ns); return smp }
	prod := func(rank uint32) load.Key { return load.Key{Namespace: load.NS("prod"), WorkerID: 1, DPRank: rank} }
	canary := func(rank uint32) load.Key { return load.Key{Namespace: load.NS("canary"), WorkerID: 1, DPRank: rank} }
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "prod", InstanceID: 1}: {DPStartRank: 2, DPSize: 2}})
	for _, rank := range []uint32{0, 2, 9} {
		if r := s.Apply(in("prod", sample(1, rank, 7, uint64(rank)+1, 10+uint64(rank)))); r != "" {
			t.Fatalf("rank %d of a live worker: %q", rank, r)
		}
	}
	if r := s.Apply(in("prod", sample(2, 2, 7, 20, 1))); r != wire.ResultIdentityMismatch {
		t.Fatalf("a worker not in the snapshot: %q", r)
	}
	if r := s.Apply(in("canary", sample(1, 2, 9, 1, 1))); r != wire.ResultIdentityMismatch {
		t.Fatalf("worker 1 of a namespace without one: %q", r)
	}
	if got, ok := s.FreshDefault(prod(9)); !ok || *got.Load.ActiveDecodeBlocks != 19 {
		t.Fatalf("rank 9 = %+v, %v", got, ok)
	}
	if v := promtest.ToFloat64(m.ActiveDecodeBlocks.WithLabelValues("prod", "1", "0")); v != 10 {
		t.Errorf("rank 0 gauge %v", v)
	}
	// The card now declares one rank: the worker is still live, and so are
	// its samples.
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "prod", InstanceID: 1}: {DPStartRank: 2, DPSize: 1}})
	if s.Len() != 3 {
		t.Fatalf("%d samples after the card changed, want 3", s.Len())
	}
	// Another graph runs a worker 1 too: it joins with nothing, and prod's
	// worker keeps what it had.
	now = t0.Add(time.Minute)
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "prod", InstanceID: 1}: {DPStartRank: 2, DPSize: 1}, {Namespace: "canary", InstanceID: 1}: {DPSize: 1}})
	if s.Len() != 3 {
		t.Fatalf("%d samples after canary's worker 1 joined, want prod's 3", s.Len())
	}
	if _, ok := s.Latest(canary(0)); ok {
		t.Fatal("canary's worker 1 has a sample it was never sent")
	}
	s.Read(func(r load.ReadView) {
		if got := r.Since(canary(0)); !got.Equal(now) {
			t.Errorf("canary's accounting starts at +%v, want +%v", got.Sub(t0), now.Sub(t0))
		}
		if got := r.Since(prod(0)); !got.Equal(t0) {
			t.Errorf("prod's accounting moved to +%v by canary's joining", got.Sub(t0))
		}
	})
	if r := s.Apply(in("canary", sample(1, 0, 8, 1, 5))); r != "" {
		t.Fatalf("canary's sample: %q", r)
	}
	if got, _ := s.Latest(prod(0)); *got.Load.ActiveDecodeBlocks != 10 {
		t.Errorf("prod's rank 0 = %d after canary's sample, want 10", *got.Load.ActiveDecodeBlocks)
	}
	if v := promtest.ToFloat64(m.ActiveDecodeBlocks.WithLabelValues("canary", "1", "0")); v != 5 {
		t.Errorf("canary gauge %v", v)
	}
	// Prod's worker leaves: its samples and series go, canary's stay.
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "canary", InstanceID: 1}: {DPSize: 1}})
	if s.Len() != 1 || promtest.CollectAndCount(m.ActiveDecodeBlocks) != 1 {
		t.Fatalf("after prod left: %d samples, %d series", s.Len(), promtest.CollectAndCount(m.ActiveDecodeBlocks))
	}
	if got, ok := s.Latest(canary(0)); !ok || *got.Load.ActiveDecodeBlocks != 5 {
		t.Errorf("canary's sample after prod left: %+v, %v", got, ok)
	}
}

func TestStoreCapacity(t *testing.T) {
	t.Parallel()
	s := load.NewStore(time.Second, nil)
	live := map[fleet.WorkerID]load.LiveWorker{}
	for i := range uint64(load.MaxStoreKeys + 1) {
		live[fleet.WorkerID{Namespace: "dynamo", InstanceID: i}] = load.LiveWorker{DPSize: 1}
	}
	s.SetLiveAndRetain(live)
	for i := range uint64(load.MaxStoreKeys) {
		if r := s.Apply(sample(i, 0, 1, i, 1)); r != "" {
			t.Fatalf("%d: %q", i, r)
		}
	}
	if r := s.Apply(sample(load.MaxStoreKeys, 0, 1, load.MaxStoreKeys, 1)); r != wire.ResultOverCapacity {
		t.Fatalf("past the cap: %q", r)
	}
	if r := s.Apply(sample(5, 0, 2, 0, 3)); r != "" {
		t.Fatalf("update of a held key refused: %q", r)
	}
}

// TestStoreRanksPerWorker: one worker's ranks are bounded by
// MaxRanksPerWorker, so a publisher naming ever new ranks of one worker is
// refused over_capacity there while the other workers' new keys are
// taken; a rank that goes frees its place.
func TestStoreRanksPerWorker(t *testing.T) {
	t.Parallel()
	s := load.NewStore(time.Second, nil)
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{
		{Namespace: "dynamo", InstanceID: 1}: {DPSize: 1}, {Namespace: "dynamo", InstanceID: 2}: {DPSize: 1}})
	for r := range uint32(load.MaxRanksPerWorker) {
		if res := s.Apply(sample(1, r, 7, uint64(r)+1, 1)); res != "" {
			t.Fatalf("rank %d: %q", r, res)
		}
	}
	if res := s.Apply(sample(1, load.MaxRanksPerWorker, 7, load.MaxRanksPerWorker+1, 1)); res != wire.ResultOverCapacity {
		t.Fatalf("a rank past the worker's bound: %q", res)
	}
	if res := s.Apply(sample(1, 3, 7, load.MaxRanksPerWorker+2, 2)); res != "" {
		t.Fatalf("an update of a held rank: %q", res)
	}
	if res := s.Apply(sample(2, 0, 8, 1, 1)); res != "" {
		t.Fatalf("another worker's first rank: %q", res)
	}
	s.DropPublisher(7)
	if res := s.Apply(sample(1, load.MaxRanksPerWorker, 9, 1, 1)); res != "" || s.Len() != 2 {
		t.Fatalf("after its publisher's samples went: %q, %d samples", res, s.Len())
	}
}

// worker1Load makes publisher pid's messages: sequence seq, worker 1's
// rank with decode blocks.
func worker1Load(pid uint64) func(seq uint64, rank uint32, decode uint64) [][]byte {
	return func(seq uint64, rank uint32, decode uint64) [][]byte {
		return wire.EncodeEventMessage("kv_metrics", pid, seq, 0, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 1, DPRank: rank, ActiveDecodeBlocks: u64(decode)}))
	}
}

// worker1Reader is publisher 7's reader into a store whose one live
// worker, 1, has two ranks, and the results it counted.
func worker1Reader() (*load.Store, *load.Reader, map[string]int) {
	s := load.NewStore(time.Hour, nil)
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPSize: 2}})
	results := map[string]int{}
	return s, load.NewReader(7, s, func(res string) { results[res]++ }), results
}

// TestReaderUnappliedIsAGap: a message that was not applied (its
// ActiveLoad unreadable) does not move the cursor, so the next one shows
// the gap and the publisher's samples, which the lost change may have made
// stale, are dropped.
func TestReaderUnappliedIsAGap(t *testing.T) {
	t.Parallel()
	s, r, results := worker1Reader()
	msg := worker1Load(7)
	r.Handle(msg(0, 0, 10), t0)
	r.Handle(wire.EncodeEventMessage("kv_metrics", 7, 1, 0, []byte{0xc1}), t0) // not msgpack
	r.Handle(msg(2, 1, 3), t0)
	if results[wire.ResultMalformed] != 1 || results[telemetry.ResultAccepted] != 2 {
		t.Fatalf("results %v", results)
	}
	if _, ok := s.Latest(key(1, 0)); ok {
		t.Error("rank 0's sample outlived a change that could not be read")
	}
	if got, ok := s.Latest(key(1, 1)); !ok || *got.Load.ActiveDecodeBlocks != 3 {
		t.Errorf("rank 1 = %+v, %v", got, ok)
	}
	// The next change applies as any other.
	r.Handle(msg(3, 0, 4), t0)
	if got, ok := s.Latest(key(1, 0)); !ok || *got.Load.ActiveDecodeBlocks != 4 {
		t.Errorf("rank 0 after = %+v, %v", got, ok)
	}
}

// TestReaderOrder: per-subscription dedupe, and a sequence gap drops the
// publisher's samples before the new one applies.
func TestReaderOrder(t *testing.T) {
	t.Parallel()
	s, r, results := worker1Reader()
	msg := worker1Load(7)
	r.Handle(msg(5, 0, 10), t0)
	r.Handle(msg(6, 1, 11), t0)
	r.Handle(msg(6, 1, 99), t0) // duplicate
	r.Handle(msg(9, 0, 12), t0) // gap: rank 1's sample goes
	if _, ok := s.Latest(key(1, 1)); ok {
		t.Error("a gap kept the publisher's other samples")
	}
	if got, _ := s.Latest(key(1, 0)); *got.Load.ActiveDecodeBlocks != 12 {
		t.Errorf("rank 0 = %+v", got)
	}
	r.Handle(wire.EncodeEventMessage("kv_metrics", 8, 10, 0, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 1})), t0) // another publisher on this socket
	bad := msg(11, 0, 1)
	bad[3][0] = 9
	r.Handle(bad, t0)
	want := map[string]int{telemetry.ResultAccepted: 3, wire.ResultDuplicate: 1, wire.ResultIdentityMismatch: 1, wire.ResultUnknownVersion: 1}
	for k, v := range want {
		if results[k] != v {
			t.Errorf("results %v, want %v", results, want)
			break
		}
	}
}

// TestChangeLog: every stored, dropped or retired sample is in the change
// log, and a reader too far behind is told to read everything again.
func TestChangeLog(t *testing.T) {
	t.Parallel()
	s := load.NewStore(3*time.Second, nil)
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPSize: 2}, {Namespace: "dynamo", InstanceID: 2}: {}})
	changes := func(since uint64) (keys []load.Key, version uint64, ok bool) {
		s.Read(func(r load.ReadView) {
			version = r.Version()
			ok = r.ChangedSince(since, func(k load.Key) { keys = append(keys, k) })
		})
		return keys, version, ok
	}
	_, v0, _ := changes(0)
	s.Apply(sample(1, 1, 7, 1, 10))
	s.Apply(sample(1, 1, 7, 1, 10)) // a duplicate: no change
	s.Apply(sample(2, 0, 8, 1, 10))
	s.DropPublisher(8)
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 2}: {}})
	keys, v1, ok := changes(v0)
	want := []load.Key{key(1, 1), key(2, 0), key(2, 0), key(1, 1)}
	if !ok || v1-v0 != 4 || len(keys) != len(want) {
		t.Fatalf("changes %v (ok %v, %d versions), want %v", keys, ok, v1-v0, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("changes %v, want %v", keys, want)
		}
	}
	if keys, _, ok := changes(v1); !ok || len(keys) != 0 {
		t.Fatalf("no change since the last version: %v %v", keys, ok)
	}
	for i := range 70_000 { // more than the log holds
		s.Apply(sample(2, 0, 9, uint64(i+1), 1))
	}
	if _, _, ok := changes(v1); ok {
		t.Fatal("a reader behind the log was not told")
	}
	if _, _, ok := changes(v1 + 1_000_000); ok {
		t.Fatal("a version from the future was accepted")
	}
}

// TestStoreAccounting: the instant up to which dispatches are accounted
// for follows the last sample, stays put when a sample is dropped for a
// gap, and moves to the present when the publisher's session restarts or
// the worker (re)joins; each move is in the change log.
func TestStoreAccounting(t *testing.T) {
	t.Parallel()
	now := t0
	s := load.NewStore(3*time.Second, nil)
	s.SetClock(func() time.Time { return now })
	k := load.Key{Namespace: load.NS("dynamo"), WorkerID: 1, DPRank: 1}
	since := func() (at time.Time, keys []load.Key) {
		s.Read(func(r load.ReadView) {
			at = r.Since(k)
			r.ChangedSince(0, func(c load.Key) {
				if c == k {
					keys = append(keys, c)
				}
			})
		})
		return at, keys
	}
	check := func(what string, want time.Time, changes int) {
		t.Helper()
		got, keys := since()
		if !got.Equal(want) || len(keys) != changes {
			t.Fatalf("%s: since +%v with %d changes, want +%v with %d", what, got.Sub(t0), len(keys), want.Sub(t0), changes)
		}
	}
	check("unknown worker", time.Time{}, 0)
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPSize: 2}})
	check("joined", t0, 1)

	now = t0.Add(10 * time.Second)
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPSize: 2}, {Namespace: "dynamo", InstanceID: 2}: {}})
	check("still live: its joining stays", t0, 1)

	smp := sample(1, 1, 7, 1, 10)
	smp.ReceivedAt = t0.Add(11 * time.Second)
	s.Apply(smp)
	check("a sample", t0.Add(11*time.Second), 2)
	now = t0.Add(12 * time.Second)
	s.DropPublisher(7)
	check("dropped on a gap: what it answered stays answered", t0.Add(11*time.Second), 3)

	smp.Sequence, smp.ReceivedAt = 2, t0.Add(13*time.Second)
	s.Apply(smp)
	now = t0.Add(15 * time.Second)
	s.ResetPublisher(7)
	check("publisher session restarted", t0.Add(15*time.Second), 5)
	if _, ok := s.Latest(key(1, 1)); ok {
		t.Fatal("the sample survived its publisher's restart")
	}
	smp.Sequence, smp.ReceivedAt = 3, t0.Add(14*time.Second) // an earlier arrival does not move it back
	s.Apply(smp)
	check("older sample", t0.Add(15*time.Second), 6)

	// Dropped on a reconnect, then replaced (its record gone): what it
	// was sent before no longer counts, though its samples were gone.
	smp.Sequence, smp.ReceivedAt = 4, t0.Add(16*time.Second)
	s.Apply(smp)
	check("a sample again", t0.Add(16*time.Second), 7)
	now = t0.Add(17 * time.Second)
	s.DropPublisher(7)
	check("dropped on a reconnect", t0.Add(16*time.Second), 8)
	now = t0.Add(18 * time.Second)
	s.ResetPublisher(7)
	check("replaced after its samples were dropped", t0.Add(18*time.Second), 9)

	now = t0.Add(20 * time.Second)
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 2}: {}})
	check("left", time.Time{}, 9)
	now = t0.Add(30 * time.Second)
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPSize: 2}, {Namespace: "dynamo", InstanceID: 2}: {}})
	check("back: it starts afresh", t0.Add(30*time.Second), 10)
}

// TestStorePublisherLinksBounded: a publisher that names new ranks of its
// worker between sequence gaps (each gap drops its samples, whose keys stay
// linked to it for its leaving) holds at most MaxRanksPerWorker links, not
// one per rank it ever named; its leaving still forgets its samples.
func TestStorePublisherLinksBounded(t *testing.T) {
	t.Parallel()
	s := load.NewStore(time.Hour, nil)
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPSize: 1}})
	rank := uint32(0)
	for range 20 {
		for range load.MaxRanksPerWorker / 2 {
			if res := s.Apply(sample(1, rank, 7, uint64(rank)+1, 1)); res != "" {
				t.Fatalf("rank %d: %q", rank, res)
			}
			rank++
		}
		s.DropPublisher(7) // a gap
	}
	if n := s.PublisherKeys(7); n > load.MaxRanksPerWorker {
		t.Fatalf("publisher 7 links %d keys after naming %d ranks, want at most %d", n, rank, load.MaxRanksPerWorker)
	}
	if res := s.Apply(sample(1, rank, 7, uint64(rank)+1, 1)); res != "" || s.Len() != 1 {
		t.Fatalf("a sample after the gaps: %q, %d held", res, s.Len())
	}
	s.ResetPublisher(7)
	if s.Len() != 0 || s.PublisherKeys(7) != 0 {
		t.Fatalf("after its leaving: %d samples, %d links", s.Len(), s.PublisherKeys(7))
	}
}

// TestReaderRefusedIsNoGap: a message the store refuses for what it says
// (a worker not in the snapshot, as a namespace-scoped publisher such as a
// frontend's router sends about every worker it tracks) was read whole:
// nothing of the stream was missed, so the next message is no gap and the
// publisher's samples of live workers stand.
func TestReaderRefusedIsNoGap(t *testing.T) {
	t.Parallel()
	s, r, results := worker1Reader()
	msg := worker1Load(7)
	r.Handle(msg(0, 0, 10), t0)
	r.Handle(wire.EncodeEventMessage("kv_metrics", 7, 1, 0, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 2, ActiveDecodeBlocks: u64(5)})), t0) // worker 2 is not live
	r.Handle(msg(2, 1, 3), t0)
	if results[wire.ResultIdentityMismatch] != 1 || results[telemetry.ResultAccepted] != 2 {
		t.Fatalf("results %v", results)
	}
	if got, ok := s.Latest(key(1, 0)); !ok || *got.Load.ActiveDecodeBlocks != 10 {
		t.Errorf("rank 0 = %+v, %v: a message refused by the store was taken for a gap", got, ok)
	}
	// A real gap still drops them.
	r.Handle(msg(4, 1, 4), t0)
	if _, ok := s.Latest(key(1, 0)); ok {
		t.Error("a gap after a refused message kept the publisher's other samples")
	}
	// The refused message sent again is refused again, not a duplicate:
	// it was never applied.
	r.Handle(wire.EncodeEventMessage("kv_metrics", 7, 5, 0, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 2})), t0)
	r.Handle(wire.EncodeEventMessage("kv_metrics", 7, 5, 0, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 2})), t0)
	if results[wire.ResultIdentityMismatch] != 3 || results[wire.ResultDuplicate] != 0 {
		t.Errorf("results %v", results)
	}
}
