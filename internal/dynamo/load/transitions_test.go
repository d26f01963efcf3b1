package load_test

import (
	"bytes"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestRefusedPublisherLeavingLeavesNothing: a publisher the 1,024
// subscription cap left out (its samples dropped, its keys still linked)
// that then leaves the fleet with its worker leaves nothing in the store:
// no subscription of its own tells the store it left, so the worker's
// leaving does.
func TestRefusedPublisherLeavingLeavesNothing(t *testing.T) {
	t.Parallel()
	f, pub, s := cappedPublisher(t)
	const pid = cappedPID
	sendUntilSeen(t, pub, s.store, pid, key(6, 0), wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 6, ActiveDecodeBlocks: u64(40)}))
	f.pushOutByCap()
	testutil.Eventually(t, 10*time.Second, "pid pushed out by the cap", func() bool {
		_, ok := s.store.Latest(key(6, 0))
		return !ok && len(s.sup.Subscriptions()) == load.MaxSubscriptions
	})
	// The refused publisher and its worker leave the fleet.
	f.r.Delete(channelKey(pid))
	f.removeWorker(6)
	f.worker(7, 1) // one more generation after the departure
	testutil.Eventually(t, 10*time.Second, "the departed refused publisher's links gone", func() bool {
		return s.store.PublisherKeys(pid) == 0
	})
}

// TestUnreadableSampleDropsAtOnce: a publisher's message the subscription
// cannot read (here an ActiveLoad without worker_id, counted malformed)
// may be a change the router missed, and drops the publisher's samples at
// once: a publisher sends only on change, so one whose "went idle" sample
// was unreadable may never send the next message that would show the gap,
// and its busy sample would keep the worker out as silent with a backlog.
func TestUnreadableSampleDropsAtOnce(t *testing.T) {
	t.Parallel()
	const pid = 0xe8
	pub, s := busyWorker8(t, pid)
	malformed := func() float64 { return promtest.ToFloat64(s.metrics.Events.WithLabelValues(wire.ResultMalformed)) }
	before := malformed()
	// The next change (the worker went idle) arrives unreadable: an
	// ActiveLoad map without worker_id.
	_ = pub.Send(wire.EncodeEventMessage("kv_metrics", pid, 1, uint64(time.Now().UnixMilli()), []byte{0x80}))
	testutil.Eventually(t, 10*time.Second, "the unreadable sample counted", func() bool { return malformed() > before })
	if smp, ok := s.store.Latest(key(8, 0)); ok {
		t.Fatalf("after an unreadable message (a missed change) the publisher's earlier sample still stands: %d active decode blocks, sequence %d",
			*smp.Load.ActiveDecodeBlocks, smp.Sequence)
	}
}

// TestDepartedWorkerKeepsNoAccounting: a worker and its publisher leave in
// one generation after the publisher's session restarted (its samples
// dropped, its keys still linked): the subscription's reset, which runs
// after the worker's state went, writes no accounting for the departed
// worker.
func TestDepartedWorkerKeepsNoAccounting(t *testing.T) {
	t.Parallel()
	f := newFleet()
	f.worker(9, 1)
	pub := testutil.StartGoPublisher(t)
	const pid = 0xe9
	f.publisher(pid, pub.Endpoint)
	s := startSupervisor(t, f.reg)
	sendUntilSeen(t, pub, s.store, pid, key(9, 0), wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 9, ActiveDecodeBlocks: u64(3)}))
	// The session restarts: the sample is dropped, the key stays linked.
	pub.Close()
	testutil.StartGoPublisherAt(t, pub.Endpoint)
	testutil.Eventually(t, 20*time.Second, "reconnected, sample dropped", func() bool {
		subs := s.sup.Subscriptions()
		_, ok := s.store.Latest(key(9, 0))
		return len(subs) == 1 && subs[0].State == load.StateConnected && !ok
	})
	// Worker and publisher leave together.
	f.r.Delete(channelKey(pid))
	f.removeWorker(9)
	testutil.Eventually(t, 10*time.Second, "subscription gone", func() bool { return len(s.sup.Subscriptions()) == 0 })
	var since time.Time
	s.store.Read(func(r load.ReadView) { since = r.Since(key(9, 0)) })
	if !since.IsZero() {
		t.Fatalf("worker 9 left the fleet, but the store still holds an accounting instant for it (%v)", since.Format(time.RFC3339Nano))
	}
}

// TestOverLimitMessageDropsAtOnce: a message over the transport's limits
// that is refused for its shape (five frames, an id frame or a topic frame
// cut to the limits) was not read either, and may have been the
// publisher's change, so it drops the publisher's samples at once, as the
// same message within the limits (three frames, a short wrong topic) does.
func TestOverLimitMessageDropsAtOnce(t *testing.T) {
	t.Parallel()
	long := bytes.Repeat([]byte{0xee}, 20<<10)
	for _, tc := range []struct {
		name   string
		result string
		mangle func(m [][]byte) [][]byte
	}{
		{"five frames", wire.ResultMalformed, func(m [][]byte) [][]byte { return append(m, []byte("fifth")) }},
		{"long id frame", wire.ResultMalformed, func(m [][]byte) [][]byte { m[1] = long; return m }},
		{"long topic frame", wire.ResultTopicMismatch, func(m [][]byte) [][]byte { m[0] = append([]byte("kv_metrics"), long...); return m }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const pid = 0xe8
			pub, s := busyWorker8(t, pid)
			counted := func() float64 { return promtest.ToFloat64(s.metrics.Events.WithLabelValues(tc.result)) }
			before := counted()
			idle := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 8, ActiveDecodeBlocks: u64(0)})
			if err := pub.Send(tc.mangle(wire.EncodeEventMessage("kv_metrics", pid, 1, uint64(time.Now().UnixMilli()), idle))); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 10*time.Second, "the refused message counted", func() bool { return counted() > before })
			if smp, ok := s.store.Latest(key(8, 0)); ok {
				t.Fatalf("after a message over the limits that could not be read (a missed change) the earlier sample still stands: %d active decode blocks",
					*smp.Load.ActiveDecodeBlocks)
			}
		})
	}
}

// busyWorker8 starts a supervisor over a fleet of worker 8 and its
// publisher pid, and waits until the publisher's busy sample (sequence 0,
// 40 active decode blocks) stands in the store: the state a missed change
// must clear. The test's next message is sequence 1.
func busyWorker8(t *testing.T, pid uint64) (*testutil.GoPublisher, *runningSupervisor) {
	t.Helper()
	f := newFleet()
	f.worker(8, 1)
	pub := testutil.StartGoPublisher(t)
	f.publisher(pid, pub.Endpoint)
	s := startSupervisor(t, f.reg)
	busy := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 8, ActiveDecodeBlocks: u64(40)})
	testutil.Eventually(t, 10*time.Second, "the busy sample", func() bool {
		_ = pub.Send(wire.EncodeEventMessage("kv_metrics", pid, 0, uint64(time.Now().UnixMilli()), busy))
		_, ok := s.store.Latest(key(8, 0))
		return ok
	})
	return pub, s
}
