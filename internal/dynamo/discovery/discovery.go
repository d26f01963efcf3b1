// Package discovery runs a discovery source under a supervisor: each pass
// streams etcd-shaped events into the fleet reducer, and the supervisor owns
// the reconnect backoff, the connected gauge and publishing snapshots.
//
// Imports: fleet and telemetry.
package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// SeedTimeout bounds each pass's connect, optional authentication and
// initial range get (or list); the long-lived watch has none.
const SeedTimeout = 30 * time.Second

// Sink receives one pass's events. A pass starts with ResyncBegin, puts every
// record it read, opens its watches and calls ResyncEnd; then it streams
// Put and Delete, calling Flush after each batch.
type Sink interface {
	Put(key string, value []byte)
	Delete(key string)
	ResyncBegin()
	// ResyncEnd ends the initial read; the pass's watches are open.
	ResyncEnd()
	// Flush ends a batch: the view is published if it changed.
	Flush()
}

// Source is one discovery backend.
type Source interface {
	// Name is the configured source name (etcd, file, ...).
	Name() string
	// Run performs one pass. It returns nil when ctx ends, or the reason the
	// pass failed; it never retries by itself.
	Run(ctx context.Context, sink Sink) error
}

// Backoff is the doubling reconnect delay between passes.
type Backoff struct {
	Initial, Max time.Duration
	// ResetAfter is how long a session must stay established for the delay
	// to return to Initial; Max when zero. Kubernetes sources use
	// min(Max, 290 s) so that the watch's normal end never grows the delay.
	ResetAfter time.Duration
}

// ErrWatchExpired ends a pass whose watches reached their normal,
// server-side end. The view stays published and the connected gauge stays
// up while the next pass re-lists.
var ErrWatchExpired = errors.New("watch reached its server-side timeout")

// Watcher supervises one source for the lifetime of its configuration. Its
// reducer lives as long as it does, so first_seen survives reconnects.
type Watcher struct {
	Source   Source
	Registry *fleet.Registry
	Backoff  Backoff
	Metrics  *telemetry.DiscoveryMetrics
	Logger   *slog.Logger
	// OnPassEnd, when set, is told why each pass ended (not on cancellation).
	OnPassEnd func(err error)

	reducer   *fleet.Reducer
	connected atomic.Bool

	syncOnce sync.Once
	synced   chan struct{}
	// published: a pass of this watcher has published its view.
	published bool
}

// Synced returns a channel closed once the watcher's first full resync is
// published: from then on the registry holds this watcher's view, not
// whatever was there before it (a watcher replaced by a reload).
func (w *Watcher) Synced() <-chan struct{} {
	w.syncOnce.Do(func() { w.synced = make(chan struct{}) })
	return w.synced
}

// Connected reports whether the current pass is seeded and watching.
func (w *Watcher) Connected() bool { return w.connected.Load() }

// Run supervises passes until ctx ends. It returns nil on cancellation.
func (w *Watcher) Run(ctx context.Context) error {
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	if w.Backoff.Initial <= 0 || w.Backoff.Max < w.Backoff.Initial {
		return fmt.Errorf("discovery backoff %v..%v is not valid", w.Backoff.Initial, w.Backoff.Max)
	}
	w.reducer = fleet.NewReducer()
	delay := w.Backoff.Initial
	for {
		s := &sink{w: w}
		err := w.Source.Run(ctx, s)
		expired := errors.Is(err, ErrWatchExpired) && !s.established.IsZero()
		if !expired {
			w.setConnected(false)
		}
		if ctx.Err() != nil {
			w.setConnected(false)
			return nil
		}
		if err == nil {
			err = errors.New("pass ended")
		}
		if w.OnPassEnd != nil {
			w.OnPassEnd(err)
		}
		// Reset the backoff only after a session that stayed established
		// (all watches open) for at least the maximum delay.
		resetAfter := w.Backoff.ResetAfter
		if resetAfter <= 0 {
			resetAfter = w.Backoff.Max
		}
		if !s.established.IsZero() && time.Since(s.established) >= resetAfter {
			delay = w.Backoff.Initial
		}
		if expired {
			w.Logger.Debug("dynamo discovery watch ended normally; re-listing", "source", w.Source.Name(), "retry_in", delay)
		} else {
			w.Logger.Warn("dynamo discovery pass ended; retrying", "source", w.Source.Name(), "err", err, "retry_in", delay)
		}
		if err := sleep(ctx, delay); err != nil {
			w.setConnected(false)
			return nil
		}
		delay = min(delay*2, w.Backoff.Max)
	}
}

func (w *Watcher) setConnected(on bool) {
	w.connected.Store(on)
	if w.Metrics == nil {
		return
	}
	if on {
		w.Metrics.Connected.Set(1)
	} else {
		w.Metrics.Connected.Set(0)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// sink feeds one pass's events to the watcher's reducer.
type sink struct {
	w           *Watcher
	resyncing   bool
	established time.Time
}

func (s *sink) Put(key string, value []byte) { s.w.reducer.Put(key, value, time.Now()) }
func (s *sink) Delete(key string)            { s.w.reducer.Delete(key) }

func (s *sink) ResyncBegin() {
	s.resyncing = true
	s.w.reducer.ResyncBegin()
}

func (s *sink) ResyncEnd() {
	s.resyncing = false
	s.w.reducer.ResyncEnd()
	s.established = time.Now()
	s.w.setConnected(true)
	if !s.w.published {
		// The first view replaces the registry's even when it is empty.
		s.w.published = true
		s.w.Registry.Publish(s.w.reducer.Build(time.Now()))
		s.w.Synced()
		close(s.w.synced)
		return
	}
	s.Flush()
}

func (s *sink) Flush() {
	if s.resyncing || !s.w.reducer.Dirty() {
		return
	}
	s.w.Registry.Publish(s.w.reducer.Build(time.Now()))
}

// ProblemCounter returns a registry observer that counts problems in
// continuum_dynamo_discovery_events_total by kind.
func ProblemCounter(m *telemetry.DiscoveryMetrics) fleet.ProblemObserver {
	return func(p fleet.Problem) {
		if m != nil {
			m.Events.WithLabelValues(p.Kind).Inc()
		}
	}
}
