package routerd

import (
	"context"
	"slices"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/eventbus"
)

// coverageDebounce is how long after a change the broker coverage gauges
// are brought up to date: a broker coming or going changes many
// subscriptions one after another, and the changes made within this long
// of the first are counted together.
const coverageDebounce = 250 * time.Millisecond

// busSettings are the event bus settings of a configuration.
func busSettings(cfg *config.Config) eventbus.Settings {
	e := &cfg.Dynamo.EventBus
	s := eventbus.Settings{Listen: e.Listen, CertFile: e.TLS.Cert, KeyFile: e.TLS.Key, ClientCAFile: e.TLS.ClientCA,
		MaxSessions: e.MaxSessions, MaxStreamsPerSession: e.MaxStreamsPerSession, MaxSessionBufferBytes: e.MaxSessionBufferBytes,
		HeartbeatInterval: e.HeartbeatInterval.D(), IdleTimeout: e.IdleTimeout.D()}
	for _, b := range e.Brokers {
		s.Entries = append(s.Entries, eventbus.Entry{ID: b.ID, Role: b.Role, TokenHash: b.TokenHash,
			Namespaces: slices.Clone(b.Namespaces), Backends: slices.Clone(b.Backends)})
	}
	return s
}

// startBus starts the event bus listener. d.mu is held.
func (d *Daemon) startBus() { d.busRun = d.start("event bus listener", d.bus.Run) }

// applyBus gives the event bus a reload's settings. Only settings invalid
// in themselves are refused: a listen address in use or TLS files that do
// not load make the listener log that it failed to start and retry, as at
// startup. It is the last step of prepare, so that nothing after it can
// refuse the reload. Settings that turn the bus off are not given to it:
// they need no TLS files and no free address (commitBus stops the
// listener), and a reload that turns it on again gives it the settings of
// then.
func (d *Daemon) applyBus(old, cfg *config.Config) error {
	if !cfg.Dynamo.EventBus.Enabled || equalBus(&old.Dynamo.EventBus, &cfg.Dynamo.EventBus) {
		return nil
	}
	return d.bus.Apply(busSettings(cfg))
}

func equalBus(a, b *config.EventBus) bool {
	return len(config.Diff(&config.Config{Dynamo: config.Dynamo{EventBus: *a}}, &config.Config{Dynamo: config.Dynamo{EventBus: *b}}).Changes) == 0
}

// commitBus starts or stops the listener when a reload turned it on or
// off. d.mu is held.
func (d *Daemon) commitBus(old, cfg *config.Config) {
	switch on := cfg.Dynamo.EventBus.Enabled; {
	case on && !old.Dynamo.EventBus.Enabled:
		d.logger.Info("event bus listener starting")
		d.startBus()
	case !on && old.Dynamo.EventBus.Enabled:
		d.logger.Info("event bus listener stopping")
		d.busRun.stop(d.logger)
		d.busRun = nil
	}
}

// brokerCoverage is broker_coverage: for each configured namespace, the
// broker sessions covering it and the broker subscriptions waiting for
// one.
func (d *Daemon) brokerCoverage() []admin.BrokerCoverage {
	cfg := d.cfg.Load()
	pending := map[string]int{}
	for _, s := range d.subscriptions() {
		if s.Transport == config.TransportBroker && s.State == load.StatePending {
			pending[s.Namespace]++
		}
	}
	out := []admin.BrokerCoverage{}
	for _, c := range d.bus.Coverage(cfg.Dynamo.Discovery.Namespaces()) {
		out = append(out, admin.BrokerCoverage{Namespace: c.Namespace, Covered: len(c.Brokers) > 0, Brokers: c.Brokers,
			PendingSubscriptions: pending[c.Namespace]})
	}
	return out
}

// brokerTransport reports whether cfg's load signals go through brokers,
// the only transport the coverage gauges describe.
func brokerTransport(cfg *config.Config) bool {
	return cfg.Dynamo.Enabled && cfg.Dynamo.Load.Transport == config.TransportBroker
}

// commitCoverage runs the coverage reporter while cfg's load signals go
// through brokers, and only then (with another transport it would count
// nothing). d.mu is held.
func (d *Daemon) commitCoverage(cfg *config.Config) {
	switch on := brokerTransport(cfg); {
	case on && d.coverageRun == nil:
		d.coverageRun = d.start("broker coverage", d.reportCoverage)
	case !on && d.coverageRun != nil:
		d.coverageRun.stop(d.logger)
		d.coverageRun = nil
	}
}

// reportCoverage keeps the broker gauges up to date (transport: broker)
// until ctx ends: sessions per configured namespace, pending subscriptions
// per family and namespace, connected subscriptions per family and
// configured broker. It sets them at once, then coverageDebounce after
// each change of what they count (the event bus's sessions, the load and
// kv-events subscriptions, a reload), and sleeps while nothing changes.
// Series that no longer apply are deleted; when it ends because the
// transport changed, all of them (none are kept with another transport).
func (d *Daemon) reportCoverage(ctx context.Context) error {
	var last coverageSeries
	for {
		// The watches are taken before the count, so that no change
		// made while it counts goes unseen.
		bus, ld, kv := d.coverageChanges()
		last = d.setCoverage(last)
		select {
		case <-ctx.Done():
			d.setCoverage(last) // the configuration of now: none with another transport
			return nil
		case <-bus:
		case <-ld:
		case <-kv:
		case <-d.coverageKick:
		}
		t := time.NewTimer(coverageDebounce)
		select {
		case <-ctx.Done():
			t.Stop()
			d.setCoverage(last)
			return nil
		case <-t.C:
		}
	}
}

// coverageChanges are closed at the next change of the event bus's
// sessions, of the load subscriptions and of the kv-events subscriptions
// (nil for parts that do not run: never closed). A reload that replaces
// the parts says so on coverageKick.
func (d *Daemon) coverageChanges() (bus, ld, kv <-chan struct{}) {
	bus = d.bus.Changed()
	if s := d.loadSubs.Load(); s != nil {
		ld = s.Changed()
	}
	if k := d.kvState.Load(); k != nil {
		kv = k.st.Subscriptions.Changed()
	}
	return bus, ld, kv
}

// kickCoverage tells the coverage reporter that a reload may have changed
// what it counts (the namespaces, the brokers, the parts it watches).
func (d *Daemon) kickCoverage() {
	select {
	case d.coverageKick <- struct{}{}:
	default:
	}
}

// coverageSeries are the label values the reporter set last.
type coverageSeries struct {
	namespaces []string
	pending    [][2]string
	brokers    [][2]string
}

// families of the broker subscriptions.
var families = []string{"kv_metrics", "kv-events"}

func (d *Daemon) setCoverage(last coverageSeries) coverageSeries {
	d.coverageCounts.Add(1)
	cfg := d.cfg.Load()
	var now coverageSeries
	if brokerTransport(cfg) {
		namespaces := cfg.Dynamo.Discovery.Namespaces()
		pending := map[[2]string]int{}
		relayed := map[[2]string]int{}
		for _, s := range d.subscriptions() {
			if s.Transport != config.TransportBroker {
				continue
			}
			switch {
			case s.State == load.StatePending:
				pending[[2]string{s.Family, s.Namespace}]++
			case s.State == load.StateConnected && s.Broker != "":
				relayed[[2]string{s.Family, s.Broker}]++
			}
		}
		for _, c := range d.bus.Coverage(namespaces) {
			d.bm.NamespaceSessions.WithLabelValues(c.Namespace).Set(float64(len(c.Brokers)))
			now.namespaces = append(now.namespaces, c.Namespace)
			for _, f := range families {
				k := [2]string{f, c.Namespace}
				d.bm.PendingSubscriptions.WithLabelValues(f, c.Namespace).Set(float64(pending[k]))
				now.pending = append(now.pending, k)
			}
		}
		for _, b := range cfg.Dynamo.EventBus.Brokers {
			if b.Role != config.BusRoleBroker {
				continue
			}
			for _, f := range families {
				k := [2]string{f, b.ID}
				d.bm.BrokerSubscriptions.WithLabelValues(f, b.ID).Set(float64(relayed[k]))
				now.brokers = append(now.brokers, k)
			}
		}
	}
	for _, ns := range last.namespaces {
		if !slices.Contains(now.namespaces, ns) {
			d.bm.NamespaceSessions.DeleteLabelValues(ns)
		}
	}
	for _, k := range last.pending {
		if !slices.Contains(now.pending, k) {
			d.bm.PendingSubscriptions.DeleteLabelValues(k[0], k[1])
		}
	}
	for _, k := range last.brokers {
		if !slices.Contains(now.brokers, k) {
			d.bm.BrokerSubscriptions.DeleteLabelValues(k[0], k[1])
		}
	}
	return now
}

// BusAddr is the event bus listener's address, "" while it is not
// listening.
func (d *Daemon) BusAddr() string {
	if a := d.bus.LocalAddr(); a != nil {
		return a.String()
	}
	return ""
}
