package routerd_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/loopport"
	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// baseConfig routes to one plain backend; Dynamo discovery reads an empty
// file store.
func baseConfig(t *testing.T, backendURL string) *config.Config {
	cfg := config.Default()
	cfg.Server.BindAddress = "127.0.0.1:0"
	cfg.Backends = []config.Backend{{Name: "plain", Type: "openai", URL: backendURL, Role: config.RoleUnified, Enabled: true,
		Timeout: config.Duration(30 * time.Second)}}
	cfg.Dynamo.Enabled = true
	cfg.Dynamo.Discovery.Source = config.SourceFile
	cfg.Dynamo.Discovery.File.Root = t.TempDir()
	return cfg
}

func freeAddr(t *testing.T) (string, net.Listener) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l.Addr().String(), l
}

// unusedAddr is an address nothing listens on, for the router to bind
// later: outside the ephemeral range, so that the connections of tests
// running alongside do not take it in the meantime.
func unusedAddr(t *testing.T) string {
	addr, err := loopport.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestNewBindsOrFails: New binds both listeners; a port in use is New's
// error, naming the key, and releases what it had bound.
func TestNewBindsOrFails(t *testing.T) {
	t.Parallel()
	busy, l := freeAddr(t)
	defer l.Close()

	cfg := baseConfig(t, "http://127.0.0.1:1")
	cfg.Server.BindAddress = busy
	if _, err := routerd.New(cfg, routerd.Deps{}); err == nil || !strings.Contains(err.Error(), "server.bind_address "+busy) {
		t.Errorf("main port in use: %v", err)
	}

	main := unusedAddr(t)
	cfg = baseConfig(t, "http://127.0.0.1:1")
	cfg.Server.BindAddress, cfg.Admin.BindAddress = main, busy
	if _, err := routerd.New(cfg, routerd.Deps{}); err == nil || !strings.Contains(err.Error(), "admin.bind_address "+busy) {
		t.Errorf("admin port in use: %v", err)
	}
	// The main listener bound before the failure was released.
	if l2, err := net.Listen("tcp", main); err != nil {
		t.Errorf("the main address stayed bound: %v", err)
	} else {
		_ = l2.Close()
	}

	cfg = baseConfig(t, "http://127.0.0.1:1")
	cfg.Admin.BindAddress = "127.0.0.1:0"
	d, err := routerd.New(cfg, routerd.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Addr() == "" || d.AdminAddr() == "" || d.Addr() == d.AdminAddr() {
		t.Errorf("addresses %q %q", d.Addr(), d.AdminAddr())
	}
}

func connected(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	for _, mf := range gather(t, reg) {
		if mf.GetName() == "continuum_dynamo_discovery_connected" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no continuum_dynamo_discovery_connected")
	return 0
}

// counter sums a counter family's series (0 when it has none yet).
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	sum := 0.0
	for _, mf := range gather(t, reg) {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// TestRunShutdownOrder: when its context ends, the daemon stops taking
// requests, lets the one in flight finish, and only then stops discovery;
// Run returns nil once everything it started has ended.
func TestRunShutdownOrder(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	arrived := make(chan struct{}, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		arrived <- struct{}{}
		<-release
		_, _ = io.WriteString(w, `{"id":"x","choices":[]}`)
	}))
	defer backend.Close()
	defer unblock() // before the backend closes, whatever the test's end
	metrics := prometheus.NewRegistry()
	cfg := baseConfig(t, backend.URL)
	root := cfg.Dynamo.Discovery.File.Root
	if err := os.MkdirAll(filepath.Join(root, "v1", "instances"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := routerd.New(cfg, routerd.Deps{Metrics: metrics, ShutdownGrace: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + d.Addr()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	testutil.Eventually(t, 10*time.Second, "ready", func() bool {
		resp, err := http.Get(base + "/ready")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if connected(t, metrics) != 1 {
		t.Fatal("discovery is not connected")
	}

	// One request in flight, then shutdown.
	answered := make(chan int, 1)
	go func() {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
		if err != nil {
			answered <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		answered <- resp.StatusCode
	}()
	<-arrived
	cancel()
	testutil.Eventually(t, 10*time.Second, "the listener closed", func() bool {
		c, err := net.Dial("tcp", d.Addr())
		if err != nil {
			return true
		}
		_ = c.Close()
		return false
	})
	// Draining: discovery still follows the fleet for the request in
	// flight. A malformed record written now is seen and counted.
	dir := filepath.Join(root, "v1", "instances")
	if err := os.WriteFile(filepath.Join(dir, wire.FileStoreName("dynamo/decode/generate/1")), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "discovery still running while draining", func() bool {
		return counter(t, metrics, "continuum_dynamo_discovery_events_total") > 0
	})
	select {
	case err := <-done:
		t.Fatalf("Run returned while a request was in flight: %v", err)
	default:
	}
	unblock()
	if status := <-answered; status != http.StatusOK {
		t.Errorf("the request in flight got %d", status)
	}
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if connected(t, metrics) != 0 {
		t.Error("discovery still connected after Run returned")
	}
}

// TestRunStopsOnAPartsFailure: a part that fails ends Run with its error,
// after the same drain. The main listener failing under its server is
// such a failure.
func TestRunStopsOnAPartsFailure(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t, "http://127.0.0.1:1")
	d, err := routerd.New(cfg, routerd.Deps{ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(t.Context()) }()
	testutil.Eventually(t, 10*time.Second, "serving", func() bool {
		resp, err := http.Get("http://" + d.Addr() + "/health")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err == nil
	})
	d.Close() // the listener fails under its server
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "serving "+d.Addr()) {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not end after its listener failed")
	}
}

// TestNewRefusesInvalidBackoff: a discovery backoff the watcher cannot use
// is New's error, not a failure once running.
func TestNewRefusesInvalidBackoff(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(t, "http://127.0.0.1:1")
	cfg.Dynamo.Discovery.Source = config.SourceEtcd
	cfg.Dynamo.Discovery.Etcd.Endpoints = []string{"http://127.0.0.1:1"}
	cfg.Dynamo.Discovery.Etcd.WatchReconnectBackoff = config.Backoff{Initial: config.Duration(time.Second), Max: config.Duration(time.Millisecond)}
	if _, err := routerd.New(cfg, routerd.Deps{}); err == nil || !strings.Contains(err.Error(), "backoff") {
		t.Errorf("New: %v", err)
	}
}

// TestKVAdminView: with dynamo.kv.enabled the daemon runs the KV parts and
// GET /admin/dynamo/kv shows the index; without, it says disabled.
func TestKVAdminView(t *testing.T) {
	t.Parallel()
	for _, enabled := range []bool{true, false} {
		cfg := baseConfig(t, "http://127.0.0.1:1")
		cfg.Admin.Token = "secret"
		cfg.Dynamo.KV.Enabled = enabled
		cfg.Dynamo.KV.ArtifactCacheDir = t.TempDir()
		d, err := routerd.New(cfg, routerd.Deps{ShutdownGrace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		req, _ := http.NewRequest(http.MethodGet, "http://"+d.Addr()+"/admin/dynamo/kv", nil)
		req.Header.Set("Authorization", "Bearer secret")
		var body string
		testutil.Eventually(t, 10*time.Second, "admin kv", func() bool {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			body = string(b)
			return resp.StatusCode == http.StatusOK
		})
		if want := fmt.Sprintf(`"enabled":%v`, enabled); !strings.Contains(body, want) || !strings.Contains(body, `"ranks":[]`) {
			t.Errorf("kv %v: %s", enabled, body)
		}
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestShutdownCutIs503: a stream still running when the shutdown's grace
// ends is cut by the router, and accounted as a 503 (the router gave up
// on it), not as a 499 (a client that left).
func TestShutdownCutIs503(t *testing.T) {
	t.Parallel()
	backend := endlessStream(t, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n", nil)
	metrics := prometheus.NewRegistry()
	d, err := routerd.New(plainCfg(backend.URL), routerd.Deps{Metrics: metrics, ShutdownGrace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	testutil.Eventually(t, 10*time.Second, "serving", func() bool {
		resp, err := http.Get("http://" + d.Addr() + "/health")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err == nil
	})
	resp, err := http.Post("http://"+d.Addr()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// A client that reads all it is given, and the process told to stop.
	go func() { _, _ = io.Copy(io.Discard, resp.Body) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	class := func(c string) float64 {
		v, _ := series(t, metrics, "continuum_http_requests_total", map[string]string{"route": "/v1/chat/completions", "code": c})
		return v
	}
	testutil.Eventually(t, 5*time.Second, "the cut stream accounted", func() bool { return class("5xx")+class("4xx") > 0 })
	if fives, fours := class("5xx"), class("4xx"); fives != 1 || fours != 0 {
		t.Errorf("the stream cut at the grace's end: %v 5xx, %v 4xx; want it a 5xx", fives, fours)
	}
}

// TestShutdownClosesHandedOffKeepAlives: while the shutdown waits for a
// stream, an idle keep-alive connection net/http serves (one the lean
// server handed off: a chunked upload) is closed at once, as the lean
// server closes its own idle ones, rather than taking new requests that
// the end of the grace would cut.
func TestShutdownClosesHandedOffKeepAlives(t *testing.T) {
	t.Parallel()
	backend := endlessStream(t, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n", nil)
	d, err := routerd.New(plainCfg(backend.URL), routerd.Deps{Metrics: prometheus.NewRegistry(), ShutdownGrace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// A connection handed to net/http, idle after its first answer.
	c, err := net.Dial("tcp", d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	body := `{"model":`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	answer, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, answer.Body)
	// A stream the shutdown waits for.
	resp, err := http.Post("http://"+d.Addr()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	go func() { _, _ = io.Copy(io.Discard, resp.Body) }()
	cancel()
	if !closedWithin(c, 2*time.Second) {
		t.Error("an idle handed-off keep-alive connection stays open while the shutdown drains")
	}
	_ = resp.Body.Close()
}
