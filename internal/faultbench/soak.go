package faultbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/continuum-router/continuum/internal/fleetsim"
)

// SoakOptions shape a soak.
type SoakOptions struct {
	Binary string
	// Duration is how long the load and the churn run.
	Duration time.Duration
	// Churn is how often the fleet changes.
	Churn time.Duration
	// Rate is the requests sent per second, half streamed.
	Rate float64
	// Sample is how often the router's process figures are read.
	Sample time.Duration
	// Progress, when set, is told of each sample as it is taken.
	Progress func(SoakSample)
}

// SoakSample is the router's process figures at one moment, from its
// /metrics (process_* and go_* families).
type SoakSample struct {
	At         time.Duration `json:"at_ns"`
	RSSBytes   float64       `json:"rss_bytes"`
	Goroutines float64       `json:"goroutines"`
	HeapBytes  float64       `json:"heap_inuse_bytes"`
	OpenFDs    float64       `json:"open_fds"`
	Requests   int           `json:"requests"`
	Failed     int           `json:"failed"`
}

// SoakReport is a soak's samples and what the churn did.
type SoakReport struct {
	Duration time.Duration  `json:"duration_ns"`
	Samples  []SoakSample   `json:"samples"`
	Churn    []string       `json:"churn"`
	Causes   map[string]int `json:"failures_by_cause"`
	// Failures are the first failures' details (at most maxFailureDetails).
	Failures []string         `json:"failures,omitempty"`
	Workers  map[string]int64 `json:"workers"`
}

// Soak runs fleet-sim (etcd; 2 prefill, 4 decode and 2 standby decode
// workers) and serve under a steady load for o.Duration, changing the
// fleet every o.Churn in turn: a decode worker killed and restarted half
// a period later, a standby worker joining, a worker leaving gracefully
// (and rejoining a period later), a prefill worker killed and restarted.
// It samples the router's RSS, goroutines, heap and open files.
func Soak(ctx context.Context, o SoakOptions) (SoakReport, error) {
	rep := SoakReport{Duration: o.Duration, Causes: map[string]int{}}
	if o.Churn <= 0 {
		o.Churn = time.Minute
	}
	if o.Rate <= 0 {
		o.Rate = 20
	}
	if o.Sample <= 0 {
		o.Sample = o.Churn
	}
	e, err := startEnv(ctx, Options{Binary: o.Binary, Prefill: 2, Decode: 4}.WithDefaults(), "--standby", "2")
	if err != nil {
		return rep, err
	}
	defer e.close()
	ws, err := e.simWorkers(ctx)
	if err != nil {
		return rep, err
	}
	var prefill, decode, standby []string
	for _, w := range ws {
		id := strconv.FormatUint(w.InstanceID, 10)
		switch {
		case w.Dead:
			standby = append(standby, id)
		case w.Role == "prefill":
			prefill = append(prefill, id)
		default:
			decode = append(decode, id)
		}
	}
	if len(standby) < 2 || len(decode) < 4 || len(prefill) < 2 {
		return rep, fmt.Errorf("fleet-sim workers: prefill %v, decode %v, standby %v", prefill, decode, standby)
	}

	l := startLoad(ctx, e.router, model, o.Rate, DefaultMaxTokens)
	defer l.stop()
	start := time.Now()
	sample := func() error {
		s, err := e.processSample(ctx)
		if err != nil {
			return err
		}
		s.At = time.Since(start).Round(time.Second)
		for _, r := range l.results() {
			s.Requests++
			if r.failed() {
				s.Failed++
			}
		}
		rep.Samples = append(rep.Samples, s)
		if o.Progress != nil {
			o.Progress(s)
		}
		return nil
	}
	if err := sample(); err != nil {
		return rep, err
	}
	// The churn, one step a period; each step undoes itself later so that
	// the fleet keeps changing without shrinking.
	type pending struct {
		at     time.Time
		id     string
		fault  fleetsim.Fault
		reason string
	}
	var undo []pending
	left := "" // the worker that left gracefully, rejoining next period
	step := 0
	nextChurn, nextSample := start.Add(o.Churn), start.Add(o.Sample)
	end := start.Add(o.Duration)
	do := func(id string, f fleetsim.Fault, why string) error {
		rep.Churn = append(rep.Churn, fmt.Sprintf("%s %s %s (%s)", time.Since(start).Round(time.Second), f, id, why))
		return e.inject(ctx, id, f)
	}
	for now := time.Now(); now.Before(end); now = time.Now() {
		for i := 0; i < len(undo); {
			if now.After(undo[i].at) {
				if err := do(undo[i].id, undo[i].fault, undo[i].reason); err != nil {
					return rep, err
				}
				undo = append(undo[:i], undo[i+1:]...)
				continue
			}
			i++
		}
		if now.After(nextChurn) {
			nextChurn = nextChurn.Add(o.Churn)
			if left != "" {
				if err := do(left, fleetsim.FaultRestart, "rejoins after leaving"); err != nil {
					return rep, err
				}
				left = ""
			}
			switch step % 4 {
			case 0:
				v := decode[(step/4)%len(decode)]
				if err := do(v, fleetsim.FaultKill, "killed"); err != nil {
					return rep, err
				}
				undo = append(undo, pending{now.Add(o.Churn / 2), v, fleetsim.FaultRestart, "restarted"})
			case 1:
				// A standby joins; the other standby worker leaves if it
				// had joined, so that the fleet's size changes.
				j := standby[(step/4)%len(standby)]
				other := standby[(step/4+1)%len(standby)]
				if err := do(j, fleetsim.FaultRestart, "joins"); err != nil {
					return rep, err
				}
				if err := do(other, fleetsim.FaultLeave, "leaves"); err != nil {
					return rep, err
				}
			case 2:
				left = decode[(step/4+1)%len(decode)]
				if err := do(left, fleetsim.FaultLeave, "leaves gracefully"); err != nil {
					return rep, err
				}
			case 3:
				v := prefill[(step/4)%len(prefill)]
				if err := do(v, fleetsim.FaultKill, "killed"); err != nil {
					return rep, err
				}
				undo = append(undo, pending{now.Add(o.Churn / 2), v, fleetsim.FaultRestart, "restarted"})
			}
			step++
		}
		if now.After(nextSample) {
			nextSample = nextSample.Add(o.Sample)
			if err := sample(); err != nil {
				return rep, err
			}
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return rep, err
		}
	}
	outcomes := l.stop()
	if err := sample(); err != nil {
		return rep, err
	}
	for _, r := range outcomes {
		if r.failed() {
			rep.Causes[r.cause]++
			if len(rep.Failures) < maxFailureDetails {
				rep.Failures = append(rep.Failures, r.cause+": "+r.detail)
			}
		}
	}
	return rep, nil
}

// maxFailureDetails bounds the failures a soak report details.
const maxFailureDetails = 20

// processSample reads the router's process figures from its /metrics.
func (e *env) processSample(ctx context.Context) (SoakSample, error) {
	want := map[string]*float64{}
	var s SoakSample
	want["process_resident_memory_bytes"] = &s.RSSBytes
	want["go_goroutines"] = &s.Goroutines
	want["go_memstats_heap_inuse_bytes"] = &s.HeapBytes
	want["process_open_fds"] = &s.OpenFDs
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.router+"/metrics", nil)
	if err != nil {
		return s, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, maxControlAnswer))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := 0
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if p := want[name]; ok && p != nil {
			if v, err := strconv.ParseFloat(val, 64); err == nil {
				*p = v
				found++
			}
		}
	}
	if found < len(want) {
		return s, fmt.Errorf("the router's /metrics lacks some of the process figures (%d of %d found)", found, len(want))
	}
	return s, sc.Err()
}

// WriteSoak writes a soak's samples as a table, then the start-to-end
// change of each figure and the churn's failures.
func WriteSoak(w io.Writer, r SoakReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "AT\tRSS\tHEAP IN USE\tGOROUTINES\tOPEN FDS\tREQUESTS\tFAILED\t")
	for _, s := range r.Samples {
		fmt.Fprintf(tw, "%s\t%.1f MiB\t%.1f MiB\t%.0f\t%.0f\t%d\t%d\t\n", s.At, s.RSSBytes/(1<<20), s.HeapBytes/(1<<20), s.Goroutines, s.OpenFDs, s.Requests, s.Failed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// The first sample is taken before any load; the second, a churn
	// period in, is the warm start to compare the end with.
	fmt.Fprintln(w)
	for i, label := range []string{"start (idle)", "warm (first sample under load)"} {
		if n := len(r.Samples); n >= i+2 {
			a, b := r.Samples[i], r.Samples[n-1]
			fmt.Fprintf(w, "%s → end: RSS %+.1f MiB, heap in use %+.1f MiB, goroutines %+.0f, open fds %+.0f\n",
				label, (b.RSSBytes-a.RSSBytes)/(1<<20), (b.HeapBytes-a.HeapBytes)/(1<<20), b.Goroutines-a.Goroutines, b.OpenFDs-a.OpenFDs)
		}
	}
	fmt.Fprintf(w, "churn: %d changes\n", len(r.Churn))
	for c, n := range r.Causes {
		fmt.Fprintf(w, "failures: %d %s\n", n, c)
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "  %s\n", f)
	}
	return nil
}
