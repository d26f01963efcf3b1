package pick_test

import (
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// TestInFlightCountsEveryDispatchWithinWindow: a dispatch adds its blocks
// to its worker's backlog until the worker's next sample, however many
// were dispatched within the window: 5000 one-block requests sent to
// worker 1 within a second, with no sample since, are a backlog of 5000
// blocks, above worker 2's 4500, so worker 2 is picked. (The ledger keeps
// a bounded number of entries per rank; past it, entries are merged, not
// dropped: a quiet worker must not look less loaded than it is.)
func TestInFlightCountsEveryDispatchWithinWindow(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
	l := newLoads(snap)
	l.store.SetMaxStaleness(time.Minute)
	l.sample(1, 0, t0, u64(0), nil, nil)
	l.sample(2, 0, t0, u64(4500), nil, nil)
	at := t0.Add(time.Second)
	p := picker(l, at.Add(time.Second))
	for range 5000 {
		p.Dispatched(pick.Pin{Decode: pick.Target{Worker: workerOf(snap, 1)}}, 16, at) // one block each
	}
	if got := mustPick(t, p, snap, req()).Decode.Worker.ID.InstanceID; got != 2 {
		t.Errorf("worker 1 was sent 5000 blocks 1 s ago (no sample since), worker 2 has 4500: picked %d, want 2", got)
	}
}
