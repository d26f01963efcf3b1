package router_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/testutil"
)

// rawCase is a request as a client writes it: its target, field lines
// (Host and Content-Length are added) and body.
type rawCase struct {
	name, target string
	fields       []string
	body         string
}

// seenRequest is what a backend saw of a request.
type seenRequest struct {
	Method, URI string
	Header      http.Header
	Body        string
}

// answer is what a client saw of an answer.
type answer struct {
	Status int
	Header http.Header
	Body   string
}

// recordingBackend answers like an OpenAI server (an SSE stream when the
// body asks for one, a 500 for the model "broken") and records each
// request by its X-Case field, and every byte it read.
type recordingBackend struct {
	url  string
	mu   sync.Mutex
	seen map[string]seenRequest
	raw  bytes.Buffer
}

func newRecordingBackend(t testing.TB) *recordingBackend {
	rb := &recordingBackend{seen: map[string]seenRequest{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rb.mu.Lock()
		rb.seen[r.Header.Get("X-Case")] = seenRequest{r.Method, r.RequestURI, r.Header.Clone(), string(body)}
		rb.mu.Unlock()
		h := w.Header()
		h.Set("X-Upstream", "yes")
		h.Add("X-Upstream-Twice", "1")
		h.Add("X-Upstream-Twice", "2")
		h.Set("X-Dynamo-Worker-Instance-Id", "99")   // a pin in an answer: never relayed
		h.Set("X-Continuum-Routing-Path", "spoofed") // the router's own field: never relayed
		if bytes.Contains(body, []byte(`"hop"`)) {
			// Fields of this hop alone, which a proxy must not relay.
			h.Set("Connection", "X-Hop")
			h.Set("X-Hop", "1")
		}
		switch {
		case bytes.Contains(body, []byte(`"broken"`)):
			h.Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"error":{"message":"the model broke"}}`)
		case bytes.Contains(body, []byte(`"stream":true`)):
			h.Set("Content-Type", "text/event-stream")
			for i := range 3 {
				_, _ = fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
				w.(http.Flusher).Flush()
			}
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		default:
			h.Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"object":"chat.completion","echo":%q}`, body)
		}
	}))
	srv.Listener = &teeListener{Listener: srv.Listener, mu: &rb.mu, to: &rb.raw}
	srv.Start()
	t.Cleanup(srv.Close)
	rb.url = srv.URL
	return rb
}

func (rb *recordingBackend) request(name string) (seenRequest, bool) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	s, ok := rb.seen[name]
	return s, ok
}

// forget drops the request recorded under name, and every byte read so
// far (a fuzz target sends many under one name).
func (rb *recordingBackend) forget(name string) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	delete(rb.seen, name)
	rb.raw.Reset()
}

func (rb *recordingBackend) bytesRead() string {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return rb.raw.String()
}

// teeListener copies what its connections read into one buffer.
type teeListener struct {
	net.Listener
	mu *sync.Mutex
	to *bytes.Buffer
}

func (l *teeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &teeConn{Conn: c, l: l}, nil
}

type teeConn struct {
	net.Conn
	l *teeListener
}

func (c *teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.mu.Lock()
	c.l.to.Write(p[:n])
	c.l.mu.Unlock()
	return n, err
}

// routerPair is two routers on the lean server, each with a backend of
// its own that records what it gets: one serving from the request's bytes
// (ServeRaw), one from http.Requests (the handler without ServeRaw).
type routerPair struct {
	rawBE, mapBE   *recordingBackend
	rawURL, mapURL string
}

// startRouterPair starts a routerPair; with keys, both routers take the
// client key sk-client.
func startRouterPair(tb testing.TB, keys bool) routerPair {
	setup := func(h func(http.Handler) http.Handler) (*recordingBackend, string) {
		be := newRecordingBackend(tb)
		cfg := config.Default()
		cfg.Backends = []config.Backend{{Name: "be", Type: "openai", URL: be.url, Role: config.RoleUnified, Enabled: true,
			APIKey: "sk-backend", Timeout: config.Duration(10 * time.Second)}}
		if keys {
			cfg.APIKeys = []config.APIKey{{KeyHash: "sha256:" + sha256hex("sk-client")}}
		}
		return be, testutil.LeanServer(tb, h(router.New(router.Options{Config: cfg}).Handler()))
	}
	var p routerPair
	p.rawBE, p.rawURL = setup(func(h http.Handler) http.Handler { return h })
	p.mapBE, p.mapURL = setup(func(h http.Handler) http.Handler { return hideRaw{h} })
	return p
}

// FuzzServeRaw sends the same chat completion, with fuzzed field lines
// and body, to the router serving from bytes and to the one serving
// http.Requests (with and without API keys), and requires the same of
// both, as TestServeRawMatchesServeHTTP does for its cases.
func FuzzServeRaw(f *testing.F) {
	for _, c := range rawCases {
		if c.target == "" && len(c.body) < 1<<10 {
			f.Add(strings.Join(c.fields, "\n"), c.body, false)
			f.Add(strings.Join(c.fields, "\n"), c.body, true)
		}
	}
	pairs := map[bool]routerPair{false: startRouterPair(f, false), true: startRouterPair(f, true)}
	f.Fuzz(func(t *testing.T, fields, body string, keys bool) {
		lines := strings.Split(fields, "\n")
		if len(body) > 4<<10 || len(lines) > 32 || len(fields) > 4<<10 {
			return
		}
		for _, l := range lines {
			// Each is one line of the head (the line breaks are the
			// test's): an empty one would end it. The framing is the
			// test's too: a body the lines said was chunked, or longer,
			// would leave both servers waiting for the rest.
			name, _, _ := strings.Cut(l, ":")
			name = strings.ToLower(strings.TrimSpace(name))
			if l == "" || strings.ContainsAny(l, "\r\n") || name == "transfer-encoding" || name == "content-length" {
				return
			}
		}
		if strings.Contains(body, `"broken"`) {
			// The backend answers those with a 500, and enough of them
			// open each router's breaker at a slightly different moment.
			return
		}
		p := pairs[keys]
		c := rawCase{name: "fuzz", fields: lines, body: body}
		send := func(u string, be *recordingBackend) answer {
			be.forget(c.name)
			host := strings.TrimPrefix(u, "http://")
			conn, err := net.Dial("tcp", host)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			return sendRaw(t, conn, bufio.NewReader(conn), host, c)
		}
		got := send(p.rawURL, p.rawBE)
		want := send(p.mapURL, p.mapBE)
		sameThroughBoth(t, c.name, got, want, p.rawBE, p.mapBE)
	})
}

// sameThroughBoth requires that a request sent to the router serving from
// bytes (got, rawBE) and to the one serving http.Requests (want, mapBE)
// came out alike: both reached their backend or neither did, with the same
// method, target, fields and body, and the client got the same answer. A
// request id the router made is one of its own on both (a new one each
// time), and the same to the backend as to the client. It returns what the
// first backend saw and whether the request reached it.
func sameThroughBoth(t *testing.T, name string, got, want answer, rawBE, mapBE *recordingBackend) (seenRequest, bool) {
	t.Helper()
	gotSeen, gotOK := rawBE.request(name)
	wantSeen, wantOK := mapBE.request(name)
	if gotOK != wantOK {
		t.Errorf("%s: reached the backend from bytes %v, as a request %v", name, gotOK, wantOK)
		return gotSeen, gotOK
	}
	for _, a := range []*answer{&got, &want} {
		a.Header.Del("Date")
		if a.Header.Get("Content-Type") == "text/event-stream" {
			// A stream whose events all came in one read goes out
			// with a length, else chunked: timing, on either path.
			a.Header.Del("Content-Length")
		}
	}
	seen := gotSeen
	if gotOK {
		// The id the client got is the one the backend got.
		for _, p := range []struct {
			a *answer
			s seenRequest
		}{{&got, gotSeen}, {&want, wantSeen}} {
			if id := p.a.Header.Get("X-Request-Id"); id == "" || !reflect.DeepEqual(p.s.Header["X-Request-Id"], []string{id}) {
				t.Errorf("%s: the client got request id %q, the backend %q", name, id, p.s.Header["X-Request-Id"])
			}
			if rp := p.a.Header.Values("X-Continuum-Routing-Path"); p.a.Status < 500 && !reflect.DeepEqual(rp, []string{"unified"}) {
				t.Errorf("%s: routing path %q, want the router's own (unified)", name, rp)
			}
		}
		gotSeen.Header, wantSeen.Header = gotSeen.Header.Clone(), wantSeen.Header.Clone()
	}
	if got.Header.Get("X-Request-Id") != want.Header.Get("X-Request-Id") {
		// Made by the router: one of its own each time.
		if len(got.Header.Get("X-Request-Id")) != 26 || len(want.Header.Get("X-Request-Id")) != 26 {
			t.Errorf("%s: request ids %q and %q differ and are not the router's", name, got.Header.Get("X-Request-Id"), want.Header.Get("X-Request-Id"))
		}
		got.Header.Del("X-Request-Id")
		want.Header.Del("X-Request-Id")
		got.Header.Del("Request-Id") // the Messages API's copy of it
		want.Header.Del("Request-Id")
		delete(gotSeen.Header, "X-Request-Id")
		delete(wantSeen.Header, "X-Request-Id")
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: the client's answer\nfrom bytes   %+v\nas a request %+v", name, got, want)
	}
	if !reflect.DeepEqual(gotSeen, wantSeen) {
		t.Errorf("%s: what the backend saw\nfrom bytes   %+v\nas a request %+v", name, gotSeen, wantSeen)
	}
	return seen, gotOK
}

// hideRaw is a handler without ServeRaw: the lean server then builds an
// http.Request for every request, as it did before ServeRaw existed.
type hideRaw struct{ http.Handler }

// sendRaw writes c's request on conn as it is and reads the answer.
func sendRaw(t *testing.T, conn net.Conn, br *bufio.Reader, host string, c rawCase) answer {
	t.Helper()
	var b strings.Builder
	target := c.target
	if target == "" {
		target = "/v1/chat/completions"
	}
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nX-Case: %s\r\n", target, host, c.name)
	for _, f := range c.fields {
		b.WriteString(f + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(c.body), c.body)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", c.name, err)
	}
	return answer{resp.StatusCode, resp.Header, string(body)}
}

// rawCases are requests whose fields a proxy must treat with care: names
// in any case, repeats, pins, credentials, request ids, user agents,
// white space, and bodies the router refuses.
var rawCases = []rawCase{
	{name: "plain", fields: []string{"Content-Type: application/json"}, body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
	{name: "names-in-any-case", fields: []string{"x-custom: a", "X-Custom: b", "x-stainless-os: Linux", "accept: */*", "ACCEPT-LANGUAGE: en"},
		body: `{"model":"m","messages":[]}`},
	{name: "pins", fields: []string{"x-dynamo-worker-instance-id: 7", "X-Dynamo-Prefill-Instance-Id: 3", "x-worker-instance-id: 5",
		"X-Dp-Rank: 1", "x-data-parallel-rank: 2"}, body: `{"model":"m","messages":[]}`},
	{name: "credentials", fields: []string{"Authorization: Bearer sk-client", "x-api-key: k", "Proxy-Authorization: Basic eA=="},
		body: `{"model":"m","messages":[]}`},
	{name: "api-key-only", fields: []string{"x-api-key:  sk-client "}, body: `{"model":"m","messages":[]}`},
	{name: "wrong-key", fields: []string{"Authorization: Bearer nope", "X-Api-Key: sk-client"}, body: `{"model":"m","messages":[]}`},
	{name: "request-id", fields: []string{"X-Request-Id: abc-123"}, body: `{"model":"m","messages":[]}`},
	{name: "request-id-repeated", fields: []string{"x-request-id: abc-123", "X-Request-Id: other"}, body: `{"model":"m","messages":[]}`},
	{name: "request-id-invalid", fields: []string{"X-Request-Id: not valid!", "x-request-id: abc"}, body: `{"model":"m","messages":[]}`},
	{name: "agent-none", body: `{"model":"m","messages":[]}`},
	{name: "agent-empty", fields: []string{"User-Agent: "}, body: `{"model":"m","messages":[]}`},
	{name: "agent-twice", fields: []string{"user-agent: first/1", "User-Agent: second/2"}, body: `{"model":"m","messages":[]}`},
	{name: "idempotency", fields: []string{"Idempotency-Key: k1"}, body: `{"model":"m","messages":[]}`},
	{name: "encoding-and-type", fields: []string{"Accept-Encoding: gzip", "Content-Type: text/plain", "Connection: keep-alive"},
		body: `{"model":"m","messages":[]}`},
	{name: "hop-by-hop", fields: []string{"Connection: keep-alive, X-Hop-Secret", "X-Hop-Secret: s", "x-custom: kept"},
		body: `{"model":"m","messages":[],"hop":1}`},
	{name: "white-space", fields: []string{"X-Spaced:    v  w   ", "X-Tab:\tt", "X-Empty:"}, body: `{"model":"m","messages":[]}`},
	// Beyond what the router's own client sends inline: through
	// http.Transport, the client's lines made a header map first.
	{name: "large-body", fields: []string{"x-custom: big", "User-Agent: big/1"},
		body: `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("long ", 14000) + `"}]}`},
	{name: "nvext", body: `{"model":"m","messages":[],"nvext":{"backend_instance_id":4,"token_data":[1,2],"greed_sampling":true}}`},
	{name: "stream", body: `{"model":"m","stream":true,"messages":[]}`},
	{name: "completions", target: "/v1/completions", body: `{"model":"m","prompt":"once upon"}`},
	{name: "backend-fails", body: `{"model":"broken","messages":[]}`},
	{name: "not-json", body: `{"model":`},
	{name: "no-model", body: `{"messages":[]}`},
	{name: "query", target: "/v1/chat/completions?x=1", body: `{"model":"m","messages":[]}`},
	{name: "reveal", fields: []string{"x-backend: 1"}, body: `{"model":"m","messages":[]}`},
	{name: "other-route", target: "/v1/messages", fields: []string{"anthropic-version: 2023-06-01"},
		body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
}

// TestServeRawMatchesServeHTTP sends each request through the router twice
// on the lean server, from its bytes (ServeRaw) and as an http.Request (the
// handler without ServeRaw), each router with a backend of its own, and
// requires the same of both: what the backend saw (method, target, fields
// as a header map, body) and what the client got (status, fields, body),
// a request id the router made aside (a new one each time: both must carry
// one, the same to the backend as to the client).
func TestServeRawMatchesServeHTTP(t *testing.T) {
	t.Parallel()
	for _, keys := range []bool{false, true} {
		t.Run(fmt.Sprintf("api_keys=%v", keys), func(t *testing.T) {
			t.Parallel()
			p := startRouterPair(t, keys)
			rawBE, rawURL, mapBE, mapURL := p.rawBE, p.rawURL, p.mapBE, p.mapURL
			dial := func(u string) (net.Conn, *bufio.Reader, string) {
				host := strings.TrimPrefix(u, "http://")
				conn, err := net.Dial("tcp", host)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = conn.Close() })
				return conn, bufio.NewReader(conn), host
			}
			rc, rbr, rhost := dial(rawURL)
			mc, mbr, mhost := dial(mapURL)
			for _, c := range rawCases {
				if keys && !strings.Contains("plain credentials api-key-only wrong-key request-id", c.name) {
					continue
				}
				got := sendRaw(t, rc, rbr, rhost, c)
				want := sendRaw(t, mc, mbr, mhost, c)
				gotSeen, reached := sameThroughBoth(t, c.name, got, want, rawBE, mapBE)
				if reached && c.name == "hop-by-hop" {
					// The fields a Connection field names went no further.
					if v := gotSeen.Header.Values("X-Hop-Secret"); len(v) > 0 || gotSeen.Header.Get("X-Custom") != "kept" {
						t.Errorf("hop-by-hop: the backend got %v", gotSeen.Header)
					}
					if v := got.Header.Values("X-Hop"); len(v) > 0 || got.Header.Get("X-Upstream") != "yes" {
						t.Errorf("hop-by-hop: the client got %v", got.Header)
					}
				}
			}
			if keys {
				return
			}
			// The lines went as the client wrote them from bytes, and from
			// the map in canonical form: the two paths were both taken.
			if raw := rawBE.bytesRead(); !strings.Contains(raw, "\r\nx-custom: a\r\n") {
				t.Errorf("the backend of the router serving from bytes read no line x-custom as sent:\n%s", raw)
			}
			if raw := mapBE.bytesRead(); !strings.Contains(raw, "\r\nX-Custom: a\r\n") {
				t.Errorf("the backend of the router serving requests read no line X-Custom:\n%s", raw)
			}
		})
	}
}
