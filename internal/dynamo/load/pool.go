package load

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// Bounds of a pool of subscriptions.
const (
	// MaxSubscriptions bounds the sockets one family holds. When a fleet
	// advertises more publishers, the lowest publisher ids are admitted, so
	// that every router of the fleet subscribes to the same ones.
	MaxSubscriptions = 1024
	// StopGrace bounds how long stopping waits for subscriptions to end;
	// cancelling closes each connection, so they end at once unless a
	// connector misbehaves.
	StopGrace = 5 * time.Second
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
}

// Pool keeps one subscription (a Loop on its own goroutine) per wanted
// publisher, and the state of each. It only starts and stops loops: what a
// subscription does with its messages is its Handler's business.
type Pool struct {
	// Family names the subscriptions in listings and logs (kv_metrics).
	Family    string
	Limits    zmtp.Limits
	Connector zmtp.Connector
	// Gauge counts subscriptions by {state, transport}; nil counts nothing.
	// The series always sum to the number of subscriptions.
	Gauge  *prometheus.GaugeVec
	Logger *slog.Logger
	// NewHandler returns the handler of a publisher's new subscription.
	NewHandler func(p fleet.Publisher) Handler
	// Stopped, when set, is told synchronously that a publisher's
	// subscription stopped (departed, or replaced because its record
	// changed: Running then reports its new subscription).
	Stopped func(p fleet.Publisher)

	mu   sync.Mutex
	subs map[uint64]*poolSub
	// switched are the publishers whose subscriptions a connector switch
	// ended, until the next Reconcile tells Stopped of those it no longer
	// wants as they were (bounded by MaxSubscriptions, as subs is).
	switched map[uint64]fleet.Publisher
	refused  map[uint64]bool // over MaxSubscriptions, logged once
	wg       sync.WaitGroup
	// bound is the Done channel of the context the loops run under, and
	// unbind undoes the hook that stops them all when it ends: one hook
	// for the pool rather than a context per subscription, which an idle
	// subscription would hold.
	bound  <-chan struct{}
	unbind func() bool
	// changed is closed at the next change of what Subscriptions lists
	// (made when Changed is first asked for it, then after each close).
	changed chan struct{}
}

type poolSub struct {
	pub   fleet.Publisher
	loop  *Loop
	state string
	// transport is the connector's, fixed for the subscription's life (the
	// gauge series it counts in).
	transport string
	// broker carries the current (or last) session, "" when direct.
	broker string
}

// Reconcile makes the running subscriptions those of want (at most
// MaxSubscriptions, lowest publisher ids first): a publisher that left or
// whose record changed is stopped, a new one started under ctx.
func (p *Pool) Reconcile(ctx context.Context, want []*fleet.Publisher) {
	want = slices.Clone(want)
	slices.SortFunc(want, func(a, b *fleet.Publisher) int { return cmp.Compare(a.PublisherID, b.PublisherID) })
	refused := map[uint64]bool{}
	if len(want) > MaxSubscriptions {
		for _, pub := range want[MaxSubscriptions:] {
			refused[pub.PublisherID] = true
			if !p.refused[pub.PublisherID] {
				p.logger().Warn("publisher not subscribed: at most 1024 subscriptions per family", "family", p.Family,
					"namespace", pub.Namespace, "publisher_id", pub.PublisherID)
			}
		}
		want = want[:MaxSubscriptions]
	}
	wanted := make(map[uint64]*fleet.Publisher, len(want))
	for _, pub := range want {
		wanted[pub.PublisherID] = pub
	}
	var stopped []fleet.Publisher
	p.mu.Lock()
	p.bindLocked(ctx)
	p.refused = refused
	if p.subs == nil {
		p.subs = map[uint64]*poolSub{}
	}
	for id, sub := range p.subs {
		if pub, ok := wanted[id]; !ok || *pub != sub.pub {
			p.stopLocked(id, sub)
			stopped = append(stopped, sub.pub)
		}
	}
	for id, old := range p.switched {
		if pub, ok := wanted[id]; !ok || *pub != old {
			stopped = append(stopped, old)
		}
	}
	p.switched = nil
	for _, pub := range want {
		if _, ok := p.subs[pub.PublisherID]; !ok && ctx.Err() == nil {
			p.startLocked(*pub)
		}
	}
	p.mu.Unlock()
	if p.Stopped != nil {
		for _, pub := range stopped {
			p.Stopped(pub)
		}
	}
}

// bindLocked makes the end of ctx stop every loop; p.mu is held. The
// callers reconcile under one context for the pool's life; a new one
// takes over from the old.
func (p *Pool) bindLocked(ctx context.Context) {
	// Contexts that end together (the same one, or values over it) share
	// their Done channel; comparing channels also never panics, as
	// comparing two contexts of a non-comparable type would.
	done := ctx.Done()
	if p.unbind != nil && done == p.bound {
		return
	}
	if p.unbind != nil {
		p.unbind()
	}
	p.bound = done
	p.unbind = context.AfterFunc(ctx, func() { p.halt(done) })
}

// halt stops every loop when the context the pool is bound to ends (done
// is its Done channel; a context the pool moved on from stops nothing).
// The subscriptions stay listed, as they were when the context ended.
func (p *Pool) halt(done <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if done != p.bound {
		return
	}
	for _, sub := range p.subs {
		sub.loop.Stop()
	}
}

// startLocked launches a subscription; p.mu is held.
func (p *Pool) startLocked(pub fleet.Publisher) {
	sub := &poolSub{pub: pub, transport: p.Connector.Transport()}
	p.subs[pub.PublisherID] = sub
	p.setLocked(sub, StatePending)
	sub.loop = &Loop{Endpoint: pub.ZmqEndpoint(), Topic: pub.Topic, Namespace: pub.Namespace, Limits: p.Limits, Connector: p.Connector,
		Handler: p.NewHandler(pub), State: func(s string) { p.transition(sub, s) }, Carrier: func(id string) { p.carrier(sub, id) }}
	p.wg.Add(1)
	sub.loop.start(p.wg.Done)
}

// stopLocked stops a subscription and forgets it; p.mu is held. Its loop
// ends on its own (stopping closes its connection); what it reports from
// now on is ignored.
func (p *Pool) stopLocked(id uint64, sub *poolSub) {
	sub.loop.Stop()
	delete(p.subs, id)
	p.setLocked(sub, "")
}

// SetConnector makes c the connector of the subscriptions that follow and
// ends the running ones, without telling Stopped: their publishers are
// still wanted, so what they fed is not discarded wholesale at the switch.
// The subscriptions the next Reconcile starts through c begin with a
// session like any other, and each Handler's Connected decides what of
// its publisher's past survives a new session; a publisher that Reconcile
// no longer wants as it was (it left, or its record changed meanwhile) is
// told to Stopped then, as if its subscription had run until that call.
func (p *Pool) SetConnector(c zmtp.Connector) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Connector = c
	for id, sub := range p.subs {
		p.stopLocked(id, sub)
		if p.switched == nil {
			p.switched = map[uint64]fleet.Publisher{}
		}
		p.switched[id] = sub.pub
	}
}

// Stop stops every subscription and waits for their loops, at most
// StopGrace.
func (p *Pool) Stop() {
	var stopped []fleet.Publisher
	p.mu.Lock()
	for id, sub := range p.subs {
		p.stopLocked(id, sub)
		stopped = append(stopped, sub.pub)
	}
	for _, pub := range p.switched {
		stopped = append(stopped, pub)
	}
	p.switched = nil
	p.mu.Unlock()
	if p.Stopped != nil {
		for _, pub := range stopped {
			p.Stopped(pub)
		}
	}
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(StopGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		p.logger().Warn("subscriptions did not stop within their grace", "family", p.Family, "grace", StopGrace)
	}
}

// transition records a state a loop reports, if its subscription still runs.
func (p *Pool) transition(sub *poolSub, state string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subs[sub.pub.PublisherID] == sub {
		p.setLocked(sub, state)
	}
}

// carrier records the broker carrying a subscription's session.
func (p *Pool) carrier(sub *poolSub, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sub.broker != id {
		sub.broker = id
		p.changedLocked()
	}
}

// setLocked moves a subscription to state ("" when it stops), moving the
// gauge from its previous state; p.mu is held.
func (p *Pool) setLocked(sub *poolSub, state string) {
	if p.Gauge != nil {
		if sub.state != "" {
			p.Gauge.WithLabelValues(sub.state, sub.transport).Dec()
		}
		if state != "" {
			p.Gauge.WithLabelValues(state, sub.transport).Inc()
		}
	}
	if sub.state != state {
		sub.state = state
		p.changedLocked()
	}
}

// Changed returns a channel closed at the next change of what
// Subscriptions lists (a subscription started, stopped, changed state or
// broker): a watch that needs no polling.
func (p *Pool) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changed == nil {
		p.changed = make(chan struct{})
	}
	return p.changed
}

// changedLocked tells the watchers of Changed; p.mu is held.
func (p *Pool) changedLocked() {
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

// Running reports whether a subscription to publisher id runs.
func (p *Pool) Running(id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.subs[id]
	return ok
}

// Refused reports whether the last Reconcile left the publisher out for
// the cap (MaxSubscriptions): it is still in the fleet, unsubscribed.
func (p *Pool) Refused(id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused[id]
}

// Subscriptions lists the running subscriptions in ascending publisher id.
func (p *Pool) Subscriptions() []SubscriptionInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]SubscriptionInfo, 0, len(p.subs))
	for _, sub := range p.subs {
		out = append(out, SubscriptionInfo{Family: p.Family, PublisherID: sub.pub.PublisherID, Namespace: sub.pub.Namespace,
			Component: sub.pub.Component, State: sub.state, Transport: sub.transport, Broker: sub.brokerNow()})
	}
	slices.SortFunc(out, func(a, b SubscriptionInfo) int { return cmp.Compare(a.PublisherID, b.PublisherID) })
	return out
}

// States counts the subscriptions in each state, read in one step (the
// gauge's series are read one at a time).
func (p *Pool) States() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, sub := range p.subs {
		out[sub.state]++
	}
	return out
}

// brokerNow is the broker relaying the subscription while it is connected.
func (sub *poolSub) brokerNow() string {
	if sub.state != StateConnected {
		return ""
	}
	return sub.broker
}

func (p *Pool) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Logger
}
