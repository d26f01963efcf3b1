// Package serve implements `continuum serve`: it loads and validates the
// configuration and runs the serving daemon (internal/routerd) over it, or,
// with --demo, the daemon in front of a simulated fleet (internal/demo).
//
// Imports: cmdutil, config, demo, gcpolicy and routerd; never another
// command.
package serve

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/demo"
	"github.com/continuum-router/continuum/internal/gcpolicy"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/routerd"
)

// Options are the parsed flags and dependencies of `serve`.
type Options struct {
	IO         *iostreams.IOStreams
	Env        config.LookupEnv
	Logger     func() (*slog.Logger, error)
	ConfigFile string

	// Grace bounds draining in-flight requests at shutdown.
	Grace time.Duration
	// Delay is how long serve goes on serving, not ready, after a
	// shutdown signal and before it stops accepting.
	Delay time.Duration
	// Bind overrides server.bind_address.
	Bind string
	// Demo routes to a simulated fleet started in-process.
	Demo bool
	// Ready, when set, is told the listening addresses before serving
	// starts (tests).
	Ready func(main, admin string)
}

// NewCmdServe returns `continuum serve`. runF replaces the run step in tests.
func NewCmdServe(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Env: f.Env, Logger: f.Logger}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the router",
		Long: `Run the OpenAI-compatible router (chat and text completions, models, health,
readiness, metrics and the admin API) over the configured backends.

With dynamo.enabled, the router discovers the Dynamo fleet, follows every
worker's kv_metrics load, picks a prefill and a decode worker per request
and dispatches through the dynamo.frontend --router-mode direct replicas of
dynamo.shim with x-dynamo-* pin headers.

The configuration reloads without a restart when its file changes, on
SIGHUP, and on PUT /admin/config; a document with errors is refused and the
running configuration stays. Each change applies in its tier (see
continuum config diff).

On SIGTERM or SIGINT the router stops being ready, serves on for
--shutdown-delay (the time a load balancer or Kubernetes' endpoints take to
stop sending it connections), stops accepting, drains in-flight requests for
--shutdown-grace, then stops discovery and subscriptions; a second signal
ends it at once.

Unless GOGC is set, the router runs its garbage collector at GOGC=400 and
lets the heap reach 32 MiB (a quarter of the memory limit, if less) before
a collection (its live heap is small and collections cost tail latency);
that heap is made resident at start, so that requests do not take the
page faults of a growing heap. A soft memory limit of 80% of the
container's memory limit applies unless GOMEMLIMIT is set.`,
		Example: `  continuum serve --demo
  continuum serve --config continuum.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Demo && cmd.Flags().Changed("config") {
				return &cmdutil.FlagError{Err: errors.New("--demo runs its own fleet and configuration: drop --config, or drop --demo")}
			}
			opts.ConfigFile = f.ConfigPath()
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			// The serving process collects garbage less often.
			logger, _ := opts.Logger()
			defer gcpolicy.Apply(opts.Env, logger)()
			return Run(cmd.Context(), opts)
		},
	}
	cmd.Flags().DurationVar(&opts.Grace, "shutdown-grace", routerd.DefaultShutdownGrace, "how long in-flight requests may take to finish at shutdown")
	cmd.Flags().DurationVar(&opts.Delay, "shutdown-delay", 0, "how long to go on serving, not ready, after a shutdown signal before no longer accepting (e.g. 5s behind a load balancer)")
	cmd.Flags().StringVar(&opts.Bind, "bind", "", "listen address, overriding server.bind_address")
	cmd.Flags().BoolVar(&opts.Demo, "demo", false, "start a simulated Dynamo fleet in-process and route to it (no --config needed)")
	return cmd
}

// Run serves until ctx ends. A configuration file that cannot be read or
// parsed exits with the usage code; one with errors, with 1.
func Run(ctx context.Context, o *Options) error {
	logger, err := o.Logger()
	if err != nil {
		return err
	}
	if o.Bind != "" {
		// A usage error before anything starts, not a failed listen after
		// the configuration, discovery and artifacts were set up.
		if p := config.ListenProblem(o.Bind); p != "" {
			return cmdutil.FlagErrorf("--bind: %s", p)
		}
	}
	reload := make(chan struct{})
	var parent context.Context // the demo's context before SIGHUP's
	if o.Demo {
		// The demo has no file to reload: SIGHUP (its terminal closed)
		// stops it as SIGTERM does, rather than leaving it on its port
		// (a terminal's hangup often comes twice: the second SIGHUP is
		// ignored, not taken as a second signal).
		parent = ctx
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGHUP)
		defer stop()
		// Deferred after stop, so run before it: a return without a
		// signal leaves the process's handlers as they are.
		defer context.AfterFunc(ctx, func() {
			if parent.Err() == nil {
				signal.Ignore(syscall.SIGHUP)
			}
		})()
	} else {
		// SIGHUP reloads the configuration file (and never ends the
		// process).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		go forward(ctx, hup, reload)
	}
	deps := routerd.Deps{Logger: logger, ShutdownGrace: o.Grace, ShutdownDelay: o.Delay, Reload: routerd.Reload{Adjust: o.adjust, Signal: reload}}
	if o.Demo {
		d, err := demo.Start(demo.Options{Bind: o.Bind, Deps: deps})
		if err != nil {
			return err
		}
		d.Banner(o.IO.Out)
		o.ready(d.Daemon)
		defer endOnSecondSignal(ctx, parent, d.Fleet.Root)()
		return d.Run(ctx)
	}
	cfg, err := o.config(logger)
	if err != nil {
		return err
	}
	deps.Reload = routerd.Reload{File: o.ConfigFile, Env: o.Env, Adjust: o.adjust, Signal: reload}
	d, err := routerd.New(cfg, deps)
	if err != nil {
		return err
	}
	o.ready(d)
	return d.Run(ctx)
}

// endOnSecondSignal ends the demo's process at a signal that comes after
// the one that stopped it (ctx ended; by SIGHUP when parent had not), as
// a second signal ends serve, having first removed the demo fleet's
// directory under root, which the stop it cuts short would have removed.
// The returned function stops watching.
func endOnSecondSignal(ctx, parent context.Context, root string) func() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		if parent.Err() != nil {
			// Stopped by SIGINT or SIGTERM, which this channel got too
			// (a signal reaches every channel before the stop it causes).
			select {
			case <-sigs:
			default:
			}
		}
		select {
		case s := <-sigs:
			_ = os.RemoveAll(root)
			code := 130 // as a shell reports a process SIGINT ended
			if s == syscall.SIGTERM {
				code = 143
			}
			os.Exit(code)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

func (o *Options) ready(d *routerd.Daemon) {
	if o.Ready != nil {
		o.Ready(d.Addr(), d.AdminAddr())
	}
}

// config loads --config (the defaults without one), prints its errors,
// logs its warnings (as a reload does) and applies --bind.
func (o *Options) config(logger *slog.Logger) (*config.Config, error) {
	cfg := config.DefaultFor(o.Env)
	if o.ConfigFile != "" {
		doc, err := config.Load(o.ConfigFile, config.Options{Env: o.Env})
		if err != nil {
			return nil, &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: err}
		}
		// Through the logger, as the warnings: in the log's format
		// (--log-format json), which a log pipeline reads.
		for _, f := range doc.Findings {
			if f.Severity == config.SeverityError {
				logger.Error("configuration error", "finding", f.String())
			}
		}
		if doc.Findings.Errors() == 0 {
			for _, f := range doc.Findings {
				if f.Severity == config.SeverityWarning {
					logger.Warn("configuration warning", "finding", f.String())
				}
			}
		}
		if n := doc.Findings.Errors(); n > 0 {
			return nil, cmdutil.ConfigErrors(doc.File, doc.Findings, n) // the first error named
		}
		cfg = doc.Config
	} else {
		// Ready, and serving nothing: a --config forgotten, or a
		// ConfigMap mounted elsewhere, says so here rather than nowhere.
		logger.Warn("no configuration file (--config, CONTINUUM_CONFIG or ./continuum.yaml): serving the defaults, with no backends")
	}
	o.adjust(cfg)
	if o.Bind != "" {
		// The file's other listeners were judged against its own
		// bind_address: judge them again against the flag's.
		for _, f := range config.Validate("--bind", cfg) {
			if f.Severity == config.SeverityError && (f.Path == "server.bind_address" || strings.Contains(f.Message, "server.bind_address")) {
				return nil, cmdutil.FlagErrorf("--bind %s: %s: %s", o.Bind, f.Path, f.Message)
			}
		}
	}
	return cfg, nil
}

// adjust applies the flags that override the file, at start and at every
// reload.
func (o *Options) adjust(cfg *config.Config) {
	if o.Bind != "" {
		cfg.Server.BindAddress = o.Bind
	}
}

// forward turns signals into reload requests until ctx ends.
func forward(ctx context.Context, sig <-chan os.Signal, reload chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			select {
			case reload <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
	}
}
