package wire_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		key  string
		want wire.Key
	}{
		{"v1/instances/dynamo/prefill/generate/1a85c3e2f4b1d", wire.Key{Space: wire.KeyspaceInstances, Namespace: "dynamo", Component: "prefill", Endpoint: "generate", InstanceID: 0x1a85c3e2f4b1d}},
		{"v1/mdc/dynamo/decode/generate/43710f49c0cff", wire.Key{Space: wire.KeyspaceModelCards, Namespace: "dynamo", Component: "decode", Endpoint: "generate", InstanceID: 1186445869714687}},
		{"v1/mdc/dynamo/decode/generate/43710f49c0cff/my-lora", wire.Key{Space: wire.KeyspaceModelCards, Namespace: "dynamo", Component: "decode", Endpoint: "generate", InstanceID: 1186445869714687, ModelSuffix: "my-lora"}},
		{"v1/event_channels/namespace/dynamo/component/decode/endpoint/generate/topic/kv_metrics/1f3a4b", wire.Key{Space: wire.KeyspaceEventChannels, Namespace: "dynamo", Component: "decode", Endpoint: "generate", Scope: wire.ScopeEndpoint, Topic: "kv_metrics", InstanceID: 0x1f3a4b}},
		{"v1/event_channels/namespace/ns%2Eone/topic/kv%2Eevents%2F%3E/2a", wire.Key{Space: wire.KeyspaceEventChannels, Namespace: "ns.one", Scope: wire.ScopeNamespace, Topic: "kv.events/>", InstanceID: 0x2a}},
		{"v1/event_channels/namespace/dynamo/component/decode/topic/kv-events/ff", wire.Key{Space: wire.KeyspaceEventChannels, Namespace: "dynamo", Component: "decode", Scope: wire.ScopeComponent, Topic: "kv-events", InstanceID: 0xff}},
		{"v1/event_channels/dynamo//kv_metrics/2a", wire.Key{Space: wire.KeyspaceEventChannels, Namespace: "dynamo", Scope: wire.ScopeNamespace, Topic: "kv_metrics", InstanceID: 0x2a, Legacy: true}},
	}
	for _, tt := range tests {
		got, err := wire.ParseKey(tt.key)
		if err != nil {
			t.Errorf("%s: %v", tt.key, err)
			continue
		}
		if got != tt.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.key, got, tt.want)
		}
	}
	bad := []string{
		"v2/instances/a/b/c/1", "v1/instances/a/b/c", "v1/instances/a/b/c/zz", "v1/instances/a/b/c/1/x",
		"v1/instances//b/c/1", "v1/mdc/a/b/c/1/", "v1/instances/a/b/c/11111111111111111",
		"v1/event_channels/namespace/a/topic/t", "v1/event_channels/namespace/a/comp/b/topic/t/1",
		"v1/event_channels/namespace/a/topic/%2/1", "v1/event_channels/namespace/%FF/topic/t/1",
		"v1/event_channels/namespace/a/component/b/endpoint/c/extra/d/topic/t/1",
	}
	for _, k := range bad {
		if _, err := wire.ParseKey(k); !errors.Is(err, wire.ErrKey) {
			t.Errorf("%s: err = %v, want ErrKey", k, err)
		}
	}
}

func TestSegmentEscaping(t *testing.T) {
	for in, want := range map[string]string{"ns.one": "ns%2Eone", "kv.events/>": "kv%2Eevents%2F%3E", "a-b_C9": "a-b_C9", "é": "%C3%A9"} {
		if got := wire.EncodeSegment(in); got != want {
			t.Errorf("encode %q = %q, want %q", in, got, want)
		}
		if got, err := wire.DecodeSegment(want); err != nil || got != in {
			t.Errorf("decode %q = %q, %v", want, got, err)
		}
	}
	if got := wire.WatchPrefixes("ns.one"); got[2] != "v1/event_channels/namespace/ns%2Eone/" || got[0] != "v1/instances/ns.one/" {
		t.Errorf("prefixes %v", got)
	}
}

func TestParseEndpoint(t *testing.T) {
	e, err := wire.ParseEndpoint([]byte(`{"type":"Endpoint","namespace":"dynamo","component":"prefill","endpoint":"generate","instance_id":7465265302745285,"transport":{"tcp":"10.0.0.4:31000/1a7f2b/dynamo/prefill/generate"},"device_type":"cuda","request_plane_codec":"msgpack","future":{"x":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if e.InstanceID != (wire.ID{Value: 7465265302745285, Set: true}) || e.Transport.Kind != "tcp" || e.Component != "prefill" {
		t.Errorf("%+v", e)
	}
	// Hex strings and numbers normalise to one id; precision survives above 2^53.
	for _, v := range []string{`{"instance_id":"1a85c3e2f4b1d"}`, `{"instance_id":466589110455069}`} {
		e, err := wire.ParseEndpoint([]byte(v))
		if err != nil || e.InstanceID.Value != 0x1a85c3e2f4b1d {
			t.Errorf("%s: %+v %v", v, e, err)
		}
	}
	if e, _ := wire.ParseEndpoint([]byte(`{"instance_id":18446744073709551615}`)); e.InstanceID.Value != 1<<64-1 {
		t.Errorf("u64 max lost precision: %d", e.InstanceID.Value)
	}
	for _, v := range []string{`{"instance_id":-1}`, `{"instance_id":1.5}`, `{"instance_id":"xyz"}`, `[1]`, `nope`} {
		if _, err := wire.ParseEndpoint([]byte(v)); err == nil {
			t.Errorf("%s: parsed", v)
		}
	}
}

func TestParseModel(t *testing.T) {
	m, err := wire.ParseModel([]byte(`{"type":"Model","namespace":"dynamo","component":"prefill","endpoint":"generate","instance_id":7465265302745285,
	 "card_json":{"display_name":"Qwen/Qwen3-32B","worker_type":"Prefill","kv_cache_block_size":64,"migration_limit":3,"dynamo_version":"1.5.0",
	  "runtime_config":{"total_kv_blocks":12000,"max_num_batched_tokens":8192,"max_num_seqs":256,"context_length":32768,
	   "data_parallel_start_rank":0,"data_parallel_size":1,"disaggregated_endpoint":"dynamo/decode/generate"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Card
	if c.Model() != "Qwen/Qwen3-32B" || c.WorkerType != wire.WorkerPrefill || *c.KVCacheBlockSize != 64 ||
		*c.Runtime.TotalKVBlocks != 12000 || *c.Runtime.MaxNumBatchedTokens != 8192 || *c.Runtime.ContextLength != 32768 ||
		!c.Runtime.DataParallelDeclared || c.Runtime.DataParallelSize != 1 || string(c.Runtime.DisaggregatedEndpoint) != `"dynamo/decode/generate"` ||
		c.Versions["dynamo_version"] != "1.5.0" || c.MigrationLimit != 3 || len(m.CardErrors) != 0 || len(m.CardJSON) == 0 {
		t.Errorf("%+v %+v", m, c)
	}
}

// TestParseModelPartial: typed fields that fail are named and left unset;
// the rest parse and the worker is still built: a bad field costs that
// field, not the worker.
func TestParseModelPartial(t *testing.T) {
	m, err := wire.ParseModel([]byte(`{"instance_id":1,"model_suffix":null,"card_json":{"name":"m","worker_type":"Encoder9000","kv_cache_block_size":"big","migration_limit":-1,
	  "lora":null,"runtime_config":{"total_kv_blocks":-5,"max_num_seqs":4,"data_parallel_size":4,"data_parallel_start_rank":8,"disaggregated_endpoint":{"bootstrap_host":"h","bootstrap_port":1}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Card
	if c.Model() != "m" || c.WorkerType != wire.WorkerUnknown || c.RawWorkerType != "Encoder9000" || c.KVCacheBlockSize != nil || c.MigrationLimit != 0 || c.LoRA ||
		c.Runtime.TotalKVBlocks != nil || *c.Runtime.MaxNumSeqs != 4 || c.Runtime.DataParallelSize != 4 || c.Runtime.DataParallelStartRank != 8 ||
		string(c.Runtime.DisaggregatedEndpoint) != `{"bootstrap_host":"h","bootstrap_port":1}` {
		t.Errorf("%+v", c)
	}
	if !slices.Equal(m.CardErrors, []string{"kv_cache_block_size", "migration_limit", "runtime_config.total_kv_blocks"}) {
		t.Errorf("card errors %v", m.CardErrors)
	}
	lora, _ := wire.ParseModel([]byte(`{"instance_id":1,"model_suffix":"ad","card_json":{"lora":{"name":"ad"}}}`))
	if !lora.Card.LoRA || lora.ModelSuffix != "ad" {
		t.Errorf("lora %+v", lora)
	}
	noDP, _ := wire.ParseModel([]byte(`{"card_json":{"runtime_config":{}}}`))
	if noDP.Card.Runtime.DataParallelDeclared || noDP.Card.Runtime.DataParallelSize != 1 {
		t.Errorf("dp defaults %+v", noDP.Card.Runtime)
	}
}

func TestParseEventChannel(t *testing.T) {
	ch, err := wire.ParseEventChannel([]byte(`{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"dynamo","component":"decode","name":"generate"}},
	  "topic":"kv_metrics","instance_id":2046539,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.7:41000"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := wire.EventChannel{Type: "EventChannel", Namespace: "dynamo", Component: "decode", Endpoint: "generate", Scope: wire.ScopeEndpoint, Topic: "kv_metrics",
		PublisherID: wire.ID{Value: 2046539, Set: true}, TransportKind: "Zmq", ZmqEndpoint: "tcp://10.0.0.7:41000"}
	if *ch != want {
		t.Errorf("got %+v", *ch)
	}
	legacy, err := wire.ParseEventChannel([]byte(`{"type":"EventChannel","namespace":"dynamo","component":"","topic":"kv_metrics","instance_id":42,"transport":{"kind":"Nats","config":{"subject_prefix":"x"}}}`))
	if err != nil || !legacy.Legacy || legacy.Namespace != "dynamo" || legacy.TransportKind != "Nats" || legacy.ZmqEndpoint != "" {
		t.Errorf("legacy %+v %v", legacy, err)
	}
	comp, _ := wire.ParseEventChannel([]byte(`{"scope":{"kind":"component","namespace":"n","component":"c"},"topic":"t"}`))
	if comp.Scope != wire.ScopeComponent || comp.Component != "c" || comp.PublisherID.Set {
		t.Errorf("component scope %+v", comp)
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"v1/instances/dynamo/prefill/generate/1a85c3e2f4b1d", "v1/mdc/a/b/c/1/l", "v1/event_channels/namespace/a%2E/component/b/endpoint/c/topic/t/ff", "v1/event_channels/a//t/1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := wire.ParseKey(string(b))
		if err != nil {
			return
		}
		if k.Space == 0 || k.Namespace == "" {
			t.Fatalf("accepted %q as %+v", b, k)
		}
	})
}

func FuzzParseRecords(f *testing.F) {
	f.Add([]byte(`{"type":"Model","instance_id":1,"card_json":{"runtime_config":{"data_parallel_size":2}}}`))
	f.Add([]byte(`{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{}},"transport":{"kind":"Zmq","config":{"endpoint":"tcp://a:1"}}}`))
	f.Add([]byte(`{"type":"Endpoint","instance_id":"ff","transport":{"tcp":"a"}}`))
	f.Add([]byte(`{"type":"Model","instance_id":1,"card_json":{"worker_type":" Prefill | decode ","model_type":"Chat | Completions"}}`))
	f.Add([]byte(`{"type":"Model","instance_id":1,"card_json":{"model_type":"Prefill | 0x100","model_input":"Tokens"}}`))
	f.Add([]byte(`{"type":"Model","instance_id":1,"card_json":{"worker_type":"encode|prefill","model_type":17}}`))
	f.Add([]byte(`{"type":"End\u0070oint","namespace":"a\\b","component":"` + "\xff\xfe" + `","endpoint":"g","endpoint":7,"instance_id":1}`))
	f.Add([]byte(` { "tcp" : "h:1/x" } `))
	f.Add([]byte(`{"tcp":"a","tcp":"b"}`))
	f.Add([]byte(`{"zmq":"b","tcp":"a","nats":7}`))
	f.Add([]byte(`{"nats_tcp":"a\u0062"}`))
	f.Add([]byte(`{"type":"Endpoint","TYPE":"x","Namespace":"n","namespace":"d","ſomething":1,"compoNent":"c","endpoint":"e","nested":{"Type":"y"}}`))
	f.Add([]byte(`{"type":"Endpoint","namespace":"d\u00e9","component":null,"endpoint":"\ud800","instance_id":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = wire.RecordType(b)
		if e, err := wire.ParseEndpoint(b); err == nil {
			got := [4]string{e.Type, e.Namespace, e.Component, e.Endpoint}
			if want := endpointStrings(b); got != want {
				t.Fatalf("%q: strings %q, json.Unmarshal reads %q", b, got, want)
			}
		}
		if m, err := wire.ParseModel(b); err == nil && m.Card.Runtime.DataParallelSize == 0 {
			t.Fatal("data_parallel_size 0 accepted")
		}
		_, _ = wire.ParseEventChannel(b)
		if json.Valid(b) {
			var got wire.Transport
			err := got.UnmarshalJSON(b)
			if want, ok := transportOf(b); ok && (err != nil || got != want) {
				t.Fatalf("%q: transport %+v (%v), a map reads %+v", b, got, err, want)
			}
		}
	})
}

// transportOf reads a transport as a map of its entries, the reference
// for Transport's reading: of an object, the entry with the least key (the
// kind and, when it is a string, the address); a string is the address.
func transportOf(b []byte) (wire.Transport, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) == nil {
		if len(m) == 0 {
			return wire.Transport{}, true
		}
		k := slices.Min(slices.Collect(maps.Keys(m)))
		var addr string
		_ = json.Unmarshal(m[k], &addr)
		return wire.Transport{Kind: k, Address: addr}, true
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		return wire.Transport{Address: s}, true
	}
	return wire.Transport{}, false
}

// endpointStrings reads an endpoint record's string fields with
// json.Unmarshal alone, as the reference for ParseEndpoint: keys match the
// fields' names exactly (one in another case is an unknown field, as to
// Dynamo's decoder), the last of a repeated key counts, and a value that
// is not a string reads as "".
func endpointStrings(b []byte) [4]string {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	var out [4]string
	for i, name := range []string{"type", "namespace", "component", "endpoint"} {
		_ = json.Unmarshal(m[name], &out[i])
	}
	return out
}

// TestParseModelLenientEnvelope: an envelope field of the wrong type is
// left empty and the card still parses, as every field is optional; only
// an instance_id that is not an id, or a value that is not an object,
// fails the record.
func TestParseModelLenientEnvelope(t *testing.T) {
	t.Parallel()
	m, err := wire.ParseModel([]byte(`{"type":true,"namespace":7,"component":["decode"],"endpoint":{"x":1},"model_suffix":5,"instance_id":"1f",
	  "card_json":{"display_name":"m","worker_type":"Decode","kv_cache_block_size":16}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != "" || m.Namespace != "" || m.Component != "" || m.Endpoint != "" || m.ModelSuffix != "" || m.InstanceID != (wire.ID{Value: 0x1f, Set: true}) {
		t.Errorf("envelope %+v", m)
	}
	if m.Card.Model() != "m" || m.Card.WorkerType != wire.WorkerDecode || *m.Card.KVCacheBlockSize != 16 || len(m.CardErrors) != 0 || len(m.CardJSON) == 0 {
		t.Errorf("card %+v, errors %v", m.Card, m.CardErrors)
	}
	for _, v := range []string{`{"instance_id":-1,"card_json":{}}`, `{"instance_id":{},"card_json":{}}`, `[1]`, `nope`} {
		if _, err := wire.ParseModel([]byte(v)); err == nil {
			t.Errorf("%s: parsed", v)
		}
	}
}
