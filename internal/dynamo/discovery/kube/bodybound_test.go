package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
)

// boundSink counts what a source hands the reducer.
type boundSink struct{ puts atomic.Int64 }

func (s *boundSink) Put(string, []byte) { s.puts.Add(1) }
func (s *boundSink) Delete(string)      {}
func (s *boundSink) ResyncBegin()       {}
func (s *boundSink) ResyncEnd()         {}
func (s *boundSink) Flush()             {}

// hugePod streams, without holding it, a worker pod whose one
// annotation is n bytes long.
func hugePod(w io.Writer, n int) {
	fmt.Fprintf(w, `{"metadata":{"name":"worker-0","namespace":%q,"resourceVersion":"2","labels":{%q:"kubernetes",%q:"true",%q:%q,%q:"D",%q:"decode"},"annotations":{"x":"`,
		k8sNS, kube.LabelBackend, kube.LabelEnabled, kube.LabelDynamoNamespace, dynNS, kube.LabelComponent, kube.LabelComponentType)
	chunk := bytes.Repeat([]byte("A"), 64<<10)
	for sent := 0; sent < n; sent += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
	_, _ = io.WriteString(w, `"}},"spec":{"containers":[{"name":"main","image":"vllm"}]},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}`)
}

// boundAPIServer is an API server that answers the pods list with list()
// and every watch with watch().
func boundAPIServer(t *testing.T, list, watch func(w http.ResponseWriter, r *http.Request)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			watch(w, r)
			return
		}
		list(w, r)
	}))
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {server: %q}
users:
- name: fake
  user: {token: fake-token}
contexts:
- name: fake
  context: {cluster: fake, user: fake}
current-context: fake
`, srv.URL)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// boundRunPass runs one pass of a pods source and returns the bytes the
// process allocated meanwhile, and the pass's error.
func boundRunPass(t *testing.T, kubeconfig string) (uint64, *boundSink, error) {
	t.Helper()
	src := kube.NewPods(config.Kubernetes{Namespace: k8sNS, Model: "m"}, []string{dynNS}, kube.ClientOptions{Kubeconfig: kubeconfig}, nil)
	src.Timing = kube.Timing{Seed: 20 * time.Second, WatchTimeout: time.Hour, IdleDeadline: 20 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	sink := &boundSink{}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := src.Run(ctx, sink)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, sink, err
}

// client-go reads a list page whole and frames a watch event whole before
// decoding it; the source caps an answer of the API server (a list page at
// what a source may hold and one resource more, a watch event at 64 MiB),
// so that one of any size is not held in memory: the read fails at the
// cap, and the pass with it. The tests make the caps small (a few MiB) and
// send a pod past them; the allocation is logged.
const (
	testListBound  = 8 << 20
	testEventBound = 4 << 20
	hugePodBytes   = 16 << 20
)

// TestPodsListBodyBounded: an API server (or whatever answers at its
// address) that answers the pods list with a page holding a pod past the
// list cap ends the pass with an error, having read no more than the cap.
func TestPodsListBodyBounded(t *testing.T) { // not parallel: sets the bounds
	defer kube.SetAnswerBounds(testListBound, testEventBound)()
	kc := boundAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"2"},"items":[`)
		hugePod(w, hugePodBytes)
		_, _ = io.WriteString(w, `]}`)
	}, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	alloc, sink, err := boundRunPass(t, kc)
	t.Logf("pass error: %v; puts %d; allocated %d MiB", err, sink.puts.Load(), alloc>>20)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("pass error %v, want the answer refused for its size", err)
	}
	if sink.puts.Load() != 0 {
		t.Errorf("the pod went to the reducer")
	}
}

// TestPodsWatchEventBounded: a pods watch event past the event cap ends the
// pass having read no more than the cap, as a DWM watch event does.
func TestPodsWatchEventBounded(t *testing.T) { // not parallel: sets the bounds
	defer kube.SetAnswerBounds(testListBound, testEventBound)()
	kc := boundAPIServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
	}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, `{"type":"ADDED","object":`)
		hugePod(w, hugePodBytes)
		_, _ = io.WriteString(w, "}\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	alloc, sink, err := boundRunPass(t, kc)
	t.Logf("pass error: %v; puts %d; allocated %d MiB", err, sink.puts.Load(), alloc>>20)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("pass error %v, want the event refused for its size", err)
	}
	if sink.puts.Load() != 0 {
		t.Errorf("the pod went to the reducer")
	}
}
