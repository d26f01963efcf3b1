package kv

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// StaleAfter is how long a kv-events subscription may be without a session
// before the blocks it fed are dropped: events were missed meanwhile, and
// a cache view that old would send requests to blocks long evicted. The
// check is timed for the earliest subscription due, so they go StaleAfter
// after the session was lost, not at some later periodic check; while
// every subscription has a session it runs once every StaleAfter. The
// clock runs across a transport switch: a publisher that stays without a
// session through one has been without it since before.
const StaleAfter = 60 * time.Second

// kvTopics are the spellings of the KV events topic across Dynamo
// revisions.
var kvTopics = []string{"kv-events", "kv_events"}

// IsKVTopic reports whether topic is the KV events topic.
func IsKVTopic(topic string) bool { return slices.Contains(kvTopics, topic) }

// Subscriptions keeps one kv-events subscription per advertised publisher
// (through the same per-subscription loop and pool as the load signals),
// feeds the index, and keeps the index's live-identity gate in step with
// the registry.
type Subscriptions struct {
	reg     *fleet.Registry
	index   *Index
	metrics *telemetry.KVMetrics
	logger  *slog.Logger
	pool    load.Pool

	// kick asks Run to reconcile now (a new connector).
	kick chan struct{}

	mu      sync.Mutex
	readers map[uint64]*eventReader
}

// NewSubscriptions returns the kv-events subscriptions of reg's fleet
// feeding index; metrics and logger may be nil.
func NewSubscriptions(reg *fleet.Registry, index *Index, connector zmtp.Connector, metrics *telemetry.KVMetrics, logger *slog.Logger) *Subscriptions {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Subscriptions{reg: reg, index: index, metrics: metrics, logger: logger, readers: map[uint64]*eventReader{}, kick: make(chan struct{}, 1)}
	s.pool = load.Pool{Family: "kv-events", Limits: zmtp.LimitsKVEvents, Connector: connector, Logger: logger,
		NewHandler: s.newReader,
		// A publisher that left or was replaced fed ranks that are no
		// longer its own to say anything about.
		Stopped: func(p fleet.Publisher) {
			s.mu.Lock()
			r := s.readers[p.PublisherID]
			if r != nil && r.pub != p {
				// Its record changed and its replacement has started:
				// that reader stays (or its subscription could never age
				// out), and what the old one fed was cleared when the
				// replacement was made (clearing it now could drop what
				// the new session has fed meanwhile).
				s.mu.Unlock()
				return
			}
			delete(s.readers, p.PublisherID)
			s.mu.Unlock()
			// Its loop may still be delivering a message it read: retired
			// first, nothing of it outlives the clear (the blocks would
			// stay with no reader left to age them out).
			r.retire()
			index.ClearSubscription(SubscriptionID(p.PublisherID))
		},
	}
	if metrics != nil {
		s.pool.Gauge = metrics.Subscriptions
	}
	return s
}

// Run follows registry generations until ctx ends, then stops every
// subscription.
func (s *Subscriptions) Run(ctx context.Context) error {
	// The first check runs at once and times the next from the
	// subscriptions there are; each check times its successor.
	age := time.NewTimer(0)
	defer age.Stop()
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	for {
		changed := s.reg.Changed()
		s.reconcile(ctx, s.reg.Snapshot())
		s.report()
		if !s.wait(ctx, changed, age, tick.C) {
			s.pool.Stop()
			s.report() // the stopped subscriptions' blocks are gone: the gauges say so
			return nil
		}
	}
}

// wait ages out stale subscriptions, each when it is due, and exports the
// index's size at each tick, until the registry changes or a new connector
// asks for a reconcile; false when ctx ended.
func (s *Subscriptions) wait(ctx context.Context, changed <-chan struct{}, age *time.Timer, tick <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-changed:
			return true
		case <-s.kick:
			return true
		case now := <-age.C:
			age.Reset(time.Until(s.ageOut(now)))
			s.report()
		case <-tick:
			s.report()
		}
	}
}

// reportEvery is how often the index's size is exported: the events that
// change it come at any time, and a scrape or `top` should see it within
// a second.
const reportEvery = time.Second

// SetConnector restarts every subscription through c (a reload changed the
// transport or the allowed networks). The index keeps its blocks and each
// rank's event cursor: an event the switch missed shows as a gap.
func (s *Subscriptions) SetConnector(c zmtp.Connector) {
	s.pool.SetConnector(c)
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// reconcile applies one snapshot: the live gate (departed workers' blocks
// go), then the subscriptions.
func (s *Subscriptions) reconcile(ctx context.Context, snap *fleet.Snapshot) {
	s.index.SetLive(load.LiveOf(snap))
	var want []*fleet.Publisher
	for p := range snap.Publishers.All() {
		if IsKVTopic(p.Topic) {
			want = append(want, p)
		}
	}
	s.pool.Reconcile(ctx, want)
}

// ageOut drops what subscriptions without a session for StaleAfter fed,
// and returns when the next check is due: when the first of the others
// without a session becomes stale, at the latest StaleAfter from now (a
// subscription that loses its session after now, or starts after now, is
// due no earlier).
func (s *Subscriptions) ageOut(now time.Time) (next time.Time) {
	next = now.Add(StaleAfter)
	s.mu.Lock()
	var stale []uint64
	for id, r := range s.readers {
		switch isStale, due := r.staleAt(now); {
		case isStale:
			stale = append(stale, id)
		case !due.IsZero() && due.Before(next):
			next = due
		}
	}
	s.mu.Unlock()
	for _, id := range stale {
		// The cursors stay: the events missed meanwhile are a gap when it
		// connects again, replays are skipped.
		s.index.ClearRanks(SubscriptionID(id))
		s.logger.Warn("kv-events subscription without a session for a minute: its blocks are dropped", "publisher_id", id)
	}
	return next
}

// report exports the index's size.
func (s *Subscriptions) report() {
	if s.metrics == nil {
		return
	}
	st := s.index.Stats()
	s.metrics.IndexNodes.Set(float64(st.Nodes))
	s.metrics.IndexOwners.Set(float64(st.Ownerships))
	s.metrics.IndexBytes.Set(float64(st.Bytes))
}

// Subscriptions lists the running subscriptions.
func (s *Subscriptions) Subscriptions() []load.SubscriptionInfo { return s.pool.Subscriptions() }

// Changed returns a channel closed at the next change of what
// Subscriptions lists.
func (s *Subscriptions) Changed() <-chan struct{} { return s.pool.Changed() }

func (s *Subscriptions) newReader(p fleet.Publisher) load.Handler {
	r := &eventReader{s: s, pub: p, ns: load.NS(p.Namespace), pid: p.PublisherID, topic: p.Topic, since: time.Now()}
	s.mu.Lock()
	old := s.readers[p.PublisherID]
	if old != nil && old.pub == p {
		// A restart of the same publisher's subscription (a transport
		// switch keeps its blocks): the staleness clock carries on where
		// the old one was without a session.
		old.mu.Lock()
		if !old.connected {
			r.since, r.cleared = old.since, old.cleared
		}
		old.mu.Unlock()
	}
	s.readers[p.PublisherID] = r
	s.mu.Unlock()
	if old != nil && old.pub != p {
		// The publisher's record changed: what the old subscription fed
		// is dropped now, before the new one's loop starts, rather than
		// when the old one is told stopped (after this one may have fed
		// the index); the old reader applies nothing more.
		old.retire()
		s.index.ClearSubscription(SubscriptionID(p.PublisherID))
	}
	return r
}

func (s *Subscriptions) count(result string) {
	if s.metrics != nil {
		s.metrics.Events.WithLabelValues(result).Inc()
	}
}

// eventReader applies one publisher's kv-events messages to the index.
// Message, Oversized, Connected and Ended run on its subscription's
// goroutine; the clock fields are also read by ageOut.
type eventReader struct {
	s     *Subscriptions
	pub   fleet.Publisher // the record it was started for
	ns    fleet.NamespaceID
	pid   uint64
	topic string
	buf   []wire.RouterEvent

	mu        sync.Mutex
	connected bool
	since     time.Time // when it last lost (or never had) a session
	cleared   bool      // its blocks were dropped for staleness
	// retired: the publisher left, or a reader for its changed record
	// replaced this one. Its loop may still be delivering a message; held
	// under mu with the applying, so that nothing it applies outlives the
	// clear.
	retired bool
}

var _ load.Handler = (*eventReader)(nil)

// retire makes r apply nothing more, once what it is applying is done; a
// nil r is left alone.
func (r *eventReader) retire() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.retired = true
	r.mu.Unlock()
}

// staleAt reports whether the reader is stale at now, marking it cleared;
// when it is not, due is when it will be (zero while it has a session or
// after it was cleared).
func (r *eventReader) staleAt(now time.Time) (stale bool, due time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.connected || r.cleared {
		return false, time.Time{}
	}
	if due = r.since.Add(StaleAfter); now.Before(due) {
		return false, due
	}
	r.cleared = true
	return true, time.Time{}
}

// Connected implements load.Handler. The event_id cursors outlive the
// session: events replayed after a reconnect are skipped, missed ones are
// a gap.
func (r *eventReader) Connected() {
	r.mu.Lock()
	r.connected, r.cleared = true, false
	r.mu.Unlock()
}

// Ended implements load.Handler.
func (r *eventReader) Ended(err error) {
	r.mu.Lock()
	if r.connected {
		r.connected, r.since = false, time.Now()
	}
	r.mu.Unlock()
	if errors.Is(err, zmtp.ErrProtocol) || errors.Is(err, zmtp.ErrNotAllowed) {
		r.s.count(wire.ResultTransportRefused)
	}
}

// Oversized implements load.Handler.
func (r *eventReader) Oversized() { r.s.count(wire.ResultOversized) }

// OverLimit implements load.OverLimitHandler: a message the transport cut
// to its limits is judged by what is wrong with it, as a whole one is: a
// frame count other than four or an id frame cut short is malformed, a
// topic cut short is not the topic, a payload declared past what was kept
// is oversized; a payload frame cut only in bytes after its payload is
// decoded as any other.
func (r *eventReader) OverLimit(frames [][]byte, over *zmtp.OverLimitError, now time.Time) {
	switch {
	case over.Frames != 4 || len(frames) != 4 || over.Cut(1) || over.Cut(2):
		r.s.count(wire.ResultMalformed)
	case over.Cut(0):
		r.s.count(wire.ResultTopicMismatch)
	case wire.PayloadCut(frames[3]):
		r.s.count(wire.ResultOversized)
	default:
		r.Message(frames, now)
	}
}

// Message implements load.Handler.
func (r *eventReader) Message(frames [][]byte, _ time.Time) {
	env, rej := wire.DecodeEventMessage(frames, r.topic, wire.MaxKVEventsPayloadBytes)
	if rej != nil {
		r.s.count(rej.Result)
		return
	}
	if env.PublisherID != r.pid {
		r.s.count(wire.ResultIdentityMismatch)
		return
	}
	events, err := wire.DecodeRouterEvents(env.Payload, r.buf[:0])
	if err != nil {
		r.s.count(wire.ResultMalformed)
		return
	}
	r.buf = events
	r.mu.Lock()
	if !r.retired {
		for i := range events {
			r.apply(&events[i])
		}
	}
	r.mu.Unlock()
	if cap(r.buf) > wire.KVBatchEvents {
		r.buf = nil // keep an idle subscription small after an outsized payload
	}
}

// apply feeds one event to the index and counts what became of it.
func (r *eventReader) apply(ev *wire.RouterEvent) {
	out := r.s.index.Apply(SubscriptionID(r.pid), r.ns, ev)
	if out.Result == ResultAccepted && slices.ContainsFunc(ev.Blocks, func(b wire.StoredBlock) bool { return b.Multimodal }) {
		r.s.count(ResultMultimodal) // indexed up to its first multimodal block
	}
	if out.Gap {
		r.s.count(ResultGap)
	}
	r.s.count(out.Result)
}
