package eventbus_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestPlaintextRefused: a connection whose first byte is not a TLS
// handshake record is refused as tls_required; an ASCII (7-bit) first
// byte, as a plaintext HTTP client sends, gets an HTTP/1.1 403 JSON answer
// first, any other byte only the close.
func TestPlaintextRefused(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	got := string(plainGet(t, tb.addr, []byte("POST /bus/v1/session HTTP/1.1\r\nHost: x\r\n\r\n")))
	if !strings.HasPrefix(got, "HTTP/1.1 403 Forbidden\r\n") || !strings.Contains(got, `"code":"tls_required"`) ||
		!strings.Contains(got, "Content-Type: application/json") {
		t.Errorf("plaintext HTTP answer:\n%s", got)
	}
	// Any 7-bit first byte is ASCII, control characters included.
	if got := string(plainGet(t, tb.addr, []byte("\r\nGET / HTTP/1.1\r\n\r\n"))); !strings.HasPrefix(got, "HTTP/1.1 403 Forbidden\r\n") {
		t.Errorf("CR first byte answered %q", got)
	}
	if got := plainGet(t, tb.addr, []byte{0xff, 0x00, 0x01}); len(got) != 0 {
		t.Errorf("binary first byte answered %q", got)
	}
	if n := tb.refusals(eventbus.CodeTLSRequired); n != 3 {
		t.Errorf("tls_required refusals = %v, want 3", n)
	}
}

// TestPlaintextRefusedWhileSending: a plaintext client whose request
// arrives in more than one segment is not reset. The listener reads one
// byte of it: closing at once with the rest unread would reset the
// connection, and the client would see its write fail (and, on some
// stacks, lose the 403 written for it) instead of reading why.
func TestPlaintextRefusedWhileSending(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	c, err := net.Dial("tcp", tb.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("POST /bus/v1/session HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	// The rest is sent once the listener has answered (and, before the
	// fix, closed): what it writes first is read here.
	status := make([]byte, len("HTTP/1.1 "))
	if _, err := io.ReadFull(c, status); err != nil {
		t.Fatalf("answer %q, %v", status, err)
	}
	if _, err := c.Write([]byte("Host: x\r\nContent-Length: 0\r\n\r\n")); err != nil {
		t.Fatalf("the rest of the request: %v (the listener reset the connection)", err)
	}
	rest, err := io.ReadAll(c)
	if got := string(status) + string(rest); err != nil || !strings.HasPrefix(got, "HTTP/1.1 403 Forbidden\r\n") {
		t.Fatalf("answer %q, %v", got, err)
	}
}

// TestHTTP11OverTLSRefused: TLS 1.3 and h2 only. A client that did not
// negotiate h2 (it offered only http/1.1, or no ALPN) is closed after the
// handshake without an answer; TLS 1.2 fails the handshake. Each is a
// handshake_failed refusal.
func TestHTTP11OverTLSRefused(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	cfg := func(protos []string, maxVersion uint16) *tls.Config {
		return &tls.Config{RootCAs: tb.roots(t), ServerName: "127.0.0.1", NextProtos: protos, MaxVersion: maxVersion}
	}
	for _, protos := range [][]string{{"http/1.1"}, nil} {
		c, err := tls.Dial("tcp", tb.addr, cfg(protos, 0))
		if err != nil {
			continue // refused in the handshake: as good
		}
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 64)); err == nil || n != 0 {
			t.Errorf("ALPN %v: answered (%d bytes, %v)", protos, n, err)
		}
		c.Close()
	}
	if c, err := tls.Dial("tcp", tb.addr, cfg([]string{"h2"}, tls.VersionTLS12)); err == nil {
		c.Close()
		t.Error("a TLS 1.2 client completed the handshake")
	}
	testutil.Eventually(t, 10*time.Second, "three handshake_failed refusals", func() bool {
		return tb.refusals(eventbus.CodeHandshakeFailed) == 3
	})
}

// TestAuthRefusals: every authentication path with a real h2 client.
func TestAuthRefusals(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	helloA := hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil)
	cases := []struct {
		name       string
		cert       []string // a client certificate naming these ids
		token      string
		hdr        map[string]string
		wantStatus int
		wantCode   string
	}{
		{name: "no token", wantStatus: 401, wantCode: eventbus.CodeUnauthenticated},
		{name: "wrong token", token: "not-a-token", wantStatus: 401, wantCode: eventbus.CodeUnauthenticated},
		{name: "not bearer", hdr: map[string]string{"Authorization": "Basic " + tokenA}, wantStatus: 401, wantCode: eventbus.CodeUnauthenticated},
		{name: "certificate naming no broker", cert: []string{"nobody.example"}, wantStatus: 401, wantCode: eventbus.CodeUnauthenticated},
		{name: "token and a certificate naming another broker", cert: []string{brokerB}, token: tokenA, wantStatus: 403, wantCode: eventbus.CodeForbidden},
		{name: "certificate naming two brokers", cert: []string{brokerA, brokerB}, wantStatus: 403, wantCode: eventbus.CodeForbidden},
		{name: "token and a certificate naming it and another broker", cert: []string{brokerA, brokerB}, token: tokenA, wantStatus: 403, wantCode: eventbus.CodeForbidden},
		{name: "no version", token: tokenA, hdr: map[string]string{eventbus.HeaderVersion: ""}, wantStatus: 400, wantCode: eventbus.CodeUnsupportedVersion},
		{name: "version 0", token: tokenA, hdr: map[string]string{eventbus.HeaderVersion: "0"}, wantStatus: 400, wantCode: eventbus.CodeUnsupportedVersion},
		{name: "token", token: tokenA, wantStatus: 200},
		{name: "certificate", cert: []string{brokerA}, wantStatus: 200},
		{name: "token and the same broker's certificate", cert: []string{brokerA}, token: tokenA, wantStatus: 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var cert *tls.Certificate
			if tc.cert != nil {
				cert = tb.clientCert(t, tc.cert...)
			}
			cc := tb.dial(t, cert)
			pr, pw := io.Pipe()
			go func() { _, _ = pw.Write(eventbus.Encode(helloA)) }()
			resp := post(t, cc, eventbus.PathSession, tc.token, pr, tc.hdr)
			if tc.wantStatus == 200 {
				if resp.StatusCode != 200 {
					st, code := refusalOf(t, resp)
					t.Fatalf("refused %d %s", st, code)
				}
				_ = pw.Close()
				return
			}
			st, code := refusalOf(t, resp)
			if st != tc.wantStatus || code != tc.wantCode {
				t.Errorf("got %d %s, want %d %s", st, code, tc.wantStatus, tc.wantCode)
			}
			if h := resp.Header.Get("WWW-Authenticate"); (st == 401) != strings.HasPrefix(h, "Bearer ") {
				t.Errorf("%d with WWW-Authenticate %q", st, h)
			}
			_ = pw.Close()
		})
	}
}

// TestRevokedCredential: a credential a reload removed is told
// credential_revoked (token and certificate alike), its open session
// ends with credential_revoked, and a re-added one is accepted again.
func TestRevokedCredential(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	rs := openSession(t, tb.dial(t, nil), tokenB, hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil))
	if rs.resp.StatusCode != 200 {
		t.Fatal(refusalOf(t, rs.resp))
	}
	s := tb.settings
	s.Entries = []eventbus.Entry{s.Entries[0], s.Entries[2]}
	if err := tb.Apply(s); err != nil {
		t.Fatal(err)
	}
	if m := rs.next(t); m.Type != eventbus.TypeError || m.Code != eventbus.CodeCredentialRevoked {
		t.Errorf("open session told %+v, want error credential_revoked", m)
	}
	resp := post(t, tb.dial(t, nil), eventbus.PathSession, tokenB, strings.NewReader(""), nil)
	if st, code := refusalOf(t, resp); st != 401 || code != eventbus.CodeCredentialRevoked {
		t.Errorf("removed token: %d %s", st, code)
	}
	resp = post(t, tb.dial(t, tb.clientCert(t, brokerB)), eventbus.PathSession, "", strings.NewReader(""), nil)
	if st, code := refusalOf(t, resp); st != 401 || code != eventbus.CodeCredentialRevoked {
		t.Errorf("removed certificate identity: %d %s", st, code)
	}
	if err := tb.Apply(tb.settings); err != nil {
		t.Fatal(err)
	}
	rs = openSession(t, tb.dial(t, nil), tokenB, hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil))
	if rs.resp.StatusCode != 200 {
		t.Errorf("re-added credential refused: %d", rs.resp.StatusCode)
	}
}

// TestHelloRefusals: the hello's role, client id, namespaces, sources and
// versions are checked against the credential's entry.
func TestHelloRefusals(t *testing.T) {
	t.Parallel()
	// Long enough for a written hello to arrive on a loaded machine.
	tb := startBus(t, func(_ *eventbus.Settings, to *eventbus.Timeouts) { to.Hello = 1500 * time.Millisecond })
	cases := []struct {
		name       string
		token      string
		hello      *eventbus.Message
		raw        string
		wantStatus int
		wantCode   string
	}{
		{"role", tokenA, hello(eventbus.RoleKVListener, brokerA, nil, []string{"vllm-1"}), "", 403, eventbus.CodeForbidden},
		{"client id", tokenA, hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil), "", 403, eventbus.CodeForbidden},
		{"namespace outside the allow-list", tokenB, hello(eventbus.RoleBroker, brokerB, []string{"other"}, nil), "", 403, eventbus.CodeForbidden},
		{"broker with sources", tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, []string{"vllm-1"}), "", 403, eventbus.CodeForbidden},
		{"kv_listener without sources", tokenKV, hello(eventbus.RoleKVListener, kvID, nil, nil), "", 403, eventbus.CodeForbidden},
		{"kv_listener with namespaces", tokenKV, hello(eventbus.RoleKVListener, kvID, []string{"dynamo"}, []string{"vllm-1"}), "", 403, eventbus.CodeForbidden},
		{"kv_listener with an unlisted backend", tokenKV, hello(eventbus.RoleKVListener, kvID, nil, []string{"vllm-9"}), "", 403, eventbus.CodeForbidden},
		{"versions", tokenA, &eventbus.Message{Type: eventbus.TypeHello, Role: eventbus.RoleBroker, ClientID: brokerA, Versions: []int{2}}, "", 400, eventbus.CodeUnsupportedVersion},
		{"not JSON", tokenA, nil, "hello\n", 400, eventbus.CodeInvalidHello},
		{"not a hello", tokenA, nil, `{"type":"heartbeat"}` + "\n", 400, eventbus.CodeInvalidHello},
		{"no hello in time", tokenA, nil, "", 408, eventbus.CodeHelloTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			defer pw.Close()
			line := tc.raw
			if tc.hello != nil {
				line = string(eventbus.Encode(tc.hello))
			}
			if line != "" {
				go func() { _, _ = pw.Write([]byte(line)) }()
			}
			resp := post(t, tb.dial(t, nil), eventbus.PathSession, tc.token, pr, nil)
			if st, code := refusalOf(t, resp); st != tc.wantStatus || code != tc.wantCode {
				t.Errorf("got %d %s, want %d %s", st, code, tc.wantStatus, tc.wantCode)
			}
		})
	}
	// A kv_listener within its backends is welcomed.
	rs := openSession(t, tb.dial(t, nil), tokenKV, hello(eventbus.RoleKVListener, kvID, nil, []string{"vllm-2"}))
	if rs.resp.StatusCode != 200 {
		t.Error(refusalOf(t, rs.resp))
	}
}

// TestHelloTooLong: a hello line past the line bound is refused as an
// invalid hello that says so, not as a channel that ended: the client's
// operator is told what to fix.
func TestHelloTooLong(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	pr, pw := io.Pipe()
	defer pw.Close()
	cc := tb.dial(t, nil)
	// A first request, so that the listener's SETTINGS (its 16 KiB stream
	// window) are known before a long body is sent.
	_ = post(t, cc, eventbus.PathSession, "", http.NoBody, nil).Body.Close()
	go func() { _, _ = pw.Write(bytes.Repeat([]byte("a"), eventbus.MaxLineBytes+8<<10)) }()
	resp := post(t, cc, eventbus.PathSession, tokenA, pr, nil)
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("%d: body %q: %v", resp.StatusCode, data, err)
	}
	if resp.StatusCode != 400 || body.Error.Code != eventbus.CodeInvalidHello || !strings.Contains(body.Error.Message, "longer than") {
		t.Errorf("got %d %+v, want 400 invalid_hello naming the line bound", resp.StatusCode, body.Error)
	}
}

// TestSessionLimits: one hello at a time per credential, max_sessions
// sessions in all, and a credential's newer session supersedes its older
// one.
func TestSessionLimits(t *testing.T) {
	t.Parallel()
	tb := startBus(t, func(s *eventbus.Settings, _ *eventbus.Timeouts) { s.MaxSessions = 1 })

	// A hello being awaited holds the credential's handshake slot.
	pr, pw := io.Pipe()
	defer pw.Close()
	first := postAsync(tb.dial(t, nil), eventbus.PathSession, tokenA, pr)
	// One connection for every probe: a new one each time would reach the
	// listener's connection limit (16) if the hello took 150 ms to arrive.
	probe := tb.dial(t, nil)
	testutil.Eventually(t, 10*time.Second, "the second pre-hello handshake refused", func() bool {
		resp := post(t, probe, eventbus.PathSession, tokenA, strings.NewReader(""), nil)
		st, code := refusalOf(t, resp)
		return st == 429 && code == eventbus.CodeTooManySessions
	})
	go func() { _, _ = pw.Write(eventbus.Encode(hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))) }()
	resp := <-first
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("first session: %v", resp)
	}
	defer resp.Body.Close()
	older := &rawSession{resp: resp, w: pw, lr: eventbus.NewLineReader(resp.Body, eventbus.MaxLineBytes)}
	if m := older.next(t); m.Type != eventbus.TypeWelcome {
		t.Fatalf("%+v", m)
	}

	// max_sessions: 1.
	resp = post(t, tb.dial(t, nil), eventbus.PathSession, tokenB, strings.NewReader(string(eventbus.Encode(hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil)))), nil)
	if st, code := refusalOf(t, resp); st != 429 || code != eventbus.CodeTooManySessions {
		t.Errorf("a session over max_sessions: %d %s", st, code)
	}

	// The same credential again: the newer session supersedes.
	newer := openSession(t, tb.dial(t, nil), tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	if newer.resp.StatusCode != 200 {
		t.Fatal(refusalOf(t, newer.resp))
	}
	if m := older.next(t); m.Type != eventbus.TypeError || m.Code != eventbus.CodeSessionSuperseded {
		t.Errorf("older session told %+v, want session_superseded", m)
	}
	if _, err := older.lr.Next(); err == nil {
		t.Error("the superseded control channel did not end")
	}
	if tb.SessionCount() != 1 {
		t.Errorf("%d sessions", tb.SessionCount())
	}
}

// postAsync sends a POST (with a token unless "") whose answer may take
// long; the channel receives the response (nil on error).
func postAsync(cc *http.ClientConn, path, token string, body io.Reader) <-chan *http.Response {
	ch := make(chan *http.Response, 1)
	req, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1"+path, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set(eventbus.HeaderVersion, "1")
	go func() {
		resp, err := cc.RoundTrip(req)
		if err != nil {
			resp = nil
		}
		ch <- resp
	}()
	return ch
}

// TestDataStreamRefusals: a data stream is accepted only for a stream the
// router commanded on the same credential's session, once.
func TestDataStreamRefusals(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	cc := tb.dial(t, nil)
	rs := openSession(t, cc, tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	target := eventbus.Target{Namespace: "dynamo", Host: "10.0.0.7", Port: 5557, Topic: "kv_metrics"}
	opened := make(chan error, 1)
	var st *eventbus.Stream
	go func() {
		var err error
		st, err = tb.OpenStream(t.Context(), target)
		opened <- err
	}()
	sub := rs.next(t)
	if sub.Type != eventbus.TypeSubscribe || sub.Target == nil || *sub.Target != target {
		t.Fatalf("command %+v", sub)
	}
	stream := func(cc *http.ClientConn, id, token string, hdr map[string]string) (int, string) {
		pr, pw := io.Pipe()
		t.Cleanup(func() { _ = pw.Close() })
		resp := post(t, cc, eventbus.PathStreams+id, token, pr, hdr)
		if resp.StatusCode == 200 {
			return 200, ""
		}
		return refusalOf(t, resp)
	}
	unknown := strings.Repeat("ab", 16)
	if st, code := stream(cc, unknown, tokenA, nil); st != 404 || code != eventbus.CodeUnknownStream {
		t.Errorf("unknown stream: %d %s", st, code)
	}
	if st, code := stream(tb.dial(t, nil), sub.StreamID, tokenB, nil); st != 403 || code != eventbus.CodeForbidden {
		t.Errorf("another credential: %d %s", st, code)
	}
	if st, code := stream(cc, sub.StreamID, tokenA, map[string]string{eventbus.HeaderVersion: "2"}); st != 400 || code != eventbus.CodeUnsupportedVersion {
		t.Errorf("another version: %d %s", st, code)
	}
	if st, _ := stream(cc, sub.StreamID, tokenA, nil); st != 200 {
		t.Fatalf("the commanded stream: %d", st)
	}
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
	if st, code := stream(cc, sub.StreamID, tokenA, nil); st != 409 || code != eventbus.CodeDuplicateStream {
		t.Errorf("duplicate stream: %d %s", st, code)
	}
	if st.Carrier() != brokerA {
		t.Errorf("carrier %q", st.Carrier())
	}
	_ = st.Close()
	if m := rs.next(t); m.Type != eventbus.TypeUnsubscribe || m.StreamID != sub.StreamID {
		t.Errorf("after Close: %+v, want unsubscribe", m)
	}
}

// TestConnectionLimit: at most 4 × max_sessions connections (at least
// 16); the next is closed at once, and a connection that never
// authenticates is closed after the auth timeout.
func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	tb := startBus(t, func(s *eventbus.Settings, to *eventbus.Timeouts) {
		s.MaxSessions = 1
		to.Handshake = 20 * time.Second
	})
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range eventbus.ConnectionLimit(1) {
		c, err := net.Dial("tcp", tb.addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	testutil.Eventually(t, 10*time.Second, "a connection over the limit refused", func() bool {
		c, err := net.Dial("tcp", tb.addr)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF) && tb.refusals(eventbus.CodeConnectionLimit) > 0
	})
	if eventbus.ConnectionLimit(1) != 16 || eventbus.ConnectionLimit(8) != 32 {
		t.Errorf("limits %d %d", eventbus.ConnectionLimit(1), eventbus.ConnectionLimit(8))
	}
}

// TestAuthTimeout: a TLS connection that answers PINGs but sends no
// authenticated request is closed after the auth timeout; one with a
// session is not.
func TestAuthTimeout(t *testing.T) {
	t.Parallel()
	// Long enough for the active connection's handshake, hello and
	// welcome on a loaded machine: its clock runs from the accept.
	tb := startBus(t, func(_ *eventbus.Settings, to *eventbus.Timeouts) { to.Auth = 2 * time.Second })
	idle := tb.dial(t, nil)
	refused := tb.dial(t, nil)
	resp := post(t, refused, eventbus.PathSession, "wrong", strings.NewReader(""), nil)
	if st, _ := refusalOf(t, resp); st != 401 {
		t.Fatal(st)
	}
	active := tb.dial(t, nil)
	rs := openSession(t, active, tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	// The clock runs from the connection's acceptance: one that has not
	// begun its TLS handshake is closed at the auth timeout too, not at
	// the (10 s) handshake timeout.
	silent, err := net.Dial("tcp", tb.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = silent.Close() }()
	_ = silent.SetReadDeadline(time.Now().Add(8 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("a connection without a handshake: read %v, want EOF at the auth timeout", err)
	}
	testutil.Eventually(t, 10*time.Second, "unauthenticated connections closed", func() bool {
		return idle.Err() != nil && refused.Err() != nil
	})
	if tb.refusals(eventbus.CodeHandshakeTimeout) != 0 {
		t.Errorf("handshake_timeout refusals %v, want the auth timeout's only", tb.refusals(eventbus.CodeHandshakeTimeout))
	}
	if tb.refusals(eventbus.CodeAuthTimeout) != 3 {
		t.Errorf("auth_timeout refusals %v", tb.refusals(eventbus.CodeAuthTimeout))
	}
	if err := active.Err(); err != nil {
		t.Errorf("the authenticated connection: %v", err)
	}
	_ = rs
}

// TestReloadNarrowsAllowLists: a reload that takes a declared namespace
// out of a broker's allow-list, or an announced backend out of a
// kv_listener's, or changes a role, ends the session as forbidden.
func TestReloadNarrowsAllowLists(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	a := openSession(t, tb.dial(t, nil), tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo", "other"}, nil))
	b := openSession(t, tb.dial(t, nil), tokenB, hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil))
	k := openSession(t, tb.dial(t, nil), tokenKV, hello(eventbus.RoleKVListener, kvID, nil, []string{"vllm-2"}))
	if !tb.Covers("other") {
		t.Fatal("namespace other not covered")
	}
	s := tb.settings
	s.Entries = append([]eventbus.Entry(nil), s.Entries...)
	s.Entries[0].Namespaces = []string{"dynamo"}
	s.Entries[2].Backends = []string{"vllm-1"}
	if err := tb.Apply(s); err != nil {
		t.Fatal(err)
	}
	for name, rs := range map[string]*rawSession{"broker": a, "kv_listener": k} {
		if m := rs.next(t); m.Type != eventbus.TypeError || m.Code != eventbus.CodeForbidden {
			t.Errorf("%s told %+v, want forbidden", name, m)
		}
	}
	if tb.Covers("other") || !tb.Covers("dynamo") || tb.SessionCount() != 1 {
		t.Errorf("after the reload: covers other %v, dynamo %v, %d sessions", tb.Covers("other"), tb.Covers("dynamo"), tb.SessionCount())
	}
	s.Entries[1].Role = eventbus.RoleKVListener
	s.Entries[1].Namespaces, s.Entries[1].Backends = nil, []string{"vllm-1"}
	if err := tb.Apply(s); err != nil {
		t.Fatal(err)
	}
	if m := b.next(t); m.Type != eventbus.TypeError || m.Code != eventbus.CodeForbidden {
		t.Errorf("role change told %+v, want forbidden", m)
	}
}

// TestReloadDuringHello: a reload that lands while a client's hello is
// awaited judges that session as it judges the open ones: a removed or
// replaced credential (or a replaced client CA, for a certificate) is
// refused 401 credential_revoked, a changed role or a narrowed allow-list
// 403 forbidden, and no session is registered.
func TestReloadDuringHello(t *testing.T) {
	t.Parallel()
	without := func(id string) func(*eventbus.Settings) {
		return func(s *eventbus.Settings) {
			s.Entries = slices.DeleteFunc(s.Entries, func(e eventbus.Entry) bool { return e.ID == id })
		}
	}
	entry := func(id string, edit func(*eventbus.Entry)) func(*eventbus.Settings) {
		return func(s *eventbus.Settings) {
			for i := range s.Entries {
				if s.Entries[i].ID == id {
					edit(&s.Entries[i])
				}
			}
		}
	}
	cases := []struct {
		name       string
		token      string // "" authenticates by a client certificate naming cert
		cert       string
		hello      *eventbus.Message
		reload     func(*eventbus.Settings)
		wantStatus int
		wantCode   string
	}{
		{name: "token removed", token: tokenB, hello: hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil),
			reload: without(brokerB), wantStatus: 401, wantCode: eventbus.CodeCredentialRevoked},
		{name: "token replaced", token: tokenB, hello: hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil),
			reload: entry(brokerB, func(e *eventbus.Entry) { e.TokenHash = eventbus.HashToken("another token") }), wantStatus: 401, wantCode: eventbus.CodeCredentialRevoked},
		{name: "certificate identity removed", cert: brokerB, hello: hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil),
			reload: without(brokerB), wantStatus: 401, wantCode: eventbus.CodeCredentialRevoked},
		{name: "client CA replaced", cert: brokerB, hello: hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil),
			reload: func(s *eventbus.Settings) { s.ClientCAFile = testutil.NewTestPKI(t).CAFile }, wantStatus: 401, wantCode: eventbus.CodeCredentialRevoked},
		{name: "role changed", token: tokenB, hello: hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil),
			reload: entry(brokerB, func(e *eventbus.Entry) {
				e.Role, e.Namespaces, e.Backends = eventbus.RoleKVListener, nil, []string{"vllm-1"}
			}), wantStatus: 403, wantCode: eventbus.CodeForbidden},
		{name: "namespaces narrowed", token: tokenA, hello: hello(eventbus.RoleBroker, brokerA, []string{"dynamo", "other"}, nil),
			reload: entry(brokerA, func(e *eventbus.Entry) { e.Namespaces = []string{"dynamo"} }), wantStatus: 403, wantCode: eventbus.CodeForbidden},
		{name: "backends narrowed", token: tokenKV, hello: hello(eventbus.RoleKVListener, kvID, nil, []string{"vllm-2"}),
			reload: entry(kvID, func(e *eventbus.Entry) { e.Backends = []string{"vllm-1"} }), wantStatus: 403, wantCode: eventbus.CodeForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := startBus(t, nil)
			dial := func() *http.ClientConn {
				if tc.cert != "" {
					return tb.dial(t, tb.clientCert(t, tc.cert))
				}
				return tb.dial(t, nil)
			}
			pr, pw := io.Pipe()
			defer pw.Close()
			pending := postAsync(dial(), eventbus.PathSession, tc.token, pr)
			// The credential's one pre-hello slot is taken: the request is
			// authenticated and its hello awaited.
			// Each probe closes its connection: on a loaded machine the
			// wait takes many probes, and connections left open would
			// reach the listener's connection limit, which refuses the
			// next one outright.
			testutil.Eventually(t, 10*time.Second, "the hello awaited", func() bool {
				probe := dial()
				defer func() { _ = probe.Close() }()
				st, code := refusalOf(t, post(t, probe, eventbus.PathSession, tc.token, strings.NewReader(""), nil))
				return st == 429 && code == eventbus.CodeTooManySessions
			})
			s := tb.settings
			s.Entries = slices.Clone(s.Entries)
			tc.reload(&s)
			if err := tb.Apply(s); err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = pw.Write(eventbus.Encode(tc.hello)) }()
			resp := <-pending
			if resp == nil {
				t.Fatal("no answer")
			}
			defer resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Fatalf("welcomed after the reload (%d sessions), want %d %s", tb.SessionCount(), tc.wantStatus, tc.wantCode)
			}
			if st, code := refusalOf(t, resp); st != tc.wantStatus || code != tc.wantCode {
				t.Errorf("got %d %s, want %d %s", st, code, tc.wantStatus, tc.wantCode)
			}
			if n := tb.SessionCount(); n != 0 {
				t.Errorf("%d sessions registered", n)
			}
		})
	}
}

// TestReloadLowersMaxSessionsDuringHello: a reload that lowers
// max_sessions while a hello is awaited holds for that session too.
func TestReloadLowersMaxSessionsDuringHello(t *testing.T) {
	t.Parallel()
	tb := startBus(t, func(s *eventbus.Settings, _ *eventbus.Timeouts) { s.MaxSessions = 2 })
	first := openSession(t, tb.dial(t, nil), tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	if first.resp.StatusCode != 200 {
		t.Fatal(refusalOf(t, first.resp))
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	pending := postAsync(tb.dial(t, nil), eventbus.PathSession, tokenB, pr)
	// One connection for every probe (see TestSessionLimits).
	probe := tb.dial(t, nil)
	testutil.Eventually(t, 10*time.Second, "the hello awaited", func() bool {
		st, code := refusalOf(t, post(t, probe, eventbus.PathSession, tokenB, strings.NewReader(""), nil))
		return st == 429 && code == eventbus.CodeTooManySessions
	})
	s := tb.settings
	s.MaxSessions = 1
	if err := tb.Apply(s); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = pw.Write(eventbus.Encode(hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil))) }()
	resp := <-pending
	if resp == nil {
		t.Fatal("no answer")
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 {
		t.Fatalf("welcomed past the lowered max_sessions (%d sessions)", tb.SessionCount())
	}
	if st, code := refusalOf(t, resp); st != 429 || code != eventbus.CodeTooManySessions {
		t.Errorf("got %d %s, want 429 %s", st, code, eventbus.CodeTooManySessions)
	}
	if n := tb.SessionCount(); n != 1 {
		t.Errorf("%d sessions", n)
	}
}

// TestIdleTimeoutOwnClock: a session that receives nothing for
// idle_timeout ends then: the heartbeats the router sends it meanwhile do
// not count as lines received.
func TestIdleTimeoutOwnClock(t *testing.T) {
	t.Parallel()
	tb := startBus(t, func(s *eventbus.Settings, _ *eventbus.Timeouts) {
		s.HeartbeatInterval, s.IdleTimeout = 250*time.Millisecond, 300*time.Millisecond
	})
	start := time.Now()
	rs := openSession(t, tb.dial(t, nil), tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	if m := rs.next(t); m.Type != eventbus.TypeError || m.Code != eventbus.CodeIdleTimeout {
		t.Fatalf("told %+v, want error idle_timeout", m)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("idle session ended after %v: the router's own heartbeats kept it", d)
	}
}

// TestIgnoredLinesLogSparingly: a session's invalid or unexpected lines
// are ignored and the session goes on; the log tells the first, not each
// (a client sending nothing else cannot flood it).
func TestIgnoredLinesLogSparingly(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	rs := openSession(t, tb.dial(t, nil), tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	go func() {
		for range 50 {
			if _, err := rs.w.Write([]byte("{not json}\n")); err != nil {
				return
			}
		}
		_, _ = rs.w.Write(eventbus.Encode(&eventbus.Message{Type: eventbus.TypeHeartbeat, Seq: 7}))
	}()
	// The heartbeat after them is answered: the session went on.
	for {
		line, err := rs.lr.Next()
		if err != nil {
			t.Fatalf("control channel: %v", err)
		}
		if m, err := eventbus.Decode(line); err == nil && m.Type == eventbus.TypeHeartbeatAck && m.Seq == 7 {
			break
		}
	}
	if n := strings.Count(tb.logs.String(), "sent an invalid line"); n != 1 {
		t.Errorf("%d warnings for 50 invalid lines, want 1:\n%s", n, tb.logs.String())
	}
}

// TestRefusedRequestsDoNotKeepConnection: a connection closes idle_timeout
// (at most 30 s) after its last accepted request ended; requests the
// listener refuses (here 401s) do not keep a connection that authenticated
// once open, as net/http's idle timeout alone (re-armed by any request)
// would.
func TestRefusedRequestsDoNotKeepConnection(t *testing.T) {
	t.Parallel()
	const idle = 2 * time.Second
	tb := startBus(t, func(s *eventbus.Settings, _ *eventbus.Timeouts) { s.IdleTimeout = idle })
	cc := tb.dial(t, nil)
	rs := openSession(t, cc, tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	if rs.resp.StatusCode != http.StatusOK {
		t.Fatal(rs.resp.StatusCode)
	}
	_ = rs.w.Close() // the session, the last accepted request, ends
	_ = rs.resp.Body.Close()
	ended := time.Now()
	for time.Since(ended) < 4*idle {
		req, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1"+eventbus.PathSession, strings.NewReader(""))
		req.Header.Set("Authorization", "Bearer not-a-token")
		req.Header.Set(eventbus.HeaderVersion, "1")
		resp, err := cc.RoundTrip(req)
		if err != nil {
			if time.Since(ended) < idle {
				t.Fatalf("closed %v after the last accepted request, before idle_timeout: %v", time.Since(ended), err)
			}
			return
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", resp.StatusCode)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Errorf("the connection still serves %v after its last accepted request ended (idle_timeout %v): refused requests keep it open",
		time.Since(ended).Round(time.Millisecond), idle)
}
