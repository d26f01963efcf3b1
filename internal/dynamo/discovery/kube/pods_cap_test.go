package kube_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	tu "github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubefake"
)

// TestPodsWatchCapLogged: a pod past MaxPods brought by the watch is
// ignored with a warning (once), as the list's cut is and as the metadata
// source's EndpointSlices past theirs are, not in silence.
func TestPodsWatchCapLogged(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	for i := range kube.MaxPods {
		fake.Apply(kubefake.Pods, pod(fmt.Sprintf("fe-%05d", i), "Frontend", "frontend", "", true))
	}
	var logs tu.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	src := kube.NewPods(config.Kubernetes{Namespace: k8sNS, Model: "m"}, []string{dynNS}, kube.ClientOptions{Kubeconfig: fake.WriteKubeconfig(t)}, logger)
	src.Timing = kube.Timing{Seed: 60 * time.Second, WatchTimeout: time.Hour, IdleDeadline: time.Hour}
	reg := fleet.NewRegistry(nil, nil)
	w := runWatcher(t, src, reg)
	tu.Eventually(t, 60*time.Second, "connected", w.Connected)
	if strings.Contains(logs.String(), "too many pods") {
		t.Fatalf("the list of exactly MaxPods pods was cut: %s", logs.String())
	}
	fake.Apply(kubefake.Pods, pod("worker-over-1", "D", "decode", "", true))
	fake.Apply(kubefake.Pods, pod("worker-over-2", "D", "decode", "", true))
	// A marker: a held pod's change after the two, so the watch got this far.
	fake.Apply(kubefake.Pods, pod("fe-00000", "D", "decode", "", true))
	tu.Eventually(t, 10*time.Second, "the marker pod published", func() bool { return reg.Snapshot().Workers.Len() == 1 })
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "worker-over-1") {
		t.Fatalf("a pod past MaxPods from the watch: %d warnings, want 1 naming worker-over-1:\n%s", n, logs.String())
	}
}
