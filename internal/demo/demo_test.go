package demo_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/demo"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/testutil"
)

// startDemo runs a demo of a fleet shape and returns its base URL.
func startDemo(t *testing.T, fleet fleetsim.Options) string {
	t.Helper()
	d, err := demo.Start(demo.Options{Fleet: fleet, Bind: "127.0.0.1:0", Deps: routerd.Deps{ShutdownGrace: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + d.Addr()
}

func ask(t *testing.T, base, model string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":"Hello!"}]}`, model)))
	req.Header.Set("x-backend", "")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r
}

// TestDemoTopologies: namespaces, models, aggregated workers beside a
// prefill/decode pool, and data-parallel ranks: requests for the second
// model go disaggregated through both namespaces' frontends.
func TestDemoTopologies(t *testing.T) {
	t.Parallel()
	base := startDemo(t, fleetsim.Options{Namespaces: []string{"prod", "canary"}, Models: []string{"m1", "m2"},
		Prefill: 1, Decode: 1, Aggregated: 1, DPSize: 2, Speed: 50})
	testutil.Eventually(t, 20*time.Second, "m2 served", func() bool { return ask(t, base, "m2").StatusCode == 200 })
	backends := map[string]bool{}
	for range 8 {
		r := ask(t, base, "m2")
		if r.StatusCode != 200 || r.Header.Get("x-continuum-routing-path") != "disaggregated" {
			t.Fatalf("status %d %v", r.StatusCode, r.Header)
		}
		backends[r.Header.Get("x-continuum-backend")] = true
	}
	if len(backends) != 2 {
		t.Errorf("both namespaces' frontends should serve: %v", backends)
	}
}

// TestDemoLegacyLoadFields: workers publishing only kv_used_blocks (Dynamo
// 1.4.2 vLLM) are picked by load for decode and round-robin for prefill.
func TestDemoLegacyLoadFields(t *testing.T) {
	t.Parallel()
	base := startDemo(t, fleetsim.Options{Prefill: 2, Decode: 2, NilSchedulerFields: true, Speed: 50})
	testutil.Eventually(t, 20*time.Second, "load-based decode picks", func() bool {
		ask(t, base, "Qwen/Qwen3-32B")
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := string(b)
		return strings.Contains(m, `continuum_dynamo_selection_total{reason="load",role="decode"}`) &&
			strings.Contains(m, `continuum_dynamo_selection_total{reason="round_robin_stale",role="prefill"}`) &&
			!strings.Contains(m, `continuum_dynamo_selection_total{reason="load",role="prefill"}`)
	})
}
