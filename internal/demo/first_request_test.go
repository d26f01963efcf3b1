package demo_test

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/testutil"
)

// metric reads one series of the router's /metrics (0 when absent).
func metric(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestDemoArtifactsLoadBeforeFirstRequest: the tokenizer and templates a
// model's cards declare (pinned) start loading when discovery shows the
// model, not at its first request: with no request sent they load, and the
// model's first chat request and count_tokens then find them (the request
// KV-aware, not routed by load alone as tokenizer_unavailable; the count
// answered, not 501).
func TestDemoArtifactsLoadBeforeFirstRequest(t *testing.T) {
	t.Parallel()
	base := startDemo(t, fleetsim.Options{})
	// The demo's model declares a tokenizer and a tokenizer config.
	testutil.Eventually(t, 60*time.Second, "the declared artifacts loaded before any request", func() bool {
		return metric(t, base, `continuum_dynamo_kv_artifacts_total{result="loaded"}`) >= 2
	})
	r, err := http.Post(base+"/v1/messages/count_tokens", "application/json",
		strings.NewReader(`{"model":"Qwen/Qwen3-32B","messages":[{"role":"user","content":"Hello!"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("the first count_tokens: %d %s", r.StatusCode, b)
	}
	if r := ask(t, base, "Qwen/Qwen3-32B"); r.StatusCode != http.StatusOK {
		t.Fatalf("chat: %s", r.Status)
	}
	if v := metric(t, base, `continuum_dynamo_kv_selection_total{result="tokenizer_unavailable"}`); v != 0 {
		t.Fatalf("the model's first request routed without its tokenizer (%v tokenizer_unavailable)", v)
	}
}
