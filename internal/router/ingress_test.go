package router_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

func (h *harness) postTo(t *testing.T, path, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.router.URL+path, strings.NewReader(body))
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
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func messagesBody(stream bool) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":3,"stream":%v,"system":"Be brief.","messages":[{"role":"user","content":"hello there"}],
		"nvext":{"token_data":[1,2,3]}}`, model, stream)
}

func responsesBody(stream bool) string {
	return fmt.Sprintf(`{"model":%q,"max_output_tokens":3,"stream":%v,"instructions":"Be brief.","input":"hello there",
		"nvext":{"token_data":[1,2,3]}}`, model, stream)
}

// sse reads an event stream as (name, data) pairs.
func sse(t *testing.T, body string) [][2]string {
	t.Helper()
	var out [][2]string
	var name string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			out = append(out, [2]string{name, strings.TrimPrefix(line, "data: ")})
			name = ""
		}
	}
	return out
}

func names(evs [][2]string) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e[0]
	}
	return out
}

// convertedPinned checks the frontend's one request: the converted chat
// request, pinned to the harness's workers, without the client's pins,
// token data or credentials.
func convertedPinned(t *testing.T, h *harness, stream bool) {
	t.Helper()
	reqs := h.fe.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests reached the frontend", len(reqs))
	}
	r := reqs[0]
	if r.Path != "/v1/chat/completions" || r.Worker == nil || *r.Worker != 20 || r.Prefill == nil || *r.Prefill != 10 {
		t.Fatalf("path %s, pins %v", r.Path, r.DynamoHeaders)
	}
	if r.DynamoHeaders.Get("x-dynamo-worker-instance-id") != "20" || r.DynamoHeaders.Get("x-prefill-instance-id") != "10" {
		t.Errorf("pin headers %v", r.DynamoHeaders)
	}
	if r.HadTokenData || bytes.Contains(r.Body, []byte("nvext")) {
		t.Errorf("the client's nvext reached the frontend: %s", r.Body)
	}
	if r.Authorization != "Bearer sk-upstream" {
		t.Errorf("upstream credential %q", r.Authorization)
	}
	var q struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens     int  `json:"max_tokens"`
		Stream        bool `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(r.Body, &q); err != nil {
		t.Fatal(err)
	}
	if len(q.Messages) != 2 || q.Messages[0].Role != "system" || q.Messages[0].Content != "Be brief." || q.Messages[1].Content != "hello there" || q.MaxTokens != 3 {
		t.Errorf("converted body %s", r.Body)
	}
	if q.Stream != stream || (stream && (q.StreamOptions == nil || !q.StreamOptions.IncludeUsage)) {
		t.Errorf("stream settings %s", r.Body)
	}
}

// TestMessagesPinnedLikeChat: a Messages request goes through the shim as
// its converted chat request, pinned as chat requests are (the client's
// pin headers and token data removed), and answers in the Messages shape,
// buffered and streamed, at both paths.
func TestMessagesPinnedLikeChat(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/v1/messages", "/anthropic/v1/messages"} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", path, stream), func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, nil)
				resp, body := h.postTo(t, path, messagesBody(stream), map[string]string{"x-dynamo-worker-instance-id": "999",
					"x-prefill-instance-id": "1", "anthropic-version": "2023-06-01", "x-api-key": "sk-client", "x-backend": ""})
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				convertedPinned(t, h, stream)
				if resp.Header.Get("x-continuum-routing-path") != "disaggregated" || resp.Header.Get("x-continuum-worker") != "20" {
					t.Errorf("reveal headers %v", resp.Header)
				}
				for k := range resp.Header {
					if strings.HasPrefix(strings.ToLower(k), "x-dynamo-") {
						t.Errorf("%s reached the client", k)
					}
				}
				if !stream {
					var m struct {
						Type       string `json:"type"`
						StopReason string `json:"stop_reason"`
						Content    []struct {
							Type, Text string
						} `json:"content"`
						Usage struct {
							InputTokens  int `json:"input_tokens"`
							OutputTokens int `json:"output_tokens"`
						} `json:"usage"`
					}
					if err := json.Unmarshal([]byte(body), &m); err != nil {
						t.Fatal(err)
					}
					if m.Type != "message" || m.StopReason != "max_tokens" || len(m.Content) != 1 || m.Content[0].Text != "tok0 tok1 tok2" ||
						m.Usage.OutputTokens != 3 || m.Usage.InputTokens == 0 {
						t.Errorf("%s", body)
					}
					return
				}
				if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
					t.Errorf("content type %q", ct)
				}
				evs := sse(t, body)
				want := []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta",
					"content_block_stop", "message_delta", "message_stop"}
				if strings.Join(names(evs), " ") != strings.Join(want, " ") {
					t.Fatalf("events %v", names(evs))
				}
				if d := evs[7][1]; !strings.Contains(d, `"stop_reason":"max_tokens"`) || !strings.Contains(d, `"output_tokens":3`) {
					t.Errorf("message_delta %s", d)
				}
			})
		}
	}
}

// TestResponsesPinnedLikeChat: the same for a Responses request.
func TestResponsesPinnedLikeChat(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			resp, body := h.postTo(t, "/v1/responses", responsesBody(stream), map[string]string{"x-dynamo-worker-instance-id": "999", "x-backend": ""})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			convertedPinned(t, h, stream)
			if resp.Header.Get("x-continuum-prefill-worker") != "10" {
				t.Errorf("reveal headers %v", resp.Header)
			}
			if !stream {
				if !strings.Contains(body, `"status":"incomplete"`) || !strings.Contains(body, `"text":"tok0 tok1 tok2"`) || !strings.Contains(body, `"output_tokens":3`) {
					t.Errorf("%s", body)
				}
				return
			}
			evs := sse(t, body)
			if n := names(evs); n[0] != "response.created" || n[1] != "response.in_progress" || n[len(n)-1] != "response.incomplete" {
				t.Fatalf("events %v", n)
			}
			for i, e := range evs {
				if !strings.Contains(e[1], fmt.Sprintf(`"sequence_number":%d}`, i)) {
					t.Errorf("event %d: %s", i, e[1])
				}
			}
			if promtest.ToFloat64(h.metrics.DisaggRequests.WithLabelValues(shim.PathDisaggregated)) != 1 ||
				promtest.ToFloat64(h.metrics.Requests.WithLabelValues("/v1/responses", "2xx")) != 1 {
				t.Error("the request was not counted")
			}
		})
	}
}

// TestConvertedPrefillRefusal503: the direct-mode refusal of a buffered
// request or a non-2xx stream head is 503
// disaggregated_prefill_decode_unavailable in each ingress's error shape,
// never retried nor fallen back from.
func TestConvertedPrefillRefusal503(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/v1/messages", "/v1/responses"} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", path, stream), func(t *testing.T) {
				t.Parallel()
				h := newHarness(t, func(c *config.Config) { c.DisaggregatedServing.FallbackToUnified = true })
				h.reducer.Delete("v1/instances/dynamo/prefill/generate/a")
				h.reg.Publish(h.reducer.Build(t0))
				body := messagesBody(stream)
				if path == "/v1/responses" {
					body = responsesBody(stream)
				}
				resp, got := h.postTo(t, path, body, nil)
				if resp.StatusCode != http.StatusServiceUnavailable {
					t.Fatalf("status %d: %s", resp.StatusCode, got)
				}
				if path == "/v1/messages" {
					var e struct {
						Type  string `json:"type"`
						Error struct {
							Type, Message string
						} `json:"error"`
					}
					if json.Unmarshal([]byte(got), &e) != nil || e.Type != "error" || e.Error.Type != "disaggregated_prefill_decode_unavailable" || e.Error.Message == "" {
						t.Errorf("%s", got)
					}
				} else {
					var e openAIError
					if json.Unmarshal([]byte(got), &e) != nil || e.Error.Code != "disaggregated_prefill_decode_unavailable" || e.Error.Type != "server_error" {
						t.Errorf("%s", got)
					}
				}
				if n := len(h.fe.Requests()); n != 1 || len(*h.plain) != 0 {
					t.Errorf("%d attempts, %d fallbacks", n, len(*h.plain))
				}
				if promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("orchestration")) != 1 {
					t.Error("orchestration error not counted")
				}
			})
		}
	}
}

// TestConvertedRefusalInsideStream: a refusal inside an open 200 stream is
// relayed: as an error event (Messages), as response.failed (Responses).
func TestConvertedRefusalInsideStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.fe.RejectInStream = true
	h.reducer.Delete("v1/instances/dynamo/prefill/generate/a")
	h.reg.Publish(h.reducer.Build(t0))
	resp, body := h.postTo(t, "/v1/messages", messagesBody(true), nil)
	evs := sse(t, body)
	if resp.StatusCode != 200 || len(evs) != 3 || evs[2][0] != "error" || !strings.Contains(evs[2][1], "Prefill worker ID required") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	resp, body = h.postTo(t, "/v1/responses", responsesBody(true), nil)
	evs = sse(t, body)
	if resp.StatusCode != 200 || len(evs) != 3 || evs[2][0] != "response.failed" || !strings.Contains(evs[2][1], "Prefill worker ID required") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	// Each stream went out whole, and each request counts as the failure
	// its error event told of: a 5xx, a decode error of the dispatch.
	for _, path := range []string{"/v1/messages", "/v1/responses"} {
		if ok, failed := promtest.ToFloat64(h.metrics.Requests.WithLabelValues(path, "2xx")), promtest.ToFloat64(h.metrics.Requests.WithLabelValues(path, "5xx")); ok != 0 || failed != 1 {
			t.Errorf("%s: %v answers counted 2xx, %v 5xx; want 0 and 1", path, ok, failed)
		}
	}
	if n := promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues(shim.PhaseDecode)); n != 2 {
		t.Errorf("%v decode errors counted, want 2", n)
	}
}

// TestConvertedDecodeFailure: a failed pinned dispatch falls back to a
// unified backend when configured (its chat answer converted), else is 502
// disaggregated_decode_failed in the ingress's shape.
func TestConvertedDecodeFailure(t *testing.T) {
	t.Parallel()
	for _, fallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", fallback), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *config.Config) { c.DisaggregatedServing.FallbackToUnified = fallback })
			h.fe.SetWorkers(model, []uint64{10}, []uint64{99})
			resp, body := h.postTo(t, "/v1/messages", messagesBody(false), nil)
			if fallback {
				if resp.StatusCode != 200 || !strings.Contains(body, `"text":"from the plain backend"`) || !strings.Contains(body, `"type":"message"`) {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				if (*h.plain)[0].Get("x-dynamo-worker-instance-id") != "" {
					t.Error("the fallback carried pins")
				}
				resp, body = h.postTo(t, "/v1/responses", responsesBody(false), nil)
				if resp.StatusCode != 200 || !strings.Contains(body, `"text":"from the plain backend"`) {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				return
			}
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"type":"api_error"`) || !strings.Contains(body, "disaggregated_decode_failed: ") {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
		})
	}
}

// TestConvertedErrors: the router's own refusals and upstream errors in
// each ingress's error shape.
func TestConvertedErrors(t *testing.T) {
	t.Parallel()
	const key = "sk-client-3"
	h := newHarness(t, func(c *config.Config) {
		c.Backends[1].Models = []string{"plain-model"} // no catch-all backend
		c.APIKeys = []config.APIKey{{KeyHash: "sha256:" + sha256hex(key), RateLimit: &config.RateLimit{RequestsPerSecond: 0.001, Burst: 2}}}
	})
	anthropicErr := func(body string) (string, string) {
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type, Message string
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Type != "error" {
			t.Fatalf("not a Messages error: %s", body)
		}
		return e.Error.Type, e.Error.Message
	}
	resp, body := h.postTo(t, "/v1/messages", messagesBody(false), nil)
	if typ, _ := anthropicErr(body); resp.StatusCode != 401 || typ != "authentication_error" {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	// The request id is where the Anthropic SDKs read it too.
	if id := resp.Header.Get("Request-Id"); id == "" || id != resp.Header.Get("X-Request-Id") {
		t.Fatalf("request-id %q, x-request-id %q", id, resp.Header.Get("X-Request-Id"))
	}
	// x-api-key is a credential as Authorization: Bearer is.
	auth := map[string]string{"x-api-key": key}
	resp, body = h.postTo(t, "/v1/messages", `{"model":"no-such-model","max_tokens":3,"messages":[{"role":"user","content":"x"}]}`, auth)
	if typ, msg := anthropicErr(body); resp.StatusCode != 404 || typ != "not_found_error" || !strings.Contains(msg, "no-such-model") {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, body)
	}
	resp, body = h.postTo(t, "/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, auth)
	if typ, msg := anthropicErr(body); resp.StatusCode != 400 || typ != "invalid_request_error" || msg != "max_tokens: Field required" {
		t.Fatalf("no max_tokens: %d %s", resp.StatusCode, body)
	}
	resp, body = h.postTo(t, "/v1/messages", `{"model":`, auth)
	if typ, _ := anthropicErr(body); resp.StatusCode != 429 || typ != "rate_limit_error" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("rate limit: %d %s", resp.StatusCode, body)
	}

	h = newHarness(t, func(c *config.Config) { c.Backends[1].Models = []string{"plain-model"} })
	resp, body = h.postTo(t, "/v1/responses", `{"model":"no-such-model","input":"x"}`, nil)
	var e openAIError
	if resp.StatusCode != 404 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "model_not_found" {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, body)
	}
	resp, body = h.postTo(t, "/v1/responses", fmt.Sprintf(`{"model":%q,"input":"x","previous_response_id":"resp_1"}`, model), nil)
	if resp.StatusCode != 400 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Param == nil || *e.Error.Param != "previous_response_id" {
		t.Fatalf("previous_response_id: %d %s", resp.StatusCode, body)
	}
	// A 4xx stream head is relayed, converted.
	h.fe.Status = http.StatusBadRequest
	resp, body = h.postTo(t, "/v1/messages", messagesBody(true), nil)
	if typ, msg := anthropicErr(body); resp.StatusCode != 400 || typ != "invalid_request_error" || msg != "Bad Request" {
		t.Fatalf("upstream 400: %d %s", resp.StatusCode, body)
	}
	// The Responses ingress relays an OpenAI-shaped upstream error as it is.
	resp, body = h.postTo(t, "/v1/responses", responsesBody(true), nil)
	var upstream struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if resp.StatusCode != 400 || json.Unmarshal([]byte(body), &upstream) != nil || upstream.Error.Message != "Bad Request" {
		t.Fatalf("upstream 400: %d %s", resp.StatusCode, body)
	}
}

// TestCountTokens: count_tokens renders the converted request for the
// Dynamo model; without a counter, or without the model's artifacts, 501;
// a render that failed 503, a prompt too large 413.
func TestCountTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	resp, body := h.postTo(t, "/v1/messages/count_tokens", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"x"}]}`, model), nil)
	if resp.StatusCode != 501 || !strings.Contains(body, "dynamo.kv.enabled") || !strings.Contains(body, `"type":"error"`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var mu sync.Mutex
	var gotModel string
	var gotBody []byte
	h = newHarnessWith(t, func(c *config.Config) {
		c.Backends[1].Models = []string{"plain-model"}
		c.Dynamo.Shim.ModelMap = map[string]string{"qwen3": model}
	}, func(o *router.Options) {
		o.CountTokens = func(m string, b []byte) (int, string) {
			mu.Lock()
			defer mu.Unlock()
			gotModel, gotBody = m, b
			switch {
			case strings.Contains(string(b), "unloaded"):
				return 0, "tokenizer_unavailable"
			case strings.Contains(string(b), "busy"):
				return 0, "render_unavailable"
			case strings.Contains(string(b), "loading"):
				return 0, router.CountTokensLoading
			case strings.Contains(string(b), "huge"):
				return 0, "prompt_too_large"
			}
			return 42, ""
		}
	})
	resp, body = h.postTo(t, "/anthropic/v1/messages/count_tokens", `{"model":"qwen3","system":"S","messages":[{"role":"user","content":"x"}]}`, nil)
	if resp.StatusCode != 200 || strings.TrimSpace(body) != `{"input_tokens":42}` {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	mu.Lock()
	if gotModel != model || string(gotBody) != `{"model":"qwen3","messages":[{"role":"system","content":"S"},{"role":"user","content":"x"}]}` {
		t.Errorf("counted %s for %s", gotBody, gotModel)
	}
	mu.Unlock()
	resp, body = h.postTo(t, "/v1/messages/count_tokens", `{"model":"qwen3","messages":[{"role":"user","content":"unloaded"}]}`, nil)
	if resp.StatusCode != 501 || !strings.Contains(body, "tokenizer_unavailable") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	// A render that failed for this request or this moment is no missing
	// endpoint: 503 overloaded (try again), 413 for a prompt past the
	// render's bounds.
	resp, body = h.postTo(t, "/v1/messages/count_tokens", `{"model":"qwen3","messages":[{"role":"user","content":"busy"}]}`, nil)
	if resp.StatusCode != 503 || !strings.Contains(body, `"type":"overloaded_error"`) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("render failed: %d %s", resp.StatusCode, body)
	}
	// Artifacts still loading: a moment's wait, not a missing artifact.
	resp, body = h.postTo(t, "/v1/messages/count_tokens", `{"model":"qwen3","messages":[{"role":"user","content":"loading"}]}`, nil)
	if resp.StatusCode != 503 || !strings.Contains(body, "still loading") || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("loading: %d %s", resp.StatusCode, body)
	}
	resp, body = h.postTo(t, "/v1/messages/count_tokens", `{"model":"qwen3","messages":[{"role":"user","content":"huge"}]}`, nil)
	if resp.StatusCode != 413 || !strings.Contains(body, `"type":"request_too_large"`) {
		t.Fatalf("too large: %d %s", resp.StatusCode, body)
	}
	resp, body = h.postTo(t, "/v1/messages/count_tokens", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, nil)
	if resp.StatusCode != 404 || !strings.Contains(body, "not_found_error") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// recordingPicker records what each pick was asked.
type recordingPicker struct {
	pick.Picker
	mu   sync.Mutex
	reqs []pick.Request
}

func (p *recordingPicker) Reserve(snap *fleet.Snapshot, req pick.Request, now time.Time) (pick.Pin, pick.Ticket, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.mu.Unlock()
	return p.Picker.Reserve(snap, req, now)
}

func (p *recordingPicker) requests() []pick.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]pick.Request(nil), p.reqs...)
}

// nativeBackend records Responses requests and answers them.
type nativeBackend struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []*http.Request
	body [][]byte
}

func newNativeBackend(t *testing.T) *nativeBackend {
	nb := &nativeBackend{}
	nb.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		b, _ := io.ReadAll(r.Body)
		nb.mu.Lock()
		nb.seen = append(nb.seen, r)
		nb.body = append(nb.body, b)
		nb.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("x-dynamo-served-by", "native")
		_, _ = io.WriteString(w, `{"id":"resp_native","object":"response","status":"completed","output":[]}`)
	}))
	t.Cleanup(nb.srv.Close)
	return nb
}

// TestResponsesNativePassthrough: with responses_api: native a shim
// replica gets the Responses body as it is (the client's token data and
// pins removed), pinned by the model alone: the picker is asked without a
// body or a prompt size, and books the dispatch at the input's estimate. Compaction goes unpinned to a native plain backend, else 501.
func TestResponsesNativePassthrough(t *testing.T) {
	t.Parallel()
	nb := newNativeBackend(t)
	var rp *recordingPicker
	h := newHarnessWith(t, func(c *config.Config) {
		c.Backends[0].URL = nb.srv.URL
		c.Backends[0].ResponsesAPI = config.ResponsesAPINative
	}, func(o *router.Options) {
		rp = &recordingPicker{Picker: pick.NewLoadBased(o.Store)}
		o.Picker = rp
	})
	body := fmt.Sprintf(`{"model":%q,"instructions":%q,"input":[{"type":"item_reference","id":"msg_1"},{"role":"user","content":%q}],"tools":[{"type":"web_search"}],"nvext":{"token_data":[1],"x":1}}`,
		model, strings.Repeat("Be terse. ", 100), strings.Repeat("word ", 400))
	resp, got := h.postTo(t, "/v1/responses", body, map[string]string{"x-dynamo-worker-instance-id": "999", "x-backend": ""})
	if resp.StatusCode != 200 || strings.TrimSpace(got) != `{"id":"resp_native","object":"response","status":"completed","output":[]}` {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	if resp.Header.Get("x-dynamo-served-by") != "" || resp.Header.Get("x-continuum-routing-path") != "disaggregated" {
		t.Errorf("headers %v", resp.Header)
	}
	nb.mu.Lock()
	r, sent := nb.seen[0], nb.body[0]
	nb.mu.Unlock()
	if r.URL.Path != "/v1/responses" || r.Header.Get("x-dynamo-worker-instance-id") != "20" || r.Header.Get("x-dynamo-prefill-instance-id") != "10" {
		t.Errorf("path %s headers %v", r.URL.Path, r.Header)
	}
	if want := fmt.Sprintf(`{"model":%q,"instructions":%q,"input":[{"type":"item_reference","id":"msg_1"},{"role":"user","content":%q}],"tools":[{"type":"web_search"}],"nvext":{"x":1}}`,
		model, strings.Repeat("Be terse. ", 100), strings.Repeat("word ", 400)); string(sent) != want {
		t.Errorf("sent %s\nwant %s", sent, want)
	}
	reqs := rp.requests()
	if len(reqs) != 1 || reqs[0].Body != nil || reqs[0].EstPromptTokens != 0 || reqs[0].BookTokens < 400 || reqs[0].Path != "/v1/responses" || reqs[0].Model != model {
		t.Errorf("picked with %+v", reqs)
	}

	// A converted request is picked on its converted chat body.
	var rp2 *recordingPicker
	h2 := newHarnessWith(t, nil, func(o *router.Options) {
		rp2 = &recordingPicker{Picker: pick.NewLoadBased(o.Store)}
		o.Picker = rp2
	})
	resp, got = h2.postTo(t, "/v1/messages", messagesBody(false), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	if reqs := rp2.requests(); len(reqs) != 1 || reqs[0].Path != "/v1/chat/completions" || !bytes.Equal(reqs[0].Body, h2.fe.Requests()[0].Body) {
		t.Errorf("picked with %+v, sent %s", reqs, h2.fe.Requests()[0].Body)
	}

	// Compaction: none native unpinned; then a native plain backend.
	resp, got = h2.postTo(t, "/v1/responses/compact", fmt.Sprintf(`{"model":%q,"input":"x"}`, model), nil)
	if resp.StatusCode != 501 || !strings.Contains(got, "responses_api: native") {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	plainNative := newNativeBackend(t)
	h3 := newHarness(t, func(c *config.Config) {
		c.Backends[1].URL = plainNative.srv.URL
		c.Backends[1].ResponsesAPI = config.ResponsesAPINative
	})
	resp, got = h3.postTo(t, "/v1/responses/compact", fmt.Sprintf(`{"model":%q,"input":"x"}`, model), map[string]string{"x-backend": ""})
	if resp.StatusCode != 200 || resp.Header.Get("x-continuum-routing-path") != "unified" {
		t.Fatalf("status %d: %s %v", resp.StatusCode, got, resp.Header)
	}
	plainNative.mu.Lock()
	if r := plainNative.seen[0]; r.URL.Path != "/v1/responses/compact" || r.Header.Get("x-dynamo-worker-instance-id") != "" {
		t.Errorf("compaction %s %v", r.URL.Path, r.Header)
	}
	plainNative.mu.Unlock()
	if len(h3.fe.Requests()) != 0 {
		t.Error("compaction went through the shim")
	}
	// The Responses ingress still converts for the chat replica: the native
	// backend is a plain one, and the model's workers are pinned.
	resp, got = h3.postTo(t, "/v1/responses", responsesBody(false), nil)
	if resp.StatusCode != 200 || !strings.Contains(got, `"object":"response"`) || len(h3.fe.Requests()) != 1 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	// A body passed on as it is is routed by the member the backend
	// reads, "model" exactly: a "Model" beside it names nothing, and a
	// backend's models list (the key's policy too) is judged by "model".
	listed := newNativeBackend(t)
	h4 := newHarness(t, func(c *config.Config) {
		c.Backends[1].URL = listed.srv.URL
		c.Backends[1].ResponsesAPI = config.ResponsesAPINative
		c.Backends[1].Models = []string{"cheap"}
	})
	for _, path := range []string{"/v1/responses/compact", "/v1/responses"} {
		resp, got = h4.postTo(t, path, `{"model":"expensive","Model":"cheap","input":"x"}`, nil)
		if resp.StatusCode == 200 {
			t.Errorf("%s: routed by Model: %s", path, got)
		}
	}
	listed.mu.Lock()
	if n := len(listed.seen); n != 0 {
		t.Errorf("the backend serving only cheap got %d requests for expensive", n)
	}
	listed.mu.Unlock()
}

// TestPrefillRefusalKeepsBreakerClosed: a frontend that refuses pins for
// want of a prefill worker is up (the router's fleet view is behind), so
// refusals, however many, never open its breaker: each request still
// reaches it and gets the 503, none falls back to the plain backend.
func TestPrefillRefusalKeepsBreakerClosed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) { c.DisaggregatedServing.FallbackToUnified = true })
	h.reducer.Delete("v1/instances/dynamo/prefill/generate/a")
	h.reg.Publish(h.reducer.Build(t0))
	for i := range 8 {
		if resp := h.post(t, chat(false), nil); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, readAll(t, resp))
		}
	}
	if n := len(h.fe.Requests()); n != 8 || len(*h.plain) != 0 {
		t.Errorf("%d requests reached the frontend, %d the plain backend; want 8 and 0", n, len(*h.plain))
	}
}

// TestNativeResponsesPrefillRefusal503: a native /v1/responses passthrough
// the direct-mode frontend refuses for want of a prefill id (a buffered
// answer, or a non-2xx head of a stream) is 503
// disaggregated_prefill_decode_unavailable in the Responses (OpenAI) error
// shape, counted as an orchestration error and neither retried nor fallen
// back from.
func TestNativeResponsesPrefillRefusal503(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int32
			fe := failingFrontend(t, http.StatusServiceUnavailable,
				`{"error":{"message":"Prefill worker ID required in Direct routing mode but none found in request.","type":"Service Unavailable","code":503}}`, &hits)
			h := newHarness(t, func(c *config.Config) {
				c.Backends[0].URL = fe.URL
				c.Backends[0].ResponsesAPI = config.ResponsesAPINative
				c.Backends[1].ResponsesAPI = config.ResponsesAPINative
				c.DisaggregatedServing.FallbackToUnified = true
			})
			resp, got := h.postTo(t, "/v1/responses", fmt.Sprintf(`{"model":%q,"input":"x","stream":%v}`, model, stream), nil)
			var e openAIError
			if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal([]byte(got), &e) != nil ||
				e.Error.Code != "disaggregated_prefill_decode_unavailable" || e.Error.Type != "server_error" {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			if hits.Load() != 1 || len(*h.plain) != 0 {
				t.Errorf("%d attempts, %d fallbacks", hits.Load(), len(*h.plain))
			}
			if promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("orchestration")) != 1 {
				t.Error("orchestration error not counted")
			}
		})
	}
}

// TestBufferedAnswerTooLarge: an answer the router must hold whole to
// convert or inspect, larger than it holds (64 MiB), is a 502 that says
// so, not a relayed 2xx cut at the bound.
func TestBufferedAnswerTooLarge(t *testing.T) {
	t.Parallel()
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		chunk := bytes.Repeat([]byte(" "), 1<<20)
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]`))
		for range 65 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = w.Write([]byte("}"))
	}))
	t.Cleanup(huge.Close)
	h := newHarness(t, func(c *config.Config) {
		c.Backends = append(c.Backends, config.Backend{Name: "huge", Type: "openai", URL: huge.URL, Role: config.RoleUnified,
			Enabled: true, Timeout: config.Duration(30 * time.Second), Models: []string{"huge-model"}})
	})
	resp, body := h.postTo(t, "/v1/messages", `{"model":"huge-model","max_tokens":3,"messages":[{"role":"user","content":"x"}]}`, nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "too large") {
		t.Fatalf("a 65 MiB answer to convert: %d %.300s", resp.StatusCode, body)
	}
}

// streamBackend serves serve's event streams to the POSTs it gets (the
// router's health checks, GETs, get an empty 200); its URL.
func streamBackend(t *testing.T, serve func(w http.ResponseWriter, r *http.Request)) string {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		serve(w, r)
	}))
	t.Cleanup(be.Close)
	return be.URL
}

// TestConvertedStreamKeepsItsConnection: a Messages or Responses stream
// returns at the backend's data: [DONE] (or its error event), and the end of the backend's
// chunked body, written a moment later, is read too, so that the backend's
// connection carries the next request; a backend that keeps its stream
// open after [DONE] delays the client's answer by a bounded wait, no more.
func TestConvertedStreamKeepsItsConnection(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		conns = map[string]bool{}
		hold  atomic.Bool
		fail  atomic.Bool
	)
	be := streamBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
		end := "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
		if fail.Load() {
			end = "data: {\"error\":{\"message\":\"engine crashed\",\"code\":503}}\n\n"
		}
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hi\"}}]}\n\n"+
			end+"data: [DONE]\n\n")
		w.(http.Flusher).Flush()
		if hold.Load() {
			<-r.Context().Done() // the body's end never comes
			return
		}
		time.Sleep(2 * time.Millisecond) // the body's end comes in a segment of its own
	})
	cfg := oneBackend(be, time.Minute)
	rt := testutil.LeanServer(t, router.New(router.Options{Config: cfg, Metrics: telemetry.NewRouterMetrics(nil)}).Handler())
	post := func(path, body, last string) {
		t.Helper()
		resp, err := http.Post(rt+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(data), last) {
			t.Fatalf("%s: status %d, %v: %s", path, resp.StatusCode, err, data)
		}
	}
	for range 3 {
		post("/v1/messages", messagesBody(true), "event: message_stop")
		post("/v1/responses", responsesBody(true), "event: response.completed")
	}
	// A stream the backend ends with its own error event (then [DONE])
	// leaves its connection as whole.
	fail.Store(true)
	post("/v1/messages", messagesBody(true), "engine crashed")
	post("/v1/responses", responsesBody(true), "event: response.failed")
	fail.Store(false)
	post("/v1/messages", messagesBody(true), "event: message_stop")
	mu.Lock()
	n := len(conns)
	mu.Unlock()
	// One, or two when a stall of either process (a loaded run) kept a
	// body's end past the wait once; without the reading, nine (three
	// when only streams that end in an error event close theirs).
	if n > 2 {
		t.Errorf("9 streams one after the other came on %d connections, want 1", n)
	}
	hold.Store(true)
	start := time.Now()
	post("/v1/messages", messagesBody(true), "event: message_stop")
	// The backend's timeout is a minute: an answer held for it would be
	// the wait unbounded.
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("a backend holding its stream after [DONE] held the client's answer %v", took)
	}
}

// TestConvertedStreamClientLeaving: a client that leaves a Messages
// stream under way, on a server whose writes to the gone client still
// succeed (net/http's), is counted as gone (499), not as the failure of
// the stream its leaving cut.
func TestConvertedStreamClientLeaving(t *testing.T) {
	t.Parallel()
	be := streamBackend(t, func(w http.ResponseWriter, r *http.Request) {
		for {
			if _, err := io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"more\"}}]}\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	cfg := oneBackend(be, time.Minute)
	metrics := telemetry.NewRouterMetrics(nil)
	rt := httptest.NewServer(router.New(router.Options{Config: cfg, Metrics: metrics}).Handler())
	defer rt.Close()
	resp, err := http.Post(rt.URL+"/v1/messages", "application/json", strings.NewReader(messagesBody(true)))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for deltas := 0; deltas < 3; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended early: %v", err)
		}
		if strings.HasPrefix(line, "event: content_block_delta") {
			deltas++
		}
	}
	_ = resp.Body.Close() // leaves mid-stream
	count := func(class string) float64 {
		return promtest.ToFloat64(metrics.Requests.WithLabelValues("/v1/messages", class))
	}
	testutil.Eventually(t, 10*time.Second, "the request counted", func() bool { return count("4xx")+count("5xx")+count("2xx") > 0 })
	if count("4xx") != 1 || count("5xx") != 0 || count("2xx") != 0 {
		t.Errorf("2xx %v, 4xx %v, 5xx %v: a client that left was counted otherwise than 499", count("2xx"), count("4xx"), count("5xx"))
	}
}

// TestConvertedStreamFailuresLogBounded: a backend that fails every stream
// with its error event gets a warning a second, not one per request.
func TestConvertedStreamFailuresLogBounded(t *testing.T) {
	t.Parallel()
	be := streamBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "data: {\"error\":{\"message\":\"engine crashed\",\"code\":503}}\n\ndata: [DONE]\n\n")
	})
	var logs testutil.SyncBuffer
	rt := testutil.LeanServer(t, router.New(router.Options{Config: oneBackend(be, time.Minute), Metrics: telemetry.NewRouterMetrics(nil),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}).Handler())
	const n = 10
	for range n {
		resp, err := http.Post(rt+"/v1/messages", "application/json", strings.NewReader(messagesBody(true)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	// One a second: ten requests take far less than ten seconds.
	if lines := strings.Count(logs.String(), "the client was told in its stream"); lines < 1 || lines >= n {
		t.Errorf("%d warnings for %d failed streams", lines, n)
	}
}

// TestConvertedStreamErrorNamesNoAddress: a converted stream the backend
// breaks off (a reset) ends with the ingress's error event, which names no
// address of the backend's (any client reads it, not only one that asked
// to see backends).
func TestConvertedStreamErrorNamesNoAddress(t *testing.T) {
	t.Parallel()
	const ev = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	sb := newScriptBackend(t, func(c net.Conn, _, _ int) bool {
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(ev), ev)
		time.Sleep(50 * time.Millisecond)
		_ = c.(*net.TCPConn).SetLinger(0) // a reset, not a clean close
		_ = c.Close()
		return false
	})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(sb.url, "http://"))
	rt := testutil.LeanServer(t, router.New(router.Options{Config: oneBackend(sb.url, time.Minute), Metrics: telemetry.NewRouterMetrics(nil)}).Handler())
	for _, p := range []struct{ path, body, last string }{
		{"/v1/messages", `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`, "event: error"},
		{"/v1/responses", `{"model":"m","stream":true,"input":"x"}`, "event: response.failed"},
	} {
		resp, err := http.Post(rt+p.path, "application/json", strings.NewReader(p.body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		i := strings.Index(string(body), p.last)
		if i < 0 {
			t.Fatalf("%s: no error event: %s", p.path, body)
		}
		if tail := string(body[i:]); strings.Contains(tail, "127.0.0.1") || strings.Contains(tail, ":"+port) || !strings.Contains(tail, "reading the upstream stream") {
			t.Errorf("%s: %s", p.path, tail)
		}
	}
}

// nativeResponsesEvents is a native Responses stream whole to its final
// event, which is no data: [DONE].
const nativeResponsesEvents = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"output\":[]}}\n\n" +
	"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"output\":[]}}\n\n"

// TestNativeResponsesStreamBrokenAfterFinal: a backend that breaks the
// connection after a native Responses stream's final event
// (response.completed, no data: [DONE]) does not cut the client's whole
// answer. (A client leaving after it: TestStreamServedWhenTheClientLeavesAfterDone.)
func TestNativeResponsesStreamBrokenAfterFinal(t *testing.T) {
	t.Parallel()
	sb := newScriptBackend(t, func(c net.Conn, _, _ int) bool {
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n",
			len(nativeResponsesEvents), nativeResponsesEvents)
		return false // closed without the chunked body's end
	})
	cfg := oneBackend(sb.url, time.Minute)
	cfg.Backends[0].ResponsesAPI = config.ResponsesAPINative
	rt := testutil.LeanServer(t, router.New(router.Options{Config: cfg, Metrics: telemetry.NewRouterMetrics(nil)}).Handler())
	resp, err := http.Post(rt+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","stream":true,"input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || !strings.Contains(string(body), "response.completed") {
		t.Errorf("a stream whole to its final event was cut for the client: %v (%d bytes)", err, len(body))
	}
}

// TestConvertedBodyTypeErrors: a Messages or Responses body whose member
// has the wrong JSON type is refused naming the member and the type it
// must have, not the router's Go types.
func TestConvertedBodyTypeErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, c := range []struct{ path, body, want string }{
		{"/v1/messages", `{"model":"m","max_tokens":"5","messages":[]}`, "max_tokens must be an integer, not a string"},
		{"/v1/messages", `{"model":"m","max_tokens":5,"messages":{}}`, "messages must be an array, not an object"},
		{"/v1/messages/count_tokens", `{"model":"m","messages":[],"stop_sequences":"x"}`, "stop_sequences must be an array, not a string"},
		{"/v1/messages", `[1,2]`, "not a valid Messages request: it must be a JSON object, not an array"},
		{"/v1/messages", `{"model":`, "not a valid Messages request: it is not valid JSON: unexpected end of JSON input"},
		{"/v1/responses", `{"model":"m","input":"hi","max_output_tokens":1.5}`, "max_output_tokens must be an integer, not the number 1.5"},
		{"/v1/responses", `{"model":"m","input":"hi","stream":"yes"}`, "stream must be a boolean, not a string"},
	} {
		resp, body := h.postTo(t, c.path, c.body, nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, c.want) || strings.Contains(body, "Go ") {
			t.Errorf("%s %s: %d %s, want 400 saying %q", c.path, c.body, resp.StatusCode, body, c.want)
		}
	}
}
