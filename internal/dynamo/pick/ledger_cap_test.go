package pick_test

import (
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// TestLedgerBoundDropsAnsweredWork: past its bound, a rank's oldest entry
// that a sample has accounted for goes (merged into a later entry, its work
// would count again). Worker 1 was sent 4096 one-block requests, then
// sampled idle, then sent 4096 more: its backlog is 4096 blocks, below
// worker 2's 6000, so worker 1 is picked.
func TestLedgerBoundDropsAnsweredWork(t *testing.T) {
	t.Parallel()
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
	l := newLoads(snap)
	l.store.SetMaxStaleness(time.Minute)
	p := picker(l, t0.Add(3*time.Second))
	pin := pick.Pin{Decode: pick.Target{Worker: workerOf(snap, 1)}}
	for range 4096 {
		p.Dispatched(pin, 16, t0) // one block each
	}
	// Worker 1 has answered all of them.
	l.sample(1, 0, t0.Add(time.Second), u64(0), nil, nil)
	l.sample(2, 0, t0.Add(time.Second), u64(6000), nil, nil)
	for range 4096 {
		p.Dispatched(pin, 16, t0.Add(2*time.Second))
	}
	if got := mustPick(t, p, snap, req()).Decode.Worker.ID.InstanceID; got != 1 {
		t.Errorf("worker 1's backlog since its sample is 4096 blocks, worker 2 has 6000: picked %d, want 1 (answered work merged back into the backlog)", got)
	}
}
