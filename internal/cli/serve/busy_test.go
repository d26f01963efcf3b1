package serve_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/cli/serve"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/testutil"
)

// metricLines reads serve's /metrics, a line each.
func metricLines(t *testing.T, base string) []string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// metricValue reads one series from serve's /metrics (0 when absent).
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	for _, line := range metricLines(t, base) {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			_, _ = fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

// metricMax reads the largest value of a metric over its labelled series
// (0 when it has none).
func metricMax(t *testing.T, base, name string) float64 {
	t.Helper()
	var max float64
	for _, line := range metricLines(t, base) {
		series, v, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(series, name+"{") {
			continue
		}
		var f float64
		if _, err := fmt.Sscan(v, &f); err == nil && f > max {
			max = f
		}
	}
	return max
}

// TestServeBusyThresholdReload: serve over the simulator (real ZMQ load
// samples, real frontend). A reload adds dynamo.load.busy_threshold: it
// applies at once, and while the one decode worker streams a long answer a
// second request is answered 503 all_workers_busy. A reload adds
// dynamo.load.queue: the second request now waits and is served once the
// stream ends and the worker reports its room.
func TestServeBusyThresholdReload(t *testing.T) {
	t.Parallel()
	fl, err := fleetsim.StartDemo(fleetsim.Options{Prefill: 1, Decode: 1, Speed: 2}, "127.0.0.1:0")
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
	chat := func(ctx context.Context, stream bool, maxTokens int) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(
			fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":"Hello!"}]}`, fl.Sim.Model(), stream, maxTokens)))
		req.Header.Set("x-backend", "")
		return http.DefaultClient.Do(req)
	}
	testutil.Eventually(t, 30*time.Second, "a pinned answer", func() bool {
		resp, err := chat(ctx, false, 1)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode == 200 && resp.Header.Get("x-continuum-routing-path") == "disaggregated"
	})
	reload := func(name, from, to, change string) {
		t.Helper()
		next := strings.Replace(text, from, to, 1)
		if next == text {
			t.Fatalf("%s: %q is not in the configuration", name, from)
		}
		text = next
		write(text)
		testutil.Eventually(t, 20*time.Second, name+" reloaded", func() bool {
			var st admin.ConfigStatus
			adminGet(t, base, "/admin/config/status", &st)
			r := st.LastReload
			return r != nil && r.Result == admin.ReloadApplied && slicesContain(r.Changes, change)
		})
	}
	// Any block in use makes a worker busy.
	reload("busy threshold", `max_staleness: "3s"`, `max_staleness: "3s"`+"\n    busy_threshold: {kv_blocks: 0.00001, hysteresis: 0}",
		"dynamo.load.busy_threshold (immediate)")

	// A long stream (256 tokens at 10 ms) occupies the one decode worker.
	long := func() (*http.Response, *bufio.Reader) {
		t.Helper()
		resp, err := chat(ctx, true, 256)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("the long stream: %d %s", resp.StatusCode, b)
		}
		r := bufio.NewReader(resp.Body)
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		// The worker is streaming, but the router judges it by its samples:
		// the last one before this stream may be older than max_staleness
		// (the worker publishes on change only), and with no fresh sample
		// nothing is judged busy. Wait for the sample that shows the stream.
		testutil.Eventually(t, 10*time.Second, "the decode worker's sample shows the stream", func() bool {
			return metricMax(t, base, "continuum_dynamo_worker_active_decode_blocks") > 0
		})
		return resp, r
	}
	finish := func(resp *http.Response, r *bufio.Reader) {
		t.Helper()
		rest, err := io.ReadAll(r)
		_ = resp.Body.Close()
		if err != nil || !strings.Contains(string(rest), "[DONE]") {
			t.Fatalf("the long stream did not finish: %v", err)
		}
	}
	resp, r := long()
	busy, err := chat(ctx, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(busy.Body)
	_ = busy.Body.Close()
	if busy.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"all_workers_busy"`) || busy.Header.Get("Retry-After") == "" {
		t.Fatalf("while the worker is busy: %d %v %s", busy.StatusCode, busy.Header, body)
	}
	finish(resp, r)
	if n := metricValue(t, base, `continuum_dynamo_busy_refusals_total{reason="no_queue"}`); n != 1 {
		t.Errorf("no_queue refusals %v", n)
	}

	reload("queue", `kv_blocks: 0.00001, hysteresis: 0}`, `kv_blocks: 0.00001, hysteresis: 0}`+"\n    queue: {size: 4, max_wait: 30s}",
		"dynamo.load.queue (immediate)")
	resp, r = long()
	waited := make(chan int, 1)
	go func() {
		w, err := chat(ctx, false, 1)
		if err != nil {
			waited <- 0
			return
		}
		_, _ = io.Copy(io.Discard, w.Body)
		_ = w.Body.Close()
		waited <- w.StatusCode
	}()
	testutil.Eventually(t, 10*time.Second, "the second request waits", func() bool {
		return metricValue(t, base, "continuum_dynamo_queue_depth") == 1
	})
	select {
	case code := <-waited:
		t.Fatalf("the second request did not wait for the stream: %d", code)
	default:
	}
	finish(resp, r)
	select {
	case code := <-waited:
		if code != 200 {
			t.Fatalf("the waiting request: %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting request was not served after the stream ended")
	}
	if n := metricValue(t, base, `continuum_dynamo_queue_waits_total{result="dispatched"}`); n != 1 {
		t.Errorf("dispatched waits %v", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
