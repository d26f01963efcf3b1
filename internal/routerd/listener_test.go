package routerd_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/testutil"
)

// runDaemon runs a daemon over cfg until the test ends.
func runDaemon(t *testing.T, cfg *config.Config) (*routerd.Daemon, *prometheus.Registry) {
	t.Helper()
	if fs := config.Validate("test", cfg); fs.Errors() > 0 {
		t.Fatalf("invalid configuration: %v", fs)
	}
	reg := prometheus.NewRegistry()
	d, err := routerd.New(cfg, routerd.Deps{Metrics: reg, ShutdownGrace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return d, reg
}

// closedWithin reports whether the server closes c (a read ends) within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return err == nil || !errors.As(err, &ne) || !ne.Timeout()
}

// plainCfg routes to backendURL without Dynamo.
func plainCfg(backendURL string) *config.Config {
	cfg := config.Default()
	cfg.Server.BindAddress = "127.0.0.1:0"
	cfg.Backends = []config.Backend{{Name: "plain", Type: "openai", URL: backendURL, Role: config.RoleUnified, Enabled: true,
		Timeout: config.Duration(30 * time.Second), ResponsesAPI: config.ResponsesAPIChat}}
	return cfg
}

// TestConnectionLimit: connections beyond server.max_connections are
// closed as soon as accepted and counted; one closing makes room. The
// admin listener's /health (a liveness probe's) answers meanwhile.
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	cfg := plainCfg("http://127.0.0.1:1")
	cfg.Server.MaxConnections = 2
	cfg.Server.MaxInFlight = 2
	cfg.Admin.BindAddress = "127.0.0.1:0"
	d, reg := runDaemon(t, cfg)
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", d.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	testutil.Eventually(t, 5*time.Second, "two connections open", func() bool {
		return gaugeValue(t, reg, "continuum_http_connections") == 2
	})
	extra, err := net.Dial("tcp", d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !closedWithin(extra, 5*time.Second) {
		t.Fatal("a connection over the limit stayed open")
	}
	if counter(t, reg, "continuum_http_overload_rejections_total") != 1 {
		t.Error("the refused connection was not counted")
	}
	probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := probe.Get("http://" + d.AdminAddr() + "/health"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("the admin listener's /health with client connections at the limit: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	_ = held[0].Close()
	testutil.Eventually(t, 5*time.Second, "room again", func() bool {
		resp, err := http.Get("http://" + d.Addr() + "/health")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestSlowClients: a client trickling its headers, or its body, is cut off
// at its timeout, and its connection no longer counts.
func TestSlowClients(t *testing.T) {
	t.Parallel()
	cfg := plainCfg("http://127.0.0.1:1")
	cfg.Server.ReadHeaderTimeout = config.Duration(300 * time.Millisecond)
	cfg.Server.ReadTimeout = config.Duration(600 * time.Millisecond)
	d, reg := runDaemon(t, cfg)

	start := time.Now() // the server's clock starts at the accept, after this
	headers, err := net.Dial("tcp", d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer headers.Close()
	_, _ = io.WriteString(headers, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
	if !closedWithin(headers, 5*time.Second) {
		t.Fatal("a client that never finished its headers kept its connection")
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("cut off after %v, before its timeout", el)
	}

	body, err := net.Dial("tcp", d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	_, _ = io.WriteString(body, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := io.WriteString(body, " "); err != nil {
					return
				}
			}
		}
	})
	ended := closedWithin(body, 5*time.Second)
	close(stop)
	wg.Wait()
	if !ended {
		t.Fatal("a client trickling its body kept its connection past read_timeout")
	}
	testutil.Eventually(t, 5*time.Second, "no connection counted", func() bool {
		return gaugeValue(t, reg, "continuum_http_connections") == 0
	})
}

// TestInFlightLimitAndRequestID: requests beyond server.max_in_flight get
// 503 router_overloaded with Retry-After while the others are served;
// the request id a client sends is kept, passed to the backend and
// echoed; one that is missing or unusable is replaced by a new one.
func TestInFlightLimitAndRequestID(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	arrived := make(chan string, 4)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			arrived <- r.Header.Get("X-Request-Id")
			<-release
		}
		w.Header().Set("X-Request-Id", "the-backend-s-own")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	defer backend.Close()
	defer close(release)
	cfg := plainCfg(backend.URL)
	cfg.Server.MaxInFlight = 1
	cfg.Server.MaxBodyBytes = 2048
	d, reg := runDaemon(t, cfg)
	base := "http://" + d.Addr()
	post := func(body, id string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		if id != "" {
			req.Header.Set("X-Request-Id", id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	first := make(chan *http.Response, 1)
	go func() { first <- post(`{"model":"m","messages":[]}`, "client-id-1") }()
	if got := <-arrived; got != "client-id-1" {
		t.Errorf("the backend got request id %q", got)
	}
	resp := post(`{"model":"m","messages":[]}`, "")
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"router_overloaded"`) {
		t.Errorf("over the limit: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	if id := resp.Header.Get("X-Request-Id"); len(id) < 16 {
		t.Errorf("a refused request has no id: %q", id)
	}
	if counter(t, reg, "continuum_http_overload_rejections_total") != 1 {
		t.Error("the refusal was not counted")
	}
	release <- struct{}{}
	r1 := <-first
	_ = r1.Body.Close()
	if r1.StatusCode != http.StatusOK || r1.Header.Get("X-Request-Id") != "client-id-1" {
		t.Errorf("the first request: %d, id %q", r1.StatusCode, r1.Header.Get("X-Request-Id"))
	}
	// The slot is free again once the first request's handler has ended,
	// which may be a moment after its answer reached the client (a request
	// refused meanwhile is tried again); an unusable id is replaced.
	var got string
	deadline := time.Now().Add(10 * time.Second)
	for got == "" {
		go func() { first <- post(`{"model":"m","messages":[]}`, "bad id\twith controls") }()
		select {
		case got = <-arrived:
		case r := <-first:
			_ = r.Body.Close()
			if r.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("the slot was not freed: %d", r.StatusCode)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	release <- struct{}{}
	r2 := <-first
	_ = r2.Body.Close()
	if r2.StatusCode != http.StatusOK || got == "" || strings.Contains(got, " ") || r2.Header.Get("X-Request-Id") != got {
		t.Errorf("a replaced id: %d, backend %q, response %q", r2.StatusCode, got, r2.Header.Get("X-Request-Id"))
	}
	// server.max_body_bytes (once the slot is free again).
	big := post(`{"model":"m","messages":[],"pad":"`+strings.Repeat("x", 4096)+`"}`, "")
	_ = big.Body.Close()
	for big.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		big = post(`{"model":"m","messages":[],"pad":"`+strings.Repeat("x", 4096)+`"}`, "")
		_ = big.Body.Close()
	}
	if big.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over max_body_bytes: %d", big.StatusCode)
	}
}

// TestTLS: with server.tls the router serves HTTPS over HTTP/2 and
// HTTP/1.1; a certificate renewed in place is served to the connections
// that follow, and a broken one is not (the previous one stays).
func TestTLS(t *testing.T) {
	t.Parallel()
	first, second := testutil.NewTestPKI(t), testutil.NewTestPKI(t)
	dir := t.TempDir()
	certFile, keyFile := dir+"/tls.crt", dir+"/tls.key"
	install := func(p *testutil.TestPKI) {
		for _, f := range [][2]string{{p.ServerCert, certFile}, {p.ServerKey, keyFile}} {
			data, err := os.ReadFile(f[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f[1]+".new", data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(f[1]+".new", f[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(first)
	cfg := plainCfg("http://127.0.0.1:1")
	cfg.Server.TLS = &config.ServerTLS{Cert: certFile, Key: keyFile}
	d, _ := runDaemon(t, cfg)

	pool := x509.NewCertPool()
	for _, p := range []*testutil.TestPKI{first, second} {
		data, _ := os.ReadFile(p.CAFile)
		pool.AppendCertsFromPEM(data)
	}
	leaf := func(h2 bool) ([]byte, int) {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2, DisableKeepAlives: true}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get("https://" + d.Addr() + "/health")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.TLS.PeerCertificates[0].Raw, resp.ProtoMajor
	}
	der := func(p *testutil.TestPKI) []byte {
		data, _ := os.ReadFile(p.ServerCert)
		block, _ := pem.Decode(data)
		return block.Bytes
	}
	if got, proto := leaf(true); !bytes.Equal(got, der(first)) || proto != 2 {
		t.Fatalf("HTTP/2: proto %d, first certificate %v", proto, bytes.Equal(got, der(first)))
	}
	if _, proto := leaf(false); proto != 1 {
		t.Errorf("HTTP/1.1 over TLS: proto %d", proto)
	}
	// Plain HTTP gets no answer a client could mistake for one.
	if resp, err := http.Get("http://" + d.Addr() + "/health"); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP was served")
		}
	}

	install(second)
	testutil.Eventually(t, 10*time.Second, "the renewed certificate served", func() bool {
		got, _ := leaf(true)
		return bytes.Equal(got, der(second))
	})
	// A broken renewal keeps the current certificate.
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond) // past the reload's debounce
	if got, _ := leaf(true); !bytes.Equal(got, der(second)) {
		t.Error("a broken certificate file replaced the served one")
	}
}

// TestReloadListenerSettings: a reload changing the listener's settings
// applies to new connections while a request on an old one completes; the
// address stays bound throughout.
func TestReloadListenerSettings(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			arrived <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	defer backend.Close()
	defer close(release)
	root := t.TempDir()
	f := startReload(t, configYAML(backend.URL, root, ""))
	answered := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+f.d.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
		if err != nil {
			answered <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		answered <- resp.StatusCode
	}()
	<-arrived
	text := strings.Replace(configYAML(backend.URL, root, ""), "server:\n", "server:\n  read_header_timeout: 300ms\n", 1)
	f.write(text)
	if r := f.waitReload(1); r.Result != "applied" {
		t.Fatalf("reload %+v", r)
	}
	// A new connection has the new header timeout.
	c, err := net.Dial("tcp", f.d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET /health HTTP/1.1\r\n")
	if !closedWithin(c, 5*time.Second) {
		t.Error("the new header timeout does not apply to new connections")
	}
	release <- struct{}{}
	if code := <-answered; code != http.StatusOK {
		t.Errorf("the request on the old server got %d", code)
	}
	// Still serving on the same address.
	resp, err := http.Get("http://" + f.d.Addr() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	for _, mf := range gather(t, reg) {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// TestPlainListenerPaths: the plain listener serves a request with a
// declared length on its lean server and one with a chunked body through
// net/http, both to the backend; a client that leaves a request in flight
// has the backend's request cancelled.
func TestPlainListenerPaths(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	gone := make(chan error, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"hold"`)) {
			arrived <- struct{}{}
			select {
			case <-r.Context().Done():
				gone <- nil
			case <-time.After(10 * time.Second):
				gone <- errors.New("the backend's request outlived its client by 10s")
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer backend.Close()
	d, _ := runDaemon(t, plainCfg(backend.URL))
	url := "http://" + d.Addr() + "/v1/chat/completions"
	const chat = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

	for _, chunked := range []bool{false, true} {
		var body io.Reader = strings.NewReader(chat)
		if chunked {
			body = io.MultiReader(strings.NewReader(chat)) // no length: sent chunked
		}
		resp, err := http.Post(url, "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(got) != chat {
			t.Fatalf("chunked=%v: %s %q", chunked, resp.Status, got)
		}
	}

	c, err := net.Dial("tcp", d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	hold := `{"model":"hold","messages":[{"role":"user","content":"hi"}]}`
	_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(hold))+"\r\n\r\n"+hold)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the backend")
	}
	_ = c.Close()
	if err := <-gone; err != nil {
		t.Fatal(err)
	}
}

// TestShutdownDelay: for the shutdown delay after its context ends, the
// daemon reports not ready yet still accepts and serves new connections;
// then it stops accepting and Run returns.
func TestShutdownDelay(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"id":"x","choices":[]}`)
	}))
	t.Cleanup(backend.Close)
	const delay = 4 * time.Second
	d, err := routerd.New(plainCfg(backend.URL), routerd.Deps{ShutdownGrace: 5 * time.Second, ShutdownDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + d.Addr()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	status := func(req func() (*http.Response, error)) int {
		resp, err := req()
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// A new client each time: a new connection.
	get := func(path string) int {
		return status(func() (*http.Response, error) { return (&http.Client{Transport: &http.Transport{}}).Get(base + path) })
	}
	testutil.Eventually(t, 10*time.Second, "ready", func() bool { return get("/ready") == http.StatusOK })
	start := time.Now()
	cancel()
	testutil.Eventually(t, 10*time.Second, "not ready", func() bool { return get("/ready") == http.StatusServiceUnavailable })
	if st := status(func() (*http.Response, error) {
		return (&http.Client{Transport: &http.Transport{}}).Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	}); st != http.StatusOK {
		t.Fatalf("a new connection during the shutdown delay got %d", st)
	}
	testutil.Eventually(t, 20*time.Second, "the listener closed", func() bool {
		c, err := net.Dial("tcp", d.Addr())
		if err != nil {
			return true
		}
		_ = c.Close()
		return false
	})
	if el := time.Since(start); el < delay {
		t.Errorf("stopped accepting %v after the context ended, before the %v delay", el, delay)
	}
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
