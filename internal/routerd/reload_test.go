package routerd_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/testutil"
)

const adminToken = "admin-secret-token"

// reloadFixture is a daemon reloading from a configuration file.
type reloadFixture struct {
	t       *testing.T
	file    string
	d       *routerd.Daemon
	metrics *prometheus.Registry
	logs    *testutil.SyncBuffer
	signal  chan struct{}
	done    chan error
	cancel  context.CancelFunc
}

// configYAML is a configuration routing to backendURL, with Dynamo
// discovery on an empty file store under root; extra is appended.
func configYAML(backendURL, root, extra string) string {
	return fmt.Sprintf(`server:
  bind_address: "127.0.0.1:0"
admin:
  token: %q
backends:
  - name: plain
    url: %q
    api_key: backend-secret-key
dynamo:
  enabled: true
  discovery:
    source: file
    file:
      root: %q
      namespace: a
%s`, adminToken, backendURL, root, extra)
}

func startReload(t *testing.T, text string) *reloadFixture {
	t.Helper()
	file := filepath.Join(t.TempDir(), "continuum.yaml")
	testutil.ReplaceFile(t, file, text)
	return startReloadAt(t, file)
}

// startReloadAt starts the daemon on a configuration file that exists.
func startReloadAt(t *testing.T, file string) *reloadFixture {
	t.Helper()
	return startReloadWith(t, file, nil)
}

// startReloadWith is startReloadAt with Reload.Adjust (as serve's --bind
// sets it).
func startReloadWith(t *testing.T, file string, adjust func(*config.Config)) *reloadFixture {
	t.Helper()
	return startReloadGrace(t, file, adjust, 5*time.Second)
}

// startReloadGrace is startReloadWith with grace as the shutdown grace
// (and the drain of a listener a reload replaces).
func startReloadGrace(t *testing.T, file string, adjust func(*config.Config), grace time.Duration) *reloadFixture {
	t.Helper()
	f := &reloadFixture{t: t, file: file, metrics: prometheus.NewRegistry(),
		logs: &testutil.SyncBuffer{}, signal: make(chan struct{}), done: make(chan error, 1)}
	doc, err := config.Load(f.file, config.Options{})
	if err != nil || doc.Findings.Errors() > 0 {
		t.Fatalf("load: %v %v", err, doc.Findings)
	}
	logger := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	f.d, err = routerd.New(doc.Config, routerd.Deps{Logger: logger, Metrics: f.metrics, ShutdownGrace: grace,
		Reload: routerd.Reload{File: f.file, Signal: f.signal, Adjust: adjust}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() { f.done <- f.d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-f.done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	// The readiness poll keeps no connection open: a test of
	// server.max_connections counts the connections it opens itself.
	poll := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	testutil.Eventually(t, 10*time.Second, "serving", func() bool {
		resp, err := poll.Get("http://" + f.d.Addr() + "/health")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err == nil
	})
	return f
}

// write replaces the file the way editors and ConfigMap volumes do: a new
// file renamed over the old one.
func (f *reloadFixture) write(text string) {
	f.t.Helper()
	testutil.ReplaceFile(f.t, f.file, text)
}

// adminDo calls the admin API with the token.
func (f *reloadFixture) adminDo(method, path, body string) (int, string) {
	f.t.Helper()
	addr := f.d.AdminAddr()
	if addr == "" {
		addr = f.d.Addr()
	}
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *reloadFixture) status() admin.ConfigStatus {
	f.t.Helper()
	code, body := f.adminDo(http.MethodGet, "/admin/config/status", "")
	if code != http.StatusOK {
		f.t.Fatalf("status: %d %s", code, body)
	}
	var st admin.ConfigStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		f.t.Fatal(err)
	}
	return st
}

// waitReload waits for the n-th reload attempt since start (counting
// rejected ones) and returns its record.
func (f *reloadFixture) waitReload(n float64) *admin.Reload {
	f.t.Helper()
	testutil.Eventually(f.t, 10*time.Second, fmt.Sprintf("reload %v", n), func() bool {
		return counter(f.t, f.metrics, "continuum_config_reloads_total") >= n
	})
	return f.status().LastReload
}

func (f *reloadFixture) gauge(name string) float64 {
	f.t.Helper()
	for _, mf := range gather(f.t, f.metrics) {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	f.t.Fatalf("no %s", name)
	return 0
}

// TestReloadFileWatch: an edit of the file applies without a restart; an
// edit with errors is refused whole and the running configuration stays;
// the generation, the last reload's result and the reload counter say so.
func TestReloadFileWatch(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	f := startReload(t, configYAML("http://127.0.0.1:1", root, ""))
	if st := f.status(); st.Generation != 1 || st.LastReload != nil {
		t.Fatalf("status at start %+v", st)
	}

	f.write(configYAML("http://127.0.0.1:1", root, "  load:\n    max_staleness: 7s\n"))
	r := f.waitReload(1)
	if r.Result != admin.ReloadApplied || r.Trigger != routerd.TriggerFile || !contains(r.Changes, "dynamo.load.max_staleness (immediate)") {
		t.Fatalf("reload %+v", r)
	}
	if st := f.status(); st.Generation != 2 {
		t.Errorf("generation %d after one applied reload", st.Generation)
	}
	if _, body := f.adminDo(http.MethodGet, "/admin/config", ""); !strings.Contains(body, `"max_staleness":"7s"`) {
		t.Errorf("running configuration %s", body)
	}

	// An invalid edit: max_staleness out of range, and an unknown key.
	f.write(configYAML("http://127.0.0.1:1", root, "  load:\n    max_staleness: 1ms\n    bogus: 1\n"))
	r = f.waitReload(2)
	if r.Result != admin.ReloadRejected || len(r.Findings) == 0 || !strings.Contains(strings.Join(r.Findings, "\n"), "max_staleness") {
		t.Fatalf("invalid edit %+v", r)
	}
	if _, body := f.adminDo(http.MethodGet, "/admin/config", ""); !strings.Contains(body, `"max_staleness":"7s"`) {
		t.Errorf("the running configuration changed after a rejected reload: %s", body)
	}
	if st := f.status(); st.Generation != 2 {
		t.Errorf("generation %d after a rejected reload", st.Generation)
	}
	if f.gauge("continuum_config_last_reload_success") != 0 || f.gauge("continuum_config_generation") != 2 {
		t.Error("metrics do not show the rejected reload")
	}
	if !strings.Contains(f.logs.String(), "configuration reload rejected") {
		t.Error("the rejection was not logged")
	}

	// A file that disappears is a rejected reload too, not a crash.
	if err := os.Remove(f.file); err != nil {
		t.Fatal(err)
	}
	if r := f.waitReload(3); r.Result != admin.ReloadRejected {
		t.Errorf("missing file %+v", r)
	}
	// A fixed file applies.
	f.write(configYAML("http://127.0.0.1:1", root, "  load:\n    max_staleness: 9s\n"))
	if r := f.waitReload(4); r.Result != admin.ReloadApplied || f.status().Generation != 3 {
		t.Errorf("fixed file %+v", r)
	}
	if f.gauge("continuum_config_last_reload_success") != 1 {
		t.Error("the last reload succeeded")
	}
}

// TestReloadBesideBusyFile: a file written without pause in the
// configuration's directory (a log beside it) neither holds back an edit
// of the configuration nor reloads it.
func TestReloadBesideBusyFile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	f := startReload(t, configYAML("http://127.0.0.1:1", root, ""))
	log, err := os.Create(filepath.Join(filepath.Dir(f.file), "continuum.log"))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, _ = log.WriteString("a line\n")
			}
		}
	}()
	defer func() {
		close(stop)
		<-stopped
		_ = log.Close()
	}()
	// The neighbour's writes alone reload nothing.
	time.Sleep(4 * reloadWait)
	if n := counter(t, f.metrics, "continuum_config_reloads_total"); n != 0 {
		t.Fatalf("%v reloads from a neighbour's writes", n)
	}
	f.write(configYAML("http://127.0.0.1:1", root, "  load:\n    max_staleness: 7s\n"))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied {
		t.Fatalf("reload %+v", r)
	}
}

// reloadWait is longer than the daemon's wait that gathers an edit's
// events.
const reloadWait = 300 * time.Millisecond

// TestReloadThroughLinks: a configuration file reached through a symlink
// reloads when the file it points to is edited in place, and when a
// Kubernetes volume swaps its files (a new timestamped directory, "..data"
// renamed to point to it).
func TestReloadThroughLinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := t.TempDir()
	// The layout of a ConfigMap volume: continuum.yaml -> ..data/continuum.yaml,
	// ..data -> ..2026_12_04_1.
	volume := func(name, text string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "continuum.yaml"), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	volume("..2026_12_04_1", configYAML("http://127.0.0.1:1", root, ""))
	file := filepath.Join(dir, "continuum.yaml")
	if err := os.Symlink(filepath.Join("..data", "continuum.yaml"), file); err != nil {
		t.Fatal(err)
	}
	f := startReloadAt(t, file)
	volume("..2026_12_04_2", configYAML("http://127.0.0.1:1", root, "  load:\n    max_staleness: 7s\n"))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied || !contains(r.Changes, "dynamo.load.max_staleness (immediate)") {
		t.Fatalf("volume swap: reload %+v", r)
	}

	// A sibling the file links to, edited in place.
	real := filepath.Join(dir, "real.yaml")
	if err := os.WriteFile(real, []byte(configYAML("http://127.0.0.1:1", root, "  load:\n    max_staleness: 7s\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink("real.yaml", link); err != nil {
		t.Fatal(err)
	}
	g := startReloadAt(t, link)
	if err := os.WriteFile(real, []byte(configYAML("http://127.0.0.1:1", root, "  load:\n    max_staleness: 9s\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := g.waitReload(1); r.Result != admin.ReloadApplied || !contains(r.Changes, "dynamo.load.max_staleness (immediate)") {
		t.Fatalf("linked file edited in place: reload %+v", r)
	}
}

// TestReloadSignal: the signal reloads the file even when nothing changed
// (an operator asked), and says so.
func TestReloadSignal(t *testing.T) {
	t.Parallel()
	f := startReload(t, configYAML("http://127.0.0.1:1", t.TempDir(), ""))
	f.signal <- struct{}{}
	r := f.waitReload(1)
	if r.Trigger != routerd.TriggerSignal || r.Result != admin.ReloadApplied || len(r.Changes) != 0 {
		t.Errorf("signal reload %+v", r)
	}
	if f.status().Generation != 1 {
		t.Error("a reload that changed nothing made a new generation")
	}
}

// TestReloadSignalRereadsCertificate: where the certificate files are not
// watched (inotify out of watches), SIGHUP reads server.tls's pair again,
// even when the configuration did not change. Not parallel: it changes
// how the package watches certificates.
func TestReloadSignalRereadsCertificate(t *testing.T) {
	defer routerd.UnwatchCertificates()()
	first, second := testutil.NewTestPKI(t), testutil.NewTestPKI(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	install := func(p *testutil.TestPKI) {
		for _, f := range [][2]string{{p.ServerCert, certFile}, {p.ServerKey, keyFile}} {
			data, err := os.ReadFile(f[0])
			if err != nil {
				t.Fatal(err)
			}
			testutil.ReplaceFile(t, f[1], string(data))
		}
	}
	install(first)
	text := strings.Replace(configYAML("http://127.0.0.1:1", t.TempDir(), ""), "server:\n",
		fmt.Sprintf("server:\n  tls:\n    cert: %q\n    key: %q\n", certFile, keyFile), 1)
	f := startReload(t, text)
	pool := x509.NewCertPool()
	for _, p := range []*testutil.TestPKI{first, second} {
		data, _ := os.ReadFile(p.CAFile)
		pool.AppendCertsFromPEM(data)
	}
	served := func() string {
		c, err := tls.Dial("tcp", f.d.Addr(), &tls.Config{RootCAs: pool, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		return string(c.ConnectionState().PeerCertificates[0].Raw)
	}
	before := served()
	install(second)
	time.Sleep(2 * routerd.ReloadDebounce) // a watch, were there one, would have acted
	if served() != before {
		t.Fatal("the certificate changed without a watch or a signal")
	}
	f.signal <- struct{}{}
	// The pair is read before the file is (the admin API is HTTPS here).
	testutil.Eventually(t, 10*time.Second, "the signal's reload", func() bool {
		return counter(t, f.metrics, "continuum_config_reloads_total") >= 1
	})
	if served() == before {
		t.Error("SIGHUP did not read the renewed certificate")
	}
}

// TestReloadAdminImport: the running configuration, read back masked from
// GET /admin/config, imports unchanged (its secrets keep their values);
// an import with a change applies it; one with errors is refused with its
// findings and 422. Secrets appear in no response and no log line.
func TestReloadAdminImport(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	f := startReload(t, configYAML("http://127.0.0.1:1", root, ""))
	code, masked := f.adminDo(http.MethodGet, "/admin/config", "")
	if code != http.StatusOK || strings.Contains(masked, adminToken) || strings.Contains(masked, "backend-secret-key") {
		t.Fatalf("GET /admin/config: %d %s", code, masked)
	}
	code, body := f.adminDo(http.MethodPut, "/admin/config", masked)
	if code != http.StatusOK {
		t.Fatalf("re-import of the masked configuration: %d %s", code, body)
	}
	var r admin.Reload
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Result != admin.ReloadApplied || len(r.Changes) != 0 || r.Trigger != routerd.TriggerAdmin {
		t.Fatalf("re-import: %v %s", err, body)
	}
	// The token still works: it was not replaced by the mask.
	if code, _ := f.adminDo(http.MethodGet, "/admin/config/status", ""); code != http.StatusOK {
		t.Fatalf("the admin token changed on import: %d", code)
	}

	changed := strings.Replace(masked, `"max_staleness":"3s"`, `"max_staleness":"4s"`, 1)
	if changed == masked {
		t.Fatalf("no max_staleness in %s", masked)
	}
	code, body = f.adminDo(http.MethodPut, "/admin/config", changed)
	if code != http.StatusOK || !strings.Contains(body, "dynamo.load.max_staleness (immediate)") {
		t.Fatalf("import with a change: %d %s", code, body)
	}
	code, body = f.adminDo(http.MethodPut, "/admin/config", "dynamo: {load: {max_staleness: 1ms}}")
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `"result":"rejected"`) || !strings.Contains(body, "max_staleness") {
		t.Fatalf("import with errors: %d %s", code, body)
	}
	code, body = f.adminDo(http.MethodPut, "/admin/config", "{not yaml")
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "unreadable") {
		t.Fatalf("unreadable import: %d %s", code, body)
	}
	// ${VAR} is not read from the router's environment in an import: the
	// finding names the variable, never its value.
	home := os.Getenv("HOME")
	code, body = f.adminDo(http.MethodPut, "/admin/config", "server: {read_timeout: \"${HOME}\"}")
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "reads no environment variables") || home != "" && strings.Contains(body, home) {
		t.Fatalf("an import naming a variable: %d %s", code, body)
	}
	// A backend moved to another url with its key left masked: the
	// running key is not sent there, and the import is refused.
	moved := strings.Replace(masked, `"url":"http://127.0.0.1:1"`, `"url":"http://127.0.0.1:2"`, 1)
	if moved == masked {
		t.Fatalf("no backend url in %s", masked)
	}
	code, body = f.adminDo(http.MethodPut, "/admin/config", moved)
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "backends[0].api_key") {
		t.Fatalf("a backend moved with its key masked: %d %s", code, body)
	}
	if st := f.status(); st.Generation != 2 {
		t.Errorf("generation %d", st.Generation)
	}
	for _, secret := range []string{adminToken, "backend-secret-key"} {
		if strings.Contains(f.logs.String(), secret) {
			t.Errorf("a log line holds a secret: %s", f.logs.String())
		}
	}
	// Without the token the import does not exist.
	req, _ := http.NewRequest(http.MethodPut, "http://"+f.d.Addr()+"/admin/config", strings.NewReader(changed))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("import without the token: %v %v", err, resp)
	} else {
		_ = resp.Body.Close()
	}
}

// TestReloadRebind: a new server.bind_address is bound and served at once;
// a request in flight on the old listener completes, and the old listener
// then closes. A new address that cannot be bound refuses the reload and
// keeps the running listener. The admin API moves to its own listener and
// off the main one.
func TestReloadRebind(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var arrived atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			arrived.Add(1)
			<-release
		}
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	defer backend.Close()
	defer close(release)
	root := t.TempDir()
	f := startReload(t, configYAML(backend.URL, root, ""))
	oldAddr := f.d.Addr()

	answered := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+oldAddr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
		if err != nil {
			answered <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		answered <- resp.StatusCode
	}()
	testutil.Eventually(t, 10*time.Second, "request in flight", func() bool { return arrived.Load() == 1 })

	newAddr := unusedAddr(t)
	f.write(strings.Replace(configYAML(backend.URL, root, ""), `"127.0.0.1:0"`, `"`+newAddr+`"`, 1))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied || !contains(r.Changes, "server.bind_address (rebind)") {
		t.Fatalf("rebind %+v", r)
	}
	if f.d.Addr() != newAddr {
		t.Fatalf("Addr %s, want %s", f.d.Addr(), newAddr)
	}
	resp, err := http.Get("http://" + newAddr + "/health")
	if err != nil {
		t.Fatalf("the new address does not answer: %v", err)
	}
	_ = resp.Body.Close()
	select {
	case code := <-answered:
		t.Fatalf("the request in flight ended (%d) before its backend answered", code)
	default:
	}
	release <- struct{}{}
	if code := <-answered; code != http.StatusOK {
		t.Errorf("the request in flight on the old listener got %d", code)
	}
	testutil.Eventually(t, 10*time.Second, "the old listener closed", func() bool {
		c, err := net.Dial("tcp", oldAddr)
		if err != nil {
			return true
		}
		_ = c.Close()
		return false
	})

	// A port in use refuses the reload.
	busy, bl := freeAddr(t)
	defer bl.Close()
	f.write(strings.Replace(configYAML(backend.URL, root, ""), `"127.0.0.1:0"`, `"`+busy+`"`, 1))
	if r := f.waitReload(2); r.Result != admin.ReloadRejected || !strings.Contains(r.Error, "server.bind_address "+busy) || !strings.Contains(r.Error, "running listener is kept") {
		t.Fatalf("busy port %+v", r)
	}
	if f.d.Addr() != newAddr {
		t.Errorf("Addr %s after a refused rebind", f.d.Addr())
	}

	// The admin API moves to its own address: the main listener stops
	// answering it.
	adminAddr := unusedAddr(t)
	text := strings.Replace(configYAML(backend.URL, root, ""), `"127.0.0.1:0"`, `"`+newAddr+`"`, 1)
	text = strings.Replace(text, "admin:\n", "admin:\n  bind_address: \""+adminAddr+"\"\n", 1)
	f.write(text)
	if r := f.waitReload(3); r.Result != admin.ReloadApplied {
		t.Fatalf("admin move %+v", r)
	}
	if f.d.AdminAddr() != adminAddr {
		t.Fatalf("AdminAddr %q", f.d.AdminAddr())
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+newAddr+"/admin/config/status", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("the main listener still serves the admin API: %v %v", err, resp)
	} else {
		_ = resp.Body.Close()
	}
	if st := f.status(); st.Generation != 3 {
		t.Errorf("generation %d through the admin listener", st.Generation)
	}
}

// TestReloadKV: a dynamo.kv field applies to the next pick without an
// index reset; turning KV-aware selection off and on again replaces it.
func TestReloadKV(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cache := t.TempDir()
	kv := func(temp string) string {
		return fmt.Sprintf("  kv:\n    enabled: true\n    router_temperature: %s\n    artifact_cache_dir: %q\n", temp, cache)
	}
	f := startReload(t, configYAML("http://127.0.0.1:1", root, kv("0")))
	index, settings := routerd.KVParts(f.d)
	if index == nil || settings.Temperature != 0 {
		t.Fatalf("KV parts at start: %v %+v", index, settings)
	}
	f.write(configYAML("http://127.0.0.1:1", root, kv("0.5")))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied || !contains(r.Changes, "dynamo.kv.router_temperature (immediate)") {
		t.Fatalf("kv reload %+v", r)
	}
	index2, settings := routerd.KVParts(f.d)
	if index2 != index {
		t.Error("a kv setting change replaced the index")
	}
	if settings.Temperature != 0.5 {
		t.Errorf("temperature %v after the reload", settings.Temperature)
	}

	f.write(configYAML("http://127.0.0.1:1", root, ""))
	f.waitReload(2)
	if index, _ := routerd.KVParts(f.d); index != nil {
		t.Error("KV-aware selection still on")
	}
	if _, body := f.adminDo(http.MethodGet, "/admin/dynamo/kv", ""); !strings.Contains(body, `"enabled":false`) {
		t.Errorf("admin kv view %s", body)
	}
	f.write(configYAML("http://127.0.0.1:1", root, kv("0")))
	f.waitReload(3)
	if index3, _ := routerd.KVParts(f.d); index3 == nil || index3 == index {
		t.Error("KV-aware selection turned on again did not start afresh")
	}
}

// TestReloadDynamoOnOff: turning discovery off stops it and empties the
// fleet view without counting a restart; turning it on starts a watcher and
// counts one.
func TestReloadDynamoOnOff(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	on := configYAML("http://127.0.0.1:1", root, "")
	f := startReload(t, on)
	testutil.Eventually(t, 10*time.Second, "discovery connected", func() bool { return connected(t, f.metrics) == 1 })

	f.write(strings.Replace(on, "  enabled: true\n", "  enabled: false\n", 1))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied || !contains(r.Changes, "dynamo.enabled (watcher_restart)") {
		t.Fatalf("off %+v", r)
	}
	if connected(t, f.metrics) != 0 {
		t.Error("discovery still connected")
	}
	if restarts(t, f.metrics) != 0 {
		t.Error("turning discovery off counted a restart")
	}
	f.write(on)
	f.waitReload(2)
	testutil.Eventually(t, 10*time.Second, "discovery connected again", func() bool { return connected(t, f.metrics) == 1 })
	if restarts(t, f.metrics) != 1 {
		t.Errorf("%v restarts counted", restarts(t, f.metrics))
	}
	if !strings.Contains(f.logs.String(), "reason=enabled") {
		t.Error("the reason was not logged")
	}
}

func restarts(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	for _, mf := range gather(t, reg) {
		if mf.GetName() == "continuum_dynamo_discovery_events_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" && l.GetValue() == "restart" {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return 0
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A reload that keeps the registry's view (a namespace removed, as when
// only the backoff changed) before the first watcher's first resync leaves
// requests waiting for the new watcher's view, not for the halted
// watcher's, which never comes: once the new watcher has its view, a
// request for a model outside the fleet goes the plain way at once.
func TestReloadBeforeFirstView(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	}))
	t.Cleanup(backend.Close)
	root := filepath.Join(t.TempDir(), "store") // not there yet: no first view
	text := twoNamespaces(backend.URL, root)
	f := startReload(t, text)
	f.write(oneNamespace(text))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied || !contains(r.Changes, "dynamo.discovery.file.namespaces (watcher_restart)") {
		t.Fatalf("reload %+v", r)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "discovery connected", func() bool { return connected(t, f.metrics) == 1 })
	// The wait for a view is 5 s; this client gives up well before.
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Post("http://"+f.d.Addr()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"plain-model","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatalf("request after the new view: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
	}
}

// twoNamespaces is a configuration watching namespaces a and b of a file
// store at root, each with a pool of its own, and a plain backend serving
// plain-model, all at backendURL.
func twoNamespaces(backendURL, root string) string {
	return fmt.Sprintf(`server:
  bind_address: "127.0.0.1:0"
admin:
  token: %q
backends:
  - {name: plain, url: %q, models: [plain-model]}
  - {name: fa, url: %q}
  - {name: fb, url: %q}
disaggregated_serving: {enabled: true}
dynamo:
  enabled: true
  discovery:
    source: file
    file:
      root: %q
      namespaces: [a, b]
  load:
    direct_allow_cidrs: ["127.0.0.0/8"]
  shim:
    pools:
      - {namespace: a, backends: [fa]}
      - {namespace: b, backends: [fb]}
`, adminToken, backendURL, backendURL, backendURL, root)
}

// oneNamespace is twoNamespaces without namespace b.
func oneNamespace(text string) string {
	return strings.NewReplacer("namespaces: [a, b]", "namespaces: [a]", "      - {namespace: b, backends: [fb]}\n", "").Replace(text)
}

// TestReloadWhileARequestWaits: a request waiting for the first view when
// a reload replaces the watcher (whose view then never comes) waits for
// the new watcher's instead, and goes on as soon as that one has its view.
func TestReloadWhileARequestWaits(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	}))
	t.Cleanup(backend.Close)
	root := filepath.Join(t.TempDir(), "store")
	text := twoNamespaces(backend.URL, root)
	f := startReload(t, text)
	answered := make(chan error, 1)
	go func() {
		// The wait for a view is 5 s; this client gives up before, with
		// room for the new watcher's retries (0.5, 1.5, 3.5 s) on a
		// loaded machine.
		client := &http.Client{Timeout: 4500 * time.Millisecond}
		resp, err := client.Post("http://"+f.d.Addr()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"plain-model","messages":[{"role":"user","content":"hi"}]}`))
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		answered <- err
	}()
	time.Sleep(200 * time.Millisecond) // the request waits for the first view
	f.write(oneNamespace(text))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied {
		t.Fatalf("reload %+v", r)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Errorf("the waiting request: %v", err)
	}
}

// TestReloadSkipsAnEmptyFile: a file rewritten in place is empty for a
// moment, and an empty file is a valid configuration (the admin API off
// among its defaults): it is not applied; the write that follows is.
func TestReloadSkipsAnEmptyFile(t *testing.T) {
	t.Parallel()
	text := configYAML("http://127.0.0.1:1", t.TempDir(), "")
	f := startReload(t, text)
	if err := os.WriteFile(f.file, nil, 0o600); err != nil { // truncated, in place
		t.Fatal(err)
	}
	time.Sleep(3 * routerd.ReloadDebounce)
	if n := counter(t, f.metrics, "continuum_config_reloads_total"); n != 0 {
		t.Fatalf("the empty file was reloaded (%v reloads)", n)
	}
	if err := os.WriteFile(f.file, []byte(text+"  load:\n    max_staleness: 7s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := f.waitReload(1); r.Result != admin.ReloadApplied || !contains(r.Changes, "dynamo.load.max_staleness (immediate)") {
		t.Fatalf("the write after it: %+v", r)
	}
}

// TestReloadSignalRefusesAnEmptyFile: SIGHUP caught while the file is
// empty refuses the reload (the file is being written) instead of
// applying every default, which would drop the backends and the admin
// API; the running configuration stays. The listener's address is kept
// across reloads (as serve's --bind keeps it), so that every default
// would apply if it were not refused.
func TestReloadSignalRefusesAnEmptyFile(t *testing.T) {
	t.Parallel()
	addr := unusedAddr(t)
	file := filepath.Join(t.TempDir(), "continuum.yaml")
	testutil.ReplaceFile(t, file, strings.Replace(configYAML("http://127.0.0.1:1", t.TempDir(), ""), "127.0.0.1:0", addr, 1))
	f := startReloadWith(t, file, func(c *config.Config) { c.Server.BindAddress = addr })
	gen := f.status().Generation
	if err := os.WriteFile(f.file, nil, 0o600); err != nil { // truncated, in place
		t.Fatal(err)
	}
	f.signal <- struct{}{}
	if r := f.waitReload(1); r.Result != admin.ReloadRejected || !strings.Contains(r.Error, "empty") {
		t.Fatalf("SIGHUP on an empty file: %+v", r)
	}
	if g := f.status().Generation; g != gen {
		t.Errorf("generation %d after the refused reload, %d before", g, gen)
	}
}

// TestReloadRetriesARefusedDocument: a valid document refused for a
// reason outside it (server.tls naming files not there yet) is tried again
// when the file is written again with the same content, as a ConfigMap's
// volume is re-synced after the Secret's arrives.
func TestReloadRetriesARefusedDocument(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	text := configYAML("http://127.0.0.1:1", t.TempDir(), "")
	f := startReload(t, text)
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	withTLS := strings.Replace(text, "  bind_address: \"127.0.0.1:0\"\n",
		fmt.Sprintf("  bind_address: \"127.0.0.1:0\"\n  tls: {cert: %q, key: %q}\n", cert, key), 1)
	f.write(withTLS)
	if r := f.waitReload(1); r.Result != admin.ReloadRejected {
		t.Fatalf("TLS files missing: %+v", r)
	}
	pki := testutil.NewTestPKI(t)
	for _, c := range [][2]string{{pki.ServerCert, cert}, {pki.ServerKey, key}} {
		data, err := os.ReadFile(c[0])
		if err != nil {
			t.Fatal(err)
		}
		testutil.ReplaceFile(t, c[1], string(data))
	}
	f.write(withTLS) // the same content again
	// Applied, the listener speaks TLS: the admin API's status is out of
	// this plain client's reach, the metrics are not.
	testutil.Eventually(t, 10*time.Second, "the same document applied once its files exist", func() bool {
		n, _ := series(t, f.metrics, "continuum_config_reloads_total", map[string]string{"result": admin.ReloadApplied})
		return n == 1
	})
}

// TestReadyAfterAWatcherSwitch: a reload that empties the view for a new
// watcher (here a file store moved) makes /ready answer 503 until the new
// watcher's first full read, as at the start.
func TestReadyAfterAWatcherSwitch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
	if err := os.MkdirAll(first, 0o755); err != nil {
		t.Fatal(err)
	}
	text := twoNamespaces("http://127.0.0.1:1", first)
	f := startReload(t, text)
	ready := func() int {
		resp, err := http.Get("http://" + f.d.Addr() + "/ready")
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	testutil.Eventually(t, 10*time.Second, "ready on the first store", func() bool { return ready() == http.StatusOK })
	f.write(strings.Replace(text, first, second, 1))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied {
		t.Fatalf("reload %+v", r)
	}
	if st := ready(); st != http.StatusServiceUnavailable {
		t.Errorf("/ready %d while the moved store has not been read", st)
	}
	if err := os.MkdirAll(second, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "ready on the second store", func() bool { return ready() == http.StatusOK })
}

// TestRebindKeepsTheConnectionLimit: while the listener a rebind
// replaced finishes its streams, its connections count against
// server.max_connections with the new listener's.
func TestRebindKeepsTheConnectionLimit(t *testing.T) {
	t.Parallel()
	be := endlessStream(t, `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}`+"\n\n", nil)
	root := t.TempDir()
	// The admin API on its own listener, which the limit does not cap.
	limited := func(addr string) string {
		text := strings.Replace(configYAML(be.URL, root, ""), "  bind_address: \"127.0.0.1:0\"\n",
			"  bind_address: \""+addr+"\"\n  max_connections: 2\n", 1)
		return strings.Replace(text, "admin:\n", "admin:\n  bind_address: \"127.0.0.1:0\"\n", 1)
	}
	f := startReload(t, limited("127.0.0.1:0"))
	oldAddr := f.d.Addr()
	// The fixture's readiness poll has closed its connection; the server
	// counts it until it reads the close.
	testutil.Eventually(t, 5*time.Second, "no client connection open", func() bool { return routerd.ClientConns(f.d) == 0 })
	// Two streams on the old listener: the limit, reached.
	var streams []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", oldAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		_, _ = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatalf("stream %d: %v", len(streams), err)
		}
		_ = c.SetReadDeadline(time.Time{})
		go func() { _, _ = io.Copy(io.Discard, c) }()
		streams = append(streams, c)
	}
	newAddr := unusedAddr(t)
	f.write(limited(newAddr))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied || !contains(r.Changes, "server.bind_address (rebind)") {
		t.Fatalf("rebind %+v", r)
	}
	extra, err := net.Dial("tcp", newAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !closedWithin(extra, 5*time.Second) {
		t.Fatal("the new listener took a connection over the limit while the old one's streams were open")
	}
	// A stream that ends makes room (the backend's streams are endless:
	// nothing else would end the old listener's).
	_ = streams[0].Close()
	testutil.Eventually(t, 10*time.Second, "room on the new listener", func() bool {
		resp, err := http.Get("http://" + newAddr + "/health")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestReloadKeepsOpenStreams: a reload that changes a server setting
// applies it to the connections that follow; a stream open before it
// finishes on the old server, bounded by its own limits and not by the
// shutdown's grace (5 s here), which a reload is not.
func TestReloadKeepsOpenStreams(t *testing.T) {
	t.Parallel()
	be := endlessStream(t, `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}`+"\n\n", nil)
	root := t.TempDir()
	f := startReload(t, configYAML(be.URL, root, ""))
	resp, err := http.Post("http://"+f.d.Addr()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	lines := make(chan struct{}, 1)
	ended := make(chan error, 1)
	go func() {
		br := bufio.NewReader(resp.Body)
		for {
			if _, err := br.ReadString('\n'); err != nil {
				ended <- err
				return
			}
			select {
			case lines <- struct{}{}:
			default:
			}
		}
	}()
	<-lines
	f.write(strings.Replace(configYAML(be.URL, root, ""), "server:\n", "server:\n  idle_timeout: 90s\n", 1))
	if r := f.waitReload(1); r.Result != "applied" {
		t.Fatalf("reload: %+v", r)
	}
	select {
	case err := <-ended:
		t.Fatalf("the stream open before the reload ended: %v", err)
	case <-time.After(7 * time.Second):
	}
	// Still flowing, not merely open.
	for len(lines) > 0 {
		<-lines
	}
	select {
	case <-lines:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream open before the reload stalled")
	}
}

// TestConnectedGaugeAfterWatcherReplacement: a reload that replaces the
// discovery watcher (the file source swapped for an etcd endpoint that
// accepts connections and never answers, so the new watcher stays seeding)
// leaves continuum_dynamo_discovery_connected saying what GET
// /admin/dynamo/workers says, not connected, instead of the halted old
// watcher's 1.
func TestConnectedGaugeAfterWatcherReplacement(t *testing.T) {
	t.Parallel()
	silent := testutil.SilentListener(t)
	text := configYAML("http://127.0.0.1:1", t.TempDir(), "")
	f := startReload(t, text)
	testutil.Eventually(t, 10*time.Second, "discovery connected", func() bool { return connected(t, f.metrics) == 1 })

	f.write(strings.Replace(text, "    source: file\n",
		"    source: etcd\n    etcd:\n      endpoints: [\""+silent+"\"]\n      namespace: a\n", 1))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied {
		t.Fatalf("reload %+v", r)
	}
	code, body := f.adminDo(http.MethodGet, "/admin/dynamo/workers", "")
	var view admin.WorkersResponse
	if code != http.StatusOK || json.Unmarshal([]byte(body), &view) != nil {
		t.Fatalf("workers: %d %s", code, body)
	}
	if view.Connected {
		t.Fatalf("the new watcher reads as connected to an etcd that never answers: %s", body)
	}
	if g := connected(t, f.metrics); g != 0 {
		t.Errorf("continuum_dynamo_discovery_connected = %v after the watcher was replaced; the new one is still seeding", g)
	}
}

// TestRebindCutIsNotAClientGone: a rebind drains the old listener within
// the shutdown grace; a stream still running at the drain's end is cut by
// the router, as at shutdown, and counted as a 503, not as a client gone
// (499): whether the lean server serves it (a body of declared length) or
// net/http does (a chunked body, handed over).
func TestRebindCutIsNotAClientGone(t *testing.T) {
	t.Parallel()
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			t.Parallel()
			backend := endlessStream(t, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n", nil)
			text := func(bind string) string {
				return fmt.Sprintf("server:\n  bind_address: %q\nbackends:\n  - name: plain\n    url: %q\n    timeout: 30s\n", bind, backend.URL)
			}
			file := filepath.Join(t.TempDir(), "continuum.yaml")
			testutil.ReplaceFile(t, file, text("127.0.0.1:0"))
			f := startReloadGrace(t, file, nil, 300*time.Millisecond)
			var body io.Reader = strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			if chunked {
				body = io.MultiReader(body) // no length: sent chunked
			}
			resp, err := http.Post("http://"+f.d.Addr()+"/v1/chat/completions", "application/json", body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			read := make(chan struct{})
			go func() { _, _ = io.Copy(io.Discard, resp.Body); close(read) }() // a client that reads to the end

			f.write(text(unusedAddr(t)))
			f.signal <- struct{}{}
			select {
			case <-read:
			case <-time.After(10 * time.Second):
				t.Fatal("the stream on the old listener was not cut at the end of the rebind's drain")
			}
			class := func(c string) float64 {
				v, _ := series(t, f.metrics, "continuum_http_requests_total", map[string]string{"route": "/v1/chat/completions", "code": c})
				return v
			}
			testutil.Eventually(t, 5*time.Second, "the cut stream accounted", func() bool { return class("5xx")+class("4xx") > 0 })
			if fives, fours := class("5xx"), class("4xx"); fives != 1 || fours != 0 {
				t.Errorf("the stream the rebind's drain cut: %v 5xx, %v 4xx; want a 5xx (the router cut it, no client left)", fives, fours)
			}
		})
	}
}
