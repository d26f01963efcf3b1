package routerd

import (
	"context"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/router"
)

// TestRunLeavesNoTimer: once Run has returned, nothing of the daemon is
// left to run: the timer that cuts the requests of servers a reload
// replaced at the end of the shutdown's grace is stopped (or has fired),
// not left pending for the whole grace, holding the daemon.
func TestRunLeavesNoTimer(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Server.BindAddress = "127.0.0.1:0"
	d, err := New(cfg, Deps{ShutdownGrace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	// Run returned within a second of an hour's grace: the grace timer
	// must not still be pending (it fires endRetiring an hour from now).
	if d.graceEnd.Stop() {
		t.Error("Run returned with the grace timer still pending: it holds the daemon, and ends retireEnd, for the whole grace after Run")
	}
	if d.retireEnd.Err() == nil {
		t.Error("Run returned with the retiring servers' context still open")
	}
}

// TestCountTokensLoadingReason: the router answers kv's reason for
// artifacts still loading as the moment's wait it is.
func TestCountTokensLoadingReason(t *testing.T) {
	t.Parallel()
	if router.CountTokensLoading != kv.CountLoading {
		t.Fatalf("router.CountTokensLoading %q, kv.CountLoading %q", router.CountTokensLoading, kv.CountLoading)
	}
}
