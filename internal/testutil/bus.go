package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/eventbus"
)

// StartBus runs an event bus listener on a loopback port with pki's
// server certificate and the given credentials (small session limits, a
// 1 s heartbeat, a 5 s idle timeout), waits until it listens, and stops it
// when the test ends.
func StartBus(tb testing.TB, pki *TestPKI, entries ...eventbus.Entry) *eventbus.Bus {
	tb.Helper()
	return StartBusWith(tb, eventbus.Settings{Listen: "127.0.0.1:0", CertFile: pki.ServerCert, KeyFile: pki.ServerKey,
		Entries: entries, MaxSessions: 4, MaxStreamsPerSession: 8, MaxSessionBufferBytes: 8 << 16,
		HeartbeatInterval: time.Second, IdleTimeout: 5 * time.Second})
}

// StartBusWith runs an event bus listener with s, waits until it listens,
// and stops it when the test ends.
func StartBusWith(tb testing.TB, s eventbus.Settings) *eventbus.Bus {
	tb.Helper()
	bus, err := eventbus.New(s, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = bus.Run(ctx) }()
	tb.Cleanup(func() { stop(); <-done })
	Eventually(tb, 10*time.Second, "the bus listening", func() bool { return bus.LocalAddr() != nil })
	return bus
}
