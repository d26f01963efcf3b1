package eventbus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/eventbus/agent"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// TestPlacementSkipsFullSession: open_stream places a
// stream on the highest-weight session *below max_streams*: when the
// session the weight names is full, the next-ranked covering session takes
// the stream; when every covering session is full, ErrTooManyStreams.
func TestPlacementSkipsFullSession(t *testing.T) {
	t.Parallel()
	tb := startBus(t, func(s *eventbus.Settings, _ *eventbus.Timeouts) { s.MaxStreamsPerSession = 1 })
	pub := testutil.StartGoPublisher(t)
	tb.brokerAgent(t, brokerA, tokenA, []string{"dynamo"}, nil)
	tb.brokerAgent(t, brokerB, tokenB, []string{"dynamo"}, nil)
	testutil.Eventually(t, 10*time.Second, "two sessions", func() bool { return tb.SessionCount() == 2 })
	// Two targets whose weight names broker A.
	var onA []eventbus.Target
	for i := 0; len(onA) < 2 && i < 64; i++ {
		tg := targetOf(t, "dynamo", pub.Endpoint, fmt.Sprintf("topic%d", i))
		if eventbus.Weight(tg, brokerA) > eventbus.Weight(tg, brokerB) {
			onA = append(onA, tg)
		}
	}
	first, err := tb.OpenStream(t.Context(), onA[0])
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if first.Carrier() != brokerA {
		t.Fatalf("first on %s, want %s", first.Carrier(), brokerA)
	}
	second, err := tb.OpenStream(t.Context(), onA[1])
	if err != nil {
		t.Fatalf("the next-ranked session was not used: %v", err)
	}
	defer second.Close()
	if second.Carrier() != brokerB {
		t.Errorf("second on %s, want %s (A is at max_streams)", second.Carrier(), brokerB)
	}
	if _, err := tb.OpenStream(t.Context(), onA[0]); !errors.Is(err, eventbus.ErrTooManyStreams) {
		t.Errorf("every session full: %v, want ErrTooManyStreams", err)
	}
}

// TestNewBrokerMovesNoOpenStream: a broker added to a
// namespace does not move streams already open, even those its weight
// would now win.
func TestNewBrokerMovesNoOpenStream(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	pub := testutil.StartGoPublisher(t)
	tb.brokerAgent(t, brokerA, tokenA, []string{"dynamo"}, nil)
	testutil.Eventually(t, 10*time.Second, "namespace covered", func() bool { return tb.Covers("dynamo") })
	var tg eventbus.Target
	for i := 0; i < 64; i++ {
		tg = targetOf(t, "dynamo", pub.Endpoint, fmt.Sprintf("kv_metrics%d", i))
		if eventbus.Weight(tg, brokerB) > eventbus.Weight(tg, brokerA) {
			break
		}
	}
	c, err := tb.OpenStream(t.Context(), tg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	zs := subscribe(t, c, tg.Topic)
	receive(t, pub, zs, [][]byte{[]byte(tg.Topic), []byte("before")})
	tb.brokerAgent(t, brokerB, tokenB, []string{"dynamo"}, nil)
	testutil.Eventually(t, 10*time.Second, "two sessions", func() bool { return tb.SessionCount() == 2 })
	time.Sleep(eventbus.SessionLossGrace + 200*time.Millisecond)
	receive(t, pub, zs, [][]byte{[]byte(tg.Topic), []byte("after")})
	if c.Carrier() != brokerA {
		t.Errorf("the open stream is on %s, want it kept on %s", c.Carrier(), brokerA)
	}
}

// TestFailoverToNextBroker: with two brokers covering
// a namespace, the death of the one carrying a subscription is noticed
// within SESSION_LOSS_GRACE and the subscription reconnects through the
// next-ranked broker after at most RECONNECT_INITIAL, without going
// pending (the namespace stays covered).
func TestFailoverToNextBroker(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	pub := testutil.StartGoPublisher(t)
	tg := targetOf(t, "dynamo", pub.Endpoint, "kv_metrics")
	winner, winTok, loser, loseTok := brokerA, tokenA, brokerB, tokenB
	if eventbus.Weight(tg, brokerB) > eventbus.Weight(tg, brokerA) {
		winner, winTok, loser, loseTok = brokerB, tokenB, brokerA, tokenA
	}
	proxy := testutil.StartProxy(t, tb.addr, 0)
	c, err := agent.New(agent.Options{Router: "https://" + proxy.Addr(), ID: winner, Role: eventbus.RoleBroker, Token: winTok,
		RootCAs: tb.roots(t), Namespaces: []string{"dynamo"},
		Opener: &agent.Publishers{Namespaces: []string{"dynamo"}, Advertised: func(eventbus.Target) bool { return true }}})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, c)
	tb.brokerAgent(t, loser, loseTok, []string{"dynamo"}, nil)
	testutil.Eventually(t, 10*time.Second, "two sessions", func() bool { return tb.SessionCount() == 2 })

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
	testutil.Eventually(t, 15*time.Second, "connected through the winner", func() bool {
		_ = pub.Send([][]byte{[]byte("kv_metrics"), []byte("s")})
		n, m, _ := h.counts()
		return n == 1 && m > 0
	})
	mu.Lock()
	states = nil
	mu.Unlock()
	proxy.Close()
	cut := time.Now()
	testutil.Eventually(t, 10*time.Second, "reconnected", func() bool { n, _, _ := h.counts(); return n == 2 })
	took := time.Since(cut)
	t.Logf("failover took %v", took)
	if took > 5*(eventbus.SessionLossGrace+load.ReconnectInitial) { // a bound with room for a loaded machine
		t.Errorf("failover took %v", took)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(carriers) != 2 || carriers[0] != winner || carriers[1] != loser {
		t.Errorf("carriers %v, want [%s %s]", carriers, winner, loser)
	}
	for _, s := range states {
		if s == load.StatePending {
			t.Errorf("went pending with the namespace still covered: %v", states)
		}
	}
}
