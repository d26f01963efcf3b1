package kube_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	tu "github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubefake"
)

// recSink records what a source hands the reducer.
type recSink struct {
	mu  sync.Mutex
	ops []string
}

func (s *recSink) add(op string)          { s.mu.Lock(); s.ops = append(s.ops, op); s.mu.Unlock() }
func (s *recSink) Put(k string, _ []byte) { s.add("put " + k) }
func (s *recSink) Delete(k string)        { s.add("del " + k) }
func (s *recSink) ResyncBegin()           { s.add("begin") }
func (s *recSink) ResyncEnd()             { s.add("end") }
func (s *recSink) Flush()                 { s.add("flush") }
func (s *recSink) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.ops
	s.ops = nil
	return o
}
func (s *recSink) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ops)
}

func requestsMatching(fake *kubefake.Server, sub string) []url.Values {
	var out []url.Values
	for _, r := range fake.Requests() {
		_, uri, _ := strings.Cut(r, " ")
		path, q, _ := strings.Cut(uri, "?")
		if strings.HasSuffix(path, sub) {
			v, _ := url.ParseQuery(q)
			out = append(out, v)
		}
	}
	return out
}

// TestMetadataRequests: DWMs listed and watched with no label selector in
// pages of 32; slices with the discovery selector in pages of 500; both
// watches ask the server to end after 290 s, from the list's
// resourceVersion, with bookmarks.
func TestMetadataRequests(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	for i := range 40 {
		fake.Apply(kubefake.DWMs, workerDWM("w-"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	fake.Apply(kubefake.EndpointSlices, readySlice("s"))
	h := startMetadata(t, fake, kube.Timing{Seed: 5 * time.Second, WatchTimeout: kube.WatchTimeout, IdleDeadline: time.Hour})
	tu.Eventually(t, 10*time.Second, "connected", func() bool { return testutil.ToFloat64(h.metrics.Connected) == 1 })
	var dl, dw, sl, sw int
	for _, q := range requestsMatching(fake, "/dynamoworkermetadatas") {
		if q.Has("labelSelector") {
			t.Errorf("DWM request with a label selector: %v", q)
		}
		if q.Get("watch") == "true" {
			dw++
			if q.Get("timeoutSeconds") != "290" || q.Get("resourceVersion") == "" || q.Get("allowWatchBookmarks") != "true" {
				t.Errorf("DWM watch %v", q)
			}
		} else {
			dl++
			if q.Get("limit") != "32" {
				t.Errorf("DWM list page %v", q)
			}
		}
	}
	for _, q := range requestsMatching(fake, "/endpointslices") {
		if q.Get("labelSelector") != "nvidia.com/dynamo-discovery-backend=kubernetes,nvidia.com/dynamo-discovery-enabled=true" {
			t.Errorf("slice request selector %q", q.Get("labelSelector"))
		}
		if q.Get("watch") == "true" {
			sw++
			if q.Get("timeoutSeconds") != "290" || q.Get("resourceVersion") == "" {
				t.Errorf("slice watch %v", q)
			}
		} else {
			sl++
			if q.Get("limit") != "500" {
				t.Errorf("slice list page %v", q)
			}
		}
	}
	if dl != 2 || dw != 1 || sl != 1 || sw != 1 {
		t.Fatalf("dwm lists %d watches %d, slice lists %d watches %d", dl, dw, sl, sw)
	}
}

// TestPodsWatchRequest: the pods watch opens from the list's
// resourceVersion and asks for 290 s.
func TestPodsWatchRequest(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, pod("worker-0", "D", "decode", "", true))
	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "m"}, kube.Timing{Seed: 5 * time.Second, WatchTimeout: kube.WatchTimeout, IdleDeadline: time.Hour})
	tu.Eventually(t, 10*time.Second, "connected", func() bool { return testutil.ToFloat64(h.metrics.Connected) == 1 })
	var watches int
	for _, q := range requestsMatching(fake, "/pods") {
		if q.Get("labelSelector") != kube.PodSelector([]string{dynNS}) {
			t.Errorf("selector %q", q.Get("labelSelector"))
		}
		if q.Get("watch") == "true" {
			watches++
			if q.Get("timeoutSeconds") != "290" || q.Get("resourceVersion") == "" {
				t.Errorf("watch %v", q)
			}
		} else if q.Has("resourceVersion") {
			t.Errorf("a list that resumes instead of reading afresh: %v", q)
		}
	}
	if watches != 1 {
		t.Fatalf("%d watches", watches)
	}
}

// TestMetadataPublishesOnlyWhenWatching: the metadata source publishes nothing until both watches
// are open.
func TestMetadataPublishesOnlyWhenWatching(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	loadFleetFixtures(t, fake)
	fake.HoldWatchOpen(true)
	h := startMetadata(t, fake, kube.Timing{Seed: time.Minute, WatchTimeout: time.Hour, IdleDeadline: time.Hour})
	tu.Eventually(t, 10*time.Second, "a watch requested", func() bool { return len(requestsMatching(fake, "/dynamoworkermetadatas")) >= 2 })
	time.Sleep(300 * time.Millisecond)
	if n := h.reg.Snapshot().Workers.Len(); n != 0 {
		t.Fatalf("%d workers published with the watches not open", n)
	}
	fake.HoldWatchOpen(false)
	tu.Eventually(t, 10*time.Second, "four workers", func() bool { return h.reg.Snapshot().Workers.Len() == 4 })
}

// TestPodsComponentCaseAndRoles: a worker pod whose nvidia.com/dynamo-component
// differs from a models entry only by case, or has no such label, is held,
// not published; worker + an unknown sub-type is aggregated; epp and
// default pods are skipped.
func TestPodsComponentCaseAndRoles(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, pod("case-0", "vllmdecodeworker", "decode", "", true))
	fake.Apply(kubefake.Pods, pod("nolabel-0", "", "decode", "", true, func(o kubefake.Object) {
		delete(o["metadata"].(kubefake.Object)["labels"].(kubefake.Object), kube.LabelComponent)
	}))
	fake.Apply(kubefake.Pods, pod("agg-0", "VllmDecodeWorker", "worker", "encode", true))
	fake.Apply(kubefake.Pods, pod("epp-0", "VllmDecodeWorker", "epp", "", true))
	fake.Apply(kubefake.Pods, pod("default-0", "VllmDecodeWorker", "default", "", true))
	fake.Apply(kubefake.Pods, pod("noready-0", "VllmDecodeWorker", "decode", "", true, func(o kubefake.Object) {
		o["status"].(kubefake.Object)["conditions"] = []any{}
	}))
	fake.Apply(kubefake.Pods, pod("worker-0", "VllmDecodeWorker", "decode", "", true))
	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Models: []config.ComponentModel{{Component: "VllmDecodeWorker", Model: "solar"}}}, fast)
	waitView(t, h, want(line("worker-0", "decode", "solar", "VllmDecodeWorker"), line("agg-0", "aggregated", "solar", "VllmDecodeWorker")))
	if p := h.reg.Snapshot().Problems; len(p) != 0 {
		t.Fatalf("problems %+v", p)
	}
}

// TestPodsCollisionCounted: two pod names of one hashed id are both rejected and
// counted kind="duplicate".
func TestPodsCollisionCounted(t *testing.T) {
	t.Parallel()
	const a, b = "worker-34095562", "worker-126348249"
	fake := kubefake.Start(t)
	fake.Apply(kubefake.Pods, pod(a, "D", "decode", "", true))
	fake.Apply(kubefake.Pods, pod(b, "D", "decode", "", true))
	h := startPods(t, fake, config.Kubernetes{Namespace: k8sNS, Model: "m"}, fast)
	tu.Eventually(t, 10*time.Second, "the duplicate", func() bool { return len(h.reg.Snapshot().Problems) == 1 })
	if n := testutil.ToFloat64(h.metrics.Events.WithLabelValues(fleet.ProblemDuplicate)); n != 1 {
		t.Fatalf("duplicate counted %v", n)
	}
	if h.reg.Snapshot().Workers.Len() != 0 {
		t.Fatal("a claimant published")
	}
}

// TestMetadataDiffs: reducer diffs. A modified resource re-sends only the
// records that changed; a slice event touches only its own pods; a
// re-list puts every record again inside a resync.
func TestMetadataDiffs(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.DWMs, workerDWM("worker-a"))
	fake.Apply(kubefake.DWMs, workerDWM("worker-b"))
	fake.Apply(kubefake.EndpointSlices, readySlice("s1", "worker-a"))
	fake.Apply(kubefake.EndpointSlices, readySlice("s2", "worker-b"))
	src := kube.NewMetadata(config.Kubernetes{Namespace: "dynamo"}, []string{fixtureNS}, kube.ClientOptions{Kubeconfig: fake.WriteKubeconfig(t)}, nil)
	src.Timing = fast
	sink := &recSink{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()
	t.Cleanup(func() { cancel(); <-done })
	defer func() {
		// A 410 ends the pass; the next pass re-lists and puts every
		// record again inside a resync.
		fake.Gone()
		if err := <-done; err == nil || !strings.Contains(err.Error(), "410") {
			t.Errorf("pass ended by %v", err)
		}
		sink.take()
		go func() { done <- src.Run(ctx, sink) }()
		tu.Eventually(t, 10*time.Second, "the re-read", func() bool { return slices.Contains(sink.snapshot(), "end") })
		ops := sink.take()
		if len(ops) != 4 || ops[0] != "begin" || !strings.HasPrefix(ops[1], "put ") || !strings.HasPrefix(ops[2], "put ") || ops[3] != "end" {
			t.Errorf("re-list: %v, want worker-a's two records put again in a resync", ops)
		}
	}()
	tu.Eventually(t, 10*time.Second, "the initial read", func() bool { return slices.Contains(sink.snapshot(), "end") })
	first := sink.take()
	puts := 0
	for _, o := range first {
		if strings.HasPrefix(o, "put ") {
			puts++
		}
	}
	if puts != 4 {
		t.Fatalf("initial read %v", first)
	}
	// Modify only worker-a's card.
	d := workerDWM("worker-a")
	for _, c := range d["spec"].(kubefake.Object)["data"].(kubefake.Object)["model_cards"].(kubefake.Object) {
		c.(kubefake.Object)["card_json"].(kubefake.Object)["display_name"] = "m2"
	}
	fake.Apply(kubefake.DWMs, d)
	tu.Eventually(t, 5*time.Second, "a flush", func() bool { return slices.Contains(sink.snapshot(), "flush") })
	ops := sink.take()
	if len(ops) != 2 || !strings.HasPrefix(ops[0], "put v1/mdc/") {
		t.Fatalf("after a card change: %v, want one put of the card", ops)
	}
	// Slice s2 drops worker-b: only its two keys go.
	fake.Apply(kubefake.EndpointSlices, readySlice("s2"))
	tu.Eventually(t, 5*time.Second, "a flush", func() bool { return slices.Contains(sink.snapshot(), "flush") })
	ops = sink.take()
	if len(ops) != 3 || !strings.HasPrefix(ops[0], "del ") || !strings.HasPrefix(ops[1], "del ") {
		t.Fatalf("after s2 emptied: %v", ops)
	}
	for _, o := range ops[:2] {
		if !strings.Contains(o, fmt.Sprintf("/%x", kube.HashPodName("worker-b"))) {
			t.Fatalf("deleted %s, not worker-b's", o)
		}
	}
}

// TestMetadataMalformedCountedOnce: a resource read malformed is counted once, however many
// times it is written malformed again, and its last valid records stay.
func TestMetadataMalformedCountedOnce(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.DWMs, workerDWM("worker-a"))
	fake.Apply(kubefake.EndpointSlices, readySlice("s1", "worker-a"))
	h := startMetadata(t, fake, fast)
	tu.Eventually(t, 10*time.Second, "one worker", func() bool { return h.reg.Snapshot().Workers.Len() == 1 })
	for i, spec := range []any{"x", kubefake.Object{"data": 7}, kubefake.Object{"data": "y"}, nil} {
		d := workerDWM("worker-a")
		d["metadata"].(kubefake.Object)["labels"] = kubefake.Object{"try": string(rune('0' + i))}
		d["spec"] = spec
		fake.Apply(kubefake.DWMs, d)
	}
	// A second worker after the rewrites: once it is published, the
	// watch has read every rewrite before it.
	fake.Apply(kubefake.DWMs, workerDWM("worker-b"))
	fake.Apply(kubefake.EndpointSlices, readySlice("s2", "worker-b"))
	tu.Eventually(t, 5*time.Second, "the marker worker", func() bool { return h.reg.Snapshot().Workers.Len() == 2 })
	if n := testutil.ToFloat64(h.metrics.Events.WithLabelValues("malformed")); n != 1 {
		t.Errorf("malformed counted %v times for one resource", n)
	}
	if h.reg.Snapshot().Workers.Len() != 2 { // worker-a's last valid records, and the marker
		t.Errorf("the last valid records were not kept")
	}
}

// TestMetadataTransportHidden: the endpoint transport (pod IP and port) is never in the
// admin view.
func TestMetadataTransportHidden(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.DWMs, workerDWM("worker-a"))
	fake.Apply(kubefake.EndpointSlices, readySlice("s1", "worker-a"))
	h := startMetadata(t, fake, fast)
	tu.Eventually(t, 10*time.Second, "one worker", func() bool { return h.reg.Snapshot().Workers.Len() == 1 })
	v := fleetView(t, h.reg.Snapshot())
	if strings.Contains(v, "10.0.0.1") || strings.Contains(v, "9345") {
		t.Fatalf("transport in the view: %s", v)
	}
}

// TestExecNeverInteractive: exec plugins run with interactiveMode Never.
func TestExecNeverInteractive(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := t.TempDir()
	p := filepath.Join(dir, "kc")
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.9:6443"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true, interactiveMode: Always}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := kube.RESTConfig(kube.ClientOptions{Kubeconfig: p})
	if err != nil {
		t.Fatal(err)
	}
	if rc.ExecProvider == nil || rc.ExecProvider.InteractiveMode != clientcmdapi.NeverExecInteractiveMode {
		t.Fatalf("exec provider %+v", rc.ExecProvider)
	}
}

// TestMetadataSeedTimeout: a metadata pass whose watch cannot open within the
// seed timeout ends by it, publishing nothing and not connected.
func TestMetadataSeedTimeout(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	loadFleetFixtures(t, fake)
	fake.HoldWatchOpen(true)
	h := startMetadata(t, fake, kube.Timing{Seed: 300 * time.Millisecond, WatchTimeout: time.Hour, IdleDeadline: time.Hour})
	tu.Eventually(t, 5*time.Second, "a seed-timeout pass end", func() bool {
		for _, err := range h.passErrors() {
			if strings.Contains(err.Error(), "seed timeout") {
				return true
			}
		}
		return false
	})
	if n := h.reg.Snapshot().Workers.Len(); n != 0 || testutil.ToFloat64(h.metrics.Connected) != 0 {
		t.Fatalf("%d workers, connected %v", n, testutil.ToFloat64(h.metrics.Connected))
	}
	fake.HoldWatchOpen(false)
	tu.Eventually(t, 10*time.Second, "four workers", func() bool { return h.reg.Snapshot().Workers.Len() == 4 })
}

// TestMetadataNormalEndKeepsConnected: normal (server-timeout) ends of the metadata
// source's watches re-list both with connected kept at 1.
func TestMetadataNormalEndKeepsConnected(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	loadFleetFixtures(t, fake)
	h := startMetadata(t, fake, kube.Timing{Seed: 5 * time.Second, WatchTimeout: time.Second, IdleDeadline: time.Hour})
	tu.Eventually(t, 10*time.Second, "connected", func() bool { return testutil.ToFloat64(h.metrics.Connected) == 1 })
	drops := 0
	deadline := time.Now().Add(3500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if testutil.ToFloat64(h.metrics.Connected) != 1 || h.reg.Snapshot().Workers.Len() != 4 {
			drops++
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n := fake.Watches(); n < 6 {
		t.Fatalf("%d watches in 3.5 s", n)
	}
	if drops != 0 {
		t.Fatalf("connected or the view dropped %d times", drops)
	}
}
