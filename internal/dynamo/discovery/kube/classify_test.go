package kube_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

func dwmJSON(name, owner, spec string) []byte {
	return []byte(fmt.Sprintf(`{"metadata":{"name":%q,"uid":"u1","ownerReferences":[{"kind":"Pod","name":%q}]},"spec":%s}`, name, owner, spec))
}

func TestClassifyDWM(t *testing.T) {
	t.Parallel()
	const pod = "worker-0"
	id := kube.HashPodName(pod)
	ep := func(ns string, id uint64) string {
		return fmt.Sprintf(`{"type":"Endpoint","namespace":%q,"component":"c","endpoint":"generate","instance_id":%d,"transport":{"tcp":"x"}}`, ns, id)
	}
	card := func(id uint64, suffix string) string {
		s := ""
		if suffix != "" {
			s = fmt.Sprintf(`,"model_suffix":%q`, suffix)
		}
		return fmt.Sprintf(`{"type":"Model","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d%s,"card_json":{"display_name":"m"}}`, id, s)
	}
	hex := wire.FormatID(id)
	big := strings.Repeat("x", 1<<20+10)
	for _, tc := range []struct {
		name, owner, spec  string
		keys               []string
		refusal, malformed string
	}{
		{name: "etcd relative keys", spec: fmt.Sprintf(`{"data":{"endpoints":{"dn/c/generate/%s":%s},"model_cards":{"dn/c/generate/%s":%s}}}`, hex, ep("dn", id), hex, card(id, "")),
			keys: []string{"v1/instances/dn/c/generate/" + hex, "v1/mdc/dn/c/generate/" + hex}},
		{name: "old 3-segment keys: identity from the value", spec: fmt.Sprintf(`{"data":{"endpoints":{"dn/c/generate":%s}}}`, ep("dn", id)),
			keys: []string{"v1/instances/dn/c/generate/" + hex}},
		{name: "LoRA suffix from the key", spec: fmt.Sprintf(`{"data":{"model_cards":{"dn/c/generate/%s/lora-a":%s}}}`, hex, card(id, "")),
			keys: []string{"v1/mdc/dn/c/generate/" + hex + "/lora-a"}},
		{name: "other namespaces ignored", spec: fmt.Sprintf(`{"data":{"endpoints":{"x":%s,"y":%s}}}`, ep("dn", id), ep("other", 1)),
			keys: []string{"v1/instances/dn/c/generate/" + hex}},
		{name: "null maps and entries are empty", spec: `{"data":{"endpoints":null,"model_cards":{"k":null},"event_channels":null,"event_sources":null}}`},
		{name: "event channel ids are publisher ids", spec: `{"data":{"event_sources":{"k":{"type":"EventChannel","scope":{"kind":"namespace","name":"dn"},"topic":"kv_metrics","instance_id":5,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://h:1"}}}}}}`,
			keys: []string{"v1/event_channels/namespace/dn/topic/kv_metrics/5"}},
		{name: "value id mismatch", spec: fmt.Sprintf(`{"data":{"endpoints":{"x":%s}}}`, ep("dn", 7)), refusal: "mismatch"},
		{name: "key id mismatch", spec: fmt.Sprintf(`{"data":{"model_cards":{"dn/c/generate/7":%s}}}`, card(id, "")), refusal: "mismatch"},
		{name: "card key of another component, id mismatch", spec: fmt.Sprintf(`{"data":{"model_cards":{"dn/other/generate/7":%s}}}`, card(id, "")), refusal: "mismatch"},
		{name: "card key of another endpoint, id mismatch", spec: fmt.Sprintf(`{"data":{"model_cards":{"dn/c/other/7/lora":%s}}}`, card(id, "")), refusal: "mismatch"},
		{name: "value without namespace: its id is still checked", spec: fmt.Sprintf(`{"data":{"endpoints":{"dn/c/generate/%s":{"type":"Endpoint","instance_id":7,"transport":{"tcp":"x"}}}}}`, hex), refusal: "mismatch"},
		{name: "card without namespace: its id is still checked", spec: fmt.Sprintf(`{"data":{"model_cards":{"dn/c/generate/%s":{"type":"Model","instance_id":7,"card_json":{"display_name":"m"}}}}}`, hex), refusal: "mismatch"},
		{name: "value without namespace, the key's id", spec: fmt.Sprintf(`{"data":{"endpoints":{"dn/c/generate/%s":{"type":"Endpoint","instance_id":%d,"transport":{"tcp":"x"}}},"model_cards":{"dn/c/generate/%s":{"type":"Model","card_json":{"display_name":"m"}}}}}`, hex, id, hex),
			keys: []string{"v1/instances/dn/c/generate/" + hex, "v1/mdc/dn/c/generate/" + hex}},
		{name: "endpoint key of another component, id mismatch", spec: fmt.Sprintf(`{"data":{"endpoints":{"dn/other/generate/7":%s}}}`, ep("dn", id)), refusal: "mismatch"},
		{name: "card key of another component, same id", spec: fmt.Sprintf(`{"data":{"model_cards":{"dn/other/generate/%s":%s}}}`, hex, card(id, "")),
			keys: []string{"v1/mdc/dn/c/generate/" + hex}},
		{name: "container mode", owner: "worker-0-pod", spec: fmt.Sprintf(`{"data":{"endpoints":{"x":%s}}}`, ep("dn", 7)), refusal: "refused"},
		{name: "container mode of another namespace ignored", owner: "worker-0-pod", spec: fmt.Sprintf(`{"data":{"endpoints":{"x":%s}}}`, ep("other", 7))},
		{name: "container mode without records ignored", owner: "worker-0-pod", spec: `{"data":{}}`},
		{name: "spec not an object", spec: `"x"`, malformed: "spec is not an object"},
		{name: "spec.data not an object", spec: `{"data":[1]}`, malformed: "spec.data is not an object"},
		{name: "spec.data missing", spec: `{}`, malformed: "spec.data is not an object"},
		{name: "a map not an object", spec: `{"data":{"endpoints":"x"}}`, malformed: "spec.data.endpoints"},
		{name: "a later map not an object", spec: fmt.Sprintf(`{"data":{"endpoints":{"x":%s},"model_cards":"x"}}`, ep("dn", id)), malformed: "spec.data.model_cards"},
		{name: "unparseable entry handed on under its map key", spec: `{"data":{"endpoints":{"dn/c/generate/zz":{"type":"Endpoint"}}}}`,
			keys: []string{"v1/instances/dn/c/generate/zz"}},
		{name: "large card shrunk to its core fields", spec: fmt.Sprintf(`{"data":{"model_cards":{"k":{"type":"Model","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m","chat_template":%q}}}}}`, id, big),
			keys: []string{"v1/mdc/dn/c/generate/" + hex}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner := tc.owner
			if owner == "" {
				owner = pod
			}
			d := kube.ClassifyDWM(dwmJSON(pod, owner, tc.spec), []string{"dn"})
			if tc.malformed != "" {
				if !strings.Contains(d.Malformed, tc.malformed) || len(d.Records) != 0 || d.Size != 0 {
					t.Fatalf("malformed %q with %d records of %d bytes, want %q and none", d.Malformed, len(d.Records), d.Size, tc.malformed)
				}
				return
			}
			if tc.refusal != "" {
				if d.Refusal == nil || d.Refusal.Kind != tc.refusal || len(d.Records) != 0 {
					t.Fatalf("refusal %+v records %d, want %s", d.Refusal, len(d.Records), tc.refusal)
				}
				return
			}
			if d.Refusal != nil || d.Malformed != "" {
				t.Fatalf("refused: %+v %s", d.Refusal, d.Malformed)
			}
			var keys []string
			for k, v := range d.Records {
				keys = append(keys, k)
				if len(v) > 1<<20 {
					t.Errorf("%s kept %d bytes", k, len(v))
				}
				if m, err := wire.ParseModel(v); err == nil && m.Card.DisplayName == "" && strings.HasPrefix(k, wire.PrefixModelCards) {
					t.Errorf("%s lost its display name", k)
				}
			}
			if strings.Join(slices.Sorted(slices.Values(keys)), ",") != strings.Join(tc.keys, ",") {
				t.Fatalf("keys %v, want %v", keys, tc.keys)
			}
		})
	}
}

// TestClassifyDWMChannelAndSource: a publisher written both under
// event_channels and under event_sources keeps its channel record, whose
// transport the router subscribes through, whichever the map keys sort.
func TestClassifyDWMChannelAndSource(t *testing.T) {
	t.Parallel()
	const pod = "worker-0"
	channel := `{"type":"EventChannel","scope":{"kind":"namespace","name":"dn"},"topic":"kv_metrics","instance_id":5,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://h:1"}}}`
	source := `{"type":"EventSource","scope":{"kind":"namespace","name":"dn"},"topic":"kv_metrics","publisher_id":5,"metadata":{}}`
	for _, keys := range [][2]string{{"a", "b"}, {"b", "a"}} {
		spec := fmt.Sprintf(`{"data":{"event_channels":{%q:%s},"event_sources":{%q:%s}}}`, keys[0], channel, keys[1], source)
		d := kube.ClassifyDWM(dwmJSON(pod, pod, spec), []string{"dn"})
		const key = "v1/event_channels/namespace/dn/topic/kv_metrics/5"
		if len(d.Records) != 1 || string(d.Records[key]) != channel {
			t.Fatalf("map keys %v: records %q, want the channel record under %s", keys, d.Records, key)
		}
		if d.Size != len(key)+len(channel) {
			t.Fatalf("size %d, want %d", d.Size, len(key)+len(channel))
		}
	}
}

// TestClassifyDWMPodUID: the owning Pod's uid and the records' namespace
// are kept for the readiness join.
func TestClassifyDWMPodUID(t *testing.T) {
	const pod = "worker-0"
	ep := func(ns string) string {
		return fmt.Sprintf(`{"type":"Endpoint","namespace":%q,"component":"c","endpoint":"generate","instance_id":%d}`, ns, kube.HashPodName(pod))
	}
	data := fmt.Sprintf(`{"data":{"endpoints":{"a":%s,"b":%s,"c":%s}}}`, ep("dn"), ep("an"), ep("other"))
	for _, tc := range []struct {
		name, owners, uid, ns string
	}{
		{name: "pod owner with uid", owners: `[{"kind":"Pod","name":"worker-0","uid":"p1"}]`, uid: "p1", ns: "an"},
		{name: "pod owner without uid", owners: `[{"kind":"Pod","name":"worker-0"}]`, ns: "an"},
		{name: "no owner", owners: `[]`, ns: "an"},
		{name: "other kinds' uids are not the pod's", owners: `[{"kind":"Node","name":"n","uid":"n1"},{"kind":"Pod","name":"worker-0","uid":"p1"}]`, uid: "p1", ns: "an"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := fmt.Sprintf(`{"metadata":{"name":%q,"uid":"r1","ownerReferences":%s},"spec":%s}`, pod, tc.owners, data)
			d := kube.ClassifyDWM([]byte(raw), []string{"dn", "an"})
			if d.PodUID != tc.uid || d.Namespace != tc.ns || d.UID != "r1" || len(d.Records) != 2 {
				t.Fatalf("pod uid %q namespace %q uid %q records %d, want %q %q r1 2", d.PodUID, d.Namespace, d.UID, len(d.Records), tc.uid, tc.ns)
			}
		})
	}
	if d := kube.ClassifyDWM(dwmJSON(pod, pod, `{"data":{"endpoints":{"x":{"type":"Endpoint","namespace":"dn","component":"c","endpoint":"generate","instance_id":7}}}}`), []string{"dn"}); d.Refusal == nil || d.Namespace != "" {
		t.Fatalf("a refused resource: refusal %+v namespace %q", d.Refusal, d.Namespace)
	}
}

// TestClassifyDWMNamespaceFromKey: a map key that is a relative etcd key
// names the record's namespace, whatever the value says (in etcd the key
// prefix does); a key of another form leaves it to the value.
func TestClassifyDWMNamespaceFromKey(t *testing.T) {
	t.Parallel()
	const pod = "worker-0"
	id := kube.HashPodName(pod)
	hex := fmt.Sprintf("%x", id)
	ep := func(ns string) string {
		return fmt.Sprintf(`{"type":"Endpoint","namespace":%q,"component":"c","endpoint":"generate","instance_id":%d}`, ns, id)
	}
	card := func(ns string) string {
		return fmt.Sprintf(`{"type":"Model","namespace":%q,"component":"c","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m"}}`, ns, id)
	}
	channel := func(ns string) string {
		return fmt.Sprintf(`{"type":"EventChannel","scope":{"kind":"namespace","name":%q},"topic":"kv_metrics","instance_id":5,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://h:1"}}}`, ns)
	}
	for _, tc := range []struct {
		name, spec string
		want       []string // record keys
	}{
		{"endpoint keyed elsewhere", fmt.Sprintf(`{"data":{"endpoints":{"other/c/generate/%s":%s}}}`, hex, ep("dn")), nil},
		{"endpoint keyed here", fmt.Sprintf(`{"data":{"endpoints":{"dn/c/generate/%s":%s}}}`, hex, ep("other")),
			[]string{"v1/instances/dn/c/generate/" + hex}},
		{"card keyed here with its suffix", fmt.Sprintf(`{"data":{"model_cards":{"dn/c/generate/%s/lora-a":%s}}}`, hex, card("other")),
			[]string{"v1/mdc/dn/c/generate/" + hex + "/lora-a"}},
		{"card keyed elsewhere", fmt.Sprintf(`{"data":{"model_cards":{"other/c/generate/%s":%s}}}`, hex, card("dn")), nil},
		{"channel keyed here", fmt.Sprintf(`{"data":{"event_channels":{"namespace/dn/topic/kv_metrics/5":%s}}}`, channel("other")),
			[]string{"v1/event_channels/namespace/dn/topic/kv_metrics/5"}},
		{"channel keyed elsewhere", fmt.Sprintf(`{"data":{"event_channels":{"namespace/other/topic/kv_metrics/5":%s}}}`, channel("dn")), nil},
		{"older key keyed here", fmt.Sprintf(`{"data":{"endpoints":{"dn/c/generate":%s}}}`, ep("other")),
			[]string{"v1/instances/dn/c/generate/" + hex}},
		{"older key keyed elsewhere", fmt.Sprintf(`{"data":{"endpoints":{"other/c/generate":%s},"model_cards":{"other/c/generate":%s}}}`, ep("dn"), card("dn")), nil},
		{"key of another form", fmt.Sprintf(`{"data":{"endpoints":{"x":%s}}}`, ep("dn")),
			[]string{"v1/instances/dn/c/generate/" + hex}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := kube.ClassifyDWM(dwmJSON(pod, pod, tc.spec), []string{"dn"})
			if d.Refusal != nil || d.Malformed != "" {
				t.Fatalf("refusal %+v, malformed %q", d.Refusal, d.Malformed)
			}
			got := slices.Sorted(maps.Keys(d.Records))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("records %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzClassifyDWM: whatever a resource holds, classification does not
// panic, keeps only watched namespaces and bounded records, and says why
// it refuses.
func FuzzClassifyDWM(f *testing.F) {
	f.Add(dwmJSON("worker-0", "worker-0", `{"data":{"endpoints":{"dn/c/generate/43710f49c0cff":{"type":"Endpoint","namespace":"dn","component":"c","endpoint":"generate","instance_id":1186445869714687}}}}`))
	f.Add(dwmJSON("w", "x", `{}`))
	f.Add([]byte(`{"spec":{"data":{"event_channels":{"a":{"scope":{"kind":"component","namespace":"dn","component":"%"},"topic":"t","instance_id":"ff"}}}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		d := kube.ClassifyDWM(raw, []string{"dn"})
		if d.Refusal != nil && len(d.Records) != 0 {
			t.Fatalf("refused with records")
		}
		size := 0
		for k, v := range d.Records {
			size += len(k) + len(v)
			if !json.Valid(v) && !strings.HasPrefix(k, "v1/") {
				t.Fatalf("record %q", k)
			}
		}
		if size != d.Size {
			t.Fatalf("size %d, counted %d", d.Size, size)
		}
		if (d.Namespace == "") != (len(d.Records) == 0) {
			t.Fatalf("namespace %q with %d records", d.Namespace, len(d.Records))
		}
	})
}

// TestShrunkCardViewAsEtcd: a card over the retained bound gives one view
// whether etcd hands it over whole or the metadata source shrank it first:
// the worker with its typed fields, and the card reported dropped.
func TestShrunkCardViewAsEtcd(t *testing.T) {
	t.Parallel()
	const pod = "worker-0"
	id := kube.HashPodName(pod)
	key := fmt.Sprintf("dn/c/generate/%x", id)
	endpoint := fmt.Sprintf(`{"type":"Endpoint","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d,"transport":{"nats_tcp":"x"}}`, id)
	card := fmt.Sprintf(`{"type":"Model","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d,`+
		`"card_json":{"display_name":"m","worker_type":"Decode","kv_cache_block_size":32,"chat_template":%q}}`, id, strings.Repeat("x", 1<<20))
	view := func(records map[string][]byte) string {
		r := fleet.NewReducer()
		r.ResyncBegin()
		for k, v := range records {
			r.Put(k, v, time.Unix(0, 0))
		}
		r.ResyncEnd()
		snap := r.Build(time.Unix(0, 0))
		var ws []string
		for w := range snap.Workers.All() {
			ws = append(ws, fmt.Sprintf("%x %s %s %d raw=%t", w.ID.InstanceID, w.Role, w.Model, *w.Card.Typed.KVCacheBlockSize, w.Card.Raw != nil))
		}
		b, err := json.Marshal(map[string]any{"workers": ws, "problems": snap.Problems})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	want := view(map[string][]byte{"v1/instances/" + key: []byte(endpoint), "v1/mdc/" + key: []byte(card)})
	if !strings.Contains(want, "card_dropped") || !strings.Contains(want, "raw=false") {
		t.Fatalf("etcd view %s: want the card reported dropped", want)
	}
	d := kube.ClassifyDWM(dwmJSON(pod, pod, fmt.Sprintf(`{"data":{"endpoints":{%q:%s},"model_cards":{%q:%s}}}`, key, endpoint, key, card)), []string{"dn"})
	if d.Size > 1<<20 {
		t.Fatalf("classified records hold %d bytes: the card was not shrunk", d.Size)
	}
	if got := view(d.Records); got != want {
		t.Fatalf("metadata source's view\n%s\nwant etcd's\n%s", got, want)
	}
}

// TestClassifyKeepsCardUnderBound: the retained-card bound is the card's
// (card_json), not the record's: a Model record over 1 MiB whose card is
// under it is handed on whole, as the etcd path keeps it.
func TestClassifyKeepsCardUnderBound(t *testing.T) {
	t.Parallel()
	const pod = "worker-0"
	id := kube.HashPodName(pod)
	template := strings.Repeat("x", 1<<20-100)
	pad := strings.Repeat("p", 400)
	spec := fmt.Sprintf(`{"data":{"model_cards":{"k":{"type":"Model","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d,"note":%q,"card_json":{"display_name":"m","chat_template":%q}}}}}`, id, pad, template)
	d := kube.ClassifyDWM(dwmJSON(pod, pod, spec), []string{"dn"})
	if d.Refusal != nil || d.Malformed != "" || len(d.Records) != 1 {
		t.Fatalf("refusal %+v, malformed %q, %d records", d.Refusal, d.Malformed, len(d.Records))
	}
	for k, v := range d.Records {
		m, err := wire.ParseModel(v)
		if err != nil || len(v) <= 1<<20 {
			t.Fatalf("%s: %d bytes, %v", k, len(v), err)
		}
		var card struct {
			ChatTemplate string `json:"chat_template"`
		}
		if err := json.Unmarshal(m.CardJSON, &card); err != nil || card.ChatTemplate != template {
			t.Errorf("%s: the card was not kept whole (%d bytes of template, %v)", k, len(card.ChatTemplate), err)
		}
	}
}

// TestMismatchNamesBothIDs: a record whose key and value name different
// instance ids is refused with both ids in the reason, so that an operator
// sees which one is not the pod's.
func TestMismatchNamesBothIDs(t *testing.T) {
	t.Parallel()
	const pod = "worker-0"
	hex := wire.FormatID(kube.HashPodName(pod))
	spec := fmt.Sprintf(`{"data":{"endpoints":{"dn/c/generate/%s":{"type":"Endpoint","namespace":"dn","component":"c","endpoint":"generate","instance_id":7,"transport":{"tcp":"x"}}}}}`, hex)
	d := kube.ClassifyDWM(dwmJSON(pod, pod, spec), []string{"dn"})
	want := fmt.Sprintf("names instance id %s in its key and 7 in its value, but pod %s hashes to %s", hex, pod, hex)
	if d.Refusal == nil || d.Refusal.Kind != "mismatch" || !strings.Contains(d.Refusal.Reason, want) {
		t.Fatalf("refusal %+v, want a mismatch saying %q", d.Refusal, want)
	}
}

// TestMismatchUnderAnOlderKey: a record under an older
// <ns>/<component>/<endpoint> map key whose value leaves out a field (here
// its namespace) still has its instance id checked: one that is not the
// pod's hash refuses the resource, rather than reaching the reducer as a
// worker under another pod's id. One that is the pod's goes on.
func TestMismatchUnderAnOlderKey(t *testing.T) {
	t.Parallel()
	const pod = "worker-0"
	for _, tc := range []struct {
		space, value string
		id           uint64
		refused      bool
	}{
		{"endpoints", `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":%d,"transport":{"nats_tcp":"x"}}`, 42, true},
		{"model_cards", `{"type":"Model","component":"decode","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m"}}`, 42, true},
		{"endpoints", `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":%d,"transport":{"nats_tcp":"x"}}`, kube.HashPodName(pod), false},
	} {
		spec := fmt.Sprintf(`{"data":{%q:{"dn/decode/generate":`+tc.value+`}}}`, tc.space, tc.id)
		d := kube.ClassifyDWM(dwmJSON(pod, pod, spec), []string{"dn"})
		if refused := d.Refusal != nil && d.Refusal.Kind == "mismatch"; refused != tc.refused || (refused && len(d.Records) != 0) {
			t.Errorf("%s with id %x: refusal %+v, %d records; want refused %v", tc.space, tc.id, d.Refusal, len(d.Records), tc.refused)
		}
	}
}
