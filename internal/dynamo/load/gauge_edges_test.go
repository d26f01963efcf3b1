package load_test

import (
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// TestGaugeLabels: worker is lower-case hex, dp_rank decimal.
func TestGaugeLabels(t *testing.T) {
	m := telemetry.NewLoadMetrics(nil)
	s := load.NewStore(3*time.Second, load.Gauges{M: m})
	s.SetClock(func() time.Time { return t0 })
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 0xABCDEF}: {DPSize: 12}})
	if r := s.Apply(sample(0xABCDEF, 11, 7, 1, 42)); r != "" {
		t.Fatal(r)
	}
	if v := promtest.ToFloat64(m.ActiveDecodeBlocks.WithLabelValues("dynamo", "abcdef", "11")); v != 42 {
		t.Fatalf("gauge {worker=abcdef, dp_rank=11} = %v", v)
	}
}

// TestFreshBoundary: a sample exactly max_age old is fresh;
// one a nanosecond older is not.
func TestFreshBoundary(t *testing.T) {
	now := t0.Add(3 * time.Second)
	s := load.NewStore(3*time.Second, nil)
	s.SetClock(func() time.Time { return now })
	s.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {}})
	s.Apply(sample(1, 0, 7, 1, 1))
	if _, ok := s.FreshDefault(key(1, 0)); !ok {
		t.Error("a sample max_staleness old is not fresh")
	}
	now = now.Add(time.Nanosecond)
	if _, ok := s.FreshDefault(key(1, 0)); ok {
		t.Error("a sample older than max_staleness is fresh")
	}
	s.SetMaxStaleness(time.Minute) // hot reload
	if _, ok := s.FreshDefault(key(1, 0)); !ok {
		t.Error("max_staleness change not applied at once")
	}
}
