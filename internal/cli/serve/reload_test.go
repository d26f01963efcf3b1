package serve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/cli/serve"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/testutil"
)

// traffic sends requests (buffered and streamed, in turn) from a few
// clients until stopped, and keeps every failure.
type traffic struct {
	base, model string
	ok          atomic.Int64
	mu          sync.Mutex
	failures    []string
	stop        chan struct{}
	wg          sync.WaitGroup
}

func startTraffic(base, model string, clients int) *traffic {
	tr := &traffic{base: base, model: model, stop: make(chan struct{})}
	for c := range clients {
		tr.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-tr.stop:
					return
				default:
				}
				if err := tr.one((c+i)%2 == 1); err != nil {
					tr.mu.Lock()
					tr.failures = append(tr.failures, time.Now().Format("15:04:05.000")+" "+err.Error())
					tr.mu.Unlock()
				} else {
					tr.ok.Add(1)
				}
			}
		})
	}
	return tr
}

// one sends a request; a stream must end with [DONE].
func (tr *traffic) one(stream bool) error {
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":3,"messages":[{"role":"user","content":"Hello!"}]}`, tr.model, stream)
	resp, err := http.Post(tr.base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	if !stream {
		_, err := io.Copy(io.Discard, resp.Body)
		return err
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stream cut before [DONE]: %w", err)
	}
	return errors.New("stream ended without [DONE]")
}

// after waits for n more successful requests.
func (tr *traffic) after(t *testing.T, n int64, what string) {
	t.Helper()
	target := tr.ok.Load() + n
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%d requests after %s", n, what), func() bool { return tr.ok.Load() >= target })
}

func (tr *traffic) finish() []string {
	close(tr.stop)
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.failures
}

// adminGet reads an admin endpoint of the demo configuration.
func adminGet(t *testing.T, base, path string, v any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.Header.Set("Authorization", "Bearer "+fleetsim.DemoAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// TestServeReloadUnderLoad: serve over the simulator (an etcd fleet in two
// namespaces, each behind its own frontend) while clients send a steady
// stream of requests; the configuration file is rewritten for each reload
// tier in turn. Every change applies with no failed request, an invalid
// edit is refused while the old configuration keeps serving, a
// backoff-only change never empties the fleet view, and a removed
// namespace's frontend gets no more requests while the kept one's workers
// stay pinned throughout.
func TestServeReloadUnderLoad(t *testing.T) {
	t.Parallel()
	fl, err := fleetsim.StartDemo(fleetsim.Options{Namespaces: []string{"alpha", "beta"}, Prefill: 1, Decode: 1,
		Store: fleetsim.StoreEtcd, Speed: 20}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Stop()
	file := filepath.Join(t.TempDir(), "continuum.yaml")
	text := fl.Config
	write := func(s string) { testutil.ReplaceFile(t, file, s) }
	write(text)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := startServe(t, ctx, &serve.Options{ConfigFile: file})

	status := func() admin.ConfigStatus {
		var st admin.ConfigStatus
		adminGet(t, base, "/admin/config/status", &st)
		return st
	}
	workers := func() map[string]int {
		var w admin.WorkersResponse
		adminGet(t, base, "/admin/dynamo/workers", &w)
		out := map[string]int{}
		for _, wk := range w.Workers {
			out[wk.Namespace]++
		}
		return out
	}
	testutil.Eventually(t, 20*time.Second, "both namespaces discovered", func() bool {
		w := workers()
		return w["alpha"] > 0 && w["beta"] > 0
	})
	// firstSeen maps alpha's workers to their first_seen, which the
	// reloads that keep the view (backoff, pruning) must keep.
	firstSeen := func() map[string]string {
		var w admin.WorkersResponse
		adminGet(t, base, "/admin/dynamo/workers", &w)
		out := map[string]string{}
		for _, wk := range w.Workers {
			if wk.Namespace == "alpha" {
				out[wk.InstanceID] = wk.FirstSeen
			}
		}
		return out
	}
	tr := startTraffic(base, fl.Sim.Model(), 4)
	tr.after(t, 20, "start")
	alphaSeen := firstSeen()

	attempts := 0
	// edit rewrites the file and waits for its reload.
	edit := func(name, from, to, wantResult, wantChange string) *admin.Reload {
		t.Helper()
		next := strings.Replace(text, from, to, 1)
		if next == text {
			t.Fatalf("%s: %q is not in the configuration:\n%s", name, from, text)
		}
		if wantResult == admin.ReloadApplied {
			text = next
		}
		write(next)
		attempts++
		var r *admin.Reload
		testutil.Eventually(t, 20*time.Second, name+" reloaded", func() bool {
			r = status().LastReload
			return r != nil && r.Result == wantResult && (wantChange == "" || slicesContain(r.Changes, wantChange))
		})
		tr.after(t, 20, name)
		return r
	}

	edit("immediate", `max_staleness: "3s"`, `max_staleness: "4s"`, admin.ReloadApplied, "dynamo.load.max_staleness (immediate)")
	edit("subscriptions", `direct_allow_cidrs: ["127.0.0.0/8"]`, `direct_allow_cidrs: ["127.0.0.0/8", "10.0.0.0/8"]`,
		admin.ReloadApplied, "dynamo.load.direct_allow_cidrs (subscription_restart)")

	// Backoff only: the view is kept until the new watcher's first resync.
	var emptied atomic.Bool
	sampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-sampling:
				return
			default:
			}
			if w := workers(); w["alpha"] == 0 || w["beta"] == 0 {
				emptied.Store(true)
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	edit("backoff", "      endpoints:", "      watch_reconnect_backoff: {initial: 300ms, max: 20s}\n      endpoints:", admin.ReloadApplied,
		"dynamo.discovery.etcd.watch_reconnect_backoff.initial (watcher_restart)")
	close(sampling)
	sampler.Wait()
	if emptied.Load() {
		t.Error("a backoff-only change emptied the fleet view")
	}

	// Namespace pruning: beta goes, alpha's workers stay pinned throughout.
	var alphaGone atomic.Bool
	sampling = make(chan struct{})
	sampler.Go(func() {
		for {
			select {
			case <-sampling:
				return
			default:
			}
			if workers()["alpha"] == 0 {
				alphaGone.Store(true)
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	text = strings.Replace(text, `      - {namespace: "beta", backends: [dynamo-frontend-beta]}`+"\n", "", 1)
	edit("namespaces", `namespaces: ["alpha", "beta"]`, `namespaces: ["alpha"]`, admin.ReloadApplied,
		"dynamo.discovery.etcd.namespaces (watcher_restart)")
	close(sampling)
	sampler.Wait()
	if alphaGone.Load() {
		t.Error("pruning beta dropped alpha's workers")
	}
	if w := workers(); w["beta"] != 0 || w["alpha"] == 0 {
		t.Errorf("workers after pruning beta: %v", w)
	}
	beta := len(fl.Sim.Frontend("beta").Requests())
	tr.after(t, 30, "pruning")
	if n := len(fl.Sim.Frontend("beta").Requests()); n != beta {
		t.Errorf("beta's frontend got %d requests after its namespace was removed", n-beta)
	}
	// By now the pruning's new watcher has resynced (its etcd is in this
	// process): alpha's workers are the ones first seen before both reloads.
	if got := firstSeen(); !maps.Equal(got, alphaSeen) {
		t.Errorf("alpha's first_seen across the backoff and pruning reloads: %v, was %v", got, alphaSeen)
	}

	// A connection change empties the view until the new watcher's resync;
	// requests meanwhile wait for it rather than fail.
	ep := fl.Sim.EtcdEndpoint()
	alt := strings.Replace(ep, "127.0.0.1", "localhost", 1)
	edit("connection", fmt.Sprintf("endpoints: [%q]", ep), fmt.Sprintf("endpoints: [%q]", alt), admin.ReloadApplied,
		"dynamo.discovery.etcd.endpoints (watcher_restart)")

	// An invalid edit is refused; the running configuration keeps serving.
	gen := status().Generation
	r := edit("invalid", `max_staleness: "4s"`, `max_staleness: "1ms"`, admin.ReloadRejected, "")
	if len(r.Findings) == 0 || status().Generation != gen {
		t.Errorf("invalid edit: %+v, generation %d → %d", r, gen, status().Generation)
	}
	var running map[string]any
	adminGet(t, base, "/admin/config", &running)
	if b, _ := json.Marshal(running); !strings.Contains(string(b), `"max_staleness":"4s"`) {
		t.Errorf("running configuration after the refused edit: %s", b)
	}

	failures := tr.finish()
	if len(failures) > 0 {
		t.Errorf("%d of %d requests failed across the reloads:\n%s", len(failures), int64(len(failures))+tr.ok.Load(), strings.Join(failures[:min(len(failures), 20)], "\n"))
	}
	if got := status().Generation; got != 6 {
		t.Errorf("generation %d after 5 applied reloads", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func slicesContain(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
