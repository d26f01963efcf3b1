// Package fleetsimcmd implements `continuum fleet-sim`: a simulated Dynamo
// fleet as its own process, for serve, discover, tail-load and top to use.
//
// Imports: cmdutil and fleetsim; never another command.
package fleetsimcmd

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// Options are the parsed flags of `fleet-sim`.
type Options struct {
	IO             *iostreams.IOStreams
	Prefill        int
	Decode         int
	Aggregated     int
	DP             int
	Models         []string
	Namespaces     []string
	NilFields      bool
	Speed          float64
	RouterBind     string
	FrontendBind   string
	WriteConfig    string
	Store          string
	CardDialect    string
	MigrationLimit int
	LeaseTTL       time.Duration
	Replicas       int
	Standby        int
	// Ready, when set, is called once the fleet is up (tests).
	Ready func(*fleetsim.Demo)
}

// NewCmdFleetSim returns `continuum fleet-sim`.
func NewCmdFleetSim(f *cmdutil.Factory, runF func(context.Context, *Options) error) *cobra.Command {
	opts := &Options{IO: f.IOStreams}
	cmd := &cobra.Command{
		Use:   "fleet-sim",
		Short: "Run a simulated Dynamo fleet for the router to discover and route to",
		Long: `Run a simulated Dynamo fleet until interrupted: prefill and decode workers that
register in Dynamo's file store (kept alive by touch, 10 s TTL, as real workers
do) or, with --store etcd, in an in-process etcd server under 10 s leases;
publish their load on kv_metrics and their KV cache on kv-events over real
ZMQ PUB sockets; and execute
the requests a dynamo.frontend --router-mode direct emulator receives with
x-dynamo-* pins (prefill time by prompt length, decode time per token).

It prints the file store root (or etcd endpoint), the frontend URL and a router configuration
for continuum serve --config, or writes it with --write-config: once the fleet
is up, replacing the file whole (a reader finds none or all of it).

--card-dialect chooses how the workers' cards say their role, as Dynamo
revisions have written it: enum (worker_type "Prefill", "Decode",
"Aggregated"; the default), bitflags ("Prefill", "Decode", and
"Prefill | Decode" for aggregated workers), lowercase ("prefill", "decode",
"aggregated") or legacy (no worker_type: model_type "Prefill" on prefill
workers and "Chat | Completions" on the others, model_input "Tokens").

Faults can be injected through the frontend's control API:
  curl -X POST <frontend>/sim/workers/<instance id>/kill            # records expire
  curl -X POST <frontend>/sim/workers/<instance id>/restart         # back, same id, empty cache (or a standby joins)
  curl -X POST <frontend>/sim/workers/<instance id>/leave           # a graceful exit: lease revoked, its requests finish
  curl -X POST <frontend>/sim/workers/<instance id>/stop-publisher  # load goes silent
  curl -X POST <frontend>/sim/workers/<instance id>/pause           # a stalled engine
  curl -X POST <frontend>/sim/workers/<instance id>/duplicate       # a second record claims its id
  curl -X POST <frontend>/sim/workers/<instance id>/saturate        # its load says its KV cache is full
  curl -X POST <frontend>/sim/workers/<instance id>/resume
  curl -X POST <frontend>/sim/etcd/restart                          # with --store etcd
  curl -X POST <frontend>/sim/frontends/<backend name>/kill         # a frontend replica goes away
  curl -X POST <frontend>/sim/frontends/<backend name>/restart       # and comes back on its address
  curl <frontend>/sim/workers                                       # state, pins, pins after its record went
  curl <frontend>/sim/frontends

A killed worker's requests end with it: those not yet answering get the
frontend's "instance not found" 500, streams already started are cut.`,
		Example: `  continuum fleet-sim --prefill 2 --decode 4 --write-config /tmp/continuum.yaml
  continuum serve --config /tmp/continuum.yaml
  continuum fleet-sim --workers 4 --prefill 0 --decode 0 --store etcd      # aggregated workers in etcd
  continuum fleet-sim --card-dialect legacy                                # cards as Dynamo wrote them before worker_type`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Prefill < 0 || opts.Decode < 0 || opts.Aggregated < 0 || opts.Decode+opts.Aggregated == 0 {
				return cmdutil.FlagErrorf("a fleet needs decode workers (--decode) or aggregated ones (--workers), and no count may be negative")
			}
			if opts.DP < 0 || opts.DP > 64 {
				return cmdutil.FlagErrorf("--dp must be between 0 and 64")
			}
			if err := cmdutil.OneOf("--store", opts.Store, []string{fleetsim.StoreFile, fleetsim.StoreEtcd}); err != nil {
				return err
			}
			if err := cmdutil.OneOf("--card-dialect", opts.CardDialect, fleetsim.CardDialects); err != nil {
				return err
			}
			if opts.Speed <= 0 {
				return cmdutil.FlagErrorf("--speed must be positive")
			}
			if opts.MigrationLimit < 0 {
				return cmdutil.FlagErrorf("--migration-limit must not be negative")
			}
			if !fleetsim.LeaseTTLValid(opts.LeaseTTL) {
				return cmdutil.FlagErrorf("--lease-ttl must be whole seconds from 2s to 1h (etcd grants leases in seconds)")
			}
			if opts.Standby < 0 || (opts.Standby > 0 && opts.Store != fleetsim.StoreEtcd) {
				return cmdutil.FlagErrorf("--standby needs --store etcd and must not be negative")
			}
			if opts.Replicas < 1 || opts.Replicas > 16 {
				return cmdutil.FlagErrorf("--frontend-replicas must be between 1 and 16")
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return Run(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Prefill, "prefill", 2, "prefill workers per namespace and model")
	fl.IntVar(&opts.Decode, "decode", 2, "decode workers per namespace and model")
	fl.IntVar(&opts.Aggregated, "workers", 0, "aggregated workers (prefill and decode in one) per namespace and model")
	fl.IntVar(&opts.Aggregated, "aggregated", 0, "same as --workers")
	_ = fl.MarkHidden("aggregated")
	fl.IntVar(&opts.DP, "dp", 0, "data-parallel ranks per worker (declared in the card when above 1)")
	fl.StringSliceVar(&opts.Models, "models", []string{"Qwen/Qwen3-32B"}, "models the fleet serves")
	fl.StringSliceVar(&opts.Namespaces, "namespaces", []string{"dynamo"}, "Dynamo namespaces (one graph and frontend each)")
	fl.BoolVar(&opts.NilFields, "nil-load-fields", false, "publish load like Dynamo 1.4.2 vLLM workers: only kv_used_blocks")
	fl.Float64Var(&opts.Speed, "speed", 1, "run simulated time this many times faster")
	fl.StringVar(&opts.RouterBind, "router-bind", "127.0.0.1:8080", "server.bind_address of the printed router configuration")
	fl.StringVar(&opts.FrontendBind, "frontend-bind", "127.0.0.1:0", "listen address of the frontend emulator")
	fl.StringVar(&opts.Store, "store", fleetsim.StoreFile, "where workers register: file (Dynamo's file store) or etcd (in-process server)")
	cmdutil.RegisterEnumCompletion(cmd, "store", []string{fleetsim.StoreFile, fleetsim.StoreEtcd})
	fl.StringVar(&opts.CardDialect, "card-dialect", fleetsim.DialectEnum, "how cards say a worker's role: enum, bitflags, lowercase or legacy")
	cmdutil.RegisterEnumCompletion(cmd, "card-dialect", fleetsim.CardDialects)
	fl.IntVar(&opts.MigrationLimit, "migration-limit", 0, "the migration_limit the workers' cards declare: how many times the router may pin a failed request to other workers (0, Dynamo's default: never)")
	fl.DurationVar(&opts.LeaseTTL, "lease-ttl", fleetsim.DefaultLeaseTTL, "TTL of the workers' etcd leases with --store etcd: how long a killed worker's records outlive it")
	fl.IntVar(&opts.Standby, "standby", 0, "more decode workers that start out of the fleet and join at a restart (with --store etcd)")
	fl.IntVar(&opts.Replicas, "frontend-replicas", 1, "frontend replicas per namespace, each a backend of the router configuration's pool")
	fl.StringVar(&opts.WriteConfig, "write-config", "", "write the router configuration to this file instead of printing it")
	return cmd
}

// Run runs the fleet until ctx ends.
func Run(ctx context.Context, o *Options) error {
	d, err := fleetsim.StartDemoOn(fleetsim.Options{Prefill: o.Prefill, Decode: o.Decode, Aggregated: o.Aggregated, DPSize: o.DP,
		Models: o.Models, Namespaces: o.Namespaces, NilSchedulerFields: o.NilFields, Speed: o.Speed, Store: o.Store, CardDialect: o.CardDialect,
		MigrationLimit: o.MigrationLimit, LeaseTTL: o.LeaseTTL, FrontendReplicas: o.Replicas, Standby: o.Standby}, o.RouterBind, o.FrontendBind)
	if err != nil {
		return err
	}
	defer d.Stop()
	w := o.IO.Out
	if ep := d.Sim.EtcdEndpoint(); ep != "" {
		fmt.Fprintf(w, "etcd:       %s\n", ep)
	} else {
		fmt.Fprintf(w, "file store: %s\n", d.Root)
	}
	for _, rp := range d.Frontends() {
		fmt.Fprintf(w, "frontend:   %s  (namespace %s, backend %s)\n", rp.URL, rp.Namespace, rp.Name)
	}
	fmt.Fprintln(w, "workers:")
	for _, wk := range d.Sim.Workers() {
		standby := ""
		if wk.Dead {
			standby = " (standby: joins at a restart)"
		}
		fmt.Fprintf(w, "  %-7s instance %d (0x%x), publisher %d, %s / %s%s\n", wk.Role, wk.InstanceID, wk.InstanceID, wk.PublisherID, wk.Namespace, wk.Model, standby)
	}
	if o.WriteConfig != "" {
		// Replaced whole, never rewritten in place: whoever waits for the
		// file (serve --config, a script) reads all of it or none.
		if err := cmdutil.WriteFileAtomic(o.WriteConfig, []byte(d.Config), 0o600); err != nil {
			return err
		}
		fmt.Fprintf(w, "router configuration: %s (continuum serve --config %s)\n", o.WriteConfig, o.WriteConfig)
	} else {
		fmt.Fprintf(w, "router configuration:\n---\n%s", d.Config)
	}
	if o.Ready != nil {
		o.Ready(d)
	}
	<-ctx.Done()
	return nil
}
