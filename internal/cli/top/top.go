// Package top implements `continuum top`, a live terminal monitor of a
// router's fleet view, over the model in internal/tui.
//
// Imports: cmdutil, demo, routerd, tui and workload; never another command.
package top

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/demo"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/tui"
	"github.com/continuum-router/continuum/internal/workload"
)

// Output formats of --once.
var outputs = []string{"table", "json"}

// TokenEnv is read when --token is not given.
const TokenEnv = "CONTINUUM_ADMIN_TOKEN"

// Options are the parsed flags of `top`.
type Options struct {
	IO       *iostreams.IOStreams
	Env      config.LookupEnv
	Router   string
	Token    string
	Interval time.Duration
	Timeout  time.Duration
	Once     bool
	Output   string
	Demo     bool
	// ProgramOptions are extra bubbletea options (tests pass input and
	// output).
	ProgramOptions []tea.ProgramOption
}

// NewCmdTop returns `continuum top`. runF replaces the run step in tests.
func NewCmdTop(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Env: f.Env}
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch a router's fleet live in the terminal",
		Long: `Watch a router's Dynamo fleet live: workers grouped by namespace, model and
role with their load against capacity, sample age and selection rate; the
load and kv-events subscriptions, with the KV index's size; selections,
KV-aware selection results, routing paths and errors over time; and the
records discovery refused.

top polls the router's admin API (GET /admin/dynamo/workers, /admin/dynamo/load,
/admin/dynamo/problems) and GET /metrics every --interval. When the router is
unreachable it says since when and retries with backoff, up to 30 s apart.

The admin token comes from --token or $CONTINUUM_ADMIN_TOKEN. With --demo, top
starts the simulated fleet and router of "serve --demo" in-process, sends
them a light synthetic workload, and watches them.

Keys: ↑/↓ or j/k move, / filters by model, namespace, role or id, s cycles the
sort (load, id, age, selections), enter opens a worker's detail, tab and 1-4
switch views, p pauses, ? shows help, q quits. Colour is off when NO_COLOR is
set (not empty) or stdout is not a terminal.`,
		Example: `  continuum top --demo
  continuum top --router http://router:8080 --token "$ADMIN_TOKEN"
  continuum top --router http://router:8080 --once -o json | jq '.workers[] | select(.load.state=="stale")'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cmdutil.OneOf("--output", opts.Output, outputs); err != nil {
				return err
			}
			if cmd.Flags().Changed("output") && !opts.Once {
				// The full-screen program has no output format: a script
				// asking for JSON must not get it.
				return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("-o/--output is the format of --once: add --once, or drop -o")}
			}
			if opts.Demo && cmd.Flags().Changed("router") {
				return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("--demo starts its own router; drop --router")}
			}
			if opts.Demo && cmd.Flags().Changed("token") {
				// The demo's router is polled with its own token: one
				// given would be replaced without a word.
				return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("--demo starts its own router, with its own token; drop --token")}
			}
			if !opts.Demo {
				if err := cmdutil.HTTPBaseURL("--router", opts.Router); err != nil {
					return err
				}
			}
			if opts.Interval < 100*time.Millisecond {
				return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: fmt.Errorf("--interval %s: at least 100ms", opts.Interval)}
			}
			if !opts.Once && (!opts.IO.IsStdinTTY() || !opts.IO.IsStdoutTTY()) {
				// The full-screen program reads keys from a terminal and draws
				// on one; in a pipe it would fill it with escape codes.
				return &cmdutil.ExitError{Code: cmdutil.ExitUsage, Err: errors.New("top needs a terminal on standard input and output; use --once (with -o json) to print one snapshot")}
			}
			if opts.Token == "" && opts.Env != nil {
				opts.Token, _ = opts.Env(TokenEnv)
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return Run(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Router, "router", "http://127.0.0.1:8080", "router base URL (its admin API and /metrics)")
	cmd.Flags().StringVar(&opts.Token, "token", "", "admin bearer token (default $"+TokenEnv+")")
	cmd.Flags().DurationVar(&opts.Interval, "interval", time.Second, "how often to poll")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", 0, "bound on each poll (default: the interval, at least 2s)")
	cmd.Flags().BoolVar(&opts.Once, "once", false, "print one snapshot and exit (two polls an --interval apart, for the selection rates)")
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "table", "with --once: table or json")
	cmd.Flags().BoolVar(&opts.Demo, "demo", false, "start the simulated fleet and router in-process and watch them")
	cmdutil.RegisterEnumCompletion(cmd, "output", outputs)
	return cmd
}

// Run watches the router until the user quits or ctx ends.
func Run(ctx context.Context, o *Options) (err error) {
	// SIGHUP (the terminal closed) quits as SIGINT does: the demo's
	// directory is removed and the terminal restored, rather than the
	// process dying where it stands.
	ctx, stopHUP := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stopHUP()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.Demo {
		base, wait, serr := startDemo(ctx)
		if serr != nil {
			return serr
		}
		defer func() {
			cancel()
			if derr := <-wait; err == nil && derr != nil {
				err = fmt.Errorf("demo: %w", derr)
			}
		}()
		o.Router, o.Token = base, demo.AdminToken
	}
	client := &tui.Client{Base: o.Router, Token: o.Token}
	m := tui.New(tui.Options{Router: o.Router, Interval: o.Interval, Timeout: o.Timeout, Fetch: client.Fetch,
		Color: o.IO.ColorEnabled()})
	if o.Once {
		return once(ctx, o, m, client)
	}
	// Signals are the root context's (it ends on SIGINT and SIGTERM, and
	// the program with it): a second handler in the program raced it and
	// could leave top hung on a signal, the terminal in raw mode.
	popts := append([]tea.ProgramOption{tea.WithContext(ctx), tea.WithoutSignalHandler(), tea.WithInput(o.IO.In), tea.WithOutput(o.IO.Out)},
		o.ProgramOptions...)
	_, err = tea.NewProgram(m, popts...).Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// once polls twice, an interval apart, so that rates are real, then prints
// the second snapshot.
func once(ctx context.Context, o *Options, m tui.Model, client *tui.Client) error {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = max(o.Interval, 2*time.Second)
	}
	var model tea.Model = m
	for i := range 2 {
		if i > 0 {
			select {
			case <-ctx.Done():
				return cmdutil.ErrInterrupted
			case <-time.After(o.Interval):
			}
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		snap, err := client.Fetch(pctx, time.Now())
		cancel()
		if err != nil && ctx.Err() != nil {
			return cmdutil.ErrInterrupted
		}
		if err != nil {
			// The error may quote the router's answer (its status line):
			// printed escaped, as the views draw it.
			return fmt.Errorf("%s: %s", o.Router, iostreams.Printable(err.Error()))
		}
		model, _ = model.Update(tui.SnapshotMsg(snap))
	}
	final := model.(tui.Model)
	if o.Output == "json" {
		return final.WriteJSON(o.IO.Out)
	}
	return final.WriteTable(o.IO.Out)
}

// startDemo runs the demo fleet and router and a light workload against
// them; done yields the router's result once ctx ended and both stopped.
func startDemo(ctx context.Context) (base string, done <-chan error, err error) {
	d, err := demo.Start(demo.Options{Bind: "127.0.0.1:0", Deps: routerd.Deps{ShutdownGrace: 2 * time.Second}})
	if err != nil {
		return "", nil, fmt.Errorf("demo: %w", err)
	}
	base = "http://" + d.Addr()
	result := make(chan error, 1)
	go func() {
		driven := make(chan struct{})
		go func() {
			defer close(driven)
			drive(ctx, base)
		}()
		err := d.Run(ctx)
		<-driven
		result <- err
	}()
	return base, result, nil
}

// drive sends a multi-tenant workload to the demo router until ctx ends.
func drive(ctx context.Context, base string) {
	reqs := workload.Synthetic(8, 80, 12, 60*time.Millisecond)
	for ctx.Err() == nil {
		workload.Replay(ctx, reqs, workload.Options{Router: base, Model: "Qwen/Qwen3-32B", MaxOutput: 160, Concurrency: 24})
	}
}
