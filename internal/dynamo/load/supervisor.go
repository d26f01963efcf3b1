package load

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// Bounds and timings of the subscriptions (seed section 14).
const (
	// MaxSubscriptions bounds the sockets; publishers are admitted in
	// ascending publisher id.
	MaxSubscriptions = 1024
	// StopGrace bounds how long a departing subscription may take to stop.
	StopGrace = 5 * time.Second
	// ConnectTimeout bounds connect and handshake.
	ConnectTimeout = 10 * time.Second
	// ReconnectInitial and ReconnectMax bound the full-jitter backoff.
	ReconnectInitial = 500 * time.Millisecond
	ReconnectMax     = 30 * time.Second
	// ResetAfter is how long a session must last to reset the backoff.
	ResetAfter = 30 * time.Second
)

// Subscription states.
const (
	StatePending    = "pending"
	StateConnecting = "connecting"
	StateConnected  = "connected"
	StateBackoff    = "backoff"
)

// SubscriptionInfo describes one subscription for the admin API.
type SubscriptionInfo struct {
	Family      string
	PublisherID uint64
	Namespace   string
	Component   string
	State       string
	Transport   string
	Broker      string
	// Reconnects counts sessions after the first.
	Reconnects int
}

// Supervisor keeps one kv_metrics subscription per publisher of the
// registry's current snapshot and the store's live gate in step with it.
type Supervisor struct {
	Registry  *fleet.Registry
	Store     *Store
	Connector zmtp.Connector
	Metrics   *telemetry.LoadMetrics
	Logger    *slog.Logger
	// Observe, when set, sees every message and its result.
	Observe func(Event)

	mu      sync.Mutex
	subs    map[uint64]*subscription
	stopped sync.WaitGroup
	refused map[uint64]bool // publishers over MaxSubscriptions, logged once
}

type subscription struct {
	pub    fleet.Publisher
	cancel context.CancelFunc
	done   chan struct{}
	state  string
	// sessions counts transitions to connected.
	sessions int
}

// Run follows registry generations until ctx ends, then stops every
// subscription within StopGrace.
func (s *Supervisor) Run(ctx context.Context) error {
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	s.mu.Lock()
	s.subs = map[uint64]*subscription{}
	s.mu.Unlock()
	s.refused = map[uint64]bool{}
	watch := s.Registry.Subscribe()
	s.reconcile(ctx, s.Registry.Snapshot())
	for {
		if _, err := watch.Next(ctx); err != nil {
			break
		}
		s.reconcile(ctx, s.Registry.Snapshot())
	}
	s.mu.Lock()
	for id, sub := range s.subs {
		s.stop(id, sub)
	}
	s.mu.Unlock()
	s.stopped.Wait()
	return nil
}

// reconcile applies one snapshot: the live gate first, then subscriptions.
func (s *Supervisor) reconcile(ctx context.Context, snap *fleet.Snapshot) {
	live := make(map[uint64]LiveWorker, len(snap.Workers))
	for _, w := range snap.Workers {
		live[w.ID.InstanceID] = LiveWorker{Namespace: w.ID.Namespace, DPStartRank: w.DPStartRank, DPSize: w.DPSize}
	}
	s.Store.SetLiveAndRetain(live)

	var want []*fleet.Publisher
	for _, p := range snap.Publishers {
		if p.Topic == fleet.TopicLoad {
			want = append(want, p)
		}
	}
	slices.SortFunc(want, func(a, b *fleet.Publisher) int { return cmp.Compare(a.PublisherID, b.PublisherID) })
	refused := map[uint64]bool{}
	if len(want) > MaxSubscriptions {
		for _, p := range want[MaxSubscriptions:] {
			refused[p.PublisherID] = true
			if !s.refused[p.PublisherID] {
				s.Logger.Warn("kv_metrics publisher not subscribed: at most 1024 subscriptions", "namespace", p.Namespace, "publisher_id", p.PublisherID)
			}
		}
		want = want[:MaxSubscriptions]
	}
	s.refused = refused
	wanted := make(map[uint64]*fleet.Publisher, len(want))
	for _, p := range want {
		wanted[p.PublisherID] = p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, sub := range s.subs {
		if p, ok := wanted[id]; !ok || *p != sub.pub {
			s.stop(id, sub)
		}
	}
	for _, p := range want {
		if _, ok := s.subs[p.PublisherID]; !ok {
			s.start(ctx, *p)
		}
	}
}

// start launches a subscription; s.mu is held.
func (s *Supervisor) start(parent context.Context, p fleet.Publisher) {
	ctx, cancel := context.WithCancel(parent)
	sub := &subscription{pub: p, cancel: cancel, done: make(chan struct{}), state: StatePending}
	s.subs[p.PublisherID] = sub
	s.setState(sub, StateConnecting)
	s.stopped.Add(1)
	go s.connect(ctx, sub, ReconnectInitial, 0)
}

// stop cancels a subscription and forgets it; s.mu is held. The goroutine
// ends within StopGrace: cancelling closes its connection.
func (s *Supervisor) stop(id uint64, sub *subscription) {
	sub.cancel()
	delete(s.subs, id)
	s.setState(sub, "")
	s.Store.DropPublisher(id)
	go func() {
		select {
		case <-sub.done:
		case <-time.After(StopGrace):
			s.Logger.Warn("kv_metrics subscription did not stop within its grace", "publisher_id", id)
		}
	}()
}

// setState moves a subscription's gauge; s.mu is held.
func (s *Supervisor) setState(sub *subscription, state string) {
	if s.Metrics != nil {
		t := s.Connector.Transport()
		if sub.state != "" {
			s.Metrics.Subscriptions.WithLabelValues(sub.state, t).Dec()
		}
		if state != "" {
			s.Metrics.Subscriptions.WithLabelValues(state, t).Inc()
		}
	}
	sub.state = state
	if state == StateConnected {
		sub.sessions++
	}
}

func (s *Supervisor) transition(sub *subscription, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs[sub.pub.PublisherID] == sub {
		s.setState(sub, state)
	}
}

// Subscriptions lists the running subscriptions.
func (s *Supervisor) Subscriptions() []SubscriptionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SubscriptionInfo, 0, len(s.subs))
	for _, sub := range s.subs {
		out = append(out, SubscriptionInfo{Family: fleet.TopicLoad, PublisherID: sub.pub.PublisherID, Namespace: sub.pub.Namespace,
			Component: sub.pub.Component, State: sub.state, Transport: s.Connector.Transport(), Reconnects: max(sub.sessions-1, 0)})
	}
	slices.SortFunc(out, func(a, b SubscriptionInfo) int { return cmp.Compare(a.PublisherID, b.PublisherID) })
	return out
}

func (s *Supervisor) count(result string) {
	if s.Metrics != nil {
		s.Metrics.Events.WithLabelValues(result).Inc()
	}
}

// A subscription runs as a chain of goroutines rather than one: connect
// (which may grow its stack resolving and handshaking) hands a connected
// socket to a fresh reader goroutine and exits, so an idle subscription
// holds only a small stack blocked in a read. The reader hands a failed
// connection back to a new connect goroutine.

// finish marks a subscription's chain as ended.
func (s *Supervisor) finish(sub *subscription) {
	close(sub.done)
	s.stopped.Done()
}

// connect waits delay, then dials until a session is up or ctx ends.
func (s *Supervisor) connect(ctx context.Context, sub *subscription, backoff, delay time.Duration) {
	for {
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			s.finish(sub)
			return
		}
		s.transition(sub, StateConnecting)
		zs, err := s.dial(ctx, sub)
		if err == nil {
			go s.read(ctx, sub, zs, backoff)
			return
		}
		if ctx.Err() != nil {
			s.finish(sub)
			return
		}
		delay, backoff = s.failed(sub, err, backoff)
	}
}

// failed counts and logs a lost session and returns the jittered delay
// before the next attempt and the backoff after it.
func (s *Supervisor) failed(sub *subscription, err error, backoff time.Duration) (time.Duration, time.Duration) {
	if errors.Is(err, zmtp.ErrProtocol) || errors.Is(err, zmtp.ErrNotAllowed) {
		s.count(wire.ResultTransportRefused)
	}
	s.Logger.Debug("kv_metrics subscription ended", "publisher_id", sub.pub.PublisherID, "err", err)
	s.transition(sub, StateBackoff)
	return time.Duration(rand.Int64N(int64(backoff) + 1)), min(backoff*2, ReconnectMax) // full jitter
}

// dial connects and subscribes under ConnectTimeout.
func (s *Supervisor) dial(ctx context.Context, sub *subscription) (*zmtp.Sub, error) {
	cctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	conn, err := s.Connector.Connect(cctx, sub.pub.ZmqEndpoint())
	if err != nil {
		return nil, err
	}
	zs, err := zmtp.Subscribe(cctx, conn, []byte(fleet.TopicLoad), zmtp.LimitsKVMetrics)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return zs, nil
}

// read runs one session's messages until the connection fails or ctx ends.
func (s *Supervisor) read(ctx context.Context, sub *subscription, zs *zmtp.Sub, backoff time.Duration) {
	stop := context.AfterFunc(ctx, func() { _ = zs.Close() })
	started := time.Now()
	// Whatever this publisher sent before may be stale: changes may have
	// been missed while disconnected.
	s.Store.DropPublisher(sub.pub.PublisherID)
	s.transition(sub, StateConnected)
	r := &reader{pid: sub.pub.PublisherID, topic: fleet.TopicLoad, store: s.Store, count: s.count, observe: s.Observe}
	var err error
	for {
		var frames [][]byte
		frames, err = zs.Next()
		if errors.Is(err, zmtp.ErrOversized) {
			s.count(wire.ResultOversized)
			continue
		}
		if err != nil {
			break
		}
		r.handle(frames, time.Now())
	}
	stop()
	_ = zs.Close()
	if ctx.Err() != nil {
		s.finish(sub)
		return
	}
	if time.Since(started) >= ResetAfter {
		backoff = ReconnectInitial
	}
	delay, next := s.failed(sub, err, backoff)
	go s.connect(ctx, sub, next, delay)
}

// Event is one message as a subscription saw it, for observers (tail-load).
// Frames and Envelope.Payload are valid only during the callback.
type Event struct {
	PublisherID uint64
	Topic       string
	Frames      [][]byte
	Envelope    wire.Envelope
	Load        *wire.ActiveLoad
	// Result is telemetry.ResultAccepted or the reason the message was
	// dropped; Detail says more.
	Result string
	Detail string
}

// reader applies one subscription's messages: decode, identity, order.
type reader struct {
	pid   uint64
	topic string
	// anyPublisher accepts messages of any publisher id (tail-load on a
	// bare endpoint); store may be nil (decode only).
	anyPublisher bool
	store        *Store
	count        func(string)
	observe      func(Event)
	lastSeq      uint64
	haveSeq      bool
}

func (r *reader) handle(frames [][]byte, now time.Time) {
	ev := Event{PublisherID: r.pid, Topic: r.topic, Frames: frames}
	ev.Result, ev.Detail = r.apply(frames, now, &ev)
	r.count(ev.Result)
	if r.observe != nil {
		r.observe(ev)
	}
}

func (r *reader) apply(frames [][]byte, now time.Time, ev *Event) (string, string) {
	topic := r.topic
	if topic == "" {
		topic = fleet.TopicLoad
	}
	maxPayload := wire.MaxKVEventsPayloadBytes
	if topic == fleet.TopicLoad {
		maxPayload = wire.MaxLoadPayloadBytes
	}
	env, rej := wire.DecodeEventMessage(frames, topic, maxPayload)
	if rej != nil {
		return rej.Result, rej.Detail
	}
	ev.Envelope = env
	if r.anyPublisher && !r.haveSeq {
		r.pid = env.PublisherID
	}
	if env.PublisherID != r.pid {
		if !r.anyPublisher {
			return wire.ResultIdentityMismatch, "publisher id differs from the discovery record's"
		}
		r.pid, r.haveSeq = env.PublisherID, false // a restarted publisher on this endpoint
	}
	ev.PublisherID = r.pid
	if r.haveSeq {
		if env.Sequence <= r.lastSeq {
			return wire.ResultDuplicate, "sequence not after the last one applied"
		}
		if env.Sequence != r.lastSeq+1 && r.store != nil {
			r.store.DropPublisher(r.pid) // a gap: a change may have been missed
		}
	}
	r.lastSeq, r.haveSeq = env.Sequence, true
	if topic != fleet.TopicLoad {
		return telemetry.ResultAccepted, ""
	}
	l, err := wire.DecodeActiveLoad(env.Payload)
	if err != nil {
		return wire.ResultMalformed, "ActiveLoad: " + err.Error()
	}
	ev.Load = &l
	if r.store == nil {
		return telemetry.ResultAccepted, ""
	}
	if res := r.store.Apply(Sample{Load: l, PublisherID: r.pid, Sequence: env.Sequence, PublishedAt: env.PublishedAt, ReceivedAt: now}); res != "" {
		return res, "refused by the load store"
	}
	return telemetry.ResultAccepted, ""
}
