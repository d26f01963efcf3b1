package cmdutil

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/sources"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// Fleet is a discovery source watched for a command: its registry holds
// the fleet view from the first complete read on.
type Fleet struct {
	Registry *fleet.Registry
	// Source is the source's name; Generation the first view's generation.
	Source     string
	Generation uint64
	stop       func()
}

// Close stops watching.
func (f *Fleet) Close() { f.stop() }

// OpenFleet starts watching the source d configures (with the Kubernetes
// credentials the flags name) and waits up to timeout for its first
// complete read. An unreachable source's error carries the last reason a
// pass ended. When ctx ends first, the error is ctx's.
func (o *DiscoveryFlags) OpenFleet(ctx context.Context, d *config.Discovery, logger *slog.Logger, timeout time.Duration) (*Fleet, error) {
	src, backoff, err := sources.NewWithKube(d, logger, o.KubeClient())
	if err != nil {
		return nil, err
	}
	reg := fleet.NewRegistry(logger, nil)
	var mu sync.Mutex
	var lastErr error
	w := &discovery.Watcher{Source: src, Registry: reg, Backoff: backoff, Logger: logger,
		OnPassEnd: func(err error) { mu.Lock(); lastErr = err; mu.Unlock() }}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(wctx) // nil on cancellation; the backoff is validated
	}()
	f := &Fleet{Registry: reg, Source: src.Name(), stop: func() { cancel(); <-done }}
	waitCtx, cancelWait := context.WithTimeout(wctx, timeout)
	f.Generation, err = reg.Wait(waitCtx, 0)
	cancelWait()
	if err == nil {
		return f, nil
	}
	f.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	mu.Lock()
	reason := lastErr
	mu.Unlock()
	if reason == nil {
		reason = errors.New("no complete read yet")
	}
	return nil, fmt.Errorf("discovery source %s not reachable within %s: %w", src.Name(), timeout, reason)
}
