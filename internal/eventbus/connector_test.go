package eventbus_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/eventbus/agent"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// followThroughBus runs a kv_metrics subscription to endpoint through
// tb's brokers until the test ends, and returns what it counts.
func followThroughBus(t *testing.T, tb *testBus, endpoint string) *loopHandler {
	t.Helper()
	h := &loopHandler{}
	l := &load.Loop{Endpoint: endpoint, Namespace: "dynamo", Topic: "kv_metrics", Limits: zmtp.LimitsKVMetrics,
		Connector: &eventbus.Connector{Bus: tb.Bus}, Handler: h}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// loopHandler counts sessions and messages.
type loopHandler struct {
	mu        sync.Mutex
	connected int
	messages  int
	ended     []error
}

func (h *loopHandler) Connected()                  { h.mu.Lock(); h.connected++; h.mu.Unlock() }
func (h *loopHandler) Message([][]byte, time.Time) { h.mu.Lock(); h.messages++; h.mu.Unlock() }
func (h *loopHandler) Oversized()                  {}
func (h *loopHandler) Ended(err error)             { h.mu.Lock(); h.ended = append(h.ended, err); h.mu.Unlock() }
func (h *loopHandler) counts() (int, int, []error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.connected, h.messages, append([]error(nil), h.ended...)
}

// TestConnectorFailover: a subscription through the broker connector is
// pending until a broker covers its namespace, connects through it, goes
// back to pending when the broker dies (the session's loss is a lost
// carrier, retried at once), and carries on through a new broker without
// a restart.
func TestConnectorFailover(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	pub := testutil.StartGoPublisher(t)
	h := &loopHandler{}
	var mu sync.Mutex
	var states, carriers []string
	l := &load.Loop{Endpoint: pub.Endpoint, Namespace: "dynamo", Topic: "kv_metrics", Limits: zmtp.LimitsKVMetrics,
		Connector: &eventbus.Connector{Bus: tb.Bus}, Handler: h,
		State:   func(s string) { mu.Lock(); states = append(states, s); mu.Unlock() },
		Carrier: func(id string) { mu.Lock(); carriers = append(carriers, id); mu.Unlock() }}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	state := func() string { mu.Lock(); defer mu.Unlock(); return states[len(states)-1] }
	testutil.Eventually(t, 10*time.Second, "pending", func() bool { mu.Lock(); defer mu.Unlock(); return len(states) > 0 && states[0] == load.StatePending })

	// Broker A, through a proxy that can be cut.
	proxy := testutil.StartProxy(t, tb.addr, 0)
	c, err := agent.New(agent.Options{Router: "https://" + proxy.Addr(), ID: brokerA, Role: eventbus.RoleBroker, Token: tokenA,
		RootCAs: tb.roots(t), Namespaces: []string{"dynamo"},
		Opener: &agent.Publishers{Namespaces: []string{"dynamo"}, Advertised: func(eventbus.Target) bool { return true }}})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, c)
	flow := func(what string, sessions int) {
		t.Helper()
		testutil.Eventually(t, 15*time.Second, what, func() bool {
			_ = pub.Send([][]byte{[]byte("kv_metrics"), []byte("sample")})
			n, m, _ := h.counts()
			return n == sessions && m > 0 && state() == load.StateConnected
		})
	}
	flow("messages through broker A", 1)

	proxy.Close() // the broker killed: connections dropped, new ones refused
	lost := time.Now()
	testutil.Eventually(t, 10*time.Second, "pending again", func() bool { return state() == load.StatePending })
	if d := time.Since(lost); d > 2*time.Second {
		t.Errorf("the lost carrier took %v to notice and retry", d)
	}
	_, _, ended := h.counts()
	if len(ended) == 0 || !errors.Is(ended[len(ended)-1], zmtp.ErrCarrierLost) {
		t.Errorf("the session ended with %v, want a lost carrier", ended)
	}

	h.mu.Lock()
	h.messages = 0
	h.mu.Unlock()
	tb.brokerAgent(t, brokerB, tokenB, []string{"dynamo"}, nil)
	flow("messages through broker B", 2)
	mu.Lock()
	defer mu.Unlock()
	if len(carriers) != 2 || carriers[0] != brokerA || carriers[1] != brokerB {
		t.Errorf("carriers %v", carriers)
	}
}

// TestConnectorQuietSubscription: a subscription through the broker
// connector outlives a quiet publisher. The subscriber waits for the next
// message under a read deadline (zmtp.IdleAfter) and then without one; a
// stream whose reads ended with that deadline would be reconnected, and
// whatever the publisher sent meanwhile would be lost.
func TestConnectorQuietSubscription(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	pub := testutil.StartGoPublisher(t)
	tb.brokerAgent(t, brokerA, tokenA, []string{"dynamo"}, nil)
	h := followThroughBus(t, tb, pub.Endpoint)
	testutil.Eventually(t, 15*time.Second, "a message through the broker", func() bool {
		_ = pub.Send([][]byte{[]byte("kv_metrics"), []byte("sample")})
		_, m, _ := h.counts()
		return m > 0
	})
	for round := range 2 {
		// Quiet for longer than the subscriber waits with a deadline, and
		// than a failed stream waits to learn its carrier's fate.
		quiet := time.NewTimer(zmtp.IdleAfter + eventbus.SessionLossGrace + 500*time.Millisecond)
		select {
		case <-quiet.C:
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
		_, before, _ := h.counts()
		if err := pub.Send([][]byte{[]byte("kv_metrics"), []byte("after the quiet")}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, "the message after the quiet", func() bool {
			_, m, _ := h.counts()
			return m > before
		})
		if n, _, ended := h.counts(); n != 1 || len(ended) != 0 {
			t.Fatalf("round %d: %d sessions, ended with %v; want the first session still up", round, n, ended)
		}
	}
}

// TestConnectorWithoutBus: with no bus (the event bus disabled), a broker
// subscription stays pending and never dials.
func TestConnectorWithoutBus(t *testing.T) {
	t.Parallel()
	c := &eventbus.Connector{}
	if c.Ready(zmtp.Target{Namespace: "dynamo"}) == nil {
		t.Error("ready without a bus")
	}
	if _, err := c.Connect(t.Context(), zmtp.Target{Endpoint: "tcp://127.0.0.1:1", Namespace: "dynamo"}); !errors.Is(err, eventbus.ErrNoSession) {
		t.Errorf("connect: %v", err)
	}
	if c.Transport() != "broker" {
		t.Error(c.Transport())
	}
}

// TestRefusalKinds: the codes a stream can be refused with that the
// readers tell apart: draining is a lost carrier (moved at once, no
// backoff), publisher_closed a protocol error (the end of a stream that
// came before its data stream, as a direct connection's close before its
// greeting), any other neither.
func TestRefusalKinds(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]error{eventbus.CodeDraining: zmtp.ErrCarrierLost, eventbus.CodePublisherClosed: zmtp.ErrProtocol} {
		if err := error(&eventbus.RefusedError{Code: code}); !errors.Is(err, want) {
			t.Errorf("%s: %v is not %v", code, err, want)
		}
	}
	other := error(&eventbus.RefusedError{Code: eventbus.CodeTargetNotAdvertised})
	if errors.Is(other, zmtp.ErrProtocol) || errors.Is(other, zmtp.ErrCarrierLost) {
		t.Errorf("%v taken for a protocol error or a lost carrier", other)
	}
}

// TestConnectorPublisherClosedInHandshake: a publisher that closes every
// connection before its greeting ends a session through the broker as it
// ends one directly, a protocol error (which the load and KV readers count
// as transport_refused), and the broker's reason, publisher_closed, reaches
// the error rather than the data stream's bare end.
func TestConnectorPublisherClosedInHandshake(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	tb := startBus(t, nil)
	tb.brokerAgent(t, brokerA, tokenA, []string{"dynamo"}, nil)
	for _, tc := range []struct {
		name string
		conn zmtp.Connector
	}{{"direct", &zmtp.Direct{}}, {"broker", &eventbus.Connector{Bus: tb.Bus}}} {
		h := &loopHandler{}
		l := &load.Loop{Endpoint: "tcp://" + ln.Addr().String(), Namespace: "dynamo", Topic: "kv_metrics", Limits: zmtp.LimitsKVMetrics,
			Connector: tc.conn, Handler: h}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); l.Run(ctx) }()
		testutil.Eventually(t, 10*time.Second, tc.name+": a session ended", func() bool { _, _, ended := h.counts(); return len(ended) > 0 })
		cancel()
		<-done
		_, _, ended := h.counts()
		if err := ended[0]; !errors.Is(err, zmtp.ErrProtocol) {
			t.Errorf("%s: the session ended with %v, want a protocol error", tc.name, err)
		} else if tc.name == "broker" && !strings.Contains(err.Error(), eventbus.CodePublisherClosed) {
			t.Errorf("%s: the session ended with %v, without the broker's reason", tc.name, err)
		}
	}
}

// TestSameCredentialYields: a second broker process with the same id and
// token (a second replica, or the next pod of a rollout) replaces the
// first's session, as the newer session of a credential does; the first
// then stays away for the backoff's ceiling instead of taking the session
// straight back, which would drop the streams it carries each time.
func TestSameCredentialYields(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	pub := testutil.StartGoPublisher(t)
	tb.brokerAgent(t, brokerA, tokenA, []string{"dynamo"}, nil)
	testutil.Eventually(t, 10*time.Second, "one session", func() bool { return tb.SessionCount() == 1 })
	h := followThroughBus(t, tb, pub.Endpoint)
	testutil.Eventually(t, 15*time.Second, "connected", func() bool {
		_ = pub.Send([][]byte{[]byte("kv_metrics"), []byte("s")})
		n, m, _ := h.counts()
		return n == 1 && m > 0
	})
	tb.brokerAgent(t, brokerA, tokenA, []string{"dynamo"}, nil) // the same credential again
	// Without yielding, the two take turns within a second or so each
	// (the reconnect backoff starts at 0.5 s).
	time.Sleep(4 * time.Second)
	n, _, _ := h.counts()
	if sup := strings.Count(tb.logs.String(), "code="+eventbus.CodeSessionSuperseded); sup != 1 || n > 2 {
		t.Errorf("two processes of one credential: %d sessions superseded, the subscription connected %d times", sup, n)
	}
}
