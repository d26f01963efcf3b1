// Package routerd is the serving daemon: from a validated configuration it
// builds Dynamo discovery, the load subscriptions, the picker and the HTTP
// router, and runs them as one process that drains gracefully. It knows
// nothing of the command line, the simulator or the demo: `continuum serve`
// hands it a configuration and values, and the demo assembles it beside the
// simulated fleet.
//
// Imports: config, telemetry and the engines (artifact, discovery and its
// sources, fleet, kv, load, pick, router, zmtp); never cli, iostreams or
// fleetsim.
package routerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sync/errgroup"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/sources"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// DefaultShutdownGrace bounds draining in-flight requests when Deps names
// no grace.
const DefaultShutdownGrace = 30 * time.Second

// readHeaderTimeout bounds a client's request line and headers.
const readHeaderTimeout = 10 * time.Second

// Deps are the values a daemon is built with besides its configuration.
type Deps struct {
	// Logger receives every log line; nothing is logged when nil.
	Logger *slog.Logger
	// Metrics is the registry /metrics serves; a new one when nil. The Go
	// and process collectors are registered on it.
	Metrics *prometheus.Registry
	// Picker replaces the load-based picker (the routing benchmark
	// compares pickers).
	Picker pick.Picker
	// ShutdownGrace bounds draining in-flight requests at shutdown;
	// DefaultShutdownGrace when zero.
	ShutdownGrace time.Duration
}

// Daemon is the router process: its parts, built and bound, not running
// until Run.
type Daemon struct {
	cfg    *config.Config
	logger *slog.Logger
	grace  time.Duration

	registry   *fleet.Registry
	watcher    *discovery.Watcher // nil without Dynamo
	supervisor *load.Supervisor   // nil without direct load subscriptions
	// KV-aware selection (dynamo.kv.enabled): the kv-events subscriptions
	// and the artifact loader; nil without it.
	kvSubs    *kv.Subscriptions
	kvIndex   *kv.Index
	kvMetrics *telemetry.KVMetrics
	prompts   *kv.Prompts
	artifacts *artifact.Loader
	router    *router.Server

	servers   []*http.Server
	listeners []net.Listener
}

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
	dm := telemetry.NewDiscoveryMetrics(promReg)
	lm := telemetry.NewLoadMetrics(promReg)
	rm := telemetry.NewRouterMetrics(promReg)

	d := &Daemon{cfg: cfg, logger: logger, grace: deps.ShutdownGrace}
	if d.grace <= 0 {
		d.grace = DefaultShutdownGrace
	}
	d.registry = fleet.NewRegistry(logger, discovery.ProblemCounter(dm))
	store := load.NewStore(cfg.Dynamo.Load.MaxStaleness.D(), load.Gauges{M: lm})
	if cfg.Dynamo.Enabled {
		src, backoff, err := sources.New(&cfg.Dynamo.Discovery, logger)
		if err != nil {
			return nil, err
		}
		d.watcher = &discovery.Watcher{Source: src, Registry: d.registry, Backoff: backoff, Metrics: dm, Logger: logger}
		switch cfg.Dynamo.Load.Transport {
		case config.TransportBroker:
			logger.Error("dynamo.load.transport: broker needs the event bus, which this build does not include yet; workers are treated as quiet")
		default:
			cidrs, err := zmtp.ParseCIDRs(cfg.Dynamo.Load.DirectAllowCIDRs)
			if err != nil {
				return nil, err
			}
			d.supervisor = load.NewSupervisor(d.registry, store, &zmtp.Direct{Allow: cidrs}, lm, logger)
		}
	} else if len(cfg.Dynamo.Shim.Backends)+len(cfg.Dynamo.Shim.Pools) > 0 {
		logger.Warn("dynamo.shim is configured but dynamo.enabled is false: nothing is pinned")
	}

	picker := deps.Picker
	if picker == nil {
		base := pick.NewLoadBased(store)
		picker = base
		if cfg.Dynamo.Enabled && cfg.Dynamo.KV.Enabled {
			kp, err := d.kvPicker(cfg, base, promReg)
			if err != nil {
				return nil, err
			}
			picker = kp
		}
	}
	ropts := router.Options{Config: cfg, Registry: d.registry, Store: store, Picker: picker, Metrics: rm, Gatherer: promReg, Logger: logger}
	if d.watcher != nil {
		ropts.DiscoveryConnected = d.watcher.Connected
	}
	ropts.Subscriptions = d.subscriptions
	if d.kvIndex != nil {
		ropts.KV = d.kvView
	}
	if d.prompts != nil {
		ropts.CountTokens = func(model string, body []byte) (int, string) {
			return d.prompts.Count(d.registry.Snapshot(), model, body)
		}
	}
	d.router = router.New(ropts)
	if err := d.listen(); err != nil {
		return nil, err
	}
	return d, nil
}

// kvPicker builds KV-aware selection: the artifact loader (nothing loaded
// unless pinned), the index, the kv-events subscriptions (direct transport;
// the event bus carries them through brokers when it exists) and the
// picker over the load-based one.
func (d *Daemon) kvPicker(cfg *config.Config, base *pick.LoadBased, promReg prometheus.Registerer) (*kv.Picker, error) {
	k := &cfg.Dynamo.KV
	policy, err := artifact.PolicyFor(artifact.Settings{Pinned: k.PinnedArtifacts, AllowHTTP: k.AllowHTTPArtifacts,
		AllowHF: k.AllowHFArtifacts, CacheDir: k.ArtifactCacheDir}, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("dynamo.kv.%w", err)
	}
	am := telemetry.NewArtifactMetrics(promReg)
	km := telemetry.NewKVMetrics(promReg)
	d.artifacts, err = artifact.NewLoader(artifact.LoaderOptions{Policy: policy, Build: kv.Build, Logger: d.logger, Metrics: am})
	if err != nil {
		return nil, err
	}
	index := kv.NewIndex()
	d.kvIndex, d.kvMetrics = index, km
	if cfg.Dynamo.Load.Transport != config.TransportBroker {
		cidrs, err := zmtp.ParseCIDRs(cfg.Dynamo.Load.DirectAllowCIDRs)
		if err != nil {
			return nil, err
		}
		d.kvSubs = kv.NewSubscriptions(d.registry, index, &zmtp.Direct{Allow: cidrs}, km, d.logger)
	}
	d.prompts = kv.NewPrompts(d.artifacts)
	return kv.NewPicker(base, index, d.prompts, KVSettings(k), km, am, d.logger), nil
}

// KVSettings are the picker's settings of dynamo.kv.
func KVSettings(k *config.KV) kv.Settings {
	return kv.Settings{Terms: kv.Terms{OverlapScoreCredit: k.OverlapScoreCredit, PrefillLoadScale: k.PrefillLoadScale,
		Temperature: k.RouterTemperature}, SendTokenData: k.SendTokenData,
		Conditional: k.ConditionalDisaggregation.Enabled, DecodeBusyThreshold: k.ConditionalDisaggregation.DecodeBusyThreshold}
}

// kvView is GET /admin/dynamo/kv.
func (d *Daemon) kvView() admin.KVResponse {
	st := d.kvIndex.Stats()
	resp := admin.KVResponse{Enabled: true, Ranks: []admin.KVRank{}, Results: []admin.KVCount{},
		Index: admin.KVIndex{Nodes: st.Nodes, Ownerships: st.Ownerships, Ranks: st.Ranks, Subscriptions: st.Subscriptions,
			Cursors: st.Cursors, Bytes: st.Bytes, StoredBlocks: st.StoredBlocks, RemovedBlocks: st.RemovedBlocks,
			RefusedBlocks: st.RefusedBlocks, Gaps: st.Gaps}}
	ns := map[uint64]string{}
	for _, w := range d.registry.Snapshot().Workers {
		ns[w.ID.InstanceID] = w.ID.Namespace
	}
	for _, r := range d.kvIndex.Ranks() {
		row := admin.KVRank{WorkerID: strconv.FormatUint(r.Rank.WorkerID, 10), Namespace: ns[r.Rank.WorkerID], DPRank: r.Rank.DPRank,
			Blocks: r.Blocks, Cursors: []admin.KVCursor{}}
		for _, c := range r.Cursors {
			row.Cursors = append(row.Cursors, admin.KVCursor{PublisherID: strconv.FormatUint(uint64(c.Subscription), 10), EventID: c.EventID, Gaps: c.Gaps})
		}
		resp.Ranks = append(resp.Ranks, row)
	}
	for _, result := range kv.SelectionResults {
		var m dto.Metric
		if d.kvMetrics.Selections.WithLabelValues(result).Write(&m) == nil && m.GetCounter().GetValue() > 0 {
			resp.Results = append(resp.Results, admin.KVCount{Result: result, Count: uint64(m.GetCounter().GetValue())})
		}
	}
	return resp
}

// subscriptions lists the load and kv-events subscriptions.
func (d *Daemon) subscriptions() []load.SubscriptionInfo {
	var out []load.SubscriptionInfo
	if d.supervisor != nil {
		out = append(out, d.supervisor.Subscriptions()...)
	}
	if d.kvSubs != nil {
		out = append(out, d.kvSubs.Subscriptions()...)
	}
	return out
}

// listen binds the main listener and, when configured, the admin one.
func (d *Daemon) listen() error {
	errLog := slog.NewLogLogger(d.logger.Handler(), slog.LevelWarn)
	bind := func(addr, key string, h http.Handler) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			d.Close()
			return fmt.Errorf("%s %s: %w", key, addr, err)
		}
		d.listeners = append(d.listeners, ln)
		d.servers = append(d.servers, &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, ErrorLog: errLog})
		return nil
	}
	if err := bind(d.cfg.Server.BindAddress, "server.bind_address", d.router.Handler()); err != nil {
		return err
	}
	if len(d.cfg.APIKeys) == 0 && !isLoopback(d.listeners[0].Addr()) {
		d.logger.Warn("no api_keys: the router accepts requests from anyone who can reach it", "address", d.Addr())
	}
	if d.cfg.Admin.BindAddress != "" {
		return bind(d.cfg.Admin.BindAddress, "admin.bind_address", d.router.AdminHandler())
	}
	return nil
}

// Addr is the main listener's address.
func (d *Daemon) Addr() string { return d.listeners[0].Addr().String() }

// AdminAddr is the admin listener's address, "" when the admin API is
// served on the main listener.
func (d *Daemon) AdminAddr() string {
	if len(d.listeners) < 2 {
		return ""
	}
	return d.listeners[1].Addr().String()
}

// Close releases the listeners of a daemon that was not Run.
func (d *Daemon) Close() {
	for _, ln := range d.listeners {
		_ = ln.Close()
	}
}

// Run serves until ctx ends, then shuts down in order: the router stops
// being ready, in-flight requests drain for the grace period, and only then
// discovery and the subscriptions stop (a draining request may still need
// the fleet view). Every goroutine it starts has ended when it returns. It
// returns nil after a clean shutdown, or the error of the part that failed
// (which shuts the rest down the same way).
func (d *Daemon) Run(ctx context.Context) error {
	// The parts run under their own context, ended only after the drain.
	parts, stopParts := context.WithCancel(context.WithoutCancel(ctx))
	defer stopParts()
	g, gctx := errgroup.WithContext(parts)
	if d.watcher != nil {
		g.Go(func() error { return d.watcher.Run(gctx) })
	}
	if d.supervisor != nil {
		g.Go(func() error { return d.supervisor.Run(gctx) })
	}
	if d.kvSubs != nil {
		g.Go(func() error { return d.kvSubs.Run(gctx) })
	}
	if d.artifacts != nil {
		g.Go(func() error { return d.artifacts.Run(gctx) })
	}
	g.Go(func() error { return d.router.Run(gctx) })
	for i, s := range d.servers {
		ln := d.listeners[i]
		g.Go(func() error {
			if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serving %s: %w", ln.Addr(), err)
			}
			return nil
		})
	}
	d.router.SetReady(true)
	d.logger.Info("continuum serving", "address", d.Addr(), "admin", d.AdminAddr(), "dynamo", d.cfg.Dynamo.Enabled)
	g.Go(func() error {
		select {
		case <-ctx.Done():
		case <-gctx.Done(): // a part failed
		}
		d.drain()
		stopParts()
		return nil
	})
	return g.Wait()
}

// drain stops readiness and shuts the listeners down, waiting up to the
// grace period for in-flight requests.
func (d *Daemon) drain() {
	d.router.SetReady(false)
	d.logger.Info("shutting down", "grace", d.grace)
	ctx, cancel := context.WithTimeoutCause(context.Background(), d.grace, fmt.Errorf("shutdown grace of %s exceeded", d.grace))
	defer cancel()
	for _, s := range d.servers {
		if err := s.Shutdown(ctx); err != nil {
			d.logger.Warn("requests still in flight at the end of the grace period", "err", context.Cause(ctx))
			_ = s.Close()
		}
	}
}

func isLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}
