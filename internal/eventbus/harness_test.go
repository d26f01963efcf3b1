package eventbus_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/eventbus/agent"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

// Credentials of the test bus.
const (
	tokenA  = "token-of-broker-a"
	tokenB  = "token-of-broker-b"
	tokenKV = "token-of-kv-listener"
	brokerA = "broker-a.dynamo"
	brokerB = "broker-b.dynamo"
	kvID    = "kv-listener-a"
)

// testBus is a running bus on loopback with real TLS.
type testBus struct {
	*eventbus.Bus
	pki      *testutil.TestPKI
	settings eventbus.Settings
	metrics  *telemetry.EventBusMetrics
	logs     *testutil.SyncBuffer
	addr     string
	// stop ends the bus's Run (the test's cleanup calls it too).
	stop func()
}

func baseSettings(pki *testutil.TestPKI) eventbus.Settings {
	return eventbus.Settings{
		Listen: "127.0.0.1:0", CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CAFile,
		Entries: []eventbus.Entry{
			{ID: brokerA, Role: eventbus.RoleBroker, TokenHash: eventbus.HashToken(tokenA), Namespaces: []string{"dynamo", "other"}},
			{ID: brokerB, Role: eventbus.RoleBroker, TokenHash: eventbus.HashToken(tokenB), Namespaces: []string{"dynamo"}},
			{ID: kvID, Role: eventbus.RoleKVListener, TokenHash: eventbus.HashToken(tokenKV), Backends: []string{"vllm-1", "vllm-2"}},
		},
		MaxSessions: 8, MaxStreamsPerSession: 16, MaxSessionBufferBytes: 16 * eventbus.MinSessionBudgetPerStream,
		// A raw session driven by a test sends no heartbeats, so the idle
		// timeout bounds how long such a test may take: 30 s, not a few
		// seconds a loaded host can take (-race, -count, parallel tests).
		HeartbeatInterval: time.Second, IdleTimeout: 30 * time.Second,
	}
}

// startBus runs a bus until the test ends; edit changes its settings and
// timeouts first.
func startBus(t testing.TB, edit func(*eventbus.Settings, *eventbus.Timeouts)) *testBus {
	t.Helper()
	pki := testutil.NewTestPKI(t)
	s := baseSettings(pki)
	var to eventbus.Timeouts
	if edit != nil {
		edit(&s, &to)
	}
	tb := &testBus{pki: pki, settings: s, metrics: telemetry.NewEventBusMetrics(nil), logs: &testutil.SyncBuffer{}}
	b, err := eventbus.New(s, tb.metrics, newLogger(tb.logs))
	if err != nil {
		t.Fatal(err)
	}
	b.SetTimeouts(to)
	tb.Bus = b
	tb.stop = run(t, b)
	t.Cleanup(tb.stop)
	testutil.Eventually(t, 10*time.Second, "the bus listening", func() bool { return b.LocalAddr() != nil })
	tb.addr = b.LocalAddr().String()
	return tb
}

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// run runs b until the returned stop is called.
func run(t testing.TB, b *eventbus.Bus) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(ctx) }()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

func (tb *testBus) url() string { return "https://" + tb.addr }

// roots is the CA pool that verifies the listener.
func (tb *testBus) roots(t testing.TB) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(tb.pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return pool
}

// clientCert loads a client certificate naming ids (by DNS SAN).
func (tb *testBus) clientCert(t testing.TB, ids ...string) *tls.Certificate {
	t.Helper()
	cf, kf := tb.pki.ClientForNames(t, ids...)
	c, err := tls.LoadX509KeyPair(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// dial opens an HTTP/2 connection to the bus, presenting cert when set.
func (tb *testBus) dial(t testing.TB, cert *tls.Certificate) *http.ClientConn {
	t.Helper()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: tb.roots(t), ServerName: "127.0.0.1", NextProtos: []string{"h2"}}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	var protos http.Protocols
	protos.SetHTTP2(true)
	tr := &http.Transport{Protocols: &protos, TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	cc, err := tr.NewClientConn(t.Context(), "https", tb.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// rawSession is a control channel driven by the test.
type rawSession struct {
	resp *http.Response
	w    *io.PipeWriter
	lr   *eventbus.LineReader
	id   string
}

// post sends a POST with a token (none when ""), the version header and
// body, and returns the response once its headers arrive.
func post(t testing.TB, cc *http.ClientConn, path, token string, body io.Reader, hdr map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1"+path, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set(eventbus.HeaderVersion, "1")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func hello(role, id string, namespaces, sources []string) *eventbus.Message {
	return &eventbus.Message{Type: eventbus.TypeHello, Role: role, ClientID: id, DynamoNamespaces: namespaces,
		Sources: sources, Versions: []int{1}}
}

// openSession opens a control channel and sends m (nil: nothing yet).
func openSession(t testing.TB, cc *http.ClientConn, token string, m *eventbus.Message) *rawSession {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { _ = pw.Close() })
	if m != nil {
		go func() { _, _ = pw.Write(eventbus.Encode(m)) }()
	}
	resp := post(t, cc, eventbus.PathSession, token, pr, nil)
	rs := &rawSession{resp: resp, w: pw, lr: eventbus.NewLineReader(resp.Body, eventbus.MaxLineBytes)}
	if resp.StatusCode == http.StatusOK {
		w := rs.next(t)
		if w.Type != eventbus.TypeWelcome {
			t.Fatalf("first line %+v, want a welcome", w)
		}
		rs.id = w.SessionID
	}
	return rs
}

// next reads the next line that is not a heartbeat.
func (rs *rawSession) next(t testing.TB) eventbus.Message {
	t.Helper()
	for {
		line, err := rs.lr.Next()
		if err != nil {
			t.Fatalf("control channel: %v", err)
		}
		m, err := eventbus.Decode(line)
		if err != nil {
			t.Fatal(err)
		}
		if m.Type != eventbus.TypeHeartbeat {
			return m
		}
	}
}

// refusalOf reads a refused response's status and code.
func refusalOf(t testing.TB, resp *http.Response) (int, string) {
	t.Helper()
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("%d: body %q: %v", resp.StatusCode, data, err)
	}
	return resp.StatusCode, body.Error.Code
}

func testutilToFloat(c prometheus.Collector) float64 { return promtest.ToFloat64(c) }

// refusals reads the refusal counter of code.
func (tb *testBus) refusals(code string) float64 {
	return testutilToFloat(tb.metrics.Refusals.WithLabelValues(code))
}

// brokerAgent runs a broker client until the test ends; advertised
// decides which targets it accepts (all when nil).
func (tb *testBus) brokerAgent(t testing.TB, id, token string, namespaces []string, advertised func(eventbus.Target) bool) (stop func()) {
	t.Helper()
	if advertised == nil {
		advertised = func(eventbus.Target) bool { return true }
	}
	c, err := agent.New(agent.Options{Router: tb.url(), ID: id, Role: eventbus.RoleBroker, Token: token, RootCAs: tb.roots(t),
		Namespaces: namespaces, Opener: &agent.Publishers{Namespaces: namespaces, Advertised: advertised}, DrainGrace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return runAgent(t, c)
}

func runAgent(t testing.TB, c *agent.Client) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// plainGet sends an HTTP/1.1 request in plaintext and returns what comes
// back before the listener closes the connection.
func plainGet(t testing.TB, addr string, first []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(first); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, _ = io.Copy(&buf, c)
	return buf.Bytes()
}
