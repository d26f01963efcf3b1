//go:build kube

package kubeapi_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubeapi"
)

var dwmResource = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1alpha1", Resource: "dynamoworkermetadatas"}

const (
	podName = "worker-0"
	podID   = "43710f49c0cff" // hash_pod_name("worker-0") = 1186445869714687
	labels  = `
    nvidia.com/dynamo-discovery-backend: kubernetes
    nvidia.com/dynamo-discovery-enabled: "true"
    nvidia.com/dynamo-namespace: dynamo`
)

func readFile(t *testing.T, elem ...string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(append([]string{testutil.RepoRoot(t)}, elem...)...))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestBuiltBinary: the harness looks for the server where build.sh puts it.
func TestBuiltBinary(t *testing.T) {
	t.Setenv(testutil.EnvCache, t.TempDir())
	cmd := exec.Command("bash", filepath.Join(testutil.RepoRoot(t), "scripts", "kube-apiserver", "build.sh"), "--path")
	cmd.Env = append(os.Environ(), "KUBE_APISERVER_OUT=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build.sh --path: %v", err)
	}
	got, err := kubeapi.BuiltBinary()
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(out)); got != want {
		t.Errorf("kubeapi.BuiltBinary() = %s, build.sh --path says %s", got, want)
	}
}

// TestSmoke: the CRD installs, the metadata source's Role from
// scripts/deploy grants the service account exactly list and watch of pods,
// DynamoWorkerMetadata resources and EndpointSlices, and nothing more (the
// audit log agrees); the kubernetes_pods source's Role grants pods alone; a
// compaction makes a watch from an old resourceVersion end in 410 Gone.
func TestSmoke(t *testing.T) {
	s := kubeapi.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	s.ApplyYAML(t,
		readFile(t, "testdata", "kube", "dynamoworkermetadata-crd.yaml"),
		readFile(t, "scripts", "deploy", "kustomize", "overlays", "dynamo-metadata-discovery", "role.yaml"),
		fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: continuum-router-dynamo-pod-reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: continuum-router-dynamo-pod-reader
subjects:
  - kind: ServiceAccount
    name: %s
    namespace: %s
`, kubeapi.ServiceAccountName, kubeapi.FleetNamespace),
		`apiVersion: v1
kind: Pod
metadata:
  name: `+podName+`
  labels:`+labels+`
    nvidia.com/dynamo-component-type: worker
    nvidia.com/dynamo-sub-component-type: decode
    nvidia.com/dynamo-component: VllmDecodeWorker
spec:
  containers:
    - name: main
      image: example.invalid/worker:1
`)
	pod := s.SetPodStatus(t, kubeapi.FleetNamespace, podName, kubeapi.PodState{Phase: corev1.PodRunning, Ready: true, IP: "10.1.2.3"})
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.Conditions) == 0 || pod.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Fatalf("pod status not applied: %+v", pod.Status)
	}
	s.ApplyYAML(t, fmt.Sprintf(`apiVersion: nvidia.com/v1alpha1
kind: DynamoWorkerMetadata
metadata:
  name: %[1]s
  ownerReferences:
    - {apiVersion: v1, kind: Pod, name: %[1]s, uid: %[2]s, controller: false, blockOwnerDeletion: false}
spec:
  data:
    endpoints:
      dynamo/backend/generate/%[3]s:
        {type: Endpoint, namespace: dynamo, component: backend, endpoint: generate, instance_id: 1186445869714687, transport: {tcp: "10.1.2.3:31000/generate"}}
    model_cards: {}
    event_channels: null
`, podName, pod.UID, podID), fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: backend-abcde
  labels:`+labels+`
addressType: IPv4
endpoints:
  - addresses: ["10.1.2.3"]
    conditions: {ready: true}
    targetRef: {kind: Pod, name: %s, namespace: %s, uid: %s}
ports:
  - {name: http, port: 9090, protocol: TCP}
`, podName, kubeapi.FleetNamespace, pod.UID))

	// The service account, as the router runs: through a kubeconfig file.
	cfg, err := clientcmd.BuildConfigFromFlags("", s.WriteKubeconfig(t, kubeapi.ServiceAccountUser))
	if err != nil {
		t.Fatal(err)
	}
	sa := kubernetes.NewForConfigOrDie(cfg)
	saDyn := dynamic.NewForConfigOrDie(cfg)
	admin := s.Clientset(t)
	adminDyn := dynamic.NewForConfigOrDie(s.AdminConfig())
	ns := kubeapi.FleetNamespace
	selector := "nvidia.com/dynamo-discovery-backend=kubernetes,nvidia.com/dynamo-discovery-enabled=true"

	// Allowed: list and watch of the three resources, seeing the admin's changes.
	pods, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector + ",nvidia.com/dynamo-namespace=dynamo", Limit: 500})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Name != podName {
		t.Fatalf("list pods as the service account: %v (%d items)", err, len(pods.Items))
	}
	dwms, err := saDyn.Resource(dwmResource).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 32})
	if err != nil || len(dwms.Items) != 1 {
		t.Fatalf("list dynamoworkermetadatas as the service account: %v", err)
	}
	if data, _, _ := unstructured.NestedMap(dwms.Items[0].Object, "spec", "data", "endpoints"); len(data) != 1 {
		t.Errorf("spec.data.endpoints kept %d entries, want 1: %v", len(data), dwms.Items[0].Object)
	}
	slices, err := sa.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: 500})
	if err != nil || len(slices.Items) != 1 {
		t.Fatalf("list endpointslices as the service account: %v", err)
	}
	if _, err := sa.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{}); err != nil {
		t.Errorf("get pod as the service account: %v", err)
	}

	mark := []byte(`{"metadata":{"annotations":{"continuum.test/touched":"` + time.Now().Format(time.RFC3339Nano) + `"}}}`)
	expectEvent(t, "pods", func(o metav1.ListOptions) (watch.Interface, error) { return sa.CoreV1().Pods(ns).Watch(ctx, o) },
		pods.ResourceVersion, func() error {
			_, err := admin.CoreV1().Pods(ns).Patch(ctx, podName, types.MergePatchType, mark, metav1.PatchOptions{})
			return err
		})
	expectEvent(t, "dynamoworkermetadatas", func(o metav1.ListOptions) (watch.Interface, error) {
		return saDyn.Resource(dwmResource).Namespace(ns).Watch(ctx, o)
	}, dwms.GetResourceVersion(), func() error {
		_, err := adminDyn.Resource(dwmResource).Namespace(ns).Patch(ctx, podName, types.MergePatchType, mark, metav1.PatchOptions{})
		return err
	})
	expectEvent(t, "endpointslices", func(o metav1.ListOptions) (watch.Interface, error) {
		o.LabelSelector = selector
		return sa.DiscoveryV1().EndpointSlices(ns).Watch(ctx, o)
	}, slices.ResourceVersion, func() error {
		_, err := admin.DiscoveryV1().EndpointSlices(ns).Patch(ctx, "backend-abcde", types.MergePatchType, mark, metav1.PatchOptions{})
		return err
	})

	// So far the service account asked for nothing it may not do; the audit
	// log shows what it did.
	if f := s.Forbidden(t); len(f) != 0 {
		t.Errorf("forbidden requests before any was meant: %v", f)
	}
	did := map[string]bool{}
	for _, r := range s.Requests(t) {
		if r.Code/100 == 2 {
			did[r.Verb+" "+r.Resource] = true
		}
	}
	for _, want := range []string{"list pods", "watch pods", "get pods", "list dynamoworkermetadatas", "watch dynamoworkermetadatas", "list endpointslices", "watch endpointslices"} {
		if !did[want] {
			t.Errorf("the audit log lacks a successful %q of the service account: %v", want, s.Requests(t))
		}
	}

	// Forbidden: anything beyond reading those three in the fleet namespace.
	forbidden := map[string]func() error{
		"list secrets": func() error { _, err := sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); return err },
		"create a pod": func() error {
			_, err := sa.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}, metav1.CreateOptions{})
			return err
		},
		"patch pod status": func() error {
			_, err := sa.CoreV1().Pods(ns).Patch(ctx, podName, types.MergePatchType, []byte(`{"status":{"phase":"Failed"}}`), metav1.PatchOptions{}, "status")
			return err
		},
		"delete a dwm": func() error {
			return saDyn.Resource(dwmResource).Namespace(ns).Delete(ctx, podName, metav1.DeleteOptions{})
		},
		"list pods in default": func() error {
			_, err := sa.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			return err
		},
		"list services": func() error { _, err := sa.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); return err },
		"list nodes":    func() error { _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err },
		"update a slice": func() error {
			sl := slices.Items[0].DeepCopy()
			sl.Endpoints = []discoveryv1.Endpoint{}
			_, err := sa.DiscoveryV1().EndpointSlices(ns).Update(ctx, sl, metav1.UpdateOptions{})
			return err
		},
	}
	for what, call := range forbidden {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s as the service account: err %v, want 403 Forbidden", what, err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the audit log to hold every forbidden request", func() bool {
		return len(s.Forbidden(t)) == len(forbidden)
	})

	// The kubernetes_pods source's Role in its place: pods only.
	rbac := admin.RbacV1().Roles(ns)
	if err := rbac.Delete(ctx, "continuum-router-dynamo-pod-reader", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.ApplyYAML(t, readFile(t, "scripts", "deploy", "kustomize", "overlays", "dynamo-pod-discovery", "role.yaml"))
	testutil.Eventually(t, 30*time.Second, "the pods-only Role to take effect", func() bool {
		_, err := saDyn.Resource(dwmResource).Namespace(ns).List(ctx, metav1.ListOptions{})
		return apierrors.IsForbidden(err)
	})
	if _, err := sa.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list endpointslices under the pods-only Role: err %v, want 403 Forbidden", err)
	}
	if _, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list pods under the pods-only Role: %v", err)
	}

	// Compaction: a watch from a resourceVersion before it ends in 410 Gone.
	before, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetPodStatus(t, ns, podName, kubeapi.PodState{Phase: corev1.PodRunning, Ready: false, IP: "10.1.2.3"})
	s.Compact(t)
	w, err := sa.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err == nil {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type != watch.Error {
				t.Fatalf("watch from a compacted resourceVersion: got %v %v, want an error event", ev.Type, ok)
			}
			err = apierrors.FromObject(ev.Object)
		case <-ctx.Done():
			t.Fatal("watch from a compacted resourceVersion: no event")
		}
		w.Stop()
	}
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("watch from a compacted resourceVersion: %v, want 410 Gone", err)
	}
}

// expectEvent opens a watch from rv, makes a change, and waits for its event.
func expectEvent(t *testing.T, what string, open func(metav1.ListOptions) (watch.Interface, error), rv string, change func() error) {
	t.Helper()
	timeout := int64(60)
	w, err := open(metav1.ListOptions{ResourceVersion: rv, TimeoutSeconds: &timeout, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatalf("watch %s as the service account: %v", what, err)
	}
	defer w.Stop()
	if err := change(); err != nil {
		t.Fatalf("change %s as the admin: %v", what, err)
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch %s ended before the change arrived", what)
			}
			switch ev.Type {
			case watch.Modified:
				return
			case watch.Error:
				t.Fatalf("watch %s: %v", what, apierrors.FromObject(ev.Object))
			}
		case <-deadline:
			t.Fatalf("watch %s: no event for the change within 30 s", what)
		}
	}
}
