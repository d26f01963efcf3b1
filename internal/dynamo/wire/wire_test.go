package wire_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

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
	 "card_json":{"display_name":"qwen","source_path":"Qwen/Qwen3-32B","worker_type":"Prefill","kv_cache_block_size":64,"migration_limit":3,"dynamo_version":"1.5.0",
	  "runtime_config":{"total_kv_blocks":12000,"max_num_batched_tokens":8192,"max_num_seqs":256,"context_length":32768,
	   "data_parallel_start_rank":0,"data_parallel_size":1,"disaggregated_endpoint":"dynamo/decode/generate"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Card
	if c.Model() != "qwen" || c.HFSource() != "Qwen/Qwen3-32B" || c.WorkerType != wire.WorkerPrefill || *c.KVCacheBlockSize != 64 ||
		*c.Runtime.TotalKVBlocks != 12000 || *c.Runtime.MaxNumBatchedTokens != 8192 || *c.Runtime.ContextLength != 32768 ||
		!c.Runtime.DataParallelDeclared || c.Runtime.DataParallelSize != 1 || string(c.Runtime.DisaggregatedEndpoint) != `"dynamo/decode/generate"` ||
		c.Versions["dynamo_version"] != "1.5.0" || c.MigrationLimit != 3 || len(m.CardErrors) != 0 || len(m.CardJSON) == 0 {
		t.Errorf("%+v %+v", m, c)
	}
}

// TestIDErrorsBounded: an id that is not one is quoted cut short in the
// error, however long the record writes it.
func TestIDErrorsBounded(t *testing.T) {
	long := strings.Repeat("7", 1<<20)
	for _, v := range []string{`{"instance_id":"` + long + `"}`, `{"instance_id":"zz` + long + `"}`, `{"instance_id":[` + long + `]}`, `{"instance_id":-` + long + `}`} {
		_, err := wire.ParseEndpoint([]byte(v))
		if err == nil || len(err.Error()) > 256 {
			t.Errorf("%.40s…: error of %d bytes", v, len(fmt.Sprint(err)))
		}
	}
}

// TestNullRecord: a value of null is valid JSON but no record (it names no
// type, instance or card), so each parser refuses it as it refuses an
// array or a number; a record with only null fields is an empty record.
func TestNullRecord(t *testing.T) {
	for _, v := range []string{`null`, ` null `} {
		if _, err := wire.ParseEndpoint([]byte(v)); err == nil {
			t.Errorf("endpoint %q parsed", v)
		}
		if _, err := wire.ParseModel([]byte(v)); err == nil {
			t.Errorf("model %q parsed", v)
		}
		if _, err := wire.ParseEventChannel([]byte(v)); err == nil {
			t.Errorf("event channel %q parsed", v)
		}
	}
	m, err := wire.ParseModel([]byte(`{"type":null,"instance_id":null,"card_json":null}`))
	if err != nil || m.InstanceID.Set || m.CardJSON != nil {
		t.Errorf("null fields: %+v %v", m, err)
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
	for _, tc := range []struct {
		runtime string
		eagle   bool
		errs    []string
	}{{`{"enable_eagle":true}`, true, nil}, {`{"enable_eagle":false}`, false, nil}, {`{"enable_eagle":null}`, false, nil},
		{`{"enable_eagle":"yes"}`, false, []string{"runtime_config.enable_eagle"}}} {
		m, _ := wire.ParseModel([]byte(`{"card_json":{"runtime_config":` + tc.runtime + `}}`))
		if m.Card.Runtime.EnableEagle != tc.eagle || !slices.Equal(m.CardErrors, tc.errs) {
			t.Errorf("%s: eagle %v, errors %v", tc.runtime, m.Card.Runtime.EnableEagle, m.CardErrors)
		}
	}
	noDP, _ := wire.ParseModel([]byte(`{"card_json":{"runtime_config":{}}}`))
	if noDP.Card.Runtime.DataParallelDeclared || noDP.Card.Runtime.DataParallelSize != 1 || noDP.Card.Runtime.KeepToolsWhenToolChoiceNone {
		t.Errorf("defaults %+v", noDP.Card.Runtime)
	}
	for v, keep := range map[string]bool{`false`: true, `true`: false, `null`: false, `"no"`: false} {
		m, _ := wire.ParseModel([]byte(`{"card_json":{"runtime_config":{"exclude_tools_when_tool_choice_none":` + v + `}}}`))
		if m.Card.Runtime.KeepToolsWhenToolChoiceNone != keep || (v == `"no"`) != (len(m.CardErrors) == 1) {
			t.Errorf("exclude_tools_when_tool_choice_none %s: keep %v, errors %v", v, m.Card.Runtime.KeepToolsWhenToolChoiceNone, m.CardErrors)
		}
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
		// Any text is a segment once escaped, and reads back as itself.
		if utf8.Valid(b) {
			if got, err := wire.DecodeSegment(wire.EncodeSegment(string(b))); err != nil || got != string(b) {
				t.Fatalf("%q escaped and read back: %q, %v", b, got, err)
			}
		}
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
	f.Add([]byte(`{"type":"EventChannel","namespace":5,"Scope":{},"scope":{"kind":"component","Kind":"x","namespace":"n","component":"c","name":7},"topic":"kv_metrics","publisher_id":"zz","instance_id":2,"transport":{"kind":"Zmq","config":{"Endpoint":"tcp://x:1","endpoint":"tcp://a:1"}}}`))
	f.Add([]byte(`{"scope":{"kind":"endpoint","endpoint":{"namespace":"n","Component":"x","component":"c","name":"g"}},"publisher_id":"ff","transport":{"kind":"Nats","config":{"endpoint":"tcp://a:1"}}}`))
	f.Add([]byte(`{"scope":null,"namespace":"n","component":["c"],"instance_id":null,"publisher_id":3,"transport":"Zmq"}`))
	f.Add([]byte(`{"scope":5,"topic":7,"instance_id":-1}`))
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
		if json.Valid(b) {
			got, err := wire.ParseEventChannel(b)
			want, wantErr := channelOf(b)
			switch {
			case (err != nil) != wantErr:
				t.Fatalf("%q: event channel error %v, a map reading fails: %v", b, err, wantErr)
			case err == nil && *got != want:
				t.Fatalf("%q: event channel\n%+v\na map reading gives\n%+v", b, *got, want)
			}
		} else if _, err := wire.ParseEventChannel(b); err == nil {
			t.Fatalf("%q: invalid JSON parsed as an event channel", b)
		}
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

// channelOf reads an event channel record through maps of its exact keys
// at every level, as the reference for ParseEventChannel: a record with a
// non-null scope is scoped and reads only the fields of its scope's kind,
// one without is legacy and reads its namespace and component; the
// publisher id is instance_id, else publisher_id; a Zmq transport's
// config gives its endpoint; a value of another type than a field's reads
// as empty, and fail is true only when the value is not an object or the
// id read is not an id.
func channelOf(b []byte) (ch wire.EventChannel, fail bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil || top == nil {
		return ch, true
	}
	obj := func(raw json.RawMessage) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(raw, &m)
		return m
	}
	str := func(raw json.RawMessage) string {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	null := func(raw json.RawMessage) bool { return raw == nil || string(raw) == "null" }
	ch.Type, ch.Topic = str(top["type"]), str(top["topic"])
	id := top["instance_id"]
	if null(id) {
		id = top["publisher_id"]
	}
	if !null(id) && json.Unmarshal(id, &ch.PublisherID) != nil {
		return wire.EventChannel{}, true
	}
	if scope := top["scope"]; null(scope) {
		ch.Legacy = true
		ch.Namespace, ch.Component = str(top["namespace"]), str(top["component"])
	} else {
		s := obj(scope)
		ch.Scope = wire.ScopeKind(str(s["kind"]))
		switch ch.Scope {
		case wire.ScopeNamespace:
			ch.Namespace = str(s["name"])
		case wire.ScopeComponent:
			ch.Namespace, ch.Component = str(s["namespace"]), str(s["component"])
		case wire.ScopeEndpoint:
			e := obj(s["endpoint"])
			ch.Namespace, ch.Component, ch.Endpoint = str(e["namespace"]), str(e["component"]), str(e["name"])
		}
	}
	t := obj(top["transport"])
	if ch.TransportKind = str(t["kind"]); ch.TransportKind == "Zmq" {
		ch.ZmqEndpoint = str(obj(t["config"])["endpoint"])
	}
	return ch, false
}

// TestParseEventChannelFields: an event channel record is read as Dynamo's
// decoder reads it: exact field names at every level, and a field outside
// the record's shape ignored whatever its type; a field of the shape with
// the wrong type is left empty, as an endpoint record's is.
func TestParseEventChannelFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, value string
		want        wire.EventChannel
	}{
		{
			name:  "a scoped record's top-level namespace is not its shape's",
			value: `{"type":"EventChannel","namespace":5,"component":{"x":1},"scope":{"kind":"namespace","name":"dynamo","component":7},"topic":"kv_metrics","instance_id":9,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://a:1"}}}`,
			want:  wire.EventChannel{Type: "EventChannel", Namespace: "dynamo", Scope: wire.ScopeNamespace, Topic: "kv_metrics", PublisherID: wire.ID{Value: 9, Set: true}, TransportKind: "Zmq", ZmqEndpoint: "tcp://a:1"},
		},
		{
			name: "keys in another case are unknown fields, at every level",
			value: `{"Type":"X","TOPIC":"x","topic":"kv_metrics","Instance_ID":1,"instance_id":2,"Scope":{"kind":"namespace","name":"x"},` +
				`"scope":{"Kind":"namespace","kind":"endpoint","endpoint":{"Namespace":"x","namespace":"dynamo","component":"decode","NAME":"x","name":"generate"}},` +
				`"transport":{"Kind":"Nats","kind":"Zmq","config":{"Endpoint":"tcp://x:1","endpoint":"tcp://a:1"}}}`,
			want: wire.EventChannel{Namespace: "dynamo", Component: "decode", Endpoint: "generate", Scope: wire.ScopeEndpoint, Topic: "kv_metrics",
				PublisherID: wire.ID{Value: 2, Set: true}, TransportKind: "Zmq", ZmqEndpoint: "tcp://a:1"},
		},
		{
			name:  "a legacy record has no scope, and a scoped record's fields are not its",
			value: `{"type":"EventChannel","namespace":"dynamo","component":"decode","Scope":{"kind":"namespace","name":"x"},"name":5,"topic":"kv_metrics","instance_id":3,"transport":{"kind":"Nats","config":7}}`,
			want:  wire.EventChannel{Type: "EventChannel", Namespace: "dynamo", Component: "decode", Topic: "kv_metrics", PublisherID: wire.ID{Value: 3, Set: true}, TransportKind: "Nats", Legacy: true},
		},
		{
			name:  "fields of the shape with the wrong type are left empty",
			value: `{"type":1,"topic":["kv_metrics"],"scope":{"kind":"component","namespace":7,"component":"decode"},"instance_id":"1f","publisher_id":"not hex","transport":{"kind":"Zmq","config":{"endpoint":5}}}`,
			want:  wire.EventChannel{Component: "decode", Scope: wire.ScopeComponent, PublisherID: wire.ID{Value: 0x1f, Set: true}, TransportKind: "Zmq"},
		},
		{
			name:  "a scope that is not an object has no kind",
			value: `{"scope":"endpoint","namespace":"dynamo","instance_id":4,"transport":[1]}`,
			want:  wire.EventChannel{PublisherID: wire.ID{Value: 4, Set: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch, err := wire.ParseEventChannel([]byte(tt.value))
			if err != nil {
				t.Fatal(err)
			}
			if *ch != tt.want {
				t.Errorf("got\n%+v\nwant\n%+v", *ch, tt.want)
			}
		})
	}
	for _, v := range []string{`{"instance_id":-1}`, `{"publisher_id":{}}`, `{"instance_id":"xyz","publisher_id":1}`, `[1]`, `nope`} {
		if _, err := wire.ParseEventChannel([]byte(v)); err == nil {
			t.Errorf("%s: parsed", v)
		}
	}
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

// TestPaddedHexIDs: a hex id padded with leading zeros past 16 digits is
// the same id, as an unsigned parse of the string reads it, in a record
// and in a key; 17 significant digits are still no id.
func TestPaddedHexIDs(t *testing.T) {
	for _, v := range []string{`{"instance_id":"1a"}`, `{"instance_id":"0000000000000001a"}`, `{"instance_id":"0x00000000000000000000001A"}`} {
		if e, err := wire.ParseEndpoint([]byte(v)); err != nil || e.InstanceID.Value != 0x1a {
			t.Errorf("%s: %+v %v", v, e, err)
		}
	}
	if e, err := wire.ParseEndpoint([]byte(`{"instance_id":"00000000000000000"}`)); err != nil || e.InstanceID != (wire.ID{Value: 0, Set: true}) {
		t.Errorf("zeros: %+v %v", e, err)
	}
	if _, err := wire.ParseEndpoint([]byte(`{"instance_id":"10000000000000000"}`)); err == nil {
		t.Error("17 significant digits parsed")
	}
	k, err := wire.ParseKey("v1/instances/dynamo/decode/generate/000000000000000000ff")
	if err != nil || k.InstanceID != 0xff {
		t.Errorf("padded key: %+v %v", k, err)
	}
}
