package admin_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// TestWorkerViewHidesBootstrapAddress: a card's disaggregated_endpoint is
// shown in its string form (an endpoint path); the object form carries the
// engine's bootstrap host and port, a pod address the view never exposes.
func TestWorkerViewHidesBootstrapAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ card, want string }{
		{`"dynamo/prefill/generate"`, `"dynamo/prefill/generate"`},
		{`{"bootstrap_host":"10.9.8.7","bootstrap_port":8998}`, `null`},
		{``, `null`},
	} {
		w := &fleet.Worker{DisaggregatedEndpoint: json.RawMessage(tc.card)}
		out, err := json.Marshal(admin.WorkerView(w))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), `"disaggregated_endpoint":`+tc.want) || strings.Contains(string(out), "10.9.8.7") {
			t.Errorf("card %s: view %s", tc.card, out)
		}
	}
}

// TestSubscriptionViewFields: a subscription entry has exactly the fields
// GET /admin/dynamo/workers documents, and broker only while a broker
// relays it.
func TestSubscriptionViewFields(t *testing.T) {
	t.Parallel()
	base := []string{"component", "family", "namespace", "publisher_id", "state", "transport"}
	for _, tc := range []struct {
		info load.SubscriptionInfo
		want []string
	}{
		{load.SubscriptionInfo{Family: "kv_metrics", PublisherID: 7, Namespace: "dynamo", Component: "decode", State: "connected", Transport: "direct"}, base},
		{load.SubscriptionInfo{Family: "kv-events", PublisherID: 8, Namespace: "dynamo", Component: "decode", State: "pending", Transport: "broker"}, base},
		{load.SubscriptionInfo{Family: "kv_metrics", PublisherID: 9, Namespace: "dynamo", Component: "decode", State: "connected", Transport: "broker", Broker: "broker-a.dynamo"},
			append([]string{"broker"}, base...)},
	} {
		out, err := json.Marshal(admin.SubscriptionView(tc.info))
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]any
		if err := json.Unmarshal(out, &fields); err != nil {
			t.Fatal(err)
		}
		if got := slices.Sorted(maps.Keys(fields)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: fields %v, want %v", out, got, tc.want)
		}
	}
}
