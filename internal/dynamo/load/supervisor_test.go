package load_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// fleetState builds registry snapshots from records, as discovery would.
type fleetState struct {
	r   *fleet.Reducer
	reg *fleet.Registry
}

func newFleet() *fleetState {
	return &fleetState{r: fleet.NewReducer(), reg: fleet.NewRegistry(nil, nil)}
}

func (f *fleetState) worker(id uint64, dpSize int) {
	f.r.Put(fmt.Sprintf("v1/instances/dynamo/decode/generate/%x", id), fmt.Appendf(nil, `{"component":"decode","endpoint":"generate","instance_id":%d}`, id), t0)
	f.r.Put(fmt.Sprintf("v1/mdc/dynamo/decode/generate/%x", id), fmt.Appendf(nil, `{"component":"decode","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m","worker_type":"Decode","runtime_config":{"data_parallel_size":%d}}}`, id, dpSize), t0)
	f.reg.Publish(f.r.Build(t0))
}

func (f *fleetState) removeWorker(id uint64) {
	f.r.Delete(fmt.Sprintf("v1/instances/dynamo/decode/generate/%x", id))
	f.reg.Publish(f.r.Build(t0))
}

func channelKey(pid uint64) string {
	return fmt.Sprintf("v1/event_channels/namespace/dynamo/component/decode/endpoint/generate/topic/kv_metrics/%x", pid)
}

func (f *fleetState) publisher(pid uint64, endpoint string) {
	f.r.Put(channelKey(pid), fmt.Appendf(nil, `{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"dynamo","component":"decode","name":"generate"}},"topic":"kv_metrics","instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":%q}}}`, pid, endpoint), t0)
	f.reg.Publish(f.r.Build(t0))
}

func (f *fleetState) removePublisher(pid uint64) {
	f.r.Delete(channelKey(pid))
	f.reg.Publish(f.r.Build(t0))
}

type runningSupervisor struct {
	sup     *load.Supervisor
	store   *load.Store
	metrics *telemetry.LoadMetrics
}

func startSupervisor(t *testing.T, reg *fleet.Registry) *runningSupervisor {
	t.Helper()
	return startSupervisorWith(t, reg, &zmtp.Direct{})
}

// startSupervisorWith is startSupervisor dialling through c.
func startSupervisorWith(t *testing.T, reg *fleet.Registry, c zmtp.Connector) *runningSupervisor {
	t.Helper()
	m := telemetry.NewLoadMetrics(nil)
	store := load.NewStore(time.Minute, load.Gauges{M: m})
	sup := load.NewSupervisor(reg, store, c, m, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sup.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(2 * load.StopGrace):
			t.Error("supervisor did not stop within its grace")
		}
	})
	return &runningSupervisor{sup: sup, store: store, metrics: m}
}

// cappedPID is cappedPublisher's publisher id: higher than every one
// pushOutByCap adds, so that the cap then leaves it out.
const cappedPID = 0x100000

// cappedPublisher is a fleet with worker 6 and its publisher cappedPID, a
// real one, under a supervisor that holds the subscriptions pushOutByCap
// adds (holdConnector) without dialling them.
func cappedPublisher(t *testing.T) (*fleetState, *testutil.GoPublisher, *runningSupervisor) {
	t.Helper()
	f := newFleet()
	f.worker(6, 1)
	pub := testutil.StartGoPublisher(t)
	f.publisher(cappedPID, pub.Endpoint)
	return f, pub, startSupervisorWith(t, f.reg, holdConnector{real: pub.Endpoint})
}

// sendUntilSeen sends payload as publisher pid on pub, a fresh sequence
// each time, until the store holds a sample for k.
func sendUntilSeen(t *testing.T, pub *testutil.GoPublisher, store *load.Store, pid uint64, k load.Key, payload []byte) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "a sample", func() bool {
		_ = pub.Send(wire.EncodeEventMessage("kv_metrics", pid, uint64(time.Now().UnixNano()), uint64(time.Now().UnixMilli()), payload))
		_, ok := store.Latest(k)
		return ok
	})
}

// pushOutByCap adds load.MaxSubscriptions publishers with ids from 1, below
// any a cap test's own publisher has: the subscription cap then admits
// them instead. Their dials never complete (holdConnector).
func (f *fleetState) pushOutByCap() {
	for i := uint64(1); i <= load.MaxSubscriptions; i++ {
		f.r.Put(channelKey(i), fmt.Appendf(nil, `{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"dynamo","component":"decode","name":"generate"}},"topic":"kv_metrics","instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://127.0.0.1:9"}}}`, i), t0)
	}
	f.reg.Publish(f.r.Build(t0))
}

// publishLoop sends a sample every few milliseconds until the test ends.
func publishLoop(t *testing.T, pub *testutil.GoPublisher, pid, worker uint64, decode uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for seq := uint64(0); ; seq++ {
			payload := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: worker, ActiveDecodeBlocks: u64(decode)})
			_ = pub.Send(wire.EncodeEventMessage("kv_metrics", pid, seq, uint64(time.Now().UnixMilli()), payload))
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func TestSupervisorFollowsRegistry(t *testing.T) {
	t.Parallel()
	f := newFleet()
	f.worker(1, 1)
	pubA := testutil.StartGoPublisher(t)
	publishLoop(t, pubA, 0xa1, 1, 10)
	f.publisher(0xa1, pubA.Endpoint)
	s := startSupervisor(t, f.reg)

	testutil.Eventually(t, 10*time.Second, "first sample", func() bool {
		smp, ok := s.store.FreshDefault(key(1, 0))
		return ok && smp.PublisherID == 0xa1
	})
	if v := promtest.ToFloat64(s.metrics.Subscriptions.WithLabelValues(load.StateConnected, "direct")); v != 1 {
		t.Errorf("connected subscriptions gauge %v", v)
	}
	if subs := s.sup.Subscriptions(); len(subs) != 1 || subs[0].PublisherID != 0xa1 || subs[0].State != load.StateConnected {
		t.Errorf("subscriptions %+v", subs)
	}

	// The worker restarts its publisher: a new publisher id replaces the old.
	pubB := testutil.StartGoPublisher(t)
	publishLoop(t, pubB, 0xb2, 1, 20)
	f.removePublisher(0xa1)
	f.publisher(0xb2, pubB.Endpoint)
	testutil.Eventually(t, 10*time.Second, "sample of the new publisher", func() bool {
		smp, ok := s.store.FreshDefault(key(1, 0))
		return ok && smp.PublisherID == 0xb2 && *smp.Load.ActiveDecodeBlocks == 20
	})
	if subs := s.sup.Subscriptions(); len(subs) != 1 || subs[0].PublisherID != 0xb2 {
		t.Errorf("subscriptions after the restart %+v", subs)
	}

	// The worker leaves: its samples and series go.
	f.removeWorker(1)
	testutil.Eventually(t, 10*time.Second, "departed worker dropped", func() bool {
		_, ok := s.store.Latest(key(1, 0))
		return !ok && promtest.CollectAndCount(s.metrics.ActiveDecodeBlocks) == 0
	})
	if n := promtest.ToFloat64(s.metrics.Events.WithLabelValues(wire.ResultIdentityMismatch)); n == 0 {
		testutil.Eventually(t, 10*time.Second, "identity mismatch counted", func() bool {
			return promtest.ToFloat64(s.metrics.Events.WithLabelValues(wire.ResultIdentityMismatch)) > 0
		})
	}
}

// TestSupervisorReconnects: a publisher that goes away and comes back on
// its address is reconnected to by the same subscription.
func TestSupervisorReconnects(t *testing.T) {
	t.Parallel()
	f := newFleet()
	f.worker(5, 1)
	pub := testutil.StartGoPublisher(t)
	f.publisher(0xe5, pub.Endpoint)
	s := startSupervisor(t, f.reg)
	connected := func() bool {
		subs := s.sup.Subscriptions()
		return len(subs) == 1 && subs[0].State == load.StateConnected
	}
	testutil.Eventually(t, 10*time.Second, "connected", connected)
	pub.Close()
	testutil.Eventually(t, 10*time.Second, "left connected", func() bool { return !connected() })
	testutil.StartGoPublisherAt(t, pub.Endpoint)
	testutil.Eventually(t, 20*time.Second, "reconnected", connected)
}

// TestSupervisorReconnectKeepsAccounting: when a publisher's session is
// re-established, its worker's last sample is dropped (a change may have
// been missed), but what the router sent the worker after that sample
// stays counted until a sample answers it: the accounting instant stays at
// the last sample's arrival instead of moving to the reconnect, so a worker
// whose subscription flaps does not look empty and draw every request.
func TestSupervisorReconnectKeepsAccounting(t *testing.T) {
	t.Parallel()
	f := newFleet()
	f.worker(6, 1)
	pub := testutil.StartGoPublisher(t)
	payload := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 6, ActiveDecodeBlocks: u64(40)})
	f.publisher(0xe6, pub.Endpoint)
	s := startSupervisor(t, f.reg)
	sendUntilSeen(t, pub, s.store, 0xe6, key(6, 0), payload)
	pub.Close()
	testutil.Eventually(t, 10*time.Second, "left connected", func() bool {
		subs := s.sup.Subscriptions()
		return len(subs) == 1 && subs[0].State != load.StateConnected
	})
	// The session is over: this is the last sample it applied.
	last, ok := s.store.Latest(key(6, 0))
	if !ok {
		t.Fatal("the sample went with the session, before any reconnect")
	}
	testutil.StartGoPublisherAt(t, pub.Endpoint)
	testutil.Eventually(t, 20*time.Second, "reconnected", func() bool {
		subs := s.sup.Subscriptions()
		return len(subs) == 1 && subs[0].State == load.StateConnected
	})
	var since time.Time
	s.store.Read(func(r load.ReadView) { since = r.Since(load.Key{Namespace: load.NS("dynamo"), WorkerID: 6}) })
	if _, ok := s.store.Latest(key(6, 0)); ok || !since.Equal(last.ReceivedAt) {
		t.Fatalf("after the reconnect: sample kept %v, accounted from %v, want the last sample's arrival %v", ok, since, last.ReceivedAt)
	}
}

// TestSupervisorChangedRecordKeepsAccounting: a publisher whose record
// changes under the same id (here its endpoint) is the same incarnation:
// its subscription restarts on the new record, whose first session drops
// the samples, and what was dispatched since the last one stays counted.
// A publisher that leaves takes its worker's accounting with it.
func TestSupervisorChangedRecordKeepsAccounting(t *testing.T) {
	t.Parallel()
	f := newFleet()
	f.worker(6, 1)
	a, b := testutil.StartGoPublisher(t), testutil.StartGoPublisher(t)
	payload := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 6, ActiveDecodeBlocks: u64(40)})
	f.publisher(0xe6, a.Endpoint)
	s := startSupervisor(t, f.reg)
	sendUntilSeen(t, a, s.store, 0xe6, key(6, 0), payload)
	since := func() (at time.Time) {
		s.store.Read(func(r load.ReadView) { at = r.Since(load.Key{Namespace: load.NS("dynamo"), WorkerID: 6}) })
		return at
	}
	// One more sample, the highest sequence: once it is in, every one sent
	// before it has been handled (a publisher's messages arrive in order).
	final := uint64(time.Now().UnixNano())
	_ = a.Send(wire.EncodeEventMessage("kv_metrics", 0xe6, final, uint64(time.Now().UnixMilli()), payload))
	testutil.Eventually(t, 10*time.Second, "the last sample sent", func() bool {
		smp, _ := s.store.Latest(key(6, 0))
		return smp.Sequence == final
	})
	changed := time.Now()
	f.publisher(0xe6, b.Endpoint)
	testutil.Eventually(t, 10*time.Second, "the sample dropped by the new record's session", func() bool {
		_, ok := s.store.Latest(key(6, 0))
		return !ok
	})
	if got := since(); got.IsZero() || got.After(changed) {
		t.Fatalf("after the record changed: accounted from %v, want the last sample's arrival, before the change at %v", got, changed)
	}
	testutil.Eventually(t, 10*time.Second, "a sample through the new record", func() bool {
		_ = b.Send(wire.EncodeEventMessage("kv_metrics", 0xe6, uint64(time.Now().UnixNano()), uint64(time.Now().UnixMilli()), payload))
		_, ok := s.store.Latest(key(6, 0))
		return ok
	})
	last, _ := s.store.Latest(key(6, 0))
	f.removePublisher(0xe6)
	testutil.Eventually(t, 10*time.Second, "the publisher gone", func() bool { return len(s.sup.Subscriptions()) == 0 })
	if got := since(); !got.After(last.ReceivedAt) {
		t.Fatalf("after the publisher left: accounted from %v, want later than %v", got, last.ReceivedAt)
	}
}

// TestSupervisorLibzmq: a libzmq publisher, whose bytes our SUB decodes.
func TestSupervisorLibzmq(t *testing.T) {
	t.Parallel()
	var msgs [][][]byte
	for seq := range uint64(400) {
		msgs = append(msgs, wire.EncodeEventMessage("kv_metrics", 0xc3, seq, 1, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 3, KVUsedBlocks: u64(30 + seq)})))
	}
	pub := testutil.StartLibzmqPublisher(t, msgs, 5*time.Millisecond)
	f := newFleet()
	f.worker(3, 1)
	f.publisher(0xc3, pub.Endpoint)
	s := startSupervisor(t, f.reg)
	testutil.Eventually(t, 10*time.Second, "connected", func() bool {
		subs := s.sup.Subscriptions()
		return len(subs) == 1 && subs[0].State == load.StateConnected
	})
	pub.Go()
	testutil.Eventually(t, 10*time.Second, "libzmq samples", func() bool {
		smp, ok := s.store.FreshDefault(key(3, 0))
		return ok && smp.Load.KVUsedBlocks != nil && *smp.Load.KVUsedBlocks > 30 && smp.Load.ActiveDecodeBlocks == nil
	})
}

// TestSupervisorRefusesUnallowedAddress: a publisher outside
// direct_allow_cidrs is never dialled and counts transport_refused.
func TestSupervisorRefusesUnallowedAddress(t *testing.T) {
	t.Parallel()
	f := newFleet()
	f.worker(4, 1)
	pub := testutil.StartGoPublisher(t)
	f.publisher(0xd4, pub.Endpoint)
	m := telemetry.NewLoadMetrics(nil)
	store := load.NewStore(time.Minute, nil)
	prefixes, err := zmtp.ParseCIDRs([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	sup := load.NewSupervisor(f.reg, store, &zmtp.Direct{Allow: prefixes}, m, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sup.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, 10*time.Second, "transport_refused", func() bool {
		return promtest.ToFloat64(m.Events.WithLabelValues(wire.ResultTransportRefused)) > 0
	})
}

// transportConnector dials directly under another transport name and counts
// its connections; with a gate, each dial waits until the gate is closed.
type transportConnector struct {
	zmtp.Direct
	name  string
	gate  chan struct{}
	dials atomic.Int32
}

func (c *transportConnector) Connect(ctx context.Context, t zmtp.Target) (net.Conn, error) {
	c.dials.Add(1)
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.Direct.Connect(ctx, t)
}

func (c *transportConnector) Transport() string { return c.name }

// TestSupervisorSetConnector: a new connector restarts every subscription
// through it. The switch itself wipes nothing (the sample stays while the
// new session is being dialled), and the first session through the new
// connector drops the samples the publisher sent before, like any other
// session: a change may have gone unseen between the two.
func TestSupervisorSetConnector(t *testing.T) {
	t.Parallel()
	f := newFleet()
	f.worker(1, 1)
	pub := testutil.StartGoPublisher(t)
	f.publisher(0xa1, pub.Endpoint)
	s := startSupervisor(t, f.reg)
	payload := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 1, ActiveDecodeBlocks: u64(10)})
	testutil.Eventually(t, 10*time.Second, "first sample", func() bool {
		_ = pub.Send(wire.EncodeEventMessage("kv_metrics", 0xa1, uint64(time.Now().UnixNano()), uint64(time.Now().UnixMilli()), payload))
		_, ok := s.store.Latest(key(1, 0))
		return ok
	})

	next := &transportConnector{name: "other", gate: make(chan struct{})}
	s.sup.SetConnector(next)
	testutil.Eventually(t, 10*time.Second, "a dial through the new connector", func() bool { return next.dials.Load() > 0 })
	// The old session is over: this is the last sample it applied.
	last, ok := s.store.Latest(key(1, 0))
	if !ok {
		t.Fatal("the switch itself dropped the worker's sample")
	}
	close(next.gate)
	testutil.Eventually(t, 10*time.Second, "subscription through the new connector", func() bool {
		subs := s.sup.Subscriptions()
		return len(subs) == 1 && subs[0].Transport == "other" && subs[0].State == load.StateConnected
	})
	if smp, ok := s.store.Latest(key(1, 0)); ok {
		t.Fatalf("the first session through the new connector kept the sample sent before it: %+v", smp)
	}
	var since time.Time
	s.store.Read(func(r load.ReadView) { since = r.Since(load.Key{Namespace: load.NS("dynamo"), WorkerID: 1}) })
	if !since.Equal(last.ReceivedAt) {
		t.Errorf("dispatches accounted from %v after the switch, want the last sample's arrival %v", since, last.ReceivedAt)
	}
	if v := promtest.ToFloat64(s.metrics.Subscriptions.WithLabelValues(load.StateConnected, "direct")); v != 0 {
		t.Errorf("the old transport's series still counts %v subscriptions", v)
	}
	if v := promtest.ToFloat64(s.metrics.Subscriptions.WithLabelValues(load.StateConnected, "other")); v != 1 {
		t.Errorf("the new transport's series counts %v subscriptions", v)
	}
}

// TestSupervisorJudgesMessagesOverTheLimits: a message over the transport's
// limits is counted by what is wrong with it, not as oversized wholesale:
// five frames or an over-long id frame are malformed, an over-long topic
// frame is a topic mismatch, only a payload declared over 16 KiB is
// oversized (even one of megabytes, which does not cut the session), and a
// payload frame long only for the bytes after its payload is accepted
// (those bytes are ignored).
func TestSupervisorJudgesMessagesOverTheLimits(t *testing.T) {
	t.Parallel()
	f := newFleet()
	f.worker(2, 1)
	pub := testutil.StartGoPublisher(t)
	f.publisher(0xb2, pub.Endpoint)
	s := startSupervisor(t, f.reg)
	seq := uint64(0)
	msg := func(decode uint64) [][]byte {
		seq++
		return wire.EncodeEventMessage("kv_metrics", 0xb2, seq, 1, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 2, ActiveDecodeBlocks: u64(decode)}))
	}
	decodeIs := func(want uint64) func() bool {
		return func() bool {
			smp, ok := s.store.Latest(key(2, 0))
			return ok && smp.Load.ActiveDecodeBlocks != nil && *smp.Load.ActiveDecodeBlocks == want
		}
	}
	// One message, sent until it arrives: the copies that follow it are
	// duplicates, not accepted.
	first := msg(1)
	testutil.Eventually(t, 10*time.Second, "a first sample", func() bool {
		_ = pub.Send(first)
		return decodeIs(1)()
	})
	count := func(result string) float64 { return promtest.ToFloat64(s.metrics.Events.WithLabelValues(result)) }
	before := map[string]float64{}
	for _, r := range []string{wire.ResultMalformed, wire.ResultTopicMismatch, wire.ResultOversized, telemetry.ResultAccepted, wire.ResultTransportRefused} {
		before[r] = count(r)
	}
	long := bytes.Repeat([]byte{0xee}, 20<<10)

	fifth := append(msg(2), []byte("fifth"))
	longID := msg(3)
	longID[1] = long
	longTopic := msg(4)
	longTopic[0] = append([]byte("kv_metrics"), long...) // passes the publisher's prefix filter
	bigPayload := msg(5)
	bigPayload[3] = append([]byte{wire.FrameVersion, 0, 0, 0x40, 0x01}, make([]byte, 16<<10+1)...)
	// Far over every limit: read and thrown away, the session goes on.
	hugePayload := msg(6)
	hugePayload[3] = append([]byte{wire.FrameVersion, 0, 0x20, 0, 0}, make([]byte, 2<<20)...)
	trailing := msg(77)
	trailing[3] = append(trailing[3], long...)
	for _, m := range [][][]byte{fifth, longID, longTopic, bigPayload, hugePayload, trailing, msg(99)} {
		if err := pub.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the last sample", decodeIs(99))
	// Accepted: the frame with trailing bytes and the last one.
	want := map[string]float64{wire.ResultMalformed: 2, wire.ResultTopicMismatch: 1, wire.ResultOversized: 2, telemetry.ResultAccepted: 2, wire.ResultTransportRefused: 0}
	for r, n := range want {
		if got := count(r) - before[r]; got != n {
			t.Errorf("%s counted %v times, want %v", r, got, n)
		}
	}
	if subs := s.sup.Subscriptions(); len(subs) != 1 || subs[0].State != load.StateConnected {
		t.Errorf("subscriptions %+v, want one, still connected", subs)
	}
}

// nsWorker puts a decode worker and its kv_metrics channel under Dynamo
// namespace ns.
func (f *fleetState) nsWorker(ns string, id, pid uint64, endpoint string) {
	f.r.Put(fmt.Sprintf("v1/instances/%s/decode/generate/%x", ns, id), fmt.Appendf(nil, `{"component":"decode","endpoint":"generate","instance_id":%d}`, id), t0)
	f.r.Put(fmt.Sprintf("v1/mdc/%s/decode/generate/%x", ns, id), fmt.Appendf(nil, `{"component":"decode","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m","worker_type":"Decode"}}`, id), t0)
	f.r.Put(fmt.Sprintf("v1/event_channels/namespace/%s/component/decode/endpoint/generate/topic/kv_metrics/%x", ns, pid),
		fmt.Appendf(nil, `{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":%q,"component":"decode","name":"generate"}},"topic":"kv_metrics","instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":%q}}}`, ns, pid, endpoint), t0)
	f.reg.Publish(f.r.Build(t0))
}

// TestSupervisorWorkerIsNamespaceAndID: two graphs (canary and prod) each
// run a worker with instance id 7. A sample is its publisher's
// namespace's worker's: the canary publisher's samples weigh on canary's
// worker 7 and are labelled canary, prod's worker 7 stays without a
// sample, and prod's leaving takes nothing of canary's.
func TestSupervisorWorkerIsNamespaceAndID(t *testing.T) {
	t.Parallel()
	f := newFleet()
	pub := testutil.StartGoPublisher(t)
	publishLoop(t, pub, 0xc1, 7, 5)
	f.nsWorker("canary", 7, 0xc1, pub.Endpoint)
	f.nsWorker("prod", 7, 0xd1, "tcp://127.0.0.1:1")
	s := startSupervisor(t, f.reg)

	testutil.Eventually(t, 10*time.Second, "canary's worker 7 sample", func() bool {
		return promtest.ToFloat64(s.metrics.ActiveDecodeBlocks.WithLabelValues("canary", "7", "0")) == 5
	})
	if n := promtest.CollectAndCount(s.metrics.ActiveDecodeBlocks); n != 1 {
		t.Errorf("%d decode-block series, want canary's only", n)
	}
}

// TestSupervisorDepartedReaderAppliesNothing: a sample a departed
// publisher's loop delivers after it was told stopped is not applied (the
// store was reset for it; the sample would stand for an engine that is
// gone).
func TestSupervisorDepartedReaderAppliesNothing(t *testing.T) {
	t.Parallel()
	s := load.NewStore(time.Hour, nil)
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPSize: 2}})
	sup := load.NewSupervisor(fleet.NewRegistry(nil, nil), s, &zmtp.Direct{}, nil, nil)
	late := sup.DepartForTest(fleet.Publisher{Namespace: "dynamo", Topic: fleet.TopicLoad, PublisherID: 7, Key: "v1/event_channels/a"})
	late(worker1Load(7)(0, 0, 10), t0)
	if _, ok := s.Latest(key(1, 0)); ok {
		t.Error("a departed publisher's late sample was applied")
	}
}

// holdConnector dials one real endpoint and holds every other attempt
// until its context ends (a publisher that never answers).
type holdConnector struct{ real string }

func (c holdConnector) Transport() string { return "direct" }

func (c holdConnector) Connect(ctx context.Context, t zmtp.Target) (net.Conn, error) {
	if t.Endpoint == c.real {
		return (&zmtp.Direct{}).Connect(ctx, t)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestOverCapRefusalKeepsAccounting: a running subscription the
// 1024-socket cap pushes out (lower publisher ids appeared) is no
// publisher that left or restarted: its worker still runs what the router
// sent it, which counts until a sample answers it (at most 30 s), so the
// accounting instant stays at the last sample's arrival rather than moving
// to the moment of the refusal.
func TestOverCapRefusalKeepsAccounting(t *testing.T) {
	t.Parallel()
	f, pub, s := cappedPublisher(t)
	const pid = cappedPID
	store, sup := s.store, s.sup

	payload := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 6, ActiveDecodeBlocks: u64(40)})
	final := uint64(0)
	testutil.Eventually(t, 10*time.Second, "a sample", func() bool {
		final = uint64(time.Now().UnixNano())
		_ = pub.Send(wire.EncodeEventMessage("kv_metrics", pid, final, uint64(time.Now().UnixMilli()), payload))
		smp, ok := store.Latest(key(6, 0))
		return ok && smp.Sequence == final
	})
	last, _ := store.Latest(key(6, 0))

	// 1024 publishers with lower ids: the cap now admits them, not pid.
	refusedAt := time.Now()
	f.pushOutByCap()
	testutil.Eventually(t, 10*time.Second, "pid pushed out by the cap", func() bool {
		for _, s := range sup.Subscriptions() {
			if s.PublisherID == pid {
				return false
			}
		}
		return len(sup.Subscriptions()) == load.MaxSubscriptions
	})
	var since time.Time
	store.Read(func(r load.ReadView) { since = r.Since(key(6, 0)) })
	if !since.Equal(last.ReceivedAt) {
		t.Fatalf("after the cap refused the still-running publisher: accounted from %v (refused at %v), want the last sample's arrival %v: the requests in flight on worker 6 were forgotten",
			since.Format(time.RFC3339Nano), refusedAt.Format(time.RFC3339Nano), last.ReceivedAt.Format(time.RFC3339Nano))
	}
}
