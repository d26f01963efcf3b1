// Package benchcmd implements `continuum bench`: the routing-quality
// benchmark, replaying a workload against the router over a simulated
// fleet with each picker in turn.
//
// Imports: cmdutil and engines (demo, fleetsim, pick, workload, admin types);
// never another command.
package benchcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/demo"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/faultbench"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/workload"
)

// Options are the parsed flags of `bench`.
type Options struct {
	IO        *iostreams.IOStreams
	Env       config.LookupEnv
	Workload  string
	Requests  int
	TimeScale float64
	MaxOutput int
	Modes     []string
	Prefill   int
	Decode    int
	Speed     float64
	Tenants   int
	Output    string
	// The fault-injection benchmark (--faults).
	Faults    bool
	Binary    string
	Scenarios []string
	Rate      float64
	Baseline  time.Duration
	Hold      time.Duration
	LeaseTTL  time.Duration
	MaxTokens int
	// Soak, when set, runs the soak for that long instead (--soak).
	Soak time.Duration
	// Churn is how often the soak changes the fleet.
	Churn time.Duration
	// speedSet and rateSet say --speed and --rate were given (the fault
	// bench and the soak have their own defaults).
	speedSet, rateSet bool
}

var modes = map[string]func() pick.Picker{
	"round-robin": func() pick.Picker { return &pick.RoundRobin{} },
	"load":        func() pick.Picker { return nil }, // serve's default picker
}

// NewCmdBench returns `continuum bench`.
func NewCmdBench(f *cmdutil.Factory) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Env: f.Env}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Compare routing policies on a workload over a simulated fleet",
		Long: `Replay a workload against the router, once per routing mode, each time over a
fresh simulated Dynamo fleet (continuum fleet-sim's workers, whose prefill
time depends on how much of the prompt their prefix cache holds), and report
throughput, time to first token (p50/p90/p99), end-to-end latency and the
prefix-cache hit rate, as a table or JSON.

With --faults it runs the fault-injection benchmark instead: for each
scenario, a fresh simulated fleet (etcd store, two frontend replicas in the
router's pool, --prefill and --decode workers) and the router, as child
processes of this binary (or --binary), under a steady load of streamed and
buffered requests (--rate); after --baseline one fault is injected: a decode
or prefill worker killed, an engine paused, a publisher silenced, etcd
restarted, a frontend replica killed, a duplicate record, every worker
saturated. The report gives per scenario the requests sent and failed (by
cause, and whether they were in flight on the killed part), the requests
re-pinned, pinned to a worker after its record expired, how long until
discovery dropped a killed worker and routing left the faulty part, how long
until the fleet was whole again, and the p99 latency during the fault
against the baseline.

--workload takes a Mooncake trace (JSON lines with timestamp, input_length,
output_length and hash_ids of 512-token blocks) or "synthetic", a
multi-tenant workload of long shared prefixes and short queries.`,
		Example: `  continuum bench --workload ../shared/data/mooncake/conversation_trace.jsonl --requests 600 --time-scale 4
  continuum bench --workload synthetic --requests 400 -o json
  continuum bench --faults                                   # every fault scenario, about 4 minutes
  continuum bench --faults --scenarios decode-killed,frontend-killed --rate 20 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, m := range opts.Modes {
				if modes[m] == nil {
					return cmdutil.FlagErrorf("mode %q is not one of round-robin, load", m)
				}
			}
			if err := cmdutil.OneOf("--output", opts.Output, []string{"table", "json"}); err != nil {
				return err
			}
			opts.rateSet = cmd.Flags().Changed("rate")
			if opts.Soak > 0 {
				if opts.Churn < time.Second {
					return cmdutil.FlagErrorf("--churn must be at least 1s")
				}
				if opts.Faults {
					return cmdutil.FlagErrorf("--soak and --faults are separate runs")
				}
				return RunSoak(cmd.Context(), opts)
			}
			if opts.Faults {
				for _, s := range opts.Scenarios {
					if faultbench.Describe(s) == "" {
						return cmdutil.FlagErrorf("scenario %q is not one of %s", s, strings.Join(faultbench.Scenarios(), ", "))
					}
				}
				if opts.Rate <= 0 || opts.Rate > 1000 {
					return cmdutil.FlagErrorf("--rate must be above 0 and at most 1000 requests a second")
				}
				opts.speedSet = cmd.Flags().Changed("speed")
				return RunFaults(cmd.Context(), opts)
			}
			return Run(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Workload, "workload", "synthetic", `a Mooncake trace file, or "synthetic"`)
	fl.IntVar(&opts.Requests, "requests", 400, "requests to replay")
	fl.Float64Var(&opts.TimeScale, "time-scale", 1, "divide the trace's inter-arrival times by this")
	fl.IntVar(&opts.MaxOutput, "max-output", 64, "cap on each request's output tokens")
	fl.StringSliceVar(&opts.Modes, "modes", []string{"round-robin", "load"}, "routing modes to compare: round-robin, load")
	fl.IntVar(&opts.Prefill, "prefill", 2, "simulated prefill workers")
	fl.IntVar(&opts.Decode, "decode", 4, "simulated decode workers")
	fl.Float64Var(&opts.Speed, "speed", 10, "simulated time runs this many times faster")
	fl.IntVar(&opts.Tenants, "tenants", 16, "tenants of the synthetic workload")
	fl.StringVarP(&opts.Output, "output", "o", "table", "output format: table or json")
	fl.BoolVar(&opts.Faults, "faults", false, "run the fault-injection benchmark instead of comparing routing modes")
	fl.StringVar(&opts.Binary, "binary", "", "with --faults: the continuum binary to run as fleet-sim and serve (default: this one)")
	fl.StringSliceVar(&opts.Scenarios, "scenarios", nil, "with --faults: scenarios to run (default all): "+strings.Join(faultbench.Scenarios(), ", "))
	_ = cmd.RegisterFlagCompletionFunc("scenarios", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return faultbench.Scenarios(), cobra.ShellCompDirectiveNoFileComp
	})
	fl.Float64Var(&opts.Rate, "rate", faultbench.DefaultRate, "with --faults: requests sent per second, half of them streamed")
	fl.DurationVar(&opts.Baseline, "baseline", faultbench.DefaultBaseline, "with --faults: load before each fault")
	fl.DurationVar(&opts.Hold, "hold", faultbench.DefaultHold, "with --faults: how long a fault undone by hand lasts (pause, silence, duplicate, saturation, frontend down)")
	fl.DurationVar(&opts.LeaseTTL, "lease-ttl", faultbench.DefaultLeaseTTL, "with --faults: the workers' etcd lease TTL (whole seconds)")
	fl.DurationVar(&opts.Soak, "soak", 0, "run the soak for this long instead: the router over a simulated fleet changing every minute, under steady load (--rate), reporting its RSS, heap, goroutines and open files")
	fl.DurationVar(&opts.Churn, "churn", time.Minute, "with --soak: how often the fleet changes")
	fl.IntVar(&opts.MaxTokens, "max-tokens", faultbench.DefaultMaxTokens, "with --faults: max_tokens of each request")
	return cmd
}

// binary is --binary, or this process's own executable.
func (o *Options) binary() (string, error) {
	if o.Binary != "" {
		return o.Binary, nil
	}
	bin, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding this binary (pass --binary): %w", err)
	}
	return bin, nil
}

// RunSoak runs the soak and prints its report; each sample is printed to
// stderr as it is taken.
func RunSoak(ctx context.Context, o *Options) error {
	bin, err := o.binary()
	if err != nil {
		return err
	}
	rate := o.Rate
	if !o.rateSet {
		rate = 20
	}
	rep, err := faultbench.Soak(ctx, faultbench.SoakOptions{Binary: bin, Duration: o.Soak, Churn: o.Churn, Rate: rate, Progress: func(s faultbench.SoakSample) {
		fmt.Fprintf(o.IO.ErrOut, "soak %s: RSS %.1f MiB, heap in use %.1f MiB, %0.f goroutines, %.0f open fds, %d requests (%d failed)\n",
			s.At, s.RSSBytes/(1<<20), s.HeapBytes/(1<<20), s.Goroutines, s.OpenFDs, s.Requests, s.Failed)
	}})
	if err != nil {
		return err
	}
	if o.Output == "json" {
		enc := json.NewEncoder(o.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return faultbench.WriteSoak(o.IO.Out, rep)
}

// RunFaults runs the fault-injection benchmark and prints its report.
func RunFaults(ctx context.Context, o *Options) error {
	bin, err := o.binary()
	if err != nil {
		return err
	}
	fo := faultbench.Options{Binary: bin, Scenarios: o.Scenarios, Rate: o.Rate, Baseline: o.Baseline, Hold: o.Hold,
		LeaseTTL: o.LeaseTTL, MaxTokens: o.MaxTokens, Prefill: o.Prefill, Decode: o.Decode}
	fo.Speed = faultbench.DefaultSpeed
	if o.speedSet {
		fo.Speed = o.Speed
	}
	results, err := faultbench.Run(ctx, fo)
	if err != nil {
		return err
	}
	if o.Output == "json" {
		enc := json.NewEncoder(o.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"rate": o.Rate, "baseline_s": o.Baseline.Seconds(), "hold_s": o.Hold.Seconds(), "max_tokens": o.MaxTokens, "speed": fo.Speed,
			"lease_ttl_s": o.LeaseTTL.Seconds(), "fleet": map[string]any{"prefill": o.Prefill, "decode": o.Decode, "frontend_replicas": 2}, "results": results})
	}
	return faultbench.WriteTable(o.IO.Out, fo, results)
}

// Run replays the workload once per mode.
func Run(ctx context.Context, o *Options) error {
	var reqs []workload.Request
	if o.Workload == "synthetic" {
		reqs = workload.Synthetic(o.Tenants, o.Requests, 16, 20*time.Millisecond)
	} else {
		var err error
		if reqs, err = workload.Load(o.Workload, o.Requests); err != nil {
			return err
		}
	}
	if len(reqs) == 0 {
		return fmt.Errorf("%s holds no requests", o.Workload)
	}
	var reports []workload.Report
	for _, mode := range o.Modes {
		rep, err := runMode(ctx, o, mode, reqs)
		if err != nil {
			return err
		}
		reports = append(reports, rep)
		if ctx.Err() != nil {
			break
		}
	}
	if o.Output == "json" {
		enc := json.NewEncoder(o.IO.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"workload": o.Workload, "requests": len(reqs), "time_scale": o.TimeScale,
			"fleet": map[string]any{"prefill": o.Prefill, "decode": o.Decode, "speed": o.Speed}, "results": reports})
	}
	tw := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "workload %s, %d requests, time scale %g, fleet %d prefill + %d decode at speed %g\n\n", o.Workload, len(reqs), o.TimeScale, o.Prefill, o.Decode, o.Speed)
	fmt.Fprintln(tw, "MODE\tREQ/S\tTTFT P50\tTTFT P90\tTTFT P99\tE2E P50\tE2E P99\tHIT RATE\tERRORS")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%.1f\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\t%.1f%%\t%d\n", r.Mode, r.Throughput, r.TTFTp50, r.TTFTp90, r.TTFTp99, r.E2Ep50, r.E2Ep99, 100*r.HitRate, r.Errors)
	}
	return tw.Flush()
}

func runMode(ctx context.Context, o *Options, mode string, reqs []workload.Request) (rep workload.Report, err error) {
	d, err := demo.Start(demo.Options{Bind: "127.0.0.1:0",
		Fleet: fleetsim.Options{Prefill: o.Prefill, Decode: o.Decode, Speed: o.Speed},
		Deps:  routerd.Deps{Picker: modes[mode](), ShutdownGrace: 5 * time.Second}})
	if err != nil {
		return rep, fmt.Errorf("router for %s: %w", mode, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(sctx) }()
	defer func() {
		cancel()
		if rerr := <-done; rerr != nil && err == nil {
			err = fmt.Errorf("router for %s: %w", mode, rerr)
		}
	}()
	router := "http://" + d.Addr()
	// Measure once every worker is discovered and has sent its load.
	if err := settled(sctx, router, o.Prefill+o.Decode); err != nil {
		return rep, fmt.Errorf("router for %s: %w", mode, err)
	}
	rep = workload.Replay(sctx, reqs, workload.Options{Router: router, Model: "Qwen/Qwen3-32B", TimeScale: o.TimeScale, MaxOutput: o.MaxOutput})
	rep.Mode = mode
	return rep, nil
}

// settled polls the admin API until n workers are discovered and every
// load subscription is connected, for at most 30 s. (Idle workers publish
// nothing, so a sample cannot be awaited before traffic.)
func settled(ctx context.Context, router string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, router+"/admin/dynamo/workers", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+demo.AdminToken)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			var v admin.WorkersResponse
			err = json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&v)
			_ = resp.Body.Close()
			ready := err == nil && len(v.Workers) >= n && len(v.Subscriptions) >= n
			for _, sub := range v.Subscriptions {
				ready = ready && sub.State == "connected"
			}
			if ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the fleet did not settle: %w", context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
