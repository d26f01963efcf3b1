package router

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
)

// countingBackend serves h and counts the connections it accepted.
func countingBackend(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func post(t *testing.T, rt http.RoundTripper, ctx context.Context, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return rt.RoundTrip(req)
}

func mustRead(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func streamingHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	if r.URL.Path == "/stream" {
		w.Header().Set("Content-Type", "text/event-stream")
		for range 3 {
			_, _ = io.WriteString(w, "data: x\n\n")
			w.(http.Flusher).Flush()
		}
		return
	}
	_, _ = io.WriteString(w, `{"ok":true}`)
}

// TestUpstreamKeepAlive: answers read to their end, buffered or streamed,
// leave their connection for the next request.
func TestUpstreamKeepAlive(t *testing.T) {
	t.Parallel()
	srv, conns := countingBackend(t, streamingHandler)
	rt := newTransport()
	for i := range 6 {
		path := "/buffered"
		if i%2 == 1 {
			path = "/stream"
		}
		resp, err := post(t, rt, t.Context(), srv.URL+path, `{"n":1}`)
		if err != nil {
			t.Fatal(err)
		}
		if body := mustRead(t, resp); resp.StatusCode != http.StatusOK || body == "" {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 6 requests in turn, want 1", n)
	}
}

// TestUpstreamBackendClosedIdle: a connection the backend closed while it
// was idle (its keep-alive timeout) is not used: the next request goes on
// a new one and succeeds.
func TestUpstreamBackendClosedIdle(t *testing.T) {
	t.Parallel()
	srv, conns := countingBackend(t, streamingHandler)
	rt := newTransport().(*upstream)
	resp, err := post(t, rt, t.Context(), srv.URL, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, resp)
	srv.CloseClientConnections()
	// Wait until the backend's FIN has reached the idle connection.
	rt.mu.Lock()
	var idle *upConn
	for _, l := range rt.idle {
		idle = (*l)[0]
	}
	rt.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for idle.open() {
		if time.Now().After(deadline) {
			t.Fatal("the closed connection still looks open")
		}
		time.Sleep(time.Millisecond)
	}
	resp, err = post(t, rt, t.Context(), srv.URL, `{}`)
	if err != nil {
		t.Fatalf("a request after the backend closed the idle connection: %v", err)
	}
	mustRead(t, resp)
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestUpstreamEarlyClose: a body closed before its end closes its
// connection (the rest of a stream is not read), and the backend sees the
// request end.
func TestUpstreamEarlyClose(t *testing.T) {
	t.Parallel()
	ended := make(chan struct{})
	srv, conns := countingBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/endless" {
			streamingHandler(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, "data: more\n\n"); err != nil {
				break
			}
			w.(http.Flusher).Flush()
		}
		close(ended)
	})
	rt := newTransport()
	resp, err := post(t, rt, t.Context(), srv.URL+"/endless", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: more\n" {
		t.Fatalf("%q, %v", line, err)
	}
	_ = resp.Body.Close()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's stream went on after the body was closed")
	}
	resp, err = post(t, rt, t.Context(), srv.URL, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, resp)
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the closed body's is not reused)", n)
	}
}

// TestUpstreamContext: the request's context ends a wait for the answer's
// head and a read of its body, with the context's error, and the
// connection is not reused.
func TestUpstreamContext(t *testing.T) {
	t.Parallel()
	srv, conns := countingBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/body" {
			_, _ = io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	})
	rt := newTransport()

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := post(t, rt, ctx, srv.URL+"/head", `{}`); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for the head: %v, want a deadline error", err)
	}

	ctx, cancel = context.WithCancel(t.Context())
	resp, err := post(t, rt, ctx, srv.URL+"/body", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: first\n" {
		t.Fatalf("%q, %v", line, err)
	}
	cancel()
	if _, err := io.ReadAll(br); !errors.Is(err, context.Canceled) {
		t.Fatalf("reading the body after the client went away: %v, want context.Canceled", err)
	}
	_ = resp.Body.Close()
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestUpstreamDialError: a backend that cannot be reached fails with the
// dial's *net.OpError, which dispatch retries on another replica.
func TestUpstreamDialError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, err = post(t, newTransport(), t.Context(), "http://"+addr+"/v1/chat/completions", `{}`)
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("%v, want a dial *net.OpError", err)
	}
}

// rawBackend serves the requests of each connection in turn with answer,
// written as bytes; answer returns false to close the connection after its
// answer (or without one, when it wrote nothing). It reads each request's
// body before answering unless headOnly. It counts connections and requests.
type rawBackend struct {
	url             string
	conns, requests atomic.Int32
}

func newRawBackend(t *testing.T, headOnly bool, answer func(w io.Writer, conn, req int) bool) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rb := &rawBackend{url: "http://" + ln.Addr().String()}
	var open sync.WaitGroup
	var mu sync.Mutex
	var accepted []net.Conn
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		// The client's idle connections stay open: close them here.
		mu.Lock()
		for _, c := range accepted {
			_ = c.Close()
		}
		mu.Unlock()
		open.Wait()
	})
	serve := func(c net.Conn, conn int) {
		defer open.Done()
		defer func() { _ = c.Close() }()
		br := bufio.NewReader(c)
		for i := 0; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			rb.requests.Add(1)
			if !headOnly {
				_, _ = io.Copy(io.Discard, req.Body)
			}
			bw := bufio.NewWriter(c)
			more := answer(bw, conn, i)
			_ = bw.Flush()
			if !more {
				return
			}
		}
	}
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
			open.Add(1)
			go serve(c, int(rb.conns.Add(1)))
		}
	}()
	return rb
}

// answerOK answers "ok" and keeps the connection.
func answerOK(w io.Writer, _, _ int) bool {
	_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	return true
}

func send(t *testing.T, rt http.RoundTripper, method, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return rt.RoundTrip(req)
}

// TestUpstreamReuse: whether an answer leaves its connection for the next
// request, by how the answer ends, with the backend keeping every
// connection open unless it says otherwise.
func TestUpstreamReuse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer string
		close  bool // the backend closes after the answer (a body to the end of the connection)
		body   string
		fails  bool  // the round trip is an error
		conns  int32 // for two requests in turn
	}{
		{name: "content-length", answer: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", body: "ok", conns: 1},
		{name: "chunked with trailer", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n", body: "ok", conns: 1},
		{name: "no content", answer: "HTTP/1.1 204 No Content\r\n\r\n", conns: 1},
		{name: "connection close", answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", body: "ok", conns: 2},
		{name: "http/1.0", answer: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", body: "ok", conns: 2},
		{name: "http/1.0 keep-alive", answer: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", body: "ok", conns: 1},
		{name: "body to the end of the connection", answer: "HTTP/1.1 200 OK\r\n\r\nok", close: true, body: "ok", conns: 2},
		{name: "100 continue first", answer: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", body: "ok", conns: 1},
		// A switch the request did not ask for is no answer: an error,
		// and the connection is not kept.
		{name: "switching protocols", answer: "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n", fails: true, conns: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rb := newRawBackend(t, false, func(w io.Writer, _, _ int) bool {
				_, _ = io.WriteString(w, tc.answer)
				return !tc.close
			})
			rt := newTransport()
			for range 2 {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, rb.url, strings.NewReader(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Expect", "100-continue")
				resp, err := rt.RoundTrip(req)
				if tc.fails {
					if err == nil {
						_ = resp.Body.Close()
						t.Fatalf("status %d, want an error", resp.StatusCode)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if body := mustRead(t, resp); body != tc.body {
					t.Fatalf("body %q, want %q", body, tc.body)
				}
			}
			if n := rb.conns.Load(); n != tc.conns {
				t.Fatalf("%d connections, want %d", n, tc.conns)
			}
		})
	}
}

// TestUpstreamRetry: a request that finds its kept-alive connection closed
// by the backend before any answer (the backend's idle timeout racing the
// request) is sent again on a new connection when it is idempotent, and
// is not when it is a POST the backend may have acted on.
func TestUpstreamRetry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method   string
		header   string
		ok       bool
		requests int32 // the backend saw, over three requests
	}{
		{method: http.MethodGet, ok: true, requests: 3},
		{method: http.MethodPost, ok: false, requests: 2},
		{method: http.MethodPost, header: "Idempotency-Key", ok: true, requests: 3},
	} {
		t.Run(tc.method+tc.header, func(t *testing.T) {
			t.Parallel()
			// The second request on the first connection is read and the
			// connection closed without an answer.
			rb := newRawBackend(t, false, func(w io.Writer, conn, req int) bool {
				if conn == 1 && req == 1 {
					return false
				}
				return answerOK(w, conn, req)
			})
			rt := newTransport()
			resp, err := send(t, rt, tc.method, rb.url, "{}")
			if err != nil {
				t.Fatal(err)
			}
			mustRead(t, resp)
			req, err := http.NewRequestWithContext(t.Context(), tc.method, rb.url, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.header != "" {
				req.Header.Set(tc.header, "k1")
			}
			resp, err = rt.RoundTrip(req)
			if tc.ok != (err == nil) {
				t.Fatalf("the request on a connection closed under it: %v, want success %v", err, tc.ok)
			}
			if err == nil {
				if body := mustRead(t, resp); body != "ok" {
					t.Fatalf("%q", body)
				}
			}
			if n := rb.requests.Load(); n != tc.requests {
				t.Fatalf("the backend saw %d requests, want %d", n, tc.requests)
			}
		})
	}
}

// failingWrites is a connection whose writes fail before writing anything.
type failingWrites struct{ net.Conn }

func (failingWrites) Write([]byte) (int, error) { return 0, errors.New("broken") }

// TestUpstreamRetryUnsent: a POST none of which reached its kept-alive
// connection is sent again, whole, on a new one.
func TestUpstreamRetryUnsent(t *testing.T) {
	t.Parallel()
	var bodies []string
	var mu sync.Mutex
	srv, conns := countingBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})
	rt := newTransport().(*upstream)
	resp, err := post(t, rt, t.Context(), srv.URL, `{"n":1}`)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, resp)
	rt.mu.Lock()
	for _, lp := range rt.idle {
		l := *lp
		l[0].conn = failingWrites{l[0].conn}
		l[0].rw = l[0].conn
	}
	rt.mu.Unlock()
	resp, err = post(t, rt, t.Context(), srv.URL, `{"n":2}`)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, resp)
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(bodies, " ") != `{"n":1} {"n":2}` || conns.Load() != 2 {
		t.Fatalf("the backend read %q on %d connections", bodies, conns.Load())
	}
}

// TestUpstreamAnswerBeforeBody: a backend that answers from the request's
// head, reads none of its body and closes the connection: the answer
// reaches the caller.
func TestUpstreamAnswerBeforeBody(t *testing.T) {
	t.Parallel()
	rb := newRawBackend(t, true, func(w io.Writer, _, _ int) bool {
		_, _ = io.WriteString(w, "HTTP/1.1 413 Request Entity Too Large\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbig")
		return false
	})
	// As large as the router's client sends itself (the headers count too).
	resp, err := send(t, newTransport(), http.MethodPost, rb.url, strings.Repeat("x", maxInlineBody-1024))
	if err != nil {
		t.Fatal(err)
	}
	if body := mustRead(t, resp); resp.StatusCode != http.StatusRequestEntityTooLarge || body != "big" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

// TestUpstreamIdleTimeout: a backend that closes connections idle for
// longer than its idle timeout (a real server's keep-alive timeout): the
// request after the close goes on a new connection and succeeds.
func TestUpstreamIdleTimeout(t *testing.T) {
	t.Parallel()
	var closed atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(streamingHandler))
	srv.Config.IdleTimeout = 20 * time.Millisecond
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	rt := newTransport()
	for i := range 3 {
		resp, err := post(t, rt, t.Context(), srv.URL, `{}`)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		mustRead(t, resp)
		deadline := time.Now().Add(10 * time.Second)
		for closed.Load() <= int32(i) {
			if time.Now().After(deadline) {
				t.Fatal("the backend did not close the idle connection")
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestUpstreamPoolBound: the idle connections kept for one backend are
// bounded; the others are closed.
func TestUpstreamPoolBound(t *testing.T) {
	t.Parallel()
	u := newTransport().(*upstream)
	var peers []net.Conn
	for range maxIdleConnsPerBE + 10 {
		a, b := net.Pipe()
		peers = append(peers, b)
		u.put(&upConn{conn: a, rw: a, addr: "be:80"})
	}
	u.mu.Lock()
	n := len(*u.idle["be:80"])
	u.mu.Unlock()
	if n != maxIdleConnsPerBE {
		t.Fatalf("%d idle connections kept, want %d", n, maxIdleConnsPerBE)
	}
	// The connections beyond the bound were closed: their peers read EOF.
	for _, p := range peers[maxIdleConnsPerBE:] {
		if _, err := p.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("a connection beyond the bound is open: %v", err)
		}
	}
	u.CloseIdleConnections()
	for _, p := range peers {
		_ = p.Close()
	}
}

// TestUpstreamInformational: an informational answer (103) before the
// answer is skipped.
func TestUpstreamInformational(t *testing.T) {
	t.Parallel()
	rb := newRawBackend(t, false, func(w io.Writer, _, _ int) bool {
		_, _ = io.WriteString(w, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	resp, err := post(t, newTransport(), t.Context(), rb.url, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if body := mustRead(t, resp); resp.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

// TestUpstreamHeadTooLarge: an answer's head is bounded.
func TestUpstreamHeadTooLarge(t *testing.T) {
	t.Parallel()
	rb := newRawBackend(t, false, func(w io.Writer, _, _ int) bool {
		_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nX-Big: ")
		chunk := strings.Repeat("x", 1<<20)
		for range maxResponseHeaderBytes>>20 + 1 {
			_, _ = io.WriteString(w, chunk)
		}
		_, _ = io.WriteString(w, "\r\n\r\n")
		return false
	})
	if _, err := post(t, newTransport(), t.Context(), rb.url, `{}`); !errors.Is(err, errResponseHeadTooLarge) {
		t.Fatalf("%v, want errResponseHeadTooLarge", err)
	}
}

// TestUpstreamLargeBody: a body larger than maxInlineBody goes through
// http.Transport, to a backend that answers before it reads it.
func TestUpstreamLargeBody(t *testing.T) {
	t.Parallel()
	srv, _ := countingBackend(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "early")
	})
	resp, err := post(t, newTransport(), t.Context(), srv.URL, strings.Repeat("x", 4<<20))
	if err != nil {
		t.Fatal(err)
	}
	if body := mustRead(t, resp); body != "early" {
		t.Fatalf("%q", body)
	}
}

// TestUpstreamSweep: connections idle longer than the idle timeout are
// closed.
func TestUpstreamSweep(t *testing.T) {
	t.Parallel()
	srv, _ := countingBackend(t, streamingHandler)
	rt := newTransport().(*upstream)
	resp, err := post(t, rt, t.Context(), srv.URL, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, resp)
	rt.mu.Lock()
	rt.sweep(time.Now().Add(upstreamIdleTimeout))
	n, lists := rt.n, len(rt.idle)
	rt.mu.Unlock()
	if n != 0 || lists != 0 {
		t.Fatalf("%d idle connections in %d lists after the sweep", n, lists)
	}
}

// TestUpstreamIdleBookkeeping: taking a backend's last idle connection
// leaves its key with an empty list (kept for the put that follows), which
// the next sweep drops; the sweeper runs while connections are held, and
// a body of unknown length goes through http.Transport (it may be of any
// size), as does an upgrade.
func TestUpstreamIdleBookkeeping(t *testing.T) {
	t.Parallel()
	srv, conns := countingBackend(t, streamingHandler)
	rt := newTransport().(*upstream)
	resp, err := post(t, rt, t.Context(), srv.URL, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, resp)
	rt.mu.Lock()
	armed := rt.sweeper != nil
	rt.mu.Unlock()
	if !armed {
		t.Fatal("an idle connection is held without the sweeper armed")
	}
	c, err := rt.get(t.Context(), time.Time{}, srv.Listener.Addr().String(), true)
	if err != nil || !c.reused {
		t.Fatalf("get: %v (reused %v)", err, c != nil && c.reused)
	}
	_ = c.conn.Close()
	rt.mu.Lock()
	keys, held := len(rt.idle), len(*rt.idle[srv.Listener.Addr().String()])
	rt.sweep(time.Now())
	swept := len(rt.idle)
	rt.mu.Unlock()
	if keys != 1 || held != 0 || swept != 0 {
		t.Fatalf("after the last idle connection was taken: %d keys holding %d connections, %d after a sweep; want 1, 0, 0", keys, held, swept)
	}
	before := conns.Load()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, io.NopCloser(strings.NewReader(`{}`)))
	req.ContentLength = 0 // unknown
	resp, err = rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, resp)
	rt.mu.Lock()
	n := rt.n
	rt.mu.Unlock()
	if n != 0 || conns.Load() != before+1 {
		t.Fatalf("an unsized body went through the inline client: %d idle, %d connections", n, conns.Load()-before)
	}
	rt.CloseIdleConnections()
}

// TestUpstreamIdleTimeout408: a backend that times out a kept-alive
// connection as a request goes out on it answers 408 and closes: the
// request (a POST too: a 408 says it was not acted on) is sent once more
// on a new connection. A 408 on a new connection is the answer.
func TestUpstreamIdleTimeout408(t *testing.T) {
	t.Parallel()
	timeout := func(w io.Writer) bool {
		_, _ = io.WriteString(w, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		return false
	}
	rb := newRawBackend(t, false, func(w io.Writer, conn, req int) bool {
		if conn == 1 && req == 1 { // the second request on the first connection
			return timeout(w)
		}
		return answerOK(w, conn, req)
	})
	rt := newTransport()
	for i := range 2 {
		resp, err := post(t, rt, t.Context(), rb.url, "{}")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if body := mustRead(t, resp); resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if n := rb.requests.Load(); n != 3 {
		t.Fatalf("the backend saw %d requests, want 3 (one timed out, sent again)", n)
	}

	fresh := newRawBackend(t, false, func(w io.Writer, _, _ int) bool { return timeout(w) })
	resp, err := post(t, newTransport(), t.Context(), fresh.url, "{}")
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, resp)
	if resp.StatusCode != http.StatusRequestTimeout || fresh.requests.Load() != 1 {
		t.Fatalf("a 408 on a new connection: status %d after %d requests, want 408 after 1", resp.StatusCode, fresh.requests.Load())
	}
}

// TestUpstreamCloseDuringRead: closing a body while another goroutine's
// read of it waits for the backend ends that read, with no data race, and
// the connection is not given back; a body read to its end while being
// closed leaves exactly one outcome (pooled or closed, never both).
func TestUpstreamCloseDuringRead(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv, _ := countingBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stall" {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	defer close(release)
	rt := newTransport().(*upstream)
	resp, err := post(t, rt, t.Context(), srv.URL+"/stall", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: first\n" {
		t.Fatalf("%q, %v", line, err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(br)
		readErr <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the read block on the backend
	_ = resp.Body.Close()
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("a read ended by Close reported a clean end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the blocked read")
	}
	rt.mu.Lock()
	idle := rt.n
	rt.mu.Unlock()
	if idle != 0 {
		t.Fatalf("%d idle connections after a body closed mid-stream", idle)
	}

	// Short answers read to their end while closed from another goroutine.
	for range 50 {
		resp, err := post(t, rt, t.Context(), srv.URL, `{}`)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = io.ReadAll(resp.Body) })
		wg.Go(func() { _ = resp.Body.Close() })
		wg.Wait()
	}
	rt.mu.Lock()
	for _, list := range rt.idle {
		for _, c := range *list {
			if !c.open() {
				t.Error("a closed connection is in the pool")
			}
		}
	}
	rt.mu.Unlock()
}

// TestHeaderBytesCountTowardsInline: the headers count towards what the
// router's client writes before it reads: a small body under headers that
// bring the request past the bound goes through http.Transport (the
// client's own pool stays empty), the same body without them does not.
func TestHeaderBytesCountTowardsInline(t *testing.T) {
	t.Parallel()
	h := http.Header{"A": {"bc"}, "Xy": {"1", "22"}}
	if n := headerBytes(h); n != (1+2+4)+(2+1+4)+(2+2+4) {
		t.Fatalf("headerBytes %d", n)
	}
	srv, _ := countingBackend(t, streamingHandler)
	for _, tc := range []struct {
		header string
		pooled int
	}{{"", 1}, {strings.Repeat("h", maxInlineBody), 0}} {
		rt := newTransport().(*upstream)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if tc.header != "" {
			req.Header.Set("X-Large", tc.header)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		mustRead(t, resp)
		rt.mu.Lock()
		n := rt.n
		rt.mu.Unlock()
		if n != tc.pooled {
			t.Fatalf("a %d-byte header: %d connections in the router's own pool, want %d", len(tc.header), n, tc.pooled)
		}
	}
}

// TestBackendTarget: a request path's URL on a backend is parsed once and
// shared (the same pointer for the same path, a different one for another
// path), is written as NewRequest would (an empty port dropped), and the
// cache stops growing at maxTargets while URLs are still returned.
func TestBackendTarget(t *testing.T) {
	t.Parallel()
	b := &Backend{cfg: config.Backend{URL: "http://backend.example:/base/"}}
	t1, err := b.target("/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	u1 := t1.u
	if t1.start != "POST /base/v1/chat/completions HTTP/1.1\r\nHost: backend.example\r\n" {
		t.Errorf("prepared start %q", t1.start)
	}
	if u1.String() != "http://backend.example/base/v1/chat/completions" || u1.Host != "backend.example" {
		t.Fatalf("target %q (host %q)", u1, u1.Host)
	}
	if again, _ := b.target("/v1/chat/completions"); again != t1 {
		t.Error("the same path was parsed again")
	}
	if other, _ := b.target("/v1/completions"); other == t1 || other.u.Path != "/base/v1/completions" {
		t.Errorf("another path gave %q", other.u)
	}
	for i := range 2 * maxTargets {
		tg, err := b.target(fmt.Sprintf("/p%d", i))
		if err != nil || tg.u.Path != fmt.Sprintf("/base/p%d", i) {
			t.Fatalf("path %d: %v, %v", i, tg, err)
		}
	}
	if n := len(*b.targets.Load()); n != maxTargets {
		t.Errorf("%d cached URLs, want the bound %d", n, maxTargets)
	}
	if _, err := (&Backend{cfg: config.Backend{URL: "http://[::1"}}).target("/x"); err == nil {
		t.Error("an unparsable URL gave no error")
	}
}

// TestLogLimiter: one line a second goes through, and it carries how many
// were held back since the one before.
func TestLogLimiter(t *testing.T) {
	t.Parallel()
	var l logLimiter
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at      time.Duration
		ok      bool
		skipped int
	}{{0, true, 0}, {500 * time.Millisecond, false, 0}, {900 * time.Millisecond, false, 0}, {1100 * time.Millisecond, true, 2}, {1200 * time.Millisecond, false, 0}, {5 * time.Second, true, 1}}
	for _, s := range steps {
		skipped, ok := l.allow(t0.Add(s.at))
		if ok != s.ok || skipped != s.skipped {
			t.Errorf("at %v: allow = %d, %v; want %d, %v", s.at, skipped, ok, s.skipped, s.ok)
		}
	}
	// With a burst, that many lines a second.
	b := logLimiter{burst: 3}
	for i, want := range []bool{true, true, true, false, false} {
		if _, ok := b.allow(t0.Add(time.Duration(i) * 100 * time.Millisecond)); ok != want {
			t.Errorf("burst line %d: %v", i, ok)
		}
	}
	if skipped, ok := b.allow(t0.Add(1500 * time.Millisecond)); !ok || skipped != 2 {
		t.Errorf("the next second: %d, %v", skipped, ok)
	}
}

// TestRoundTripUntilBoundsTheDial: a connection that does not connect is
// given up at the deadline, as a timeout context bounded the dial.
func TestRoundTripUntilBoundsTheDial(t *testing.T) {
	t.Parallel()
	dialer := &net.Dialer{ControlContext: func(ctx context.Context, _, _ string, _ syscall.RawConn) error {
		<-ctx.Done() // a connect that never completes
		return ctx.Err()
	}}
	u := newUpstream(newHTTPTransport(dialer), dialer)
	// The request's own context only keeps a broken build from hanging.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:9/v1/chat/completions", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = u.RoundTripUntil(ctx, req, "", nil, start.Add(200*time.Millisecond))
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a dial that ended at its deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the dial was given up after %v", d)
	}
	// A request http.Transport must send is refused, not sent in plain.
	tls, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1:9/", strings.NewReader(`{}`))
	if _, err := u.RoundTripUntil(t.Context(), tls, "", nil, time.Now().Add(time.Second)); !errors.Is(err, errNotInline) {
		t.Fatalf("https through RoundTripUntil: %v", err)
	}
}

// inline leaves a request that a proxy is to carry to http.Transport, and
// asks the proxy function per request only when the environment names an
// HTTP proxy.
func TestInlineHonoursHTTPProxy(t *testing.T) {
	req := &http.Request{Method: http.MethodPost, URL: &url.URL{Scheme: "http", Host: "backend.example:8000", Path: "/v1/chat/completions"},
		Header: http.Header{}, Body: http.NoBody}
	for _, name := range []string{"HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "REQUEST_METHOD"} {
		t.Setenv(name, "")
	}
	u := newTransport().(*upstream)
	if !u.noHTTPProxy || !u.inline(req, "", nil) {
		t.Fatalf("no proxy in the environment: noHTTPProxy %v, inline %v; want both true", u.noHTTPProxy, u.inline(req, "", nil))
	}
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:9")
	u = newTransport().(*upstream)
	if u.noHTTPProxy {
		t.Fatal("HTTP_PROXY set: the upstream must ask the proxy function per request")
	}
	// http.ProxyFromEnvironment reads the environment once per process,
	// so the proxy's answer is given here as that function would give it.
	u.fallback.Proxy = func(*http.Request) (*url.URL, error) { return url.Parse("http://127.0.0.1:9") }
	if u.inline(req, "", nil) {
		t.Fatal("a request the proxy carries was sent inline")
	}
}

// deadlineCount counts a connection's deadline moves.
type deadlineCount struct {
	net.Conn
	moves int
	last  time.Time
}

func (c *deadlineCount) SetDeadline(t time.Time) error {
	c.moves++
	c.last = t
	return nil
}

// TestDeadlineMovesRarely: on a connection that carries request after
// request, the deadline moves about once per sixteenth of the timeout, and
// is never earlier than asked nor later by more than that sixteenth (or a
// second); none asked clears it.
func TestDeadlineMovesRarely(t *testing.T) {
	t.Parallel()
	for _, timeout := range []time.Duration{800 * time.Millisecond, 10 * time.Second, time.Hour} {
		fc := &deadlineCount{}
		c := &upConn{conn: fc}
		start := time.Unix(1_800_000_000, 0)
		const requests = 10_000
		for i := range requests {
			now := start.Add(time.Duration(i) * time.Millisecond)
			want := now.Add(timeout)
			c.setDeadline(want, now)
			slack := min(timeout/16, deadlineSlack)
			if c.deadline.Before(want) || c.deadline.Sub(want) > slack || !fc.last.Equal(c.deadline) {
				t.Fatalf("timeout %v, request %d: deadline %v for %v (slack %v), the connection's %v", timeout, i, c.deadline, want, slack, fc.last)
			}
		}
		slack := min(timeout/16, deadlineSlack)
		if most := int(requests*time.Millisecond/slack) + 1; fc.moves > most {
			t.Fatalf("timeout %v: %d moves in %d requests 1 ms apart, want at most %d", timeout, fc.moves, requests, most)
		}
		c.setDeadline(time.Time{}, start)
		if !c.deadline.IsZero() || !fc.last.IsZero() {
			t.Fatalf("timeout %v: no deadline asked, %v kept", timeout, c.deadline)
		}
	}
}

// TestFaultyFramingNotReused: an answer that frames its body two ways (an
// HTTP/1.0 answer with Transfer-Encoding, whose framing RFC 9112 calls
// faulty; Transfer-Encoding beside Content-Length) does not leave its
// connection to carry the next request: what follows it there may be part
// of it.
func TestFaultyFramingNotReused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, answer string }{
		{"http/1.0 with transfer-encoding", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\nok"},
		{"http/1.1 with both framings", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n2\r\nok\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rb := newRawBackend(t, false, func(w io.Writer, _, _ int) bool {
				_, _ = io.WriteString(w, tc.answer)
				return true
			})
			rt := newTransport()
			for range 2 {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, rb.url, strings.NewReader(`{}`))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := rt.RoundTrip(req)
				if err != nil {
					continue // refusing the answer is fine too
				}
				mustRead(t, resp)
			}
			if n := rb.conns.Load(); n != 2 {
				t.Fatalf("%d connection(s) for two requests: the connection of an answer with faulty framing was reused", n)
			}
		})
	}
}

// TestHealthCheckKeepsItsConnection: a health check reads the model list
// to its end, so its connection goes back to the pool; closed unread, it
// was closed, and each check (taking the connection a request had just
// left idle) cost the next request a new dial.
func TestHealthCheckKeepsItsConnection(t *testing.T) {
	t.Parallel()
	srv, conns := countingBackend(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	bs := newBackends([]config.Backend{{Name: "b", Type: "openai", URL: srv.URL, Enabled: true}},
		&http.Client{Transport: newTransport()})
	b := bs.get("b")
	for range 3 {
		bs.check(t.Context(), b)
	}
	if !b.healthy.Load() || b.lastHealthAt.Load() == 0 {
		t.Fatal("the checks did not count")
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("three health checks dialed %d connections, want 1", n)
	}
}
