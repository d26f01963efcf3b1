package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Targets of the comparison (continuum's p99 against nginx's, end to end).
const (
	targetMedianRatio = 1.1
	targetWorstRatio  = 1.3
)

// report is a run's results, as written in JSON.
type report struct {
	Label        string   `json:"label,omitempty"`
	Started      string   `json:"started"`
	Machine      machine  `json:"machine"`
	Versions     versions `json:"versions"`
	NginxWorkers int      `json:"nginx_workers"`
	Settings     settings `json:"settings"`
	Cells        []*cell  `json:"cells"`
	Summary      summary  `json:"summary"`
}

type machine struct {
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpu_model"`
	Kernel     string `json:"kernel"`
	LoadBefore string `json:"load_average_before"`
	LoadAfter  string `json:"load_average_after"`
}

type versions struct {
	Continuum string `json:"continuum"`
	Nginx     string `json:"nginx"`
	Go        string `json:"go"`
	Vegeta    string `json:"vegeta"`
	Baseline  string `json:"baseline,omitempty"`
}

type settings struct {
	Rates           []int    `json:"rates"`
	Modes           []string `json:"modes"`
	CellSeconds     float64  `json:"cell_seconds"`
	SliceSeconds    float64  `json:"slice_seconds"`
	Rounds          int      `json:"rounds"`
	WarmupSeconds   float64  `json:"warmup_seconds"`
	Tokens          int      `json:"tokens"`
	SSEEvents       int      `json:"sse_events"`
	SSEGapSeconds   float64  `json:"sse_gap_seconds"`
	LatencyMeasured string   `json:"latency_measured"`
	CPUMeasured     string   `json:"cpu_measured"`
	AddedLatency    string   `json:"added_latency"`
	// FloorWorkUS and FloorTouchBytes are the work added to the floor
	// per request on purpose (-floor-work, -floor-touch).
	FloorWorkUS     float64 `json:"floor_work_us,omitempty"`
	FloorTouchBytes int     `json:"floor_touch_bytes,omitempty"`
}

// cell is one path at one rate and mode, pooled over the rounds.
type cell struct {
	Mode         string  `json:"mode"`
	Rate         int     `json:"rate"`
	Path         string  `json:"path"`
	Requests     int     `json:"requests"`
	Errors       int     `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	AchievedRate float64 `json:"achieved_rate"`
	// Latency to the last byte and to the first byte of the answer, µs.
	Latency   quantiles `json:"latency_us"`
	FirstByte quantiles `json:"first_byte_us"`
	// What the path adds to the direct path at the same rate and mode, µs
	// (proxies only).
	Added          *quantiles `json:"added_us,omitempty"`
	AddedFirstByte *quantiles `json:"added_first_byte_us,omitempty"`
	// CPU time of the proxy's processes and of the backend during the
	// cell's measurement, over the rounds, and per 1,000 requests.
	ProxyCPUSeconds        float64  `json:"proxy_cpu_seconds"`
	ProxyCPUSecondsPer1k   *float64 `json:"proxy_cpu_seconds_per_1k,omitempty"`
	BackendCPUSeconds      float64  `json:"backend_cpu_seconds"`
	BackendCPUSecondsPer1k float64  `json:"backend_cpu_seconds_per_1k"`
	// The proxy's read and write system calls and its threads' context
	// switches per 1,000 requests (diagnostics: where the CPU goes).
	ProxyPer1k *perRequest `json:"proxy_per_1k,omitempty"`
	// Load averages when each round's measurement of the cell began.
	Load []string `json:"load_average"`
	// The p99 of each round alone, µs, in round order; and for a proxy
	// the median over the rounds of its p99 minus the direct path's p99
	// of the same round. On a shared machine a stall of a few hundred
	// milliseconds lands in one path's window of one round and sets the
	// pooled p99 of that path alone; the median over the rounds is not
	// moved by one such round.
	RoundP99             []float64 `json:"p99_by_round_us"`
	AddedP99RoundsMedian *float64  `json:"added_p99_round_median_us,omitempty"`
	// The host's steal time during the path's slices of each round, ms
	// over all vCPUs (hostSteal): a round whose p99 stands out and that
	// met tens of milliseconds of it met a stall of the host.
	RoundStealMS []float64 `json:"host_steal_ms_by_round"`

	lat, fb []time.Duration
	sent    int
	span    time.Duration
	proxy   usage
}

// perRequest counts system calls and context switches. /proc/PID/io
// counts read(2) and readv(2) but not recv(2), which nginx reads with:
// compare read_syscalls between Go processes only.
type perRequest struct {
	ReadSyscalls    float64 `json:"read_syscalls"`
	WriteSyscalls   float64 `json:"write_syscalls"`
	ContextSwitches float64 `json:"context_switches"`
}

func (c *cell) addProxy(u usage, tick float64) {
	c.ProxyCPUSeconds += float64(u.ticks) / tick
	c.proxy.syscr += u.syscr
	c.proxy.syscw += u.syscw
	c.proxy.ctxsw += u.ctxsw
}

// quantiles in microseconds.
type quantiles struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
}

type summary struct {
	// Continuum's end-to-end p99 over nginx's, cell by cell.
	P99Ratios           map[string]float64 `json:"p99_ratio_by_cell"`
	MedianP99Ratio      float64            `json:"p99_ratio_median"`
	WorstP99Ratio       float64            `json:"p99_ratio_worst"`
	WorstP99Cell        string             `json:"p99_ratio_worst_cell"`
	TargetMedian        float64            `json:"target_median"`
	TargetWorst         float64            `json:"target_worst"`
	TargetsMet          bool               `json:"targets_met"`
	Errors              int                `json:"errors"`
	AddedP99Ratios      map[string]float64 `json:"added_p99_ratio_by_cell"`
	MedianAddedP99Ratio float64            `json:"added_p99_ratio_median"`
	// The same p99 ratio taken round by round (the paths of a cell take
	// turns within a round), then the median over the rounds, per cell;
	// and the median and worst of those over the cells.
	RoundP99Ratios      map[string]float64 `json:"p99_ratio_by_cell_round_median"`
	RoundMedianP99Ratio float64            `json:"p99_ratio_round_median_median"`
	RoundWorstP99Ratio  float64            `json:"p99_ratio_round_median_worst"`
	RoundWorstP99Cell   string             `json:"p99_ratio_round_median_worst_cell"`
	RoundTargetsMet     bool               `json:"targets_met_round_median"`
}

func newReport(o options, targets []*target) *report {
	b := newBackend(o.tokens, o.gap)
	r := &report{Label: o.label, Settings: settings{
		Rates: o.rates, Modes: o.modes, CellSeconds: o.duration.Seconds(), SliceSeconds: o.slice.Seconds(), Rounds: o.rounds,
		WarmupSeconds: o.warmup.Seconds(), Tokens: o.tokens, SSEEvents: len(b.events), SSEGapSeconds: o.gap.Seconds(),
		LatencyMeasured: "from sending the request to reading the last byte of the answer (vegeta's latency; the first byte by the generator's transport)",
		CPUMeasured:     "utime+stime of /proc/PID/stat (the proxy process; nginx's master and workers) before and after each slice of a cell",
		AddedLatency:    "a proxy's quantile minus the direct path's same quantile, same rate and mode, same run",
		FloorWorkUS:     float64(o.floorWork.Nanoseconds()) / 1e3, FloorTouchBytes: o.floorTouch,
	}}
	for _, rate := range o.rates {
		for _, mode := range o.modes {
			for _, t := range targets {
				r.Cells = append(r.Cells, &cell{Mode: mode, Rate: rate, Path: t.name})
			}
		}
	}
	return r
}

func (r *report) cell(mode string, rate int, path string) *cell {
	for _, c := range r.Cells {
		if c.Mode == mode && c.Rate == rate && c.Path == path {
			return c
		}
	}
	panic("no cell " + mode + " " + strconv.Itoa(rate) + " " + path)
}

func (c *cell) add(res attackResult, load string) {
	c.lat = append(c.lat, res.latency...)
	c.fb = append(c.fb, res.firstByte...)
	c.Errors += res.errors
	if c.FirstError == "" {
		c.FirstError = res.firstErr
	}
	c.RoundP99 = append(c.RoundP99, quantilesOf(res.latency).P99)
	c.RoundStealMS = append(c.RoundStealMS, res.stealMS)
	c.sent += len(res.latency) + res.errors
	c.span += res.span
	c.Load = append(c.Load, load)
}

// finish computes the quantiles, the added latencies, CPU per request and
// the summary.
func (r *report) finish() {
	for _, c := range r.Cells {
		c.Requests = len(c.lat)
		c.Latency = quantilesOf(c.lat)
		c.FirstByte = quantilesOf(c.fb)
		if c.span > 0 {
			c.AchievedRate = round1(float64(c.sent) / c.span.Seconds())
		}
		if c.sent > 0 {
			c.BackendCPUSecondsPer1k = round4(c.BackendCPUSeconds / float64(c.sent) * 1000)
			if c.Path != pathDirect {
				v := round4(c.ProxyCPUSeconds / float64(c.sent) * 1000)
				c.ProxyCPUSecondsPer1k = &v
				k := 1000 / float64(c.sent)
				c.ProxyPer1k = &perRequest{round1(float64(c.proxy.syscr) * k), round1(float64(c.proxy.syscw) * k), round1(float64(c.proxy.ctxsw) * k)}
			}
		}
		r.Summary.Errors += c.Errors
	}
	r.Summary.P99Ratios = map[string]float64{}
	r.Summary.AddedP99Ratios = map[string]float64{}
	r.Summary.RoundP99Ratios = map[string]float64{}
	r.Summary.TargetMedian, r.Summary.TargetWorst = targetMedianRatio, targetWorstRatio
	var ratios, addedRatios, roundRatios []float64
	for _, rate := range r.Settings.Rates {
		for _, mode := range r.Settings.Modes {
			d := r.cell(mode, rate, pathDirect)
			for _, c := range r.Cells {
				if c.Mode != mode || c.Rate != rate || c.Path == pathDirect {
					continue
				}
				c.Added = &quantiles{c.Latency.P50 - d.Latency.P50, c.Latency.P99 - d.Latency.P99, c.Latency.P999 - d.Latency.P999}
				if v, ok := roundMedian(c.RoundP99, d.RoundP99, func(p, d float64) float64 { return p - d }); ok {
					v = round1(v)
					c.AddedP99RoundsMedian = &v
				}
				c.AddedFirstByte = &quantiles{c.FirstByte.P50 - d.FirstByte.P50, c.FirstByte.P99 - d.FirstByte.P99, c.FirstByte.P999 - d.FirstByte.P999}
			}
			cont, ngx := r.cell(mode, rate, pathContinuum), r.cell(mode, rate, pathNginx)
			name := mode + "/" + strconv.Itoa(rate)
			if ngx.Latency.P99 > 0 {
				v := round2(cont.Latency.P99 / ngx.Latency.P99)
				r.Summary.P99Ratios[name] = v
				ratios = append(ratios, v)
				if v > r.Summary.WorstP99Ratio {
					r.Summary.WorstP99Ratio, r.Summary.WorstP99Cell = v, name
				}
			}
			if v, ok := roundMedian(cont.RoundP99, ngx.RoundP99, func(c, n float64) float64 { return c / n }); ok {
				v = round2(v)
				r.Summary.RoundP99Ratios[name] = v
				roundRatios = append(roundRatios, v)
				if v > r.Summary.RoundWorstP99Ratio {
					r.Summary.RoundWorstP99Ratio, r.Summary.RoundWorstP99Cell = v, name
				}
			}
			if ngx.Added.P99 > 0 {
				v := round2(cont.Added.P99 / ngx.Added.P99)
				r.Summary.AddedP99Ratios[name] = v
				addedRatios = append(addedRatios, v)
			}
		}
	}
	r.Summary.MedianP99Ratio = round2(median(ratios))
	r.Summary.MedianAddedP99Ratio = round2(median(addedRatios))
	r.Summary.RoundMedianP99Ratio = round2(median(roundRatios))
	r.Summary.RoundTargetsMet = len(roundRatios) > 0 && r.Summary.Errors == 0 &&
		r.Summary.RoundMedianP99Ratio <= targetMedianRatio && r.Summary.RoundWorstP99Ratio <= targetWorstRatio
	r.Summary.TargetsMet = len(ratios) > 0 && r.Summary.Errors == 0 &&
		r.Summary.MedianP99Ratio <= targetMedianRatio && r.Summary.WorstP99Ratio <= targetWorstRatio
}

// quantilesOf is the nearest-rank p50, p99 and p99.9 of d, in µs.
func quantilesOf(d []time.Duration) quantiles {
	if len(d) == 0 {
		return quantiles{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		i = max(0, min(i, len(s)-1))
		return round1(float64(s[i]) / float64(time.Microsecond))
	}
	return quantiles{q(0.50), q(0.99), q(0.999)}
}

// roundMedian is the median over the rounds of f(a[i], b[i]), the two
// paths' figures of the same round; false when a round has no figure.
func roundMedian(a, b []float64, f func(a, b float64) float64) (float64, bool) {
	if len(a) == 0 || len(a) != len(b) {
		return 0, false
	}
	v := make([]float64, len(a))
	for i := range a {
		if a[i] <= 0 || b[i] <= 0 {
			return 0, false
		}
		v[i] = f(a[i], b[i])
	}
	return median(v), true
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
func round2(v float64) float64 { return math.Round(v*100) / 100 }
func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// writeTable prints the results as markdown, with what was measured and
// on what machine.
func (r *report) writeTable(w io.Writer) {
	s := r.Settings
	fmt.Fprintf(w, "\n## Proxy comparison: direct, continuum serve, nginx (%s)\n\n", r.Started)
	if r.Label != "" {
		fmt.Fprintf(w, "- measured: %s\n", r.Label)
	}
	fmt.Fprintf(w, "- machine: %d CPUs (%s), Linux %s; load average before %s, after %s\n",
		r.Machine.CPUs, r.Machine.CPUModel, r.Machine.Kernel, r.Machine.LoadBefore, r.Machine.LoadAfter)
	fmt.Fprintf(w, "- versions: %s; %s (%d workers); %s; vegeta %s\n", r.Versions.Continuum, r.Versions.Nginx, r.NginxWorkers, r.Versions.Go, r.Versions.Vegeta)
	interleaved := "paths in turn"
	if s.SliceSeconds > 0 && s.SliceSeconds < s.CellSeconds {
		interleaved = fmt.Sprintf("paths taking turns in slices of %gs", s.SliceSeconds)
	}
	fmt.Fprintf(w, "- load: open loop (vegeta) at fixed rates, %d rounds of %gs per cell, %s, keep-alive connections; "+
		"buffered: one chat completion; SSE: %d events, latency to the last byte\n", s.Rounds, s.CellSeconds, interleaved, s.SSEEvents)
	fmt.Fprintf(w, "- added: the proxy's quantile minus the direct path's, same rate and mode, same run; CPU: utime+stime of the proxy's processes per 1,000 requests\n\n")
	fmt.Fprintln(w, "| mode | req/s | direct p50 / p99 / p99.9 (µs) | continuum added p50 / p99 / p99.9 (µs) | nginx added p50 / p99 / p99.9 (µs) | p99 continuum ÷ nginx: pooled, median of rounds | added p99, median of rounds: continuum / nginx (µs) | CPU s per 1k req: continuum / nginx |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, mode := range s.Modes {
		for _, rate := range s.Rates {
			d, c, n := r.cell(mode, rate, pathDirect), r.cell(mode, rate, pathContinuum), r.cell(mode, rate, pathNginx)
			ratio, roundRatio := "n/a", "n/a"
			if v, ok := r.Summary.P99Ratios[mode+"/"+strconv.Itoa(rate)]; ok {
				ratio = fmt.Sprintf("%.2f", v)
			}
			if v, ok := r.Summary.RoundP99Ratios[mode+"/"+strconv.Itoa(rate)]; ok {
				roundRatio = fmt.Sprintf("%.2f", v)
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s, %s | %s / %s | %s / %s |\n", mode, rate,
				triple(d.Latency, false), triple(*c.Added, true), triple(*n.Added, true), ratio, roundRatio,
				signed(c.AddedP99RoundsMedian), signed(n.AddedP99RoundsMedian), cpu(c), cpu(n))
		}
	}
	if slices.Contains(s.Modes, modeSSE) {
		fmt.Fprintln(w, "\n| SSE req/s | direct first byte p50 / p99 (µs) | continuum added p50 / p99 (µs) | nginx added p50 / p99 (µs) |")
		fmt.Fprintln(w, "|---:|---:|---:|---:|")
		for _, rate := range s.Rates {
			d, c, n := r.cell(modeSSE, rate, pathDirect), r.cell(modeSSE, rate, pathContinuum), r.cell(modeSSE, rate, pathNginx)
			fmt.Fprintf(w, "| %d | %.0f / %.0f | %+.0f / %+.0f | %+.0f / %+.0f |\n", rate,
				d.FirstByte.P50, d.FirstByte.P99, c.AddedFirstByte.P50, c.AddedFirstByte.P99, n.AddedFirstByte.P50, n.AddedFirstByte.P99)
		}
	}
	fmt.Fprintln(w, "\n| mode | req/s | per request, continuum: write syscalls, context switches | nginx (master and workers) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, mode := range s.Modes {
		for _, rate := range s.Rates {
			fmt.Fprintf(w, "| %s | %d | %s | %s |\n", mode, rate, perReq(r.cell(mode, rate, pathContinuum)), perReq(r.cell(mode, rate, pathNginx)))
		}
	}
	sm := r.Summary
	verdict := "met"
	if !sm.TargetsMet {
		verdict = "not met"
	}
	fmt.Fprintf(w, "\np99 continuum ÷ nginx, end to end, over the %d cells: median %.2f, worst %.2f (%s); targets ≤ %.1f and ≤ %.1f: %s\n",
		len(sm.P99Ratios), sm.MedianP99Ratio, sm.WorstP99Ratio, sm.WorstP99Cell, targetMedianRatio, targetWorstRatio, verdict)
	roundVerdict := "met"
	if !sm.RoundTargetsMet {
		roundVerdict = "not met"
	}
	fmt.Fprintf(w, "p99 continuum ÷ nginx taken round by round, median of the rounds per cell: median %.2f, worst %.2f (%s) over the cells; targets: %s\n",
		sm.RoundMedianP99Ratio, sm.RoundWorstP99Ratio, sm.RoundWorstP99Cell, roundVerdict)
	fmt.Fprintf(w, "added p99 continuum ÷ nginx: median %.2f over %d cells where nginx adds a positive p99\n", sm.MedianAddedP99Ratio, len(sm.AddedP99Ratios))
	r.writeSteal(w)
	var bad []string
	for _, c := range r.Cells {
		if c.Errors > 0 {
			bad = append(bad, fmt.Sprintf("%s %s %d: %d errors (%s)", c.Path, c.Mode, c.Rate, c.Errors, c.FirstError))
		}
		if c.AchievedRate > 0 && c.AchievedRate < 0.95*float64(c.Rate) {
			bad = append(bad, fmt.Sprintf("%s %s %d: the generator sent only %.0f req/s", c.Path, c.Mode, c.Rate, c.AchievedRate))
		}
	}
	if r.Versions.Baseline != "" {
		r.writeAgainst(w, pathBaseline, fmt.Sprintf("the baseline build (%s)", r.Versions.Baseline))
	}
	if r.hasPath(pathFloor) {
		what := "the floor (a Go proxy with one goroutine per connection and continuum's socket I/O that only relays bytes)"
		if s := r.Settings; s.FloorWorkUS > 0 || s.FloorTouchBytes > 0 {
			what = fmt.Sprintf("the floor with work added on purpose: %g µs of spin and %d bytes of fresh memory written per request", s.FloorWorkUS, s.FloorTouchBytes)
		}
		r.writeAgainst(w, pathFloor, what)
	}
	if len(bad) > 0 {
		fmt.Fprintf(w, "\nWARNING:\n- %s\n", strings.Join(bad, "\n- "))
	}
}

func (r *report) hasPath(path string) bool {
	for _, c := range r.Cells {
		if c.Path == path {
			return true
		}
	}
	return false
}

// writeAgainst compares continuum with another path (the baseline build,
// the floor), cell by cell.
func (r *report) writeAgainst(w io.Writer, path, what string) {
	fmt.Fprintf(w, "\ncontinuum against %s:\n\n", what)
	fmt.Fprintf(w, "| mode | req/s | %[1]s added p50 / p99 / p99.9 (µs) | continuum added p50 / p99 / p99.9 (µs) | p99 continuum ÷ %[1]s | CPU s per 1k req: %[1]s / continuum | write syscalls, context switches per request: %[1]s / continuum |\n", path)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, mode := range r.Settings.Modes {
		for _, rate := range r.Settings.Rates {
			b, c := r.cell(mode, rate, path), r.cell(mode, rate, pathContinuum)
			ratio := "n/a"
			if b.Latency.P99 > 0 {
				ratio = fmt.Sprintf("%.2f", c.Latency.P99/b.Latency.P99)
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s / %s | %s / %s |\n", mode, rate,
				triple(*b.Added, true), triple(*c.Added, true), ratio, cpu(b), cpu(c), perReq(b), perReq(c))
		}
	}
}

func triple(q quantiles, signed bool) string {
	if signed {
		return fmt.Sprintf("%+.0f / %+.0f / %+.0f", q.P50, q.P99, q.P999)
	}
	return fmt.Sprintf("%.0f / %.0f / %.0f", q.P50, q.P99, q.P999)
}

func signed(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%+.0f", *v)
}

func cpu(c *cell) string {
	if c.ProxyCPUSecondsPer1k == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", *c.ProxyCPUSecondsPer1k)
}

func perReq(c *cell) string {
	if c.ProxyPer1k == nil {
		return "n/a"
	}
	p := c.ProxyPer1k
	return fmt.Sprintf("%.2f, %.2f", p.WriteSyscalls/1000, p.ContextSwitches/1000)
}

func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644) //nolint:gosec // a results file meant to be read
}

// stealNoted is the host steal time in one path's slices of one round
// that the table names beside that round's p99.
const stealNoted = 20.0 // ms

// writeSteal names the rounds of a path whose slices met stealNoted or
// more of the host's steal time, with the p99 of each.
func (r *report) writeSteal(w io.Writer) {
	var noted []string
	for _, c := range r.Cells {
		for i, ms := range c.RoundStealMS {
			if ms >= stealNoted && i < len(c.RoundP99) {
				noted = append(noted, fmt.Sprintf("%s %s/%d round %d: %.0f ms (p99 %.0f µs)", c.Path, c.Mode, c.Rate, i+1, ms, c.RoundP99[i]))
			}
		}
	}
	if len(noted) == 0 {
		fmt.Fprintf(w, "host steal time (the hypervisor running something else): no path's slices met %.0f ms of it in a round\n", stealNoted)
		return
	}
	fmt.Fprintf(w, "host steal time (the hypervisor running something else) of %.0f ms or more in a path's slices of a round: %s\n", stealNoted, strings.Join(noted, "; "))
}
