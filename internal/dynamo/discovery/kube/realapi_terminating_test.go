//go:build kube

package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	tu "github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubeapi"
)

// TestRealAPIServerPodsTerminating: deleting a pod scheduled on a node is
// graceful: the API server keeps it, still Running and Ready, with a
// deletionTimestamp until the kubelet confirms. The worker leaves the view
// at that deletionTimestamp, not when the pod object goes; a pod made
// anew under the same name (another uid, as a StatefulSet does) is the
// same worker again once ready.
func TestRealAPIServerPodsTerminating(t *testing.T) {
	s := kubeapi.Start(t)
	scheduled := strings.Replace(podYAML("worker-0", "decode", "VllmDecodeWorker"), "spec:\n", "spec:\n  nodeName: node-a\n", 1)
	s.ApplyYAML(t, overlayFile(t, "dynamo-pod-discovery", "role.yaml"), roleBinding(), scheduled)
	s.SetPodStatus(t, kubeapi.FleetNamespace, "worker-0", kubeapi.PodState{Phase: corev1.PodRunning, Ready: true, IP: "10.0.0.1"})
	src := kube.NewPods(config.Kubernetes{Namespace: kubeapi.FleetNamespace, Model: "qwen"}, []string{fixtureNS},
		kube.ClientOptions{Kubeconfig: s.WriteKubeconfig(t, kubeapi.ServiceAccountUser)}, nil)
	src.Timing = kube.Timing{Seed: 30 * time.Second, WatchTimeout: time.Minute, IdleDeadline: 2 * time.Minute}
	reg, _ := runSource(t, src)
	w0 := kube.HashPodName("worker-0")
	has := func() bool { return workerIDs(reg.Snapshot())[w0] }
	tu.Eventually(t, 30*time.Second, "worker-0", has)

	cs := s.Clientset(t)
	ctx := context.Background()
	grace := int64(300)
	if err := cs.CoreV1().Pods(kubeapi.FleetNamespace).Delete(ctx, "worker-0", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	p, err := cs.CoreV1().Pods(kubeapi.FleetNamespace).Get(ctx, "worker-0", metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("the API server did not keep the terminating pod: %v, %+v", err, p)
	}
	tu.Eventually(t, 10*time.Second, "worker-0 gone while terminating", func() bool { return !has() })

	// The kubelet's confirmation, then the same name anew, with the same IP.
	zero := int64(0)
	if err := cs.CoreV1().Pods(kubeapi.FleetNamespace).Delete(ctx, "worker-0", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	tu.Eventually(t, 10*time.Second, "the pod object gone", func() bool {
		_, err := cs.CoreV1().Pods(kubeapi.FleetNamespace).Get(ctx, "worker-0", metav1.GetOptions{})
		return err != nil
	})
	again := s.ApplyYAML(t, scheduled)[0]
	if again.GetUID() == p.UID {
		t.Fatal("the new pod has the old uid")
	}
	s.SetPodStatus(t, kubeapi.FleetNamespace, "worker-0", kubeapi.PodState{Phase: corev1.PodRunning, Ready: true, IP: "10.0.0.1"})
	tu.Eventually(t, 10*time.Second, "worker-0 again", has)
	if n := reg.Snapshot().Workers.Len(); n != 1 {
		t.Fatalf("%d workers, want 1: %s", n, fmt.Sprint(workerIDs(reg.Snapshot())))
	}
	if f := s.Forbidden(t); len(f) != 0 {
		t.Fatalf("the source asked for more than its Role: %v", f)
	}
}
