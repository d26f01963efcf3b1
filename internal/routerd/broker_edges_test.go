package routerd_test

import (
	"net"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/eventbus/agent"
	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestBrokerTimings pins the timings of subscriptions through brokers,
// which operators and the brokers' own deployments rely on: 30 s to open
// a stream, 10 s to connect, 1 s to close, 500 ms of pending wake jitter,
// session loss grace and first reconnect delay, 60 s before a kv-events
// subscription's blocks age out, 250 ms of coverage debounce.
func TestBrokerTimings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{
		{"open timeout", eventbus.OpenTimeout, 30 * time.Second},
		{"connect budget (handshake)", load.ConnectTimeout, 10 * time.Second},
		{"connect budget (broker side)", agent.SourceConnectTimeout, 10 * time.Second},
		{"close timeout", eventbus.CloseTimeout, time.Second},
		{"pending wake jitter", load.PendingWakeJitter, 500 * time.Millisecond},
		{"session loss grace", eventbus.SessionLossGrace, 500 * time.Millisecond},
		{"reconnect initial", load.ReconnectInitial, 500 * time.Millisecond},
		{"kv-events stale after", kv.StaleAfter, 60 * time.Second},
		{"coverage debounce", routerd.CoverageDebounce, 250 * time.Millisecond},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestBrokerTransportWithoutBusStaysPending: with no event bus to carry
// them (the bus disabled), broker subscriptions stay pending and never
// fall back to dialling the publisher directly.
func TestBrokerTransportWithoutBusStaysPending(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	pki := testutil.NewTestPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialled := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
			select {
			case dialled <- struct{}{}:
			default:
			}
		}
	}()
	testutil.WriteFileWorker(t, root, testutil.FileWorker{Namespace: "a", InstanceID: 0x100, LoadPublisherID: 0x200, LoadEndpoint: "tcp://" + ln.Addr().String()})
	f := startReload(t, busYAML("http://127.0.0.1:1", root, pki, "broker", false, ""))
	testutil.Eventually(t, 10*time.Second, "a pending broker subscription", func() bool {
		v := f.workersView()
		return len(v.Subscriptions) == 1 && v.Subscriptions[0].State == "pending" && v.Subscriptions[0].Transport == "broker"
	})
	select {
	case <-dialled:
		t.Fatal("the publisher was dialled directly")
	case <-time.After(2 * time.Second):
	}
	v := f.workersView()
	if len(v.BrokerCoverage) != 1 || v.BrokerCoverage[0].Covered || v.BrokerCoverage[0].PendingSubscriptions != 1 {
		t.Errorf("broker_coverage %+v", v.BrokerCoverage)
	}
	if s := v.Subscriptions; len(s) != 1 || s[0].State != "pending" {
		t.Errorf("subscriptions %+v", s)
	}
}
