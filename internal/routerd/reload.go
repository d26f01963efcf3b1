package routerd

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/kvstack"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// Reload triggers (admin.Reload.Trigger).
const (
	TriggerFile   = "file"
	TriggerSignal = "signal"
	TriggerAdmin  = "admin"
)

// reloadDebounce gathers the events of one edit (an editor's write, rename
// and chmod; a ConfigMap's symlink swap) into one reload.
const reloadDebounce = 250 * time.Millisecond

// followReloads reloads the configuration file when it changes (its
// directory is watched) and on every Reload.Signal, until ctx ends.
func (d *Daemon) followReloads(ctx context.Context) error {
	var changed <-chan struct{}
	var errs <-chan error
	var last []byte // the file's content last read
	var watcher fileWatcher
	if file := d.reload.File; file != "" {
		w, err := newFileWatcher(newWatchedFiles(file))
		if err != nil {
			d.logger.Warn("the configuration file is not watched; reload with SIGHUP or PUT /admin/config", "file", file, "err", err)
		} else {
			defer func() { _ = w.Close() }()
			watcher, changed, errs = w, w.Changed(), w.Errors()
		}
		// An edit made between the first load and the watch is not lost.
		last = d.reloadFile(TriggerFile, nil, true)
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			// Which of the file's names an update touches depends on the
			// editor or the volume; whether it changed, on the content.
			debounce.Reset(reloadDebounce)
		case err := <-errs:
			d.logger.Warn("watching the configuration file", "file", d.reload.File, "err", err)
		case <-debounce.C:
			watcher.Rewatch()
			last = d.reloadFile(TriggerFile, last, false)
		case <-d.reload.Signal:
			// SIGHUP also reads server.tls's pair again, whatever the
			// configuration: the files may be renewed in place where no
			// watch sees it.
			d.mu.Lock()
			cert := d.cert
			d.mu.Unlock()
			if cert != nil {
				cert.reread("renewed")
			}
			if d.reload.File == "" {
				d.logger.Warn("reload requested, but the router was started without a configuration file: nothing to reload")
				continue
			}
			last = d.reloadFile(TriggerSignal, nil, false)
		}
	}
}

// reloadFile reloads Reload.File unless its content is prev, and returns
// the content read (nil when unreadable, so that the next change is
// tried). initial applies the file only when it differs from the
// configuration the daemon started with (an edit made before the watch
// was set up), silently otherwise: a document PUT to /admin/config as soon
// as the router was ready is not undone by a file that did not change.
func (d *Daemon) reloadFile(trigger string, prev []byte, initial bool) []byte {
	data, err := readConfig(d.reload.File)
	if err == nil && prev != nil && bytes.Equal(data, prev) {
		return prev
	}
	if err == nil && config.Empty(data) {
		// A file rewritten in place is empty between its truncation and
		// its write, and an empty file is a valid configuration (every
		// default, the admin API off): a change waits for the write's own
		// event, and a signal caught in between is refused, never
		// applied as every default.
		if trigger != TriggerFile {
			d.apply(trigger, nil, fmt.Errorf("%s is empty (a write in progress?)", d.reload.File), false)
			return prev
		}
		d.logger.Warn("the configuration file is empty; not reloaded (a write in progress?)", "file", d.reload.File)
		return prev
	}
	var doc *config.Document
	if err == nil {
		doc, err = config.Parse(d.reload.File, data, config.Options{Env: d.reload.Env})
	}
	if initial && err == nil && doc.Findings.Errors() == 0 && len(config.Diff(d.started, d.adjusted(doc.Config)).Changes) == 0 {
		return data
	}
	if res := d.apply(trigger, doc, err, false); res.Result != admin.ReloadApplied && err == nil && doc.Findings.Errors() == 0 {
		// A valid document refused for a reason outside it (a file it
		// names not there yet, a port in use) is tried again at the
		// next event, even with the same content: a Secret's volume may
		// be updated after its ConfigMap's.
		return nil
	}
	return data
}

// readConfig reads a configuration file, at most config.MaxFileBytes.
func readConfig(path string) ([]byte, error) {
	return config.ReadFile(path, config.MaxFileBytes)
}

// adjusted applies the command line's overrides to a loaded configuration.
func (d *Daemon) adjusted(cfg *config.Config) *config.Config {
	if d.reload.Adjust != nil {
		d.reload.Adjust(cfg)
	}
	return cfg
}

// importConfig is PUT /admin/config: the document replaces the running
// configuration, secrets read back as the mask keeping their values.
func (d *Daemon) importConfig(data []byte) admin.Reload {
	// ${VAR} references are refused: the router's environment holds
	// secrets that the import's findings, or the values read back, would
	// otherwise show the sender.
	if config.Empty(data) {
		// Every default (no listener beyond loopback, no backends, the
		// admin API off) is never what an import means: a request sent
		// without its document.
		return d.apply(TriggerAdmin, nil, errors.New("the document is empty: send the whole configuration (GET /admin/config gives the running one)"), true)
	}
	doc, err := config.Parse("admin import", data, config.Options{Env: d.reload.Env, NoEnvRefs: true, MaskedSecrets: true})
	return d.apply(TriggerAdmin, doc, err, true)
}

// configStatus is GET /admin/config/status.
func (d *Daemon) configStatus() admin.ConfigStatus {
	d.statusMu.Lock()
	defer d.statusMu.Unlock()
	return admin.ConfigStatus{Generation: d.gen, LastReload: d.last}
}

// apply reloads from a loaded document: refused whole when it has errors
// or a part of it cannot be set up (a port in use, a source that cannot be
// built), else applied, each change in its tier. It is the one way the
// running configuration changes.
func (d *Daemon) apply(trigger string, doc *config.Document, loadErr error, unmask bool) admin.Reload {
	d.mu.Lock()
	defer d.mu.Unlock()
	res := admin.Reload{Trigger: trigger, At: time.Now().UTC().Format(time.RFC3339Nano), Changes: []string{}, Findings: []string{}}
	if doc != nil {
		for _, f := range doc.Findings {
			res.Findings = append(res.Findings, f.String())
		}
	}
	err := loadErr
	switch {
	case d.closed:
		err = fmt.Errorf("the router is shutting down")
	case err == nil && doc.Findings.Errors() > 0:
		err = fmt.Errorf("%s has %s", doc.File, doc.Findings.ErrorCount())
	}
	if err != nil {
		return d.rejected(res, err)
	}
	cfg := d.adjusted(doc.Config)
	old := d.cfg.Load()
	if unmask {
		cfg.Unmask(old)
		if left := cfg.StillMasked(); len(left) > 0 {
			// The mask stands for a running secret only where the entry is
			// the same (a backend of the same name and url): sent as it
			// is, it would be the secret.
			return d.rejected(res, fmt.Errorf("%s: masked, with no running value to keep (a backend's url changed?): give the secret", strings.Join(left, ", ")))
		}
	}
	plan := config.Diff(old, cfg)
	for _, ch := range plan.Changes {
		res.Changes = append(res.Changes, ch.Path+" ("+ch.Tier.String()+")")
	}
	if len(plan.Changes) == 0 {
		res.Result = admin.ReloadApplied
		d.logger.Info("configuration reloaded: nothing changed", "trigger", trigger)
		return d.done(res, false)
	}
	prep, err := d.prepare(old, cfg, plan)
	if err == nil {
		// The last step that may refuse the reload.
		if err = d.applyBus(old, cfg); err != nil {
			prep.close()
		}
	}
	if err != nil {
		return d.rejected(res, err)
	}
	d.commit(old, cfg, plan, prep)
	res.Result = admin.ReloadApplied
	for _, f := range doc.Findings {
		d.logger.Warn("configuration warning", "finding", f.String())
	}
	d.logger.Info("configuration reloaded", "trigger", trigger, "changes", res.Changes)
	return d.done(res, true)
}

// rejected records a refused reload: the running configuration stays.
func (d *Daemon) rejected(res admin.Reload, err error) admin.Reload {
	res.Result, res.Error = admin.ReloadRejected, err.Error()
	d.logger.Error("configuration reload rejected; the running configuration stays", "trigger", res.Trigger, "err", err, "findings", res.Findings)
	return d.done(res, false)
}

// done records a reload's outcome in the status and the metrics; changed
// makes a new generation.
func (d *Daemon) done(res admin.Reload, changed bool) admin.Reload {
	d.statusMu.Lock()
	if changed {
		d.gen++
	}
	d.last = &res
	gen := d.gen
	d.statusMu.Unlock()
	d.cm.Reloads.WithLabelValues(res.Result).Inc()
	d.cm.Generation.Set(float64(gen))
	d.cm.LastReload.Set(float64(time.Now().Unix()))
	if res.Result == admin.ReloadApplied {
		d.cm.LastOK.Set(1)
	} else {
		d.cm.LastOK.Set(0)
	}
	return res
}

// prepared is what a reload sets up before it changes anything, so that a
// failure refuses it whole.
type prepared struct {
	main, admin *listener    // new listeners, nil when their address is unchanged
	cert        *certificate // server.tls's, nil for plain HTTP
	watcher     *discovery.Watcher
	conn        zmtp.Connector
	kv          *kvParts // KV-aware selection turned on
}

// prepare binds new listeners and builds the new discovery watcher, the
// connector and KV-aware selection a reload needs.
func (d *Daemon) prepare(old, cfg *config.Config, plan config.Plan) (p prepared, err error) {
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	p.cert = d.cert
	if !tlsEqual(cfg.Server.TLS, old.Server.TLS) {
		p.cert = nil
		if cfg.Server.TLS != nil {
			if p.cert, err = loadCertificate(*cfg.Server.TLS, d.logger); err != nil {
				return p, err
			}
		}
	}
	var tlsCfg *tls.Config
	if p.cert != nil {
		tlsCfg = p.cert.config()
	}
	if cfg.Server.BindAddress != old.Server.BindAddress {
		if p.main, err = d.bind("server.bind_address", cfg.Server.BindAddress, d.router.Handler(), true, cfg, tlsCfg); err != nil {
			return p, fmt.Errorf("%w; the running listener is kept", err)
		}
	}
	if cfg.Admin.BindAddress != old.Admin.BindAddress && cfg.Admin.BindAddress != "" {
		if p.admin, err = d.bind("admin.bind_address", cfg.Admin.BindAddress, d.router.AdminHandler(), false, cfg, tlsCfg); err != nil {
			return p, fmt.Errorf("%w; the running listener is kept", err)
		}
	}
	if !cfg.Dynamo.Enabled {
		return p, nil
	}
	if p.conn, err = d.connector(cfg); err != nil {
		return p, err
	}
	if plan.Watcher != nil || !old.Dynamo.Enabled {
		if p.watcher, err = d.newWatcher(cfg); err != nil {
			return p, err
		}
	}
	if cfg.Dynamo.KV.Enabled {
		if _, err = artifactPolicy(&cfg.Dynamo.KV); err != nil {
			return p, err
		}
		if d.dyn.kv == nil {
			if p.kv, err = d.newKV(cfg, p.conn); err != nil {
				return p, err
			}
		}
	}
	return p, nil
}

// close releases what a refused reload had bound.
func (p *prepared) close() {
	for _, l := range []*listener{p.main, p.admin} {
		if l != nil {
			_ = l.ln.Close()
		}
	}
}

// commit applies a prepared reload: the immediate settings first (read at
// the next request), then the listeners, the subscriptions, KV-aware
// selection and the discovery watcher. d.mu is held.
func (d *Daemon) commit(old, cfg *config.Config, plan config.Plan, p prepared) {
	// Whatever the reload replaced, the coverage gauges count it again.
	defer d.kickCoverage()
	d.cfg.Store(cfg)
	d.store.SetMaxStaleness(cfg.Dynamo.Load.MaxStaleness.D())
	d.router.SetConfig(cfg)
	d.swapListeners(old, cfg, p)
	d.commitBus(old, cfg)
	d.commitCoverage(cfg)

	switch {
	case old.Dynamo.Enabled && !cfg.Dynamo.Enabled:
		d.stopDynamo()
		return
	case !old.Dynamo.Enabled && cfg.Dynamo.Enabled:
		d.logger.Info("dynamo discovery watcher starting", "reason", config.ReasonEnabled)
		d.dm.Events.WithLabelValues(telemetry.KindRestart).Inc()
		dp := dynamoParts{watcher: p.watcher, supervisor: load.NewSupervisor(d.registry, d.store, p.conn, d.lm, d.logger), kv: p.kv}
		d.setDynamo(dp)
		d.startDynamo(&d.dyn)
		d.setPicker()
		return
	case !cfg.Dynamo.Enabled:
		return
	}

	if plan.RestartSubscriptions {
		d.logger.Info("load and kv-events subscriptions restarting", "transport", cfg.Dynamo.Load.Transport)
		d.dyn.supervisor.SetConnector(p.conn)
		if k := d.dyn.kv; k != nil {
			k.st.Subscriptions.SetConnector(p.conn)
		}
	}
	// A part turned off stops together with the watcher a restart
	// replaces: one transition waits one grace at most.
	off := d.applyKV(cfg, p)
	if plan.Watcher != nil {
		d.replaceWatcher(cfg, plan.Watcher, p.watcher, off)
		return
	}
	stopParts(d.logger, off)
}

// applyKV turns KV-aware selection on or off, or gives it its new
// settings; the index is kept across settings changes. Turned off, its
// part is returned to be stopped (it is no longer used).
func (d *Daemon) applyKV(cfg *config.Config, p prepared) (off *part) {
	k := d.dyn.kv
	switch {
	case k != nil && !cfg.Dynamo.KV.Enabled:
		d.dyn.kv = nil
		d.kvState.Store(nil)
		d.setPicker()
		d.logger.Info("KV-aware selection off")
		return k.part()
	case k == nil && p.kv != nil:
		d.dyn.kv = p.kv
		d.startKV(p.kv)
		d.kvState.Store(p.kv)
		d.setPicker()
		d.logger.Info("KV-aware selection on")
	case k != nil:
		policy, _ := artifactPolicy(&cfg.Dynamo.KV) // checked in prepare
		k.st.Loader.SetPolicy(policy)
		k.st.Picker.SetSettings(kvstack.Settings(&cfg.Dynamo.KV))
	}
	return nil
}

// setPicker gives the router the picker the running parts call for,
// unless Deps fixed it.
func (d *Daemon) setPicker() {
	if !d.fixedPicker {
		d.router.SetPicker(d.picker())
	}
}

// replaceWatcher stops the running discovery watcher and starts w: the
// registry keeps its view when only the backoff changed (until w's first
// full resync), loses only the removed namespaces when namespaces were
// added or removed, and is emptied otherwise.
func (d *Daemon) replaceWatcher(cfg *config.Config, wr *config.WatcherRestart, w *discovery.Watcher, alsoStop *part) {
	d.logger.Info("dynamo discovery watcher restarting", "reason", wr.Reason, "pruned_namespaces", wr.Prune)
	if wr.CountRestart {
		d.dm.Events.WithLabelValues(telemetry.KindRestart).Inc()
	}
	// The old watcher stops publishing before the registry changes hands,
	// not once its source returns (within the stop grace): the router has
	// the new configuration already, and must not pin workers of a source
	// or namespace it no longer follows meanwhile. Halted, it cannot
	// publish over the new one, which therefore starts at once instead of
	// after the old source returns: requests waiting for the new view wait
	// for its first resync alone.
	prevRun := d.dyn.watcherRun
	if prevRun != nil {
		prevRun.cancel()
	}
	if prev := d.dyn.watcher; prev != nil {
		prev.Halt()
	}
	// Halted, the old watcher no longer reports: the gauge says what the
	// admin view says (w's Connected), not connected until w is seeded,
	// rather than the old watcher's last word until then.
	d.dm.Connected.Set(0)
	// Where the registry keeps the view, the new watcher keeps its
	// workers' first_seen too: they are the same workers, still routed.
	switch {
	case wr.KeepSnapshot, wr.Reason == config.ReasonNamespaces:
		if wr.Reason == config.ReasonNamespaces && len(wr.Prune) > 0 {
			d.registry.Publish(d.registry.Snapshot().Within(cfg.Dynamo.Discovery.Namespaces()))
		}
		w.Predecessor = d.registry.Snapshot()
		// A view kept before the old watcher's first resync was never a
		// whole one: requests go on waiting, now for the new watcher's
		// (the old one, halted, would never end their wait).
		if s := d.settling.Load(); s != nil {
			select {
			case <-s.done:
			default:
				d.settling.Store(&settle{done: w.Synced()})
			}
		}
	default:
		// Settling first: a request that finds the emptied view waits
		// for the new one rather than going the plain way.
		d.settling.Store(&settle{done: w.Synced()})
		d.registry.Reset()
	}
	d.dyn.watcher = w
	d.watcher.Store(w)
	d.dyn.watcherRun = d.start("dynamo discovery", w.Run)
	stopParts(d.logger, prevRun, alsoStop)
}

// stopDynamo stops every Dynamo part (discovery turned off) and empties
// the registry.
func (d *Daemon) stopDynamo() {
	d.logger.Info("dynamo discovery watcher stopping", "reason", config.ReasonEnabled)
	dp := d.dyn
	if dp.watcher != nil {
		// Handed over to no one: a pass still under way (its source
		// returning within the stop grace) cannot set the gauge again.
		dp.watcher.Halt()
	}
	d.dm.Connected.Set(0)
	d.setDynamo(dynamoParts{})
	d.settling.Store(nil)
	d.setPicker()
	stopParts(d.logger, dp.kv.part(), dp.loadRun, dp.watcherRun)
	d.registry.Reset()
}

// swapListeners starts serving the new listeners and lets the replaced
// ones finish their requests (within the shutdown grace) in the
// background; an admin listener no longer configured is retired the same
// way. A listener that stays takes the new settings for the connections
// that follow. During a drain nothing new is served.
func (d *Daemon) swapListeners(old, cfg *config.Config, p prepared) {
	if p.cert != d.cert {
		d.certRun.stop(d.logger)
		d.cert, d.certRun = p.cert, nil
		if p.cert != nil {
			d.certRun = d.start("TLS certificate reloads", p.cert.run)
		}
	}
	var tlsCfg *tls.Config
	if d.cert != nil {
		tlsCfg = d.cert.config()
	}
	d.lnMu.Lock()
	defer d.lnMu.Unlock()
	if d.draining {
		p.close()
		return
	}
	var retire []*listener
	var replaced []*served
	if p.main != nil {
		retire = append(retire, d.main)
		d.main = p.main
		d.serve(p.main)
		d.logger.Info("listening on a new address; the old listener drains", "address", p.main.addr(), "old", retire[0].addr())
	} else if s := d.reconfigure(d.main, cfg, tlsCfg); s != nil {
		replaced = append(replaced, s)
	}
	if cfg.Admin.BindAddress != old.Admin.BindAddress {
		if d.admin != nil {
			retire = append(retire, d.admin)
		}
		d.admin = p.admin
		if p.admin != nil {
			d.serve(p.admin)
			d.logger.Info("admin API on a new address", "address", p.admin.addr())
		} else {
			d.logger.Info("admin API back on the main listener")
		}
	} else if d.admin != nil {
		if s := d.reconfigure(d.admin, cfg, tlsCfg); s != nil {
			replaced = append(replaced, s)
		}
	}
	for _, l := range retire {
		d.retiring.Go(func() { l.shutdown(d.logger, d.grace) })
	}
	// A replaced server's open requests finish on the old settings,
	// bounded by their own limits (the backends' timeouts, write_timeout),
	// not by the shutdown's grace: a reload is no shutdown, and a long
	// stream would be cut by it. The daemon's shutdown ends them with the
	// rest, at the end of its grace.
	if d.replaced == nil {
		d.replaced = map[*served]struct{}{}
	}
	for _, s := range replaced {
		d.replaced[s] = struct{}{}
		d.retiring.Go(func() {
			s.replaced(d.retireEnd, d.logger)
			d.lnMu.Lock()
			delete(d.replaced, s)
			d.lnMu.Unlock()
		})
	}
}

// tlsEqual reports whether two server.tls settings name the same files.
func tlsEqual(a, b *config.ServerTLS) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
