// Package routerd is the router process: it wires configuration, Dynamo
// discovery, load subscriptions, the picker and the HTTP router into one
// server that drains gracefully. `continuum serve` and `continuum top --demo`
// run it.
package routerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/sources"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// Options are the router process's settings and dependencies.
type Options struct {
	IO         *iostreams.IOStreams
	Env        config.LookupEnv
	Logger     func() (*slog.Logger, error)
	ConfigFile string
	// Grace bounds draining in-flight requests at shutdown.
	Grace time.Duration
	// Bind overrides server.bind_address.
	Bind string
	// Demo runs a simulated Dynamo fleet in-process and routes to it;
	// DemoFleet shapes it (two prefill and two decode workers at speed 4
	// when zero).
	Demo      bool
	DemoFleet fleetsim.Options
	// Picker replaces the load-based picker (benchmarks compare pickers).
	Picker pick.Picker
	// Ready, when set, receives the listening addresses once serving.
	Ready func(main, admin string)
}

// Run serves until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, o *Options) error {
	var demo *fleetsim.Demo
	if o.Demo {
		bind := o.Bind
		if bind == "" {
			bind = "127.0.0.1:8080"
		}
		fo := o.DemoFleet
		if fo.Decode == 0 {
			fo = fleetsim.Options{Prefill: 2, Decode: 2, Speed: 4}
		}
		d, err := fleetsim.StartDemo(fo, bind)
		if err != nil {
			return fmt.Errorf("demo fleet: %w", err)
		}
		defer d.Stop()
		demo = d
	}
	cfg, err := o.config(demo)
	if err != nil {
		return err
	}
	logger, err := o.Logger()
	if err != nil {
		return err
	}
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	dm := telemetry.NewDiscoveryMetrics(promReg)
	lm := telemetry.NewLoadMetrics(promReg)
	rm := telemetry.NewRouterMetrics(promReg)

	reg := fleet.NewRegistry(logger, discovery.ProblemCounter(dm))
	reg.SetEnabled(cfg.Dynamo.Enabled)
	store := load.NewStore(cfg.Dynamo.Load.MaxStaleness.D(), load.Gauges{M: lm})
	var sup *load.Supervisor
	var watcher *discovery.Watcher
	runCtx, stopAll := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAll()
	g, gctx := errgroup.WithContext(runCtx)

	if cfg.Dynamo.Enabled {
		src, backoff, err := sources.New(&cfg.Dynamo.Discovery, logger)
		if err != nil {
			return err
		}
		watcher = &discovery.Watcher{Source: src, Registry: reg, Backoff: backoff, Metrics: dm, Logger: logger}
		g.Go(func() error { return watcher.Run(gctx) })
		switch cfg.Dynamo.Load.Transport {
		case config.TransportBroker:
			logger.Error("dynamo.load.transport: broker needs the event bus, which this build does not include yet; workers are treated as quiet")
		default:
			cidrs, err := zmtp.ParseCIDRs(cfg.Dynamo.Load.DirectAllowCIDRs)
			if err != nil {
				return err
			}
			sup = &load.Supervisor{Registry: reg, Store: store, Connector: &zmtp.Direct{Allow: cidrs}, Metrics: lm, Logger: logger}
			g.Go(func() error { return sup.Run(gctx) })
		}
	} else if len(cfg.Dynamo.Shim.Backends)+len(cfg.Dynamo.Shim.Pools) > 0 {
		logger.Warn("dynamo.shim is configured but dynamo.enabled is false: nothing is pinned")
	}

	ropts := router.Options{Config: cfg, Registry: reg, Store: store, Metrics: rm, Gatherer: promReg, Logger: logger}
	if watcher != nil {
		ropts.DiscoveryConnected = watcher.Connected
	}
	if sup != nil {
		ropts.Subscriptions = sup.Subscriptions
	}
	if o.Picker != nil {
		reg.SetPicker(o.Picker)
	}
	srv := router.New(ropts)
	g.Go(func() error { return srv.Run(gctx) })

	mainLn, err := net.Listen("tcp", cfg.Server.BindAddress)
	if err != nil {
		stopAll()
		_ = g.Wait()
		return fmt.Errorf("server.bind_address %s: %w", cfg.Server.BindAddress, err)
	}
	if len(cfg.APIKeys) == 0 && !isLoopback(mainLn.Addr()) {
		logger.Warn("no api_keys: the router accepts requests from anyone who can reach it", "address", mainLn.Addr().String())
	}
	servers := []*http.Server{{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}}
	listeners := []net.Listener{mainLn}
	adminAddr := ""
	if cfg.Admin.BindAddress != "" {
		adminLn, err := net.Listen("tcp", cfg.Admin.BindAddress)
		if err != nil {
			_ = mainLn.Close()
			stopAll()
			_ = g.Wait()
			return fmt.Errorf("admin.bind_address %s: %w", cfg.Admin.BindAddress, err)
		}
		adminAddr = adminLn.Addr().String()
		servers = append(servers, &http.Server{Handler: srv.AdminHandler(), ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, adminLn)
	}
	serveErr := make(chan error, len(servers))
	for i, s := range servers {
		go func() {
			if err := s.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	srv.SetReady(true)
	logger.Info("continuum serving", "address", mainLn.Addr().String(), "admin", adminAddr, "dynamo", cfg.Dynamo.Enabled)
	if demo != nil {
		printDemo(o.IO.Out, demo, mainLn.Addr().String())
	}
	if o.Ready != nil {
		o.Ready(mainLn.Addr().String(), adminAddr)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	case <-gctx.Done():
		runErr = errors.New("a background task stopped")
	}
	// Drain: not ready, finish in-flight requests, then stop the rest.
	srv.SetReady(false)
	logger.Info("shutting down", "grace", o.Grace)
	shutCtx, cancel := context.WithTimeoutCause(context.Background(), o.Grace, fmt.Errorf("shutdown grace of %s exceeded", o.Grace))
	defer cancel()
	for _, s := range servers {
		if err := s.Shutdown(shutCtx); err != nil {
			logger.Warn("requests still in flight at the end of the grace period", "err", context.Cause(shutCtx))
			_ = s.Close()
		}
	}
	stopAll()
	if err := g.Wait(); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// config loads --config (or the demo's embedded configuration) and applies
// --bind.
func (o *Options) config(demo *fleetsim.Demo) (*config.Config, error) {
	cfg := config.Default()
	var doc *config.Document
	var err error
	switch {
	case demo != nil:
		doc, err = config.Parse("(demo)", []byte(demo.Config), config.Options{Env: o.Env})
	case o.ConfigFile != "":
		doc, err = config.Load(o.ConfigFile, config.Options{Env: o.Env})
	}
	if err != nil {
		return nil, &ConfigError{Err: err}
	}
	if doc != nil {
		for _, f := range doc.Findings {
			if f.Severity == config.SeverityError {
				fmt.Fprintln(o.IO.ErrOut, f.String())
			}
		}
		if n := doc.Findings.Errors(); n > 0 {
			return nil, fmt.Errorf("%s has %d errors; run continuum config validate %s", doc.File, n, doc.File)
		}
		cfg = doc.Config
	}
	if o.Bind != "" {
		cfg.Server.BindAddress = o.Bind
	}
	return cfg, nil
}

func printDemo(w io.Writer, d *fleetsim.Demo, addr string) {
	model := d.Sim.Model()
	count := map[string]int{}
	for _, wk := range d.Sim.Workers() {
		count[wk.Role]++
	}
	fmt.Fprintf(w, `Continuum is routing to a simulated Dynamo fleet: %d prefill, %d decode and %d aggregated workers
serving %s in namespace(s) %s, registered in Dynamo's file store at %s
and publishing their load over ZMQ.

Try it:
  curl -s http://%s/v1/chat/completions -H 'Content-Type: application/json' -H 'x-backend: 1' -i \
    -d '{"model":"%s","messages":[{"role":"user","content":"Hello!"}]}'
  curl -sN http://%s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"%s","stream":true,"messages":[{"role":"user","content":"Hello!"}]}'
  curl -s -H 'Authorization: Bearer %s' http://%s/admin/dynamo/workers
  continuum top --router http://%s --token %s
  continuum discover --source file --file-root %s
  continuum tail-load --source file --file-root %s

Press Ctrl-C to stop.
`, count["prefill"], count["decode"], count["backend"], strings.Join(d.Sim.Models(), ", "), strings.Join(d.Sim.Namespaces(), ", "),
		d.Root, addr, model, addr, model, fleetsim.DemoAdminToken, addr, addr, fleetsim.DemoAdminToken, d.Root, d.Root)
}

func isLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// Start runs the router in the background and returns its main address
// once it listens, and a channel that yields Run's result after ctx ends.
// If Run fails before listening, Start returns that error.
func Start(ctx context.Context, o *Options) (addr string, done <-chan error, err error) {
	ready := make(chan string, 1)
	prev := o.Ready
	o.Ready = func(main, admin string) {
		if prev != nil {
			prev(main, admin)
		}
		ready <- main
	}
	result := make(chan error, 1)
	go func() { result <- Run(ctx, o) }()
	select {
	case a := <-ready:
		return a, result, nil
	case err := <-result:
		if err == nil {
			err = errors.New("the router stopped before it listened")
		}
		return "", nil, err
	}
}

// ConfigError is a configuration file that cannot be read or parsed.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }
