package kube_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/telemetry"
	tu "github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubefake"
)

const fixtureNS = "dynamo-qwen3"

func readFixture(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tu.RepoRoot(t), "testdata/kube/fleet", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// fleetView is the operator-facing view without timestamps.
func fleetView(t *testing.T, snap *fleet.Snapshot) string {
	t.Helper()
	w, p, pr := admin.Views(snap)
	for i := range w {
		w[i].FirstSeen, w[i].LastUpdated = "", ""
	}
	b, err := json.MarshalIndent(map[string]any{"workers": w, "publishers": p, "problems": pr}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func loadFleetFixtures(t *testing.T, fake *kubefake.Server) (dwms, slices []kubefake.Object) {
	readFixture(t, "dynamoworkermetadatas.json", &dwms)
	readFixture(t, "endpointslices.json", &slices)
	for _, d := range dwms {
		fake.Apply(kubefake.DWMs, d)
	}
	for _, s := range slices {
		fake.Apply(kubefake.EndpointSlices, s)
	}
	return dwms, slices
}

func startMetadata(t *testing.T, fake *kubefake.Server, timing kube.Timing) *harness {
	t.Helper()
	h := &harness{fake: fake, metrics: telemetry.NewDiscoveryMetrics(prometheus.NewRegistry())}
	h.reg = fleet.NewRegistry(nil, discovery.ProblemCounter(h.metrics))
	src := kube.NewMetadata(config.Kubernetes{Namespace: "dynamo"}, []string{fixtureNS}, kube.ClientOptions{Kubeconfig: fake.WriteKubeconfig(t)}, nil)
	src.Timing = timing
	h.watcher = &discovery.Watcher{Source: src, Registry: h.reg, Metrics: h.metrics,
		Backoff:   discovery.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		OnPassEnd: func(err error) { h.mu.Lock(); h.passErr = append(h.passErr, err); h.mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.watcher.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// TestMetadataParityWithEtcd: four realistic pods' DynamoWorkerMetadata
// resources and EndpointSlice, read through the fake API server, give the
// fleet view that the equivalent etcd records give through the same
// reducer.
func TestMetadataParityWithEtcd(t *testing.T) {
	t.Parallel()
	var etcd map[string]json.RawMessage
	readFixture(t, "etcd.json", &etcd)
	r := fleet.NewReducer()
	r.ResyncBegin()
	for k, v := range etcd {
		r.Put(k, v, time.Now())
	}
	r.ResyncEnd()
	want := fleetView(t, r.Build(time.Now()))
	if !strings.Contains(want, "vllm") && strings.Count(want, `"instance_id"`) != 4 {
		t.Fatalf("etcd fixture view has no workers:\n%s", want)
	}

	fake := kubefake.Start(t)
	loadFleetFixtures(t, fake)
	h := startMetadata(t, fake, fast)
	tu.Eventually(t, 10*time.Second, "the metadata source's view to equal etcd's", func() bool { return fleetView(t, h.reg.Snapshot()) == want })
	snap := h.reg.Snapshot()
	if snap.Workers.Len() != 4 || snap.Publishers.Len() != 5 || len(snap.Problems) != 0 {
		t.Fatalf("view: %d workers, %d publishers, problems %+v", snap.Workers.Len(), snap.Publishers.Len(), snap.Problems)
	}
	for w := range snap.Workers.All() {
		if w.Card == nil || w.Capacity.TotalKVBlocks == nil {
			t.Errorf("worker %x lacks card or capacity", w.ID.InstanceID)
		}
	}
}

func setReady(slices []kubefake.Object, pod string, ready bool) kubefake.Object {
	s := slices[0]
	for _, ep := range s["endpoints"].([]any) {
		ep := ep.(kubefake.Object)
		if ep["targetRef"].(kubefake.Object)["name"] == pod {
			ep["conditions"].(kubefake.Object)["ready"] = ready
		}
	}
	return s
}

func workerIDs(snap *fleet.Snapshot) map[uint64]bool {
	out := map[uint64]bool{}
	for w := range snap.Workers.All() {
		out[w.ID.InstanceID] = true
	}
	return out
}

func hasPublisher(snap *fleet.Snapshot, id uint64) bool {
	for p := range snap.Publishers.All() {
		if p.PublisherID == id {
			return true
		}
	}
	return false
}

func problemKinds(snap *fleet.Snapshot) map[string]int {
	out := map[string]int{}
	for _, p := range snap.Problems {
		out[p.Kind]++
	}
	return out
}

const (
	prefillPod = "vllm-disagg-vllmprefillworker-7c9d6f5b8-k2x4p"
	decodeA    = "vllm-disagg-vllmdecodeworker-6b8f7d9c5-m7q2z"
	decodeB    = "vllm-disagg-vllmdecodeworker-6b8f7d9c5-t9w3r"
	aggPod     = "sglang-agg-worker-0"
	sharedPub  = 0x6000
)

// TestMetadataFollows: readiness, refcounted shared channels, modified,
// deleted, container-mode, mismatched and malformed resources.
func TestMetadataFollows(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	dwms, slices := loadFleetFixtures(t, fake)
	h := startMetadata(t, fake, fast)
	tu.Eventually(t, 10*time.Second, "four workers", func() bool { return h.reg.Snapshot().Workers.Len() == 4 })

	// One decode pod unready: its worker goes, the shared channel stays.
	fake.Apply(kubefake.EndpointSlices, setReady(slices, decodeA, false))
	tu.Eventually(t, 5*time.Second, "decode A gone", func() bool {
		s := h.reg.Snapshot()
		return s.Workers.Len() == 3 && !workerIDs(s)[kube.HashPodName(decodeA)] && hasPublisher(s, sharedPub)
	})
	// Both unready: the shared channel goes with its last supplier.
	fake.Apply(kubefake.EndpointSlices, setReady(slices, decodeB, false))
	tu.Eventually(t, 5*time.Second, "shared channel gone", func() bool {
		s := h.reg.Snapshot()
		return s.Workers.Len() == 2 && !hasPublisher(s, sharedPub)
	})
	setReady(slices, decodeA, true)
	fake.Apply(kubefake.EndpointSlices, setReady(slices, decodeB, true))
	tu.Eventually(t, 5*time.Second, "four workers again", func() bool {
		s := h.reg.Snapshot()
		return s.Workers.Len() == 4 && hasPublisher(s, sharedPub)
	})

	byName := map[string]kubefake.Object{}
	for _, d := range dwms {
		byName[d["metadata"].(kubefake.Object)["name"].(string)] = d
	}
	// Modified: a card's capacity changes.
	agg := byName[aggPod]
	cards := agg["spec"].(kubefake.Object)["data"].(kubefake.Object)["model_cards"].(kubefake.Object)
	for _, c := range cards {
		c.(kubefake.Object)["card_json"].(kubefake.Object)["runtime_config"].(kubefake.Object)["total_kv_blocks"] = 777
	}
	fake.Apply(kubefake.DWMs, agg)
	tu.Eventually(t, 5*time.Second, "updated capacity", func() bool {
		for w := range h.reg.Snapshot().Workers.All() {
			if w.ID.InstanceID == kube.HashPodName(aggPod) && w.Capacity.TotalKVBlocks != nil && *w.Capacity.TotalKVBlocks == 777 {
				return true
			}
		}
		return false
	})

	// Malformed: spec.data not an object; the last valid records stay.
	bad := map[string]any{}
	b, _ := json.Marshal(byName[decodeA])
	_ = json.Unmarshal(b, &bad)
	bad["spec"] = map[string]any{"data": "not an object"}
	fake.Apply(kubefake.DWMs, bad)
	tu.Eventually(t, 5*time.Second, "malformed counted, worker kept", func() bool {
		s := h.reg.Snapshot()
		return problemKinds(s)["malformed"] == 1 && workerIDs(s)[kube.HashPodName(decodeA)]
	})
	if n := testutil.ToFloat64(h.metrics.Events.WithLabelValues("malformed")); n != 1 {
		t.Fatalf("malformed counted %v times", n)
	}
	fake.Apply(kubefake.DWMs, byName[decodeA])
	tu.Eventually(t, 5*time.Second, "malformed cleared", func() bool { return problemKinds(h.reg.Snapshot())["malformed"] == 0 })

	// Mismatch: an endpoint whose instance id is not the pod's hash.
	mis := map[string]any{}
	b, _ = json.Marshal(byName[prefillPod])
	_ = json.Unmarshal(b, &mis)
	for _, e := range mis["spec"].(map[string]any)["data"].(map[string]any)["endpoints"].(map[string]any) {
		e.(map[string]any)["instance_id"] = 42
	}
	fake.Apply(kubefake.DWMs, mis)
	tu.Eventually(t, 5*time.Second, "mismatch refuses the resource", func() bool {
		s := h.reg.Snapshot()
		return problemKinds(s)["mismatch"] == 1 && !workerIDs(s)[kube.HashPodName(prefillPod)]
	})

	// Container mode: a resource named <pod>-<container> owned by the pod.
	cm := map[string]any{}
	b, _ = json.Marshal(byName[aggPod])
	_ = json.Unmarshal(b, &cm)
	cm["metadata"].(map[string]any)["name"] = aggPod + "-sidecar"
	delete(cm["metadata"].(map[string]any), "uid")
	fake.Apply(kubefake.DWMs, cm)
	tu.Eventually(t, 5*time.Second, "container mode refused", func() bool { return problemKinds(h.reg.Snapshot())["refused"] == 1 })

	// Deleted.
	fake.Delete(kubefake.DWMs, "dynamo", aggPod)
	tu.Eventually(t, 5*time.Second, "deleted resource's worker gone", func() bool {
		return !workerIDs(h.reg.Snapshot())[kube.HashPodName(aggPod)]
	})

	// A 410 on either stream re-lists both; the view is the same.
	before := fleetView(t, h.reg.Snapshot())
	fake.Gone()
	tu.Eventually(t, 5*time.Second, "a 410 pass end", func() bool {
		for _, err := range h.passErrors() {
			if strings.Contains(err.Error(), "410") {
				return true
			}
		}
		return false
	})
	tu.Eventually(t, 5*time.Second, "the same view after the relist", func() bool {
		return fleetView(t, h.reg.Snapshot()) == before && testutil.ToFloat64(h.metrics.Connected) == 1
	})
}

func TestMetadataIdleDeadlinePerStream(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	loadFleetFixtures(t, fake)
	h := startMetadata(t, fake, kube.Timing{Seed: 5 * time.Second, WatchTimeout: time.Hour, IdleDeadline: 300 * time.Millisecond})
	tu.Eventually(t, 10*time.Second, "four workers", func() bool { return h.reg.Snapshot().Workers.Len() == 4 })
	fake.Hang(true)
	tu.Eventually(t, 5*time.Second, "an idle pass end", func() bool {
		for _, err := range h.passErrors() {
			if strings.Contains(err.Error(), "nothing arrived") {
				return true
			}
		}
		return false
	})
}

// setEndpoint sets a pod's endpoint in the fixture slice: its uid and
// readiness.
func setEndpoint(slices []kubefake.Object, pod, uid string, ready bool) kubefake.Object {
	s := slices[0]
	for _, ep := range s["endpoints"].([]any) {
		ep := ep.(kubefake.Object)
		if ref := ep["targetRef"].(kubefake.Object); ref["name"] == pod {
			ref["uid"] = uid
			ep["conditions"].(kubefake.Object)["ready"] = ready
		}
	}
	return s
}

// podUIDProblem is the mismatch reported for pod's resource, if any.
func podUIDProblem(snap *fleet.Snapshot, pod string) *fleet.Problem {
	for i, p := range snap.Problems {
		if p.Kind == "mismatch" && len(p.Keys) == 1 && p.Keys[0] == "continuum/refusals/dynamoworkermetadata-pod-uid/"+pod {
			return &snap.Problems[i]
		}
	}
	return nil
}

// TestMetadataPodRecreated: pods recreated under the same name, read
// through the fake API server. The slice naming the new pod's uid before
// the stale resource goes leaves the worker out under a mismatch; the new
// resource brings it back. A resource rewritten by the new pod while the
// slice still names the old one is held back the same way until the slice
// catches up.
func TestMetadataPodRecreated(t *testing.T) {
	fake := kubefake.Start(t)
	dwms, slices := loadFleetFixtures(t, fake)
	h := startMetadata(t, fake, fast)
	tu.Eventually(t, 10*time.Second, "four workers", func() bool { return h.reg.Snapshot().Workers.Len() == 4 })
	byName := map[string]kubefake.Object{}
	for _, d := range dwms {
		byName[d["metadata"].(kubefake.Object)["name"].(string)] = d
	}
	// recreated is pod's resource as the pod of uid podUID writes it
	// (resource uid res, or the server keeps the current one when "").
	recreated := func(pod, podUID, res string) kubefake.Object {
		d := map[string]any{}
		b, _ := json.Marshal(byName[pod])
		_ = json.Unmarshal(b, &d)
		m := d["metadata"].(map[string]any)
		m["ownerReferences"].([]any)[0].(map[string]any)["uid"] = podUID
		delete(m, "uid")
		if res != "" {
			m["uid"] = res
		}
		return d
	}
	aggID, decodeID := kube.HashPodName(aggPod), kube.HashPodName(decodeA)
	mismatches := func() float64 { return testutil.ToFloat64(h.metrics.Events.WithLabelValues("mismatch")) }

	// The aggregated pod is recreated; its slice endpoint follows first.
	fake.Apply(kubefake.EndpointSlices, setEndpoint(slices, aggPod, "5a1e-3-new", false))
	tu.Eventually(t, 5*time.Second, "the old pod's worker gone", func() bool {
		s := h.reg.Snapshot()
		return s.Workers.Len() == 3 && !workerIDs(s)[aggID] && len(s.Problems) == 0
	})
	fake.Apply(kubefake.EndpointSlices, setEndpoint(slices, aggPod, "5a1e-3-new", true))
	tu.Eventually(t, 5*time.Second, "the stale resource held back under a mismatch", func() bool {
		return podUIDProblem(h.reg.Snapshot(), aggPod) != nil
	})
	s := h.reg.Snapshot()
	p := podUIDProblem(s, aggPod)
	if workerIDs(s)[aggID] || len(s.Problems) != 1 || p.Namespace != fixtureNS ||
		!strings.Contains(p.Reason, "pod uid in its owner reference differs") || strings.Contains(p.Reason, "5a1e-3") {
		t.Fatalf("workers %v, problems %+v", workerIDs(s), s.Problems)
	}
	if n := mismatches(); n != 1 {
		t.Fatalf("mismatch counted %v times", n)
	}
	// The garbage collector deletes the stale resource; the new pod writes
	// its own.
	fake.Delete(kubefake.DWMs, "dynamo", aggPod)
	tu.Eventually(t, 5*time.Second, "the mismatch gone with the stale resource", func() bool {
		s := h.reg.Snapshot()
		return len(s.Problems) == 0 && s.Workers.Len() == 3
	})
	fake.Apply(kubefake.DWMs, recreated(aggPod, "5a1e-3-new", "0b6f1c2e-7d4a-4e1b-9c3f-000000000013"))
	tu.Eventually(t, 5*time.Second, "the new pod's worker", func() bool {
		s := h.reg.Snapshot()
		return s.Workers.Len() == 4 && workerIDs(s)[aggID] && len(s.Problems) == 0
	})

	// A decode pod is recreated; its new incarnation rewrites the resource
	// in place before the slice names it.
	fake.Apply(kubefake.DWMs, recreated(decodeA, "5a1e-1-new", ""))
	tu.Eventually(t, 5*time.Second, "the new records held back while the slice names the old pod", func() bool {
		s := h.reg.Snapshot()
		p := podUIDProblem(s, decodeA)
		return p != nil && !workerIDs(s)[decodeID] && hasPublisher(s, sharedPub) &&
			strings.Contains(p.Reason, "pod uid in its owner reference differs") && !strings.Contains(p.Reason, "5a1e-1")
	})
	if n := mismatches(); n != 2 {
		t.Fatalf("mismatch counted %v times", n)
	}
	fake.Apply(kubefake.EndpointSlices, setEndpoint(slices, decodeA, "5a1e-1-new", true))
	tu.Eventually(t, 5*time.Second, "four workers again", func() bool {
		s := h.reg.Snapshot()
		return s.Workers.Len() == 4 && workerIDs(s)[decodeID] && len(s.Problems) == 0
	})
}

// workerDWM is a pod-mode resource of pod name with one generate endpoint
// and one model card in fixtureNS, both carrying the pod's hashed id.
func workerDWM(name string) kubefake.Object {
	id := kube.HashPodName(name)
	rel := fmt.Sprintf("%s/VllmWorker/generate/%x", fixtureNS, id)
	return kubefake.Object{
		"metadata": kubefake.Object{"name": name, "namespace": "dynamo", "uid": "res-" + name,
			"ownerReferences": []any{kubefake.Object{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": "pod-" + name}}},
		"spec": kubefake.Object{"data": kubefake.Object{
			"endpoints": kubefake.Object{rel: kubefake.Object{"type": "Endpoint", "namespace": fixtureNS, "component": "VllmWorker",
				"endpoint": "generate", "instance_id": id, "transport": kubefake.Object{"tcp": "10.0.0.1:9345/" + rel}}},
			"model_cards": kubefake.Object{rel: kubefake.Object{"type": "Model", "namespace": fixtureNS, "component": "VllmWorker",
				"endpoint": "generate", "instance_id": id, "card_json": kubefake.Object{"display_name": "m", "worker_type": "Decode"}}},
		}},
	}
}

// readySlice is an EndpointSlice of the discovery labels listing pods
// ready, each with the uid workerDWM gives its owner reference.
func readySlice(name string, pods ...string) kubefake.Object {
	var eps []any
	for _, p := range pods {
		eps = append(eps, kubefake.Object{"addresses": []any{"10.0.0.1"}, "conditions": kubefake.Object{"ready": true},
			"targetRef": kubefake.Object{"kind": "Pod", "name": p, "namespace": "dynamo", "uid": "pod-" + p}})
	}
	return kubefake.Object{"addressType": "IPv4",
		"metadata": kubefake.Object{"name": name, "namespace": "dynamo", "labels": kubefake.Object{
			kube.LabelBackend: "kubernetes", kube.LabelEnabled: "true"}},
		"endpoints": eps}
}

// Two pod names that hash to one instance id, each with its own resource
// and ready endpoint, supply the same instance and card keys: every
// claimant is rejected as a duplicate, as the etcd reducer rejects two keys
// of one identity, and deleting one resource brings the other back.
func TestMetadataHashCollision(t *testing.T) {
	t.Parallel()
	const a, b = "worker-34095562", "worker-126348249"
	if ha, hb := kube.HashPodName(a), kube.HashPodName(b); ha != hb {
		t.Fatalf("%s → %x, %s → %x", a, ha, b, hb)
	}
	fake := kubefake.Start(t)
	for _, p := range []string{a, b, "worker-0"} {
		fake.Apply(kubefake.DWMs, workerDWM(p))
	}
	fake.Apply(kubefake.EndpointSlices, readySlice("s", a, b, "worker-0"))
	h := startMetadata(t, fake, fast)
	tu.Eventually(t, 10*time.Second, "worker-0 alone, the pair rejected", func() bool {
		s := h.reg.Snapshot()
		ids := workerIDs(s)
		return len(ids) == 1 && ids[kube.HashPodName("worker-0")] && problemKinds(s)[fleet.ProblemDuplicate] == 2
	})
	snap := h.reg.Snapshot()
	if len(snap.Problems) != 2 {
		t.Fatalf("problems %+v, want the endpoint's and the card's duplicates", snap.Problems)
	}
	for _, p := range snap.Problems {
		if p.Namespace != fixtureNS || !strings.Contains(p.Reason, a) || !strings.Contains(p.Reason, b) {
			t.Errorf("problem %+v does not name both resources in %s", p, fixtureNS)
		}
	}
	if n := testutil.ToFloat64(h.metrics.Events.WithLabelValues(fleet.ProblemDuplicate)); n != 2 {
		t.Fatalf("duplicate counted %v times, want 2", n)
	}
	fake.Delete(kubefake.DWMs, "dynamo", b)
	tu.Eventually(t, 5*time.Second, "the remaining claimant back, no problems", func() bool {
		s := h.reg.Snapshot()
		ids := workerIDs(s)
		return len(ids) == 2 && ids[kube.HashPodName(a)] && len(s.Problems) == 0
	})
	for w := range h.reg.Snapshot().Workers.All() {
		if w.Card == nil {
			t.Errorf("worker %x lacks its card", w.ID.InstanceID)
		}
	}
}

// A DynamoWorkerMetadata watch that ends at the time it asked the server
// for, but by a cut connection or an undecodable event, is a failure, not
// the server's normal end. The EndpointSlice watch stays open meanwhile, so
// the pass ends by the resources' stream.
func TestMetadataBrokenEndAtTimeoutIsAFailure(t *testing.T) {
	t.Parallel()
	for name, end := range map[string]kubefake.WatchEnd{"cut": kubefake.EndCut, "garbage": kubefake.EndGarbage} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := kubefake.Start(t)
			fake.SetWatchEnd(kubefake.DWMs, end)
			fake.SetWatchEnd(kubefake.EndpointSlices, kubefake.EndNever)
			fake.Apply(kubefake.DWMs, workerDWM("worker-0"))
			fake.Apply(kubefake.EndpointSlices, readySlice("s", "worker-0"))
			h := startMetadata(t, fake, kube.Timing{Seed: 5 * time.Second, WatchTimeout: time.Second, IdleDeadline: time.Hour})
			id := kube.HashPodName("worker-0")
			tu.Eventually(t, 10*time.Second, "worker-0", func() bool { return workerIDs(h.reg.Snapshot())[id] })
			tu.Eventually(t, 10*time.Second, "two passes ended", func() bool { return len(h.passErrors()) >= 2 })
			for _, err := range h.passErrors() {
				if errors.Is(err, discovery.ErrWatchExpired) {
					t.Fatalf("a watch ended by %s read as the normal end: %v", name, err)
				}
			}
		})
	}
}

// TestMetadataCRDNotInstalled: a cluster without the DynamoWorkerMetadata
// CRD answers its paths with a bare 404 page; the pass's error says what
// is missing rather than quoting the page.
func TestMetadataCRDNotInstalled(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Unserve(kubefake.DWMs)
	h := startMetadata(t, fake, kube.Timing{Seed: 5 * time.Second, WatchTimeout: time.Minute, IdleDeadline: time.Hour})
	tu.Eventually(t, 10*time.Second, "a pass ended", func() bool { return len(h.passErrors()) >= 1 })
	if err := h.passErrors()[0]; !strings.Contains(err.Error(), "CRD installed") || !strings.Contains(err.Error(), "dynamoworkermetadatas.nvidia.com/v1alpha1") {
		t.Fatalf("pass error: %v", err)
	}
}

// A resource turned malformed keeps its last valid records, and keeps them
// across the re-list that follows every watch's end: the next pass reads
// the same malformed resource under the same uid, so the worker stays.
func TestMetadataMalformedKeptAcrossRelist(t *testing.T) {
	t.Parallel()
	fake := kubefake.Start(t)
	fake.Apply(kubefake.DWMs, workerDWM("worker-0"))
	fake.Apply(kubefake.EndpointSlices, readySlice("s", "worker-0", "worker-1"))
	h := startMetadata(t, fake, fast)
	id := kube.HashPodName("worker-0")
	tu.Eventually(t, 10*time.Second, "worker-0", func() bool { return workerIDs(h.reg.Snapshot())[id] })

	bad := workerDWM("worker-0")
	bad["spec"] = kubefake.Object{"data": "oops"}
	fake.Apply(kubefake.DWMs, bad)
	tu.Eventually(t, 5*time.Second, "malformed counted, worker kept", func() bool {
		s := h.reg.Snapshot()
		return problemKinds(s)["malformed"] == 1 && workerIDs(s)[id]
	})

	fake.ExpireWatches()
	tu.Eventually(t, 5*time.Second, "a normal watch end", func() bool {
		for _, err := range h.passErrors() {
			if errors.Is(err, discovery.ErrWatchExpired) || strings.Contains(err.Error(), "ended early") {
				return true
			}
		}
		return false
	})
	// A resource added after the re-list shows the new pass published.
	fake.Apply(kubefake.DWMs, workerDWM("worker-1"))
	tu.Eventually(t, 5*time.Second, "the next pass's view", func() bool { return workerIDs(h.reg.Snapshot())[kube.HashPodName("worker-1")] })
	s := h.reg.Snapshot()
	if !workerIDs(s)[id] || problemKinds(s)["malformed"] != 1 {
		t.Fatalf("after the re-list: workers %v, problems %+v", workerIDs(s), s.Problems)
	}
	if n := testutil.ToFloat64(h.metrics.Events.WithLabelValues("malformed")); n != 1 {
		t.Fatalf("malformed counted %v times, want once", n)
	}

	// Recreated under another uid, the malformed resource keeps nothing.
	bad["metadata"].(kubefake.Object)["uid"] = "res-worker-0-new"
	fake.Delete(kubefake.DWMs, "dynamo", "worker-0")
	fake.Apply(kubefake.DWMs, bad)
	fake.ExpireWatches()
	tu.Eventually(t, 5*time.Second, "worker-0 gone", func() bool {
		s := h.reg.Snapshot()
		return !workerIDs(s)[id] && workerIDs(s)[kube.HashPodName("worker-1")] && problemKinds(s)["malformed"] == 1
	})
}
