package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/cli/serve"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
)

const model = "Qwen/Qwen3-32B"

func u64(v uint64) *uint64 { return &v }

// TestServeRoutesByLoad: serve over a real etcd, real ZMQ publishers and the
// frontend emulator pins each request to the less loaded decode worker and
// the less loaded prefill worker, with decimal headers, whichever dialect
// the workers' cards say their role in.
func TestServeRoutesByLoad(t *testing.T) {
	t.Parallel()
	for _, dialect := range fleetsim.CardDialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			testServeRoutesByLoad(t, dialect)
		})
	}
}

func testServeRoutesByLoad(t *testing.T, dialect string) {
	etcd := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := etcd.Client(t, clientv3.Config{})
	fe := fleetsim.NewFrontend()
	feSrv := httptest.NewServer(fe)
	defer feSrv.Close()
	fe.SetWorkers(model, []uint64{0x10, 0x11}, []uint64{0x20, 0x21})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	put := func(k, v string) {
		if _, err := c.Put(context.Background(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	// Each worker: records, and a publisher sending its load every 20 ms.
	workers := []struct {
		id      uint64
		role    string // the component is named after it
		decode  *uint64
		prefill *uint64
	}{
		{0x10, "prefill", nil, u64(6000)},
		{0x11, "prefill", nil, u64(10)},
		{0x20, "decode", u64(700), nil},
		{0x21, "decode", u64(20), nil},
	}
	for i, w := range workers {
		card, err := fleetsim.RoleFields(dialect, w.role)
		if err != nil {
			t.Fatal(err)
		}
		card["display_name"], card["kv_cache_block_size"] = model, 16
		card["runtime_config"] = map[string]any{"total_kv_blocks": 1000, "max_num_batched_tokens": 8192, "data_parallel_size": 1}
		cardJSON, _ := json.Marshal(card)
		put(fmt.Sprintf("v1/instances/dynamo/%s/generate/%x", w.role, w.id),
			fmt.Sprintf(`{"type":"Endpoint","namespace":"dynamo","component":%q,"endpoint":"generate","instance_id":%d,"transport":{"tcp":"127.0.0.1:1"}}`, w.role, w.id))
		put(fmt.Sprintf("v1/mdc/dynamo/%s/generate/%x", w.role, w.id),
			fmt.Sprintf(`{"type":"Model","namespace":"dynamo","component":%q,"endpoint":"generate","instance_id":%d,"card_json":%s}`, w.role, w.id, cardJSON))
		pub := testutil.StartGoPublisher(t)
		pid := uint64(0x100 + i)
		put(fmt.Sprintf("v1/event_channels/namespace/dynamo/component/%s/endpoint/generate/topic/kv_metrics/%x", w.role, pid),
			fmt.Sprintf(`{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"dynamo","component":%q,"name":"generate"}},"topic":"kv_metrics","instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":%q}}}`,
				w.role, pid, pub.Endpoint))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(0); ctx.Err() == nil; seq++ {
				l := wire.ActiveLoad{WorkerID: w.id, ActiveDecodeBlocks: w.decode, ActivePrefillTokens: w.prefill}
				_ = pub.Send(wire.EncodeEventMessage("kv_metrics", pid, seq, uint64(time.Now().UnixMilli()), wire.EncodeActiveLoad(l)))
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}

	cfgFile := filepath.Join(t.TempDir(), "continuum.yaml")
	cfg := fmt.Sprintf(`
server: {bind_address: "127.0.0.1:0"}
admin: {token: "adm"}
backends:
  - {name: frontend, url: %q, models: [%q]}
disaggregated_serving: {enabled: true}
dynamo:
  enabled: true
  discovery:
    etcd: {endpoints: [%q]}
  load:
    direct_allow_cidrs: ["127.0.0.0/8"]
  shim:
    backends: [frontend]
`, feSrv.URL, model, etcd.Endpoint)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	base, done := startServe(t, ctx, &serve.Options{ConfigFile: cfgFile})

	// Wait until the four subscriptions are connected and samples arrived.
	testutil.Eventually(t, 20*time.Second, "subscriptions connected", func() bool {
		req, _ := http.NewRequest(http.MethodGet, base+"/admin/dynamo/workers", nil)
		req.Header.Set("Authorization", "Bearer adm")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v admin.WorkersResponse
		if json.NewDecoder(resp.Body).Decode(&v) != nil || len(v.Workers) != 4 || len(v.Subscriptions) != 4 {
			return false
		}
		for _, s := range v.Subscriptions {
			if s.State != "connected" {
				return false
			}
		}
		return true
	})
	testutil.Eventually(t, 10*time.Second, "load-based pins", func() bool {
		fe.Reset()
		resp, err := http.Post(base+"/v1/chat/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model)))
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		reqs := fe.Requests()
		if resp.StatusCode != 200 || len(reqs) != 1 || *reqs[0].Worker != 0x21 || *reqs[0].Prefill != 0x11 ||
			reqs[0].DynamoHeaders.Get("x-dynamo-worker-instance-id") != "33" || reqs[0].DynamoHeaders.Get("x-dynamo-dp-rank") != "0" {
			return false
		}
		// Before every sample is fresh the picker rotates round-robin, and a
		// rotation can land on these two by chance: only a pick by load counts.
		return metricValue(t, base, `continuum_dynamo_selection_total{reason="load",role="decode"}`) > 0 &&
			metricValue(t, base, `continuum_dynamo_selection_total{reason="load",role="prefill"}`) > 0
	})
	// Every sample fresh: each request now goes to the less loaded pair, by
	// load in both roles (a rotation would reach the other workers within
	// two requests).
	const more = 6
	decodeBefore := metricValue(t, base, `continuum_dynamo_selection_total{reason="load",role="decode"}`)
	prefillBefore := metricValue(t, base, `continuum_dynamo_selection_total{reason="load",role="prefill"}`)
	fe.Reset()
	for range more {
		if status := postChat(t, base, model); status != 200 {
			t.Fatalf("status %d", status)
		}
	}
	for i, r := range fe.Requests() {
		if r.Worker == nil || r.Prefill == nil || *r.Worker != 0x21 || *r.Prefill != 0x11 {
			t.Errorf("request %d pinned to %+v; want decode 0x21 and prefill 0x11", i, r)
		}
	}
	if n := len(fe.Requests()); n != more {
		t.Errorf("the frontend saw %d requests, want %d", n, more)
	}
	if d := metricValue(t, base, `continuum_dynamo_selection_total{reason="load",role="decode"}`) - decodeBefore; d != more {
		t.Errorf("%v decode selections by load for %d requests", d, more)
	}
	if d := metricValue(t, base, `continuum_dynamo_selection_total{reason="load",role="prefill"}`) - prefillBefore; d != more {
		t.Errorf("%v prefill selections by load for %d requests", d, more)
	}
	metrics, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	for _, want := range []string{`continuum_dynamo_discovery_connected 1`, `continuum_dynamo_load_subscriptions{state="connected",transport="direct"} 4`} {
		if !strings.Contains(string(mb), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}

// TestServeDemo: `serve --demo` answers chat requests within seconds of
// start, buffered and streamed, pinned to a prefill and a decode worker.
func TestServeDemo(t *testing.T) {
	t.Parallel()
	ios, _, out, _ := iostreams.Test()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, done := startServe(t, ctx, &serve.Options{IO: ios, Demo: true, Bind: "127.0.0.1:0"})
	var resp *http.Response
	testutil.Eventually(t, 10*time.Second, "a pinned answer", func() bool {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"model":"Qwen/Qwen3-32B","max_tokens":3,"messages":[{"role":"user","content":"Hello!"}]}`))
		req.Header.Set("x-backend", "")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		resp = r
		return r.StatusCode == 200 && r.Header.Get("x-continuum-routing-path") == "disaggregated"
	})
	if resp.Header.Get("x-continuum-worker") == "" || resp.Header.Get("x-continuum-prefill-worker") == "" {
		t.Errorf("headers %v", resp.Header)
	}
	r, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"Qwen/Qwen3-32B","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"Hello!"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if strings.Count(string(body), "data: ") != 4 || !strings.HasSuffix(strings.TrimSpace(string(body)), "data: [DONE]") {
		t.Errorf("stream:\n%s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "curl -s http://"+strings.TrimPrefix(base, "http://")) {
		t.Errorf("banner:\n%s", out.String())
	}
}

// TestServeLogsConfigWarnings: the configuration's warnings are logged at
// start, as at a reload, not only by config validate.
func TestServeLogsConfigWarnings(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "continuum.yaml")
	cfg := "server: {bind_address: \"127.0.0.1:0\"}\ndynamo: {load: {transport: broker}}\n"
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, done := startServe(t, ctx, &serve.Options{ConfigFile: file,
		Logger: func() (*slog.Logger, error) { return slog.New(slog.NewTextHandler(&logs, nil)), nil }})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := logs.String(); !strings.Contains(got, "configuration warning") || !strings.Contains(got, "dynamo.load.transport") {
		t.Errorf("start logged:\n%s", got)
	}
}

// postChat sends a one-line chat completion for model and reads its
// answer to the end, returning its status.
func postChat(t *testing.T, base, model string) int {
	t.Helper()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestServeDemoStopsOnSIGHUP: `serve --demo` has no file to reload, so
// SIGHUP (its terminal closed) stops it, as SIGTERM does, rather than
// leaving it on its port. Not parallel: the signal goes to the whole test
// process, where another serve would take it for a reload.
func TestServeDemoStopsOnSIGHUP(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	_, done := startServe(t, t.Context(), &serve.Options{IO: ios, Demo: true, Bind: "127.0.0.1:0"})
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve --demo still runs 20 s after SIGHUP")
	}
}
