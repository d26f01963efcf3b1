// Package routerd is the serving daemon: from a validated configuration it
// builds Dynamo discovery, the load subscriptions, the picker and the HTTP
// router, and runs them as one process that drains gracefully. It knows
// nothing of the command line, the simulator or the demo: `continuum serve`
// hands it a configuration and values, and the demo assembles it beside the
// simulated fleet.
//
// Imports: admin, config, telemetry and the engines (artifact, discovery
// and its sources, fleet, kvstack, load, pick, router, zmtp); never cli,
// iostreams or fleetsim.
package routerd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kvstack"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// DefaultShutdownGrace bounds draining in-flight requests when Deps names
// no grace.
const DefaultShutdownGrace = 30 * time.Second

// Deps are the values a daemon is built with besides its configuration.
type Deps struct {
	// Logger receives every log line; nothing is logged when nil.
	Logger *slog.Logger
	// Metrics is the registry /metrics serves; a new one when nil. The Go
	// and process collectors are registered on it.
	Metrics *prometheus.Registry
	// Picker replaces the load-based picker (the routing benchmark
	// compares pickers); KV-aware selection then never replaces it.
	Picker pick.Picker
	// ShutdownGrace bounds draining in-flight requests at shutdown;
	// DefaultShutdownGrace when zero.
	ShutdownGrace time.Duration
	// ShutdownDelay is how long the daemon keeps serving, not ready,
	// after its context ends and before it stops accepting: the time load
	// balancers and Kubernetes endpoints take to stop sending it new
	// connections. Zero stops accepting at once.
	ShutdownDelay time.Duration
	// Reload says where a running daemon reloads its configuration from.
	Reload Reload
}

// Reload is where a daemon's configuration comes from when it reloads. A
// document PUT to /admin/config reloads whatever this holds.
type Reload struct {
	// File is the configuration file, watched for changes (its directory
	// is, so that an editor's rename-and-replace and a Kubernetes
	// ConfigMap's symlink swap are seen); "" watches nothing.
	File string
	// Env resolves ${VAR} references in reloaded documents; os.LookupEnv
	// when nil.
	Env config.LookupEnv
	// Adjust applies what overrides the file (command-line flags) to
	// every reloaded configuration, as to the first.
	Adjust func(*config.Config)
	// Signal reloads File on every receive (SIGHUP).
	Signal <-chan struct{}
}

// Daemon is the router process: its parts, built and bound, not running
// until Run.
type Daemon struct {
	logger *slog.Logger
	grace  time.Duration
	delay  time.Duration
	reload Reload

	promReg *prometheus.Registry
	dm      *telemetry.DiscoveryMetrics
	bm      *telemetry.EventBusMetrics
	lm      *telemetry.LoadMetrics
	cm      *telemetry.ConfigMetrics
	rm      *telemetry.RouterMetrics
	// KV metric families, registered when KV-aware selection is first
	// built.
	kvFamilies *kvstack.Families

	cfg atomic.Pointer[config.Config]
	// clientConns counts the client connections open on the main
	// listener, and on the one it replaced while that drains after a
	// rebind: server.max_connections caps them together.
	clientConns atomic.Int64
	// started is the configuration the daemon started with: the file's
	// first check after the watch is set up compares with it.
	started  *config.Config
	registry *fleet.Registry
	store    *load.Store
	base     *pick.LoadBased
	router   *router.Server
	// fixedPicker: Deps named the picker; reloads never replace it.
	fixedPicker bool

	// bus is the event bus, built whether or not it is enabled (a reload
	// may enable it); its listener runs as busRun while enabled.
	bus *eventbus.Bus

	// mu serializes reloads with each other and with shutdown, and guards
	// the parts and the reload status.
	mu     sync.Mutex
	dyn    dynamoParts
	busRun *part
	// coverageRun keeps the broker gauges while the load signals go
	// through brokers (reportCoverage); nil otherwise.
	coverageRun *part
	partsCtx    context.Context // set by Run
	closed      bool            // Run is shutting down: no more reloads

	// coverageKick wakes the coverage reporter after a reload (capacity 1).
	coverageKick chan struct{}
	// coverageCounts counts the times the coverage gauges were set.
	coverageCounts atomic.Uint64

	// statusMu guards the reload status, read while a reload runs.
	statusMu sync.Mutex
	gen      uint64
	last     *admin.Reload

	// Views read from request goroutines.
	watcher  atomic.Pointer[discovery.Watcher]
	loadSubs atomic.Pointer[load.Supervisor]
	kvState  atomic.Pointer[kvParts]
	settling atomic.Pointer[settle]

	// lnMu guards the listeners; a reload may replace them while Run
	// drains.
	lnMu     sync.Mutex
	main     *listener
	admin    *listener
	draining bool
	// replaced are the servers a reload replaced still serving their
	// connections (guarded by lnMu): the drain closes their idle ones.
	replaced map[*served]struct{}
	// noKeepAlive: the shutdown delay began, and answers close their
	// connections (guarded by lnMu).
	noKeepAlive bool
	retiring    sync.WaitGroup // replaced listeners and servers finishing their requests
	// retireEnd ends at the end of the shutdown's grace (or at Close): the
	// requests of servers a reload replaced are cut then.
	retireEnd   context.Context
	endRetiring context.CancelCauseFunc
	// graceEnd ends retireEnd at the shutdown grace's end (drain sets it,
	// Run stops it once nothing is left to cut).
	graceEnd *time.Timer
	// cert is server.tls's certificate (nil for plain HTTP), reloaded by
	// certRun when its files change; guarded by mu.
	cert    *certificate
	certRun *part

	failed chan error
}

// settle is a discovery view in the making: done closes when the watcher
// that started after the registry was emptied has published its first view.
type settle struct{ done <-chan struct{} }

// New builds a daemon from a validated configuration and binds its
// listeners (server.bind_address, and admin.bind_address when set), so that
// a port in use is an error here rather than in Run. A daemon that is not
// Run must be Closed.
func New(cfg *config.Config, deps Deps) (*Daemon, error) {
	logger := deps.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	promReg := deps.Metrics
	if promReg == nil {
		promReg = prometheus.NewRegistry()
	}
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d := &Daemon{logger: logger, grace: deps.ShutdownGrace, delay: max(deps.ShutdownDelay, 0), reload: deps.Reload, promReg: promReg, gen: 1,
		dm: telemetry.NewDiscoveryMetrics(promReg), lm: telemetry.NewLoadMetrics(promReg), cm: telemetry.NewConfigMetrics(promReg),
		rm:     telemetry.NewRouterMetrics(promReg),
		failed: make(chan error, 1), coverageKick: make(chan struct{}, 1)}
	if d.grace <= 0 {
		d.grace = DefaultShutdownGrace
	}
	d.retireEnd, d.endRetiring = context.WithCancelCause(context.Background())
	d.cfg.Store(cfg)
	d.started = cfg
	d.bm = telemetry.NewEventBusMetrics(promReg)
	bus, err := eventbus.New(busSettings(cfg), d.bm, logger)
	if err != nil {
		return nil, fmt.Errorf("dynamo.event_bus: %w", err)
	}
	d.bus = bus
	d.registry = fleet.NewRegistry(logger, discovery.ProblemCounter(d.dm))
	d.store = load.NewStore(cfg.Dynamo.Load.MaxStaleness.D(), load.Gauges{M: d.lm})
	d.base = pick.NewLoadBased(d.store)
	if cfg.Dynamo.Enabled {
		if err := d.buildDynamo(cfg); err != nil {
			return nil, err
		}
	} else if len(cfg.Dynamo.Shim.Backends)+len(cfg.Dynamo.Shim.Pools) > 0 {
		logger.Warn("dynamo.shim is configured but dynamo.enabled is false: nothing is pinned")
	}
	picker := deps.Picker
	d.fixedPicker = picker != nil
	if picker == nil {
		picker = d.picker()
	}
	d.router = router.New(router.Options{Config: cfg, Registry: d.registry, Store: d.store, Picker: picker,
		Metrics: d.rm, Gatherer: promReg, Logger: logger,
		DiscoveryConnected: d.discoveryConnected, Subscriptions: d.subscriptions, KV: d.kvView, CountTokens: d.countTokens, BrokerCoverage: d.brokerCoverage,
		ImportConfig: d.importConfig, ConfigStatus: d.configStatus, DiscoverySettling: d.discoverySettling})
	if err := d.listen(cfg); err != nil {
		return nil, err
	}
	return d, nil
}

// buildDynamo builds the Dynamo parts of cfg (discovery, the load
// subscriptions, KV-aware selection when enabled), not started.
func (d *Daemon) buildDynamo(cfg *config.Config) error {
	w, err := d.newWatcher(cfg)
	if err != nil {
		return err
	}
	conn, err := d.connector(cfg)
	if err != nil {
		return err
	}
	dp := dynamoParts{watcher: w, supervisor: load.NewSupervisor(d.registry, d.store, conn, d.lm, d.logger)}
	if cfg.Dynamo.KV.Enabled {
		if dp.kv, err = d.newKV(cfg, conn); err != nil {
			return err
		}
	}
	d.setDynamo(dp)
	return nil
}

// setDynamo installs dp as the running Dynamo parts and publishes their
// views.
func (d *Daemon) setDynamo(dp dynamoParts) {
	d.dyn = dp
	d.watcher.Store(dp.watcher)
	d.loadSubs.Store(dp.supervisor)
	d.kvState.Store(dp.kv)
}

// picker is the picker the Dynamo parts call for: KV-aware when running,
// else load-based.
func (d *Daemon) picker() pick.Picker {
	if k := d.kvState.Load(); k != nil {
		return k.st.Picker
	}
	return d.base
}

// discoveryConnected reports whether discovery is seeded and watching.
func (d *Daemon) discoveryConnected() bool {
	w := d.watcher.Load()
	return w != nil && w.Connected()
}

// discoverySettling returns a channel closed when the registry, emptied at
// start or by a reload, holds the new watcher's first view; nil when it
// holds a view now.
func (d *Daemon) discoverySettling() <-chan struct{} {
	s := d.settling.Load()
	if s == nil {
		return nil
	}
	select {
	case <-s.done:
		return nil
	default:
		return s.done
	}
}

// kvView is GET /admin/dynamo/kv.
func (d *Daemon) kvView() admin.KVResponse {
	if k := d.kvState.Load(); k != nil {
		return k.st.View()
	}
	return admin.KVResponse{Ranks: []admin.KVRank{}, Results: []admin.KVCount{}, Subscriptions: []admin.Subscription{}, Events: []admin.KVCount{}}
}

// countTokens is POST /v1/messages/count_tokens: the prompt's size as
// KV-aware selection renders and tokenizes it.
func (d *Daemon) countTokens(model string, body []byte) (int, string) {
	k := d.kvState.Load()
	if k == nil {
		return 0, router.CountTokensOff
	}
	return k.st.Prompts.Count(d.registry.Snapshot(), model, body)
}

// subscriptions lists the load and kv-events subscriptions.
func (d *Daemon) subscriptions() []load.SubscriptionInfo {
	var out []load.SubscriptionInfo
	if s := d.loadSubs.Load(); s != nil {
		out = append(out, s.Subscriptions()...)
	}
	if k := d.kvState.Load(); k != nil {
		out = append(out, k.st.Subscriptions.Subscriptions()...)
	}
	return out
}

// listen loads the TLS certificate when configured and binds the main
// listener and, when configured, the admin one.
func (d *Daemon) listen(cfg *config.Config) error {
	var tlsCfg *tls.Config
	if cfg.Server.TLS != nil {
		c, err := loadCertificate(*cfg.Server.TLS, d.logger)
		if err != nil {
			return err
		}
		d.cert, tlsCfg = c, c.config()
	}
	main, err := d.bind("server.bind_address", cfg.Server.BindAddress, d.router.Handler(), true, cfg, tlsCfg)
	if err != nil {
		return err
	}
	d.main = main
	if len(cfg.APIKeys) == 0 && !isLoopback(main.ln.Addr()) {
		d.logger.Warn("no api_keys: the router accepts requests from anyone who can reach it", "address", d.Addr())
	}
	if cfg.Admin.BindAddress != "" {
		if d.admin, err = d.bind("admin.bind_address", cfg.Admin.BindAddress, d.router.AdminHandler(), false, cfg, tlsCfg); err != nil {
			d.Close()
			return err
		}
	}
	return nil
}

// Addr is the main listener's address.
func (d *Daemon) Addr() string {
	d.lnMu.Lock()
	defer d.lnMu.Unlock()
	return d.main.addr()
}

// AdminAddr is the admin listener's address, "" when the admin API is
// served on the main listener.
func (d *Daemon) AdminAddr() string {
	d.lnMu.Lock()
	defer d.lnMu.Unlock()
	return d.admin.addr()
}

// Close releases the listeners of a daemon that was not Run.
func (d *Daemon) Close() {
	d.endRetiring(errors.New("daemon closed"))
	d.lnMu.Lock()
	defer d.lnMu.Unlock()
	for _, l := range []*listener{d.main, d.admin} {
		if l != nil {
			_ = l.ln.Close()
		}
	}
}

// Run serves until ctx ends, then shuts down in order: the router stops
// being ready (and serves on, not ready, for the shutdown delay), stops
// accepting, in-flight requests drain for the grace period, and only then
// discovery and the subscriptions stop (a draining request may still need
// the fleet view), each within StopGrace. While it runs, the configuration
// reloads from Deps.Reload. It returns nil after a clean shutdown, or the
// error of the part that failed (which shuts the rest down the same way).
func (d *Daemon) Run(ctx context.Context) error {
	// The parts run under their own context, ended only after the drain.
	parts, cancelParts := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelParts()
	d.mu.Lock()
	d.partsCtx = parts
	if d.dyn.watcher != nil {
		d.startDynamo(&d.dyn)
	}
	if d.cfg.Load().Dynamo.EventBus.Enabled {
		d.startBus()
	}
	d.commitCoverage(d.cfg.Load())
	routerRun := d.start("backend health checks", d.router.Run)
	if d.cert != nil {
		d.certRun = d.start("TLS certificate reloads", d.cert.run)
	}
	d.mu.Unlock()
	d.lnMu.Lock()
	d.serve(d.main)
	if d.admin != nil {
		d.serve(d.admin)
	}
	d.lnMu.Unlock()
	reloads := d.start("configuration reloads", d.followReloads)
	d.router.SetReady(true)
	d.logger.Info("continuum serving", "address", d.Addr(), "admin", d.AdminAddr(), "dynamo", d.cfg.Load().Dynamo.Enabled)

	var err error
	select {
	case <-ctx.Done():
		err = d.holdUnready()
	case err = <-d.failed:
	}
	d.drain()
	reloads.stop(d.logger)
	// A reload in progress finishes first (its own stops are bounded).
	d.mu.Lock()
	d.closed = true
	stopParts(d.logger, d.dyn.watcherRun, d.dyn.loadRun, d.dyn.kv.part(), routerRun, d.certRun, d.busRun, d.coverageRun)
	d.mu.Unlock()
	d.retiring.Wait()
	// Nothing is left in flight: no timer waits on, and the router's
	// connections to its backends close now rather than at their idle
	// timeout, in a process that may go on (the demo, an embedding one).
	d.graceEnd.Stop()
	d.endRetiring(errors.New("daemon stopped"))
	d.router.CloseIdleConnections()
	if err == nil {
		// A part that failed while shutting down still says so.
		select {
		case err = <-d.failed:
		default:
		}
	}
	return err
}

// startDynamo starts the Dynamo parts; the registry waits for the
// watcher's first view. d.mu is held.
func (d *Daemon) startDynamo(dp *dynamoParts) {
	d.settling.Store(&settle{done: dp.watcher.Synced()})
	dp.watcherRun = d.start("dynamo discovery", dp.watcher.Run)
	dp.loadRun = d.start("load subscriptions", dp.supervisor.Run)
	if dp.kv != nil {
		d.startKV(dp.kv)
	}
}

// holdUnready keeps serving for the shutdown delay with readiness
// withdrawn, so that new connections stop coming before the listeners
// close; a part that fails meanwhile ends the wait with its error.
func (d *Daemon) holdUnready() error {
	if d.delay <= 0 {
		return nil
	}
	// Answers from now on close their connections (before readiness goes,
	// so that no answer after it keeps one): a client that keeps its
	// connections (an ingress's pool) is not steered by readiness, and
	// would otherwise reuse one until the drain closed it idle under its
	// next request.
	d.lnMu.Lock()
	d.noKeepAlive = true
	for _, l := range []*listener{d.main, d.admin} {
		if l != nil {
			l.cur.Load().endKeepAlives()
		}
	}
	d.lnMu.Unlock()
	d.router.SetReady(false)
	d.logger.Info("shutting down: not ready, serving on for the shutdown delay", "delay", d.delay)
	t := time.NewTimer(d.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case err := <-d.failed:
		return err
	}
}

// drain stops readiness and shuts the listeners down, waiting up to the
// grace period for in-flight requests.
func (d *Daemon) drain() {
	d.router.SetReady(false)
	d.router.SetShutdownDeadline(time.Now().Add(d.grace))
	d.logger.Info("shutting down", "grace", d.grace)
	// Servers a reload replaced have the same grace.
	d.graceEnd = time.AfterFunc(d.grace, func() { d.endRetiring(fmt.Errorf("shutdown grace of %s exceeded", d.grace)) })
	d.lnMu.Lock()
	d.draining = true
	ls := []*listener{d.main, d.admin}
	// Servers a reload replaced close their idle connections now, as the
	// listeners' own do.
	for s := range d.replaced {
		s.closeIdle()
	}
	d.lnMu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ls {
		if l != nil {
			wg.Go(func() { l.shutdown(d.logger, d.grace) })
		}
	}
	wg.Wait()
}

func isLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}
