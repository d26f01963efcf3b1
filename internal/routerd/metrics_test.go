package routerd_test

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

// family is what a scrape must show of one metric family: its type, its
// label names, and, for a closed label set, every series it exports before
// any traffic (label values joined by "," in label-name order).
type family struct {
	typ    dto.MetricType
	labels []string
	series []string
}

// documentedFamilies are the Dynamo families of the design, with the label
// values their closed sets hold.
var documentedFamilies = map[string]family{
	"continuum_dynamo_discovery_events_total": {dto.MetricType_COUNTER, []string{"kind"}, []string{
		"duplicate", "role_conflict", "malformed", "oversized", "over_capacity", "unknown_role",
		"card_fields", "card_dropped", "unsupported", "refused", "mismatch", "restart"}},
	"continuum_dynamo_discovery_connected": {dto.MetricType_GAUGE, nil, []string{""}},
	"continuum_dynamo_selection_total": {dto.MetricType_COUNTER, []string{"reason", "role"}, []string{
		"load,decode", "round_robin_stale,decode", "kv_aware,decode",
		"load,prefill", "round_robin_stale,prefill", "no_prefill_pool,prefill", "kv_aware,prefill", "conditional_bypass,prefill"}},
	"continuum_dynamo_load_events_total": {dto.MetricType_COUNTER, []string{"result"}, []string{
		"accepted", "malformed", "unknown_version", "topic_mismatch", "oversized", "identity_mismatch",
		"over_capacity", "duplicate", "transport_refused"}},
	"continuum_dynamo_load_subscriptions": {dto.MetricType_GAUGE, []string{"state", "transport"}, subscriptionSeries()},
	"continuum_dynamo_kv_subscriptions":   {dto.MetricType_GAUGE, []string{"state", "transport"}, subscriptionSeries()},
	"continuum_dynamo_kv_events_total": {dto.MetricType_COUNTER, []string{"result"}, []string{
		"accepted", "replay", "gap", "over_capacity", "identity_mismatch", "other_tier", "cache_owner", "multimodal",
		"unknown_parent", "unsupported", "malformed", "unknown_version", "topic_mismatch", "oversized", "transport_refused"}},
	"continuum_dynamo_kv_selection_total": {dto.MetricType_COUNTER, []string{"result"}, []string{
		"overlap", "no_overlap", "tokenizer_unavailable", "prompt_too_large", "render_unavailable", "artifact_unpinned", "bypass"}},
	"continuum_dynamo_kv_artifacts_total": {dto.MetricType_COUNTER, []string{"result"}, []string{
		"loaded", "unpinned", "unsupported", "disallowed", "malformed", "too_large", "checksum_mismatch",
		"cache_corrupt", "fetch_failed", "build_failed", "over_capacity"}},
	"continuum_dynamo_event_bus_sessions": {dto.MetricType_GAUGE, nil, []string{""}},
	"disaggregated_requests_total": {dto.MetricType_COUNTER, []string{"routing_path"}, []string{
		"disaggregated", "aggregated", "unified", "fallback"}},
	"disaggregated_errors_total": {dto.MetricType_COUNTER, []string{"phase"}, []string{"orchestration", "decode"}},
}

func subscriptionSeries() []string {
	var out []string
	for _, st := range []string{"pending", "connecting", "connected", "backoff"} {
		for _, tr := range []string{"direct", "broker"} {
			out = append(out, st+","+tr)
		}
	}
	return out
}

// scrape reads the text exposition of url.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// seriesOf lists a family's series as their label values (in label-name
// order, as the exposition writes them) joined by ",", and its label names.
func seriesOf(mf *dto.MetricFamily) (series []string, labels []string) {
	names := map[string]bool{}
	for _, m := range mf.GetMetric() {
		var vals []string
		for _, l := range m.GetLabel() {
			names[l.GetName()] = true
			vals = append(vals, l.GetValue())
		}
		series = append(series, strings.Join(vals, ","))
	}
	labels = slices.Sorted(maps.Keys(names))
	sort.Strings(series)
	return series, labels
}

// TestMetricFamiliesScraped: a running daemon (discovery, load
// subscriptions and KV-aware selection on) serves every Dynamo family of
// the design on GET /metrics with its type and label names, and every
// value of each closed label set at zero before any traffic; the broker
// coverage gauges have no series with transport: direct.
func TestMetricFamiliesScraped(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t, "http://127.0.0.1:1")
	cfg.Dynamo.KV.Enabled = true
	cfg.Dynamo.KV.ArtifactCacheDir = t.TempDir()
	d, err := routerd.New(cfg, routerd.Deps{ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	url := "http://" + d.Addr() + "/metrics"
	var mfs map[string]*dto.MetricFamily
	testutil.Eventually(t, 10*time.Second, "discovery connected", func() bool {
		mfs = scrape(t, url)
		g := mfs["continuum_dynamo_discovery_connected"]
		return g != nil && g.GetMetric()[0].GetGauge().GetValue() == 1
	})
	for name, want := range documentedFamilies {
		mf := mfs[name]
		if mf == nil {
			t.Errorf("%s: not served", name)
			continue
		}
		if mf.GetType() != want.typ {
			t.Errorf("%s: type %v, want %v", name, mf.GetType(), want.typ)
		}
		series, labels := seriesOf(mf)
		if !slices.Equal(labels, want.labels) {
			t.Errorf("%s: labels %v, want %v", name, labels, want.labels)
		}
		wantSeries := slices.Sorted(slices.Values(want.series))
		if !slices.Equal(series, wantSeries) {
			t.Errorf("%s: series %q, want %q", name, series, wantSeries)
		}
		if want.typ == dto.MetricType_COUNTER {
			for _, m := range mf.GetMetric() {
				if v := m.GetCounter().GetValue(); v != 0 {
					t.Errorf("%s%v: %v before any traffic", name, m.GetLabel(), v)
				}
			}
		}
	}
	for _, name := range []string{"continuum_dynamo_broker_subscriptions", "continuum_dynamo_broker_namespace_sessions",
		"continuum_dynamo_broker_pending_subscriptions"} {
		if mf := mfs[name]; mf != nil && len(mf.GetMetric()) > 0 {
			t.Errorf("%s has series with transport: direct", name)
		}
	}
}

// TestClosedLabelSetsHoldTheCode: every label value the code counts is one
// the closed sets export, so that no count starts a series of its own.
func TestClosedLabelSetsHoldTheCode(t *testing.T) {
	t.Parallel()
	check := func(family string, set []string, used ...string) {
		t.Helper()
		for _, u := range used {
			if !slices.Contains(set, u) {
				t.Errorf("%s: %q is counted but not in the closed set %v", family, u, set)
			}
		}
	}
	check("discovery kinds", telemetry.DiscoveryKinds, fleet.ProblemDuplicate, fleet.ProblemRoleConflict, fleet.ProblemMalformed,
		fleet.ProblemOversized, fleet.ProblemOverCapacity, fleet.ProblemUnknownRole, fleet.ProblemCardFields, fleet.ProblemCardDropped,
		fleet.ProblemUnsupported, telemetry.KindRefused, telemetry.KindMismatch, telemetry.KindRestart)
	check("load results", telemetry.LoadResults, telemetry.ResultAccepted, wire.ResultMalformed, wire.ResultUnknownVersion,
		wire.ResultTopicMismatch, wire.ResultOversized, wire.ResultIdentityMismatch, wire.ResultOverCapacity, wire.ResultDuplicate,
		wire.ResultTransportRefused)
	check("subscription states", telemetry.SubscriptionStates, load.StatePending, load.StateConnecting, load.StateConnected, load.StateBackoff)
	check("kv events", telemetry.KVEventResults, kv.Results...)
	check("kv events", telemetry.KVEventResults, wire.ResultUnknownVersion, wire.ResultTopicMismatch, wire.ResultOversized,
		wire.ResultTransportRefused)
	check("kv selections", telemetry.KVSelectionResults, kv.SelectionResults...)
	check("decode reasons", telemetry.SelectionReasons[pick.RoleDecode], pick.ReasonLoad, pick.ReasonRoundRobinStale, pick.ReasonKVAware)
	check("prefill reasons", telemetry.SelectionReasons[pick.RolePrefill], pick.ReasonLoad, pick.ReasonRoundRobinStale,
		pick.ReasonNoPrefillPool, pick.ReasonKVAware, pick.ReasonConditional)
	check("routing paths", telemetry.RoutingPaths, shim.PathDisaggregated, shim.PathAggregated, shim.PathUnified, shim.PathFallback)
	check("error phases", telemetry.ErrorPhases, shim.PhaseOrchestration, shim.PhaseDecode)
}
