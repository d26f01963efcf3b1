// Package sources builds the configured discovery source, and opens a
// fleet view over it for the commands that read a fleet once or follow it
// (discover, tail-load, pin-artifact).
//
// Imports: config, discovery and its sources (etcd, filestore, kube), fleet.
package sources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/etcd"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/filestore"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// New returns the source selected by d.Source, and the backoff it runs
// under. Files it names (TLS) are read now and reported with their path.
// Kubernetes sources use in-cluster credentials, then KUBECONFIG.
func New(d *config.Discovery, logger *slog.Logger) (discovery.Source, discovery.Backoff, error) {
	return NewWithKube(d, logger, kube.ClientOptions{})
}

// NewWithKube is New with explicit Kubernetes credentials.
func NewWithKube(d *config.Discovery, logger *slog.Logger, client kube.ClientOptions) (discovery.Source, discovery.Backoff, error) {
	namespaces := d.Namespaces()
	switch d.Source {
	case config.SourceEtcd, "":
		s, err := etcd.New(d.Etcd, namespaces, logger)
		return s, backoff(d.Etcd.WatchReconnectBackoff), err
	case config.SourceFile:
		s, err := filestore.New(d.File.Root, namespaces, logger)
		return s, backoff(config.Backoff{Initial: config.Duration(config.DefaultBackoffInitial), Max: config.Duration(config.DefaultBackoffMax)}), err
	case config.SourceKubernetesPods, config.SourceKubernetes:
		b := backoff(d.Kubernetes.WatchReconnectBackoff)
		b.ResetAfter = kube.ResetAfter(b.Max)
		if d.Source == config.SourceKubernetes {
			return kube.NewMetadata(d.Kubernetes, namespaces, client, logger), b, nil
		}
		return kube.NewPods(d.Kubernetes, namespaces, client, logger), b, nil
	}
	return nil, discovery.Backoff{}, fmt.Errorf("unknown discovery source %q", d.Source)
}

func backoff(b config.Backoff) discovery.Backoff {
	return discovery.Backoff{Initial: b.Initial.D(), Max: b.Max.D()}
}

// Fleet is a discovery source watched on its own goroutine: its registry
// holds the fleet view from the first complete read on, and follows it
// until Close.
type Fleet struct {
	Registry *fleet.Registry
	// Source is the source's name; Generation the first view's generation.
	Source     string
	Generation uint64

	cancel context.CancelFunc
	done   chan struct{}
}

// Close stops watching and waits for the watcher to end.
func (f *Fleet) Close() {
	f.cancel()
	<-f.done
}

// Open starts watching the source d configures (with the Kubernetes
// credentials client names) and waits up to timeout for its first complete
// read. An unreachable source's error carries the last reason a pass ended,
// or else what a probe of the source found in the wait's last stretch (an
// etcd that refuses, never answers, or is not etcd), within the timeout;
// a configuration mistake (discovery.ConfigError: a file store root that is
// a file, a kubeconfig that cannot be read) ends the wait at once with it.
// When ctx ends first, the error is ctx's.
func Open(ctx context.Context, d *config.Discovery, client kube.ClientOptions, logger *slog.Logger, timeout time.Duration) (*Fleet, error) {
	src, backoff, err := NewWithKube(d, logger, client)
	if err != nil {
		return nil, err
	}
	reg := fleet.NewRegistry(logger, nil)
	var mu sync.Mutex
	var lastErr error
	wctx, cancel := context.WithCancel(ctx)
	// A configuration mistake ends the wait at once: retrying cannot mend
	// it within a command's timeout.
	waitCtx, cancelWait := context.WithCancelCause(wctx)
	w := &discovery.Watcher{Source: src, Registry: reg, Backoff: backoff, Logger: logger,
		OnPassEnd: func(err error) {
			mu.Lock()
			lastErr = err
			mu.Unlock()
			if ce := (*discovery.ConfigError)(nil); errors.As(err, &ce) {
				cancelWait(ce)
			}
		}}
	f := &Fleet{Registry: reg, Source: src.Name(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		_ = w.Run(wctx) // nil on cancellation; the backoff is validated
	}()
	deadline := time.Now().Add(timeout)
	diagnosis := diagnoseBefore(ctx, src, deadline, timeout)
	defer diagnosis.stop()
	timed, cancelTimed := context.WithDeadline(waitCtx, deadline)
	f.Generation, err = reg.Wait(timed, 0)
	cancelTimed()
	cause := context.Cause(waitCtx)
	cancelWait(nil)
	if err == nil {
		return f, nil
	}
	f.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if ce := (*discovery.ConfigError)(nil); errors.As(cause, &ce) {
		return nil, fmt.Errorf("discovery source %s: %w", src.Name(), ce)
	}
	mu.Lock()
	reason := lastErr
	mu.Unlock()
	if reason == nil && diagnosis.result != nil {
		reason = <-diagnosis.result
	}
	if reason == nil {
		reason = errors.New("no complete read yet")
	}
	return nil, fmt.Errorf("discovery source %s not reachable within %s: %w", src.Name(), timeout, reason)
}

// diagnoseLead is how long before a command's timeout a source that can
// say why it does not answer (etcd's Diagnose) is asked: the probe then
// ends with the timeout instead of running past it.
const diagnoseLead = 2 * time.Second

// diagnosis is a source's probe, run in the last stretch of Open's wait
// (the last diagnoseLead, or the last half of a shorter timeout), bounded
// by the wait's deadline. result is nil for a source that cannot say; it
// gives the probe's answer (nil: the source answers) once the probe has
// run, or nil at once when the wait ended before it began.
type diagnosis struct {
	result <-chan error
	stop   context.CancelFunc
}

func diagnoseBefore(ctx context.Context, src discovery.Source, deadline time.Time, timeout time.Duration) diagnosis {
	d, ok := src.(interface{ Diagnose(context.Context) error })
	if !ok {
		return diagnosis{stop: func() {}}
	}
	dctx, stop := context.WithDeadline(ctx, deadline)
	result := make(chan error, 1)
	go func() {
		t := time.NewTimer(time.Until(deadline.Add(-min(diagnoseLead, timeout/2))))
		defer t.Stop()
		select {
		case <-t.C:
			result <- d.Diagnose(dctx)
		case <-dctx.Done():
			result <- nil
		}
	}()
	return diagnosis{result: result, stop: stop}
}
