package kube_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/telemetry"
	tu "github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubefake"
)

const (
	k8sNS = "dynamo"
	dynNS = "dynamo-solar"
)

// pod builds a worker pod object as the operator labels it.
func pod(name, component, ctype, sub string, ready bool, mut ...func(kubefake.Object)) kubefake.Object {
	lbl := kubefake.Object{
		kube.LabelBackend: "kubernetes", kube.LabelEnabled: "true", kube.LabelDynamoNamespace: dynNS,
		kube.LabelComponent: component, kube.LabelComponentType: ctype,
	}
	if sub != "" {
		lbl[kube.LabelSubComponentType] = sub
	}
	status := "False"
	if ready {
		status = "True"
	}
	o := kubefake.Object{
		"metadata": kubefake.Object{"name": name, "namespace": k8sNS, "labels": lbl},
		"spec":     kubefake.Object{"containers": []any{kubefake.Object{"name": "main", "image": "vllm"}}},
		"status": kubefake.Object{"phase": "Running", "conditions": []any{
			kubefake.Object{"type": "Ready", "status": status},
		}},
	}
	for _, m := range mut {
		m(o)
	}
	return o
}

type harness struct {
	fake    *kubefake.Server
	reg     *fleet.Registry
	metrics *telemetry.DiscoveryMetrics
	watcher *discovery.Watcher
	mu      sync.Mutex
	passErr []error
}

func startPods(t *testing.T, fake *kubefake.Server, k config.Kubernetes, timing kube.Timing) *harness {
	t.Helper()
	return startPodsWith(t, fake, fake.WriteKubeconfig(t), k, timing)
}

// startPodsWith is startPods with the kubeconfig at path.
func startPodsWith(t *testing.T, fake *kubefake.Server, kubeconfig string, k config.Kubernetes, timing kube.Timing) *harness {
	t.Helper()
	h := &harness{fake: fake, metrics: telemetry.NewDiscoveryMetrics(prometheus.NewRegistry())}
	h.reg = fleet.NewRegistry(nil, discovery.ProblemCounter(h.metrics))
	src := kube.NewPods(k, []string{dynNS}, kube.ClientOptions{Kubeconfig: kubeconfig}, nil)
	src.Timing = timing
	h.watcher = &discovery.Watcher{Source: src, Registry: h.reg, Metrics: h.metrics,
		Backoff:   discovery.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, ResetAfter: kube.ResetAfter(50 * time.Millisecond)},
		OnPassEnd: func(err error) { h.mu.Lock(); h.passErr = append(h.passErr, err); h.mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.watcher.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	})
	return h
}

// runWatcher runs src under a watcher that publishes to reg, until the
// test ends.
func runWatcher(t *testing.T, src discovery.Source, reg *fleet.Registry) *discovery.Watcher {
	t.Helper()
	w := &discovery.Watcher{Source: src, Registry: reg, Backoff: discovery.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (h *harness) passErrors() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.passErr...)
}

// view renders the workers as "pod-hash role model component", sorted.
func view(snap *fleet.Snapshot) string {
	var out []string
	for w := range snap.Workers.All() {
		out = append(out, fmt.Sprintf("%s/%s %s %s %s", w.ID.Namespace, w.InstanceHex(), w.Role, w.Model, w.Component))
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func want(lines ...string) string {
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func line(name, role, model, component string) string {
	return fmt.Sprintf("%s/%x %s %s %s", dynNS, kube.HashPodName(name), role, model, component)
}

func waitView(t *testing.T, h *harness, expect string) {
	t.Helper()
	tu.Eventually(t, 10*time.Second, "fleet view:\n"+expect, func() bool { return view(h.reg.Snapshot()) == expect })
}

var fast = kube.Timing{Seed: 5 * time.Second, WatchTimeout: time.Hour, IdleDeadline: time.Hour}

func TestPodsSourceRolesReadinessModels(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, pod("worker-0", "VllmPrefillWorker", "prefill", "", true))
	fake.Apply(kubefake.Pods, pod("worker-1", "VllmDecodeWorker", "worker", "decode", true))
	// component-type worker without a sub type is aggregated, whatever the
	// component's name says (a pool named *-prefillheavy is still aggregated).
	fake.Apply(kubefake.Pods, pod("agg-0", "VllmWorker-prefillheavy", "worker", "", true))
	fake.Apply(kubefake.Pods, pod("frontend-0", "Frontend", "frontend", "", true))
	fake.Apply(kubefake.Pods, pod("planner-0", "Planner", "planner", "", true))
	fake.Apply(kubefake.Pods, pod("unready-0", "VllmDecodeWorker", "decode", "", false))
	fake.Apply(kubefake.Pods, pod("pending-0", "VllmDecodeWorker", "decode", "", true, func(o kubefake.Object) {
		o["status"].(kubefake.Object)["phase"] = "Pending"
	}))
	fake.Apply(kubefake.Pods, pod("deleting-0", "VllmDecodeWorker", "decode", "", true, func(o kubefake.Object) {
		o["metadata"].(kubefake.Object)["deletionTimestamp"] = "2026-11-30T00:00:00Z"
	}))
	fake.Apply(kubefake.Pods, pod("unmapped-0", "OtherWorker", "decode", "", true))
	fake.Apply(kubefake.Pods, pod("other-ns-0", "VllmDecodeWorker", "decode", "", true, func(o kubefake.Object) {
		o["metadata"].(kubefake.Object)["labels"].(kubefake.Object)[kube.LabelDynamoNamespace] = "someone-else"
	}))
	containerMode := func(o kubefake.Object) {
		o["metadata"].(kubefake.Object)["annotations"] = kubefake.Object{kube.AnnotationMode: "container"}
	}
	fake.Apply(kubefake.Pods, pod("container-0", "VllmDecodeWorker", "decode", "", true, containerMode))
	// Only pods that would otherwise be workers are refused for the
	// container mode: not a frontend, a planner, an unready or an unmapped
	// pod.
	fake.Apply(kubefake.Pods, pod("container-frontend-0", "Frontend", "frontend", "", true, containerMode))
	fake.Apply(kubefake.Pods, pod("container-planner-0", "Planner", "planner", "", true, containerMode))
	fake.Apply(kubefake.Pods, pod("container-unready-0", "VllmDecodeWorker", "decode", "", false, containerMode))
	fake.Apply(kubefake.Pods, pod("container-unmapped-0", "OtherWorker", "decode", "", true, containerMode))

	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Models: []config.ComponentModel{
		{Component: "VllmPrefillWorker", Model: "solar"},
		{Component: "VllmDecodeWorker", Model: "solar"},
		{Component: "VllmWorker-prefillheavy", Model: "solar-long"},
	}}, fast)
	waitView(t, h, want(
		line("worker-0", "prefill", "solar", "VllmPrefillWorker"),
		line("worker-1", "decode", "solar", "VllmDecodeWorker"),
		line("agg-0", "aggregated", "solar-long", "VllmWorker-prefillheavy"),
	))
	if got := kube.HashPodName("worker-0"); got != 1186445869714687 {
		t.Fatalf("worker-0 hashes to %d", got)
	}
	snap := h.reg.Snapshot()
	if len(snap.Problems) != 1 || snap.Problems[0].Kind != "refused" || !strings.Contains(snap.Problems[0].Reason, "container-0") {
		t.Fatalf("problems = %+v, want one refusal of container-0", snap.Problems)
	}
	if got := testutil.ToFloat64(h.metrics.Events.WithLabelValues("refused")); got != 1 {
		t.Fatalf("refused counted %v times, want 1", got)
	}
	// The list is published before the watch opens; connected follows.
	tu.Eventually(t, 5*time.Second, "connected once the watch opens", func() bool {
		return testutil.ToFloat64(h.metrics.Connected) == 1
	})
	for w := range snap.Workers.All() {
		if w.Card != nil || w.DPDeclared || w.Capacity.TotalKVBlocks != nil {
			t.Fatalf("pod worker %+v has card, dp or capacity", w)
		}
	}

	// Watch: unready, relabel out of the selector, delete, new pod.
	fake.Apply(kubefake.Pods, pod("worker-0", "VllmPrefillWorker", "prefill", "", false))
	fake.Apply(kubefake.Pods, pod("agg-0", "VllmWorker-prefillheavy", "worker", "", true, func(o kubefake.Object) {
		o["metadata"].(kubefake.Object)["labels"].(kubefake.Object)[kube.LabelEnabled] = "false"
	}))
	fake.Delete(kubefake.Pods, k8sNS, "worker-1")
	fake.Apply(kubefake.Pods, pod("worker-2", "VllmDecodeWorker", "decode", "", true))
	waitView(t, h, want(line("worker-2", "decode", "solar", "VllmDecodeWorker")))
	fake.Apply(kubefake.Pods, pod("worker-0", "VllmPrefillWorker", "prefill", "", true))
	waitView(t, h, want(line("worker-0", "prefill", "solar", "VllmPrefillWorker"), line("worker-2", "decode", "solar", "VllmDecodeWorker")))
	if errs := h.passErrors(); len(errs) != 0 {
		t.Fatalf("passes ended: %v", errs)
	}
}

func TestPodsSourcePagination(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	var lines []string
	for i := range 1201 {
		name := fmt.Sprintf("worker-%d", i)
		fake.Apply(kubefake.Pods, pod(name, "VllmDecodeWorker", "decode", "", true))
		lines = append(lines, line(name, "decode", "solar", "VllmDecodeWorker"))
	}
	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "solar"}, fast)
	waitView(t, h, want(lines...))
	lists := 0
	for _, r := range fake.Requests() {
		if strings.Contains(r, "/pods?") && !strings.Contains(r, "watch=") {
			lists++
			if !strings.Contains(r, "limit=500") {
				t.Errorf("list without limit=500: %s", r)
			}
		}
	}
	if lists != 3 {
		t.Fatalf("%d list pages, want 3", lists)
	}
}

// A compaction while the watch is down: the watch from the old revision is
// answered 410 Gone and the source re-lists (never resumes), so a delete it
// missed is seen.
func TestPodsSource410Relists(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, pod("worker-0", "D", "decode", "", true))
	fake.Apply(kubefake.Pods, pod("worker-1", "D", "decode", "", true))
	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "m"}, fast)
	waitView(t, h, want(line("worker-0", "decode", "m", "D"), line("worker-1", "decode", "m", "D")))
	// The list is published before the watch opens: the watch must be open
	// before the compaction, or it opens too old and ends by a 410 instead.
	tu.Eventually(t, 5*time.Second, "the watch open", func() bool { return fake.Watches() >= 1 })

	fake.Hang(true)
	fake.Delete(kubefake.Pods, k8sNS, "worker-1")
	fake.Compact()
	fake.Hang(false)
	fake.ExpireWatches()
	defer func() {
		if t.Failed() {
			t.Logf("requests: %v\npass errors: %v", fake.Requests(), h.passErrors())
		}
	}()
	waitView(t, h, want(line("worker-0", "decode", "m", "D")))
	// The relist is the only way the delete could be seen: the history
	// holding it was compacted. A watch ended long before the timeout it
	// asked for is an early EOF, a failure.
	tu.Eventually(t, 5*time.Second, "a pass ended early", func() bool {
		for _, err := range h.passErrors() {
			if strings.Contains(err.Error(), "ended early") && !errors.Is(err, discovery.ErrWatchExpired) {
				return true
			}
		}
		return false
	})
}

func TestPodsSourceGoneEvent(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, pod("worker-0", "D", "decode", "", true))
	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "m"}, fast)
	waitView(t, h, want(line("worker-0", "decode", "m", "D")))
	fake.Hang(true)
	fake.Delete(kubefake.Pods, k8sNS, "worker-0")
	fake.Apply(kubefake.Pods, pod("worker-1", "D", "decode", "", true))
	fake.Compact()
	fake.Hang(false)
	fake.Gone()
	waitView(t, h, want(line("worker-1", "decode", "m", "D")))
	errs := h.passErrors()
	if len(errs) == 0 || !strings.Contains(errs[0].Error(), "410 Gone") {
		t.Fatalf("pass errors %v, want a 410 Gone first", errs)
	}
}

func TestPodsSourceIdleDeadline(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, pod("worker-0", "D", "decode", "", true))
	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "m"}, kube.Timing{Seed: 5 * time.Second, WatchTimeout: time.Hour, IdleDeadline: 300 * time.Millisecond})
	waitView(t, h, want(line("worker-0", "decode", "m", "D")))
	// A stream that sends nothing (no event, no bookmark) ends the pass at
	// its idle deadline; the next pass re-lists.
	fake.Hang(true)
	tu.Eventually(t, 5*time.Second, "an idle-deadline pass end", func() bool {
		for _, err := range h.passErrors() {
			if strings.Contains(err.Error(), "nothing arrived") {
				return true
			}
		}
		return false
	})
	fake.Hang(false)
	fake.Apply(kubefake.Pods, pod("worker-1", "D", "decode", "", true))
	waitView(t, h, want(line("worker-0", "decode", "m", "D"), line("worker-1", "decode", "m", "D")))
}

// The normal end of a watch re-lists without the connected gauge dropping.
func TestPodsSourceNormalEndKeepsConnected(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, pod("worker-0", "D", "decode", "", true))
	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "m"}, kube.Timing{Seed: 5 * time.Second, WatchTimeout: time.Second, IdleDeadline: time.Hour})
	waitView(t, h, want(line("worker-0", "decode", "m", "D")))
	tu.Eventually(t, 5*time.Second, "connected once the first watch opens", func() bool {
		return testutil.ToFloat64(h.metrics.Connected) == 1
	})
	var drops int
	deadline := time.Now().Add(3500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if testutil.ToFloat64(h.metrics.Connected) != 1 {
			drops++
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n := fake.Watches(); n < 3 {
		t.Fatalf("%d watches in 3.5 s with a 1 s server timeout", n)
	}
	if drops != 0 {
		t.Fatalf("connected dropped %d times across normal watch ends", drops)
	}
	for _, err := range h.passErrors() {
		if !errors.Is(err, discovery.ErrWatchExpired) {
			t.Fatalf("pass ended by %v", err)
		}
	}
}

// A watch that ends at the time it asked the server for, but by a cut
// connection or an undecodable event, is a failure (the connected gauge
// drops), not the server's normal end: only the response's clean end is.
func TestPodsSourceBrokenEndAtTimeoutIsAFailure(t *testing.T) {
	t.Parallel()
	for name, end := range map[string]kubefake.WatchEnd{"cut": kubefake.EndCut, "garbage": kubefake.EndGarbage} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := kubefake.Start(t)
			fake.SetWatchEnd(kubefake.Pods, end)
			fake.Apply(kubefake.Pods, pod("worker-0", "D", "decode", "", true))
			h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "m"}, kube.Timing{Seed: 5 * time.Second, WatchTimeout: time.Second, IdleDeadline: time.Hour})
			waitView(t, h, want(line("worker-0", "decode", "m", "D")))
			tu.Eventually(t, 10*time.Second, "two passes ended", func() bool { return len(h.passErrors()) >= 2 })
			for _, err := range h.passErrors() {
				if errors.Is(err, discovery.ErrWatchExpired) {
					t.Fatalf("a watch ended by %s read as the normal end: %v", name, err)
				}
			}
		})
	}
}

// Two pod names that really hash to one instance id (found by a search over
// 160 million names): both are rejected as duplicates, and deleting one
// brings the other back.
func TestPodsSourceHashCollision(t *testing.T) {
	t.Parallel()
	const a, b = "worker-34095562", "worker-126348249"
	if ha, hb := kube.HashPodName(a), kube.HashPodName(b); ha != hb || ha != 0x9ac4decb6d367 {
		t.Fatalf("%s → %x, %s → %x", a, ha, b, hb)
	}
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, pod(a, "D", "decode", "", true))
	fake.Apply(kubefake.Pods, pod(b, "D", "decode", "", true))
	fake.Apply(kubefake.Pods, pod("worker-0", "D", "decode", "", true))
	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "m"}, fast)
	waitView(t, h, want(line("worker-0", "decode", "m", "D")))
	snap := h.reg.Snapshot()
	if len(snap.Problems) != 1 || snap.Problems[0].Kind != fleet.ProblemDuplicate || snap.Problems[0].KeyCount != 2 {
		t.Fatalf("problems %+v", snap.Problems)
	}
	fake.Delete(kubefake.Pods, k8sNS, b)
	waitView(t, h, want(line("worker-0", "decode", "m", "D"), line(a, "decode", "m", "D")))
}

// Several Dynamo namespaces: one selector `in (a,b)`, each pod under its
// own namespace, a models entry scoped to one namespace.
func TestPodsSourceSeveralNamespaces(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	inNS := func(dn string) func(kubefake.Object) {
		return func(o kubefake.Object) {
			o["metadata"].(kubefake.Object)["labels"].(kubefake.Object)[kube.LabelDynamoNamespace] = dn
		}
	}
	fake.Apply(kubefake.Pods, pod("a-0", "D", "decode", "", true, inNS("ns-a")))
	fake.Apply(kubefake.Pods, pod("b-0", "D", "decode", "", true, inNS("ns-b")))
	fake.Apply(kubefake.Pods, pod("c-0", "D", "decode", "", true, inNS("ns-c")))
	h := &harness{fake: fake, metrics: telemetry.NewDiscoveryMetrics(prometheus.NewRegistry())}
	h.reg = fleet.NewRegistry(nil, nil)
	src := kube.NewPods(config.Kubernetes{Namespace: k8sNS, Models: []config.ComponentModel{
		{Component: "D", Model: "for-a", DynamoNamespace: "ns-a"},
		{Component: "D", Model: "elsewhere"},
	}}, []string{"ns-a", "ns-b"}, kube.ClientOptions{Kubeconfig: fake.WriteKubeconfig(t)}, nil)
	src.Timing = fast
	runWatcher(t, src, h.reg)
	expect := want(
		fmt.Sprintf("ns-a/%x decode for-a D", kube.HashPodName("a-0")),
		fmt.Sprintf("ns-b/%x decode elsewhere D", kube.HashPodName("b-0")))
	waitView(t, h, expect)
	found := false
	for _, r := range fake.Requests() {
		found = found || strings.Contains(r, "labelSelector=") && strings.Contains(r, "in+%28ns-a%2Cns-b%29")
	}
	if !found {
		t.Fatalf("no `in (ns-a,ns-b)` selector in %v", fake.Requests())
	}
}

// A watch that cannot be opened within the seed timeout ends the pass
// (the pending request is cancelled); once the server answers again, a
// new pass lists and watches.
func TestPodsSourceWatchOpenTimeout(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, pod("worker-0", "D", "decode", "", true))
	fake.HoldWatchOpen(true)
	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "m"}, kube.Timing{Seed: 300 * time.Millisecond, WatchTimeout: time.Hour, IdleDeadline: time.Hour})
	tu.Eventually(t, 5*time.Second, "a seed-timeout pass end", func() bool {
		for _, err := range h.passErrors() {
			if strings.Contains(err.Error(), "seed timeout") {
				return true
			}
		}
		return false
	})
	if got := testutil.ToFloat64(h.metrics.Connected); got != 0 {
		t.Fatalf("connected = %v while no watch could open", got)
	}
	// The list was published before the watch was asked for.
	waitView(t, h, want(line("worker-0", "decode", "m", "D")))
	fake.Apply(kubefake.Pods, pod("worker-1", "D", "decode", "", true))
	fake.HoldWatchOpen(false)
	waitView(t, h, want(line("worker-0", "decode", "m", "D"), line("worker-1", "decode", "m", "D")))
}

// The list is published before the watch opens, but the pass counts as
// connected only once the watch is open: a watch held unopened shows the
// listed fleet with connected at 0.
func TestPodsSourceConnectedOnlyWatching(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, pod("worker-0", "D", "decode", "", true))
	fake.HoldWatchOpen(true)
	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "m"}, kube.Timing{Seed: time.Minute, WatchTimeout: time.Hour, IdleDeadline: time.Hour})
	waitView(t, h, want(line("worker-0", "decode", "m", "D")))
	if got := testutil.ToFloat64(h.metrics.Connected); got != 0 {
		t.Fatalf("connected = %v with the list published and the watch not open", got)
	}
	fake.HoldWatchOpen(false)
	tu.Eventually(t, 5*time.Second, "connected once the watch opens", func() bool {
		return testutil.ToFloat64(h.metrics.Connected) == 1
	})
}

// An exec credential plugin that does not answer: client-go runs it with no
// context, so the list waiting for its token ignores the pass's deadline.
// The pass still ends at the seed timeout, the next passes wait for that
// one plugin run (none starts another), and once it answers the source
// lists and watches.
func TestPodsSourceExecPluginSeedTimeout(t *testing.T) {
	t.Parallel()
	fake := kubefake.StartTLS(t)
	fake.Apply(kubefake.Pods, pod("worker-0", "D", "decode", "", true))
	dir := t.TempDir()
	const hang = 4 * time.Second
	script := filepath.Join(dir, "creds.sh")
	// The first run answers after hang, later runs at once.
	body := fmt.Sprintf(`#!/bin/sh
if [ ! -e %[1]s/answered ]; then sleep %[2]d; touch %[1]s/answered; fi
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t"}}'
`, dir, int(hang/time.Second))
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	kubeconfig := fake.WriteExecKubeconfig(t, script)
	start := time.Now()
	h := startPodsWith(t, fake, kubeconfig, config.Kubernetes{Namespace: k8sNS, Model: "m"},
		kube.Timing{Seed: 300 * time.Millisecond, WatchTimeout: time.Hour, IdleDeadline: time.Hour})
	tu.Eventually(t, 10*time.Second, "a pass end", func() bool { return len(h.passErrors()) > 0 })
	if took, err := time.Since(start), h.passErrors()[0]; took > hang/2 || !strings.Contains(err.Error(), "seed timeout") {
		t.Fatalf("the first pass ended after %v by %v; want a seed-timeout end long before the plugin's %v", took, err, hang)
	}
	waitView(t, h, want(line("worker-0", "decode", "m", "D")))
	// The passes while the plugin hung waited for its one request instead
	// of sending their own.
	waited := false
	for _, err := range h.passErrors()[1:] {
		waited = waited || strings.Contains(err.Error(), "has not returned")
	}
	if !waited {
		t.Fatalf("pass errors %v: no later pass waited for the request given up on", h.passErrors())
	}
}

// TestUnmappedLoggedAtEachReadiness: a ready pod whose component maps to no
// model is logged (debug) when it becomes ready: once while it stays so
// (not again at each re-list), and again when it becomes ready anew after
// being unready, or after being deleted and made again under its name.
func TestUnmappedLoggedAtEachReadiness(t *testing.T) {
	t.Parallel()
	fake, reg, logs, logged := unmappedSource(t)

	fake.Apply(kubefake.Pods, pod("worker-0", "Unmapped", "decode", "", true))
	tu.Eventually(t, 10*time.Second, "the first readiness logged", func() bool { return logged() == 1 })
	fake.Apply(kubefake.Pods, pod("worker-0", "Unmapped", "decode", "", false))
	fake.Apply(kubefake.Pods, pod("worker-0", "Unmapped", "decode", "", true))
	fake.Delete(kubefake.Pods, k8sNS, "worker-0")
	fake.Apply(kubefake.Pods, pod("worker-0", "Unmapped", "decode", "", true)) // made again, ready
	fake.Apply(kubefake.Pods, pod("worker-1", "Mapped", "decode", "", true))   // the watch got this far
	tu.Eventually(t, 10*time.Second, "the marker pod published", func() bool { return reg.Snapshot().Workers.Len() == 1 })
	if got := logged(); got != 3 {
		t.Fatalf("the unmapped pod was logged %d times over three readiness times, want 3:\n%s", got, logs.String())
	}
}

// TestUnmappedRecreatedDuringGapLogged: a pod deleted and made again under
// its name while no watch was open (a new uid: a new pod, ready anew) is
// seen by the re-list alone; it is logged at its readiness all the same.
func TestUnmappedRecreatedDuringGapLogged(t *testing.T) {
	t.Parallel()
	fake, reg, logs, logged := unmappedSource(t)
	fake.Apply(kubefake.Pods, pod("worker-0", "Unmapped", "decode", "", true))
	tu.Eventually(t, 10*time.Second, "the first readiness logged", func() bool { return logged() == 1 })
	tu.Eventually(t, 5*time.Second, "the watch open", func() bool { return fake.Watches() >= 1 })

	fake.Hang(true)
	fake.Delete(kubefake.Pods, k8sNS, "worker-0")
	fake.Apply(kubefake.Pods, pod("worker-0", "Unmapped", "decode", "", true)) // a new pod, a new uid
	fake.Apply(kubefake.Pods, pod("worker-1", "Mapped", "decode", "", true))   // the re-list got this far
	fake.Compact()
	fake.Hang(false)
	fake.Gone()
	tu.Eventually(t, 10*time.Second, "the marker published", func() bool { return reg.Snapshot().Workers.Len() == 1 })
	if got := logged(); got != 2 {
		t.Fatalf("logged %d times over two pods' readiness, want 2:\n%s", got, logs.String())
	}
}

// unmappedSource runs a pods source over a fake API server whose models map
// only component "Mapped", logging at debug into logs; logged counts the
// unmapped pods logged so far.
func unmappedSource(t *testing.T) (fake *kubefake.Server, reg *fleet.Registry, logs *tu.SyncBuffer, logged func() int) {
	t.Helper()
	fake = kubefake.Start(t)
	logs = new(tu.SyncBuffer)
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	k := config.Kubernetes{Namespace: k8sNS, Models: []config.ComponentModel{{Component: "Mapped", Model: "m"}}}
	src := kube.NewPods(k, []string{dynNS}, kube.ClientOptions{Kubeconfig: fake.WriteKubeconfig(t)}, logger)
	src.Timing = fast
	reg = fleet.NewRegistry(nil, nil)
	runWatcher(t, src, reg)
	return fake, reg, logs, func() int { return strings.Count(logs.String(), "maps to no model") }
}
