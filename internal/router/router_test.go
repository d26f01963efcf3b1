package router_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

const model = "Qwen/Qwen3-32B"

var t0 = time.Unix(1_800_000_000, 0)

// worker writes the records of a worker of model into a reducer.
func worker(r *fleet.Reducer, ns, component, workerType string, id uint64, dp int) {
	modelWorker(r, ns, component, workerType, model, id, dp)
}

// modelWorker writes the records of a worker of name into a reducer.
func modelWorker(r *fleet.Reducer, ns, component, workerType, name string, id uint64, dp int) {
	r.Put(fmt.Sprintf("v1/instances/%s/%s/generate/%x", ns, component, id), fmt.Appendf(nil,
		`{"component":%q,"endpoint":"generate","instance_id":%d,"transport":{"tcp":"10.0.0.4:31000"}}`, component, id), t0)
	dpField := ""
	if dp > 0 {
		dpField = fmt.Sprintf(`,"data_parallel_size":%d`, dp)
	}
	r.Put(fmt.Sprintf("v1/mdc/%s/%s/generate/%x", ns, component, id), fmt.Appendf(nil,
		`{"component":%q,"endpoint":"generate","instance_id":%d,"card_json":{"display_name":%q,"worker_type":%q,"kv_cache_block_size":16,"runtime_config":{"total_kv_blocks":1000,"max_num_batched_tokens":8192%s}}}`,
		component, id, name, workerType, dpField), t0)
}

// plainBackend is an OpenAI server that is not a Dynamo frontend.
func plainBackend(t *testing.T) (*httptest.Server, *[]http.Header) {
	var seen []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		seen = append(seen, r.Header.Clone())
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"plain","choices":[{"message":{"content":"from the plain backend"}}]}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

type harness struct {
	fe      *fleetsim.Frontend
	router  *servedRouter
	reg     *fleet.Registry
	reducer *fleet.Reducer
	metrics *telemetry.RouterMetrics
	store   *load.Store
	plain   *[]http.Header
}

func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr
}

// newHarness runs a router over one frontend emulator ("fe") and one plain
// backend ("plain"), with a prefill worker 10 and a data-parallel decode
// worker 20 (ranks 0-1).
func newHarness(t *testing.T, edit func(*config.Config)) *harness {
	t.Helper()
	return newHarnessWith(t, edit, nil)
}

// newHarnessWith is newHarness with the router's options edited too.
func newHarnessWith(t *testing.T, edit func(*config.Config), opts func(*router.Options)) *harness {
	t.Helper()
	h := &harness{fe: fleetsim.NewFrontend(), reducer: fleet.NewReducer()}
	feSrv := httptest.NewServer(h.fe)
	t.Cleanup(feSrv.Close)
	plain, seen := plainBackend(t)
	h.plain = seen
	cfg := config.Default()
	cfg.Backends = []config.Backend{
		{Name: "fe", Type: "openai", URL: feSrv.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second), APIKey: "sk-upstream"},
		{Name: "plain", Type: "openai", URL: plain.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)},
	}
	cfg.DisaggregatedServing.Enabled = true
	cfg.Dynamo.Enabled = true
	cfg.Dynamo.Shim.Backends = []string{"fe"}
	cfg.Admin.Token = "admin-secret"
	if edit != nil {
		edit(cfg)
	}
	worker(h.reducer, "dynamo", "prefill", "Prefill", 10, 0)
	worker(h.reducer, "dynamo", "decode", "Decode", 20, 2)
	h.fe.SetWorkers(model, []uint64{10}, []uint64{20})
	h.reg = fleet.NewRegistry(nil, nil)
	h.reg.Publish(h.reducer.Build(t0))
	store := load.NewStore(3*time.Second, nil)
	h.store = store
	h.metrics = telemetry.NewRouterMetrics(nil)
	promReg := prometheus.NewRegistry()
	o := router.Options{Config: cfg, Registry: h.reg, Store: store, Metrics: h.metrics, Gatherer: promReg,
		DiscoveryConnected: func() bool { return true }}
	if opts != nil {
		opts(&o)
	}
	srv := router.New(o)
	srv.SetReady(true)
	h.router = serveRouter(t, srv.Handler())
	return h
}

// servedRouter is a router on a loopback port served as serve's plain
// listener serves it: the lean server (a completion request from its
// bytes), net/http behind it for what it hands off.
type servedRouter struct {
	URL    string
	client *http.Client
}

func serveRouter(t testing.TB, h http.Handler) *servedRouter {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &servedRouter{URL: testutil.LeanServer(t, h), client: &http.Client{Transport: tr}}
}

// Client is a client of the router's own (its idle connections closed
// when the test ends).
func (s *servedRouter) Client() *http.Client { return s.client }

func (h *harness) post(t *testing.T, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.router.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func chat(stream bool) string {
	return fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"hello there, how are you today?"}]}`, model, stream)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPinsDecimalHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	// The client tries to choose its workers under every pin name.
	resp := h.post(t, chat(false), map[string]string{"x-dynamo-worker-instance-id": "999", "X-Dynamo-Prefill-Instance-Id": "1", "x-dynamo-dp-rank": "7",
		"x-worker-instance-id": "999", "x-prefill-instance-id": "1", "x-dp-rank": "7", "x-data-parallel-rank": "7", "x-prefill-dp-rank": "3"})
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	reqs := h.fe.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Worker == nil || *r.Worker != 20 || r.Prefill == nil || *r.Prefill != 10 {
		t.Fatalf("pins %+v", r)
	}
	if r.DPRank == nil || *r.DPRank > 1 {
		t.Errorf("the card declares data_parallel_size: the rank header must be sent: %v", r.DynamoHeaders)
	}
	if r.PrefillDPRank != nil {
		t.Errorf("prefill rank sent without a declared dp size: %v", r.DynamoHeaders)
	}
	if got := r.DynamoHeaders.Get("x-dynamo-worker-instance-id"); got != "20" {
		t.Errorf("worker header %q, want decimal 20", got)
	}
	// The legacy names carry the router's pins (the default), never the
	// client's.
	for k, want := range map[string]string{"x-worker-instance-id": "20", "x-prefill-instance-id": "10", "x-dp-rank": r.DynamoHeaders.Get("x-dynamo-dp-rank"),
		"x-data-parallel-rank": "", "x-prefill-dp-rank": ""} {
		if got := r.DynamoHeaders.Values(k); (want == "" && len(got) != 0) || (want != "" && (len(got) != 1 || got[0] != want)) {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if r.Authorization != "Bearer sk-upstream" {
		t.Errorf("upstream api key not injected: %q", r.Authorization)
	}
	// The routing path is always told; the identities of the backend and
	// workers only to a client that asks (x-backend).
	for k := range resp.Header {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-dynamo-") || strings.HasPrefix(lk, "x-continuum-") && lk != "x-continuum-routing-path" {
			t.Errorf("header %s returned to a client that did not ask", k)
		}
	}
	if got := resp.Header.Get("x-continuum-routing-path"); got != shim.PathDisaggregated {
		t.Errorf("x-continuum-routing-path = %q, want %s", got, shim.PathDisaggregated)
	}
	if promtest.ToFloat64(h.metrics.DisaggRequests.WithLabelValues(shim.PathDisaggregated)) != 1 ||
		promtest.ToFloat64(h.metrics.Selections.WithLabelValues("decode", "round_robin_stale")) != 1 {
		t.Errorf("metrics not counted")
	}
}

func TestRevealHeadersOnRequest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	resp := h.post(t, chat(false), map[string]string{"x-backend": ""})
	readAll(t, resp)
	if resp.Header.Get("x-continuum-worker") != "20" || resp.Header.Get("x-continuum-prefill-worker") != "10" ||
		resp.Header.Get("x-continuum-backend") != "fe" || resp.Header.Get("x-continuum-routing-path") != "disaggregated" {
		t.Fatalf("headers %v", resp.Header)
	}
}

func TestStreamRelayed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.fe.Tokens = 5
	resp := h.post(t, chat(true), nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %v", resp.StatusCode, resp.Header)
	}
	sc := bufio.NewScanner(resp.Body)
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	if events != 6 {
		t.Fatalf("%d events, want 5 chunks and [DONE]", events)
	}
}

// TestPrefillRefusal503: the frontend wants a prefill id the fleet view did
// not have: 503 disaggregated_prefill_decode_unavailable, no retry, for a
// buffered chat request. A chat stream's refused head is a failed
// dispatch like any other: counted in phase decode and fallen back from
// (the fleet simulator refuses with a 500).
func TestPrefillRefusal503(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := newHarness(t, func(c *config.Config) { c.DisaggregatedServing.FallbackToUnified = true })
			h.reducer.Delete("v1/instances/dynamo/prefill/generate/a") // the router no longer sees the prefill worker
			h.reg.Publish(h.reducer.Build(t0))
			resp := h.post(t, chat(stream), nil)
			body := readAll(t, resp)
			if n := len(h.fe.Requests()); n != 1 {
				t.Errorf("%d attempts: a direct-mode refusal is not retried", n)
			}
			if stream {
				if resp.StatusCode != http.StatusOK || len(*h.plain) != 1 {
					t.Fatalf("status %d, %d fallbacks: %s", resp.StatusCode, len(*h.plain), body)
				}
				if promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("decode")) != 1 ||
					promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("orchestration")) != 0 {
					t.Error("a refused chat stream was not counted as a decode failure")
				}
				return
			}
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "disaggregated_prefill_decode_unavailable") {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if len(*h.plain) != 0 {
				t.Error("a direct-mode refusal fell back to unified")
			}
			if promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("orchestration")) != 1 {
				t.Error("orchestration error not counted")
			}
		})
	}
}

// TestWrappedPrefillRefusalIsDecodeFailure: the refusal quoted inside a
// generic 500 ("Failed to generate completions: ...", as the frontend words
// any engine error) is a failed dispatch: counted in phase decode, then
// the unified fallback when it is on, else 502 disaggregated_decode_failed;
// the frontend is up, so its breaker never opens.
func TestWrappedPrefillRefusalIsDecodeFailure(t *testing.T) {
	t.Parallel()
	for _, fallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", fallback), func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int32
			fe := failingFrontend(t, http.StatusInternalServerError,
				`{"message":"Failed to generate completions: `+fleetsim.PrefillRequiredError+`","type":"Internal Server Error","code":500}`, &hits)
			h := newHarness(t, func(c *config.Config) {
				c.Backends[0].URL = fe.URL
				c.DisaggregatedServing.FallbackToUnified = fallback
			})
			// However many there are, the frontend stays up for the
			// router (its breaker closed): each request reaches it.
			const n = 8
			for i := range n {
				resp := h.post(t, chat(false), nil)
				body := readAll(t, resp)
				switch {
				case fallback && (resp.StatusCode != 200 || len(*h.plain) != i+1):
					t.Fatalf("request %d: status %d, %d fallbacks: %s", i, resp.StatusCode, len(*h.plain), body)
				case !fallback && (resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "disaggregated_decode_failed")):
					t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
				}
			}
			if hits.Load() != n {
				t.Errorf("%d of %d requests reached the frontend", hits.Load(), n)
			}
			if promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("decode")) != n ||
				promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("orchestration")) != 0 {
				t.Error("not counted as a decode failure")
			}
		})
	}
}

// TestRefusalInsideStream: a 200 stream that carries the refusal is relayed.
func TestRefusalInsideStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.fe.RejectInStream = true
	h.reducer.Delete("v1/instances/dynamo/prefill/generate/a")
	h.reg.Publish(h.reducer.Build(t0))
	resp := h.post(t, chat(true), nil)
	body := readAll(t, resp)
	if resp.StatusCode != 200 || !strings.Contains(body, "Prefill worker ID required") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

// TestDecodeFailure: other shim failures fall back to unified when
// configured, else answer disaggregated_decode_failed.
func TestDecodeFailure(t *testing.T) {
	t.Parallel()
	for _, fallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", fallback), func(t *testing.T) {
			h := newHarness(t, func(c *config.Config) { c.DisaggregatedServing.FallbackToUnified = fallback })
			h.fe.SetWorkers(model, []uint64{10}, []uint64{99}) // the frontend does not know worker 20
			resp := h.post(t, chat(false), nil)
			body := readAll(t, resp)
			if fallback {
				if resp.StatusCode != 200 || !strings.Contains(body, "plain backend") {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				if hdr := (*h.plain)[0]; hdr.Get("x-dynamo-worker-instance-id") != "" {
					t.Error("the unified fallback carried pin headers")
				}
				if promtest.ToFloat64(h.metrics.DisaggRequests.WithLabelValues(shim.PathFallback)) != 1 {
					t.Error("fallback path not counted")
				}
			} else if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "disaggregated_decode_failed") {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("decode")) != 1 {
				t.Error("decode error not counted")
			}
		})
	}
}

// TestDecodeFailureWithNowhereToFallBack: with fallback_to_unified on and
// the shim's frontend the model's only backend, a failed dispatch has
// nothing to fall back to: it is answered 502 disaggregated_decode_failed
// (not 503 no_backend_available), counted under its own routing path,
// with what the frontend said of a 4xx (the request's fault) in the
// message, and of a 5xx only for a client that sent x-backend.
func TestDecodeFailureWithNowhereToFallBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status        int
		reveal, shown bool
	}{{400, false, true}, {500, false, false}, {500, true, true}} {
		t.Run(fmt.Sprintf("%d reveal=%v", tc.status, tc.reveal), func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int32
			const said = "max_tokens (100000) exceeds the context length 32768"
			fe := failingFrontend(t, tc.status, `{"error":{"message":"`+said+`","type":"BadRequestError","code":400}}`, &hits)
			h := newHarness(t, func(c *config.Config) {
				c.Backends = c.Backends[:1]
				c.Backends[0].URL = fe.URL
				c.DisaggregatedServing.FallbackToUnified = true
			})
			hdr := map[string]string{}
			if tc.reveal {
				hdr["x-backend"] = ""
			}
			resp := h.post(t, chat(false), hdr)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "disaggregated_decode_failed") || strings.Contains(body, said) != tc.shown {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if promtest.ToFloat64(h.metrics.DisaggRequests.WithLabelValues(shim.PathDisaggregated)) != 1 ||
				promtest.ToFloat64(h.metrics.DisaggRequests.WithLabelValues(shim.PathFallback)) != 0 ||
				promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("decode")) != 1 {
				t.Error("counted as a fallback, or not as a decode failure")
			}
		})
	}
}

// TestStreamingFallbackRules: before a stream starts, 429 falls back;
// other 4xx pass through.
func TestStreamingFallbackRules(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status   int
		fallback bool
	}{{429, true}, {408, true}, {503, true}, {400, false}, {404, false}} {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			h := newHarness(t, func(c *config.Config) { c.DisaggregatedServing.FallbackToUnified = true })
			h.fe.Status = tt.status
			resp := h.post(t, chat(true), nil)
			body := readAll(t, resp)
			if tt.fallback && (resp.StatusCode != 200 || !strings.Contains(body, "plain backend")) {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if !tt.fallback && resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d passed through: %s", resp.StatusCode, tt.status, body)
			}
		})
	}
}

// TestRetrySecondReplicaSamePin: a replica that cannot be reached is
// skipped for the next one, with the same pin.
func TestRetrySecondReplicaSamePin(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) {
		c.Backends = append(c.Backends, config.Backend{Name: "dead", Type: "openai", URL: closedURL(t), Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(5 * time.Second)})
		c.Dynamo.Shim.Backends = []string{"dead", "fe"}
	})
	for range 4 {
		resp := h.post(t, chat(false), nil)
		if body := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	if n := len(h.fe.Requests()); n != 4 {
		t.Fatalf("the frontend got %d requests, want 4", n)
	}
	for _, r := range h.fe.Requests() {
		if r.Worker == nil || *r.Worker != 20 || r.Prefill == nil || *r.Prefill != 10 {
			t.Fatalf("pin changed on retry: %+v", r)
		}
	}
	// One selection per request: the fleet has one worker per role, so
	// the pin alone cannot tell a retry that picked again from one that
	// kept its pin; the count can.
	if picks := promtest.ToFloat64(h.metrics.Selections.WithLabelValues("decode", "round_robin_stale")); picks != 4 {
		t.Errorf("%v decode selections for 4 requests: a retry picked again", picks)
	}
}

// TestIngressRetryPicksAgain: the Messages and Responses ingresses pick
// their workers again for every replica they try, where chat keeps its
// pin: a request whose first replica cannot be reached is counted as two
// selections, and the replica that answers gets a pin.
func TestIngressRetryPicksAgain(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		path, body string
		fresh      bool
	}{
		{"/v1/chat/completions", chat(false), false},
		{"/v1/messages", messagesBody(false), true},
		{"/v1/responses", responsesBody(false), true},
	} {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *config.Config) {
				c.Backends = append(c.Backends, config.Backend{Name: "dead", Type: "openai", URL: closedURL(t), Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(5 * time.Second)})
				c.Dynamo.Shim.Backends = []string{"dead", "fe"}
			})
			const requests = 4
			for range requests {
				if resp, body := h.postTo(t, tt.path, tt.body, nil); resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
			}
			if n := len(h.fe.Requests()); n != requests {
				t.Fatalf("the frontend got %d requests, want %d", n, requests)
			}
			for _, r := range h.fe.Requests() {
				if r.Worker == nil || *r.Worker != 20 || r.Prefill == nil || *r.Prefill != 10 {
					t.Fatalf("unpinned request: %+v", r)
				}
			}
			// The replicas are tried from a rotating offset, so some of
			// the requests went to the dead replica first.
			picks := promtest.ToFloat64(h.metrics.Selections.WithLabelValues("decode", "round_robin_stale"))
			if tt.fresh && picks <= requests {
				t.Errorf("%v decode selections for %d requests: a retry on another replica did not pick again", picks, requests)
			}
			if !tt.fresh && picks != requests {
				t.Errorf("%v decode selections for %d requests: chat picked again on retry", picks, requests)
			}
		})
	}
}

// canaryHarness is the harness with a second namespace, canary, whose shim
// pool is the returned frontend emulator (fe-canary).
func canaryHarness(t *testing.T) (*harness, *fleetsim.Frontend) {
	t.Helper()
	canary := fleetsim.NewFrontend()
	canarySrv := httptest.NewServer(canary)
	t.Cleanup(canarySrv.Close)
	h := newHarness(t, func(c *config.Config) {
		c.Backends = append(c.Backends, config.Backend{Name: "fe-canary", Type: "openai", URL: canarySrv.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(5 * time.Second)})
		c.Dynamo.Discovery.Etcd.Namespaces = []string{"dynamo", "canary"}
		c.Dynamo.Shim.Backends = nil
		c.Dynamo.Shim.Pools = []config.ShimPool{{Namespace: "dynamo", Backends: []string{"fe"}}, {Namespace: "canary", Backends: []string{"fe-canary"}}}
	})
	return h, canary
}

func TestNamespacePools(t *testing.T) {
	t.Parallel()
	h, canary := canaryHarness(t)
	// Only canary has workers for another model.
	worker(h.reducer, "canary", "backend", "Aggregated", 30, 0)
	h.reg.Publish(h.reducer.Build(t0))
	canary.SetWorkers(model, nil, []uint64{30})
	seen := map[string]int{}
	for range 6 {
		resp := h.post(t, chat(false), map[string]string{"x-backend": ""})
		if body := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		seen[resp.Header.Get("x-continuum-backend")+"/"+resp.Header.Get("x-continuum-worker")]++
	}
	for k := range seen {
		if k != "fe/20" && k != "fe-canary/30" {
			t.Fatalf("a pin crossed namespaces: %v", seen)
		}
	}
	if len(seen) != 2 {
		t.Errorf("both namespaces should serve (stale round robin): %v", seen)
	}
}

// TestNamespacesShareInstanceIDs: a worker is its namespace and instance
// id. Canary runs a worker 20 of another model beside the harness's decode
// worker 20 in namespace dynamo: a request pinned to canary's counts as a
// selection of canary's worker only, and a sample of dynamo's worker 20
// (from a publisher of namespace dynamo) is not canary's load.
func TestNamespacesShareInstanceIDs(t *testing.T) {
	t.Parallel()
	h, canary := canaryHarness(t)
	modelWorker(h.reducer, "canary", "backend", "Aggregated", "canary-model", 20, 0)
	h.reg.Publish(h.reducer.Build(t0))
	canary.SetWorkers("canary-model", nil, []uint64{20})
	h.store.SetLiveAndRetain(load.LiveOf(h.reg.Snapshot()))
	blocks := uint64(7)
	if r := h.store.Apply(load.Sample{Load: wire.ActiveLoad{WorkerID: 20, ActiveDecodeBlocks: &blocks}, Namespace: load.NS("dynamo"), PublisherID: 1, Sequence: 1, ReceivedAt: time.Now()}); r != "" {
		t.Fatal(r)
	}
	resp := h.post(t, `{"model":"canary-model","messages":[{"role":"user","content":"hi"}]}`, map[string]string{"x-backend": ""})
	if body := readAll(t, resp); resp.StatusCode != 200 || resp.Header.Get("x-continuum-backend") != "fe-canary" {
		t.Fatalf("status %d via %q: %s", resp.StatusCode, resp.Header.Get("x-continuum-backend"), body)
	}
	req, _ := http.NewRequest(http.MethodGet, h.router.URL+"/admin/dynamo/load", nil)
	req.Header.Set("Authorization", "Bearer admin-secret")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var l admin.LoadResponse
	if err := json.Unmarshal([]byte(readAll(t, r)), &l); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, s := range l.Samples {
		if s.WorkerID != "20" || s.DPRank != 0 {
			continue
		}
		seen++
		switch s.Namespace {
		case "canary":
			if s.Selections != 1 || s.State != "none" || s.ActiveDecodeBlocks != nil {
				t.Errorf("canary's worker 20: %+v, want one selection and no sample", s)
			}
		case "dynamo":
			if s.Selections != 0 || s.ActiveDecodeBlocks == nil || *s.ActiveDecodeBlocks != 7 {
				t.Errorf("dynamo's worker 20: %+v, want no selection and its sample", s)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("worker 20 rank 0 listed %d times: %+v", seen, l.Samples)
	}
}

func TestNoWorkerPlainRouting(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	resp := h.post(t, `{"model":"other-model","messages":[{"role":"user","content":"hi"}]}`, nil)
	if body := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(body, "plain backend") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

func TestTokenDataStripped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	resp := h.post(t, fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"nvext":{"token_data":[1,2,3],"cache_salt":"s"}}`, model), nil)
	readAll(t, resp)
	r := h.fe.Requests()[0]
	if r.HadTokenData || !bytes.Contains(r.Body, []byte(`"cache_salt":"s"`)) {
		t.Fatalf("body %s", r.Body)
	}
}

// TestWorkerEchoOnlyWithXBackend: a client may ask the frontend to name
// the workers in its answer (nvext.extra_fields "worker_id") only with
// x-backend, as it may see them in the response headers only then; the
// frontend's query-only annotation never reaches it.
func TestWorkerEchoOnlyWithXBackend(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],`+
		`"nvext":{"extra_fields":["worker_id","timing"],"annotations":["query_instance_id:1","keep"],"prefill_dp_rank":3}}`, model)
	readAll(t, h.post(t, body, nil))
	readAll(t, h.post(t, body, map[string]string{"x-backend": ""}))
	reqs := h.fe.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests reached the frontend", len(reqs))
	}
	for i, want := range []string{`"extra_fields":["timing"]`, `"extra_fields":["worker_id","timing"]`} {
		b := reqs[i].Body
		if !bytes.Contains(b, []byte(want)) || !bytes.Contains(b, []byte(`"annotations":["keep"]`)) || bytes.Contains(b, []byte("prefill_dp_rank")) {
			t.Errorf("request %d (want %s): %s", i, want, b)
		}
	}
}

func TestAPIKeys(t *testing.T) {
	t.Parallel()
	const key = "sk-client-1"
	h := newHarness(t, func(c *config.Config) {
		c.APIKeys = []config.APIKey{
			{KeyHash: "sha256:" + sha256hex(key), AllowedBackends: []string{"plain"}, RateLimit: &config.RateLimit{RequestsPerSecond: 0.001, Burst: 2}},
		}
	})
	if resp := h.post(t, chat(false), nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no key: %d", resp.StatusCode)
	}
	auth := map[string]string{"Authorization": "Bearer " + key}
	// The key may not use the shim replica: the request goes the plain way.
	resp := h.post(t, chat(false), auth)
	if body := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(body, "plain backend") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	// The scheme's name is matched in any case: the second request counts
	// against the key's limit like the first.
	h.post(t, chat(false), map[string]string{"Authorization": "bearer " + key})
	resp = h.post(t, chat(false), auth)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("rate limit: %d %v", resp.StatusCode, resp.Header)
	}
	if (*h.plain)[0].Get("Authorization") != "" {
		t.Error("the client's key was forwarded upstream")
	}
}

func TestAdminWorkers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	get := func(token string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, h.router.URL+"/admin/dynamo/workers", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}
	if resp := get("wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", resp.StatusCode)
	}
	resp := get("admin-secret")
	body := readAll(t, resp)
	var v admin.WorkersResponse
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if !v.Enabled || !v.Connected || v.Source != "etcd" || v.Namespace != "dynamo" || len(v.Workers) != 2 || v.Generation == 0 || !v.Signals.Load {
		t.Fatalf("%s", body)
	}
	for _, leak := range []string{"10.0.0.4", "tcp", "card_json", "transport"} {
		if strings.Contains(body, leak) {
			t.Errorf("admin response leaks %q", leak)
		}
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal([]byte(body), &raw)
	for _, k := range []string{"enabled", "connected", "source", "signals", "namespace", "namespaces", "generation", "workers", "load_publishers", "kv_event_publishers", "subscriptions"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("field %s missing", k)
		}
	}
}

func TestAdminLoadAndProblems(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.store.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 20}: {DPStartRank: 0, DPSize: 2}})
	blocks := uint64(7)
	if r := h.store.Apply(load.Sample{Load: wire.ActiveLoad{WorkerID: 20, DPRank: 1, ActiveDecodeBlocks: &blocks}, Namespace: load.NS("dynamo"), PublisherID: 1, Sequence: 1, ReceivedAt: time.Now()}); r != "" {
		t.Fatal(r)
	}
	get := func(path string) string {
		req, _ := http.NewRequest(http.MethodGet, h.router.URL+path, nil)
		req.Header.Set("Authorization", "Bearer admin-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		return readAll(t, resp)
	}
	if resp := h.post(t, chat(false), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d", resp.StatusCode)
	}
	var l admin.LoadResponse
	if err := json.Unmarshal([]byte(get("/admin/dynamo/load")), &l); err != nil {
		t.Fatal(err)
	}
	if l.MaxStalenessMs != 3000 || len(l.Samples) != 3 { // prefill 10, decode 20 ranks 0 and 1
		t.Fatalf("%+v", l)
	}
	var picks uint64
	for _, s := range l.Samples {
		picks += s.Selections
		switch {
		case s.WorkerID == "20" && s.DPRank == 1:
			if s.ActiveDecodeBlocks == nil || *s.ActiveDecodeBlocks != 7 || s.State != "fresh" || s.ActivePrefillTokens != nil {
				t.Fatalf("%+v", s)
			}
		case s.State != "none" || s.ActiveDecodeBlocks != nil:
			t.Fatalf("no sample yet: %+v", s)
		}
	}
	if picks != 2 { // one prefill and one decode pick
		t.Fatalf("selections: %+v", l.Samples)
	}
	var p admin.ProblemsResponse
	if err := json.Unmarshal([]byte(get("/admin/dynamo/problems")), &p); err != nil {
		t.Fatal(err)
	}
	if p.Generation == 0 || p.Problems == nil {
		t.Fatalf("%+v", p)
	}
}

func TestModelsAndReady(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) { c.Dynamo.Shim.ModelMap = map[string]string{"qwen3": model} })
	resp, err := http.Get(h.router.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if !strings.Contains(body, `"qwen3"`) || !strings.Contains(body, model) {
		t.Fatalf("%s", body)
	}
	// One model by its id (slashes and all), as the list shows it; an id
	// the list does not show is model_not_found.
	for _, id := range []string{model, "qwen3"} {
		resp, err = http.Get(h.router.URL + "/v1/models/" + id)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`{"id":%q,"object":"model","created":0,"owned_by":"continuum"}`+"\n", id)
		if body := readAll(t, resp); resp.StatusCode != 200 || body != want {
			t.Fatalf("GET /v1/models/%s: %d %s, want %s", id, resp.StatusCode, body, want)
		}
	}
	resp, err = http.Get(h.router.URL + "/v1/models/org/no-such-model")
	if err != nil {
		t.Fatal(err)
	}
	var e openAIError
	if body := readAll(t, resp); resp.StatusCode != 404 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "model_not_found" {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Get(h.router.URL + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("ready %d", resp.StatusCode)
	}
}

// TestClientDisconnectCancelsUpstream: a client that goes away cancels the
// upstream request.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	cancelled := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return
		}
		_, _ = io.ReadAll(r.Body) // the server notices a closed connection once the body is read
		close(started)
		<-r.Context().Done()
		close(cancelled)
	}))
	defer slow.Close()
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "slow", Type: "openai", URL: slow.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(time.Minute)}}
	metrics := telemetry.NewRouterMetrics(nil)
	srv := router.New(router.Options{Config: cfg, Metrics: metrics})
	rt := httptest.NewServer(srv.Handler())
	defer rt.Close()
	ctx, cancel := contextWithCancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rt.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
	go func() {
		<-started
		cancel()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("the request completed")
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
	waitClientGone(t, metrics, "/v1/chat/completions")
}

// TestBreakerOpensAndProbes: consecutive failures open a backend's breaker;
// after the open period one probe goes through and a success closes it.
func TestBreakerOpensAndProbes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	fail := true
	calls := 0
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		calls++
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, `{}`)
	}))
	defer be.Close()
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "b", Type: "openai", URL: be.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(time.Minute)}}
	clock := time.Unix(0, 0)
	srv := router.New(router.Options{Config: cfg, Now: func() time.Time { return clock }})
	rt := httptest.NewServer(srv.Handler())
	defer rt.Close()
	post := func() int {
		resp, err := http.Post(rt.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 5 {
		post()
	}
	if got := post(); got != http.StatusServiceUnavailable {
		t.Fatalf("breaker open: status %d, want 503", got)
	}
	mu.Lock()
	if calls != 5 {
		t.Errorf("%d upstream calls, want 5", calls)
	}
	fail = false
	mu.Unlock()
	clock = clock.Add(11 * time.Second) // half-open: one probe
	if got := post(); got != 200 {
		t.Fatalf("probe: %d", got)
	}
	if got := post(); got != 200 {
		t.Fatalf("closed again: %d", got)
	}
}

// TestClientGoneLeavesTheBreaker: a request whose client left before the
// backend answered is no evidence about the backend: it neither resets
// the count of consecutive failures nor counts as one.
func TestClientGoneLeavesTheBreaker(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return
		}
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "hang") {
			started <- struct{}{}
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer be.Close()
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "b", Type: "openai", URL: be.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(time.Minute)}}
	metrics := telemetry.NewRouterMetrics(nil)
	rt := httptest.NewServer(router.New(router.Options{Config: cfg, Metrics: metrics}).Handler())
	defer rt.Close()
	post := func(content string) int {
		resp, err := http.Post(rt.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"`+content+`"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for range 4 {
		post("fail")
	}
	ctx, cancel := contextWithCancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rt.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hang"}]}`))
	go func() {
		<-started
		cancel()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatal("the hanging request completed")
	}
	waitClientGone(t, metrics, "/v1/chat/completions")
	post("fail") // the fifth failure in a row
	if got := post("fail"); got != http.StatusServiceUnavailable {
		t.Fatalf("after five failures and a client gone between them: status %d, want 503 (breaker open)", got)
	}
}

// TestBufferedShim4xxIsFailure: for a buffered request any non-2xx shim
// answer is a shim failure (fallback), unlike a stream's other 4xx.
func TestBufferedShim4xxIsFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) { c.DisaggregatedServing.FallbackToUnified = true })
	h.fe.Status = http.StatusNotFound
	resp := h.post(t, chat(false), map[string]string{"x-backend": ""})
	body := readAll(t, resp)
	if resp.StatusCode != 200 || !strings.Contains(body, "plain backend") || resp.Header.Get("x-continuum-routing-path") != "fallback" {
		t.Fatalf("status %d %v: %s", resp.StatusCode, resp.Header, body)
	}
}

// TestNoRetryAfterTheRequestWasSent: a replica that took the request and
// then dropped the connection is not retried elsewhere (the request may
// have run) when the card declares no migration_limit; only a failure to
// connect is.
func TestNoRetryAfterTheRequestWasSent(t *testing.T) {
	t.Parallel()
	dropper := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return
		}
		_, _ = io.ReadAll(r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	defer dropper.Close()
	h := newHarness(t, func(c *config.Config) {
		c.Backends = append(c.Backends, config.Backend{Name: "dropper", Type: "openai", URL: dropper.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(5 * time.Second)})
		c.Dynamo.Shim.Backends = []string{"dropper", "fe"}
	})
	ok, failed := 0, 0
	for range 6 {
		resp := h.post(t, chat(false), nil)
		body := readAll(t, resp)
		switch {
		case resp.StatusCode == 200:
			ok++
		case resp.StatusCode == http.StatusBadGateway && strings.Contains(body, "disaggregated_decode_failed"):
			failed++
		default:
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	// Replicas rotate: requests that reached the dropper first failed and
	// were not sent again to the frontend.
	if failed == 0 || len(h.fe.Requests()) != ok {
		t.Fatalf("%d ok, %d failed, %d reached the frontend", ok, failed, len(h.fe.Requests()))
	}
}

func TestClientCredentialsNotForwarded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	readAll(t, h.post(t, `{"model":"other","messages":[]}`, map[string]string{"X-Api-Key": "client-secret", "Authorization": "Bearer client-secret",
		"Proxy-Authorization": "Basic Y2xpZW50OnNlY3JldA=="}))
	if got := (*h.plain)[0]; got.Get("X-Api-Key") != "" || got.Get("Authorization") != "" || got.Get("Proxy-Authorization") != "" {
		t.Fatalf("credentials forwarded: %v", got)
	}
	req, _ := http.NewRequest(http.MethodGet, h.router.URL+"/admin/dynamo/workers", nil)
	req.Header.Set("Authorization", "admin-secret") // no "Bearer "
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("admin token without Bearer: %d", resp.StatusCode)
	}
}

// TestAdminListener: with admin.bind_address the admin API moves to its own
// handler, which also serves /metrics (continuum top needs both on one
// address); the main handler no longer answers /admin.
func TestAdminListener(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Admin.Token = "admin-secret"
	cfg.Admin.BindAddress = "127.0.0.1:0"
	reg := fleet.NewRegistry(nil, nil)
	srv := router.New(router.Options{Config: cfg, Registry: reg, Store: load.NewStore(time.Second, nil), Gatherer: prometheus.NewRegistry()})
	adminSrv := httptest.NewServer(srv.AdminHandler())
	defer adminSrv.Close()
	mainSrv := httptest.NewServer(srv.Handler())
	defer mainSrv.Close()
	status := func(base, path string) int {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer admin-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/metrics", "/admin/dynamo/workers", "/admin/dynamo/load", "/admin/dynamo/problems"} {
		if c := status(adminSrv.URL, path); c != http.StatusOK {
			t.Errorf("admin listener %s: %d", path, c)
		}
	}
	if c := status(mainSrv.URL, "/admin/dynamo/workers"); c != http.StatusNotFound {
		t.Errorf("main listener still serves the admin API: %d", c)
	}
}

// TestBodyLimit: a body over server.max_body_bytes is refused with 413, whether the
// client declared its length or sent it chunked; a body of exactly the
// limit, or of a declared length, goes through whole.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	prefix := `{"model":"other","messages":[],"pad":"`
	body := func(size int) []byte {
		b := bytes.Repeat([]byte("x"), size)
		copy(b, prefix)
		b[len(b)-2], b[len(b)-1] = '"', '}'
		return b
	}
	send := func(b []byte, chunked bool) int {
		t.Helper()
		var r io.Reader = bytes.NewReader(b)
		if chunked {
			r = io.MultiReader(r) // no length known: sent chunked
		}
		req, _ := http.NewRequest(http.MethodPost, h.router.URL+"/v1/chat/completions", r)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, chunked := range []bool{false, true} {
		if got := send(body(config.DefaultMaxBodyBytes+1), chunked); got != http.StatusRequestEntityTooLarge {
			t.Errorf("chunked=%v: a body over the limit: %d", chunked, got)
		}
		if got := send(body(config.DefaultMaxBodyBytes), chunked); got != http.StatusOK {
			t.Errorf("chunked=%v: a body at the limit: %d", chunked, got)
		}
	}
	if got := send([]byte(`{"model":"other","messages":[]}`), false); got != http.StatusOK || len(*h.plain) != 3 {
		t.Fatalf("a small body: %d, %d upstream requests", got, len(*h.plain))
	}
}

// TestClientPinHeadersNeverForwarded: on the unpinned path too, no pin
// header a client sends (x-dynamo-* or a legacy name) reaches a backend.
func TestClientPinHeadersNeverForwarded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	resp := h.post(t, `{"model":"other-model","messages":[{"role":"user","content":"hi"}]}`, map[string]string{
		"x-worker-instance-id": "20", "X-Prefill-Instance-Id": "10", "x-dp-rank": "1", "x-data-parallel-rank": "1",
		"x-prefill-dp-rank": "0", "x-dynamo-worker-instance-id": "20"})
	if body := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if len(*h.plain) != 1 {
		t.Fatalf("%d plain requests", len(*h.plain))
	}
	for k := range (*h.plain)[0] {
		if shim.IsPinHeader(k) {
			t.Errorf("the backend received the client's %s", k)
		}
	}
}

// TestLegacyPinHeadersOff: with dynamo.shim.legacy_pin_headers false only
// the x-dynamo-* names are sent.
func TestLegacyPinHeadersOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) { c.Dynamo.Shim.LegacyPinHeaders = false })
	resp := h.post(t, chat(false), nil)
	if body := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	r := h.fe.Requests()[0]
	if r.DynamoHeaders.Get("x-dynamo-worker-instance-id") != "20" {
		t.Errorf("pins %v", r.DynamoHeaders)
	}
	for _, k := range []string{"x-worker-instance-id", "x-prefill-instance-id", "x-dp-rank", "x-prefill-dp-rank"} {
		if v := r.DynamoHeaders.Values(k); len(v) != 0 {
			t.Errorf("%s sent with legacy names off: %q", k, v)
		}
	}
}

// openAIError is the error body of OpenAI's API.
type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// listedModels is GET /v1/models.
func listedModels(t *testing.T, base string) map[string]bool {
	t.Helper()
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(readAll(t, resp)), &v); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range v.Data {
		out[m.ID] = true
	}
	return out
}

// TestUnknownModel404: a model no backend lists and no discovered Dynamo
// worker serves (model_map included) is 404 model_not_found in OpenAI's
// error shape, on both endpoints; a known model nothing can take now is
// 503 no_backend_available. Known is what GET /v1/models lists.
func TestUnknownModel404(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) {
		c.Backends[1].Models = []string{"plain-model"} // no catch-all backend
		c.Dynamo.Shim.ModelMap = map[string]string{"qwen3": model, "ghost": "Nobody/Serves-This"}
	})
	// A model whose only worker is a prefill worker: served, so known, but
	// no decode worker can be pinned.
	modelWorker(h.reducer, "dynamo", "prefill", "Prefill", "prefill-only", 40, 0)
	h.reg.Publish(h.reducer.Build(t0))
	// The router sends the client's model name on: the frontend must know
	// qwen3 as a name of the model.
	h.fe.SetWorkers("qwen3", []uint64{10}, []uint64{20})
	listed := listedModels(t, h.router.URL)
	for _, tt := range []struct {
		model  string
		status int
	}{
		{"no-such-model", http.StatusNotFound},
		{"ghost", http.StatusNotFound},              // mapped to a model no worker serves
		{"Nobody/Serves-This", http.StatusNotFound}, // the mapped name itself
		{"prefill-only", http.StatusServiceUnavailable},
		{model, http.StatusOK},
		{"qwen3", http.StatusOK},
		{"plain-model", http.StatusOK},
	} {
		if listed[tt.model] == (tt.status == http.StatusNotFound) {
			t.Errorf("%s: GET /v1/models lists it: %v, yet the request is to answer %d", tt.model, listed[tt.model], tt.status)
		}
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			resp, err := http.Post(h.router.URL+path, "application/json",
				strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"hi","messages":[{"role":"user","content":"hi"}]}`, tt.model)))
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.StatusCode != tt.status {
				t.Fatalf("%s %s: status %d, want %d: %s", path, tt.model, resp.StatusCode, tt.status, body)
			}
			if tt.status == http.StatusOK {
				continue
			}
			var e openAIError
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("%s: %v: %s", tt.model, err, body)
			}
			switch tt.status {
			case http.StatusNotFound:
				if e.Error.Type != "invalid_request_error" || e.Error.Code != "model_not_found" || e.Error.Param == nil || *e.Error.Param != "model" ||
					!strings.Contains(e.Error.Message, tt.model) || resp.Header.Get("Content-Type") != "application/json" {
					t.Errorf("%s %s: %s", path, tt.model, body)
				}
			default:
				if e.Error.Code != "no_backend_available" || e.Error.Type != "server_error" || e.Error.Param != nil {
					t.Errorf("%s %s: %s", path, tt.model, body)
				}
			}
		}
	}
	if got := promtest.ToFloat64(h.metrics.Requests.WithLabelValues("/v1/chat/completions", "4xx")); got != 3 {
		t.Errorf("%v chat requests counted 4xx, want the 3 unknown models", got)
	}
}

// TestUnknownModelPerKey: known is per API key, as GET /v1/models is: a
// model only a backend the key may not use lists is unknown to that key.
func TestUnknownModelPerKey(t *testing.T) {
	t.Parallel()
	const key = "sk-client-2"
	h := newHarness(t, func(c *config.Config) {
		c.Backends[1].Models = []string{"plain-model"}
		c.Backends = append(c.Backends, config.Backend{Name: "other", Type: "openai", URL: closedURL(t), Role: config.RoleUnified,
			Enabled: true, Timeout: config.Duration(5 * time.Second), Models: []string{"other-model"}})
		c.APIKeys = []config.APIKey{{KeyHash: "sha256:" + sha256hex(key), AllowedBackends: []string{"plain"}}}
	})
	auth := map[string]string{"Authorization": "Bearer " + key}
	resp := h.post(t, `{"model":"other-model","messages":[]}`, auth)
	if body := readAll(t, resp); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "model_not_found") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	resp = h.post(t, `{"model":"plain-model","messages":[]}`, auth)
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

// TestModelUnknownBeforeDiscovery: until Dynamo discovery has seen the
// fleet once no model can be called unknown (a worker may serve it): 503;
// after, 404.
func TestModelUnknownBeforeDiscovery(t *testing.T) {
	t.Parallel()
	plain, _ := plainBackend(t)
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "plain", Type: "openai", URL: plain.URL, Role: config.RoleUnified, Enabled: true,
		Timeout: config.Duration(5 * time.Second), Models: []string{"plain-model"}}}
	cfg.Dynamo.Enabled = true
	reg := fleet.NewRegistry(nil, nil)
	rt := httptest.NewServer(router.New(router.Options{Config: cfg, Registry: reg}).Handler())
	defer rt.Close()
	post := func() int {
		resp, err := http.Post(rt.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"later","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(); got != http.StatusServiceUnavailable {
		t.Fatalf("before discovery: %d, want 503", got)
	}
	reg.Publish(fleet.NewReducer().Build(t0))
	if got := post(); got != http.StatusNotFound {
		t.Fatalf("after discovery: %d, want 404", got)
	}
}

// TestCutAnswerIsAborted: when a backend's answer breaks off after the
// client got part of it, the client's answer is cut short too (no final
// chunk, fewer bytes than promised), so the client reads an error instead
// of a complete answer; a stream and a buffered answer alike.
func TestCutAnswerIsAborted(t *testing.T) {
	t.Parallel()
	cutting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n")
		} else {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, `{"id":"cut","choi`)
		}
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection closes mid-answer
	}))
	t.Cleanup(cutting.Close)
	// One in-flight slot: an aborted answer must give it back.
	h := newHarness(t, func(c *config.Config) { c.Backends[1].URL = cutting.URL; c.Server.MaxInFlight = 1 })
	for _, stream := range []bool{true, false} {
		body := fmt.Sprintf(`{"model":"not-dynamo","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
		// A head held back with the start of a short answer never goes
		// out: the client's request fails instead.
		resp, err := http.Post(h.router.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			continue
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err == nil {
			t.Errorf("stream %v: the client read a complete answer %q (status %d) from a backend that broke off", stream, got, resp.StatusCode)
		}
	}
	if resp := h.post(t, chat(false), nil); resp.StatusCode != http.StatusOK {
		t.Errorf("after the aborted answers: status %d: %s (their in-flight slots not given back?)", resp.StatusCode, readAll(t, resp))
	}
	if n := promtest.ToFloat64(h.metrics.Requests.WithLabelValues("/v1/chat/completions", "5xx")); n != 2 {
		t.Errorf("%v aborted answers counted as 5xx, want 2", n)
	}
}

// TestFailureNamesBackendOnlyWhenAsked: a failed dispatch's error names the
// backend and its address only to a client that sent x-backend (an empty
// value too), as the answer's headers do; any other client is told what
// failed without either.
func TestFailureNamesBackendOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	dead := closedURL(t)
	h := newHarness(t, func(cfg *config.Config) {
		cfg.Dynamo.Enabled, cfg.DisaggregatedServing.Enabled = false, false
		cfg.Backends = []config.Backend{{Name: "gpu-pool-7", Type: "openai", URL: dead, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
	})
	addr := strings.TrimPrefix(dead, "http://")
	for _, tc := range []struct {
		hdr    map[string]string
		reveal bool
	}{{nil, false}, {map[string]string{"x-backend": ""}, true}} {
		resp := h.post(t, chat(false), tc.hdr)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		named := strings.Contains(body, "gpu-pool-7") || strings.Contains(body, addr)
		if named != tc.reveal {
			t.Errorf("x-backend %v: the error names the backend: %v: %s", tc.hdr, named, body)
		}
		if !tc.reveal && !strings.Contains(body, "the backend could not be reached") {
			t.Errorf("the error does not say what failed: %s", body)
		}
	}
}

// TestRevealNamesButNeverLocates: a client that asks to see backends
// (x-backend) reads which backend failed and why, never its address.
func TestRevealNamesButNeverLocates(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: the dial is refused
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "gone", Type: "openai", URL: "http://" + addr, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(5 * time.Second)}}
	srv := router.New(router.Options{Config: cfg})
	srv.SetReady(true)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("x-backend", "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode < 500 || !strings.Contains(body, "gone") || strings.Contains(body, addr) || strings.Contains(body, "127.0.0.1") {
		t.Errorf("status %d: %s", resp.StatusCode, body)
	}
}

// TestClientGoneWhileDiscoverySettles: a request that waits for discovery
// to settle and whose client leaves meanwhile is not routed at all (not
// the plain way either, nor counted as a unified request).
func TestClientGoneWhileDiscoverySettles(t *testing.T) {
	t.Parallel()
	never := make(chan struct{})
	h := newHarnessWith(t, nil, func(o *router.Options) {
		o.DiscoverySettling = func() <-chan struct{} { return never }
	})
	ctx, cancel := contextWithCancel()
	time.AfterFunc(300*time.Millisecond, cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.router.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"a-model-no-worker-serves","messages":[]}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := h.router.client.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("answered %d", resp.StatusCode)
	}
	waitClientGone(t, h.metrics, "/v1/chat/completions")
	if n := promtest.ToFloat64(h.metrics.DisaggRequests.WithLabelValues(shim.PathUnified)); n != 0 {
		t.Errorf("the abandoned request was routed the plain way (%v unified)", n)
	}
}

// TestStreamServedWhenTheClientLeavesAfterDone: a client that closes its
// connection once it read the stream's final event (data: [DONE]; a native
// Responses stream's response.completed), before the backend ended the
// stream's body, was served: counted 2xx, not 499.
func TestStreamServedWhenTheClientLeavesAfterDone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path, request, stream, final string
		native                       bool
	}{
		{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`,
			"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", "data: [DONE]", false},
		{"/v1/responses", `{"model":"m","stream":true,"input":"hi"}`,
			nativeResponsesEvents, "data: {\"type\":\"response.completed\"", true},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			be := streamBackend(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, tc.stream)
				w.(http.Flusher).Flush()
				<-r.Context().Done() // the body's end never comes before the cut
			})
			cfg := oneBackend(be, time.Minute)
			if tc.native {
				cfg.Backends[0].ResponsesAPI = config.ResponsesAPINative
			}
			metrics := telemetry.NewRouterMetrics(nil)
			rt := testutil.LeanServer(t, router.New(router.Options{Config: cfg, Metrics: metrics}).Handler())
			resp, err := http.Post(rt+tc.path, "application/json", strings.NewReader(tc.request))
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("the stream ended before its final event: %v", err)
				}
				if strings.HasPrefix(line, tc.final) {
					_, _ = br.ReadString('\n') // its blank line
					break
				}
			}
			_ = resp.Body.Close() // leaves: the connection closes with the body unfinished
			count := func(class string) float64 {
				return promtest.ToFloat64(metrics.Requests.WithLabelValues(tc.path, class))
			}
			testutil.Eventually(t, 10*time.Second, "the request counted", func() bool { return count("2xx")+count("4xx") > 0 })
			if count("2xx") != 1 || count("4xx") != 0 {
				t.Errorf("2xx %v, 4xx %v: a stream read to its end was counted as abandoned", count("2xx"), count("4xx"))
			}
		})
	}
}

// FuzzDoneTail: a stream cut into writes anywhere (cuts give the writes'
// sizes) is told to end with its final event after each write exactly
// when what was written so far does.
func FuzzDoneTail(f *testing.F) {
	f.Add("data: {}\n\ndata: [DONE]\n\n", []byte{3, 20, 1})
	f.Add("data: [DONE]\r\n\r\ndata: [DONE]\n\n", []byte{16, 1, 1})
	f.Add("data:[DONE]\n\n", []byte{0})
	f.Fuzz(func(t *testing.T, stream string, cuts []byte) {
		tail := router.NewDoneTail()
		at := 0
		// A cut of 0 is an empty write; the writes stop at the stream's
		// end, or after as many as cuts of 0 alone could make.
		for i := 0; at < len(stream) && i < 2*len(stream)+len(cuts); i++ {
			size := 1
			if len(cuts) > 0 {
				size = int(cuts[i%len(cuts)])
			}
			end := min(at+size, len(stream))
			if got, want := tail(stream[at:end]), router.EndsWithDone(stream[:end]); got != want {
				t.Fatalf("%q after %d bytes: %v, want %v", stream, end, got, want)
			}
			at = end
		}
	})
}

// TestDoneTail: the end of a stream is told whatever the writes' sizes.
func TestDoneTail(t *testing.T) {
	t.Parallel()
	for _, stream := range []string{
		"data: {}\n\ndata: [DONE]\n\n", "data:[DONE]\n\n", "data: [DONE]\r\n\r\n", "data: {}\n\n",
		"data: [DONE]\n", "xdata: [DONE]\n\n", "data: [DONE]\n\n: trailing comment\n\n",
	} {
		want := router.EndsWithDone(stream)
		for size := 1; size <= len(stream); size++ {
			got := false
			tail := router.NewDoneTail()
			for i := 0; i < len(stream); i += size {
				got = tail(stream[i:min(i+size, len(stream))])
			}
			if got != want {
				t.Errorf("%q in writes of %d: %v, want %v", stream, size, got, want)
			}
		}
	}
}

// TestDynamoModelPerKey: a key whose allowed_backends excludes every shim
// replica cannot reach the Dynamo model: GET /v1/models does not list it
// for that key, and a request answers 404 model_not_found (as for a plain
// backend's model the key may not use), not a 503 its SDK would retry.
func TestDynamoModelPerKey(t *testing.T) {
	t.Parallel()
	const key = "sk-only-plain"
	h := newHarness(t, func(c *config.Config) {
		c.Backends[1].Models = []string{"plain-model"} // no catch-all backend
		c.APIKeys = []config.APIKey{{KeyHash: "sha256:" + sha256hex(key), AllowedBackends: []string{"plain"}}}
	})
	req, _ := http.NewRequest(http.MethodGet, h.router.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	list := readAll(t, resp)
	if strings.Contains(list, model) {
		t.Errorf("GET /v1/models lists %s to a key that may use no shim replica: %s", model, list)
	}
	resp = h.post(t, chat(false), map[string]string{"Authorization": "Bearer " + key})
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "model_not_found") {
		t.Errorf("chat for %s with a key that may use no shim replica: %d %s (want 404 model_not_found)", model, resp.StatusCode, body)
	}
	if n := len(h.fe.Requests()); n != 0 {
		t.Fatalf("the frontend got %d requests", n)
	}
}

// TestWrongMethodIs405: a known route asked with another method answers
// 405 with Allow, not the catch-all 404 "no such route"; an unknown path
// stays 404.
func TestWrongMethodIs405(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, tt := range []struct{ method, path, allow string }{
		{http.MethodPost, "/v1/models", "GET, HEAD"},
		{http.MethodGet, "/v1/chat/completions", "POST"},
		{http.MethodGet, "/v1/messages", "POST"},
		{http.MethodPost, "/health", "GET, HEAD"},
		{http.MethodDelete, "/v1/models/org/name", "GET, HEAD"},
	} {
		req, _ := http.NewRequest(tt.method, h.router.URL+tt.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tt.allow || !strings.Contains(body, "method_not_allowed") {
			t.Errorf("%s %s: %d Allow=%q %s", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Allow"), strings.TrimSpace(body))
		}
	}
	resp, err := http.Get(h.router.URL + "/v1/nothing")
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusNotFound || resp.Header.Get("Allow") != "" {
		t.Errorf("unknown path: %d Allow=%q %s", resp.StatusCode, resp.Header.Get("Allow"), body)
	}
	// Under the Messages API's paths, in its error shape.
	resp, err = http.Get(h.router.URL + "/anthropic/v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(body, `"type":"error"`) {
		t.Errorf("GET /anthropic/v1/messages: %d %s", resp.StatusCode, body)
	}
	// A compaction for a model that is not here is a 404, as any request's.
	h = newHarness(t, func(c *config.Config) { c.Backends[1].Models = []string{"plain-model"} })
	resp, err = http.Post(h.router.URL+"/v1/responses/compact", "application/json", strings.NewReader(`{"model":"nowhere","input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "model_not_found") {
		t.Errorf("compact, unknown model: %d %s", resp.StatusCode, body)
	}
}

// TestAdminBearerSchemeAnyCase: the admin API takes the bearer scheme in
// any case, as the inference routes do (an auth scheme is
// case-insensitive, RFC 9110 §11.1).
func TestAdminBearerSchemeAnyCase(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, auth := range []string{"Bearer admin-secret", "bearer admin-secret", "BEARER admin-secret"} {
		req, _ := http.NewRequest(http.MethodGet, h.router.URL+"/admin/config/status", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%q: %d %s", auth, resp.StatusCode, strings.TrimSpace(body))
		}
	}
}

// TestDiscoveredModelWithdrawn: a discovered model leaves GET /v1/models
// when its workers leave, and a request for it is then a 404.
func TestDiscoveredModelWithdrawn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) { c.Backends[1].Models = []string{"plain-model"} })
	if !listedModels(t, h.router.URL)[model] {
		t.Fatal("not listed while served")
	}
	h.reducer.Delete("v1/instances/dynamo/prefill/generate/a")
	h.reducer.Delete("v1/instances/dynamo/decode/generate/14")
	h.reg.Publish(h.reducer.Build(t0))
	if listed := listedModels(t, h.router.URL); listed[model] {
		t.Errorf("listed after its workers left: %v", listed)
	}
	resp := h.post(t, chat(false), nil)
	if body := readAll(t, resp); resp.StatusCode != http.StatusNotFound {
		t.Errorf("request after its workers left: %d %s", resp.StatusCode, body)
	}
}

// TestBrokenBodiesOpenTheBreaker: a backend that answers every head and
// breaks every body off (a reset after the head, a body shorter than its
// length) fails as one reset before its head does: after five in a row
// its breaker opens and requests stop reaching it. Buffered and streamed
// answers alike.
func TestBrokenBodiesOpenTheBreaker(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int32
			broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
					return
				}
				hits.Add(1)
				c, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer func() { _ = c.Close() }()
				if stream {
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
						"20\r\ndata: {\"choices\":[{\"index\":0}]}\n\n\r\n")
				} else {
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\"")
				}
			}))
			t.Cleanup(broken.Close)
			h := newHarness(t, onlyBackend(broken.URL, 5*time.Second))
			for i := range 8 {
				// The client of a broken answer gets a cut one (or none).
				resp, err := http.Post(h.router.URL+"/v1/chat/completions", "application/json",
					strings.NewReader(`{"model":"m","stream":`+strconv.FormatBool(stream)+`,"messages":[{"role":"user","content":"hi"}]}`))
				status := 0
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					status = resp.StatusCode
				}
				if i >= 5 && status != http.StatusServiceUnavailable {
					t.Errorf("request %d after five broken answers: %d %v, want 503 (breaker open)", i, status, err)
				}
			}
			if n := hits.Load(); n != 5 {
				t.Errorf("the broken backend got %d requests, want 5 (then its breaker opened)", n)
			}
		})
	}
}

// TestClientGoneSparesTheBreaker: a client that leaves in the middle of a
// stream ends the backend's answer early; that is no failure of the
// backend's, however often it happens.
func TestClientGoneSparesTheBreaker(t *testing.T) {
	t.Parallel()
	url, hits := endlessStreamBackend(t, 5*time.Millisecond)
	h := newHarness(t, onlyBackend(url, 5*time.Second))
	for i := range 8 {
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.router.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %v %v", i, resp, err)
		}
		_, _ = bufio.NewReader(resp.Body).ReadString('\n')
		cancel()
		_ = resp.Body.Close()
	}
	if n := hits.Load(); n != 8 {
		t.Errorf("the backend got %d of 8 requests whose clients left mid-stream", n)
	}
}

// TestBackendRefusingTheRoutersKey: a backend that refuses the router's
// own key (backends[].api_key) with a 401 has its answer, which may quote
// the key, kept from the client, who gets a 502 (its own key was fine);
// a backend's authentication challenge never reaches a client, whose
// credentials are the router's business, not a backend's.
func TestBackendRefusingTheRoutersKey(t *testing.T) {
	t.Parallel()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("WWW-Authenticate", `Bearer realm="upstream"`)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided: `+r.Header.Get("Authorization")+`","code":"invalid_api_key"}}`)
	}))
	t.Cleanup(refusing.Close)
	for _, key := range []string{"sk-router-SECRET", ""} {
		t.Run(fmt.Sprintf("api_key=%q", key), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *config.Config) {
				c.Dynamo.Enabled, c.DisaggregatedServing.Enabled = false, false
				c.Backends = []config.Backend{{Name: "keyed", Type: "openai", URL: refusing.URL, Role: config.RoleUnified, Enabled: true,
					Timeout: config.Duration(10 * time.Second), APIKey: key, Models: []string{"m"}}}
			})
			for _, stream := range []bool{false, true} {
				resp := h.post(t, `{"model":"m","stream":`+strconv.FormatBool(stream)+`,"messages":[{"role":"user","content":"x"}]}`, nil)
				body := readAll(t, resp)
				if resp.Header.Get("WWW-Authenticate") != "" {
					t.Errorf("stream=%v: a backend's challenge reached the client: %q", stream, resp.Header.Get("WWW-Authenticate"))
				}
				if key == "" {
					// No key of the router's: the backend's answer is the
					// backend's to give.
					if resp.StatusCode != http.StatusUnauthorized {
						t.Errorf("stream=%v: %d %s", stream, resp.StatusCode, body)
					}
					continue
				}
				if resp.StatusCode != http.StatusBadGateway || strings.Contains(body, key) || !strings.Contains(body, "refused the router's credentials") {
					t.Errorf("stream=%v: %d %s", stream, resp.StatusCode, body)
				}
			}
		})
	}
}

// TestTimedOutStreamsSpareTheBreaker: a stream cut by its backend's
// timeout (a long answer, or a client too slow to take it) is no broken
// answer: the backend was sending, and its breaker stays closed however
// often it happens.
func TestTimedOutStreamsSpareTheBreaker(t *testing.T) {
	t.Parallel()
	url, hits := endlessStreamBackend(t, 20*time.Millisecond)
	h := newHarness(t, onlyBackend(url, 200*time.Millisecond))
	for i := range 7 {
		resp, err := http.Post(h.router.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if n := hits.Load(); n != 7 {
		t.Errorf("the backend got %d of 7 requests whose streams its timeout cut", n)
	}
}

// TestInStreamErrorCounted: a pinned stream that carries the frontend's
// error event (Dynamo 1.x: event: error with its message as a comment;
// newer: data holding {"error":...}) is relayed as it came, and accounted
// as the decode's failure (disaggregated_errors_total{phase="decode"}, a
// 5xx), not as a served stream.
func TestInStreamErrorCounted(t *testing.T) {
	t.Parallel()
	chunk := `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok0"}}]}` + "\n\n"
	for name, errEvent := range map[string]string{
		"comment": "event: error\n: Stream ended before generation completed\n\n",
		"data":    `data: {"error":{"message":"Internal server error","type":"internal_server_error","code":500}}` + "\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stream := chunk + errEvent + "data: [DONE]\n\n"
			fe := fixedStreamFrontend(t, stream)
			h := newHarness(t, func(c *config.Config) { c.Backends[0].URL = fe.URL })
			resp := h.post(t, chat(true), nil)
			if body := readAll(t, resp); body != stream {
				t.Fatalf("%d, relayed %q, want %q", resp.StatusCode, body, stream)
			}
			if got := promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("decode")); got != 1 {
				t.Errorf("decode errors %v, want 1", got)
			}
			testutil.Eventually(t, 5*time.Second, "the request counted", func() bool {
				return promtest.ToFloat64(h.metrics.Requests.WithLabelValues("/v1/chat/completions", "5xx")) == 1
			})
			if ok := promtest.ToFloat64(h.metrics.Requests.WithLabelValues("/v1/chat/completions", "2xx")); ok != 0 {
				t.Errorf("counted %v 2xx", ok)
			}
		})
	}
}
