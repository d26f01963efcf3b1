package kv_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// TestKVTransportSwitchKeepsCursors: a transport
// switch restarts the kv-events subscription without resetting the KV
// index; the restarted subscription inherits each rank's event_id cursor,
// so a resent event is a replay (the blocks stay) and an event missed
// during the switch is a gap.
func TestKVTransportSwitchKeepsCursors(t *testing.T) {
	t.Parallel()
	_, _, ix, m, subs, s := runSubscriptions(t, "kv-events")
	held := func() int {
		for _, mt := range ix.FindMatches([]uint64{101, 102, 103}, nil) {
			if mt.Rank == (load.Key{Namespace: load.NS("dynamo"), WorkerID: 7}) {
				return mt.Blocks
			}
		}
		return 0
	}
	s.set(wire.EncodeEventMessage("kv-events", 0x77, 1, uint64(time.Now().UnixMilli()), wire.EncodeRouterEvent(wire.RouterEvent{WorkerID: 7, EventID: 1, Kind: wire.KVStored,
		Blocks: []wire.StoredBlock{{BlockHash: 1, TokensHash: 101}, {BlockHash: 2, TokensHash: 102}, {BlockHash: 3, TokensHash: 103}}})))
	testutil.Eventually(t, 20*time.Second, "stored blocks indexed", func() bool { return held() == 3 })

	replays := promtest.ToFloat64(m.Events.WithLabelValues(kv.ResultReplay))
	subs.SetConnector(&zmtp.Direct{})
	// The restarted subscription reads the resent event 1 again: a replay.
	testutil.Eventually(t, 20*time.Second, "a replay after the switch", func() bool {
		st := subs.Subscriptions()
		return len(st) == 1 && st[0].State == load.StateConnected && promtest.ToFloat64(m.Events.WithLabelValues(kv.ResultReplay)) > replays+1
	})
	if held() != 3 || promtest.ToFloat64(m.Events.WithLabelValues(kv.ResultGap)) != 0 {
		t.Fatalf("after the switch: %d blocks held, %v gaps; want 3 and 0", held(), promtest.ToFloat64(m.Events.WithLabelValues(kv.ResultGap)))
	}
	// Event 2 was missed during the switch.
	s.set(wire.EncodeEventMessage("kv-events", 0x77, 2, uint64(time.Now().UnixMilli()), wire.EncodeRouterEvent(wire.RouterEvent{WorkerID: 7, EventID: 3, Kind: wire.KVRemoved, Removed: []uint64{3}})))
	testutil.Eventually(t, 10*time.Second, "the missed event is a gap", func() bool {
		return promtest.ToFloat64(m.Events.WithLabelValues(kv.ResultGap)) == 1
	})
}

// routeless is a gated connector no carrier ever covers.
type routeless struct{ ch chan struct{} }

func (routeless) Transport() string { return "broker" }
func (routeless) Connect(context.Context, zmtp.Target) (net.Conn, error) {
	return nil, errors.New("no route")
}
func (r routeless) Ready(zmtp.Target) <-chan struct{} { return r.ch }
func (routeless) OpenTimeout() time.Duration          { return 30 * time.Second }

// TestKVPendingAgesOut: a kv-events subscription that
// stays pending (no broker covers its namespace) for KV_EVENTS_STALE_AFTER
// has its ranks cleared, as one that cannot connect does; until then the
// blocks stay.
func TestKVPendingAgesOut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r, reg := fleet.NewReducer(), fleet.NewRegistry(nil, nil)
		kvRecords(r, reg, 7, 0x77, "kv-events", "tcp://127.0.0.1:1")
		ix := kv.NewIndex()
		subs := kv.NewSubscriptions(reg, ix, routeless{ch: make(chan struct{})}, nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = subs.Run(ctx) }()
		synctest.Wait()
		if st := subs.Subscriptions(); len(st) != 1 || st[0].State != load.StatePending || st[0].Transport != "broker" {
			t.Fatalf("subscriptions %+v, want one pending broker subscription", st)
		}
		storeAndAgeOut(t, ix, 0x77, 7)
		cancel()
		<-done
	})
}
