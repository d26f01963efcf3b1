package router_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/fleetsim"
)

// kvChat is a chat body of model m long enough for a dozen blocks of 16.
func kvChat() string {
	user, _ := json.Marshal(strings.Repeat("Which worker holds the prefix of this prompt, and how much of it? ", 12))
	return fmt.Sprintf(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":%s}]}`, user)
}

// TestBypassSendsOnlyTheDecodePin: under conditional disaggregation, a
// decode worker that holds nearly all of the prompt prefills it itself:
// the frontend gets the decode worker's id alone (no prefill id under any
// name), the client's answer says routing path unified, the request counts
// under that path, as a conditional_bypass prefill selection and as a
// bypass KV selection; a client that sent x-backend (empty) learns the
// decode worker and no prefill worker.
func TestBypassSendsOnlyTheDecodePin(t *testing.T) {
	t.Parallel()
	k := newKVRouter(t, nil)
	s := k.picker.Settings()
	s.Conditional = true
	k.picker.SetSettings(s)
	// The frontend serves the decode worker as it would with the prefill
	// pool gone, so that the pinned request is answered.
	k.fe.SetInstances("m", nil, []fleetsim.Instance{{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceID: 20}})
	body := kvChat()
	pr := k.prompt(t, body)
	hashes := pr.Hashes[16]
	k.hold(t, 20, hashes, len(hashes))
	req, _ := http.NewRequest(http.MethodPost, k.router.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header["X-Backend"] = []string{""}
	resp, err := k.router.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	reqs := k.fe.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.Worker == nil || *r.Worker != 20 || r.Prefill != nil {
		t.Fatalf("pins %v, want the decode worker alone", r.DynamoHeaders)
	}
	for k := range r.DynamoHeaders {
		if lk := strings.ToLower(k); strings.Contains(lk, "prefill") {
			t.Errorf("a bypass sent %s", k)
		}
	}
	if p := resp.Header.Get("x-continuum-routing-path"); p != shim.PathUnified {
		t.Errorf("x-continuum-routing-path %q, want unified", p)
	}
	if resp.Header.Get("x-continuum-worker") != "20" || resp.Header.Get("x-continuum-prefill-worker") != "" {
		t.Errorf("reveal headers %v", resp.Header)
	}
	if n := promtest.ToFloat64(k.rm.Selections.WithLabelValues("prefill", "conditional_bypass")); n != 1 {
		t.Errorf("conditional_bypass selections %v", n)
	}
	if n := promtest.ToFloat64(k.metrics.Selections.WithLabelValues(kv.ResultBypass)); n != 1 {
		t.Errorf("bypass KV selections %v", n)
	}
	if n := promtest.ToFloat64(k.rm.DisaggRequests.WithLabelValues(shim.PathUnified)); n != 1 {
		t.Errorf("unified requests %v", n)
	}
}

// TestFallbackCarriesNoRouterTokens: with send_token_data, the pinned
// dispatch carries the rendered ids as nvext.token_data, and the unified
// fallback after it failed carries neither those nor any pin header.
func TestFallbackCarriesNoRouterTokens(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var plainBodies []string
	var plainHeaders []http.Header
	plain := newPlainRecorder(t, func(h http.Header, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		plainBodies, plainHeaders = append(plainBodies, string(b)), append(plainHeaders, h)
	})
	k := newKVRouter(t, func(c *config.Config) {
		c.Backends = append(c.Backends, config.Backend{Name: "plain", Type: "openai", URL: plain, Role: config.RoleUnified, Enabled: true,
			Timeout: config.Duration(10 * time.Second)})
		c.DisaggregatedServing.FallbackToUnified = true
	})
	body := kvChat()
	k.prompt(t, body) // artifacts loaded: the dispatch carries token data
	k.fe.Status = http.StatusBadRequest
	resp, err := k.router.Client().Post(k.router.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	reqs := k.fe.Requests()
	if len(reqs) != 1 || !reqs[0].HadTokenData {
		t.Fatalf("the pinned dispatch: %d requests, token data %v", len(reqs), len(reqs) == 1 && reqs[0].HadTokenData)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(plainBodies) != 1 {
		t.Fatalf("%d fallbacks", len(plainBodies))
	}
	if strings.Contains(plainBodies[0], "token_data") {
		t.Errorf("the fallback carried token data: %s", plainBodies[0])
	}
	for k := range plainHeaders[0] {
		if shim.IsPinHeader(k) {
			t.Errorf("the fallback carried %s", k)
		}
	}
	if p := resp.Header.Get("x-continuum-routing-path"); p != shim.PathFallback {
		t.Errorf("routing path %q", p)
	}
	if promtest.ToFloat64(k.rm.DisaggRequests.WithLabelValues(shim.PathFallback)) != 1 ||
		promtest.ToFloat64(k.rm.DisaggRequests.WithLabelValues(shim.PathDisaggregated)) != 0 ||
		promtest.ToFloat64(k.rm.DisaggErrors.WithLabelValues(shim.PhaseDecode)) != 1 {
		t.Error("not counted once, as a fallback after a decode failure")
	}
}

// newPlainRecorder is a plain OpenAI backend that tells seen of every
// completion request it gets.
func newPlainRecorder(t *testing.T, seen func(http.Header, []byte)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		b, _ := io.ReadAll(r.Body)
		seen(r.Header.Clone(), b)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"plain","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"plain"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestModelMapMatchesWorkersOnly: shim.model_map maps the client's model
// to the Dynamo model only to find candidate workers; the frontend gets
// the body with the model id the client sent.
func TestModelMapMatchesWorkersOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) { c.Dynamo.Shim.ModelMap = map[string]string{"qwen3": model} })
	h.fe.SetWorkers("qwen3", []uint64{10}, []uint64{20}) // the frontend resolves the client's id
	resp := h.post(t, `{"model":"qwen3","messages":[{"role":"user","content":"hi"}]}`, nil)
	if body := readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	reqs := h.fe.Requests()
	if len(reqs) != 1 || reqs[0].Model != "qwen3" || reqs[0].Worker == nil || *reqs[0].Worker != 20 || reqs[0].Prefill == nil || *reqs[0].Prefill != 10 {
		t.Fatalf("requests %+v", reqs)
	}
	if len(*h.plain) != 0 {
		t.Error("went the plain way")
	}
}

// TestPinHeadersOneWayOnEveryIngress: on every ingress (chat, Messages,
// Responses converted and native, buffered and streamed), the frontend
// gets the router's pins only, never the client's under any name, and
// the client gets no pin header back under any name, nor an identity it
// did not ask for; only the routing path.
func TestPinHeadersOneWayOnEveryIngress(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []http.Header
	fe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		for _, k := range []string{"x-dynamo-worker-instance-id", "x-worker-instance-id", "x-prefill-instance-id", "x-dp-rank",
			"x-data-parallel-rank", "x-prefill-dp-rank", "x-dynamo-anything", "x-continuum-worker"} {
			w.Header().Set(k, "1")
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/responses":
			_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","output":[]}`)
		default:
			_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
		}
	}))
	t.Cleanup(fe.Close)
	client := map[string]string{"x-dynamo-worker-instance-id": "999", "X-DYNAMO-PREFILL-INSTANCE-ID": "998", "x-dynamo-dp-rank": "7",
		"x-worker-instance-id": "997", "X-Prefill-Instance-Id": "996", "x-dp-rank": "5", "x-data-parallel-rank": "4", "x-prefill-dp-rank": "3",
		"x-dynamo-routing-mode": "aggregated"}
	for _, native := range []bool{false, true} {
		h := newHarness(t, func(c *config.Config) {
			c.Backends[0].URL = fe.URL
			if !native {
				c.Backends[0].ResponsesAPI = config.ResponsesAPIChat
			}
		})
		cases := []struct{ path, body string }{
			{"/v1/chat/completions", chat(false)},
			{"/v1/messages", messagesBody(false)},
			{"/anthropic/v1/messages", messagesBody(false)},
			{"/v1/responses", responsesBody(false)},
		}
		for _, c := range cases {
			mu.Lock()
			got = nil
			mu.Unlock()
			resp, body := h.postTo(t, c.path, c.body, client)
			if resp.StatusCode != 200 {
				t.Fatalf("native=%v %s: status %d: %s", native, c.path, resp.StatusCode, body)
			}
			for k := range resp.Header {
				lk := strings.ToLower(k)
				if shim.IsPinHeader(k) || strings.HasPrefix(lk, "x-continuum-") && lk != "x-continuum-routing-path" {
					t.Errorf("native=%v %s: the client got %s", native, c.path, k)
				}
			}
			mu.Lock()
			if len(got) != 1 {
				t.Fatalf("native=%v %s: %d requests", native, c.path, len(got))
			}
			sent := got[0]
			mu.Unlock()
			want := map[string]string{"X-Dynamo-Worker-Instance-Id": "20", "X-Worker-Instance-Id": "20",
				"X-Dynamo-Prefill-Instance-Id": "10", "X-Prefill-Instance-Id": "10"}
			for k, v := range sent {
				if !shim.IsPinHeader(k) {
					continue
				}
				switch k {
				case "X-Dynamo-Dp-Rank", "X-Dp-Rank":
					if len(v) != 1 || (v[0] != "0" && v[0] != "1") {
						t.Errorf("native=%v %s: %s = %q", native, c.path, k, v)
					}
				default:
					if w, ok := want[k]; !ok || len(v) != 1 || v[0] != w {
						t.Errorf("native=%v %s: the frontend got %s = %q", native, c.path, k, v)
					}
				}
			}
			for k := range want {
				if sent.Get(k) == "" {
					t.Errorf("native=%v %s: %s not sent", native, c.path, k)
				}
			}
		}
	}
}

// TestIngressWrappedRefusalIsDecodeFailure: on the Messages and Responses
// ingresses, buffered or streamed, the direct-mode refusal quoted inside a
// generic 500 is a failed dispatch: counted in phase decode and fallen
// back from (fallback_to_unified on), not the 503 of a refusal.
func TestIngressWrappedRefusalIsDecodeFailure(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/v1/messages", "/v1/responses"} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", path, stream), func(t *testing.T) {
				t.Parallel()
				var hits atomic.Int32
				fe := failingFrontend(t, http.StatusInternalServerError,
					`{"message":"Failed to generate completions: `+fleetsim.PrefillRequiredError+`","type":"Internal Server Error","code":500}`, &hits)
				h := newHarness(t, func(c *config.Config) {
					c.Backends[0].URL = fe.URL
					c.Backends[0].ResponsesAPI = config.ResponsesAPIChat
					c.Backends[1].ResponsesAPI = config.ResponsesAPIChat
					c.DisaggregatedServing.FallbackToUnified = true
				})
				body := messagesBody(stream)
				if path == "/v1/responses" {
					body = responsesBody(stream)
				}
				resp, got := h.postTo(t, path, body, nil)
				if resp.StatusCode != 200 || len(*h.plain) != 1 {
					t.Fatalf("status %d, %d fallbacks: %s", resp.StatusCode, len(*h.plain), got)
				}
				if promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues(shim.PhaseDecode)) != 1 ||
					promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues(shim.PhaseOrchestration)) != 0 {
					t.Error("not counted as a decode failure")
				}
			})
		}
	}
}
