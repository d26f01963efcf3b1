package load

import (
	"context"
	"log/slog"
	"sync"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// Supervisor keeps one kv_metrics subscription per publisher of the
// registry's current snapshot, and the store's live gate in step with it.
type Supervisor struct {
	reg   *fleet.Registry
	store *Store
	pool  Pool
	// kick asks Run to reconcile now (a new connector).
	kick chan struct{}

	// readers are the subscriptions' readers by publisher id (the last
	// made), so that a publisher that left has its reader retired.
	rmu     sync.Mutex
	readers map[uint64]*reader
}

// NewSupervisor returns a supervisor of reg's load publishers feeding
// store. metrics and logger may be nil.
func NewSupervisor(reg *fleet.Registry, store *Store, connector zmtp.Connector, metrics *telemetry.LoadMetrics, logger *slog.Logger) *Supervisor {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	count := func(string) {}
	s := &Supervisor{reg: reg, store: store, kick: make(chan struct{}, 1), readers: map[uint64]*reader{}}
	s.pool = Pool{Family: fleet.TopicLoad, Limits: limitsOf(fleet.TopicLoad), Connector: connector, Logger: logger}
	// Samples of a publisher that left are not its worker's load any more,
	// nor are the requests sent before: a publisher id names one
	// incarnation, so a worker publishing under a new id most often has a
	// restarted engine. A publisher whose record changed under the same id
	// is the same incarnation, restarted on its new record like a
	// transport switch: its subscription's first session drops its
	// samples, and what was dispatched since them stays counted until a
	// sample answers it.
	s.pool.Stopped = func(p fleet.Publisher) {
		if s.pool.Running(p.PublisherID) {
			return
		}
		s.rmu.Lock()
		r := s.readers[p.PublisherID]
		if r != nil && r.pub == p {
			delete(s.readers, p.PublisherID)
		} else {
			r = nil
		}
		s.rmu.Unlock()
		// Its loop may still be delivering a sample it read: retired
		// first, nothing of it outlives the reset.
		r.retire()
		if s.pool.Refused(p.PublisherID) {
			// Left out by the subscription cap, not gone: its engine
			// still runs what it was sent, which stays counted (its
			// samples, no longer followed, go).
			store.DropPublisher(p.PublisherID)
			return
		}
		store.ResetPublisher(p.PublisherID)
	}
	if metrics != nil {
		s.pool.Gauge = metrics.Subscriptions
		count = func(result string) { metrics.Events.WithLabelValues(result).Inc() }
	}
	s.pool.NewHandler = func(p fleet.Publisher) Handler {
		r := &reader{pid: p.PublisherID, pub: p, ns: NS(p.Namespace), topic: fleet.TopicLoad, store: store, count: count, logger: logger}
		s.rmu.Lock()
		s.readers[p.PublisherID] = r
		s.rmu.Unlock()
		return r
	}
	return s
}

// Run follows registry generations until ctx ends, then stops every
// subscription within StopGrace.
func (s *Supervisor) Run(ctx context.Context) error {
	for {
		changed := s.reg.Changed()
		s.reconcile(ctx, s.reg.Snapshot())
		select {
		case <-ctx.Done():
			s.pool.Stop()
			return nil
		case <-changed:
		case <-s.kick:
		}
	}
}

// SetConnector restarts every subscription through c (a reload changed the
// transport or the allowed networks). The store is not wiped at the
// switch: each publisher's samples stay until its restarted subscription
// connects, and that first session drops them like any other, since what
// the publisher sent between the two sessions was not seen.
func (s *Supervisor) SetConnector(c zmtp.Connector) {
	s.pool.SetConnector(c)
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// reconcile applies one snapshot: the live gate first, then subscriptions.
func (s *Supervisor) reconcile(ctx context.Context, snap *fleet.Snapshot) {
	s.store.SetLiveAndRetain(LiveOf(snap))
	s.pool.Reconcile(ctx, publishers(snap, fleet.TopicLoad))
}

// LiveOf is the live-worker gate of snap: each worker, by namespace and
// instance id, with the ranks its card declares.
func LiveOf(snap *fleet.Snapshot) map[fleet.WorkerID]LiveWorker {
	live := make(map[fleet.WorkerID]LiveWorker, snap.Workers.Len())
	for w := range snap.Workers.All() {
		live[w.ID] = LiveWorker{DPStartRank: w.DPStartRank, DPSize: w.DPSize}
	}
	return live
}

// publishers returns the snapshot's publishers of topic.
func publishers(snap *fleet.Snapshot, topic string) []*fleet.Publisher {
	var want []*fleet.Publisher
	for p := range snap.Publishers.All() {
		if p.Topic == topic {
			want = append(want, p)
		}
	}
	return want
}

// Subscriptions lists the running subscriptions.
func (s *Supervisor) Subscriptions() []SubscriptionInfo { return s.pool.Subscriptions() }

// Changed returns a channel closed at the next change of what
// Subscriptions lists.
func (s *Supervisor) Changed() <-chan struct{} { return s.pool.Changed() }
