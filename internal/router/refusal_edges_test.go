package router_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/fleetsim"
)

// TestPrefillRefusalAnyErrorStatus: a buffered chat
// request the frontend refuses with the direct-mode message (as itself,
// whatever error status carries it) is 503
// disaggregated_prefill_decode_unavailable, not retried, counted in phase
// orchestration.
func TestPrefillRefusalAnyErrorStatus(t *testing.T) {
	t.Parallel()
	for _, status := range []int{400, 422, 500, 503} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int32
			fe := failingFrontend(t, status, `{"error":{"message":"`+fleetsim.PrefillRequiredError+`","type":"x","code":`+fmt.Sprint(status)+`}}`, &hits)
			h := newHarness(t, func(c *config.Config) {
				c.Backends[0].URL = fe.URL
				c.DisaggregatedServing.FallbackToUnified = true
			})
			resp := h.post(t, chat(false), nil)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"disaggregated_prefill_decode_unavailable"`) {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if hits.Load() != 1 || len(*h.plain) != 0 {
				t.Errorf("%d attempts, %d fallbacks", hits.Load(), len(*h.plain))
			}
			if promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("orchestration")) != 1 {
				t.Error("orchestration not counted")
			}
		})
	}
}

// TestAnthropicPrefixedRouteRefusal: the Anthropic
// ingress on /anthropic/v1/messages maps the direct-mode refusal (buffered
// and non-2xx stream head) to 503 in the Anthropic error shape.
func TestAnthropicPrefixedRouteRefusal(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint(stream), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *config.Config) { c.DisaggregatedServing.FallbackToUnified = true })
			h.reducer.Delete("v1/instances/dynamo/prefill/generate/a")
			h.reg.Publish(h.reducer.Build(t0))
			resp, got := h.postTo(t, "/anthropic/v1/messages", messagesBody(stream), nil)
			var e struct {
				Type  string `json:"type"`
				Error struct{ Type, Message string }
			}
			if resp.StatusCode != 503 || json.Unmarshal([]byte(got), &e) != nil || e.Type != "error" || e.Error.Type != "disaggregated_prefill_decode_unavailable" {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
		})
	}
}

// TestConvertedStreamOther4xxRelayed: for a streaming
// request only transport failures, 5xx, 429 and 408 before the stream
// starts fall back; another 4xx is passed on (Messages and Responses
// streams alike), not fallen back from. A buffered request's 4xx is a
// shim failure and falls back when fallback_to_unified is on.
func TestConvertedStreamOther4xxRelayed(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/v1/messages", "/v1/responses"} {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s stream=%v", path, stream), func(t *testing.T) {
				t.Parallel()
				var hits atomic.Int32
				fe := failingFrontend(t, 400, `{"error":{"message":"max_tokens too large","type":"BadRequestError","code":400}}`, &hits)
				h := newHarness(t, func(c *config.Config) {
					c.Backends[0].URL = fe.URL
					c.DisaggregatedServing.FallbackToUnified = true
				})
				body := messagesBody(stream)
				if path == "/v1/responses" {
					body = responsesBody(stream)
				}
				resp, got := h.postTo(t, path, body, nil)
				if stream {
					if resp.StatusCode != 400 || len(*h.plain) != 0 {
						t.Fatalf("status %d, %d fallbacks: %s", resp.StatusCode, len(*h.plain), got)
					}
					return
				}
				if len(*h.plain) != 1 {
					t.Fatalf("buffered 4xx: status %d, %d fallbacks: %s", resp.StatusCode, len(*h.plain), got)
				}
				if promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("decode")) != 1 {
					t.Error("decode error not counted")
				}
			})
		}
	}
}

// TestStreamTransportFailureFallsBack: a streaming
// request whose shim replicas cannot be reached (a transport failure
// before the stream starts) is counted in phase decode and falls back
// to unified when fallback_to_unified is on, else is answered
// disaggregated_decode_failed.
func TestStreamTransportFailureFallsBack(t *testing.T) {
	t.Parallel()
	for _, fallback := range []bool{true, false} {
		t.Run(fmt.Sprint(fallback), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, func(c *config.Config) {
				c.Backends[0].URL = closedURL(t)
				c.DisaggregatedServing.FallbackToUnified = fallback
			})
			resp := h.post(t, chat(true), nil)
			body := readAll(t, resp)
			if fallback {
				if resp.StatusCode != 200 || len(*h.plain) != 1 {
					t.Fatalf("status %d, %d fallbacks: %s", resp.StatusCode, len(*h.plain), body)
				}
				if (*h.plain)[0].Get("x-dynamo-worker-instance-id") != "" {
					t.Error("the fallback carried pin headers")
				}
			} else if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"code":"disaggregated_decode_failed"`) {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("decode")) != 1 {
				t.Error("decode error not counted")
			}
		})
	}
}

// TestNativeResponsesRefusalInsideStreamRelayed: a
// direct-mode refusal inside an already open 200 stream of a native
// /v1/responses passthrough is relayed as it came (200), not turned
// into a 503.
func TestNativeResponsesRefusalInsideStreamRelayed(t *testing.T) {
	t.Parallel()
	fe := fixedStreamFrontend(t, "event: error\ndata: {\"type\":\"error\",\"message\":\""+fleetsim.PrefillRequiredError+"\"}\n\n")
	h := newHarness(t, func(c *config.Config) {
		c.Backends[0].URL = fe.URL
		c.Backends[0].ResponsesAPI = config.ResponsesAPINative
		c.Backends[1].ResponsesAPI = config.ResponsesAPINative
		c.DisaggregatedServing.FallbackToUnified = true
	})
	resp, got := h.postTo(t, "/v1/responses", fmt.Sprintf(`{"model":%q,"input":"x","stream":true}`, model), nil)
	if resp.StatusCode != 200 || !strings.Contains(got, "Prefill worker ID required") || len(*h.plain) != 0 {
		t.Fatalf("status %d, %d fallbacks: %s", resp.StatusCode, len(*h.plain), got)
	}
}

// TestRefusalNotRetriedOnAnotherReplica: the direct-mode
// refusal is not retried: with two shim replicas, only one is asked, for
// chat and the converted and native ingresses alike.
func TestRefusalNotRetriedOnAnotherReplica(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/v1/chat/completions", "/v1/messages", "/v1/responses"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int32
			body := `{"error":{"message":"` + fleetsim.PrefillRequiredError + `","type":"Internal Server Error","code":500}}`
			fe1 := failingFrontend(t, 500, body, &hits)
			fe2 := failingFrontend(t, 500, body, &hits)
			h := newHarness(t, func(c *config.Config) {
				c.Backends[0].URL = fe1.URL
				c.Backends = append(c.Backends, config.Backend{Name: "fe2", Type: "openai", URL: fe2.URL, Role: config.RoleUnified, Enabled: true, Timeout: c.Backends[0].Timeout})
				c.Dynamo.Shim.Backends = []string{"fe", "fe2"}
				c.DisaggregatedServing.FallbackToUnified = true
			})
			var resp *http.Response
			var got string
			switch path {
			case "/v1/chat/completions":
				resp, got = h.postTo(t, path, chat(false), nil)
			case "/v1/messages":
				resp, got = h.postTo(t, path, messagesBody(false), nil)
			default:
				resp, got = h.postTo(t, path, responsesBody(false), nil)
			}
			if resp.StatusCode != 503 || !strings.Contains(got, "disaggregated_prefill_decode_unavailable") {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			if hits.Load() != 1 || len(*h.plain) != 0 {
				t.Errorf("%d replicas asked, %d fallbacks; want 1 and 0", hits.Load(), len(*h.plain))
			}
		})
	}
}

// TestRelayedErrorHidesDynamoHeaders: x-dynamo-* headers
// never reach the client, a relayed error answer's included, and worker
// or backend ids only for a client that sent x-backend.
func TestRelayedErrorHidesDynamoHeaders(t *testing.T) {
	t.Parallel()
	fe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		w.Header().Set("X-Dynamo-Worker-Instance-Id", "20")
		w.Header().Set("x-dynamo-prefill-instance-id", "10")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"error":{"message":"bad","type":"BadRequestError","code":400}}`)
	}))
	t.Cleanup(fe.Close)
	h := newHarness(t, func(c *config.Config) {
		c.Backends[0].URL = fe.URL
		c.DisaggregatedServing.FallbackToUnified = true
	})
	for _, path := range []string{"/v1/chat/completions", "/v1/messages", "/v1/responses"} {
		body := chat(true)
		switch path {
		case "/v1/messages":
			body = messagesBody(true)
		case "/v1/responses":
			body = responsesBody(true)
		}
		resp, got := h.postTo(t, path, body, nil)
		if resp.StatusCode != 400 {
			t.Fatalf("%s: status %d: %s", path, resp.StatusCode, got)
		}
		for k := range resp.Header {
			lk := strings.ToLower(k)
			if strings.HasPrefix(lk, "x-dynamo-") || lk == "x-continuum-worker" || lk == "x-continuum-backend" {
				t.Errorf("%s: header %s reached a client that sent no x-backend", path, k)
			}
		}
	}
}
