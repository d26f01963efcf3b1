package kube

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// FuzzJoinSequence: DynamoWorkerMetadata and EndpointSlice events in any
// order (pods named by either, with or without UIDs, ready or not,
// duplicate identities, any spec): what the sink holds is what the join
// says it sent, the byte total is the sum of the held resources', and once
// every resource and slice is deleted nothing is left.
func FuzzJoinSequence(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, 0, 0, 1, 0, 3, 0}, `{"data":{}}`)
	f.Add([]byte{0, 1, 1, 0, 0, 1, 2, 1, 1, 5, 3, 1}, `[`)
	f.Add([]byte{2, 0, 7, 0, 2, 1, 0, 0, 3, 1, 2, 2, 1}, `{"data":{"event_channels":{"a":{"scope":{"kind":"component","namespace":"dn","component":"c"},"topic":"kv_events","instance_id":1,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://a:1"}}}}}}`)
	names := []string{"w-0", "w-1", "w-2"}
	uids := []string{"", "p1", "p2"}
	f.Fuzz(func(t *testing.T, ops []byte, extra string) {
		j := newJoin([]string{"dn"}, slog.New(slog.DiscardHandler))
		sink := &recSink{keys: map[string][]byte{}}
		spec := func(name string, v byte) string {
			id := HashPodName(name)
			switch v % 4 {
			case 0:
				return fmt.Sprintf(`{"data":{"endpoints":{"dn/c/generate/%x":{"type":"Endpoint","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d}},`+
					`"model_cards":{"dn/c/generate/%x":{"type":"Model","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m"}}}}}`, id, id, id, id)
			case 1:
				// another pod's id: a duplicate of w-0's keys
				id0 := HashPodName("w-0")
				return fmt.Sprintf(`{"data":{"endpoints":{"dn/c/generate/%x":{"type":"Endpoint","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d}}}}`, id0, id0)
			case 2:
				return `{"data":{"event_channels":{"a":{"scope":{"kind":"component","namespace":"dn","component":"c"},"topic":"kv_events","instance_id":1,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://a:1"}}}}}}`
			}
			if !json.Valid([]byte(extra)) {
				return `null` // the API server serves valid JSON only
			}
			return extra
		}
		dwm := func(name, podUID string, v byte) []byte {
			owner := `"ownerReferences":[{"kind":"Pod","name":"` + name + `"`
			if podUID != "" {
				owner += `,"uid":"` + podUID + `"`
			}
			owner += `}]`
			return []byte(fmt.Sprintf(`{"metadata":{"name":%q,"uid":"u-%s",%s},"spec":%s}`, name, name, owner, spec(name, v)))
		}
		slice := func(sname string, pods []byte) *discoveryv1.EndpointSlice {
			es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: sname}}
			for _, p := range pods {
				ready := p&8 == 0
				es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
					Conditions: discoveryv1.EndpointConditions{Ready: &ready},
					TargetRef:  &corev1.ObjectReference{Name: names[int(p)%3], UID: types.UID(uids[int(p>>4)%3])}})
			}
			return es
		}
		check := func(step int) {
			j.flush(sink)
			size := 0
			for _, e := range j.dwms {
				size += e.size
			}
			if size != j.size {
				t.Fatalf("step %d: size %d, held resources add up to %d", step, j.size, size)
			}
			if !maps.EqualFunc(sink.keys, j.sent, bytes.Equal) {
				t.Fatalf("step %d: sink %v, sent %v", step, keysOf(sink.keys), keysOf(j.sent))
			}
		}
		for i := 0; i+2 < len(ops); i += 3 {
			op, a, b := ops[i]%4, ops[i+1], ops[i+2]
			switch op {
			case 0:
				j.applyDWM(dwm(names[int(a)%3], uids[int(a>>4)%3], b), false)
			case 1:
				j.applyDWM(dwm(names[int(a)%3], uids[int(a>>4)%3], b), true)
			case 2:
				j.applySlice(slice(fmt.Sprint("s", a%3), []byte{b, b >> 2, a >> 2}[:1+int(b)%3]), false)
			case 3:
				j.applySlice(slice(fmt.Sprint("s", a%3), nil), true)
			}
			check(i)
		}
		for _, n := range names {
			j.applyDWM(dwm(n, "", 2), true)
		}
		for s := range 3 {
			j.applySlice(slice(fmt.Sprint("s", s), nil), true)
		}
		check(-1)
		if len(j.dwms) != 0 || len(j.keys) != 0 || len(j.ready) != 0 || len(j.slices) != 0 || j.size != 0 || len(sink.keys) != 0 {
			t.Fatalf("left: dwms %d keys %v ready %v slices %d size %d sink %v", len(j.dwms), keysOf(j.keys), j.ready, len(j.slices), j.size, keysOf(sink.keys))
		}
	})
}

func keysOf[V any](m map[string]V) []string { return sortedKeys(m) }
