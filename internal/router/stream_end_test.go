package router_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestPinnedStreamEndedWithoutDone: a frontend that gives up on a stream
// (its engine gone, its inactivity timeout) ends it in good order without
// its [DONE] or an error event: the client's answer was cut short, a
// failure of the decode, not a served request.
func TestPinnedStreamEndedWithoutDone(t *testing.T) {
	t.Parallel()
	stream := `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok0"}}]}` + "\n\n"
	fe := fixedStreamFrontend(t, stream)
	h := newHarness(t, func(c *config.Config) { c.Backends[0].URL = fe.URL })
	resp := h.post(t, chat(true), nil)
	if body := readAll(t, resp); body != stream {
		t.Fatalf("%d, relayed %q", resp.StatusCode, body)
	}
	testutil.Eventually(t, 5*time.Second, "the request counted", func() bool {
		return promtest.ToFloat64(h.metrics.Requests.WithLabelValues("/v1/chat/completions", "5xx"))+
			promtest.ToFloat64(h.metrics.Requests.WithLabelValues("/v1/chat/completions", "2xx")) == 1
	})
	if got := promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("decode")); got != 1 {
		t.Errorf("decode errors %v, want 1", got)
	}
	if ok := promtest.ToFloat64(h.metrics.Requests.WithLabelValues("/v1/chat/completions", "2xx")); ok != 0 {
		t.Errorf("counted %v 2xx for a stream that ended without its [DONE]", ok)
	}
}

// TestNativeResponsesFailedCounted: a native Responses stream that ends
// with response.failed is relayed as it came and counted as failed, as a
// converted one is.
func TestNativeResponsesFailedCounted(t *testing.T) {
	t.Parallel()
	created := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[]}}\n\n"
	failed := "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"Internal server error\"},\"output\":[]}}\n\n"
	stream := created + failed + "data: [DONE]\n\n"
	be := streamBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, stream)
	})
	cfg := oneBackend(be, time.Minute)
	cfg.Backends[0].ResponsesAPI = config.ResponsesAPINative
	metrics := telemetry.NewRouterMetrics(nil)
	rt := testutil.LeanServer(t, router.New(router.Options{Config: cfg, Metrics: metrics}).Handler())
	resp, err := http.Post(rt+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","stream":true,"input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(body) != stream {
		t.Fatalf("relayed %q", body)
	}
	count := func(class string) float64 {
		return promtest.ToFloat64(metrics.Requests.WithLabelValues("/v1/responses", class))
	}
	testutil.Eventually(t, 10*time.Second, "the request counted", func() bool { return count("2xx")+count("5xx") > 0 })
	if count("5xx") != 1 || count("2xx") != 0 {
		t.Errorf("2xx %v, 5xx %v: a native Responses stream that ended with response.failed was counted as served", count("2xx"), count("5xx"))
	}
}
