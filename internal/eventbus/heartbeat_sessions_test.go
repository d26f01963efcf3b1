package eventbus_test

import (
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/eventbus/agent"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestHeartbeatNotPastIdleTimeout: a heartbeat_interval at or past
// idle_timeout is refused: each side judges the other idle after
// idle_timeout without a line, so every session would end as idle_timeout
// before its next heartbeat.
func TestHeartbeatNotPastIdleTimeout(t *testing.T) {
	t.Parallel()
	pki := testutil.NewTestPKI(t)
	for _, hb := range []time.Duration{2 * time.Second, time.Second} {
		s := baseSettings(pki)
		s.HeartbeatInterval, s.IdleTimeout = hb, time.Second
		if _, err := eventbus.New(s, nil, nil); err == nil {
			t.Errorf("heartbeat %v with idle_timeout 1s: accepted", hb)
		}
	}
}

// TestBrokerSessionsCountedOnce: continuum_broker_sessions_total counts
// each session attempt once, by its result: a session that was welcomed
// and later ended (here superseded) is not also counted as failed.
func TestBrokerSessionsCountedOnce(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	m := telemetry.NewBrokerMetrics(nil)
	c, err := agent.New(agent.Options{Router: tb.url(), ID: brokerA, Role: eventbus.RoleBroker, Token: tokenA, RootCAs: tb.roots(t),
		Namespaces: []string{"dynamo"}, Metrics: m,
		Opener: &agent.Publishers{Namespaces: []string{"dynamo"}, Advertised: func(eventbus.Target) bool { return true }}})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, c)
	welcomed := m.Sessions.WithLabelValues("welcomed")
	testutil.Eventually(t, 10*time.Second, "welcomed", func() bool { return testutilToFloat(welcomed) == 1 })
	// The same credential elsewhere ends the agent's session (it then
	// waits 15-30 s before it tries again).
	rs := openSession(t, tb.dial(t, nil), tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	if rs.resp.StatusCode != 200 {
		t.Fatal(refusalOf(t, rs.resp))
	}
	testutil.Eventually(t, 10*time.Second, "the agent's session over", func() bool {
		return testutilToFloat(m.Connected) == 0
	})
	time.Sleep(200 * time.Millisecond)
	if f := testutilToFloat(m.Sessions.WithLabelValues("failed")); f != 0 {
		t.Errorf("one welcomed session counted as welcomed 1 and failed %v", f)
	}
}
