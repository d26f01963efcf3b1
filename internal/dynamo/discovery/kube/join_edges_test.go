package kube

import (
	"fmt"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// TestJoinSliceShapes: what real EndpointSlices look like. A pod listed in
// several slices (one per address family, or a service split across
// objects) stays ready while any lists it ready; an endpoint without a
// ready condition, a terminating one (ready false, serving true), one
// without a targetRef and a slice without endpoints make nobody ready.
func TestJoinSliceShapes(t *testing.T) {
	t.Parallel()
	j := newJoin([]string{"dn"}, slog.New(slog.DiscardHandler))
	sink := &recSink{keys: map[string][]byte{}}
	j.applyDWM(uidDWM(uidPod, "r1", "p1", "dn"), false)
	j.publishAll(sink)
	key := wire.PrefixInstances + "dn/c/generate/" + wire.FormatID(HashPodName(uidPod))
	check := func(step string, want bool) {
		t.Helper()
		j.flush(sink)
		if _, got := sink.keys[key]; got != want {
			t.Fatalf("%s: ready %v, want %v", step, got, want)
		}
	}
	tru, fls := true, false
	odd := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "odd"}, Endpoints: []discoveryv1.Endpoint{
		{TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: uidPod, UID: "p1"}},
		{Conditions: discoveryv1.EndpointConditions{Ready: &fls, Serving: &tru, Terminating: &tru}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: uidPod, UID: "p1"}},
		{Conditions: discoveryv1.EndpointConditions{Ready: &tru}},
		{Conditions: discoveryv1.EndpointConditions{Ready: &tru}, TargetRef: &corev1.ObjectReference{Kind: "Pod", UID: "p1"}},
	}}
	j.applySlice(odd, false)
	j.applySlice(&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "empty"}}, false)
	check("no ready endpoint", false)

	j.applySlice(slice("v4", ep{uidPod, "p1", true}), false)
	j.applySlice(slice("v6", ep{uidPod, "p1", true}), false)
	check("ready in two slices", true)
	j.applySlice(slice("v4", ep{uidPod, "p1", false}), false)
	check("unready in one of two", true)
	j.applySlice(slice("v6", ep{uidPod, "p1", true}), true)
	check("its last ready slice deleted", false)
	j.applySlice(slice("v4", ep{uidPod, "p1", true}, ep{"other", "p2", true}), false)
	check("ready again among several endpoints", true)
	j.applySlice(slice("v4"), false)
	check("slice emptied", false)
}

// TestJoinSharedChannelByResource: a channel several resources supply goes
// only with the last of them, whether they are deleted or made unready,
// and is handed on once while shared.
func TestJoinSharedChannelByResource(t *testing.T) {
	t.Parallel()
	j := newJoin([]string{"dn"}, slog.New(slog.DiscardHandler))
	sink := &recSink{keys: map[string][]byte{}}
	ch := `{"type":"EventChannel","namespace":"dn","component":"c","topic":"kv_metrics","instance_id":24576,"transport":{"zmq_tcp":"tcp://10.0.0.9:5557"}}`
	dwm := func(name string) []byte {
		return []byte(fmt.Sprintf(`{"metadata":{"name":%q,"uid":"u-%s"},"spec":{"data":{"endpoints":{"x":{"type":"Endpoint","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d}},"event_channels":{"y":%s}}}}`,
			name, name, HashPodName(name), ch))
	}
	for _, n := range []string{"a", "b", "c"} {
		j.applyDWM(dwm(n), false)
	}
	j.applySlice(slice("s", ep{"a", "", true}, ep{"b", "", true}, ep{"c", "", true}), false)
	j.publishAll(sink)
	channels := func() int {
		n := 0
		for k := range sink.keys {
			if len(k) > len(wire.PrefixEventChannels) && k[:len(wire.PrefixEventChannels)] == wire.PrefixEventChannels {
				n++
			}
		}
		return n
	}
	if len(sink.keys) != 4 || channels() != 1 {
		t.Fatalf("keys %v", sink.keys)
	}
	j.applyDWM(dwm("a"), true)
	j.flush(sink)
	j.applySlice(slice("s", ep{"b", "", false}, ep{"c", "", true}), false)
	j.flush(sink)
	if len(sink.keys) != 2 || channels() != 1 {
		t.Fatalf("one supplier left, keys %v", sink.keys)
	}
	j.applyDWM(dwm("c"), true)
	j.flush(sink)
	if len(sink.keys) != 0 {
		t.Fatalf("no supplier left, keys %v", sink.keys)
	}
}

// TestJoinByteCap: past MaxRecordBytes of records held, a new resource is
// refused under the over-capacity refusal (counted malformed), and a held
// one whose records would grow past it is refused as malformed and keeps
// supplying its last valid records.
func TestJoinByteCap(t *testing.T) {
	t.Parallel()
	j := newJoin([]string{"dn"}, slog.New(slog.DiscardHandler))
	sink := &recSink{keys: map[string][]byte{}}
	small := func(name, pad string) []byte {
		return []byte(fmt.Sprintf(`{"metadata":{"name":%q,"uid":"u-%s"},"spec":{"data":{"endpoints":{"x":{"type":"Endpoint","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d,"pad":%q}}}}}`,
			name, name, HashPodName(name), pad))
	}
	j.applyDWM(small("a", ""), false)
	j.applySlice(slice("s", ep{"a", "", true}, ep{"b", "", true}), false)
	j.publishAll(sink)
	held := j.size
	if held == 0 || len(sink.keys) != 1 {
		t.Fatalf("size %d, keys %v", held, sink.keys)
	}
	// Another resource's worth of room short of the cap, as if others held it.
	j.size = MaxRecordBytes - 10
	j.applyDWM(small("b", ""), false)
	j.flush(sink)
	r, err := wire.ParseRefusal(sink.keys[overCapacityKey])
	if err != nil || r.Kind != "malformed" || j.dwms["b"] != nil {
		t.Fatalf("new resource past the byte cap: refusal %+v (%v), held %v", r, err, j.dwms["b"] != nil)
	}
	aKey := wire.PrefixInstances + "dn/c/generate/" + wire.FormatID(HashPodName("a"))
	before := string(sink.keys[aKey])
	j.applyDWM(small("a", "grown past the cap"), false)
	j.flush(sink)
	r, err = wire.ParseRefusal(sink.keys[refusalKey("a")])
	if err != nil || r.Kind != "malformed" || string(sink.keys[aKey]) != before {
		t.Fatalf("held resource grown past the byte cap: refusal %+v (%v), record %q (was %q)", r, err, sink.keys[aKey], before)
	}
}
