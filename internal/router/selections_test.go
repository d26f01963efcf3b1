package router

import (
	"sync"
	"testing"

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
