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
//
// ResyncEnd publishes the resynced view at once. Flush publishes at once
// when nothing was published for PublishDelay, and otherwise PublishDelay
// after the last publish, together with every change that arrives in the
// meantime: a burst of events becomes a few publishes, and no change waits
// longer than PublishDelay.
type Sink interface {
	Put(key string, value []byte)
	Delete(key string)
	ResyncBegin()
	// ResyncEnd ends the initial read; the pass's watches are open.
	ResyncEnd()
	// Flush ends a batch: the view is published if it changed.
	Flush()
}

// OversizedSink is a Sink that also holds keys whose values a source could
// not read at all, being larger than the limit bytes one read may carry:
// such a key is refused as oversized, as a value over the reducer's own
// limit is, and a later put or delete of it applies as usual.
type OversizedSink interface {
	PutOversized(key string, limit int)
}

// ReadPublisher is a Sink that can publish a pass's initial read before
// the pass's watches are open, for a source that lists first and then
// watches from the list's revision: the view is the fleet as listed
// whether or not the watch opens in time, but the pass counts as connected
// (and its session as established) only at the ResyncEnd that follows once
// the watch is open.
type ReadPublisher interface {
	PublishRead()
}

// PublishRead publishes the initial read through sink ahead of its watches
// when sink can, and reports whether it did: the caller then calls
// ResyncEnd once its watches are open. Otherwise it does nothing, and
// ResyncEnd publishes the read then.
func PublishRead(sink Sink) bool {
	if rp, ok := sink.(ReadPublisher); ok {
		rp.PublishRead()
		return true
	}
	return false
}

// Source is one discovery backend.
type Source interface {
	// Name is the configured source name (etcd, file, ...).
	Name() string
	// Run performs one pass. It returns nil when ctx ends, or the reason the
	// pass failed; it never retries by itself.
	Run(ctx context.Context, sink Sink) error
}

// Backoff is the doubling reconnect delay between passes. Neither may be
// negative and Max is at least Initial; a zero waits MinDelay.
type Backoff struct {
	Initial, Max time.Duration
	// ResetAfter is how long a session must stay established for the delay
	// to return to Initial; Max when zero. Kubernetes sources use
	// min(Max, 290 s) so that the watch's normal end never grows the delay.
	ResetAfter time.Duration
}

// MinDelay is the least wait between two passes. A backoff whose initial
// (or max) is zero is valid configuration, but a source that fails at once
// would then be retried in a tight loop: zero waits MinDelay instead, and
// the delay doubles from there.
const MinDelay = time.Millisecond

// floored is b with Initial and Max raised to at least MinDelay.
func (b Backoff) floored() Backoff {
	b.Initial = max(b.Initial, MinDelay)
	b.Max = max(b.Max, b.Initial)
	return b
}

// PublishDelay is the least time between two publishes of a watcher's view
// outside resyncs, so also the longest a change waits to be published.
// Readers do work per published view that grows with the fleet (the load
// and kv-events supervisors reconcile every worker and publisher; the
// picker rebuilds its candidate index for the new view), so a burst of
// events, such as a rollout or a reconnecting etcd, must not become one
// publish per event: at most 100 views a second reach them, however fast
// events come. 10 ms is far below the time scales a fleet changes on (a
// worker's lease lives 10 s; a starting worker takes seconds to register),
// and an event after a quiet spell is published without waiting.
const PublishDelay = 10 * time.Millisecond

// ErrWatchExpired ends a pass whose watches reached their normal,
// server-side end. The view stays published and the connected gauge stays
// up while the next pass re-lists.
var ErrWatchExpired = errors.New("watch reached its server-side timeout")

// ConfigError is a pass's failure that only a change on the operator's
// side mends: a file store root that is a file, a kubeconfig that cannot
// be read or names no cluster. A serving watcher retries it like any
// failure (a volume may be mounted, a file written, later); a one-shot
// command (sources.Open) gives up at once rather than wait out its
// timeout.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

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
	// Predecessor, when set, is the view of the watcher this one replaces
	// over the same fleet: the workers this watcher's first resync finds
	// in it keep their first_seen (fleet.Reducer.KeepFirstSeen).
	Predecessor *fleet.Snapshot

	reducer   *fleet.Reducer
	connected atomic.Bool
	// handedOver: Halt gave the registry, and the connected gauge, to a
	// successor that may already run; this watcher no longer sets the gauge.
	handedOver atomic.Bool

	syncOnce sync.Once
	synced   chan struct{}

	// mu guards the reducer and the publishing state below: a pass applies
	// events on its goroutine, a delayed publish runs on the timer's.
	mu sync.Mutex
	// published: a pass of this watcher has published its view.
	published bool
	resyncing bool
	stopped   bool      // Run is returning: nothing more is published
	lastPub   time.Time // when the view was last published
	// ctx is Run's: once it ends nothing more is published, whatever the
	// source goes on applying.
	ctx context.Context
	// timer publishes the changes that wait; timerSeq tells a stopped
	// timer's late callback from the armed one's, and timers counts the
	// callbacks that may still run.
	timer    *time.Timer
	timerSeq uint64
	timers   sync.WaitGroup
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
	if w.Backoff.Initial < 0 || w.Backoff.Max < w.Backoff.Initial {
		return fmt.Errorf("discovery backoff %v..%v is not valid", w.Backoff.Initial, w.Backoff.Max)
	}
	backoff := w.Backoff.floored()
	w.mu.Lock()
	w.reducer, w.stopped, w.ctx = fleet.NewReducer(), false, ctx
	w.reducer.KeepFirstSeen(w.Predecessor)
	// The reducer took the first_seen times it needs; the old view (every
	// worker and card of it) is not held for the watcher's life.
	w.Predecessor = nil
	w.mu.Unlock()
	delay := backoff.Initial
	defer w.stop()
	// Publishing ends when ctx does, not when the source notices: a source
	// slow to return (a stopped watcher is abandoned after a grace) must
	// not publish over whatever replaced the watcher in the registry.
	defer context.AfterFunc(ctx, w.halt)()
	for {
		s := &sink{w: w}
		err := w.Source.Run(ctx, s)
		w.endPass()
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
		resetAfter := backoff.ResetAfter
		if resetAfter <= 0 {
			resetAfter = backoff.Max
		}
		// A watch the server ended at its timeout opened a moment before
		// the pass counted itself established (the listed records were
		// applied in between), so its session reads just short of that
		// timeout: an expiry counts as a full session from a tenth short
		// of the bound, so that the normal end of a watch never grows the
		// backoff.
		lasted := time.Since(s.established)
		if !s.established.IsZero() && (lasted >= resetAfter || expired && lasted >= resetAfter-resetAfter/10) {
			delay = backoff.Initial
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
		delay = min(delay*2, backoff.Max)
	}
}

func (w *Watcher) setConnected(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setConnectedLocked(on)
}

// setConnectedLocked records whether a pass is connected, and reports it
// unless the watcher was handed over (Halt); w.mu is held, as by Halt, so
// that a watcher handed over never sets the gauge its successor owns.
func (w *Watcher) setConnectedLocked(on bool) {
	w.connected.Store(on)
	if w.Metrics == nil || w.handedOver.Load() {
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
	established time.Time
	// readEnded: the reducer's resync of this pass has ended.
	readEnded bool
}

func (s *sink) Put(key string, value []byte) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.w.reducer.Put(key, value, time.Now())
}

func (s *sink) PutOversized(key string, limit int) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.w.reducer.PutOversized(key, limit, time.Now())
}

func (s *sink) Delete(key string) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.w.reducer.Delete(key)
}

func (s *sink) ResyncBegin() {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.w.resyncing = true
	s.w.reducer.ResyncBegin()
}

// ResyncEnd publishes the resynced view at once (readiness and reloads
// wait for it) unless PublishRead did, and counts the pass as connected.
func (s *sink) ResyncEnd() {
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if !s.endRead() {
		return
	}
	s.established = time.Now()
	w.setConnectedLocked(true)
	if w.reducer.Dirty() {
		w.publishLocked()
	}
}

// PublishRead publishes the resynced view before the pass's watches are
// open, without counting the pass as connected.
func (s *sink) PublishRead() {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.endRead()
}

// endRead ends the initial read once: the reducer's resync ends and the
// view is published (the first view replaces the registry's even when it
// is empty). False when the watcher no longer publishes.
func (s *sink) endRead() bool {
	w := s.w
	w.resyncing = false
	if w.stopped || w.ctx.Err() != nil {
		return false
	}
	if s.readEnded {
		return true
	}
	s.readEnded = true
	w.reducer.ResyncEnd()
	if !w.published {
		// The first view replaces the registry's even when it is empty.
		w.published = true
		w.publishLocked()
		w.Synced()
		close(w.synced)
		return true
	}
	if w.reducer.Dirty() {
		w.publishLocked()
	}
	return true
}

func (s *sink) Flush() {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.w.flushLocked()
}

// flushLocked publishes the changes applied so far: at once when the last
// publish is PublishDelay old, else by a timer PublishDelay after it
// (changes that arrive before it fires go with them).
func (w *Watcher) flushLocked() {
	if !w.published || w.resyncing || w.stopped || w.timer != nil || !w.reducer.Dirty() {
		return
	}
	wait := PublishDelay - time.Since(w.lastPub)
	if wait <= 0 {
		w.publishLocked()
		return
	}
	w.timerSeq++
	seq := w.timerSeq
	w.timers.Add(1)
	w.timer = time.AfterFunc(wait, func() { w.fire(seq) })
}

// fire is the timer's publish.
func (w *Watcher) fire(seq uint64) {
	defer w.timers.Done()
	w.mu.Lock()
	defer w.mu.Unlock()
	if seq != w.timerSeq || w.timer == nil {
		return // stopped after it started firing
	}
	w.timer = nil
	if !w.resyncing && !w.stopped && w.reducer.Dirty() {
		w.publishLocked()
	}
}

// publishLocked publishes the current view, and with it whatever the timer
// was to publish.
func (w *Watcher) publishLocked() {
	w.stopTimerLocked()
	if w.stopped || w.ctx.Err() != nil {
		return
	}
	now := time.Now()
	w.Registry.Publish(w.reducer.Build(now))
	w.lastPub = now
}

func (w *Watcher) stopTimerLocked() {
	if w.timer != nil && w.timer.Stop() {
		w.timers.Done() // its callback will not run
	}
	w.timer = nil
}

// endPass publishes what a pass applied and left waiting, so that a
// change never waits for the reconnect backoff; a resync the pass did
// not finish stays unpublished (the next pass starts another), and so
// does everything before the watcher's first full resync.
func (w *Watcher) endPass() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.published && !w.resyncing && !w.stopped && w.reducer.Dirty() {
		w.publishLocked()
	}
	w.stopTimerLocked()
}

// Halt ends publishing: once it returns, no publish is under way and none
// follows, whatever the source still does. Run's context ending does the
// same, asynchronously; a caller about to give the registry to another
// watcher calls Halt after cancelling so that its next Publish or Reset is
// the last word, without waiting for a slow source to return.
func (w *Watcher) Halt() {
	w.mu.Lock()
	w.handedOver.Store(true)
	w.mu.Unlock()
	w.halt()
}

// halt ends publishing at once (ctx ended); stop, when Run returns, also
// waits for a timer callback under way.
func (w *Watcher) halt() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.stopTimerLocked()
}

// stop ends publishing when Run returns: no publish happens after it, so
// the registry is free for whatever replaces the watcher.
func (w *Watcher) stop() {
	w.halt()
	w.timers.Wait()
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
