//go:build kube

package kube_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	tu "github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubeapi"
)

func roleBinding() string {
	return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: continuum-router-dynamo-pod-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: continuum-router-dynamo-pod-reader}
subjects: [{kind: ServiceAccount, name: %s, namespace: %s}]
`, kubeapi.ServiceAccountName, kubeapi.FleetNamespace)
}

func overlayFile(t *testing.T, overlay, name string) string {
	var s string
	readRaw(t, "scripts/deploy/kustomize/overlays/"+overlay+"/"+name, &s)
	return s
}

func readRaw(t *testing.T, rel string, s *string) {
	t.Helper()
	b, err := os.ReadFile(tu.RepoRoot(t) + "/" + rel)
	if err != nil {
		t.Fatal(err)
	}
	*s = string(b)
}

// runSource runs src under a watcher with the service account's
// credentials (RBAC enforced, exactly the Role of scripts/deploy).
func runSource(t *testing.T, src discovery.Source) (*fleet.Registry, *atomic.Int32) {
	t.Helper()
	reg := fleet.NewRegistry(nil, nil)
	var ends atomic.Int32
	w := &discovery.Watcher{Source: src, Registry: reg, Backoff: discovery.Backoff{Initial: 50 * time.Millisecond, Max: time.Second},
		OnPassEnd: func(err error) {
			if errors.Is(err, discovery.ErrWatchExpired) {
				ends.Add(1)
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return reg, &ends
}

func podYAML(name, ctype, component string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  labels:
    nvidia.com/dynamo-discovery-backend: kubernetes
    nvidia.com/dynamo-discovery-enabled: "true"
    nvidia.com/dynamo-namespace: %s
    nvidia.com/dynamo-component-type: %s
    nvidia.com/dynamo-component: %s
spec:
  containers: [{name: main, image: example.invalid/worker:1}]
`, name, fixtureNS, ctype, component)
}

// TestRealAPIServerPodsSource: the kubernetes_pods source against a real
// kube-apiserver, as the service account holding only the pods Role.
func TestRealAPIServerPodsSource(t *testing.T) {
	s := kubeapi.Start(t)
	s.ApplyYAML(t, overlayFile(t, "dynamo-pod-discovery", "role.yaml"), roleBinding(),
		podYAML("worker-0", "decode", "VllmDecodeWorker"), podYAML("worker-1", "prefill", "VllmPrefillWorker"),
		podYAML("frontend-0", "frontend", "Frontend"))
	for _, p := range []string{"worker-0", "worker-1", "frontend-0"} {
		s.SetPodStatus(t, kubeapi.FleetNamespace, p, kubeapi.PodState{Phase: corev1.PodRunning, Ready: true, IP: "10.0.0.1"})
	}
	src := kube.NewPods(config.Kubernetes{Namespace: kubeapi.FleetNamespace, Model: "qwen"}, []string{fixtureNS},
		kube.ClientOptions{Kubeconfig: s.WriteKubeconfig(t, kubeapi.ServiceAccountUser)}, nil)
	src.Timing = kube.Timing{Seed: 30 * time.Second, WatchTimeout: 3 * time.Second, IdleDeadline: time.Minute}
	reg, ends := runSource(t, src)
	ids := func() string {
		var out []string
		for w := range reg.Snapshot().Workers.All() {
			out = append(out, fmt.Sprintf("%x:%s", w.ID.InstanceID, w.Role))
		}
		return strings.Join(out, ",")
	}
	w0, w1 := fmt.Sprintf("%x", kube.HashPodName("worker-0")), fmt.Sprintf("%x", kube.HashPodName("worker-1"))
	tu.Eventually(t, 30*time.Second, "two workers", func() bool { return ids() == w0+":decode,"+w1+":prefill" || ids() == w1+":prefill,"+w0+":decode" })

	cs := s.Clientset(t)
	ctx := context.Background()
	// Unready, then deleted, then relabelled out of the selector.
	s.SetPodStatus(t, kubeapi.FleetNamespace, "worker-1", kubeapi.PodState{Phase: corev1.PodRunning, Ready: false})
	tu.Eventually(t, 10*time.Second, "worker-1 unready", func() bool { return ids() == w0+":decode" })
	if err := cs.CoreV1().Pods(kubeapi.FleetNamespace).Delete(ctx, "worker-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A compaction, then changes, then the watch's normal end: the relist
	// (never a resume) sees the current state.
	s.Compact(t)
	p, err := cs.CoreV1().Pods(kubeapi.FleetNamespace).Get(ctx, "worker-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels[kube.LabelEnabled] = "false"
	if _, err := cs.CoreV1().Pods(kubeapi.FleetNamespace).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tu.Eventually(t, 10*time.Second, "no workers", func() bool { return ids() == "" })
	seen := ends.Load()
	tu.Eventually(t, 10*time.Second, "a normal watch end and relist after the compaction", func() bool { return ends.Load() > seen })
	s.ApplyYAML(t, podYAML("worker-2", "decode", "VllmDecodeWorker"))
	s.SetPodStatus(t, kubeapi.FleetNamespace, "worker-2", kubeapi.PodState{Phase: corev1.PodRunning, Ready: true})
	w2 := fmt.Sprintf("%x", kube.HashPodName("worker-2"))
	tu.Eventually(t, 10*time.Second, "worker-2", func() bool { return ids() == w2+":decode" })
	if f := s.Forbidden(t); len(f) != 0 {
		t.Fatalf("the source asked for more than its Role: %v", f)
	}
}

// TestRealAPIServerMetadataSource: the fixture fleet's DynamoWorkerMetadata
// resources and EndpointSlice in a real kube-apiserver give the view its
// etcd equivalent gives, as the service account holding the metadata Role.
func TestRealAPIServerMetadataSource(t *testing.T) {
	s := startMetadataAPIServer(t)
	var dwms, slices []map[string]any
	readFixture(t, "dynamoworkermetadatas.json", &dwms)
	readFixture(t, "endpointslices.json", &slices)
	// Each resource's owner reference and its slice endpoint's targetRef
	// carry the uid the server gave its pod.
	podUIDs := map[string]string{}
	for _, d := range dwms {
		m := d["metadata"].(map[string]any)
		name := m["name"].(string)
		pod := s.ApplyYAML(t, podYAML(name, "worker", "w"))[0]
		podUIDs[name] = string(pod.GetUID())
		s.SetPodStatus(t, kubeapi.FleetNamespace, name, kubeapi.PodState{Phase: corev1.PodRunning, Ready: true})
		delete(m, "uid")
		m["ownerReferences"].([]any)[0].(map[string]any)["uid"] = podUIDs[name]
		b, _ := json.Marshal(d)
		s.ApplyYAML(t, string(b))
	}
	for _, sl := range slices {
		for _, ep := range sl["endpoints"].([]any) {
			ref := ep.(map[string]any)["targetRef"].(map[string]any)
			ref["uid"] = podUIDs[ref["name"].(string)]
		}
		b, _ := json.Marshal(sl)
		s.ApplyYAML(t, string(b))
	}
	var etcd map[string]json.RawMessage
	readFixture(t, "etcd.json", &etcd)
	r := fleet.NewReducer()
	r.ResyncBegin()
	for k, v := range etcd {
		r.Put(k, v, time.Now())
	}
	r.ResyncEnd()
	want := fleetView(t, r.Build(time.Now()))

	src := kube.NewMetadata(config.Kubernetes{Namespace: kubeapi.FleetNamespace}, []string{fixtureNS},
		kube.ClientOptions{Kubeconfig: s.WriteKubeconfig(t, kubeapi.ServiceAccountUser)}, nil)
	reg, _ := runSource(t, src)
	tu.Eventually(t, 30*time.Second, "the etcd-equivalent view", func() bool { return fleetView(t, reg.Snapshot()) == want })

	// Unready in the slice: the worker goes.
	cs := s.Clientset(t)
	ctx := context.Background()
	es, err := cs.DiscoveryV1().EndpointSlices(kubeapi.FleetNamespace).Get(ctx, "dynamo-qwen3-workers-x7k2p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := false
	for i := range es.Endpoints {
		if es.Endpoints[i].TargetRef.Name == aggPod {
			es.Endpoints[i].Conditions.Ready = &f
		}
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(kubeapi.FleetNamespace).Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tu.Eventually(t, 10*time.Second, "the unready worker gone", func() bool { return !workerIDs(reg.Snapshot())[kube.HashPodName(aggPod)] })
	if f := s.Forbidden(t); len(f) != 0 {
		t.Fatalf("the source asked for more than its Role: %v", f)
	}
}

// startMetadataAPIServer starts a real kube-apiserver holding the
// DynamoWorkerMetadata CRD and the metadata source's Role, bound to the
// service account the source runs as.
func startMetadataAPIServer(t *testing.T) *kubeapi.Server {
	t.Helper()
	s := kubeapi.Start(t)
	var crd string
	readRaw(t, "testdata/kube/dynamoworkermetadata-crd.yaml", &crd)
	s.ApplyYAML(t, crd, overlayFile(t, "dynamo-metadata-discovery", "role.yaml"), roleBinding())
	return s
}
