package telemetry_test

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/continuum-router/continuum/internal/telemetry"
)

// TestFamilies: every family the design names exists under its name, with
// its type and label names, and its closed label values are exported at
// zero before anything is counted (the broker families, whose values are
// configured ids and namespaces, once set).
func TestFamilies(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	telemetry.NewDiscoveryMetrics(reg)
	telemetry.NewLoadMetrics(reg)
	telemetry.NewRouterMetrics(reg)
	telemetry.NewKVMetrics(reg)
	telemetry.NewArtifactMetrics(reg)
	bus := telemetry.NewEventBusMetrics(reg)
	bus.BrokerSubscriptions.WithLabelValues("kv_metrics", "broker-a.dynamo")
	bus.NamespaceSessions.WithLabelValues("dynamo")
	bus.PendingSubscriptions.WithLabelValues("kv-events", "dynamo")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	counter, gauge := dto.MetricType_COUNTER, dto.MetricType_GAUGE
	for _, tc := range []struct {
		name   string
		typ    dto.MetricType
		labels []string
		// values are label values that must be exported from the start,
		// as "label=value" pairs of one series.
		values []string
	}{
		{"continuum_dynamo_discovery_events_total", counter, []string{"kind"},
			[]string{"kind=duplicate", "kind=restart", "kind=refused", "kind=mismatch", "kind=malformed"}},
		{"continuum_dynamo_discovery_connected", gauge, nil, []string{""}},
		{"continuum_dynamo_selection_total", counter, []string{"reason", "role"},
			[]string{"reason=load,role=decode", "reason=round_robin_stale,role=decode", "reason=kv_aware,role=decode",
				"reason=load,role=prefill", "reason=round_robin_stale,role=prefill", "reason=no_prefill_pool,role=prefill",
				"reason=kv_aware,role=prefill", "reason=conditional_bypass,role=prefill"}},
		{"continuum_dynamo_load_events_total", counter, []string{"result"},
			[]string{"result=malformed", "result=unknown_version", "result=topic_mismatch", "result=oversized",
				"result=identity_mismatch", "result=over_capacity", "result=duplicate", "result=transport_refused"}},
		{"continuum_dynamo_load_subscriptions", gauge, []string{"state", "transport"}, subscriptionPairs()},
		{"continuum_dynamo_kv_subscriptions", gauge, []string{"state", "transport"}, subscriptionPairs()},
		{"continuum_dynamo_kv_events_total", counter, []string{"result"},
			[]string{"result=gap", "result=over_capacity", "result=identity_mismatch"}},
		{"continuum_dynamo_kv_selection_total", counter, []string{"result"},
			[]string{"result=overlap", "result=no_overlap", "result=tokenizer_unavailable", "result=prompt_too_large",
				"result=render_unavailable", "result=artifact_unpinned", "result=bypass"}},
		{"continuum_dynamo_kv_artifacts_total", counter, []string{"result"}, []string{"result=unpinned", "result=unsupported"}},
		{"continuum_dynamo_event_bus_sessions", gauge, nil, []string{""}},
		{"continuum_dynamo_broker_subscriptions", gauge, []string{"broker", "family"}, []string{"broker=broker-a.dynamo,family=kv_metrics"}},
		{"continuum_dynamo_broker_namespace_sessions", gauge, []string{"namespace"}, []string{"namespace=dynamo"}},
		{"continuum_dynamo_broker_pending_subscriptions", gauge, []string{"family", "namespace"}, []string{"family=kv-events,namespace=dynamo"}},
		{"disaggregated_requests_total", counter, []string{"routing_path"}, nil},
		{"disaggregated_errors_total", counter, []string{"phase"}, []string{"phase=orchestration", "phase=decode"}},
	} {
		mf := byName[tc.name]
		if mf == nil {
			t.Errorf("%s: not registered", tc.name)
			continue
		}
		if mf.GetType() != tc.typ {
			t.Errorf("%s: type %v, want %v", tc.name, mf.GetType(), tc.typ)
		}
		series := map[string]bool{}
		for _, m := range mf.GetMetric() {
			var names, pairs []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
				pairs = append(pairs, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(names)
			if !slices.Equal(names, tc.labels) {
				t.Errorf("%s: labels %v, want %v", tc.name, names, tc.labels)
			}
			series[strings.Join(pairs, ",")] = true
		}
		for _, v := range tc.values {
			if !series[v] {
				t.Errorf("%s{%s} is not exported from the start", tc.name, v)
			}
		}
	}
}

func subscriptionPairs() []string {
	var out []string
	for _, st := range []string{"pending", "connecting", "connected", "backoff"} {
		for _, tr := range []string{"direct", "broker"} {
			out = append(out, "state="+st+",transport="+tr)
		}
	}
	return out
}
