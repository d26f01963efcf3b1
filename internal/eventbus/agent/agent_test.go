package agent_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/eventbus/agent"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

var id = strings.Repeat("0a", 16)

// TestNewChecks: a client needs an https://HOST:PORT router, a credential
// and a valid hello.
func TestNewChecks(t *testing.T) {
	t.Parallel()
	ok := agent.Options{Router: "https://router.example:7443", ID: "broker-a", Role: eventbus.RoleBroker, Token: "t",
		Namespaces: []string{"dynamo"}, Opener: &agent.Publishers{}}
	if _, err := agent.New(ok); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*agent.Options){
		"http":          func(o *agent.Options) { o.Router = "http://router.example:7443" },
		"no port":       func(o *agent.Options) { o.Router = "https://router.example" },
		"a path":        func(o *agent.Options) { o.Router = "https://router.example:7443/bus" },
		"no credential": func(o *agent.Options) { o.Token = "" },
		"bad namespace": func(o *agent.Options) { o.Namespaces = []string{"has space"} },
		"bad role":      func(o *agent.Options) { o.Role = "admin" },
		"no opener":     func(o *agent.Options) { o.Opener = nil },
	} {
		o := ok
		edit(&o)
		if _, err := agent.New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPublishersOpen: a broker refuses what it must not relay before it
// dials anything, and dials what discovery advertises.
func TestPublishersOpen(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	p := &agent.Publishers{Namespaces: []string{"dynamo"}, Advertised: func(tg eventbus.Target) bool { return tg.Host == "127.0.0.1" }}
	sub := func(tg *eventbus.Target) *eventbus.Message {
		return &eventbus.Message{Type: eventbus.TypeSubscribe, StreamID: id, Target: tg}
	}
	cases := []struct {
		name string
		m    *eventbus.Message
		code string
	}{
		{"announced", &eventbus.Message{Type: eventbus.TypeSubscribe, StreamID: id, Announced: &eventbus.AnnouncedTarget{Backend: "b"}}, eventbus.CodeStreamRefused},
		{"undeclared namespace", sub(&eventbus.Target{Namespace: "other", Host: "127.0.0.1", Port: port, Topic: "kv_metrics"}), eventbus.CodeNamespaceNotDeclared},
		{"not advertised", sub(&eventbus.Target{Namespace: "dynamo", Host: "10.0.0.1", Port: port, Topic: "kv_metrics"}), eventbus.CodeTargetNotAdvertised},
		{"nothing listening", sub(&eventbus.Target{Namespace: "dynamo", Host: "127.0.0.1", Port: closedPort, Topic: "kv_metrics"}), eventbus.CodeConnectFailed},
		{"advertised", sub(&eventbus.Target{Namespace: "dynamo", Host: "127.0.0.1", Port: port, Topic: "kv_metrics"}), ""},
	}
	for _, c := range cases {
		src, code, _ := p.Open(t.Context(), c.m)
		if code != c.code {
			t.Errorf("%s: code %q, want %q", c.name, code, c.code)
		}
		if src != nil {
			src.Close()
		}
		if (src != nil) != (c.code == "") {
			t.Errorf("%s: source %v", c.name, src)
		}
	}
}

// TestBackendsOpen: a kv-listener opens its backend's SSE stream with the
// Last-Event-ID to resume from; an unknown or failing backend is refused.
func TestBackendsOpen(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		got <- r.Header.Get("Last-Event-ID") + " " + r.Header.Get("Accept")
		_, _ = io.WriteString(w, "id: 8\ndata: x\n\n")
	}))
	defer srv.Close()
	b := &agent.Backends{URLs: map[string]string{"ok": srv.URL + "/events", "fail": srv.URL + "/fail"}}
	open := func(backend string, last *uint64) (io.ReadWriteCloser, string) {
		src, code, _ := b.Open(t.Context(), &eventbus.Message{Type: eventbus.TypeSubscribe, StreamID: id,
			Announced: &eventbus.AnnouncedTarget{Backend: backend, LastEventID: last}})
		return src, code
	}
	if _, code := open("missing", nil); code != eventbus.CodeBackendUnknown {
		t.Errorf("unknown backend: %q", code)
	}
	if _, code := open("fail", nil); code != eventbus.CodeBackendFailed {
		t.Errorf("failing backend: %q", code)
	}
	seven := uint64(7)
	src, code := open("ok", &seven)
	if code != "" {
		t.Fatal(code)
	}
	defer src.Close()
	data, _ := io.ReadAll(src)
	if string(data) != "id: 8\ndata: x\n\n" || <-got != "7 text/event-stream" {
		t.Errorf("stream %q", data)
	}
	if n, err := src.Write([]byte("ignored")); n != 7 || err != nil {
		t.Errorf("write %d %v", n, err)
	}
}

// startOneSessionBus runs a bus of one session for entry, with pki's server
// certificate and clientCA verifying client certificates ("" for none),
// until the test ends; roots verify it.
func startOneSessionBus(t *testing.T, pki *testutil.TestPKI, clientCA string, entry eventbus.Entry) (*eventbus.Bus, *x509.CertPool) {
	t.Helper()
	bus := testutil.StartBusWith(t, eventbus.Settings{Listen: "127.0.0.1:0", CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: clientCA,
		Entries: []eventbus.Entry{entry}, MaxSessions: 1, MaxStreamsPerSession: 1, MaxSessionBufferBytes: 1 << 20,
		HeartbeatInterval: time.Second, IdleTimeout: 5 * time.Second})
	roots, err := agentRoots(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	return bus, roots
}

// TestClientRetriesRefusedSession: a refused session is counted by its
// code and retried with backoff until the context ends.
func TestClientRetriesRefusedSession(t *testing.T) {
	t.Parallel()
	pki := testutil.NewTestPKI(t)
	bus, roots := startOneSessionBus(t, pki, "", eventbus.Entry{ID: "broker-a", Role: eventbus.RoleBroker, TokenHash: eventbus.HashToken("right")})
	m := telemetry.NewBrokerMetrics(nil)
	c, err := agent.New(agent.Options{Router: "https://127.0.0.1:" + strconv.Itoa(bus.LocalAddr().(*net.TCPAddr).Port), ID: "broker-a",
		Role: eventbus.RoleBroker, Token: "wrong", RootCAs: roots, Namespaces: []string{"dynamo"}, Opener: &agent.Publishers{}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	testutil.Eventually(t, 15*time.Second, "two refused attempts", func() bool {
		return promtest.ToFloat64(m.Sessions.WithLabelValues(eventbus.CodeUnauthenticated)) >= 2
	})
	ccancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
	if promtest.ToFloat64(m.Connected) != 0 {
		t.Error("connected after refusals")
	}
}

// TestSessionResultsClosed: whatever answers at the router's address, the
// session results counted are the listener's refusal codes or failed: a
// code the listener never sends, or none, does not become a label value.
func TestSessionResultsClosed(t *testing.T) {
	t.Parallel()
	var attempts atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := attempts.Add(1)
		switch n % 3 {
		case 0:
			w.WriteHeader(http.StatusBadGateway) // a proxy's answer, no body
		case 1:
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, `{"error":{"code":"made_up_%d","message":"x"}}`, n)
		default:
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":{"code":%q,"message":"x"}}`, eventbus.CodeUnauthenticated)
		}
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13}
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	reg := prometheus.NewRegistry()
	m := telemetry.NewBrokerMetrics(reg)
	results := func() map[string]float64 {
		out := map[string]float64{}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "continuum_broker_sessions_total" {
				for _, s := range mf.GetMetric() {
					out[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
				}
			}
		}
		return out
	}
	c, err := agent.New(agent.Options{Router: "https://127.0.0.1:" + strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port), ID: "broker-a",
		Role: eventbus.RoleBroker, Token: "t", RootCAs: roots, Namespaces: []string{"dynamo"}, Opener: &agent.Publishers{}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	testutil.Eventually(t, 20*time.Second, "three answers", func() bool { return attempts.Load() >= 3 })
	testutil.Eventually(t, 5*time.Second, "three counted", func() bool {
		sum := 0.0
		for _, v := range results() {
			sum += v
		}
		return sum >= 3
	})
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
	for result := range results() {
		if result != "failed" && result != eventbus.CodeUnauthenticated {
			t.Errorf("session result %q counted", result)
		}
	}
}

// TestClientAsksTokenAndRootsAgain: with GetRootCAs the listener is
// verified with the roots of each handshake, and with GetToken each
// session opens with the token of its moment, so a CA bundle or a token
// rotated in place is used from the next connection on.
func TestClientAsksTokenAndRootsAgain(t *testing.T) {
	t.Parallel()
	pki := testutil.NewTestPKI(t)
	bus, roots := startOneSessionBus(t, pki, "", eventbus.Entry{ID: "broker-a", Role: eventbus.RoleBroker, TokenHash: eventbus.HashToken("right")})
	other, err := agentRoots(testutil.NewTestPKI(t).CAFile)
	if err != nil {
		t.Fatal(err)
	}
	var phase atomic.Int32 // 0: another CA's roots; 1: the right roots, the old token; 2: both right
	m := telemetry.NewBrokerMetrics(nil)
	c, err := agent.New(agent.Options{Router: "https://127.0.0.1:" + strconv.Itoa(bus.LocalAddr().(*net.TCPAddr).Port), ID: "broker-a",
		Role: eventbus.RoleBroker, Namespaces: []string{"dynamo"}, Opener: &agent.Publishers{}, Metrics: m,
		GetRootCAs: func() *x509.CertPool {
			if phase.Load() == 0 {
				return other
			}
			return roots
		},
		GetToken: func() string {
			if phase.Load() < 2 {
				return "old"
			}
			return "right"
		}})
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	testutil.Eventually(t, 15*time.Second, "a handshake refused for another CA's roots", func() bool {
		return promtest.ToFloat64(m.Sessions.WithLabelValues("failed")) >= 1
	})
	if promtest.ToFloat64(m.Sessions.WithLabelValues(eventbus.CodeUnauthenticated)) != 0 {
		t.Fatal("a listener was trusted by roots that did not sign it")
	}
	phase.Store(1)
	testutil.Eventually(t, 15*time.Second, "the old token refused", func() bool {
		return promtest.ToFloat64(m.Sessions.WithLabelValues(eventbus.CodeUnauthenticated)) >= 1
	})
	phase.Store(2)
	testutil.Eventually(t, 15*time.Second, "a session with the new token", func() bool { return promtest.ToFloat64(m.Connected) == 1 })
	ccancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
}

// TestClientAsksCertificateAtHandshake: with GetCertificate, the client
// certificate is asked for at the TLS handshake (so that one renewed in
// place is presented from the next connection) and authenticates the
// session.
func TestClientAsksCertificateAtHandshake(t *testing.T) {
	t.Parallel()
	pki := testutil.NewTestPKI(t)
	bus, roots := startOneSessionBus(t, pki, pki.CAFile, eventbus.Entry{ID: "broker-a", Role: eventbus.RoleBroker, Namespaces: []string{"dynamo"}})
	certFile, keyFile := pki.ClientFor(t, "broker-a")
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	m := telemetry.NewBrokerMetrics(nil)
	c, err := agent.New(agent.Options{Router: "https://127.0.0.1:" + strconv.Itoa(bus.LocalAddr().(*net.TCPAddr).Port), ID: "broker-a",
		Role: eventbus.RoleBroker, RootCAs: roots, Namespaces: []string{"dynamo"}, Opener: &agent.Publishers{}, Metrics: m,
		GetCertificate: func() (*tls.Certificate, error) { asked.Add(1); return &pair, nil }})
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	testutil.Eventually(t, 15*time.Second, "a session by certificate", func() bool { return promtest.ToFloat64(m.Connected) == 1 })
	if asked.Load() == 0 {
		t.Error("the certificate was not asked for")
	}
	ccancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
}
