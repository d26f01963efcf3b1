package kvinspect

// This file: `kv-inspect workers`, the KV index of a live fleet (its own,
// fed by the fleet's kv-events for a while) or of a running router.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/sources"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/kvstack"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// TokenEnv is read for the router's admin token when --token is not given.
const TokenEnv = "CONTINUUM_ADMIN_TOKEN"

// DefaultDuration is how long the live subcommands follow a fleet.
const DefaultDuration = 5 * time.Second

// maxAdminBody bounds the router's answer to GET /admin/dynamo/kv.
const maxAdminBody = 32 << 20

// outputs are the formats of the live subcommands.
var outputs = []string{"table", "json"}

// LiveOptions are the flags and dependencies the live subcommands share:
// where the fleet is, how long to follow it, how to print.
type LiveOptions struct {
	IO         *iostreams.IOStreams
	Env        config.LookupEnv
	Logger     func() (*slog.Logger, error)
	ConfigFile string
	Discovery  cmdutil.DiscoveryFlags
	// Timeout bounds discovery's first read; Duration how long the fleet's
	// events are followed.
	Timeout  time.Duration
	Duration time.Duration
	Output   string
}

func (o *LiveOptions) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	o.Discovery.Register(cmd)
	fl.DurationVar(&o.Timeout, "timeout", discovery.SeedTimeout, "how long to wait for the fleet's first read")
	fl.DurationVar(&o.Duration, "duration", DefaultDuration, "how long to follow the fleet's events")
	fl.StringVarP(&o.Output, "output", "o", "table", "output format: table or json")
	cmdutil.RegisterEnumCompletion(cmd, "output", outputs)
}

// check validates the shared flags once parsed.
func (o *LiveOptions) check(f *cmdutil.Factory, fl *pflag.FlagSet) error {
	o.ConfigFile = f.ConfigPath()
	o.Discovery.Capture(fl)
	if err := cmdutil.OneOf("--output", o.Output, outputs); err != nil {
		return err
	}
	if o.Duration < 0 {
		return cmdutil.FlagErrorf("--duration must not be negative")
	}
	return nil
}

// openFleet resolves the configuration and opens the fleet it names, or
// returns cmdutil.ErrInterrupted when ctx ended first.
func (o *LiveOptions) openFleet(ctx context.Context) (*config.Config, *sources.Fleet, *slog.Logger, error) {
	cfg, err := o.Discovery.Resolve(o.ConfigFile, o.Env)
	if err != nil {
		return nil, nil, nil, err
	}
	logger, err := o.Logger()
	if err != nil {
		return nil, nil, nil, err
	}
	fl, err := sources.Open(ctx, &cfg.Dynamo.Discovery, o.Discovery.KubeClient(), logger, o.Timeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, nil, cmdutil.ErrInterrupted
		}
		return nil, nil, nil, err
	}
	if cfg.Dynamo.Load.Transport == config.TransportBroker {
		fl.Close()
		return nil, nil, nil, errors.New("dynamo.load.transport is broker: the fleet's kv-events come through its brokers, and kv-inspect subscribes to publishers directly (kv-inspect workers --router reads a running router's view instead)")
	}
	return cfg, fl, logger, nil
}

// WorkersOptions are the parsed flags of `kv-inspect workers`.
type WorkersOptions struct {
	LiveOptions
	Follow   bool
	Interval time.Duration
	// DurationSet: --duration was given (with --follow it then bounds the
	// run).
	DurationSet bool
	Router      string
	Token       string
}

// discoveryFlagNames are the flags DiscoveryFlags registers, which
// --router makes meaningless.
var discoveryFlagNames = []string{"source", "etcd-endpoints", "namespace", "file-root", "etcd-ca-cert", "etcd-client-cert",
	"etcd-client-key", "etcd-server-name", "etcd-username", "etcd-password-env", "kubeconfig", "context", "kube-namespace",
	"dynamo-namespace", "model", "models"}

// NewCmdWorkers returns `kv-inspect workers`. runF replaces the run step in
// tests.
func NewCmdWorkers(f *cmdutil.Factory, runF func(context.Context, *WorkersOptions) error) *cobra.Command {
	o := &WorkersOptions{LiveOptions: LiveOptions{IO: f.IOStreams, Env: f.Env, Logger: f.Logger}}
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "The KV blocks each worker rank holds, from the fleet's kv-events or a running router",
		Long: `Open the fleet (--config, or the discovery flags as discover takes them),
subscribe to every kv-events publisher as the router does (direct transport,
dynamo.load.direct_allow_cidrs) for --duration, and print what the index
built from them holds: per worker and dp rank the device-tier blocks, and
per subscription feeding the rank its publisher id, last event id and gaps;
the index's size, memory estimate and counters; the events by result; and
each subscription's state.

Workers publish kv-events only when their cache changes: an idle fleet shows
nothing until it serves traffic, and blocks cached before the subscriptions
started are not seen until the worker stores or removes more.

With --follow, the view is printed every --interval until interrupted (or
until --duration, when given). With --router, the running router's own index
is read from GET /admin/dynamo/kv instead (admin token from --token or
$CONTINUUM_ADMIN_TOKEN). -o json prints the admin API's shape either way.`,
		Example: `  continuum kv-inspect workers --config continuum.yaml
  continuum kv-inspect workers --source file --file-root /tmp/dynamo_store_kv --duration 30s -o json
  continuum kv-inspect workers --config continuum.yaml --follow --interval 2s
  continuum kv-inspect workers --router http://router:9090 --token "$ADMIN_TOKEN"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(f, cmd.Flags()); err != nil {
				return err
			}
			o.DurationSet = cmd.Flags().Changed("duration")
			if o.Interval < 100*time.Millisecond {
				return cmdutil.FlagErrorf("--interval %s: at least 100ms", o.Interval)
			}
			if cmd.Flags().Changed("interval") && !o.Follow {
				return cmdutil.FlagErrorf("--interval is how often --follow prints: add --follow, or drop --interval")
			}
			if cmd.Flags().Changed("router") {
				for _, n := range discoveryFlagNames {
					if cmd.Flags().Changed(n) {
						return cmdutil.FlagErrorf("--router reads the router's own view: drop --%s", n)
					}
				}
				if o.DurationSet {
					return cmdutil.FlagErrorf("--router reads the router's own view: drop --duration")
				}
				if o.Router == "" {
					return cmdutil.FlagErrorf("--router needs the router's base URL")
				}
				if err := cmdutil.HTTPBaseURL("--router", o.Router); err != nil {
					return err
				}
			} else if cmd.Flags().Changed("token") {
				return cmdutil.FlagErrorf("--token needs --router")
			}
			if o.Token == "" && o.Env != nil {
				o.Token, _ = o.Env(TokenEnv)
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return RunWorkers(cmd.Context(), o)
		},
	}
	o.register(cmd)
	fl := cmd.Flags()
	fl.BoolVarP(&o.Follow, "follow", "f", false, "print the view every --interval until interrupted")
	fl.DurationVar(&o.Interval, "interval", time.Second, "with --follow: how often to print")
	fl.StringVar(&o.Router, "router", "", "read a running router's GET /admin/dynamo/kv at this base URL instead of the fleet")
	fl.StringVar(&o.Token, "token", "", "with --router: the admin bearer token (default $"+TokenEnv+")")
	fl.Lookup("timeout").Usage = "how long to wait for the fleet's first read (with --router: for the router's answer)"
	return cmd
}

// RunWorkers prints the KV view of the fleet (or of the router), once
// after --duration or, with --follow, every --interval. Every goroutine it
// starts has ended when it returns.
func RunWorkers(ctx context.Context, o *WorkersOptions) error {
	if o.Router != "" {
		return workersFromRouter(ctx, o)
	}
	cfg, fl, logger, err := o.openFleet(ctx)
	if errors.Is(err, cmdutil.ErrInterrupted) && o.Follow {
		return nil // interrupted: a follow ends so
	}
	if err != nil {
		return err
	}
	defer fl.Close()
	st, err := kvstack.New(kvstack.Options{Config: cfg, Registry: fl.Registry, Env: o.Env, Logger: logger, KeepArtifactCache: true})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = st.Run(runCtx) // nil once runCtx ends
	}()
	defer func() { stop(); <-done }()

	n := 0
	for p := range fl.Registry.Snapshot().Publishers.All() {
		if kv.IsKVTopic(p.Topic) {
			n++
		}
	}
	until := "until interrupted"
	if !o.Follow || o.DurationSet {
		until = "for " + o.Duration.String()
	}
	fmt.Fprintf(o.IO.ErrOut, "kv-inspect: source %s, generation %d: following %d kv-events publishers %s\n", fl.Source, fl.Generation, n, until)
	return o.loop(ctx, func() (admin.KVResponse, error) { return st.View(), nil })
}

// loop waits --duration and prints view once or, with --follow, prints it
// every --interval until ctx ends (or --duration, when given).
func (o *WorkersOptions) loop(ctx context.Context, view func() (admin.KVResponse, error)) error {
	var end <-chan time.Time
	if !o.Follow || o.DurationSet {
		t := time.NewTimer(o.Duration)
		defer t.Stop()
		end = t.C
	}
	if !o.Follow {
		select {
		case <-ctx.Done(): // interrupted: print what there is
		case <-end:
		}
		v, err := view()
		if err != nil {
			return err
		}
		return o.print(v, false)
	}
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-end:
			return nil
		case <-tick.C:
		}
		v, err := view()
		if err != nil {
			fmt.Fprintf(o.IO.ErrOut, "kv-inspect: %v\n", err)
			continue
		}
		if err := o.print(v, true); err != nil {
			return err
		}
	}
}

func (o *WorkersOptions) print(v admin.KVResponse, follow bool) error {
	if o.Output == "json" {
		enc := json.NewEncoder(o.IO.Out)
		if !follow {
			enc.SetIndent("", "  ")
		}
		return enc.Encode(v)
	}
	if follow {
		fmt.Fprintf(o.IO.Out, "--- %s\n", time.Now().Format("15:04:05"))
	}
	return writeKVTable(o.IO.Out, v)
}

// writeKVTable prints a KV view: the index, then its ranks, then the
// subscriptions.
func writeKVTable(w io.Writer, v admin.KVResponse) error {
	ix := v.Index
	fmt.Fprintf(w, "index: %d blocks, %d ownerships, %d ranks, %d subscriptions, %d cursors, %s\n",
		ix.Nodes, ix.Ownerships, ix.Ranks, ix.Subscriptions, ix.Cursors, bytesText(ix.Bytes))
	fmt.Fprintf(w, "blocks: %d stored, %d removed, %d unknown removals, %d refused, %d rebound; %d gaps\n",
		ix.StoredBlocks, ix.RemovedBlocks, ix.UnknownRemovals, ix.RefusedBlocks, ix.Rebinds, ix.Gaps)
	fmt.Fprintf(w, "events: %s\n", countsText(v.Events))
	if len(v.Results) > 0 {
		fmt.Fprintf(w, "selections: %s\n", countsText(v.Results))
	}
	if ix.InFlightRequests > 0 {
		fmt.Fprintf(w, "in flight: %d requests lending %d blocks to the ranks they were sent to\n", ix.InFlightRequests, ix.InFlightBlocks)
	}
	fmt.Fprintln(w)
	if len(v.Ranks) == 0 {
		fmt.Fprintln(w, "no blocks indexed: workers publish kv-events only when their cache changes, so an idle fleet shows nothing until it serves traffic")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAMESPACE\tINSTANCE\tWORKER ID\tRANK\tBLOCKS\tPUBLISHER\tEVENT ID\tGAPS")
		for _, r := range v.Ranks {
			inst := r.WorkerID
			if id, err := strconv.ParseUint(r.WorkerID, 10, 64); err == nil {
				inst = wire.FormatID(id)
			}
			// Namespaces and component names come from the fleet (or a
			// router's answer): printed for a terminal, never raw.
			ns := iostreams.Printable(r.Namespace)
			if ns == "" {
				ns = "-"
			}
			lead := fmt.Sprintf("%s\t%s\t%s\t%d\t%d", ns, iostreams.Printable(inst), iostreams.Printable(r.WorkerID), r.DPRank, r.Blocks)
			if len(r.Cursors) == 0 {
				fmt.Fprintf(tw, "%s\t-\t-\t-\n", lead)
			}
			for i, c := range r.Cursors {
				if i > 0 {
					lead = "\t\t\t\t"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", lead, iostreams.Printable(c.PublisherID), c.EventID, c.Gaps)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	if len(v.Subscriptions) == 0 {
		fmt.Fprintln(w, "no kv-events subscriptions: the fleet advertises no kv-events publisher")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FAMILY\tPUBLISHER\tNAMESPACE\tCOMPONENT\tSTATE\tTRANSPORT")
	for _, s := range v.Subscriptions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", iostreams.Printable(s.Family), iostreams.Printable(s.PublisherID), iostreams.Printable(s.Namespace),
			iostreams.Printable(s.Component), iostreams.Printable(s.State), iostreams.Printable(s.Transport))
	}
	return tw.Flush()
}

func countsText(cs []admin.KVCount) string {
	if len(cs) == 0 {
		return "none"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%d %s", c.Count, c.Result)
	}
	return strings.Join(parts, ", ")
}

func bytesText(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// workersFromRouter prints the router's GET /admin/dynamo/kv, once or
// every --interval.
func workersFromRouter(ctx context.Context, o *WorkersOptions) error {
	// No redirect is followed: Go keeps the Authorization field across
	// one to the same host on another port or scheme, which would send
	// the admin token in clear; a redirect shows as the error it is.
	client := &http.Client{Timeout: max(o.Timeout, time.Second),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	view := func() (admin.KVResponse, error) { return fetchKV(ctx, client, o.Router, o.Token) }
	if !o.Follow {
		v, err := view()
		if err != nil {
			return err
		}
		if !v.Enabled {
			return fmt.Errorf("%s does not run KV-aware selection (dynamo.kv.enabled is false)", o.Router)
		}
		return o.print(v, false)
	}
	return o.loop(ctx, view)
}

// fetchKV reads a router's GET /admin/dynamo/kv.
func fetchKV(ctx context.Context, client *http.Client, base, token string) (admin.KVResponse, error) {
	var v admin.KVResponse
	const path = "/admin/dynamo/kv"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+path, nil)
	if err != nil {
		return v, cmdutil.FlagErrorf("--router %q: %v", base, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return v, fmt.Errorf("router unreachable: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	// The status line is the router's: quoted escaped, never raw.
	status := iostreams.Printable(resp.Status)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden:
		return v, fmt.Errorf("%s: %s (check --token or $%s)", path, status, TokenEnv)
	case http.StatusNotFound:
		return v, fmt.Errorf("%s: %s (the admin API is off without admin.token, or the router predates this view)", path, status)
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return v, fmt.Errorf("%s: %s to %s (not followed, so that the admin token goes only to --router: give the address it names)",
			path, status, iostreams.Printable(resp.Header.Get("Location")))
	default:
		return v, fmt.Errorf("%s: %s", path, status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminBody+1))
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	if len(body) > maxAdminBody {
		return v, fmt.Errorf("%s: answer over %d bytes", path, maxAdminBody)
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("bad answer from %s: %w", path, err)
	}
	return v, nil
}
