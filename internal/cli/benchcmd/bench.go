// Package benchcmd implements `continuum bench`: the routing-quality
// benchmark, replaying a workload against the router over a simulated
// fleet with each routing mode in turn.
//
// Imports: cmdutil and engines (demo, fleetsim, kv, pick, routerd, workload,
// admin types); never another command.
package benchcmd

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/demo"
	"github.com/continuum-router/continuum/internal/dynamo/kvstack"
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
	// Rate, when above 0, replays the requests at this mean rate (req/s):
	// the synthetic workload's Poisson rate, or a trace's arrivals rescaled.
	Rate      float64
	MaxOutput int
	Modes     []string
	Prefill   int
	Decode    int
	Speed     float64
	// KVBlocks is each simulated rank's cache, in 16-token blocks (0: 8,192
	// for the synthetic workload, 131,072 for a trace).
	KVBlocks int
	// The synthetic workload: tenants, each with a shared prefix of
	// PrefixBlocks 512-token blocks, and queries of QueryTokens.
	Tenants      int
	PrefixBlocks int
	QueryTokens  int
	Seed         uint64
	Output       string
	// The fault-injection benchmark (--faults).
	Faults    bool
	Binary    string
	Scenarios []string
	Baseline  time.Duration
	Hold      time.Duration
	LeaseTTL  time.Duration
	MaxTokens int
	// Soak, when set, runs the soak for that long instead (--soak).
	Soak time.Duration
	// Churn is how often the soak changes the fleet.
	Churn time.Duration
	// speedSet, rateSet, prefillSet and decodeSet say the flags were
	// given (the fault bench and the soak have their own defaults).
	speedSet, rateSet, prefillSet, decodeSet bool
}

// Routing modes.
const (
	ModeRoundRobin = "round-robin"
	ModeLoad       = "load"
	ModeKV         = "kv"
	ModeOracle     = "oracle"
	// ModeOracleTTFT is not run by default: the router that also knows
	// each queued prefill's progress and minimises each request's time to
	// first token rather than the KV-aware cost formula.
	ModeOracleTTFT = "oracle-ttft"
)

// Modes are the routing modes a run compares by default, in order.
var Modes = []string{ModeRoundRobin, ModeLoad, ModeKV, ModeOracle}

// allModes are the modes --modes accepts.
var allModes = append(slices.Clone(Modes), ModeOracleTTFT)

// Defaults of the synthetic workload and its fleet: 32 tenants with 8,192
// shared tokens each, 262,144 tokens in all, twice what one rank caches
// (8,192 blocks of 16 tokens) and half of what four prefill workers cache
// together. Round-robin makes every worker see every tenant and evict them
// in turn; placement by prefix lets each worker keep a quarter of them. At
// 48 requests a second round-robin's p90 time to first token is over twice
// what it is unloaded.
const (
	defaultTenants      = 32
	defaultPrefixBlocks = 16
	defaultQueryTokens  = 256
	defaultKVBlocks     = 8192
	// traceKVBlocks is a rank's cache for a trace: 2,097,152 tokens. The
	// Mooncake conversation trace's prompts average 12,000 tokens, and its
	// reuse spans millions of tokens.
	traceKVBlocks  = 131072
	defaultPrefill = 4
	defaultDecode  = 2
	defaultSpeed   = 4
	defaultRate    = 48
)

// model is the model the simulated fleet serves.
const model = "Qwen/Qwen3-32B"

// NewCmdBench returns `continuum bench`.
func NewCmdBench(f *cmdutil.Factory) *cobra.Command {
	opts := &Options{IO: f.IOStreams, Env: f.Env}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Compare routing policies on a workload over a simulated fleet",
		Long: `Replay a workload against the router, once per routing mode, each time over a
fresh simulated Dynamo fleet, and report throughput, time to first token
(p50/p90/p99), end-to-end latency and the prefix-cache hit rate the workers
measured, as a table or JSON.

Worker TTFT is the time to first token the simulated workers measure (from
the frontend's receipt of a request to the end of its prefill): unlike the
client's, it is not stretched by a busy host's scheduling delays.

The simulated workers tokenize prompts as the router does (a byte-level
tokenizer and a ChatML template their cards declare), keep an LRU cache of
16-token blocks per rank (--kv-blocks), publish it on kv-events, and prefill
in turn, per rank, only the tokens their cache lacks (50 µs a token at
--speed 1).

Modes:
  round-robin  rotate over the workers
  load         the daemon's load-based picker (serve's default without dynamo.kv)
  kv           the daemon's KV-aware picker (dynamo.kv.enabled)
  oracle       the KV-aware cost formula on exact facts: every rank's cache and
               the prefill backlog it would publish, read from the simulation
               itself at the moment of the choice (what a Dynamo fleet could
               tell a router, without delay)
  oracle-ttft  (only when asked for) more than any worker publishes: how far
               each queued prefill has got, choosing the rank where the
               request's first token comes soonest

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
output_length and hash_ids of 512-token blocks; each block id becomes 512
bytes of text) or "synthetic": --tenants tenants with shared prefixes of
--prefix-blocks 512-token blocks and queries of --query-tokens, arriving at
--rate per second (Poisson).`,
		Example: `  continuum bench                                   # synthetic, 400 requests, the four modes
  continuum bench --requests 2000 -o json
  continuum bench --workload ../shared/data/mooncake/conversation_trace.jsonl --requests 2000 \
    --speed 8 --rate 40
  continuum bench --modes round-robin,kv --rate 8                 # unloaded
  continuum bench --faults                                        # every fault scenario, about 4 minutes
  continuum bench --faults --scenarios decode-killed,frontend-killed --rate 20 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, m := range opts.Modes {
				if !slices.Contains(allModes, m) {
					return cmdutil.FlagErrorf("mode %q is not one of %s", m, strings.Join(allModes, ", "))
				}
			}
			if err := cmdutil.OneOf("--output", opts.Output, []string{"table", "json"}); err != nil {
				return err
			}
			fs := cmd.Flags()
			opts.rateSet, opts.speedSet = fs.Changed("rate"), fs.Changed("speed")
			opts.prefillSet, opts.decodeSet = fs.Changed("prefill"), fs.Changed("decode")
			if err := otherRunFlags(fs, opts); err != nil {
				return err
			}
			if opts.Soak > 0 {
				if opts.Churn < time.Second {
					return cmdutil.FlagErrorf("--churn must be at least 1s")
				}
				if opts.Faults {
					return cmdutil.FlagErrorf("--soak and --faults are separate runs")
				}
				if !opts.rateSet {
					opts.Rate = soakRate
				}
				if err := checkLoadRate(opts.Rate); err != nil {
					return err
				}
				return RunSoak(cmd.Context(), opts)
			}
			if opts.Faults {
				for _, s := range opts.Scenarios {
					if faultbench.Describe(s) == "" {
						return cmdutil.FlagErrorf("scenario %q is not one of %s", s, strings.Join(faultbench.Scenarios(), ", "))
					}
				}
				if !opts.rateSet {
					opts.Rate = faultbench.DefaultRate
				}
				if err := checkLoadRate(opts.Rate); err != nil {
					return err
				}
				if err := checkFaultFlags(opts); err != nil {
					return err
				}
				return RunFaults(cmd.Context(), opts)
			}
			if opts.Requests <= 0 || opts.Prefill < 0 || opts.Decode <= 0 || opts.Speed <= 0 || opts.KVBlocks < 0 || opts.Tenants <= 0 ||
				opts.PrefixBlocks < 0 || opts.QueryTokens < 0 || opts.Rate < 0 || opts.TimeScale <= 0 {
				return cmdutil.FlagErrorf("--requests, --decode, --speed, --tenants and --time-scale must be positive, and no count or rate negative")
			}
			return Run(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Workload, "workload", "synthetic", `a Mooncake trace file, or "synthetic"`)
	fl.IntVar(&opts.Requests, "requests", 400, "requests to replay (a trace's first ones)")
	fl.Float64Var(&opts.Rate, "rate", 0, "mean arrival rate in requests per second (synthetic: 48; a trace: as recorded, divided by --time-scale; --faults: 40, half streamed; --soak: 20)")
	fl.Float64Var(&opts.TimeScale, "time-scale", 1, "divide a trace's inter-arrival times by this (when --rate is not given)")
	fl.IntVar(&opts.MaxOutput, "max-output", 32, "cap on each request's output tokens")
	fl.StringSliceVar(&opts.Modes, "modes", Modes, "routing modes to compare: "+strings.Join(allModes, ", "))
	fl.IntVar(&opts.Prefill, "prefill", defaultPrefill, "simulated prefill workers (with --faults: 2 unless set)")
	fl.IntVar(&opts.Decode, "decode", defaultDecode, "simulated decode workers (with --faults: 4 unless set)")
	fl.Float64Var(&opts.Speed, "speed", defaultSpeed, "simulated time runs this many times faster")
	fl.IntVar(&opts.KVBlocks, "kv-blocks", 0, "each simulated rank's KV cache, in 16-token blocks (default 8192 synthetic, 131072 for a trace)")
	fl.IntVar(&opts.Tenants, "tenants", defaultTenants, "tenants of the synthetic workload")
	fl.IntVar(&opts.PrefixBlocks, "prefix-blocks", defaultPrefixBlocks, "each tenant's shared prefix, in 512-token blocks (synthetic)")
	fl.IntVar(&opts.QueryTokens, "query-tokens", defaultQueryTokens, "each request's own query, in tokens (synthetic)")
	fl.Uint64Var(&opts.Seed, "seed", 1, "seed of the synthetic workload's arrivals and tenants")
	fl.StringVarP(&opts.Output, "output", "o", "table", "output format: table or json")
	fl.BoolVar(&opts.Faults, "faults", false, "run the fault-injection benchmark instead of comparing routing modes")
	fl.StringVar(&opts.Binary, "binary", "", "with --faults: the continuum binary to run as fleet-sim and serve (default: this one)")
	fl.StringSliceVar(&opts.Scenarios, "scenarios", nil, "with --faults: scenarios to run (default all): "+strings.Join(faultbench.Scenarios(), ", "))
	_ = cmd.RegisterFlagCompletionFunc("scenarios", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return faultbench.Scenarios(), cobra.ShellCompDirectiveNoFileComp
	})
	fl.DurationVar(&opts.Baseline, "baseline", faultbench.DefaultBaseline, "with --faults: load before each fault")
	fl.DurationVar(&opts.Hold, "hold", faultbench.DefaultHold, "with --faults: how long a fault undone by hand lasts (pause, silence, duplicate, saturation, frontend down)")
	fl.DurationVar(&opts.LeaseTTL, "lease-ttl", faultbench.DefaultLeaseTTL, "with --faults: the workers' etcd lease TTL (whole seconds)")
	fl.DurationVar(&opts.Soak, "soak", 0, "run the soak for this long instead: the router over a simulated fleet changing every minute, under steady load (--rate), reporting its RSS, heap, goroutines and open files")
	fl.DurationVar(&opts.Churn, "churn", time.Minute, "with --soak: how often the fleet changes")
	fl.IntVar(&opts.MaxTokens, "max-tokens", faultbench.DefaultMaxTokens, "with --faults: max_tokens of each request")
	return cmd
}

// soakRate is the soak's load unless --rate says otherwise.
const soakRate = 20

// checkLoadRate refuses a steady load's rate its ticker cannot keep: the
// fault and soak loads send one request per 1/rate.
func checkLoadRate(rate float64) error {
	if !(rate >= 0.01 && rate <= 1000) {
		return cmdutil.FlagErrorf("--rate must be from 0.01 to 1000 requests a second")
	}
	return nil
}

// checkFaultFlags refuses --faults settings out of their range, which the
// run would otherwise replace by its defaults (or fleet-sim refuse once
// started).
func checkFaultFlags(o *Options) error {
	switch {
	case o.prefillSet && o.Prefill < 1, o.decodeSet && o.Decode < 1:
		return cmdutil.FlagErrorf("with --faults, --prefill and --decode must be at least 1")
	case o.speedSet && o.Speed <= 0:
		return cmdutil.FlagErrorf("--speed must be positive")
	case o.MaxTokens < 1:
		return cmdutil.FlagErrorf("--max-tokens must be at least 1")
	case o.Baseline <= 0, o.Hold <= 0:
		return cmdutil.FlagErrorf("--baseline and --hold must be positive")
	case !fleetsim.LeaseTTLValid(o.LeaseTTL):
		return cmdutil.FlagErrorf("--lease-ttl must be whole seconds from 2s to 1h (etcd grants leases in seconds)")
	}
	return nil
}

// otherRunFlags refuses a flag of a run other than the one the command
// line asks for, rather than ignore it: `bench --scenarios decode-killed`
// without --faults would run the routing comparison for minutes and never
// the scenario asked for.
func otherRunFlags(fs *pflag.FlagSet, o *Options) error {
	if !o.Faults {
		for _, n := range []string{"scenarios", "baseline", "hold", "lease-ttl", "max-tokens"} {
			if fs.Changed(n) {
				return cmdutil.FlagErrorf("--%s is a flag of --faults: add --faults, or drop --%s", n, n)
			}
		}
	}
	switch {
	case o.Soak == 0 && fs.Changed("churn"):
		return cmdutil.FlagErrorf("--churn is a flag of --soak: add --soak, or drop --churn")
	case !o.Faults && o.Soak == 0 && fs.Changed("binary"):
		return cmdutil.FlagErrorf("--binary is a flag of --faults and --soak: add one, or drop --binary")
	}
	return nil
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
	rep, err := faultbench.Soak(ctx, faultbench.SoakOptions{Binary: bin, Duration: o.Soak, Churn: o.Churn, Rate: o.Rate, Progress: func(s faultbench.SoakSample) {
		fmt.Fprintf(o.IO.ErrOut, "soak %s: RSS %.1f MiB, heap in use %.1f MiB, %0.f goroutines, %.0f open fds, %d requests (%d failed)\n",
			s.At, s.RSSBytes/(1<<20), s.HeapBytes/(1<<20), s.Goroutines, s.OpenFDs, s.Requests, s.Failed)
	}})
	if err != nil && len(rep.Samples) == 0 {
		return err
	}
	// A soak cut short (interrupted, or its fleet failing) still prints
	// the samples it took; the error then makes the exit status 1.
	var werr error
	if o.Output == "json" {
		enc := json.NewEncoder(o.IO.Out)
		enc.SetIndent("", "  ")
		werr = enc.Encode(struct {
			faultbench.SoakReport
			Error string `json:"error,omitempty"`
		}{rep, errText(err)})
	} else {
		werr = faultbench.WriteSoak(o.IO.Out, rep)
	}
	return cmp.Or(err, werr)
}

// errText is err's text, "" for none.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// RunFaults runs the fault-injection benchmark and prints its report.
func RunFaults(ctx context.Context, o *Options) error {
	bin, err := o.binary()
	if err != nil {
		return err
	}
	fo := o.faultOptions(bin)
	fo.Progress = func(r faultbench.Result) {
		verdict := "OK"
		if !r.OK {
			verdict = "NO"
		}
		fmt.Fprintf(o.IO.ErrOut, "scenario %s: %s, %d sent, %d failed (%d unexpected)\n", r.Scenario, verdict, r.Sent, r.Failed, r.Unexpected)
	}
	results, err := faultbench.Run(ctx, fo)
	if err != nil && len(results) == 0 {
		return err
	}
	// A run cut short (interrupted, or a later scenario's fleet failing)
	// still prints the scenarios it finished; the error then makes the
	// exit status 1.
	var werr error
	if o.Output == "json" {
		enc := json.NewEncoder(o.IO.Out)
		enc.SetIndent("", "  ")
		rep := faultsReport(fo, results)
		if err != nil {
			rep["error"] = err.Error()
		}
		werr = enc.Encode(rep)
	} else {
		werr = faultbench.WriteTable(o.IO.Out, fo, results)
	}
	return cmp.Or(err, werr)
}

// faultOptions are the fault run's settings, every one as the run uses
// it: the fault fleet has its own shape unless the flags say otherwise
// (faultbench's 2 prefill and 4 decode workers).
func (o *Options) faultOptions(bin string) faultbench.Options {
	fo := faultbench.Options{Binary: bin, Scenarios: o.Scenarios, Rate: o.Rate, Baseline: o.Baseline, Hold: o.Hold,
		LeaseTTL: o.LeaseTTL, MaxTokens: o.MaxTokens, Speed: faultbench.DefaultSpeed}
	if o.prefillSet {
		fo.Prefill = o.Prefill
	}
	if o.decodeSet {
		fo.Decode = o.Decode
	}
	if o.speedSet {
		fo.Speed = o.Speed
	}
	return fo.WithDefaults()
}

// faultsReport is the JSON document of a fault run: the settings it used
// (fo with its defaults) and its results.
func faultsReport(fo faultbench.Options, results []faultbench.Result) map[string]any {
	return map[string]any{"rate": fo.Rate, "baseline_s": fo.Baseline.Seconds(), "hold_s": fo.Hold.Seconds(), "max_tokens": fo.MaxTokens, "speed": fo.Speed,
		"lease_ttl_s": fo.LeaseTTL.Seconds(), "fleet": map[string]any{"prefill": fo.Prefill, "decode": fo.Decode, "frontend_replicas": 2}, "results": results}
}

// Run replays the workload once per mode.
func Run(ctx context.Context, o *Options) error {
	reqs, err := load(o)
	if err != nil {
		return err
	}
	if o.KVBlocks == 0 {
		o.KVBlocks = defaultKVBlocks
		if o.Workload != "synthetic" {
			o.KVBlocks = traceKVBlocks
		}
	}
	timeScale := o.TimeScale
	if timeScale <= 0 {
		timeScale = 1
	}
	synthetic := o.Workload == "synthetic"
	if span := reqs[len(reqs)-1].Timestamp - reqs[0].Timestamp; !synthetic && o.Rate > 0 && span > 0 {
		timeScale = o.Rate * float64(span) / 1000 / float64(len(reqs)-1)
	}
	rate := 0.0
	if span := reqs[len(reqs)-1].Timestamp - reqs[0].Timestamp; span > 0 {
		rate = float64(len(reqs)-1) / (float64(span) / 1000) * timeScale
	}
	var reports []workload.Report
	var failed error // a mode that could not run, after others did
	for _, mode := range o.Modes {
		rep, err := runMode(ctx, o, mode, reqs, timeScale)
		if err != nil && len(reports) == 0 {
			return err
		}
		if err != nil {
			failed = fmt.Errorf("mode %s: %w", mode, err)
			break
		}
		reports = append(reports, rep)
		if ctx.Err() != nil {
			break
		}
	}
	// An interrupted run, or one a later mode failed, still prints what it
	// measured, marked partial, and exits 1 so that a script does not take
	// it for a finished one.
	interrupted := ctx.Err() != nil || failed != nil
	partial := func(err error) error {
		switch {
		case failed != nil:
			return cmp.Or(err, fmt.Errorf("%w: the results are partial", failed))
		case err == nil && interrupted:
			err = errors.New("interrupted before the run ended: the results are partial")
		}
		return err
	}
	fleet := map[string]any{"prefill": o.Prefill, "decode": o.Decode, "speed": o.Speed, "kv_blocks_per_rank": o.KVBlocks, "block_size": 16}
	if o.Output == "json" {
		out := map[string]any{"workload": o.Workload, "requests": len(reqs), "time_scale": timeScale, "rate_rps": rate, "max_output": o.MaxOutput,
			"fleet": fleet, "results": reports, "interrupted": interrupted}
		if synthetic {
			out["synthetic"] = map[string]any{"tenants": o.Tenants, "prefix_tokens": o.PrefixBlocks * workload.TraceBlockTokens,
				"query_tokens": o.QueryTokens, "seed": o.Seed}
		}
		enc := json.NewEncoder(o.IO.Out)
		enc.SetIndent("", "  ")
		return partial(enc.Encode(out))
	}
	tw := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "workload %s, %d requests at %.1f req/s, fleet %d prefill + %d decode (%d blocks of 16 tokens a rank) at speed %g\n",
		o.Workload, len(reqs), rate, o.Prefill, o.Decode, o.KVBlocks, o.Speed)
	if synthetic {
		fmt.Fprintf(tw, "%d tenants sharing %d-token prefixes, %d-token queries\n", o.Tenants, o.PrefixBlocks*workload.TraceBlockTokens, o.QueryTokens)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "\t\tTIME TO FIRST TOKEN (ms)\t\t\tWORKER TTFT (ms)\t\t\tEND TO END (ms)")
	fmt.Fprintln(tw, "MODE\tREQ/S\tP50\tP90\tP99\tP50\tP90\tP99\tP50\tP90\tP99\tHIT RATE\tERRORS")
	for _, r := range reports {
		fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.1f%%\t%d\n", r.Mode, r.Throughput,
			r.TTFTp50, r.TTFTp90, r.TTFTp99, r.WorkerTTFTp50, r.WorkerTTFTp90, r.WorkerTTFTp99, r.E2Ep50, r.E2Ep90, r.E2Ep99, 100*r.HitRate, r.Errors)
	}
	fmt.Fprintln(tw, "\nTime to first token as the client saw it; worker TTFT as the simulated workers measured it (queue and")
	fmt.Fprintln(tw, "prefill, in the simulation's clock, which this host's scheduling delays do not add to).")
	return partial(tw.Flush())
}

// load reads or builds the workload.
func load(o *Options) ([]workload.Request, error) {
	if o.Workload == "synthetic" {
		rate := o.Rate
		if rate <= 0 {
			rate = defaultRate
		}
		return workload.Tenants(workload.TenantOptions{Tenants: o.Tenants, Requests: o.Requests, PrefixBlocks: o.PrefixBlocks,
			QueryTokens: o.QueryTokens, OutputTokens: o.MaxOutput, Rate: rate, Seed: o.Seed}), nil
	}
	reqs, err := workload.Load(o.Workload, o.Requests)
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%s holds no requests", o.Workload)
	}
	return reqs, nil
}

func runMode(ctx context.Context, o *Options, mode string, reqs []workload.Request, timeScale float64) (rep workload.Report, err error) {
	fo := fleetsim.Options{Prefill: o.Prefill, Decode: o.Decode, Speed: o.Speed, TotalKVBlocks: o.KVBlocks, NoKV: mode != ModeKV}
	var picker pick.Picker
	var orc *oracle
	switch mode {
	case ModeRoundRobin:
		picker = &pick.RoundRobin{}
	case ModeOracle, ModeOracleTTFT:
		orc = newOracle(mode == ModeOracleTTFT)
		picker = orc
	}
	d, err := demo.Start(demo.Options{Bind: "127.0.0.1:0", Fleet: fo, Deps: routerd.Deps{Picker: picker, ShutdownGrace: 5 * time.Second}})
	if err != nil {
		return rep, fmt.Errorf("router for %s: %w", mode, err)
	}
	if orc != nil {
		orc.attach(d.Fleet.Sim, kvstack.Settings(&d.Config.Dynamo.KV).Terms)
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
	// Measure once every worker is discovered and its publishers are
	// subscribed to, and, with KV-aware routing, the pinned tokenizer is
	// loaded.
	if err := settled(sctx, router, o.Prefill+o.Decode, mode == ModeKV); err != nil {
		return rep, fmt.Errorf("router for %s: %w", mode, err)
	}
	if mode == ModeKV {
		if err := tokenizerLoaded(sctx, router); err != nil {
			return rep, fmt.Errorf("router for %s: %w", mode, err)
		}
	}
	rep = workload.Replay(sctx, reqs, workload.Options{Router: router, Model: model, TimeScale: timeScale, MaxOutput: o.MaxOutput})
	rep.Mode = mode
	return rep, nil
}

// settled polls the admin API until n workers are discovered and every
// subscription (their load publishers, and their kv-events publishers with
// kv) is connected, for at most 30 s. (Idle workers publish nothing, so a
// sample cannot be awaited before traffic.)
func settled(ctx context.Context, router string, n int, kv bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	subs := n
	if kv {
		subs = 2 * n
	}
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
			ready := err == nil && len(v.Workers) >= n && len(v.Subscriptions) >= subs
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

// tokenizerLoaded sends short requests until the router renders prompts
// with the fleet's pinned tokenizer (it loads it at the first request that
// needs it), for at most 30 s.
func tokenizerLoaded(ctx context.Context, router string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i := 0; ; i++ {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":1,"messages":[{"role":"user","content":"bench warm-up %d"}]}`, model, i)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, router+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		if rendered(ctx, router) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the router did not load the fleet's tokenizer: %w", context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rendered says whether the router has made a KV-aware selection with a
// rendered prompt (overlap or no_overlap).
func rendered(ctx context.Context, router string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, router+"/metrics", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, result := range []string{"overlap", "no_overlap"} {
			if strings.HasPrefix(line, `continuum_dynamo_kv_selection_total{result="`+result+`"} `) && !strings.HasSuffix(line, " 0") {
				return true
			}
		}
	}
	return false
}
