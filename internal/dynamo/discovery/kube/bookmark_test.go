package kube_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	tu "github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubefake"
)

// TestWatchBookmarksKeepStreamsAlive: a watch that receives only bookmarks
// (the API server's progress notices while nothing it selects changes) is
// alive: each bookmark restarts its idle deadline, for the pods watch and
// for both watches of the metadata source, so a quiet fleet is not
// re-listed at every idle deadline.
func TestWatchBookmarksKeepStreamsAlive(t *testing.T) {
	t.Parallel()
	timing := kube.Timing{Seed: 5 * time.Second, WatchTimeout: time.Hour, IdleDeadline: time.Second}
	churn := func(fake *kubefake.Server, res kubefake.Resource, make func(i int) kubefake.Object) {
		// Changes to objects the watch does not select move the store's
		// resourceVersion on, so the server sends the watch bookmarks:
		// one every 100 ms for three idle deadlines, a tenth of the
		// deadline apart so that a loaded machine's stall is not taken
		// for a quiet watch.
		for i := range 30 {
			fake.Apply(res, make(i))
			time.Sleep(100 * time.Millisecond)
		}
	}
	cm := func(i int) kubefake.Object {
		return kubefake.Object{"metadata": kubefake.Object{"name": "unrelated", "namespace": k8sNS, "labels": kubefake.Object{"n": fmt.Sprint(i)}}}
	}

	t.Run("pods", func(t *testing.T) {
		t.Parallel()
		fake := kubefake.Start(t)
		fake.Apply(kubefake.Pods, pod("worker-0", "D", "decode", "", true))
		h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "m"}, timing)
		waitView(t, h, want(line("worker-0", "decode", "m", "D")))
		tu.Eventually(t, 5*time.Second, "the watch open", func() bool { return fake.Watches() == 1 })
		churn(fake, kubefake.EndpointSlices, cm)
		if errs := h.passErrors(); len(errs) != 0 || fake.Watches() != 1 {
			t.Fatalf("a watch kept alive by bookmarks ended: %v (%d watches)", errs, fake.Watches())
		}
	})
	t.Run("metadata", func(t *testing.T) {
		t.Parallel()
		fake := kubefake.Start(t)
		loadFleetFixtures(t, fake)
		h := startMetadata(t, fake, timing)
		tu.Eventually(t, 10*time.Second, "four workers", func() bool { return h.reg.Snapshot().Workers.Len() == 4 })
		tu.Eventually(t, 5*time.Second, "both watches open", func() bool { return fake.Watches() == 2 })
		churn(fake, kubefake.Pods, cm)
		if errs := h.passErrors(); len(errs) != 0 || fake.Watches() != 2 {
			t.Fatalf("watches kept alive by bookmarks ended: %v (%d watches)", errs, fake.Watches())
		}
	})
}
