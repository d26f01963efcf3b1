package router

import (
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// TestSelections: counts per key, the key bound, and pruning of keys that
// are no longer live; concurrent adds are all counted.
func TestSelections(t *testing.T) {
	t.Parallel()
	var s selections
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				s.add(load.Key{Namespace: load.NS("dynamo"), WorkerID: uint64(i % 10), DPRank: uint32(g % 2)})
			}
		}()
	}
	wg.Wait()
	got := s.snapshot(func(k load.Key) bool { return k.WorkerID != 3 })
	if len(got) != 18 || got[load.Key{Namespace: load.NS("dynamo"), WorkerID: 1}] != 200 || got[load.Key{Namespace: load.NS("dynamo"), WorkerID: 9, DPRank: 1}] != 200 {
		t.Fatalf("%d keys: %v", len(got), got)
	}
	if again := s.snapshot(func(load.Key) bool { return true }); len(again) != 18 {
		t.Fatalf("pruned keys came back: %v", again)
	}
	for i := range maxSelectionKeys + 10 {
		s.add(load.Key{Namespace: load.NS("dynamo"), WorkerID: uint64(1000 + i)})
	}
	if n := len(s.snapshot(func(load.Key) bool { return true })); n != maxSelectionKeys {
		t.Fatalf("%d keys held, bound %d", n, maxSelectionKeys)
	}
}

// TestSelectionsForgetDepartedWorkers: a fleet whose workers keep coming
// back under new instance ids (restarts) does not fill the pick counters
// with the dead, whether or not anyone reads the admin API: a live
// worker that joins after a long churn is still counted and its last
// pinned request remembered (which worker of a failed pair to blame).
func TestSelectionsForgetDepartedWorkers(t *testing.T) {
	t.Parallel()
	reg := fleet.NewRegistry(nil, nil)
	var s selections
	s.live = func() func(load.Key) bool { return liveRanks(reg.Snapshot()) }
	now := time.Now()
	worker := func(id uint64) *fleet.Worker {
		return &fleet.Worker{ID: fleet.WorkerID{Namespace: "dynamo", InstanceID: id}, DPSize: 1}
	}
	most := int64(0)
	// One worker at a time, each replaced by the next.
	for i := range uint64(maxSelectionKeys + 1000) {
		w := worker(1_000_000 + i)
		reg.Publish(fleet.NewSnapshot([]*fleet.Worker{w}, nil))
		k := load.RankOf(w, 0)
		s.add(k)
		s.served(k, now)
		most = max(most, s.keys.Load())
	}
	if most > 2*pruneFrom {
		t.Errorf("the counters held up to %d keys for a fleet of one worker", most)
	}
	w := worker(42)
	reg.Publish(fleet.NewSnapshot([]*fleet.Worker{w}, nil))
	s.add(load.RankOf(w, 0))
	s.served(load.RankOf(w, 0), now)
	if got := s.lastServed(load.RankOf(w, 0)); got.IsZero() {
		t.Fatalf("a live worker's last pinned request is forgotten after churn (%d keys held)", s.keys.Load())
	}
	// The admin API's listing keeps the live worker's count.
	if picks := s.snapshot(liveRanks(reg.Snapshot())); len(picks) != 1 || picks[load.RankOf(w, 0)] != 1 {
		t.Errorf("listed picks %v, want the live worker's 1 alone", picks)
	}
}

// TestSelectionsPruneNearTheBound: a fleet with more than half the bound
// of live ranks keeps forgetting its departed workers (the next prune
// was set past the bound, so it never came).
func TestSelectionsPruneNearTheBound(t *testing.T) {
	t.Parallel()
	reg := fleet.NewRegistry(nil, nil)
	var s selections
	s.live = func() func(load.Key) bool { return liveRanks(reg.Snapshot()) }
	const size = 40_000 // live ranks: more than half the bound
	fleetOf := func(from uint64) []*fleet.Worker {
		ws := make([]*fleet.Worker, size)
		for i := range ws {
			ws[i] = &fleet.Worker{ID: fleet.WorkerID{Namespace: "dynamo", InstanceID: from + uint64(i)}, DPSize: 1}
		}
		return ws
	}
	// Three generations of the whole fleet, each replacing the one before.
	for gen := range uint64(3) {
		ws := fleetOf(gen * 1_000_000)
		reg.Publish(fleet.NewSnapshot(ws, nil))
		for _, w := range ws {
			s.add(load.RankOf(w, 0))
		}
	}
	last := fleetOf(2 * 1_000_000)
	for _, w := range []*fleet.Worker{last[0], last[size-1]} {
		if c, ok := s.n.Load(load.RankOf(w, 0)); !ok || c.(*selection).picks.Load() != 1 {
			t.Fatalf("a live worker of the last generation is not counted (%d keys held)", s.keys.Load())
		}
	}
}

func BenchmarkSelectionsAdd(b *testing.B) {
	var s selections
	k := load.Key{Namespace: load.NS("dynamo"), WorkerID: 7, DPRank: 1}
	s.add(k)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.add(k)
		}
	})
}
