package kv_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// kvRecords puts a decode worker and its kv-events channel (under the
// given topic spelling) into a reducer and publishes the snapshot.
func kvRecords(r *fleet.Reducer, reg *fleet.Registry, worker, pid uint64, topic, endpoint string) {
	nsKVRecords(r, reg, "dynamo", worker, pid, topic, endpoint)
}

// nsKVRecords is kvRecords under Dynamo namespace ns.
func nsKVRecords(r *fleet.Reducer, reg *fleet.Registry, ns string, worker, pid uint64, topic, endpoint string) {
	t0 := time.Unix(1_800_000_000, 0)
	r.Put(fmt.Sprintf("v1/instances/%s/decode/generate/%x", ns, worker), fmt.Appendf(nil, `{"component":"decode","endpoint":"generate","instance_id":%d}`, worker), t0)
	r.Put(fmt.Sprintf("v1/mdc/%s/decode/generate/%x", ns, worker), fmt.Appendf(nil, `{"component":"decode","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m","worker_type":"Decode"}}`, worker), t0)
	r.Put(fmt.Sprintf("v1/event_channels/namespace/%s/topic/%s/%x", ns, wire.EncodeSegment(topic), pid), fmt.Appendf(nil,
		`{"type":"EventChannel","scope":{"kind":"namespace","name":%q},"topic":%q,"instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":%q}}}`, ns, topic, pid, endpoint), t0)
	reg.Publish(r.Build(t0))
}

// sender publishes one message over and over until the test moves on
// (a SUB joins late and misses what was sent before it connected).
type sender struct {
	mu    sync.Mutex
	frame [][]byte
}

func (s *sender) set(f [][]byte) { s.mu.Lock(); s.frame = f; s.mu.Unlock() }

func (s *sender) run(ctx context.Context, pub *testutil.GoPublisher) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		f := s.frame
		s.mu.Unlock()
		if f != nil {
			_ = pub.Send(f)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// runSubscriptions runs KV-events subscriptions over a fleet of one worker
// (7) whose publisher (0x77, on topic) is a real ZMQ socket the returned
// sender publishes through, until the test ends.
func runSubscriptions(t *testing.T, topic string) (*fleet.Reducer, *fleet.Registry, *kv.Index, *telemetry.KVMetrics, *kv.Subscriptions, *sender) {
	t.Helper()
	pub := testutil.StartGoPublisher(t)
	r, reg := fleet.NewReducer(), fleet.NewRegistry(nil, nil)
	kvRecords(r, reg, 7, 0x77, topic, pub.Endpoint)
	ix := kv.NewIndex()
	m := telemetry.NewKVMetrics(nil)
	subs, s := startSubscriptions(t, reg, ix, m, pub)
	return r, reg, ix, m, subs, s
}

// startSubscriptions runs the KV subscriptions of reg's publishers into ix,
// and a sender publishing through pub, until the test ends.
func startSubscriptions(t *testing.T, reg *fleet.Registry, ix *kv.Index, m *telemetry.KVMetrics, pub *testutil.GoPublisher) (*kv.Subscriptions, *sender) {
	t.Helper()
	subs := kv.NewSubscriptions(reg, ix, &zmtp.Direct{}, m, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = subs.Run(ctx) }()
	s := &sender{}
	go func() { defer wg.Done(); s.run(ctx, pub) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return subs, s
}

// TestSubscriptionsFeedTheIndex: a real ZMQ publisher's stored and removed
// events reach the index (replays of a resent message skipped, a skipped
// id a gap), the subscription gauge says connected, and a publisher that
// leaves takes its blocks with it.
func TestSubscriptionsFeedTheIndex(t *testing.T) {
	t.Parallel()
	for _, topic := range []string{"kv-events", "kv_events"} {
		t.Run(topic, func(t *testing.T) {
			t.Parallel()
			r, reg, ix, m, subs, s := runSubscriptions(t, topic)

			seq := uint64(0)
			send := func(ev wire.RouterEvent) {
				seq++
				s.set(wire.EncodeEventMessage(topic, 0x77, seq, uint64(time.Now().UnixMilli()), wire.EncodeRouterEvent(ev)))
			}
			held := func() int {
				for _, mt := range ix.FindMatches([]uint64{101, 102, 103}, nil) {
					if mt.Rank == (load.Key{Namespace: load.NS("dynamo"), WorkerID: 7}) {
						return mt.Blocks
					}
				}
				return 0
			}
			send(wire.RouterEvent{WorkerID: 7, EventID: 1, Kind: wire.KVStored,
				Blocks: []wire.StoredBlock{{BlockHash: 1 << 63, TokensHash: 101}, {BlockHash: 1<<63 | 1, TokensHash: 102}, {BlockHash: 1<<63 | 2, TokensHash: 103}}})
			testutil.Eventually(t, 20*time.Second, "stored blocks indexed", func() bool { return held() == 3 })
			if promtest.ToFloat64(m.Subscriptions.WithLabelValues(load.StateConnected, "direct")) != 1 {
				t.Error("the subscription gauge does not read connected")
			}
			testutil.Eventually(t, 10*time.Second, "a resent message is a replay", func() bool {
				return promtest.ToFloat64(m.Events.WithLabelValues(kv.ResultReplay)) > 0
			})
			if subs := subs.Subscriptions(); len(subs) != 1 || subs[0].Family != "kv-events" || subs[0].PublisherID != 0x77 {
				t.Errorf("subscriptions %+v", subs)
			}
			send(wire.RouterEvent{WorkerID: 7, EventID: 2, Kind: wire.KVRemoved, Removed: []uint64{1<<63 | 2}})
			testutil.Eventually(t, 10*time.Second, "removed block", func() bool { return held() == 2 })
			// Events 3 and 4 never come: the rank starts over from this one.
			send(wire.RouterEvent{WorkerID: 7, EventID: 5, Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: 9, TokensHash: 101}}})
			testutil.Eventually(t, 10*time.Second, "a gap clears the rank", func() bool {
				return held() == 1 && promtest.ToFloat64(m.Events.WithLabelValues(kv.ResultGap)) == 1
			})
			// The publisher leaves: what it fed goes.
			r.Delete(fmt.Sprintf("v1/event_channels/namespace/dynamo/topic/%s/%x", wire.EncodeSegment(topic), 0x77))
			reg.Publish(r.Build(time.Unix(1_800_000_000, 0)))
			testutil.Eventually(t, 10*time.Second, "the departed publisher's blocks dropped", func() bool {
				return held() == 0 && len(subs.Subscriptions()) == 0
			})
		})
	}
}

// TestSubscriptionsWorkerIsNamespaceAndID: two graphs each run a worker
// with instance id 7. The blocks a publisher reports are its namespace's
// worker's: canary's publisher's stored event credits canary's worker 7
// only, and prod's worker 7 leaving takes none of them.
func TestSubscriptionsWorkerIsNamespaceAndID(t *testing.T) {
	t.Parallel()
	pub := testutil.StartGoPublisher(t)
	r, reg := fleet.NewReducer(), fleet.NewRegistry(nil, nil)
	nsKVRecords(r, reg, "canary", 7, 0xc7, "kv-events", pub.Endpoint)
	nsKVRecords(r, reg, "prod", 7, 0xd7, "kv-events", "tcp://127.0.0.1:1")
	ix := kv.NewIndex()
	subs, s := startSubscriptions(t, reg, ix, telemetry.NewKVMetrics(nil), pub)

	s.set(wire.EncodeEventMessage("kv-events", 0xc7, 1, uint64(time.Now().UnixMilli()), wire.EncodeRouterEvent(wire.RouterEvent{
		WorkerID: 7, EventID: 1, Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: 1, TokensHash: 101}, {BlockHash: 2, TokensHash: 102}}})))
	canary := load.Key{Namespace: load.NS("canary"), WorkerID: 7}
	matches := func() []kv.Match { return ix.FindMatches([]uint64{101, 102}, nil) }
	testutil.Eventually(t, 20*time.Second, "canary's blocks indexed", func() bool { return len(matches()) > 0 })
	if got := matches(); len(got) != 1 || got[0] != (kv.Match{Rank: canary, Blocks: 2}) {
		t.Fatalf("matches %+v, want canary's worker 7 holding 2 blocks", got)
	}
	// Prod's worker 7 and its publisher leave (the gate is installed
	// before the subscriptions follow); canary's keeps its blocks.
	r.Delete("v1/instances/prod/decode/generate/7")
	r.Delete(fmt.Sprintf("v1/event_channels/namespace/prod/topic/kv-events/%x", 0xd7))
	reg.Publish(r.Build(time.Unix(1_800_000_000, 0)))
	testutil.Eventually(t, 10*time.Second, "prod's publisher unsubscribed", func() bool { return len(subs.Subscriptions()) == 1 })
	if got := matches(); len(got) != 1 || got[0] != (kv.Match{Rank: canary, Blocks: 2}) {
		t.Fatalf("after prod's worker 7 left: matches %+v, want canary's 2 blocks", got)
	}
}

// refusing is a connector that never connects.
type refusing struct{}

func (refusing) Transport() string { return "direct" }
func (refusing) Connect(context.Context, zmtp.Target) (net.Conn, error) {
	return nil, errors.New("connection refused")
}

// TestSubscriptionsAgeOut: the blocks a subscription fed stay while it
// reconnects, and go once it has been without a session for StaleAfter.
func TestSubscriptionsAgeOut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, reg := fleet.NewReducer(), fleet.NewRegistry(nil, nil)
		kvRecords(r, reg, 7, 0x77, "kv-events", "tcp://127.0.0.1:1")
		ix := kv.NewIndex()
		subs := kv.NewSubscriptions(reg, ix, refusing{}, nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = subs.Run(ctx) }()
		synctest.Wait() // the live gate is set
		ev := wire.RouterEvent{WorkerID: 7, EventID: 1, Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: 1, TokensHash: 101}}}
		if out := ix.Apply(kv.SubscriptionID(0x77), load.NS("dynamo"), &ev); out.Result != kv.ResultAccepted {
			t.Fatalf("stored: %+v", out)
		}
		held := func() int { return len(ix.FindMatches([]uint64{101}, nil)) }
		time.Sleep(kv.StaleAfter - time.Second)
		synctest.Wait()
		if held() != 1 {
			t.Fatal("dropped before StaleAfter")
		}
		time.Sleep(kv.StaleAfter / 3)
		synctest.Wait()
		if held() != 0 {
			t.Error("still held after StaleAfter without a session")
		}
		if st := ix.Stats(); st.Cursors != 1 {
			t.Errorf("%d cursors after ageing, want 1: the events missed meanwhile must show as a gap", st.Cursors)
		}
		cancel()
		<-done
	})
}

// TestSubscriptionsGaugesAfterStop: the index gauges follow events within
// a second or so (not only when the fleet changes or a subscription ages
// out, up to a minute later); once the subscriptions stop (KV-aware
// selection or discovery turned off), they say the blocks they fed are
// gone rather than keep their last values.
func TestSubscriptionsGaugesAfterStop(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, reg := fleet.NewReducer(), fleet.NewRegistry(nil, nil)
		kvRecords(r, reg, 7, 0x77, "kv-events", "tcp://127.0.0.1:1")
		ix := kv.NewIndex()
		m := telemetry.NewKVMetrics(nil)
		subs := kv.NewSubscriptions(reg, ix, refusing{}, m, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = subs.Run(ctx) }()
		synctest.Wait()
		ev := wire.RouterEvent{WorkerID: 7, EventID: 1, Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: 1, TokensHash: 101}}}
		if out := ix.Apply(kv.SubscriptionID(0x77), load.NS("dynamo"), &ev); out.Result != kv.ResultAccepted {
			t.Fatalf("stored: %+v", out)
		}
		time.Sleep(2 * time.Second) // no fleet change: the gauges follow anyway
		synctest.Wait()
		if v := promtest.ToFloat64(m.IndexNodes); v != 1 {
			t.Fatalf("nodes gauge %v 2 s after an accepted event, want 1", v)
		}
		cancel()
		<-done
		if v := promtest.ToFloat64(m.IndexNodes); v != 0 {
			t.Errorf("nodes gauge %v after the subscriptions stopped, want 0", v)
		}
	})
}

// TestSubscriptionsAgeOutOnTime: a subscription that starts after the
// others is dropped StaleAfter after it started, within a second, not at
// some later periodic check.
func TestSubscriptionsAgeOutOnTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, reg := fleet.NewReducer(), fleet.NewRegistry(nil, nil)
		kvRecords(r, reg, 7, 0x77, "kv-events", "tcp://127.0.0.1:1")
		ix := kv.NewIndex()
		subs := kv.NewSubscriptions(reg, ix, refusing{}, nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = subs.Run(ctx) }()
		synctest.Wait()
		// A second publisher, out of step with the first.
		time.Sleep(7 * time.Second)
		kvRecords(r, reg, 8, 0x88, "kv-events", "tcp://127.0.0.1:2")
		synctest.Wait() // its subscription started, the live gate is set
		storeAndAgeOut(t, ix, 0x88, 8)
		cancel()
		<-done
	})
}

// TestSubscriptionsTakeALongPromptsEvent: a stored event of more blocks
// than upstream's batches hold comes alone (a prompt over 131,072 tokens at
// block size 16); it fits the frame, so it is indexed, not dropped as
// malformed, and the rank's cursor moves on without a gap.
func TestSubscriptionsTakeALongPromptsEvent(t *testing.T) {
	t.Parallel()
	_, _, ix, m, _, s := runSubscriptions(t, "kv-events")

	const n = 9000 // over upstream's 8192-block batches
	ev := wire.RouterEvent{WorkerID: 7, EventID: 1, Kind: wire.KVStored}
	prompt := make([]uint64, n)
	for i := range n {
		prompt[i] = uint64(1_000_000 + i)
		ev.Blocks = append(ev.Blocks, wire.StoredBlock{BlockHash: uint64(i + 1), TokensHash: prompt[i]})
	}
	payload := wire.EncodeRouterEvent(ev)
	if len(payload) > wire.MaxKVEventsPayloadBytes {
		t.Fatalf("the event takes %d bytes, over the frame cap", len(payload))
	}
	s.set(wire.EncodeEventMessage("kv-events", 0x77, 1, uint64(time.Now().UnixMilli()), payload))
	held := func() int {
		for _, mt := range ix.FindMatches(prompt, nil) {
			if mt.Rank == (load.Key{Namespace: load.NS("dynamo"), WorkerID: 7}) {
				return mt.Blocks
			}
		}
		return 0
	}
	testutil.Eventually(t, 20*time.Second, "the long prompt's blocks indexed", func() bool { return held() == n })
	// The next event follows on: no gap.
	s.set(wire.EncodeEventMessage("kv-events", 0x77, 2, uint64(time.Now().UnixMilli()),
		wire.EncodeRouterEvent(wire.RouterEvent{WorkerID: 7, EventID: 2, Kind: wire.KVRemoved, Removed: []uint64{n}})))
	testutil.Eventually(t, 10*time.Second, "the next event applied", func() bool { return held() == n-1 })
	if got := promtest.ToFloat64(m.Events.WithLabelValues(wire.ResultMalformed)); got != 0 {
		t.Errorf("%v malformed", got)
	}
	if got := promtest.ToFloat64(m.Events.WithLabelValues(kv.ResultGap)); got != 0 {
		t.Errorf("%v gaps", got)
	}
}

// TestSubscriptionsAgeOutAcrossATransportSwitch: a publisher that stays
// without a session through a transport switch ages out a minute after it
// lost its session, not a minute after the switch, and the drop is logged
// as a warning.
func TestSubscriptionsAgeOutAcrossATransportSwitch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, reg := fleet.NewReducer(), fleet.NewRegistry(nil, nil)
		kvRecords(r, reg, 7, 0x77, "kv-events", "tcp://127.0.0.1:1")
		ix := kv.NewIndex()
		var logs testutil.SyncBuffer
		subs := kv.NewSubscriptions(reg, ix, refusing{}, nil, slog.New(slog.NewTextHandler(&logs, nil)))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = subs.Run(ctx) }()
		synctest.Wait()
		ev := wire.RouterEvent{WorkerID: 7, EventID: 1, Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: 1, TokensHash: 101}}}
		if out := ix.Apply(kv.SubscriptionID(0x77), load.NS("dynamo"), &ev); out.Result != kv.ResultAccepted {
			t.Fatalf("stored: %+v", out)
		}
		held := func() int { return len(ix.FindMatches([]uint64{101}, nil)) }
		time.Sleep(kv.StaleAfter * 2 / 3)
		subs.SetConnector(refusing{})
		synctest.Wait()
		if held() != 1 {
			t.Fatal("dropped before StaleAfter")
		}
		time.Sleep(kv.StaleAfter/3 + kv.StaleAfter/6)
		synctest.Wait()
		if held() != 0 {
			t.Error("the switch restarted the staleness clock")
		}
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "its blocks are dropped") {
			t.Errorf("the drop was not logged as a warning:\n%s", logs.String())
		}
		cancel()
		<-done
	})
}

// TestSubscriptionsAgeOutAfterARecordChange: a publisher whose record
// changes is restarted; the replacement's subscription still ages out (the
// old one's stop must not forget the new reader).
func TestSubscriptionsAgeOutAfterARecordChange(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, reg := fleet.NewReducer(), fleet.NewRegistry(nil, nil)
		kvRecords(r, reg, 7, 0x77, "kv-events", "tcp://127.0.0.1:1")
		ix := kv.NewIndex()
		subs := kv.NewSubscriptions(reg, ix, refusing{}, nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = subs.Run(ctx) }()
		synctest.Wait()
		kvRecords(r, reg, 7, 0x77, "kv-events", "tcp://127.0.0.1:2") // moved
		synctest.Wait()
		ev := wire.RouterEvent{WorkerID: 7, EventID: 1, Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: 1, TokensHash: 101}}}
		if out := ix.Apply(kv.SubscriptionID(0x77), load.NS("dynamo"), &ev); out.Result != kv.ResultAccepted {
			t.Fatalf("stored: %+v", out)
		}
		time.Sleep(kv.StaleAfter + kv.StaleAfter/6)
		synctest.Wait()
		if len(ix.FindMatches([]uint64{101}, nil)) != 0 {
			t.Error("the restarted subscription never aged out")
		}
		cancel()
		<-done
	})
}

// TestSubscriptionsJudgeMessagesOverTheLimits: a message the transport
// cuts to its limits is counted by what is wrong with it: five frames are
// malformed (not oversized), as over a kv_metrics subscription.
func TestSubscriptionsJudgeMessagesOverTheLimits(t *testing.T) {
	t.Parallel()
	_, _, _, m, _, s := runSubscriptions(t, "kv-events")
	msg := wire.EncodeEventMessage("kv-events", 0x77, 1, uint64(time.Now().UnixMilli()), wire.EncodeRouterEvent(wire.RouterEvent{WorkerID: 7, EventID: 1, Kind: wire.KVCleared}))
	s.set(append(msg, []byte("a fifth frame")))
	testutil.Eventually(t, 10*time.Second, "the five-frame message counted", func() bool {
		return promtest.ToFloat64(m.Events.WithLabelValues(wire.ResultMalformed)) > 0
	})
	if n := promtest.ToFloat64(m.Events.WithLabelValues(wire.ResultOversized)); n != 0 {
		t.Errorf("%v messages counted oversized", n)
	}
}

// TestSubscriptionsRecordChangeKeepsTheNewSession: a publisher whose
// record changed loses what its old subscription fed when the new one is
// made, not when the old one is told stopped, which may come after the
// new session fed the index; the old reader applies nothing after.
func TestSubscriptionsRecordChangeKeepsTheNewSession(t *testing.T) {
	t.Parallel()
	reg, ix := fleet.NewRegistry(nil, nil), kv.NewIndex()
	ix.SetLive(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 7}: {DPSize: 1}})
	subs := kv.NewSubscriptions(reg, ix, refusing{}, nil, nil)
	old := fleet.Publisher{Namespace: "dynamo", Topic: "kv-events", PublisherID: 0x77, Key: "v1/event_channels/a"}
	moved := old
	moved.Key = "v1/event_channels/b"
	apply := func(id, hash, tokens uint64) {
		ev := wire.RouterEvent{WorkerID: 7, EventID: id, Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: hash, TokensHash: tokens}}}
		if out := ix.Apply(kv.SubscriptionID(0x77), load.NS("dynamo"), &ev); out.Result != kv.ResultAccepted {
			t.Fatalf("stored: %+v", out)
		}
	}
	apply(1, 1, 101) // the old session's block
	subs.ReplaceForTest(old, moved, func(oldMessage func([][]byte)) {
		apply(1, 2, 202)
		// The old loop delivering a message it had read: nothing of it
		// is applied.
		oldMessage(wire.EncodeEventMessage("kv-events", 0x77, 9, 0, wire.EncodeRouterEvent(wire.RouterEvent{WorkerID: 7, EventID: 2,
			Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: 3, TokensHash: 303}}})))
	})
	if len(ix.FindMatches([]uint64{101}, nil)) != 0 {
		t.Error("the old session's block outlived the record change")
	}
	if len(ix.FindMatches([]uint64{303}, nil)) != 0 {
		t.Error("the replaced reader applied a message after its replacement")
	}
	if len(ix.FindMatches([]uint64{202}, nil)) != 1 {
		t.Error("the new session's block was dropped when the old subscription was told stopped")
	}
}

// TestSubscriptionsDepartedReaderAppliesNothing: a message a departed
// publisher's loop delivers after it was told stopped brings nothing back
// into the index (no reader is left to age such blocks out).
func TestSubscriptionsDepartedReaderAppliesNothing(t *testing.T) {
	t.Parallel()
	reg, ix := fleet.NewRegistry(nil, nil), kv.NewIndex()
	ix.SetLive(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 7}: {DPSize: 1}})
	subs := kv.NewSubscriptions(reg, ix, refusing{}, nil, nil)
	late := subs.DepartForTest(fleet.Publisher{Namespace: "dynamo", Topic: "kv-events", PublisherID: 0x77, Key: "v1/event_channels/a"})
	late(wire.EncodeEventMessage("kv-events", 0x77, 1, 0, wire.EncodeRouterEvent(wire.RouterEvent{WorkerID: 7, EventID: 1,
		Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: 4, TokensHash: 404}}})))
	if len(ix.FindMatches([]uint64{404}, nil)) != 0 {
		t.Error("a departed publisher's late message was applied")
	}
}

// storeAndAgeOut stores a block of worker through subscription sub, which
// has no session, and checks, inside a synctest bubble, that it is held
// until kv.StaleAfter and gone a second past it.
func storeAndAgeOut(t *testing.T, ix *kv.Index, sub kv.SubscriptionID, worker uint64) {
	t.Helper()
	ev := wire.RouterEvent{WorkerID: worker, EventID: 1, Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: 1, TokensHash: 101}}}
	if out := ix.Apply(sub, load.NS("dynamo"), &ev); out.Result != kv.ResultAccepted {
		t.Fatalf("stored: %+v", out)
	}
	held := func() int { return len(ix.FindMatches([]uint64{101}, nil)) }
	time.Sleep(kv.StaleAfter - time.Second)
	synctest.Wait()
	if held() != 1 {
		t.Fatal("dropped before StaleAfter")
	}
	time.Sleep(2 * time.Second)
	synctest.Wait()
	if held() != 0 {
		t.Error("still held a second past StaleAfter without a session")
	}
}
