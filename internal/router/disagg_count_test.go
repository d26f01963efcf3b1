package router_test

import (
	"net/http"
	"strings"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/telemetry"
)

// routingPathsTotal sums disaggregated_requests_total over every routing path.
func routingPathsTotal(h *harness) float64 {
	n := 0.0
	for _, p := range telemetry.RoutingPaths {
		n += promtest.ToFloat64(h.metrics.DisaggRequests.WithLabelValues(p))
	}
	return n
}

// TestDisaggRequestsOncePerRequestWhenReplicaUnavailable: every request
// for a model the shim serves is counted once under a routing path, the
// ones answered while no frontend replica is available too. A replica
// failing with 500 opens its breaker; every request, before and after, is
// a shim failure answered 502 disaggregated_decode_failed, counted in
// phase decode and under the path its dispatch took or would have taken.
func TestDisaggRequestsOncePerRequestWhenReplicaUnavailable(t *testing.T) {
	t.Parallel()
	h := repinHarness(t, 0)
	h.fe.Status = http.StatusInternalServerError
	const n = 8
	opened := 0
	for i := range n {
		resp := h.post(t, chat(false), nil)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "disaggregated_decode_failed") {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		if strings.Contains(body, "no Dynamo frontend replica") {
			opened++
		}
	}
	if opened == 0 {
		t.Fatal("the breaker never opened")
	}
	errs := promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues("decode"))
	if errs != n {
		t.Errorf("disaggregated_errors_total{phase=decode} = %v, want %d", errs, n)
	}
	for _, p := range []string{"unified", "fallback"} {
		if v := promtest.ToFloat64(h.metrics.DisaggRequests.WithLabelValues(p)); v != 0 {
			t.Errorf("disaggregated_requests_total{routing_path=%s} = %v, want 0", p, v)
		}
	}
	if got := routingPathsTotal(h); got != n {
		t.Errorf("disaggregated_requests_total (all routing paths) = %v after %d requests (%d answered with the breaker open), want %d: once per request",
			got, n, opened, n)
	}
}
