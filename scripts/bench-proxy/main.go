// Command bench-proxy compares continuum serve, as a reverse proxy in front
// of one plain OpenAI backend, with nginx configured as an operator would put
// it there, and with no proxy at all, process against process over real
// sockets:
//
//	bench-proxy run -continuum PATH -nginx PATH [-rates 500,1000,2000] [-duration 6s] [-slice 1s] [-rounds 3] [-json FILE] [-baseline PATH] [-floor [-floor-work 20us] [-floor-touch 8192]]
//	bench-proxy backend [-addr 127.0.0.1:0] [-tokens 8] [-gap 0s]
//	bench-proxy floor [-addr 127.0.0.1:0] -upstream HOST:PORT [-work 0s] [-touch 0]
//	perf script -F comm,pid,ip,sym | bench-proxy split [-hz 1999] [-top 25]
//
// run starts the fast backend (this program's backend command, a process of
// its own), continuum serve and nginx in front of it, then drives each of
// the three paths with vegeta, an open-loop load generator, at the same
// fixed arrival rates, buffered chat completions and SSE streams (latency is
// to the last byte of the answer; time to first byte too). Each round visits
// every cell (mode × rate × path) once, the paths of a cell taking turns in
// slices of a second (-slice) in an order that rotates, so that changes in
// the machine's load fall on them alike; the cells' samples are pooled over
// the rounds. It reports the
// latency each proxy adds to the direct path (p50, p99, p99.9, proxy minus
// direct at the same rate and mode, same run), the ratio of continuum's p99
// to nginx's (over the pooled samples, and round by round with the median
// over the rounds, which one round's stall of the machine does not move),
// and the CPU seconds per 1,000 requests of each proxy's
// processes (utime + stime of /proc/PID/stat around each cell), as a
// markdown table on stdout and as JSON. With -baseline, a second continuum
// build runs as a fourth path, so that a change to the router is measured
// against the build before it in the same run. With -floor, the floor (this
// program's floor command: the least a Go proxy does per request,
// internal/floorproxy) runs as one more path, so that continuum's own work
// shows apart from what any Go proxy pays on the machine. -floor-work and
// -floor-touch add work of a known size to the floor's requests (CPU spun,
// fresh memory written), to see how a proxy's figures, its p99 above all,
// move with its own work per request. split reads the call stacks perf
// sampled over a run and tells where each proxy's CPU went
// (scripts/bench-perf.sh runs the two together).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/continuum-router/continuum/internal/floorproxy"
)

func main() {
	if len(os.Args) < 2 {
		printUsage()
	}
	var err error
	switch os.Args[1] {
	case "backend":
		fs := flag.NewFlagSet("backend", flag.ExitOnError)
		addr := fs.String("addr", "127.0.0.1:0", "listen address")
		tokens := fs.Int("tokens", 8, "content tokens per answer (SSE: one event each)")
		gap := fs.Duration("gap", 0, "pause between SSE events")
		_ = fs.Parse(os.Args[2:])
		err = serveBackend(*addr, *tokens, *gap)
	case "floor":
		fs := flag.NewFlagSet("floor", flag.ExitOnError)
		addr := fs.String("addr", "127.0.0.1:0", "listen address")
		upstream := fs.String("upstream", "", "the backend's HOST:PORT")
		work := fs.Duration("work", 0, "CPU time to spend per request (a spin), to see how the figures move with a proxy's own work")
		touch := fs.Int("touch", 0, "bytes of a 32 MiB arena to write per request before the spin, moving on through it as allocation moves through a heap")
		_ = fs.Parse(os.Args[2:])
		if *upstream == "" {
			err = fmt.Errorf("floor: -upstream is required")
			break
		}
		err = serveFloor(*addr, *upstream, floorWork(*work, *touch))
	case "split":
		fs := flag.NewFlagSet("split", flag.ExitOnError)
		hz := fs.Float64("hz", 1999, "the sampling frequency perf record was given (-F)")
		top := fs.Int("top", 25, "continuum functions to list")
		_ = fs.Parse(os.Args[2:])
		err = runSplit(os.Stdin, os.Stdout, *hz, *top)
	case "run":
		var o options
		if o, err = parseRun(os.Args[2:]); err == nil {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			err = run(ctx, o, os.Stdout)
			stop()
		}
	default:
		printUsage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-proxy:", err)
		os.Exit(1)
	}
}

func printUsage() {
	fmt.Fprintln(os.Stderr, "usage: bench-proxy run -continuum PATH -nginx PATH [flags] | bench-proxy backend [flags] | bench-proxy floor -upstream HOST:PORT [flags] | bench-proxy split [-hz N] < PERF_SCRIPT_OUTPUT")
	os.Exit(2)
}

// options are run's flags.
type options struct {
	continuum, nginx string
	rates            []int
	modes            []string
	duration, warmup time.Duration
	// slice is how long a path runs before the next path of its cell takes
	// its turn (0: the whole cell).
	slice    time.Duration
	rounds   int
	tokens   int
	gap      time.Duration
	json     string
	label    string
	baseline string
	floor    bool
	// floorWork and floorTouch are work added to the floor per request
	// (floor -work, -touch).
	floorWork  time.Duration
	floorTouch int
}

func parseRun(args []string) (options, error) {
	o := options{}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.StringVar(&o.continuum, "continuum", "", "continuum binary")
	fs.StringVar(&o.nginx, "nginx", "nginx", "nginx binary")
	rates := fs.String("rates", "500,1000,2000", "arrival rates, requests per second")
	modes := fs.String("modes", "buffered,sse", "answer modes")
	fs.DurationVar(&o.duration, "duration", 6*time.Second, "length of one cell (one path at one rate and mode) in one round")
	fs.DurationVar(&o.slice, "slice", time.Second, "the paths of a cell take turns in slices this long (0: each path runs its whole cell at once)")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured traffic to each path and mode before the first round")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds over every cell; a cell's samples are pooled over them")
	fs.IntVar(&o.tokens, "tokens", 8, "content tokens per answer (SSE: one event each)")
	fs.DurationVar(&o.gap, "gap", 0, "pause between the backend's SSE events")
	fs.StringVar(&o.json, "json", "", "write the results as JSON to this file")
	fs.StringVar(&o.label, "label", "", "what is measured (a commit), printed with the results")
	fs.StringVar(&o.baseline, "baseline", "", "another continuum binary (the build before a change), measured as a fourth path")
	fs.BoolVar(&o.floor, "floor", false, "measure the floor too: a Go proxy that does nothing per request but relay bytes")
	fs.DurationVar(&o.floorWork, "floor-work", 0, "with -floor: CPU time the floor spends per request on purpose (a spin)")
	fs.IntVar(&o.floorTouch, "floor-touch", 0, "with -floor: bytes of fresh memory the floor writes per request on purpose")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.continuum == "" {
		return o, fmt.Errorf("-continuum is required")
	}
	for f := range strings.SplitSeq(*rates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r <= 0 {
			return o, fmt.Errorf("-rates: %q is not a rate", f)
		}
		o.rates = append(o.rates, r)
	}
	for m := range strings.SplitSeq(*modes, ",") {
		if m != modeBuffered && m != modeSSE {
			return o, fmt.Errorf("-modes: %q is not buffered or sse", m)
		}
		o.modes = append(o.modes, m)
	}
	if o.rounds < 1 || o.duration <= 0 {
		return o, fmt.Errorf("-rounds and -duration must be positive")
	}
	if o.slice < 0 {
		return o, fmt.Errorf("-slice must not be negative")
	}
	return o, nil
}

const (
	modeBuffered = "buffered"
	modeSSE      = "sse"

	pathDirect    = "direct"
	pathContinuum = "continuum"
	pathNginx     = "nginx"
	pathBaseline  = "baseline"
	pathFloor     = "floor"
)

func requestBody(mode string) string {
	return `{"model":"bench","stream":` + strconv.FormatBool(mode == modeSSE) +
		`,"max_tokens":16,"messages":[{"role":"user","content":"Say something short."}]}`
}

// target is one path under load.
type target struct {
	name   string
	url    string
	proc   *proc // the proxy's processes; nil for the direct path
	client *http.Client
}

func run(ctx context.Context, o options, out io.Writer) (err error) {
	// The generator shares the machine with what it measures: a collector
	// that runs less often takes less from the measured processes and
	// pauses the generator itself less.
	debug.SetGCPercent(400)
	dir, err := os.MkdirTemp("", "bench-proxy-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	var procs []*proc
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop()
		}
	}()
	be, beAddr, err := startBackend(dir, o.tokens, o.gap)
	if err != nil {
		return err
	}
	procs = append(procs, be)
	cont, contAddr, err := startContinuum(dir, pathContinuum, o.continuum, beAddr)
	if err != nil {
		return err
	}
	procs = append(procs, cont)
	ngx, ngxAddr, err := startNginx(dir, o.nginx, beAddr)
	if err != nil {
		return err
	}
	procs = append(procs, ngx)

	targets := []*target{
		{name: pathDirect, url: "http://" + beAddr + "/v1/chat/completions"},
		{name: pathContinuum, url: "http://" + contAddr + "/v1/chat/completions", proc: cont},
		{name: pathNginx, url: "http://" + ngxAddr + "/v1/chat/completions", proc: ngx},
	}
	if o.baseline != "" {
		base, baseAddr, err := startContinuum(dir, pathBaseline, o.baseline, beAddr)
		if err != nil {
			return err
		}
		procs = append(procs, base)
		targets = append(targets, &target{name: pathBaseline, url: "http://" + baseAddr + "/v1/chat/completions", proc: base})
	}
	if o.floor {
		fl, flAddr, err := startFloor(dir, beAddr, o.floorWork, o.floorTouch)
		if err != nil {
			return err
		}
		procs = append(procs, fl)
		targets = append(targets, &target{name: pathFloor, url: "http://" + flAddr + "/v1/chat/completions", proc: fl})
	}
	for _, t := range targets {
		t.client = newClient()
		if err := waitServing(ctx, t.client, t.url, requestBody(modeBuffered)); err != nil {
			if t.proc != nil {
				err = fmt.Errorf("%w\n%s log:\n%s", err, t.proc.name, t.proc.tail())
			}
			return err
		}
	}
	if err := ngx.findChildren(); err != nil {
		return err
	}

	b := newBackend(o.tokens, o.gap)
	expect := map[string]int{modeBuffered: len(b.completion), modeSSE: b.streamed()}
	rep := newReport(o, targets)
	rep.Started = time.Now().UTC().Format(time.RFC3339)
	rep.Machine = machine{CPUs: runtime.NumCPU(), CPUModel: cpuModel(), Kernel: readTrim("/proc/sys/kernel/osrelease"), LoadBefore: loadAvg()}
	rep.Versions = versions{Continuum: commandOutput(o.continuum, "version"), Nginx: commandOutput(o.nginx, "-v"), Go: runtime.Version(), Vegeta: vegetaVersion()}
	if o.baseline != "" {
		rep.Versions.Baseline = commandOutput(o.baseline, "version")
	}
	rep.NginxWorkers = len(ngx.pids) - 1

	if o.warmup > 0 {
		for _, mode := range o.modes {
			for _, t := range targets {
				if _, err := attack(ctx, t, mode, o.rates[0], o.warmup, expect[mode]); err != nil {
					return err
				}
			}
		}
	}
	tick := float64(clockTicks())
	watched := []*proc{be}
	for _, t := range targets {
		if t.proc != nil {
			watched = append(watched, t.proc)
		}
	}
	m := meter{watched: watched, tick: tick}
	for round := range o.rounds {
		for ri, rate := range o.rates {
			for _, mode := range o.modes {
				order := make([]*target, len(targets))
				for k := range targets {
					order[k] = targets[(k+round+ri)%len(targets)]
				}
				load := loadAvg()
				results, err := runCell(ctx, o, rep, &m, order, mode, rate, expect[mode])
				if err != nil {
					return err
				}
				for k, t := range order {
					rep.cell(mode, rate, t.name).add(results[k], load)
					fmt.Fprintf(os.Stderr, "round %d/%d  %-8s %5d req/s  %-9s  %6d ok  %d errors  load %s\n",
						round+1, o.rounds, mode, rate, t.name, len(results[k].latency), results[k].errors, load)
				}
			}
		}
	}
	rep.Machine.LoadAfter = loadAvg()
	rep.finish()
	rep.writeTable(out)
	if o.json != "" {
		if err := rep.writeJSON(o.json); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nJSON: %s\n", o.json)
	}
	return nil
}

// meter counts the CPU the watched processes use (the backend first).
type meter struct {
	watched []*proc
	tick    float64
}

// runCell drives each path of one cell (a mode at a rate) for o.duration
// in one round: in slices of about o.slice, the paths taking turns in the
// order given, so that a change in the machine's load during the cell (a
// neighbour's burst lasting seconds) falls on every path alike rather than
// on whichever ran then. A slice of 0, or one no shorter than the cell,
// drives each path for the whole cell in turn. The results are in order's
// order; the processes' CPU goes to the cell of the path that ran.
func runCell(ctx context.Context, o options, rep *report, m *meter, order []*target, mode string, rate, want int) ([]attackResult, error) {
	n, length := 1, o.duration
	if o.slice > 0 && o.slice < o.duration {
		n = int((o.duration + o.slice - 1) / o.slice)
		length = o.duration / time.Duration(n)
	}
	results := make([]attackResult, len(order))
	for range n {
		for k, t := range order {
			before, err := usageOf(m.watched)
			if err != nil {
				return nil, err
			}
			stealBefore := hostSteal()
			res, err := attack(ctx, t, mode, rate, length, want)
			if err != nil {
				return nil, err
			}
			res.stealMS = float64(hostSteal()-stealBefore) / m.tick * 1000
			after, err := usageOf(m.watched)
			if err != nil {
				return nil, err
			}
			results[k].merge(res)
			c := rep.cell(mode, rate, t.name)
			c.BackendCPUSeconds += float64(after[0].ticks-before[0].ticks) / m.tick
			for i, p := range m.watched {
				if p == t.proc {
					c.addProxy(after[i].sub(before[i]), m.tick)
				}
			}
		}
	}
	return results, nil
}

func usageOf(ps []*proc) ([]usage, error) {
	out := make([]usage, len(ps))
	for i, p := range ps {
		u, err := p.usage()
		if err != nil {
			return nil, err
		}
		out[i] = u
	}
	return out, nil
}

// newClient is the generator's client of one path: keep-alive HTTP/1.1
// connections, as many as the open loop needs, bodies read to their end.
func newClient() *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 10000,
		DisableCompression:  true,
		IdleConnTimeout:     5 * time.Minute,
	}
	return &http.Client{Transport: timedTransport{tr}, Timeout: 30 * time.Second}
}

// Headers the timed transport adds to each response it reads to the end.
const (
	firstByteHeader = "X-Bench-First-Byte-Ns"
	bytesHeader     = "X-Bench-Body-Bytes"
)

// timedTransport notes, in the response's headers, when the body's first
// byte arrived (from the start of the round trip) and how many bytes it
// held, once the body has been read to its end; vegeta reads every body to
// its end before it takes the latency.
type timedTransport struct{ next http.RoundTripper }

func (t timedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &timedBody{ReadCloser: resp.Body, start: start, header: resp.Header}
	return resp, nil
}

type timedBody struct {
	io.ReadCloser
	start  time.Time
	header http.Header
	first  time.Duration
	n      int
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.n == 0 {
		b.first = time.Since(b.start)
	}
	b.n += n
	if err == io.EOF {
		b.header[firstByteHeader] = []string{strconv.FormatInt(int64(b.first), 10)}
		b.header[bytesHeader] = []string{strconv.Itoa(b.n)}
	}
	return n, err
}

// attackResult is one path's samples at one rate and mode.
type attackResult struct {
	latency   []time.Duration // to the last byte
	firstByte []time.Duration
	errors    int
	firstErr  string
	span      time.Duration // first request sent to one interval past the last
	// stealMS is the host's steal time during the path's slices (see
	// hostSteal), ms over all vCPUs.
	stealMS float64
}

// attack drives t at rate req/s for d and collects every answer; an answer
// that is not a 200 with the whole body (want bytes) is an error.
func attack(ctx context.Context, t *target, mode string, rate int, d time.Duration, want int) (attackResult, error) {
	a := vegeta.NewAttacker(vegeta.Client(t.client), vegeta.MaxBody(0), vegeta.Redirects(vegeta.NoFollow))
	tgt := vegeta.NewStaticTargeter(vegeta.Target{
		Method: http.MethodPost,
		URL:    t.url,
		Body:   []byte(requestBody(mode)),
		Header: http.Header{"Content-Type": {"application/json"}},
	})
	res := attackResult{latency: make([]time.Duration, 0, int(float64(rate)*d.Seconds())+16)}
	var first, last time.Time
	stop := context.AfterFunc(ctx, func() { a.Stop() })
	defer stop()
	for r := range a.Attack(tgt, vegeta.ConstantPacer{Freq: rate, Per: time.Second}, d, t.name) {
		if first.IsZero() || r.Timestamp.Before(first) {
			first = r.Timestamp
		}
		if r.Timestamp.After(last) {
			last = r.Timestamp
		}
		got, _ := strconv.Atoi(r.Headers.Get(bytesHeader))
		switch {
		case r.Error != "" || r.Code != http.StatusOK:
			res.fail(fmt.Sprintf("status %d %s", r.Code, r.Error))
		case got != want:
			res.fail(fmt.Sprintf("read %d bytes of %d", got, want))
		default:
			fb, _ := strconv.ParseInt(r.Headers.Get(firstByteHeader), 10, 64)
			res.latency = append(res.latency, r.Latency)
			res.firstByte = append(res.firstByte, time.Duration(fb))
		}
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	// n requests paced 1/rate apart span n intervals, the last one's
	// included: so a slice's spans add up to the time its cell ran.
	res.span = last.Sub(first) + time.Second/time.Duration(rate)
	return res, nil
}

// merge adds the answers of another slice of the same cell.
func (r *attackResult) merge(o attackResult) {
	r.latency = append(r.latency, o.latency...)
	r.firstByte = append(r.firstByte, o.firstByte...)
	if r.errors == 0 {
		r.firstErr = o.firstErr
	}
	r.errors += o.errors
	r.span += o.span
	r.stealMS += o.stealMS
}

func (r *attackResult) fail(why string) {
	if r.errors == 0 {
		r.firstErr = why
	}
	r.errors++
}

// vegetaVersion is the version of vegeta built into this program.
func vegetaVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tsenart/vegeta/v12" {
				return d.Version
			}
		}
	}
	return "?"
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// serveFloor listens on addr, prints "listening HOST:PORT" on stdout once
// it accepts connections, and runs the floor in front of upstream until the
// process is stopped.
func serveFloor(addr, upstream string, work func()) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "listening %s\n", ln.Addr())
	return floorproxy.Serve(ln, upstream, floorproxy.Options{
		Logf:       func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
		PerRequest: work,
	})
}

// floorWork is the work floor's -work and -touch add per request, nil for
// none: touch bytes of a 32 MiB arena (a byte per cache line), going on
// through it from request to request as allocation goes through a heap,
// so that the lines are seldom in a cache; then spin until d has passed
// since the work began.
func floorWork(d time.Duration, touch int) func() {
	if d <= 0 && touch <= 0 {
		return nil
	}
	const arenaSize = 32 << 20
	var arena []byte
	if touch > 0 {
		arena = make([]byte, arenaSize)
	}
	var mu sync.Mutex
	off := 0
	return func() {
		start := time.Now()
		if touch > 0 {
			mu.Lock()
			for i := 0; i < touch; i += 64 {
				arena[(off+i)%arenaSize]++
			}
			off = (off + touch) % arenaSize
			mu.Unlock()
		}
		for time.Since(start) < d {
		}
	}
}
