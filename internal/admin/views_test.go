package admin_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/fleetsim"
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

// workersExample is the GET /admin/dynamo/workers answer as the API
// documents it: every field, in order, with a broker-relayed and a pending
// subscription.
const workersExample = `{
  "enabled": true,
  "connected": true,
  "source": "etcd",
  "signals": {"load": true, "capacity": true},
  "namespace": "dynamo",
  "namespaces": ["dynamo"],
  "generation": 12,
  "workers": [
    {
      "instance_id": "1a7f2b",
      "namespace": "dynamo",
      "worker_id": "1736491",
      "role": "decode",
      "model": "Qwen/Qwen3-32B",
      "component": "decode",
      "endpoint": "generate",
      "dp_start_rank": 2,
      "dp_size": 4,
      "block_size": 64,
      "capacity": {
        "total_kv_blocks": 12000,
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 256,
        "context_length": 32768
      },
      "disaggregated_endpoint": "dynamo/prefill/generate",
      "first_seen": "2026-09-23T04:11:02+00:00",
      "last_updated": "2026-09-23T04:19:48+00:00"
    }
  ],
  "load_publishers": 1,
  "kv_event_publishers": 1,
  "subscriptions": [
    {
      "family": "kv_metrics",
      "publisher_id": "2046539",
      "namespace": "dynamo",
      "component": "decode",
      "state": "connected",
      "transport": "broker",
      "broker": "broker-a.dynamo"
    },
    {
      "family": "kv-events",
      "publisher_id": "2046540",
      "namespace": "dynamo",
      "component": "decode",
      "state": "pending",
      "transport": "broker"
    }
  ]
}`

// TestWorkersResponseShape: the documented answer decodes into
// WorkersResponse and encodes back to the same bytes: the same field
// names, in the same order, with the same types, nothing added (broker
// absent from a subscription no broker relays, broker_coverage absent
// without transport: broker).
func TestWorkersResponseShape(t *testing.T) {
	t.Parallel()
	var resp admin.WorkersResponse
	dec := json.NewDecoder(strings.NewReader(workersExample))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := json.Compact(&want, []byte(workersExample)); err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() {
		t.Errorf("encoded\n%s\nwant\n%s", got, want.String())
	}
	// A worker without a block size, capacity or disaggregated endpoint
	// writes them null, never leaves them out.
	out, err := json.Marshal(admin.WorkerView(&fleet.Worker{DPSize: 1}))
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"block_size":null`, `"total_kv_blocks":null`, `"max_num_batched_tokens":null`,
		`"max_num_seqs":null`, `"context_length":null`, `"disaggregated_endpoint":null`} {
		if !strings.Contains(string(out), field) {
			t.Errorf("%s lacks %s", out, field)
		}
	}
}

// TestViewsHideAddresses: a fleet read from records carrying a worker's
// request-plane address, publishers' tcp:// endpoints and full cards is
// shown without any of them: no address, no endpoint, no raw card field.
func TestViewsHideAddresses(t *testing.T) {
	t.Parallel()
	recs, err := fleetsim.Records(fleetsim.Options{Model: "Qwen/Qwen3-32B", Prefill: 1, Decode: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := fleet.NewReducer()
	now := time.Date(2026, 9, 23, 4, 11, 2, 0, time.UTC)
	for i, rec := range recs {
		v := rec.Value.(map[string]any)
		switch rec.Bucket {
		case "v1/instances":
			v["transport"] = map[string]string{"tcp": fmt.Sprintf("10.9.8.%d:41000/generate", i)}
		case "v1/event_channels":
			v["transport"] = map[string]any{"kind": "Zmq", "config": map[string]string{"endpoint": fmt.Sprintf("tcp://10.9.7.%d:5557", i)}}
		case "v1/mdc":
			v["card_json"].(map[string]any)["runtime_config"].(map[string]any)["node_name"] = "gpu-node-17"
		}
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		r.Put(rec.Bucket+"/"+rec.Key, data, now)
	}
	snap := r.Build(now)
	workers, publishers, problems := admin.Views(snap)
	if len(workers) != 2 || len(publishers) == 0 {
		t.Fatalf("workers %+v publishers %+v problems %+v", workers, publishers, problems)
	}
	out, err := json.Marshal(map[string]any{"workers": workers, "publishers": publishers, "problems": problems})
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"10.9.8.", "10.9.7.", "tcp://", "41000", "5557", "gpu-node-17", "card_json", "runtime_config"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("views carry %q:\n%s", secret, out)
		}
	}
}
