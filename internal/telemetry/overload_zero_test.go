package telemetry_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/continuum-router/continuum/internal/telemetry"
)

// TestOverloadReasonsExportedAtZero: continuum_http_overload_rejections_total's
// closed reasons (connections, in_flight) are exported at 0 from the start,
// as the busy refusals' and queue waits' are, so that rate() and increase()
// see the first refusal (a series born at 1 has no earlier sample).
func TestOverloadReasonsExportedAtZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	telemetry.NewRouterMetrics(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "continuum_http_overload_rejections_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	for _, r := range []string{telemetry.OverloadConnections, telemetry.OverloadInFlight} {
		if !seen[r] {
			t.Errorf("continuum_http_overload_rejections_total{reason=%q} is not exported before the first refusal", r)
		}
	}
}
