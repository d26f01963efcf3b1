package router_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/floorproxy"
	"github.com/continuum-router/continuum/internal/gcpolicy"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/testutil"
)

// fastBackend answers at once: a buffered completion, or a short SSE stream.
func fastBackend() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 8 {
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
				w.(http.Flusher).Flush()
			}
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`)
	}))
}

// fastRouter starts the fast backend and a router in front of it, served
// as serve's plain listener serves it, both closed when the benchmark
// ends; it returns their URLs.
func fastRouter(b *testing.B) (backend, routed string) {
	be := fastBackend()
	b.Cleanup(be.Close)
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "fast", Type: "openai", URL: be.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
	srv := router.New(router.Options{Config: cfg})
	srv.SetReady(true)
	return be.URL, testutil.LeanServer(b, srv.Handler())
}

// BenchmarkOverhead sends requests at a fixed arrival rate of 2,000 req/s
// straight to a fast local backend and 2,000 req/s through the router to the
// same backend, for buffered and SSE responses, and reports the p50 and p99
// latency of each and the latency the router adds. "interleaved" sends both
// in the same 2 s window, so both see the same machine load (4,000 req/s in
// all); "alternating" sends them in alternate 0.5 s windows, so each sees
// exactly 2,000 req/s. (Client, router and backend share this machine's
// cores.)
func BenchmarkOverhead(b *testing.B) {
	be, rt := fastRouter(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}}
	const rate, duration = 2000, 2 * time.Second
	// measure sends to each target in turn, rate req/s to each, for
	// duration, and returns each target's latencies.
	measure := func(b *testing.B, targets []string, body string, duration time.Duration) (lat [][]time.Duration, errs int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		lat = make([][]time.Duration, len(targets))
		tick := time.NewTicker(time.Second / time.Duration(rate*len(targets)))
		defer tick.Stop()
		deadline := time.Now().Add(duration)
		n := 0
		for now := range tick.C {
			if now.After(deadline) {
				break
			}
			i := n % len(targets)
			n++
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				resp, err := client.Post(targets[i]+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil || resp.StatusCode != 200 {
					errs++
					return
				}
				lat[i] = append(lat[i], time.Since(start))
			}()
		}
		wg.Wait()
		return lat, errs
	}
	quantiles := func(b *testing.B, lat [][]time.Duration) (p50, p99 []time.Duration) {
		for _, l := range lat {
			slices.Sort(l)
			if len(l) == 0 {
				b.Fatal("no request succeeded")
			}
			p50 = append(p50, l[len(l)/2])
			p99 = append(p99, l[len(l)*99/100])
		}
		return p50, p99
	}
	// interleaved: both targets in one window (4,000 req/s in all);
	// alternating: 0.5 s windows of one target at a time, four of each, so
	// the router sees exactly 2,000 req/s.
	runs := map[string]func(b *testing.B, direct, routed, body string) ([][]time.Duration, int){
		"interleaved": func(b *testing.B, direct, routed, body string) ([][]time.Duration, int) {
			return measure(b, []string{direct, routed}, body, duration)
		},
		"alternating": func(b *testing.B, direct, routed, body string) ([][]time.Duration, int) {
			lat, errs := make([][]time.Duration, 2), 0
			for range 4 {
				for i, target := range []string{direct, routed} {
					l, e := measure(b, []string{target}, body, duration/4)
					lat[i] = append(lat[i], l[0]...)
					errs += e
				}
			}
			return lat, errs
		},
	}
	for _, gc := range []string{"default", "serve"} {
		for _, how := range []string{"interleaved", "alternating"} {
			for _, stream := range []bool{false, true} {
				mode := "buffered"
				if stream {
					mode = "sse"
				}
				body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hello"}]}`, stream)
				b.Run("gc="+gc+"/"+how+"/"+mode, func(b *testing.B) {
					if gc == "serve" {
						// The collector as `continuum serve` sets it, for the
						// whole benchmark process.
						defer gcpolicy.Apply(func(string) (string, bool) { return "", false }, nil)()
					}
					for b.Loop() {
						lat, errs := runs[how](b, be, rt, body)
						if errs > 0 {
							b.Errorf("%d requests failed", errs)
						}
						p50, p99 := quantiles(b, lat)
						b.ReportMetric(float64(p50[0].Microseconds()), "direct-p50-µs")
						b.ReportMetric(float64(p99[0].Microseconds()), "direct-p99-µs")
						b.ReportMetric(float64(p50[1].Microseconds()), "router-p50-µs")
						b.ReportMetric(float64(p99[1].Microseconds()), "router-p99-µs")
						b.ReportMetric(float64((p50[1] - p50[0]).Microseconds()), "added-p50-µs")
						b.ReportMetric(float64((p99[1] - p99[0]).Microseconds()), "added-p99-µs")
					}
				})
			}
		}
	}
}

// BenchmarkSerial sends one request at a time, buffered and SSE, straight
// to the fast backend ("direct", the same-run baseline) and through the
// router, so ns/op and allocs/op show the router's own cost without the
// arrival-rate queueing of BenchmarkOverhead. (allocs/op count the whole
// process: client, router and backend.)
func BenchmarkSerial(b *testing.B) {
	be, rt := fastRouter(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	for _, stream := range []bool{false, true} {
		mode := "buffered"
		if stream {
			mode = "sse"
		}
		body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hello"}]}`, stream)
		for _, target := range []struct{ name, url string }{{"direct", be}, {"router", rt}} {
			b.Run(mode+"/"+target.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					postChat(b, client, target.url, body)
				}
			})
		}
	}
}

// postChat sends body to base's chat completions route with hc and reads
// the answer whole; anything but a 200 fails the benchmark.
func postChat(b *testing.B, hc *http.Client, base, body string) {
	resp, err := hc.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: status %d", base, resp.StatusCode)
	}
}

// evictBuf is what BenchmarkCold walks between requests: four times the
// second-level cache of the machines this runs on (4 MiB a core), so that
// a walk leaves none of a request's code or data in the core's own caches.
var evictBuf = make([]byte, 16<<20)

func evictCaches() {
	for i := 0; i < len(evictBuf); i += 64 {
		evictBuf[i]++
	}
}

// BenchmarkCold is BenchmarkSerial as a router process meets its requests:
// with its caches holding other processes' data (the load generator's,
// the backend's), which a router between two requests on a busy machine
// does. Before each request a walk over evictBuf evicts the core's caches.
// The requests go in turn straight to the fast backend, through the router
// and through the floor (internal/floorproxy: a Go proxy that only relays
// bytes, its sockets read and written as the router's); it reports the
// median of each and what the router and the floor add to the direct
// path's median ("own" is the router's less the floor's: the router's own
// work). Two more paths split that own work in three: the lean server
// with the least relay behind it (rawRelay: "server", what the server
// adds over the floor), the same server with the router's upstream client
// and plain relay behind it (Server.UpstreamRelay: "client", what they add
// over rawRelay), and the rest ("logic": admission, decoding, routing,
// metrics, the request id). Code and data read cold cost about three times what they cost
// warm, so this measures the router's per-request work as the process-level
// comparison with nginx (scripts/bench-proxy.sh) sees it, in seconds
// rather than minutes, with the baseline in the same run.
func BenchmarkCold(b *testing.B) {
	p := startPaths(b)
	be, rt, fl, lean, client := p.direct, p.router, p.floor, p.lean, p.client
	hc := p.hc
	for _, stream := range []bool{false, true} {
		mode := "buffered"
		if stream {
			mode = "sse"
		}
		body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hello"}]}`, stream)
		b.Run(mode, func(b *testing.B) {
			targets := []string{be, rt, fl, lean, client}
			lat := make([][]time.Duration, len(targets))
			for b.Loop() {
				for i, u := range targets {
					evictCaches()
					start := time.Now()
					resp, err := hc.Post(u+"/v1/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					lat[i] = append(lat[i], time.Since(start))
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("%s: status %d", u, resp.StatusCode)
					}
				}
			}
			median := func(d []time.Duration) float64 {
				slices.Sort(d)
				return float64(d[len(d)/2].Nanoseconds()) / 1e3
			}
			direct, router, floor := median(lat[0]), median(lat[1]), median(lat[2])
			leanRelay, clientRelay := median(lat[3]), median(lat[4])
			b.ReportMetric(direct, "direct-µs")
			b.ReportMetric(router-direct, "router-added-µs")
			b.ReportMetric(floor-direct, "floor-added-µs")
			b.ReportMetric(router-floor, "own-µs")
			// The router's own work in three parts: the lean server (with
			// the least relay behind it), the upstream client and plain
			// relay, and the router's logic around them.
			b.ReportMetric(leanRelay-floor, "server-µs")
			b.ReportMetric(clientRelay-leanRelay, "client-µs")
			b.ReportMetric(router-clientRelay, "logic-µs")
		})
	}
}

// paths are the URLs a request can take to the fast backend: straight
// ("direct"), through the router, through the floor (internal/floorproxy),
// through the lean server with the least relay behind it ("lean"), and
// through the lean server with the router's upstream client and plain
// relay ("client"); hc is a client to send them with.
type paths struct {
	direct, router, floor, lean, client string
	hc                                  *http.Client
}

func startPaths(b *testing.B) paths {
	be, rt := fastRouter(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = floorproxy.Serve(ln, strings.TrimPrefix(be, "http://"), floorproxy.Options{}) }()
	b.Cleanup(func() { _ = ln.Close() })
	// The stages between the floor and the router: the lean server with
	// the least relay behind it, then with the router's upstream client.
	relay := &rawRelay{addr: strings.TrimPrefix(be, "http://")}
	b.Cleanup(relay.close)
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "fast", Type: "openai", URL: be, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
	tr := &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	return paths{direct: be, router: rt, floor: "http://" + ln.Addr().String(), lean: testutil.LeanServer(b, relay),
		client: testutil.LeanServer(b, router.New(router.Options{Config: cfg}).UpstreamRelay()), hc: &http.Client{Transport: tr}}
}

// BenchmarkPath sends requests one at a time along one path (see paths),
// buffered and SSE: the work of a request on each path, client, proxy and
// backend in one process. scripts/bench-instr.sh runs it under cachegrind
// (one thread, no collector) to count the instructions and instruction
// cache misses of a request on each path, a figure that does not move with
// the machine's load as times do.
func BenchmarkPath(b *testing.B) { benchPaths(b, false) }

// BenchmarkPathCold is BenchmarkPath with the caches evicted before each
// request (evictCaches), as a serving process meets its requests on a busy
// machine. Timed, it is BenchmarkCold one path at a time; under
// cachegrind (scripts/bench-instr.sh) it counts the lines of code and data
// a request brings in from memory when nothing of it is cached: the
// footprint of each path, which is what a request costs a process whose
// caches the machine's other work keeps taking (its misses less those of
// the walk itself, which are known: one per 64 bytes of evictBuf).
func BenchmarkPathCold(b *testing.B) { benchPaths(b, true) }

func benchPaths(b *testing.B, cold bool) {
	p := startPaths(b)
	for _, stream := range []bool{false, true} {
		mode := "buffered"
		if stream {
			mode = "sse"
		}
		body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hello"}]}`, stream)
		for _, t := range []struct{ name, url string }{{"direct", p.direct}, {"floor", p.floor}, {"lean", p.lean}, {"client", p.client}, {"router", p.router}} {
			b.Run(mode+"/"+t.name, func(b *testing.B) {
				for b.Loop() {
					if cold {
						evictCaches()
					}
					postChat(b, p.hc, t.url, body)
				}
			})
		}
	}
}

// rawRelay is the least a handler can do to relay a completion: the body
// sent over a kept-alive connection of its own under a head it writes
// itself, the answer's head read for its status, framing and Content-Type
// only, and the body copied (a chunked one flushed read by read, as the
// router relays a stream). Behind the lean server it shows what the server
// itself costs.
type rawRelay struct {
	addr string
	mu   sync.Mutex
	idle []*rawConn
}

type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

var rawBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (p *rawRelay) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		_ = c.c.Close()
	}
	p.idle = nil
}

func (p *rawRelay) get() (*rawConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: c, br: bufio.NewReaderSize(c, 4<<10)}, nil
}

func (p *rawRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c, err := p.get()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	head := make([]byte, 0, 256+len(body))
	head = append(head, "POST "...)
	head = append(head, r.URL.Path...)
	head = append(head, " HTTP/1.1\r\nHost: "...)
	head = append(head, p.addr...)
	head = append(head, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	head = strconv.AppendInt(head, int64(len(body)), 10)
	head = append(head, "\r\n\r\n"...)
	head = append(head, body...)
	status, length, chunked, ctype, err := 0, -1, false, "", error(nil)
	if _, err = c.c.Write(head); err == nil {
		status, length, chunked, ctype, err = readRawHead(c.br)
	}
	if err != nil {
		_ = c.c.Close()
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	h := w.Header()
	if ctype != "" {
		h["Content-Type"] = []string{ctype}
	}
	src := io.LimitReader(c.br, int64(length))
	if chunked {
		src = httputil.NewChunkedReader(c.br)
	} else {
		h["Content-Length"] = []string{strconv.Itoa(length)}
	}
	w.WriteHeader(status)
	bp := rawBufs.Get().(*[]byte)
	defer rawBufs.Put(bp)
	for {
		n, err := src.Read(*bp)
		if n > 0 {
			_, _ = w.Write((*bp)[:n])
			if chunked && err == nil {
				w.(http.Flusher).Flush()
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			_ = c.c.Close()
			return
		}
	}
	if chunked { // the trailer section, empty here, ends the answer
		for {
			line, err := c.br.ReadSlice('\n')
			if err != nil {
				_ = c.c.Close()
				return
			}
			if string(line) == "\r\n" {
				break
			}
		}
	}
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// readRawHead reads an answer's head for its status, Content-Length,
// whether it is chunked and its Content-Type.
func readRawHead(br *bufio.Reader) (status, length int, chunked bool, ctype string, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, 0, false, "", err
	}
	if len(line) < 12 {
		return 0, 0, false, "", fmt.Errorf("bad status line %q", line)
	}
	if status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, 0, false, "", err
	}
	length = -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, 0, false, "", err
		}
		if len(line) <= 2 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, 0, false, "", fmt.Errorf("bad header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, 0, false, "", err
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Content-Type")):
			ctype = string(value)
		}
	}
	if !chunked && length < 0 {
		return 0, 0, false, "", fmt.Errorf("an answer with no length")
	}
	return status, length, chunked, ctype, nil
}

// BenchmarkSerialShim is BenchmarkSerial through the Dynamo shim: a
// prefill and a decode worker behind the frontend emulator. "direct" sends
// the pin headers itself; "router" has the router pick, reserve, pin and
// relay.
func BenchmarkSerialShim(b *testing.B) {
	fe := fleetsim.NewFrontend()
	feSrv := httptest.NewServer(fe)
	defer feSrv.Close()
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "fe", Type: "openai", URL: feSrv.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
	cfg.DisaggregatedServing.Enabled = true
	cfg.Dynamo.Enabled = true
	cfg.Dynamo.Shim.Backends = []string{"fe"}
	red := fleet.NewReducer()
	worker(red, "dynamo", "prefill", "Prefill", 10, 0)
	worker(red, "dynamo", "decode", "Decode", 20, 0)
	fe.SetWorkers(model, []uint64{10}, []uint64{20})
	reg := fleet.NewRegistry(nil, nil)
	reg.Publish(red.Build(t0))
	srv := router.New(router.Options{Config: cfg, Registry: reg, Store: load.NewStore(3*time.Second, nil), DiscoveryConnected: func() bool { return true }})
	srv.SetReady(true)
	rt := testutil.LeanServer(b, srv.Handler())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	for _, stream := range []bool{false, true} {
		mode := "buffered"
		if stream {
			mode = "sse"
		}
		body := chat(stream)
		for _, target := range []struct {
			name, url string
			pins      bool
		}{{"direct", feSrv.URL, true}, {"router", rt, false}} {
			b.Run(mode+"/"+target.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					req, _ := http.NewRequest(http.MethodPost, target.url+"/v1/chat/completions", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					if target.pins {
						req.Header.Set(shim.HeaderWorkerInstanceID, "20")
						req.Header.Set(shim.HeaderPrefillInstanceID, "10")
					}
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		}
	}
}
