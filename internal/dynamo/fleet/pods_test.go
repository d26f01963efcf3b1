package fleet

import (
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// Pods and refusals, the Kubernetes sources' own keyspaces: role and model
// from the record, two pods claiming one instance id both rejected, a
// refusal shown as a problem of its kind, and resync semantics as for etcd.
func TestReducerPodsAndRefusals(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	r := NewReducer()
	put := func(key string, v []byte) { r.Put(key, v, now) }
	pod := func(name, role string, id uint64) []byte {
		return (&wire.PodRecord{Pod: name, Component: "VllmWorker-prefillheavy", Role: role, Model: "m", InstanceID: id}).Encode()
	}
	r.ResyncBegin()
	put(wire.PrefixPods+"dn/a", pod("a", "aggregated", 1))
	put(wire.PrefixPods+"dn/b", pod("b", "decode", 2))
	put(wire.PrefixPods+"dn/c", pod("c", "decode", 2)) // collides with b
	put(wire.PrefixPods+"dn/d", []byte(`{"pod":`))
	put(wire.PrefixRefusals+"pod/ns/e", (&wire.Refusal{Kind: "refused", Namespace: "dn", Reason: "container mode"}).Encode())
	r.ResyncEnd()
	snap := r.Build(now)
	if len(snap.Workers) != 1 {
		t.Fatalf("workers %+v", snap.Workers)
	}
	w := snap.Workers[0]
	// The component's name says prefill; the pod's labels (the record) win.
	if w.ID != (WorkerID{"dn", 1}) || w.Role != RoleAggregated || w.Model != "m" || w.Card != nil || w.DPSize != 1 {
		t.Fatalf("worker %+v", w)
	}
	kinds := map[string]int{}
	for _, p := range snap.Problems {
		kinds[p.Kind]++
		if p.Kind == ProblemDuplicate && (p.KeyCount != 2 || p.Keys[0] != wire.PrefixPods+"dn/b") {
			t.Errorf("duplicate %+v", p)
		}
		if p.Kind == "refused" && (p.Namespace != "dn" || p.Reason != "container mode") {
			t.Errorf("refusal %+v", p)
		}
	}
	if kinds[ProblemDuplicate] != 1 || kinds["refused"] != 1 || kinds[ProblemMalformed] != 1 || len(snap.Problems) != 3 {
		t.Fatalf("problems %+v", snap.Problems)
	}
	// A relist without c and the refusal: b becomes a worker, the refusal goes.
	r.ResyncBegin()
	put(wire.PrefixPods+"dn/a", pod("a", "aggregated", 1))
	put(wire.PrefixPods+"dn/b", pod("b", "decode", 2))
	r.ResyncEnd()
	snap = r.Build(now)
	if len(snap.Workers) != 2 || len(snap.Problems) != 0 {
		t.Fatalf("after relist: workers %d problems %+v", len(snap.Workers), snap.Problems)
	}
}
