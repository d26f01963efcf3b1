package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

type recSink struct{ keys map[string][]byte }

func (s *recSink) Put(k string, v []byte) { s.keys[k] = v }
func (s *recSink) Delete(k string)        { delete(s.keys, k) }
func (s *recSink) ResyncBegin()           {}
func (s *recSink) ResyncEnd()             {}
func (s *recSink) Flush()                 {}

// Past MaxDWMs resources, new ones are refused under one malformed
// refusal that counts them; held ones still update; the refusal goes when
// the refused resources do.
func TestJoinResourceCap(t *testing.T) {
	t.Parallel()
	j := newJoin([]string{"dn"}, slog.New(slog.DiscardHandler))
	dwm := func(i int) []byte {
		name := fmt.Sprintf("w-%d", i)
		return []byte(fmt.Sprintf(`{"metadata":{"name":%q,"uid":"u%d"},"spec":{"data":{"endpoints":{"x":{"type":"Endpoint","namespace":"dn","component":"c","endpoint":"generate","instance_id":%d}}}}}`,
			name, i, HashPodName(name)))
	}
	sink := &recSink{keys: map[string][]byte{}}
	for i := range MaxDWMs + 2 {
		j.applyDWM(dwm(i), false)
	}
	j.applyDWM(dwm(MaxDWMs+1), false) // an update of a refused one counts once
	j.publishAll(sink)
	r, err := wire.ParseRefusal(sink.keys[overCapacityKey])
	if err != nil || r.Kind != "malformed" || len(j.dwms) != MaxDWMs {
		t.Fatalf("refusal %+v (%v), %d held", r, err, len(j.dwms))
	}
	if len(j.overCap) != 2 {
		t.Fatalf("%d refused, want 2", len(j.overCap))
	}
	refusal := string(sink.keys[overCapacityKey])
	// Room made, a refused resource's next write admits it; the refusal,
	// standing for the other, reads the same, so it is not a new problem.
	j.applyDWM(dwm(0), true)
	j.applyDWM(dwm(MaxDWMs), false)
	j.flush(sink)
	if _, held := j.dwms["w-16384"]; !held || string(sink.keys[overCapacityKey]) != refusal {
		t.Fatalf("held %v, refusal %q, want held and %q", held, sink.keys[overCapacityKey], refusal)
	}
	j.applyDWM(dwm(1), true)
	j.applyDWM(dwm(MaxDWMs+1), false)
	j.flush(sink)
	if _, ok := sink.keys[overCapacityKey]; ok || len(j.overCap) != 0 {
		t.Fatalf("the over-capacity refusal stayed after every refused resource was admitted: %v", j.overCap)
	}
	// Refused again, then deleted while refused: the refusal goes.
	j.applyDWM(dwm(MaxDWMs+2), false)
	j.flush(sink)
	if _, ok := sink.keys[overCapacityKey]; !ok {
		t.Fatal("no over-capacity refusal")
	}
	j.applyDWM(dwm(MaxDWMs+2), true)
	j.flush(sink)
	if _, ok := sink.keys[overCapacityKey]; ok {
		t.Fatal("the over-capacity refusal stayed after the refused resource went")
	}
}

// uidDWM is a resource of pod name, resource uid res, owned by the pod of
// uid pod ("-" for no owner reference at all), with one endpoint in ns.
func uidDWM(name, res, pod, ns string) []byte {
	owner := fmt.Sprintf(`,"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":%q,"uid":%q}]`, name, pod)
	switch pod {
	case "-":
		owner = ""
	case "":
		owner = fmt.Sprintf(`,"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":%q}]`, name)
	}
	return []byte(fmt.Sprintf(`{"metadata":{"name":%q,"uid":%q%s},"spec":{"data":{"endpoints":{"x":{"type":"Endpoint","namespace":%q,"component":"c","endpoint":"generate","instance_id":%d}}}}}`,
		name, res, owner, ns, HashPodName(name)))
}

// ep is one slice endpoint: its pod's name and uid ("" for none) and
// whether it is ready.
type ep struct {
	pod, uid string
	ready    bool
}

func slice(name string, eps ...ep) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, e := range eps {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: &e.ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: e.pod, UID: types.UID(e.uid)}})
	}
	return es
}

const uidPod = "worker-0"

// uidView is what the sink holds of uidPod: whether its endpoint record
// is handed on, and the refusals by key.
func uidView(t *testing.T, sink *recSink) (ready bool, refusals map[string]*wire.Refusal) {
	t.Helper()
	refusals = map[string]*wire.Refusal{}
	for k, v := range sink.keys {
		switch {
		case k == wire.PrefixInstances+"dn/c/generate/"+wire.FormatID(HashPodName(uidPod)):
			ready = true
		case strings.HasPrefix(k, wire.PrefixRefusals):
			r, err := wire.ParseRefusal(v)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			refusals[k] = r
		default:
			t.Fatalf("unexpected key %s", k)
		}
	}
	return ready, refusals
}

// checkUIDView fails unless the sink holds uidPod's endpoint exactly when
// ready, and a pod-uid mismatch exactly when mismatch lists the uids
// involved (the resource owner's and the ready slice endpoints'), which its
// reason must not carry: the admin API serves problems, and its views carry
// no UIDs.
func checkUIDView(t *testing.T, sink *recSink, ready bool, mismatch []string, others ...string) {
	t.Helper()
	gotReady, refusals := uidView(t, sink)
	if gotReady != ready {
		t.Errorf("ready %v, want %v", gotReady, ready)
	}
	r := refusals[podUIDKey(uidPod)]
	delete(refusals, podUIDKey(uidPod))
	switch {
	case mismatch == nil && r != nil:
		t.Errorf("unexpected pod uid refusal %+v", r)
	case mismatch != nil:
		want := fmt.Sprintf("DynamoWorkerMetadata %s: the pod uid in its owner reference differs from the pod uid of the ready EndpointSlice endpoint of pod %s;", uidPod, uidPod)
		if r == nil || r.Kind != "mismatch" || r.Namespace != "dn" || !strings.HasPrefix(r.Reason, want) {
			t.Fatalf("pod uid refusal %+v, want a mismatch in dn saying %q", r, want)
		}
		for _, uid := range mismatch {
			if strings.Contains(r.Reason, uid) {
				t.Errorf("the reason %q carries the uid %q", r.Reason, uid)
			}
		}
	}
	for _, k := range others {
		if refusals[k] == nil {
			t.Errorf("no refusal at %s", k)
		}
		delete(refusals, k)
	}
	if len(refusals) != 0 {
		t.Errorf("unexpected refusals %v", refusals)
	}
}

// TestJoinPodUID: a resource is ready when a ready slice endpoint names its
// pod and, when both carry one, the same pod uid; differing uids hold the
// records back under a mismatch that names the resource and its pod, but
// neither uid.
func TestJoinPodUID(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dwm      []byte
		slices   []*discoveryv1.EndpointSlice
		ready    bool
		mismatch []string // the uids involved in an expected mismatch
		others   []string
	}{
		{name: "same uid", dwm: uidDWM(uidPod, "r1", "p1", "dn"), slices: []*discoveryv1.EndpointSlice{slice("s", ep{uidPod, "p1", true})}, ready: true},
		{name: "different uid", dwm: uidDWM(uidPod, "r1", "p1", "dn"), slices: []*discoveryv1.EndpointSlice{slice("s", ep{uidPod, "p2", true})},
			mismatch: []string{"p1", "p2"}},
		{name: "no uid in the slice: by name", dwm: uidDWM(uidPod, "r1", "p1", "dn"), slices: []*discoveryv1.EndpointSlice{slice("s", ep{uidPod, "", true})}, ready: true},
		{name: "no uid in the owner reference: by name", dwm: uidDWM(uidPod, "r1", "", "dn"), slices: []*discoveryv1.EndpointSlice{slice("s", ep{uidPod, "p2", true})}, ready: true},
		{name: "no owner reference: by name", dwm: uidDWM(uidPod, "r1", "-", "dn"), slices: []*discoveryv1.EndpointSlice{slice("s", ep{uidPod, "p2", true})}, ready: true},
		{name: "no uid on either side: by name", dwm: uidDWM(uidPod, "r1", "", "dn"), slices: []*discoveryv1.EndpointSlice{slice("s", ep{uidPod, "", true})}, ready: true},
		{name: "different uid, not ready: no mismatch", dwm: uidDWM(uidPod, "r1", "p1", "dn"), slices: []*discoveryv1.EndpointSlice{slice("s", ep{uidPod, "p2", false})}},
		{name: "same uid, not ready", dwm: uidDWM(uidPod, "r1", "p1", "dn"), slices: []*discoveryv1.EndpointSlice{slice("s", ep{uidPod, "p1", false})}},
		{name: "no endpoint", dwm: uidDWM(uidPod, "r1", "p1", "dn"), slices: []*discoveryv1.EndpointSlice{slice("s", ep{"worker-1", "p2", true})}},
		{name: "one slice agrees, another lags", dwm: uidDWM(uidPod, "r1", "p1", "dn"),
			slices: []*discoveryv1.EndpointSlice{slice("a", ep{uidPod, "p2", true}), slice("b", ep{uidPod, "p1", true})}, ready: true},
		{name: "one slice without uid, another differs", dwm: uidDWM(uidPod, "r1", "p1", "dn"),
			slices: []*discoveryv1.EndpointSlice{slice("a", ep{uidPod, "p2", true}), slice("b", ep{uidPod, "", true})}, ready: true},
		{name: "two different uids: one mismatch", dwm: uidDWM(uidPod, "r1", "p1", "dn"),
			slices: []*discoveryv1.EndpointSlice{slice("a", ep{uidPod, "p3", true}), slice("b", ep{uidPod, "p2", true})}, mismatch: []string{"p1", "p2", "p3"}},
		{name: "records of no watched namespace: nothing to report", dwm: uidDWM(uidPod, "r1", "p1", "other"),
			slices: []*discoveryv1.EndpointSlice{slice("s", ep{uidPod, "p2", true})}},
		{name: "a refused resource: only its refusal", dwm: []byte(`{"metadata":{"name":"worker-0","uid":"r1","ownerReferences":[{"kind":"Pod","name":"worker-0","uid":"p1"}]},` +
			`"spec":{"data":{"endpoints":{"x":{"type":"Endpoint","namespace":"dn","component":"c","endpoint":"generate","instance_id":7}}}}}`),
			slices: []*discoveryv1.EndpointSlice{slice("s", ep{uidPod, "p2", true})}, others: []string{refusalKey(uidPod)}},
		{name: "a long uid", dwm: uidDWM(uidPod, "r1", "p1", "dn"), slices: []*discoveryv1.EndpointSlice{slice("s", ep{uidPod, strings.Repeat("u", 5000), true})},
			mismatch: []string{"p1", strings.Repeat("u", 5000)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Both orders: the resource before its slices, and after.
			for _, dwmFirst := range []bool{true, false} {
				j := newJoin([]string{"dn"}, slog.New(slog.DiscardHandler))
				if dwmFirst {
					j.applyDWM(tc.dwm, false)
				}
				for _, s := range tc.slices {
					j.applySlice(s, false)
				}
				if !dwmFirst {
					j.applyDWM(tc.dwm, false)
				}
				sink := &recSink{keys: map[string][]byte{}}
				j.publishAll(sink)
				checkUIDView(t, sink, tc.ready, tc.mismatch, tc.others...)
				// The slices' deletion leaves the resource unready and
				// without a mismatch.
				for _, s := range tc.slices {
					j.applySlice(s, true)
				}
				j.flush(sink)
				checkUIDView(t, sink, false, nil, tc.others...)
				if len(j.ready) != 0 {
					t.Errorf("readiness left after the slices went: %v", j.ready)
				}
			}
		})
	}
}

// TestJoinPodRecreated: a pod recreated under the same name (a new uid),
// whatever order its slice endpoint and its new resource arrive in: the
// predecessor's records never go ready with the new pod's endpoint, nor the
// new records with the old endpoint, and the worker is ready once both name
// the new pod.
func TestJoinPodRecreated(t *testing.T) {
	type step struct {
		what     string
		apply    func(j *join)
		ready    bool
		mismatch []string // the uids involved in an expected mismatch
		others   []string
	}
	dwm := func(res, pod string) func(j *join) {
		return func(j *join) { j.applyDWM(uidDWM(uidPod, res, pod, "dn"), false) }
	}
	sl := func(uid string, ready bool) func(j *join) {
		return func(j *join) { j.applySlice(slice("s", ep{uidPod, uid, ready}, ep{"worker-1", "q", true}), false) }
	}
	del := func(j *join) { j.applyDWM(uidDWM(uidPod, "r1", "p1", "dn"), true) }
	malformed := func(res, pod string) func(j *join) {
		return func(j *join) {
			j.applyDWM([]byte(fmt.Sprintf(`{"metadata":{"name":%q,"uid":%q,"ownerReferences":[{"kind":"Pod","name":%q,"uid":%q}]},"spec":{"data":[]}}`, uidPod, res, uidPod, pod)), false)
		}
	}
	start := []step{
		{what: "old pod ready", apply: func(j *join) { dwm("r1", "p1")(j); sl("p1", true)(j) }, ready: true},
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{name: "the slice first, then the stale resource deleted, then the new one", steps: []step{
			{what: "old endpoint terminating", apply: sl("p1", false)},
			{what: "new endpoint not ready yet", apply: sl("p2", false)},
			{what: "new endpoint ready, stale resource", apply: sl("p2", true), mismatch: []string{"p1", "p2"}},
			{what: "stale resource deleted", apply: del},
			{what: "new resource", apply: dwm("r2", "p2"), ready: true},
		}},
		{name: "the slice first, then the resource replaced in place", steps: []step{
			{what: "new endpoint ready, stale resource", apply: sl("p2", true), mismatch: []string{"p1", "p2"}},
			{what: "resource rewritten by the new pod", apply: dwm("r1", "p2"), ready: true},
		}},
		{name: "the new resource first, the slice lagging", steps: []step{
			{what: "stale resource deleted", apply: del},
			{what: "new resource, old endpoint still ready", apply: dwm("r2", "p2"), mismatch: []string{"p2", "p1"}},
			{what: "old endpoint gone", apply: sl("p1", false)},
			{what: "new endpoint ready", apply: sl("p2", true), ready: true},
		}},
		{name: "the resource rewritten in place first", steps: []step{
			{what: "resource rewritten by the new pod", apply: dwm("r1", "p2"), mismatch: []string{"p2", "p1"}},
			{what: "new endpoint ready", apply: sl("p2", true), ready: true},
		}},
		{name: "the new pod's first write is malformed: the old records are not kept", steps: []step{
			{what: "new endpoint ready, stale resource", apply: sl("p2", true), mismatch: []string{"p1", "p2"}},
			{what: "malformed rewrite by the new pod", apply: malformed("r1", "p2"), others: []string{refusalKey(uidPod)}},
			{what: "valid rewrite", apply: dwm("r1", "p2"), ready: true},
		}},
		{name: "malformed by the same pod: the last valid records stay, and so does the uid rule", steps: []step{
			{what: "malformed", apply: malformed("r1", "p1"), ready: true, others: []string{refusalKey(uidPod)}},
			{what: "new endpoint ready", apply: sl("p2", true), mismatch: []string{"p1", "p2"}, others: []string{refusalKey(uidPod)}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJoin([]string{"dn"}, slog.New(slog.DiscardHandler))
			sink := &recSink{keys: map[string][]byte{}}
			for i, s := range append(slices.Clone(start), tc.steps...) {
				s.apply(j)
				if i == 0 {
					j.publishAll(sink)
				} else {
					j.flush(sink)
				}
				t.Run(s.what, func(t *testing.T) { checkUIDView(t, sink, s.ready, s.mismatch, s.others...) })
			}
		})
	}
}

// TestJoinCarriesLastValid: a pass's last valid records reach the next
// pass's join, and a resource read malformed there supplies them only under
// the same resource and pod uids; resources missing from a complete list
// are not carried further, and an unfinished list carries what it did not
// reach.
func TestJoinCarriesLastValid(t *testing.T) {
	t.Parallel()
	malformed := func(name, res, pod string) []byte {
		return []byte(fmt.Sprintf(`{"metadata":{"name":%q,"uid":%q,"ownerReferences":[{"kind":"Pod","name":%q,"uid":%q}]},"spec":{"data":"oops"}}`, name, res, name, pod))
	}
	logger := slog.New(slog.DiscardHandler)
	first := newJoin([]string{"dn"}, logger)
	for _, name := range []string{"worker-0", "worker-1", "worker-2", "worker-3"} {
		first.applyDWM(uidDWM(name, "r-"+name, "p-"+name, "dn"), false)
	}
	first.listed()
	kept := first.lastValid()
	if len(kept) != 4 {
		t.Fatalf("%d resources kept, want 4", len(kept))
	}

	// An unfinished list: worker-3 was not reached and is carried on.
	partial := newJoin([]string{"dn"}, logger)
	partial.carried = kept
	partial.applyDWM(uidDWM("worker-0", "r-worker-0", "p-worker-0", "dn"), false)
	kept = partial.lastValid()
	if len(kept) != 4 {
		t.Fatalf("%d resources kept after an unfinished list, want 4", len(kept))
	}

	size0 := kept["worker-0"].size
	second := newJoin([]string{"dn"}, logger)
	second.carried = kept
	second.applyDWM(malformed("worker-0", "r-worker-0", "p-worker-0"), false) // same uids: kept
	second.applyDWM(malformed("worker-1", "r-new", "p-worker-1"), false)      // another resource
	second.applyDWM(malformed("worker-2", "r-worker-2", "p-new"), false)      // written by another pod
	second.listed()                                                           // worker-3 is gone
	for _, name := range []string{"worker-0", "worker-1", "worker-2"} {
		second.applySlice(slice("s-"+name, ep{name, "", true}), false)
	}
	sink := &recSink{keys: map[string][]byte{}}
	second.publishAll(sink)
	var endpoints []string
	for k := range sink.keys {
		if strings.HasPrefix(k, wire.PrefixInstances) {
			endpoints = append(endpoints, k)
		}
	}
	if want := wire.PrefixInstances + "dn/c/generate/" + wire.FormatID(HashPodName("worker-0")); len(endpoints) != 1 || endpoints[0] != want {
		t.Fatalf("endpoints %v, want only %s", endpoints, want)
	}
	if second.size != size0 || size0 == 0 {
		t.Fatalf("held %d bytes, want worker-0's %d", second.size, size0)
	}
	if got := second.lastValid(); len(got) != 1 || got["worker-0"].records == nil {
		t.Fatalf("carried on %v, want worker-0 only", slices.Sorted(maps.Keys(got)))
	}
}

// pagedDWMs lists n small resources, page by page, as the API server does.
func pagedDWMs(n int) lister[json.RawMessage] {
	return func(_ context.Context, o metav1.ListOptions) ([]json.RawMessage, metav1.ListMeta, error) {
		from := 0
		if o.Continue != "" {
			from, _ = strconv.Atoi(o.Continue)
		}
		to := min(n, from+int(o.Limit))
		var items []json.RawMessage
		for i := from; i < to; i++ {
			items = append(items, json.RawMessage(fmt.Sprintf(`{"metadata":{"name":"w-%05d","uid":"u%d"},"spec":{"data":{}}}`, i, i)))
		}
		meta := metav1.ListMeta{ResourceVersion: "7"}
		if to < n {
			meta.Continue = strconv.Itoa(to)
		}
		return items, meta, nil
	}
}

// Past MaxDWMs resources in the initial list, the rest reach the join,
// which refuses them under the one over-capacity refusal (counted
// malformed) rather than their being dropped unseen.
func TestListDWMsPastCap(t *testing.T) {
	t.Parallel()
	j := newJoin([]string{"dn"}, slog.New(slog.DiscardHandler))
	rv, err := listDWMs(t.Context(), &seedCalls{}, time.Minute, pagedDWMs(MaxDWMs+3), j)
	if err != nil || rv != "7" {
		t.Fatalf("rv %q, err %v", rv, err)
	}
	sink := &recSink{keys: map[string][]byte{}}
	j.publishAll(sink)
	r, err := wire.ParseRefusal(sink.keys[overCapacityKey])
	if err != nil || r.Kind != "malformed" || len(j.dwms) != MaxDWMs || len(j.overCap) != 3 {
		t.Fatalf("refusal %+v (%v), %d held, %d refused", r, err, len(j.dwms), len(j.overCap))
	}
}

// TestShrunkCardReadAsDropped: a Model record whose card is over the
// retained bound is shrunk to its core fields here, and the reducer reads
// the result as it reads such a card put whole: typed fields kept, the
// opaque JSON dropped and reported.
func TestShrunkCardReadAsDropped(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", fleet.MaxRetainedCardBytes)
	value := fmt.Appendf(nil, `{"type":"Model","component":"decode","endpoint":"generate","instance_id":2,"card_json":{"display_name":"m","worker_type":"Decode","kv_cache_block_size":16,"padding":%q}}`, pad)
	shrunk := shrinkCard(value)
	if len(shrunk) >= fleet.MaxRetainedCardBytes {
		t.Fatalf("not shrunk: %d bytes", len(shrunk))
	}
	now := time.Unix(1000, 0)
	r := fleet.NewReducer()
	r.Put("v1/instances/dynamo/decode/generate/2", []byte(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":2,"transport":{"nats_tcp":"x"}}`), now)
	r.Put("v1/mdc/dynamo/decode/generate/2", shrunk, now)
	snap := r.Build(now)
	if snap.Workers.Len() != 1 {
		t.Fatalf("workers: %d, problems %+v", snap.Workers.Len(), snap.Problems)
	}
	w := slices.Collect(snap.Workers.All())[0]
	if w.Card == nil || w.Card.Raw != nil || w.Model != "m" || w.BlockSize == nil || *w.BlockSize != 16 {
		t.Errorf("shrunk card: %+v card %+v", w, w.Card)
	}
	reported := false
	for _, p := range snap.Problems {
		reported = reported || p.Kind == fleet.ProblemCardDropped
	}
	if !reported {
		t.Errorf("no card_dropped problem: %+v", snap.Problems)
	}
}

// TestJoinSliceCapLogged: an EndpointSlice past MaxSlices that the watch
// brings is ignored with a warning (once), as the list's cut is, not in
// silence.
func TestJoinSliceCapLogged(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	j := newJoin([]string{"dn"}, slog.New(slog.NewTextHandler(&logs, nil)))
	for i := range MaxSlices {
		j.applySlice(slice(fmt.Sprintf("s%d", i)), false)
	}
	if logs.Len() != 0 {
		t.Fatalf("logged within the cap: %s", logs.String())
	}
	j.applySlice(slice("over-1", ep{"p", "u", true}), false)
	j.applySlice(slice("over-2", ep{"p", "u", true}), false)
	if n := strings.Count(logs.String(), "too many EndpointSlices"); n != 1 || !strings.Contains(logs.String(), "slice=over-1") {
		t.Fatalf("%d warnings: %s", n, logs.String())
	}
	if _, held := j.slices["over-1"]; held {
		t.Fatal("a slice past the cap is held")
	}
}
