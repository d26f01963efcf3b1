package kv

import (
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// anyPin is a dispatch to a worker the tests do not look at.
var anyPin = pick.Pin{Decode: pick.Target{Worker: &fleet.Worker{}}}

// ticket returns a Ticket with id n, as a picker's ledger numbers them.
func ticket(t *testing.T, lb *pick.LoadBased, n int) []pick.Ticket {
	t.Helper()
	var out []pick.Ticket
	for range n {
		out = append(out, lb.Dispatched(anyPin, 0, time.Now()))
	}
	return out
}

func TestPendingOverlapsAndRelease(t *testing.T) {
	t.Parallel()
	tk := ticket(t, pick.NewLoadBased(load.NewStore(time.Minute, nil)), 4)
	p := newPending()
	now := time.Now()
	a, b := load.Key{Namespace: load.NS("dynamo"), WorkerID: 1}, load.Key{Namespace: load.NS("dynamo"), WorkerID: 2, DPRank: 3}
	p.add(tk[0], a, 16, []uint64{1, 2, 3, 4}, now)
	p.add(tk[1], a, 16, []uint64{1, 2, 9}, now)
	p.add(tk[2], b, 16, []uint64{1, 2, 3}, now)
	p.add(tk[3], b, 32, []uint64{1, 2, 3, 4, 5}, now) // another block size
	got := func(hashes []uint64, bs int, at time.Time) map[load.Key]int {
		m := map[load.Key]int{}
		for _, x := range p.overlaps(hashes, bs, at, nil) {
			if _, dup := m[x.Rank]; dup {
				t.Fatalf("rank %v listed twice", x.Rank)
			}
			m[x.Rank] = x.Blocks
		}
		return m
	}
	if m := got([]uint64{1, 2, 3, 4, 5, 6}, 16, now); m[a] != 4 || m[b] != 3 || len(m) != 2 {
		t.Fatalf("overlaps %v", m)
	}
	if m := got([]uint64{7, 2, 3}, 16, now); len(m) != 0 {
		t.Fatalf("a prompt starting elsewhere overlaps %v", m)
	}
	if m := got([]uint64{1, 2, 3, 4, 5, 6}, 32, now); m[b] != 5 || len(m) != 1 {
		t.Fatalf("block size 32 overlaps %v", m)
	}
	p.done(tk[0])
	if m := got([]uint64{1, 2, 3, 4}, 16, now); m[a] != 2 || m[b] != 3 {
		t.Fatalf("after one release %v", m)
	}
	// Past the in-flight window nothing counts.
	later := now.Add(pick.InFlightWindow + time.Second)
	if m := got([]uint64{1, 2, 3}, 16, later); len(m) != 0 {
		t.Fatalf("expired prefixes overlap %v", m)
	}
	p.add(pick.Ticket{}, a, 16, []uint64{1}, now) // the zero ticket records nothing
	if r, n := p.size(); r != 3 || n != 3+3+5 {
		t.Fatalf("size %d requests %d blocks", r, n)
	}
	for _, x := range tk {
		p.done(x)
	}
	if r, n := p.size(); r != 0 || n != 0 || len(p.byKey) != 0 || len(p.order) != 0 {
		t.Fatalf("after every release: %d requests %d blocks, %d keys, %d in order", r, n, len(p.byKey), len(p.order))
	}
}

func TestPendingBounds(t *testing.T) {
	t.Parallel()
	lb := pick.NewLoadBased(load.NewStore(time.Minute, nil))
	p := newPending()
	now := time.Now()
	long := make([]uint64, maxPendingBlocksPerRequest+100)
	for i := range long {
		long[i] = uint64(i + 1)
	}
	var first pick.Ticket
	for i := range maxPendingBlocks/maxPendingBlocksPerRequest + 3 {
		tk := lb.Dispatched(anyPin, 0, now)
		if i == 0 {
			first = tk
		}
		p.add(tk, load.Key{Namespace: load.NS("dynamo"), WorkerID: uint64(i)}, 16, long, now)
	}
	// Each request is cut to its bound, and as many as fit under the
	// total are kept: the newest, the oldest forgotten.
	kept := maxPendingBlocks / maxPendingBlocksPerRequest
	if r, n := p.size(); n > maxPendingBlocks || r != kept || n != kept*maxPendingBlocksPerRequest {
		t.Fatalf("%d requests and %d blocks recorded, want %d and %d (bound %d)", r, n, kept, kept*maxPendingBlocksPerRequest, maxPendingBlocks)
	}
	if p.byTicket[first.ID()] != nil {
		t.Fatal("the oldest dispatch was kept past the bound")
	}
	ms := p.overlaps(long, 16, now, nil)
	if want := min(kept, maxPendingScan); len(ms) != want {
		t.Fatalf("%d ranks overlap, want %d", len(ms), want)
	}
	for _, x := range ms {
		if x.Blocks != maxPendingBlocksPerRequest {
			t.Fatalf("a request recorded %d blocks, bound %d", x.Blocks, maxPendingBlocksPerRequest)
		}
	}
	// Many short requests: the request bound holds, and released ones
	// leave no trace in the order.
	p2 := newPending()
	for i := range maxPendingRequests*3/2 + 30 { // two thirds of them, more than the bound, kept
		tk := lb.Dispatched(anyPin, 0, now)
		p2.add(tk, load.Key{Namespace: load.NS("dynamo"), WorkerID: uint64(i % 7)}, 16, []uint64{uint64(i % 5), 1}, now)
		if i%3 == 0 {
			p2.done(tk)
		}
	}
	// A third released, the rest kept up to the bound.
	if r, _ := p2.size(); r != maxPendingRequests {
		t.Fatalf("%d requests recorded, want the bound %d", r, maxPendingRequests)
	}
	if r, _ := p2.size(); len(p2.order) > 2*r+64 {
		t.Fatalf("order holds %d for %d recorded", len(p2.order), r)
	}
}

// TestPendingManyRanks: a prefix in flight on many ranks is listed once
// per rank, with each rank's longest share.
func TestPendingManyRanks(t *testing.T) {
	t.Parallel()
	lb := pick.NewLoadBased(load.NewStore(time.Minute, nil))
	p := newPending()
	now := time.Now()
	for i := range 300 {
		p.add(lb.Dispatched(anyPin, 0, now), load.Key{Namespace: load.NS("dynamo"), WorkerID: uint64(i % 100)}, 16, []uint64{1, 2, uint64(3 + i%3)}, now)
	}
	got := p.overlaps([]uint64{1, 2, 3}, 16, now, []Match{{Rank: load.Key{Namespace: load.NS("dynamo"), WorkerID: 999}, Blocks: 7}})
	if len(got) != 101 || got[0].Blocks != 7 {
		t.Fatalf("%d matches (want the one given and 100 ranks), first %+v", len(got), got[0])
	}
	for _, m := range got[1:] {
		// Rank w had prompts i = w, w+100, w+200: one of them ends in 3.
		if m.Blocks != 3 {
			t.Fatalf("rank %v shares %d blocks, want 3", m.Rank, m.Blocks)
		}
	}
}
