package main_test

import (
	"context"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/faultbench"
)

// TestFaultScenarios runs every scenario of `continuum bench --faults` at
// a small scale (10 requests a second, 3 s leases, 1.5 s holds), each on
// its own fleet-sim and serve, and holds the router to the benchmark's
// targets: no request fails but those in flight on a killed worker or
// replica; no request is pinned to a killed worker after its record left
// etcd (plus one discovery event); every scenario is whole again, worker
// faults within the lease TTL, a killed frontend replica once the
// router's breaker lets it be tried again; and routing leaves a
// duplicated or saturated worker within a second.
func TestFaultScenarios(t *testing.T) {
	bin := binary(t)
	for _, name := range faultbench.Scenarios() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			o := faultbench.Options{Binary: bin, Rate: 10, Baseline: 1500 * time.Millisecond, Hold: 1500 * time.Millisecond,
				LeaseTTL: 3 * time.Second, MaxTokens: 8}
			if name == "etcd-restarted" {
				// etcd's graceful stop alone takes seven seconds (it waits
				// for the open watch and keep-alive streams), and the
				// workers' clients reconnect with a growing backoff after
				// it: on a loaded machine a worker's keep-alive can go
				// unanswered for longer than a 3 s lease, its client gives
				// the lease up and the records expire, which is a fleet
				// lost, not a restart ridden through. Dynamo's own lease
				// (10 s) keeps the scenario what it means to test.
				o.LeaseTTL = faultbench.DefaultLeaseTTL
			}
			r, err := faultbench.RunScenario(ctx, o, name)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", r)
			if r.Sent < 20 {
				t.Errorf("only %d requests sent", r.Sent)
			}
			if r.Unexpected != 0 {
				t.Errorf("%d of %d requests failed outside the killed part's requests in flight: %v", r.Unexpected, r.Sent, r.Causes)
			}
			if r.PinnedAfterExpiry != 0 {
				t.Errorf("%d requests pinned to the killed worker after its record expired (latest %.0f ms after)", r.PinnedAfterExpiry, r.LatestPinAfterExpiryMS)
			}
			if !r.Recovered {
				t.Errorf("not whole again %.0f ms after the repair", r.RecoveredMS)
			}
			bound := o.LeaseTTL
			switch name {
			case "frontend-killed":
				bound = 15 * time.Second // the breaker's 10 s open period, then a half-open probe
			case "etcd-restarted":
				// Discovery retries with a doubling delay, so its next try
				// comes at most about as long after etcd's return as etcd
				// was down (seconds under a loaded CI machine).
				bound += time.Duration(r.OutageMS) * time.Millisecond
			}
			if r.RecoveredMS > float64(bound.Milliseconds()) {
				t.Errorf("whole again %.0f ms after the repair, want within %v", r.RecoveredMS, bound)
			}
			switch name {
			case "decode-killed", "prefill-killed":
				if r.DroppedMS < 0 || r.DroppedMS > float64((o.LeaseTTL+5*time.Second).Milliseconds()) {
					t.Errorf("discovery dropped the killed worker %.0f ms after the kill (lease TTL %v)", r.DroppedMS, o.LeaseTTL)
				}
			case "duplicate-record", "all-saturated":
				// A duplicate is rejected and a full cache judged busy at
				// once. A stalled engine is left when its hung requests make
				// it the most loaded, at the latest by the 5 s stall rule
				// (longer than the hold here), and a silenced publisher's
				// worker serves on: neither has a bound at this scale.
				if r.ExcludedMS < 0 || r.ExcludedMS > 1000 {
					t.Errorf("the faulty workers got requests until %.0f ms into the fault, want within a second", r.ExcludedMS)
				}
			}
		})
	}
}
