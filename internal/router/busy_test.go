package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

// busyHarness is a router over the frontend emulator with a prefill worker
// 10 and a decode worker 20 of two ranks, whose load the test sets; cfg is
// its configuration, srv the router (for reloads).
type busyHarness struct {
	*harness
	srv *router.Server
	cfg *config.Config
	seq uint64
	mu  sync.Mutex
}

func newBusyHarness(t *testing.T, edit func(*config.Config), opts ...func(*router.Options)) *busyHarness {
	t.Helper()
	h := &busyHarness{harness: &harness{fe: fleetsim.NewFrontend(), reducer: fleet.NewReducer()}}
	feSrv := httptest.NewServer(h.fe)
	t.Cleanup(feSrv.Close)
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "fe", Type: "openai", URL: feSrv.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
	cfg.DisaggregatedServing.Enabled, cfg.Dynamo.Enabled = true, true
	cfg.Dynamo.Shim.Backends = []string{"fe"}
	kv := 0.5
	cfg.Dynamo.Load.BusyThreshold = &config.BusyThreshold{KVBlocks: &kv, Hysteresis: 0.05}
	if edit != nil {
		edit(cfg)
	}
	h.cfg = cfg
	worker(h.reducer, "dynamo", "prefill", "Prefill", 10, 0)
	worker(h.reducer, "dynamo", "decode", "Decode", 20, 2)
	h.fe.SetWorkers(model, []uint64{10}, []uint64{20})
	h.reg = fleet.NewRegistry(nil, nil)
	h.reg.Publish(h.reducer.Build(t0))
	h.store = load.NewStore(time.Minute, nil)
	h.store.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 10}: {DPSize: 1}, {Namespace: "dynamo", InstanceID: 20}: {DPSize: 2}})
	h.metrics = telemetry.NewRouterMetrics(nil)
	o := router.Options{Config: cfg, Registry: h.reg, Store: h.store, Metrics: h.metrics, Gatherer: prometheus.NewRegistry()}
	for _, f := range opts {
		f(&o)
	}
	h.srv = router.New(o)
	h.srv.SetReady(true)
	h.router = serveRouter(t, h.srv.Handler())
	h.setLoad(t, 10, 0, 0)
	h.setLoad(t, 20, 0, 0)
	h.setLoad(t, 20, 1, 0)
	return h
}

// setLoad publishes a (worker, rank)'s blocks in use (kv_used_blocks; the
// decode backlog is 0) and prefill backlog 0, as received now.
func (h *busyHarness) setLoad(t *testing.T, id uint64, rank uint32, used uint64) {
	t.Helper()
	h.mu.Lock()
	h.seq++
	seq := h.seq
	h.mu.Unlock()
	zero := uint64(0)
	l := wire.ActiveLoad{WorkerID: id, DPRank: rank, ActiveDecodeBlocks: &zero, ActivePrefillTokens: &zero, KVUsedBlocks: &used}
	if r := h.store.Apply(load.Sample{Load: l, Namespace: load.NS("dynamo"), PublisherID: id, Sequence: seq, ReceivedAt: time.Now()}); r != "" {
		t.Fatal(r)
	}
}

func (h *busyHarness) busyRefusals(reason string) float64 {
	return promtest.ToFloat64(h.metrics.BusyRefusals.WithLabelValues(reason))
}

func (h *busyHarness) waits(result string) float64 {
	return promtest.ToFloat64(h.metrics.QueueWaits.WithLabelValues(result))
}

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return e.Error.Code
}

// TestAllWorkersBusy: with a busy threshold, a worker over it is passed
// over; when every one is, the request is answered 503 all_workers_busy
// with Retry-After and never reaches the frontend; a reload turning the
// threshold off applies to the next request.
func TestAllWorkersBusy(t *testing.T) {
	t.Parallel()
	h := newBusyHarness(t, nil)
	h.setLoad(t, 20, 0, 600) // over 50 % of 1000 blocks
	resp := h.post(t, chat(false), map[string]string{"x-backend": ""})
	if body := readAll(t, resp); resp.StatusCode != 200 || resp.Header.Get("x-continuum-worker") != "20" {
		t.Fatalf("%d: %s", resp.StatusCode, body)
	}
	if r := h.fe.Requests(); len(r) != 1 || r[0].DPRank == nil || *r[0].DPRank != 1 {
		t.Fatalf("not pinned to the free rank 1: %+v", r)
	}

	h.setLoad(t, 20, 1, 900)
	for _, stream := range []bool{false, true} {
		resp = h.post(t, chat(stream), nil)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, body) != router.CodeAllWorkersBusy || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("every rank busy (stream %v): %d %v %s", stream, resp.StatusCode, resp.Header, body)
		}
	}
	if n := len(h.fe.Requests()); n != 1 || h.busyRefusals(telemetry.BusyNoQueue) != 2 {
		t.Fatalf("%d dispatches, %v refusals", n, h.busyRefusals(telemetry.BusyNoQueue))
	}

	// Reloaded without a threshold: the next request is pinned by cost.
	next := *h.cfg
	next.Dynamo.Load.BusyThreshold = nil
	h.srv.SetConfig(&next)
	if resp := h.post(t, chat(false), nil); resp.StatusCode != 200 {
		t.Fatalf("after the reload: %d %s", resp.StatusCode, readAll(t, resp))
	}
}

// postAsync sends a chat request in the background and returns where its
// status arrives.
func (h *busyHarness) postAsync(ctx context.Context, t *testing.T) <-chan int {
	return h.postBodyAsync(ctx, chat(false))
}

// postBodyAsync is postAsync with a body of the caller's.
func (h *busyHarness) postBodyAsync(ctx context.Context, body string) <-chan int {
	ch := make(chan int, 1)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.router.URL+"/v1/chat/completions", strings.NewReader(body))
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- 0
			return
		}
		_ = resp.Body.Close()
		ch <- resp.StatusCode
	}()
	return ch
}

// TestBusyQueue: with dynamo.load.queue, requests that find every worker
// busy wait (at most size of them, each at most max_wait) and are pinned
// in arrival order once a worker has room; a full queue and an expired
// wait answer 503 all_workers_busy; a client that leaves leaves the queue.
// Depth and waits are counted.
func TestBusyQueue(t *testing.T) {
	t.Parallel()
	h := newBusyHarness(t, func(c *config.Config) {
		c.Dynamo.Load.Queue = &config.LoadQueue{Size: 2, MaxWait: config.Duration(30 * time.Second)}
	})
	h.setLoad(t, 20, 0, 900)
	h.setLoad(t, 20, 1, 900)
	depth := func(n float64) func() bool {
		return func() bool { return promtest.ToFloat64(h.metrics.QueueDepth) == n }
	}
	ctx := context.Background()
	first := h.postAsync(ctx, t)
	testutil.Eventually(t, 10*time.Second, "the first request waits", depth(1))
	second := h.postAsync(ctx, t)
	testutil.Eventually(t, 10*time.Second, "the second request waits", depth(2))
	resp := h.post(t, chat(false), nil)
	if body := readAll(t, resp); resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, body) != router.CodeAllWorkersBusy {
		t.Fatalf("a full queue: %d %s", resp.StatusCode, body)
	}
	if h.busyRefusals(telemetry.BusyQueueFull) != 1 || len(h.fe.Requests()) != 0 {
		t.Fatal("the third request was not refused at once")
	}
	h.setLoad(t, 20, 0, 10) // room on rank 0
	for i, ch := range []<-chan int{first, second} {
		select {
		case code := <-ch:
			if code != 200 {
				t.Fatalf("waiting request %d: %d", i, code)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("waiting request %d was not served", i)
		}
	}
	if h.waits(telemetry.QueueDispatched) != 2 || promtest.ToFloat64(h.metrics.QueueDepth) != 0 {
		t.Fatalf("dispatched %v, depth %v", h.waits(telemetry.QueueDispatched), promtest.ToFloat64(h.metrics.QueueDepth))
	}

	// A client that leaves while waiting leaves the queue.
	h.setLoad(t, 20, 0, 900)
	cctx, cancel := context.WithCancel(ctx)
	gone := h.postAsync(cctx, t)
	testutil.Eventually(t, 10*time.Second, "the request waits", depth(1))
	cancel()
	<-gone
	testutil.Eventually(t, 10*time.Second, "the queue empties", depth(0))
	testutil.Eventually(t, 10*time.Second, "counted as cancelled", func() bool { return h.waits(telemetry.QueueCancelled) == 1 })

	// A wait that reaches max_wait is answered 503 (a reload shortens it).
	next := *h.cfg
	next.Dynamo.Load.Queue = &config.LoadQueue{Size: 2, MaxWait: config.Duration(50 * time.Millisecond)}
	h.srv.SetConfig(&next)
	resp = h.post(t, chat(false), nil)
	if body := readAll(t, resp); resp.StatusCode != http.StatusServiceUnavailable || errorCode(t, body) != router.CodeAllWorkersBusy || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("an expired wait: %d %s", resp.StatusCode, body)
	}
	if h.waits(telemetry.QueueTimeout) != 1 || h.busyRefusals(telemetry.BusyQueueTimeout) != 1 {
		t.Fatal("the expired wait was not counted")
	}
}

// TestFallbackEndsTheDispatch: a pinned dispatch that fails and falls
// back to a unified backend has ended as far as its workers' stall goes:
// however long the fallback takes, the prefill worker it was pinned to,
// which has sent no sample since, is not taken for stalled (and passed
// over for a costlier one) by the requests that follow.
func TestFallbackEndsTheDispatch(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	offset := time.Duration(0)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return time.Now().Add(offset)
	}
	release := make(chan struct{})
	hits := make(chan struct{}, 2)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[]}`))
	}))
	t.Cleanup(plain.Close)
	h := newBusyHarness(t, func(c *config.Config) {
		c.Dynamo.Load.BusyThreshold = nil
		c.DisaggregatedServing.FallbackToUnified = true
		c.Backends = append(c.Backends, config.Backend{Name: "plain", Type: "openai", URL: plain.URL, Role: config.RoleUnified,
			Enabled: true, Timeout: config.Duration(10 * time.Second)})
	}, func(o *router.Options) { o.Now = now })
	// Registered after the harness, so run before its servers shut down:
	// a fallback still held is let go first.
	t.Cleanup(func() { close(release) })
	// A second prefill worker, 11, far costlier than 10 (a backlog of
	// 8,000 prompt tokens against none).
	worker(h.reducer, "dynamo", "prefill", "Prefill", 11, 0)
	h.reg.Publish(h.reducer.Build(t0))
	h.fe.SetWorkers(model, []uint64{10, 11}, []uint64{20})
	h.store.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 10}: {DPSize: 1},
		{Namespace: "dynamo", InstanceID: 11}: {DPSize: 1}, {Namespace: "dynamo", InstanceID: 20}: {DPSize: 2}})
	h.setLoad(t, 10, 0, 0)
	backlog, zero := uint64(8000), uint64(0)
	h.mu.Lock()
	h.seq++
	seq := h.seq
	h.mu.Unlock()
	if r := h.store.Apply(load.Sample{Load: wire.ActiveLoad{WorkerID: 11, DPRank: 0, ActiveDecodeBlocks: &zero, ActivePrefillTokens: &backlog, KVUsedBlocks: &zero},
		Namespace: load.NS("dynamo"), PublisherID: 11, Sequence: seq, ReceivedAt: time.Now()}); r != "" {
		t.Fatal(r)
	}
	// A prompt of several blocks: a dispatch a silent worker may stall on.
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, strings.Repeat("the quick brown fox jumps over the lazy dog ", 20))
	send := func() <-chan int { return h.postBodyAsync(context.Background(), body) }
	h.fe.Status = http.StatusInternalServerError // the first dispatch fails and falls back
	first := send()
	select {
	case <-hits: // its fallback runs, and holds
	case code := <-first:
		t.Fatalf("the first request ended with %d before its fallback", code)
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not fall back")
	}
	mu.Lock()
	offset = pick.StallAfter + time.Second
	mu.Unlock()
	h.fe.Status = 0
	second := send()
	if code := <-second; code != http.StatusOK {
		t.Fatalf("the second request: %d", code)
	}
	reqs := h.fe.Requests()
	if len(reqs) != 2 || reqs[0].Prefill == nil || reqs[1].Prefill == nil || *reqs[0].Prefill != 10 || *reqs[1].Prefill != 10 {
		var got []any
		for _, r := range reqs {
			got = append(got, r.DynamoHeaders)
		}
		t.Fatalf("want both dispatches' prefill on the cheaper worker 10 (the failed one's not taken for stalled): %v", got)
	}
	release <- struct{}{}
	if code := <-first; code != http.StatusOK {
		t.Errorf("the first request: %d", code)
	}
}

// TestQueueLinePerKey: the busy queue keeps a line per model and set of
// candidate replicas. A key confined to namespace dynamo (all busy) waits
// in its line; a key that may use namespace b (free) for the same model is
// served at once, not held behind it until the first one's max_wait.
func TestQueueLinePerKey(t *testing.T) {
	t.Parallel()
	const keyA, keyAll = "sk-a-only", "sk-all"
	var feURL string
	h := newBusyHarness(t, func(c *config.Config) {
		feURL = c.Backends[0].URL
		c.Backends = append(c.Backends, config.Backend{Name: "fe-b", Type: "openai", URL: feURL, Role: config.RoleUnified,
			Enabled: true, Timeout: c.Backends[0].Timeout})
		c.Dynamo.Discovery.Etcd.Namespace = ""
		c.Dynamo.Discovery.Etcd.Namespaces = []string{"dynamo", "b"}
		c.Dynamo.Shim.Backends = nil
		c.Dynamo.Shim.Pools = []config.ShimPool{{Namespace: "dynamo", Backends: []string{"fe"}}, {Namespace: "b", Backends: []string{"fe-b"}}}
		c.Dynamo.Load.Queue = &config.LoadQueue{Size: 8, MaxWait: config.Duration(2 * time.Second)}
		c.APIKeys = []config.APIKey{
			{KeyHash: "sha256:" + sha256hex(keyA), AllowedBackends: []string{"fe"}},
			{KeyHash: "sha256:" + sha256hex(keyAll)},
		}
	})
	// Namespace b: a free prefill/decode pair.
	worker(h.reducer, "b", "prefill", "Prefill", 11, 0)
	worker(h.reducer, "b", "decode", "Decode", 21, 0)
	h.reg.Publish(h.reducer.Build(t0))
	h.fe.SetWorkers(model, []uint64{10, 11}, []uint64{20, 21})
	h.store.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{
		{Namespace: "dynamo", InstanceID: 10}: {DPSize: 1}, {Namespace: "dynamo", InstanceID: 20}: {DPSize: 2},
		{Namespace: "b", InstanceID: 11}: {DPSize: 1}, {Namespace: "b", InstanceID: 21}: {DPSize: 1}})
	zero, used := uint64(0), uint64(0)
	for _, s := range []struct {
		id   uint64
		rank uint32
	}{{11, 0}, {21, 0}} {
		l := wire.ActiveLoad{WorkerID: s.id, DPRank: s.rank, ActiveDecodeBlocks: &zero, ActivePrefillTokens: &zero, KVUsedBlocks: &used}
		if r := h.store.Apply(load.Sample{Load: l, Namespace: load.NS("b"), PublisherID: s.id, Sequence: 1, ReceivedAt: time.Now()}); r != "" {
			t.Fatal(r)
		}
	}
	h.setLoad(t, 20, 0, 900) // namespace dynamo: both decode ranks busy
	h.setLoad(t, 20, 1, 900)

	// Alone, the unrestricted key is served at once by namespace b.
	start := time.Now()
	if resp := h.post(t, chat(false), map[string]string{"Authorization": "Bearer " + keyAll}); resp.StatusCode != 200 {
		t.Fatalf("alone: %d %s", resp.StatusCode, readAll(t, resp))
	}
	t.Logf("alone: served in %v", time.Since(start))

	// The confined key waits at the head of the model's line.
	a := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, h.router.URL+"/v1/chat/completions", strings.NewReader(chat(false)))
		req.Header.Set("Authorization", "Bearer "+keyA)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			a <- 0
			return
		}
		_ = resp.Body.Close()
		a <- resp.StatusCode
	}()
	testutil.Eventually(t, 5*time.Second, "the confined request waits", func() bool { return promtest.ToFloat64(h.metrics.QueueDepth) == 1 })
	start = time.Now()
	resp := h.post(t, chat(false), map[string]string{"Authorization": "Bearer " + keyAll})
	took := time.Since(start)
	t.Logf("behind the confined request: %d in %v; confined: %d", resp.StatusCode, took, <-a)
	if took > time.Second {
		t.Errorf("a request a free worker could serve waited %v behind another key's request (head-of-line)", took)
	}
}
