package etcd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

// realEndpoint is an Endpoint record as a Dynamo worker writes it: the
// instance id a decimal JSON number, the key's id the same in lower-case
// hex, with the fields newer releases add (device_type,
// request_plane_codec).
func realEndpoint(ns, component, endpoint string, id uint64) (string, string) {
	return fmt.Sprintf("v1/instances/%s/%s/%s/%x", ns, component, endpoint, id),
		fmt.Sprintf(`{"type":"Endpoint","namespace":%q,"component":%q,"endpoint":%q,"instance_id":%d,`+
			`"transport":{"tcp":"10.0.0.4:31000/%x/%s/%s/%s"},"device_type":"cuda","request_plane_codec":"msgpack"}`,
			ns, component, endpoint, id, id, ns, component, endpoint)
}

// realCard is a Model record as a Dynamo worker writes it, with a card of
// the shape model_card.rs serialises (model_suffix null as older writers
// leave it, model_type a bitflags string, disaggregated_endpoint the
// object of newer revisions, fields the router does not read). extra is
// spliced into card_json; workerType "" leaves worker_type out.
func realCard(ns, component string, id uint64, model, workerType, modelType, extra string) (string, string) {
	wt := ""
	if workerType != "" {
		wt = fmt.Sprintf(`"worker_type":%q,`, workerType)
	}
	return fmt.Sprintf("v1/mdc/%s/%s/generate/%x", ns, component, id),
		fmt.Sprintf(`{"type":"Model","namespace":%q,"component":%q,"endpoint":"generate","instance_id":%d,"model_suffix":null,`+
			`"card_json":{"display_name":%q,"slug":"x","source_path":%q,%s"model_type":%q,"model_input":"Tokens",`+
			`"kv_cache_block_size":16,"migration_limit":0,"needs":[],"lora":null,"aliases":[],"indexer_identity":null,%s`+
			`"runtime_config":{"total_kv_blocks":4096,"max_num_seqs":256,"max_num_batched_tokens":8192,"context_length":32768,`+
			`"data_parallel_start_rank":0,"data_parallel_size":1,"enable_local_indexer":true,"runtime_data":{},`+
			`"disaggregated_endpoint":{"bootstrap_host":"10.0.0.4","bootstrap_port":8998},"taints":[],"topology_domains":{}}}}`,
			ns, component, id, model, model, wt, modelType, extra)
}

// realChannel is an endpoint-scoped EventChannel record under its key, the
// key's segments escaped as Dynamo escapes them (here only '.' occurs).
func realChannel(ns, component, topic string, publisher uint64, port int) (string, string) {
	enc := func(s string) string { return strings.ReplaceAll(s, ".", "%2E") }
	return fmt.Sprintf("v1/event_channels/namespace/%s/component/%s/endpoint/generate/topic/%s/%x", enc(ns), enc(component), enc(topic), publisher),
		fmt.Sprintf(`{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":%q,"component":%q,"name":"generate"}},`+
			`"topic":%q,"instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.7:%d"}}}`, ns, component, topic, publisher, port)
}

// TestRealFleetRecords writes a fleet as Dynamo's workers write it into a
// real etcd, two watched namespaces and one not, and checks the view the
// watcher publishes: the join of ids written in both forms, the role
// rules over every worker_type spelling, legacy and LoRA cards, records
// with fields left out or unknown, every duplicate rejected (counted and
// logged once per key set, four keys at most), events between the range
// get and the watch applied from the revision cursor without a second
// pass, and no pod address in the admin view.
func TestRealFleetRecords(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	lease, err := c.Grant(context.Background(), 30)
	if err != nil {
		t.Fatal(err)
	}
	leased := func(k, v string) { put(t, c, k, v, clientv3.WithLease(lease.ID)) }
	pair := func(k, v string) { leased(k, v) }

	const (
		prefillID = 7465265302745285 // 1a859e868630c5
		decodeID  = 1736491          // 1a7f2b
	)
	// A disaggregated pair, each with the endpoints every worker
	// registers, its card and its publishers.
	for _, w := range []struct {
		component, workerType, modelType string
		id                               uint64
		pub                              uint64
	}{
		{"prefill", "Prefill", "Prefill", prefillID, 2046537},
		{"decode", "Decode", "Chat | Completions", decodeID, 2046539},
	} {
		for _, ep := range []string{"generate", "load_metrics", "clear_kv_blocks"} {
			pair(realEndpoint("dynamo", w.component, ep, w.id))
		}
		pair(realCard("dynamo", w.component, w.id, "Qwen/Qwen3-32B", w.workerType, w.modelType, ""))
		pair(realChannel("dynamo", w.component, "kv_metrics", w.pub, 41000))
		pair(realChannel("dynamo", w.component, "kv-events", w.pub+1, 41001))
		pair(realChannel("dynamo", w.component, "active_sequences_events", w.pub+2, 41002))
	}
	// A LoRA adapter's card of the decode worker: never its card.
	leased(fmt.Sprintf("v1/mdc/dynamo/decode/generate/%x/my-lora", decodeID),
		fmt.Sprintf(`{"type":"Model","namespace":"dynamo","component":"decode","endpoint":"generate","instance_id":%d,"model_suffix":"my-lora",`+
			`"card_json":{"display_name":"my-lora","worker_type":"Decode","lora":{"name":"my-lora","max_gpu_lora_count":4}}}`, decodeID))
	// Aggregated workers in the spellings Dynamo has written.
	pair(realEndpoint("dynamo", "backend", "generate", 0x10))
	pair(realCard("dynamo", "backend", 0x10, "agg", "Prefill | Decode", "Chat", ""))
	pair(realEndpoint("dynamo", "backend", "generate", 0x11))
	pair(realCard("dynamo", "backend", 0x11, "agg", "aggregated", "Chat", ""))
	// Cards written before worker_type: the Prefill model_type flag says
	// prefill, anything else aggregated; a decode component refines the
	// aggregated default.
	pair(realEndpoint("dynamo", "backend", "generate", 0x12))
	pair(realCard("dynamo", "backend", 0x12, "old", "", "Prefill", ""))
	pair(realEndpoint("dynamo", "backend", "generate", 0x13))
	pair(realCard("dynamo", "backend", 0x13, "old", "", "Chat | Completions", ""))
	pair(realEndpoint("dynamo", "VllmDecodeWorker", "generate", 0x14))
	pair(realCard("dynamo", "VllmDecodeWorker", 0x14, "old", "", "Chat | Completions", ""))
	// An encode worker and an unknown worker_type claim no role.
	pair(realEndpoint("dynamo", "encoder", "generate", 0x15))
	pair(realCard("dynamo", "encoder", 0x15, "enc", "Encode", "Chat", ""))
	pair(realEndpoint("dynamo", "prefill", "generate", 0x16))
	pair(realCard("dynamo", "prefill", 0x16, "m", "Drafter", "Chat", ""))
	// Role disagreement between the records of one identity.
	pair(realEndpoint("dynamo", "prefill", "generate", 0x17))
	pair(realCard("dynamo", "prefill", 0x17, "m", "decode", "Chat", ""))
	// A hex-string instance id joins a decimal one; a legacy card (no
	// component, no endpoint) joins by instance id alone.
	leased("v1/instances/dynamo/backend/generate/2a", `{"type":"Endpoint","component":"backend","endpoint":"generate","instance_id":"2a"}`)
	leased("v1/mdc/dynamo/backend/generate/2a", `{"type":"Model","component":"backend","endpoint":"generate","instance_id":42,"card_json":{"display_name":"hex","worker_type":"Decode"}}`)
	leased("v1/instances/dynamo/backend/generate/2b", `{"type":"Endpoint","component":"backend","endpoint":"generate","instance_id":43}`)
	leased("v1/mdc/dynamo///2b", `{"type":"Model","component":"","endpoint":"","instance_id":"2b","card_json":{"display_name":"legacy","worker_type":"Prefill"}}`)
	// Optional fields left out (the key names them), unknown ones added.
	leased("v1/instances/dynamo/decode/generate/2c", `{"instance_id":44}`)
	leased("v1/instances/dynamo/decode/generate/2d", `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":45,"future":{"x":[1]},"transport":{"quic":"?"}}`)
	leased("v1/mdc/dynamo/decode/generate/2d", `{"type":"Model","instance_id":45,"future":1,"card_json":{"display_name":"n2","kv_cache_block_size":"x","runtime_config":{"total_kv_blocks":9}}}`)
	// One record that does not parse; its neighbours stand.
	leased("v1/instances/dynamo/decode/generate/2e", `{"type":"Endpoint","component":"decode","endpoint":"generate"}`)
	// Duplicates: two generate records for one id (in both id forms); five
	// for another; two base cards of one worker; two channels of one
	// publisher id.
	leased("v1/instances/dynamo/decode/generate/63", `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":99}`)
	leased("v1/instances/dynamo/decode/generate/ff63", `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":"63"}`)
	for i := range 5 {
		leased(fmt.Sprintf("v1/instances/dynamo/decode/generate/64%02x", i), `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":100}`)
	}
	pair(realEndpoint("dynamo", "decode", "generate", 0x65))
	pair(realCard("dynamo", "decode", 0x65, "one", "Decode", "Chat", ""))
	leased("v1/mdc/dynamo/decode/generate/ff65", `{"type":"Model","component":"decode","endpoint":"generate","instance_id":101,"card_json":{"display_name":"forged","worker_type":"Decode"}}`)
	pair(realChannel("dynamo", "decode", "kv_metrics", 7000, 42000))
	k, v := realChannel("dynamo", "backend", "kv_metrics", 7000, 42001)
	leased(k, v)
	// The same instance id in another watched namespace, its payload
	// naming the first: a worker of its own, of the namespace it sits in.
	canaryKey, canaryValue := realEndpoint("canary", "prefill", "generate", prefillID)
	leased(canaryKey, strings.Replace(canaryValue, `"namespace":"canary"`, `"namespace":"dynamo"`, 1))
	// A namespace not watched.
	pair(realEndpoint("other", "decode", "generate", 0x99))

	src := newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}}, "dynamo", "canary")
	var passes atomic.Int32
	// Between the range get and the watches: a worker joins, another
	// leaves. The watches start at the range get's revision + 1, so both
	// reach the view without another pass.
	src.SetAfterSeed(func() {
		if passes.Add(1) != 1 {
			return
		}
		k, v := realEndpoint("dynamo", "decode", "generate", 0x70)
		put(t, c, k, v)
		if _, err := c.Delete(context.Background(), "v1/instances/dynamo/decode/generate/2c"); err != nil {
			t.Error(err)
		}
	})
	logs := &testutil.SyncBuffer{}
	metrics := telemetry.NewDiscoveryMetrics(nil)
	reg := fleet.NewRegistry(slog.New(slog.NewJSONHandler(logs, nil)), discovery.ProblemCounter(metrics))
	w := &discovery.Watcher{Source: src, Registry: reg, Metrics: metrics,
		Backoff: discovery.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	type row struct{ ns, id, role, model string }
	view := func() []row {
		var out []row
		for w := range reg.Snapshot().Workers.All() {
			out = append(out, row{w.ID.Namespace, w.InstanceHex(), string(w.Role), w.Model})
		}
		slices.SortFunc(out, func(a, b row) int { return strings.Compare(a.ns+"/"+a.id, b.ns+"/"+b.id) })
		return out
	}
	want := []row{
		{"canary", "1a859e868630c5", "prefill", ""},
		{"dynamo", "10", "aggregated", "agg"},
		{"dynamo", "11", "aggregated", "agg"},
		{"dynamo", "12", "prefill", "old"},
		{"dynamo", "13", "aggregated", "old"},
		{"dynamo", "14", "decode", "old"},
		{"dynamo", "15", "unknown", "enc"},
		{"dynamo", "16", "prefill", "m"},
		{"dynamo", "1a7f2b", "decode", "Qwen/Qwen3-32B"},
		{"dynamo", "1a859e868630c5", "prefill", "Qwen/Qwen3-32B"},
		{"dynamo", "2a", "decode", "hex"},
		{"dynamo", "2b", "prefill", "legacy"},
		{"dynamo", "2d", "decode", "n2"},
		{"dynamo", "65", "decode", ""},
		{"dynamo", "70", "decode", ""},
	}
	testutil.Eventually(t, 15*time.Second, "the fleet's view", func() bool { return slices.Equal(view(), want) })
	if got := view(); !slices.Equal(got, want) {
		t.Fatalf("workers:\n got %v\nwant %v", got, want)
	}
	if n := passes.Load(); n != 1 {
		t.Errorf("%d passes: the events between the range get and the watches took a resync", n)
	}

	snap := reg.Snapshot()
	var pubs []string
	for p := range snap.Publishers.All() {
		pubs = append(pubs, fmt.Sprintf("%s %d %s", p.Namespace, p.PublisherID, p.Topic))
	}
	slices.Sort(pubs)
	if want := []string{"dynamo 2046537 kv_metrics", "dynamo 2046538 kv-events", "dynamo 2046539 kv_metrics", "dynamo 2046540 kv-events"}; !slices.Equal(pubs, want) {
		t.Errorf("publishers %v, want %v", pubs, want)
	}
	var probs []string
	for _, p := range snap.Problems {
		probs = append(probs, fmt.Sprintf("%s %s %d", p.Kind, strings.Join(p.Keys, ","), p.KeyCount))
	}
	wantProbs := []string{
		"card_fields v1/mdc/dynamo/decode/generate/2d 1",
		"duplicate v1/event_channels/namespace/dynamo/component/backend/endpoint/generate/topic/kv_metrics/1b58,v1/event_channels/namespace/dynamo/component/decode/endpoint/generate/topic/kv_metrics/1b58 2",
		"duplicate v1/instances/dynamo/decode/generate/63,v1/instances/dynamo/decode/generate/ff63 2",
		"duplicate v1/instances/dynamo/decode/generate/6400,v1/instances/dynamo/decode/generate/6401,v1/instances/dynamo/decode/generate/6402,v1/instances/dynamo/decode/generate/6403 5",
		"duplicate v1/mdc/dynamo/decode/generate/65,v1/mdc/dynamo/decode/generate/ff65 2",
		"malformed v1/instances/dynamo/decode/generate/2e 1",
		"role_conflict v1/instances/dynamo/prefill/generate/17,v1/mdc/dynamo/prefill/generate/17 2",
		"unknown_role v1/instances/dynamo/encoder/generate/15 1",
	}
	if !slices.Equal(probs, wantProbs) {
		t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(probs, "\n  "), strings.Join(wantProbs, "\n  "))
	}
	for _, p := range snap.Problems {
		if p.Kind == fleet.ProblemRoleConflict && (!strings.Contains(p.Reason, "prefill") || !strings.Contains(p.Reason, "decode")) {
			t.Errorf("a role conflict that does not name both roles: %q", p.Reason)
		}
	}
	if got := promtest.ToFloat64(metrics.Events.WithLabelValues(fleet.ProblemDuplicate)); got != 4 {
		t.Errorf(`discovery events kind="duplicate": %v, want 4`, got)
	}

	// No pod address, transport or raw card in what the admin API serves.
	ws, _, _ := admin.Views(snap)
	b, _ := json.Marshal(ws)
	for _, leak := range []string{"10.0.0.4", "10.0.0.7", "bootstrap", "31000", "card_json", "transport"} {
		if strings.Contains(string(b), leak) {
			t.Errorf("the admin view shows %q: %s", leak, b)
		}
	}
	for _, w := range ws {
		if w.InstanceID == "1a859e868630c5" && w.Namespace == "dynamo" && (w.WorkerID != "7465265302745285" || string(w.DisaggregatedEndpoint) != "null") {
			t.Errorf("prefill worker view %+v", w)
		}
	}

	// Each conflict is logged once, with at most four keys and the count;
	// records put again unchanged (a worker re-registering) or rewritten
	// with the same identity log nothing new.
	dupLines := func() []map[string]any {
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["kind"] == fleet.ProblemDuplicate {
				out = append(out, m)
			}
		}
		return out
	}
	if got := dupLines(); len(got) != 4 {
		t.Fatalf("%d duplicate lines logged, want 4: %s", len(got), logs.String())
	}
	for _, m := range dupLines() {
		keys, _ := m["keys"].([]any)
		if m["level"] != "WARN" || len(keys) > 4 || m["count"] == nil || m["reason"] == nil {
			t.Errorf("duplicate log line %v", m)
		}
		if len(keys) == 4 && m["count"] != 5.0 {
			t.Errorf("five claimants logged as %v", m["count"])
		}
	}
	leased("v1/instances/dynamo/decode/generate/63", `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":99,"transport":{"tcp":"10.0.0.5:1/x"}}`)
	leased("v1/instances/dynamo/decode/generate/6400", `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":100}`)
	k, v = realEndpoint("dynamo", "decode", "generate", 0x71)
	put(t, c, k, v)
	testutil.Eventually(t, 10*time.Second, "a later worker", func() bool {
		return reg.Snapshot().Workers.Get(fleet.WorkerID{Namespace: "dynamo", InstanceID: 0x71}) != nil
	})
	if got := dupLines(); len(got) != 4 {
		t.Errorf("%d duplicate lines logged after the records were put again, want 4", len(got))
	}
	if got := promtest.ToFloat64(metrics.Events.WithLabelValues(fleet.ProblemDuplicate)); got != 4 {
		t.Errorf(`discovery events kind="duplicate" after the records were put again: %v, want 4`, got)
	}

	// The workers' lease ends: every leased record goes, as a delete.
	if _, err := c.Revoke(context.Background(), lease.ID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the leased fleet gone", func() bool {
		got := view()
		return len(got) == 2 && got[0].id == "70" && got[1].id == "71"
	})
}

// TestKeyspaceCapOverEtcd: a keyspace holding more than
// fleet.MaxRecordsPerKeyspace keys is read up to the cap, logged once;
// past it a held key's update still applies and a new key is refused.
func TestKeyspaceCapOverEtcd(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	var ops []clientv3.Op
	for i := 1; i <= fleet.MaxRecordsPerKeyspace+1; i++ {
		ops = append(ops, clientv3.OpPut(instanceKey("dynamo", "decode", uint64(i)), endpointValue(uint64(i), "decode")))
		if len(ops) == 128 || i == fleet.MaxRecordsPerKeyspace+1 {
			if _, err := c.Txn(context.Background()).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	logs := &testutil.SyncBuffer{}
	metrics := telemetry.NewDiscoveryMetrics(nil)
	reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(logs, nil)), discovery.ProblemCounter(metrics))
	w := &discovery.Watcher{Source: newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}}), Registry: reg, Metrics: metrics,
		Backoff: discovery.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testutil.Eventually(t, 30*time.Second, "the capped fleet", func() bool { return reg.Snapshot().Workers.Len() == fleet.MaxRecordsPerKeyspace })
	capped := func() int {
		n := 0
		for _, p := range reg.Snapshot().Problems {
			if p.Kind == fleet.ProblemOverCapacity {
				n++
			}
		}
		return n
	}
	if capped() != 1 {
		t.Fatalf("problems %+v", reg.Snapshot().Problems)
	}
	// Which key the cap left out depends on the read's order: find it.
	var out uint64
	for i := uint64(1); i <= fleet.MaxRecordsPerKeyspace+1; i++ {
		if reg.Snapshot().Workers.Get(fleet.WorkerID{Namespace: "dynamo", InstanceID: i}) == nil {
			out = i
		}
	}
	held := uint64(1)
	if out == 1 {
		held = 2
	}
	put(t, c, instanceKey("dynamo", "decode", held), endpointValue(held, "prefill"))
	put(t, c, instanceKey("dynamo", "decode", 1<<40), endpointValue(1<<40, "decode"))
	testutil.Eventually(t, 10*time.Second, "the held key's update", func() bool {
		w := reg.Snapshot().Workers.Get(fleet.WorkerID{Namespace: "dynamo", InstanceID: held})
		return w != nil && w.Role == fleet.RolePrefill
	})
	if reg.Snapshot().Workers.Get(fleet.WorkerID{Namespace: "dynamo", InstanceID: 1 << 40}) != nil || reg.Snapshot().Workers.Len() != fleet.MaxRecordsPerKeyspace {
		t.Error("a new key past the cap was taken")
	}
	if n := strings.Count(logs.String(), "kind="+fleet.ProblemOverCapacity); n != 1 {
		t.Errorf("the cap logged %d times, want once:\n%s", n, logs.String())
	}
	if got := promtest.ToFloat64(metrics.Events.WithLabelValues(fleet.ProblemOverCapacity)); got != 1 {
		t.Errorf(`discovery events kind="over_capacity": %v, want 1`, got)
	}
}

// TestCompactionResyncKeepsFirstSeen: a pass whose watch start revision
// was compacted away ends, and the full resync that follows drops the
// worker whose delete was lost and keeps the first_seen of the workers it
// finds again, without publishing a view in between.
func TestCompactionResyncKeepsFirstSeen(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	put(t, c, instanceKey("dynamo", "decode", 1), endpointValue(1, "decode"))
	put(t, c, instanceKey("dynamo", "decode", 2), endpointValue(2, "decode"))
	src := newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}})
	var passes atomic.Int32
	var compactOn atomic.Int32 // the pass whose watch start is compacted
	src.SetAfterSeed(func() {
		n := passes.Add(1)
		if n != compactOn.Load() {
			return
		}
		deleteThenCompact(t, c, instanceKey("dynamo", "decode", 1))
	})
	h := run(t, src)
	testutil.Eventually(t, 10*time.Second, "seeded", func() bool { return len(h.workers()) == 2 })
	first := h.workers()["dynamo/2"].FirstSeen
	gen := h.reg.Generation()
	compactOn.Store(2)
	srv.Stop()
	testutil.Eventually(t, 30*time.Second, "disconnect noticed", func() bool { return promtest.ToFloat64(h.metrics.Connected) == 0 })
	srv.Start()
	testutil.Eventually(t, 30*time.Second, "resynced after the compacted pass", func() bool {
		return passes.Load() >= 3 && promtest.ToFloat64(h.metrics.Connected) == 1
	})
	w := h.workers()
	if w["dynamo/1"] != nil || w["dynamo/2"] == nil || !w["dynamo/2"].FirstSeen.Equal(first) {
		t.Fatalf("after the resync: %v (first_seen was %v)", w, first)
	}
	if got := h.reg.Generation(); got != gen+1 {
		t.Errorf("generation %d after the resync, want %d: one publish, of the resynced view", got, gen+1)
	}
}

// TestSixteenNamespaces: one watcher follows the most namespaces
// configuration accepts, each its own graph: the same instance id in each
// is a worker of each, a namespace whose name another one's starts with
// is not read for it, and a channel key's namespace segment is escaped.
func TestSixteenNamespaces(t *testing.T) {
	t.Parallel()
	if discovery.SeedTimeout != 30*time.Second {
		t.Errorf("seed timeout %v, want 30s", discovery.SeedTimeout)
	}
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	namespaces := []string{"ns", "ns.one"}
	for i := 2; i < config.MaxDynamoNamespaces; i++ {
		namespaces = append(namespaces, fmt.Sprintf("ns-%d", i))
	}
	for i, ns := range append(slices.Clone(namespaces), "ns-99") {
		k, v := realEndpoint(ns, "decode", "generate", 7)
		put(t, c, k, v)
		k, v = realChannel(ns, "decode", "kv_metrics", uint64(100+i), 41000)
		put(t, c, k, v)
	}
	h := run(t, newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}}, namespaces...))
	testutil.Eventually(t, 15*time.Second, "a worker per namespace", func() bool { return len(h.workers()) == len(namespaces) })
	for _, ns := range namespaces {
		if h.workers()[ns+"/7"] == nil {
			t.Errorf("no worker in %s", ns)
		}
	}
	if h.workers()["ns-99/7"] != nil {
		t.Error("a namespace not watched was read")
	}
	snap := h.reg.Snapshot()
	if snap.Publishers.Len() != len(namespaces) || len(snap.Problems) != 0 {
		t.Errorf("%d publishers, problems %+v", snap.Publishers.Len(), snap.Problems)
	}
	k, v := realEndpoint("ns-15", "decode", "generate", 8)
	put(t, c, k, v)
	testutil.Eventually(t, 10*time.Second, "a watched put in the last namespace", func() bool { return h.workers()["ns-15/8"] != nil })
}
