// Package faultbench is the fault-injection benchmark: it runs a simulated
// Dynamo fleet (`continuum fleet-sim`: etcd store, two frontend replicas in
// the router's pool, prefill and decode workers) and the router (`continuum
// serve`) as real child processes of a built binary, sends them a steady
// load of streamed and buffered chat completions, injects one fault per
// scenario, and reports what the clients saw: requests sent and failed (by
// cause), pins to a worker after its record expired, how long routing took
// to leave the faulty part and the fleet to be whole again, and the p99
// latency during the fault against the baseline before it.
//
// Imports: admin (the router's admin views) and fleetsim (the control
// API's types); it drives both only over HTTP.
package faultbench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Options shape a run.
type Options struct {
	// Binary is the continuum binary run as fleet-sim and serve.
	Binary string
	// Scenarios are the scenarios to run, in order (nil: all).
	Scenarios []string
	// Rate is the requests sent per second, half streamed.
	Rate float64
	// Baseline is how long the load runs before the fault.
	Baseline time.Duration
	// Hold is how long a fault that is undone by hand lasts (a pause, a
	// silenced publisher, a duplicate record, saturation, a frontend
	// replica down).
	Hold time.Duration
	// LeaseTTL is the workers' etcd lease: how long a killed worker's
	// records outlive it.
	LeaseTTL time.Duration
	// Speed scales the simulated engines' time down.
	Speed float64
	// MaxTokens is each request's max_tokens.
	MaxTokens int
	// Prefill and Decode are the fleet's workers.
	Prefill, Decode int
	// Logger reports progress (nil: none).
	Logger *slog.Logger
	// Progress, when set, receives each scenario's result as it ends.
	Progress func(Result)
}

// Defaults of a full-size run.
const (
	DefaultRate      = 40
	DefaultBaseline  = 10 * time.Second
	DefaultHold      = 5 * time.Second
	DefaultSpeed     = 4
	DefaultMaxTokens = 16
	DefaultLeaseTTL  = 10 * time.Second
)

// WithDefaults is o with every field left zero set as a run sets it.
func (o Options) WithDefaults() Options {
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	if o.Baseline <= 0 {
		o.Baseline = DefaultBaseline
	}
	if o.Hold <= 0 {
		o.Hold = DefaultHold
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.Speed <= 0 {
		o.Speed = DefaultSpeed
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = DefaultMaxTokens
	}
	if o.Prefill <= 0 {
		o.Prefill = 2
	}
	if o.Decode <= 0 {
		o.Decode = 4
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = Scenarios()
	}
	return o
}

// Result is one scenario's report.
type Result struct {
	Scenario string `json:"scenario"`
	Fault    string `json:"fault"`
	Sent     int    `json:"sent"`
	// NotSent counts ticks of the load that found maxInFlight requests
	// open.
	NotSent int `json:"not_sent"`
	Failed  int `json:"failed"`
	// InFlightOnKilled counts the failures of requests that were being
	// answered by the killed worker or through the killed frontend
	// replica when it died: the failures no router can prevent.
	InFlightOnKilled int `json:"failed_in_flight_on_killed"`
	// Unexpected is Failed less InFlightOnKilled.
	Unexpected int            `json:"failed_unexpected"`
	Causes     map[string]int `json:"failures_by_cause"`
	// Repins is the router's continuum_dynamo_repin_total at the end.
	Repins float64 `json:"repins"`
	// PinnedAfterExpiry counts requests the frontends received pinned to
	// a killed worker more than expiryGrace after its record left etcd;
	// LatestPinAfterExpiryMS is the latest of all pins after it left.
	PinnedAfterExpiry      int     `json:"pinned_after_expiry"`
	LatestPinAfterExpiryMS float64 `json:"latest_pin_after_expiry_ms"`
	// DroppedMS is how long after a kill the router's discovery dropped
	// the worker (its record's TTL); -1 for other faults.
	DroppedMS float64 `json:"dropped_after_ms"`
	// OutageMS is how long etcd was down (its restart); 0 for other
	// faults.
	OutageMS float64 `json:"etcd_outage_ms,omitempty"`
	// ExcludedMS is how long after the fault the faulty part received its
	// last request (-1 when it has none to receive).
	ExcludedMS float64 `json:"excluded_after_ms"`
	// RecoveredMS is how long after the repair (the restart, the resume,
	// etcd serving again) the fleet was whole again: the part back
	// in discovery and receiving requests.
	RecoveredMS float64 `json:"recovered_after_ms"`
	Recovered   bool    `json:"recovered"`
	BaselineP99 float64 `json:"baseline_p99_ms"`
	FaultP99    float64 `json:"fault_p99_ms"`
	// OK says the scenario met the targets: no unexpected failure, no pin
	// after expiry, recovered within the lease TTL.
	OK bool `json:"ok"`
}

// expiryGrace is the one discovery event allowed after a record leaves
// etcd: the delete reaches the router's watch and its registry on
// loopback well within it, and a request pinned just before may still be
// on its way to the frontend.
const expiryGrace = 250 * time.Millisecond

// Run runs the scenarios one after another, each on a fresh fleet and
// router.
func Run(ctx context.Context, o Options) ([]Result, error) {
	o = o.WithDefaults()
	var out []Result
	for _, name := range o.Scenarios {
		r, err := RunScenario(ctx, o, name)
		if err != nil {
			return out, fmt.Errorf("scenario %s: %w", name, err)
		}
		out = append(out, r)
		if o.Progress != nil {
			o.Progress(r)
		}
	}
	return out, nil
}

var (
	frontendRe = regexp.MustCompile(`(?m)^frontend:\s+(http://\S+)\s+\(namespace \S+, backend (\S+)\)`)
	workerRe   = regexp.MustCompile(`(?m)^\s+(prefill|decode)\s+instance (\d+).*$`)
	servingRe  = regexp.MustCompile(`"msg":"continuum serving","address":"([^"]+)"`)
	configRe   = regexp.MustCompile(`router configuration: (\S+)`)
)

// model is the simulated fleet's model (fleet-sim's default).
const model = "Qwen/Qwen3-32B"

// queueMaxWait is how long a request that finds every worker busy waits
// in the router's queue: longer than any hold, so that a saturation that
// clears within it costs latency, not requests.
const queueMaxWait = 30 * time.Second

// env is one scenario's processes.
type env struct {
	o        Options
	dir      string
	sim, srv *proc
	router   string
	// control is a frontend replica's URL for the control API (the first,
	// never the one killed); replicas are the replicas' backend names.
	control  string
	replicas []string
	workers  map[string][]string // role → instance ids (decimal)
}

// startEnv starts fleet-sim (with simArgs too) and serve over it and
// waits until the router sees the whole fleet.
func startEnv(ctx context.Context, o Options, simArgs ...string) (*env, error) {
	dir, err := os.MkdirTemp("", "continuum-faultbench-")
	if err != nil {
		return nil, err
	}
	e := &env{o: o, dir: dir, workers: map[string][]string{}}
	cfg := filepath.Join(dir, "continuum.yaml")
	e.sim, err = startProc(ctx, "fleet-sim", o.Binary, append([]string{"fleet-sim", "--store", "etcd", "--frontend-replicas", "2",
		"--prefill", fmt.Sprint(o.Prefill), "--decode", fmt.Sprint(o.Decode), "--speed", fmt.Sprint(o.Speed),
		"--lease-ttl", o.LeaseTTL.String(), "--migration-limit", "3", "--router-bind", "127.0.0.1:0", "--write-config", cfg}, simArgs...)...)
	if err != nil {
		e.close()
		return nil, err
	}
	if _, err := e.sim.awaitMatch(ctx, configRe, time.Minute); err != nil {
		e.close()
		return nil, err
	}
	for _, m := range frontendRe.FindAllStringSubmatch(e.sim.stdout(), -1) {
		if e.control == "" {
			e.control = m[1]
		}
		e.replicas = append(e.replicas, m[2])
	}
	for _, m := range workerRe.FindAllStringSubmatch(e.sim.stdout(), -1) {
		if !strings.Contains(m[0], "standby") {
			e.workers[m[1]] = append(e.workers[m[1]], m[2])
		}
	}
	if len(e.replicas) < 2 || len(e.workers["prefill"]) != o.Prefill || len(e.workers["decode"]) != o.Decode {
		e.close()
		return nil, fmt.Errorf("fleet-sim printed %d replicas and workers %v:\n%s", len(e.replicas), e.workers, e.sim.stdout())
	}
	if err := withBusyRules(cfg); err != nil {
		e.close()
		return nil, err
	}
	e.srv, err = startProc(ctx, "serve", o.Binary, "serve", "--config", cfg, "--log-format", "json", "--shutdown-grace", "5s")
	if err != nil {
		e.close()
		return nil, err
	}
	addr, err := e.srv.awaitMatch(ctx, servingRe, time.Minute)
	if err != nil {
		e.close()
		return nil, err
	}
	e.router = "http://" + addr
	if err := e.awaitWhole(ctx, time.Minute); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// withBusyRules adds a busy threshold and a queue to the router
// configuration fleet-sim wrote, as a deployment that sheds overload
// would set them.
func withBusyRules(cfg string) error {
	data, err := os.ReadFile(cfg)
	if err != nil {
		return err
	}
	const anchor = "    direct_allow_cidrs: [\"127.0.0.0/8\"]\n"
	if !strings.Contains(string(data), anchor) {
		return fmt.Errorf("%s: no load section to extend:\n%s", cfg, data)
	}
	rules := anchor + "    busy_threshold: {kv_blocks: 0.9}\n" + fmt.Sprintf("    queue: {size: 1024, max_wait: %q}\n", queueMaxWait.String())
	return os.WriteFile(cfg, []byte(strings.Replace(string(data), anchor, rules, 1)), 0o600)
}

// awaitWhole waits until the router lists every worker with connected
// load subscriptions and has pinned a request to each.
func (e *env) awaitWhole(ctx context.Context, within time.Duration) error {
	n := e.o.Prefill + e.o.Decode
	if _, err := poll(ctx, within, 50*time.Millisecond, func() bool {
		v, err := e.routerWorkers(ctx)
		if err != nil || len(v.Workers) != n || !v.Connected {
			return false
		}
		connected := 0
		for _, s := range v.Subscriptions {
			if s.State == "connected" {
				connected++
			}
		}
		return connected >= n
	}); err != nil {
		return fmt.Errorf("the router did not see the whole fleet within %v: %w\n%s", within, err, tail(e.srv.stderr()))
	}
	return nil
}

// close stops the processes and removes the scenario's directory.
func (e *env) close() {
	if e.srv != nil {
		e.srv.stop()
	}
	if e.sim != nil {
		e.sim.stop()
	}
	_ = os.RemoveAll(e.dir)
}

// Scenarios lists the scenarios, in the order Run runs them.
func Scenarios() []string {
	out := make([]string, 0, len(scenarios))
	for _, s := range scenarios {
		out = append(out, s.name)
	}
	return out
}

// Describe returns a scenario's fault in words ("" for an unknown one).
func Describe(name string) string {
	i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
	if i < 0 {
		return ""
	}
	return scenarios[i].fault
}
