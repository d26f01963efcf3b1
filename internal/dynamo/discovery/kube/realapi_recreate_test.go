//go:build kube

package kube_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	tu "github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubeapi"
)

// TestRealAPIServerMetadataPodRecreated: a pod made anew under its name (a
// StatefulSet's) writes its DynamoWorkerMetadata as Dynamo does, by
// server-side apply under the field manager dynamo-worker, over the
// resource its predecessor wrote when the garbage collector has not removed
// it yet. The API server then holds the new pod's owner reference only, in
// the same resource; while the EndpointSlice still names the old pod the
// records are held back, and they return once it names the new one.
func TestRealAPIServerMetadataPodRecreated(t *testing.T) {
	s := startMetadataAPIServer(t)
	var dwms, slices []map[string]any
	readFixture(t, "dynamoworkermetadatas.json", &dwms)
	readFixture(t, "endpointslices.json", &slices)
	var dwm map[string]any
	for _, d := range dwms {
		if d["metadata"].(map[string]any)["name"] == aggPod {
			dwm = d
		}
	}
	dyn, err := dynamic.NewForConfig(s.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	gvr := schema.GroupVersionResource{Group: kube.DWMGroup, Version: kube.DWMVersion, Resource: kube.DWMResource}
	// apply writes the resource as a worker of the pod of uid does.
	apply := func(uid string) {
		t.Helper()
		m := dwm["metadata"].(map[string]any)
		delete(m, "uid")
		m["ownerReferences"] = []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": aggPod, "uid": uid, "controller": false, "blockOwnerDeletion": false}}
		b, _ := json.Marshal(dwm)
		force := true
		if _, err := dyn.Resource(gvr).Namespace(kubeapi.FleetNamespace).Patch(ctx, aggPod, types.ApplyPatchType, b,
			metav1.PatchOptions{FieldManager: "dynamo-worker", Force: &force}); err != nil {
			t.Fatal(err)
		}
	}
	slice := slices[0]
	var eps []any
	for _, ep := range slice["endpoints"].([]any) {
		if ep.(map[string]any)["targetRef"].(map[string]any)["name"] == aggPod {
			eps = append(eps, ep)
		}
	}
	slice["endpoints"] = eps
	cs := s.Clientset(t)
	// point writes the slice with its one endpoint naming the pod of uid.
	point := func(uid string) {
		t.Helper()
		eps[0].(map[string]any)["targetRef"].(map[string]any)["uid"] = uid
		b, _ := json.Marshal(slice)
		force := true
		if _, err := cs.DiscoveryV1().EndpointSlices(kubeapi.FleetNamespace).Patch(ctx, "dynamo-qwen3-workers-x7k2p", types.ApplyPatchType, b,
			metav1.PatchOptions{FieldManager: "endpointslice-controller", Force: &force}); err != nil {
			t.Fatal(err)
		}
	}
	old := s.ApplyYAML(t, podYAML(aggPod, "worker", "w"))[0]
	s.SetPodStatus(t, kubeapi.FleetNamespace, aggPod, kubeapi.PodState{Phase: corev1.PodRunning, Ready: true})
	apply(string(old.GetUID()))
	point(string(old.GetUID()))

	src := kube.NewMetadata(config.Kubernetes{Namespace: kubeapi.FleetNamespace}, []string{fixtureNS},
		kube.ClientOptions{Kubeconfig: s.WriteKubeconfig(t, kubeapi.ServiceAccountUser)}, nil)
	reg, _ := runSource(t, src)
	id := kube.HashPodName(aggPod)
	has := func() bool { return workerIDs(reg.Snapshot())[id] }
	tu.Eventually(t, 30*time.Second, "the worker", has)

	// The pod made anew; no garbage collector runs here, so the old
	// resource stays for the new worker to apply over.
	if err := cs.CoreV1().Pods(kubeapi.FleetNamespace).Delete(ctx, aggPod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := s.ApplyYAML(t, podYAML(aggPod, "worker", "w"))[0]
	s.SetPodStatus(t, kubeapi.FleetNamespace, aggPod, kubeapi.PodState{Phase: corev1.PodRunning, Ready: true})
	apply(string(fresh.GetUID()))
	got, err := dyn.Resource(gvr).Namespace(kubeapi.FleetNamespace).Get(ctx, aggPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs := got.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != fresh.GetUID() {
		t.Fatalf("owner references after the new worker's apply: %+v", refs)
	}
	tu.Eventually(t, 10*time.Second, "held back while the slice names the old pod", func() bool {
		return !has() && problemKinds(reg.Snapshot())["mismatch"] == 1
	})
	point(string(fresh.GetUID()))
	tu.Eventually(t, 10*time.Second, "the worker again", func() bool {
		return has() && problemKinds(reg.Snapshot())["mismatch"] == 0
	})
	if f := s.Forbidden(t); len(f) != 0 {
		t.Fatalf("the source asked for more than its Role: %v", f)
	}
}
