package eventbus

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/telemetry"
)

// A connection to the event bus listener is classified on its first byte
// (a TLS handshake record or a refusal), and each request on it by its
// credentials, its protocol version header, its method and its path; all
// of that comes from a peer not yet authenticated. These fuzz targets
// hold the classification to the rules the listener documents, written
// here as a reference: one refusal per refused connection or request,
// counted under a code of RefusalCodes, with the status and body the
// protocol names.

// Tokens of the fuzzed bus's entries.
const fuzzTokenA, fuzzTokenB = "token-of-broker-a", "token-of-kv-listener"

func fuzzBus(tb testing.TB) (*Bus, *telemetry.EventBusMetrics) {
	tb.Helper()
	m := telemetry.NewEventBusMetrics(nil)
	b, err := New(Settings{MaxSessions: 2, MaxStreamsPerSession: 4, MaxSessionBufferBytes: 4 * MinSessionBudgetPerStream,
		HeartbeatInterval: time.Second, IdleTimeout: 30 * time.Second,
		Entries: []Entry{
			{ID: "broker-a.dynamo", Role: RoleBroker, TokenHash: HashToken(fuzzTokenA), Namespaces: []string{"dynamo"}},
			{ID: "kv-listener-a", Role: RoleKVListener, TokenHash: HashToken(fuzzTokenB), Backends: []string{"vllm-1"}},
		}}, m, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return b, m
}

// refusalCounts reads the refusal counter of every code.
func refusalCounts(m *telemetry.EventBusMetrics) map[string]float64 {
	out := map[string]float64{}
	for _, c := range RefusalCodes {
		out[c] = promtest.ToFloat64(m.Refusals.WithLabelValues(c))
	}
	return out
}

// checkOneRefusal fails unless exactly one refusal, of code, was counted
// between before and after.
func checkOneRefusal(t *testing.T, before, after map[string]float64, code string) {
	t.Helper()
	for c, n := range after {
		want := before[c]
		if c == code {
			want++
		}
		if n != want {
			t.Fatalf("refusals of %s went %v to %v; want one refusal, of %q", c, before[c], n, code)
		}
	}
}

// refVersion reads a protocol version header as a decimal integer (an
// optional sign, then digits only, within int's range): ok when it is a
// version at all, at least 1.
func refVersion(s string) (v int, ok bool) {
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	if s == "" {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
		if n > 1<<63 {
			return 0, false
		}
	}
	if neg || n == 0 || n > 1<<63-1 {
		return 0, false // negative, zero, or past int64's range
	}
	return int(n), true
}

// refClassify is the listener's answer to a request with no body on an
// authenticated-by-nothing connection: the credentials first (a bearer
// token of a configured entry, the scheme without case), then the
// version, then POST only, then the path (a session's hello is missing,
// a stream is unknown to every session).
func refClassify(method, path, version, auth string) (int, string) {
	scheme, token, spaced := strings.Cut(auth, " ")
	if !spaced || !strings.EqualFold(scheme, "bearer") || (token != fuzzTokenA && token != fuzzTokenB) {
		return http.StatusUnauthorized, CodeUnauthenticated
	}
	v, ok := refVersion(version)
	switch {
	case !ok:
		return http.StatusBadRequest, CodeUnsupportedVersion
	case method != "POST":
		return http.StatusNotFound, CodeNotFound
	case path == "/bus/v1/session":
		return http.StatusBadRequest, CodeInvalidHello
	case strings.HasPrefix(path, "/bus/v1/streams/") && v != 1:
		return http.StatusBadRequest, CodeUnsupportedVersion
	case strings.HasPrefix(path, "/bus/v1/streams/"):
		return http.StatusNotFound, CodeUnknownStream
	}
	return http.StatusNotFound, CodeNotFound
}

// FuzzServeHTTPClassify: every request the listener refuses (here all of
// them: none carries a hello, no stream is open) is answered with the
// status and code the reference gives, a JSON body {"error":{"code",
// "message"}}, a bearer challenge on a 401, and one refusal counted; no
// session or pre-hello slot outlives it.
func FuzzServeHTTPClassify(f *testing.F) {
	for _, c := range []struct{ method, path, version, auth string }{
		{"POST", PathSession, "1", "Bearer " + fuzzTokenA},
		{"POST", PathStreams + "0123456789abcdef0123456789abcdef", "1", "Bearer " + fuzzTokenB},
		{"POST", PathStreams + "x", "2", "bearer " + fuzzTokenA},
		{"GET", PathSession, "1", "Bearer " + fuzzTokenA},
		{"POST", "/bus/v2/session", "1", "Bearer " + fuzzTokenA},
		{"POST", PathSession, "", "Bearer " + fuzzTokenA},
		{"POST", PathSession, "0", "Bearer " + fuzzTokenA},
		{"POST", PathSession, "+1", "Bearer " + fuzzTokenA},
		{"POST", PathSession, "9223372036854775808", "Bearer " + fuzzTokenA},
		{"POST", PathSession, "1", "Basic " + fuzzTokenA},
		{"POST", PathSession, "1", "Bearer  " + fuzzTokenA},
		{"POST", PathSession, "1", "Bearer"},
		{"POST", PathSession, "1", ""},
	} {
		f.Add(c.method, c.path, c.version, c.auth)
	}
	b, m := fuzzBus(f)
	f.Fuzz(func(t *testing.T, method, path, version, auth string) {
		server, client := net.Pipe()
		defer func() { _ = server.Close(); _ = client.Close() }()
		bc := &busConn{raw: server, done: make(chan struct{})}
		req := &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{}, Body: http.NoBody}
		req.Header.Set(HeaderVersion, version)
		req.Header.Set("Authorization", auth)
		req = req.WithContext(context.WithValue(context.Background(), connKey{}, bc))
		rec := httptest.NewRecorder()
		before := refusalCounts(m)
		b.serveHTTP(rec, req)

		status, code := refClassify(method, path, version, auth)
		if rec.Code != status {
			t.Fatalf("%q %q version %q auth %q: status %d, want %d (%s)", method, path, version, auth, rec.Code, status, rec.Body)
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code != code || body.Error.Message == "" {
			t.Fatalf("%q %q version %q auth %q: body %s (%v), want code %q", method, path, version, auth, rec.Body, err, code)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("refusal of content type %q", ct)
		}
		if (status == http.StatusUnauthorized) != (rec.Header().Get("WWW-Authenticate") != "") {
			t.Fatalf("status %d with challenge %q", status, rec.Header().Get("WWW-Authenticate"))
		}
		checkOneRefusal(t, before, refusalCounts(m), code)
		b.mu.Lock()
		left := len(b.sessions) + len(b.preHello)
		b.mu.Unlock()
		if left != 0 || bc.authed.Load() {
			t.Fatalf("a refused request left %d sessions or pre-hello slots (authed %v)", left, bc.authed.Load())
		}
	})
}

// FuzzFirstByte: a connection whose first byte is not a TLS handshake
// record is refused as tls_required, told why in a well-formed HTTP/1.1
// 403 answer when that byte is 7-bit (a plaintext client) and in nothing
// otherwise; a handshake record goes on to TLS (which, with no TLS files
// loaded here, fails as handshake_failed); an empty connection is no
// refusal. Either way exactly one refusal is counted at most, the
// connection is closed and its slot released.
func FuzzFirstByte(f *testing.F) {
	for _, s := range []string{"GET /bus/v1/session HTTP/1.1\r\nHost: x\r\n\r\n", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"\x16\x03\x01\x00\x05hello", "\x80\x00", "\xff", "", "\x00", "\x15\x03\x03"} {
		f.Add([]byte(s))
	}
	b, m := fuzzBus(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		server, client := net.Pipe()
		defer func() { _ = client.Close() }()
		bc, ok := b.admit(server)
		if !ok {
			t.Fatal("the connection was not admitted")
		}
		before := refusalCounts(m)
		served := make(chan struct{})
		go func() { defer close(served); b.serveConn(context.Background(), bc) }()
		if len(data) == 0 {
			_ = client.Close() // the peer leaves before sending anything
		} else {
			go func() { _, _ = client.Write(data) }() // fails once the listener closes
		}
		_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
		answer, err := io.ReadAll(client)
		if err != nil && len(data) > 0 && !isClosed(err) {
			t.Fatalf("reading the answer: %v", err)
		}
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatal("serveConn did not end")
		}
		after := refusalCounts(m)
		switch {
		case len(data) == 0:
			checkOneRefusal(t, before, after, "")
		case data[0] == tlsRecordHandshake:
			checkOneRefusal(t, before, after, CodeHandshakeFailed)
		default:
			checkOneRefusal(t, before, after, CodeTLSRequired)
		}
		if len(data) == 0 || data[0] >= 0x80 || data[0] == tlsRecordHandshake {
			if len(answer) != 0 {
				t.Fatalf("first byte %#x answered %q", data[:min(len(data), 1)], answer)
			}
		} else {
			checkPlainRefusal(t, answer)
		}
		b.mu.Lock()
		_, held := b.conns[bc]
		b.mu.Unlock()
		if held {
			t.Fatal("the connection's slot was not released")
		}
	})
}

// isClosed reports whether err is the end of a pipe the other side closed.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe)
}

// checkPlainRefusal checks the answer to a plaintext client: an HTTP/1.1
// 403 whose Content-Length is its JSON body's, code tls_required, and
// nothing after it.
func checkPlainRefusal(t *testing.T, answer []byte) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(answer))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("answer %q: %v", answer, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("Content-Length") != strconv.Itoa(len(body)) || !resp.Close {
		t.Fatalf("answer %q: status %d, %d body bytes (%v)", answer, resp.StatusCode, len(body), err)
	}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != CodeTLSRequired || e.Error.Message == "" {
		t.Fatalf("answer body %s (%v)", body, err)
	}
	if br.Buffered() != 0 {
		t.Fatalf("%d bytes after the answer", br.Buffered())
	}
}
