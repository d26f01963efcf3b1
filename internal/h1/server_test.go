package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lean is a real TCP listener whose connections the lean server serves,
// with a net/http server behind it for what it hands off.
type lean struct {
	srv      *Server
	fallback *http.Server
	ln       net.Listener
	addr     string
	accepted atomic.Int64
	wg       sync.WaitGroup
}

func startLean(t testing.TB, h http.Handler, tune func(*Server)) *lean {
	t.Helper()
	return startLeanFallback(t, h, tune, nil)
}

// startLeanFallback is startLean with the fallback server's settings
// tuned too.
func startLeanFallback(t testing.TB, h http.Handler, tune func(*Server), tuneFallback func(*http.Server)) *lean {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &lean{ln: ln, addr: ln.Addr().String()}
	cl := NewHandoff(ln.Addr())
	l.fallback = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
	l.srv = &Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second, Fallback: cl.Give}
	if tune != nil {
		tune(l.srv)
	}
	if tuneFallback != nil {
		tuneFallback(l.fallback)
	}
	l.wg.Go(func() { _ = cl.Serve(l.fallback) })
	l.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			if !l.srv.Go(c) {
				_ = c.Close()
			}
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.srv.Shutdown(ctx)
		_ = cl.Drain(ctx)
		_ = l.fallback.Shutdown(ctx)
		_ = cl.Close()
		l.wg.Wait()
	})
	return l
}

// startNetHTTP serves h with net/http alone on a new listener until the
// test ends, returning its address: the reference the lean server answers
// like.
func startNetHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	ref := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = ref.Serve(ln) }()
	t.Cleanup(func() { _ = ref.Close(); <-served })
	return ln.Addr().String()
}

// dial opens a raw connection to the server, closed when the test ends,
// with a deadline that keeps a broken test from hanging.
func (l *lean) dial(t *testing.T) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	return conn
}

func (l *lean) client(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// which answers with the writer's type, so a test sees the path that
// served the request, and echoes the body.
func which(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("X-Writer", fmt.Sprintf("%T", w))
	w.Header().Set("X-Host", r.Host)
	_, _ = fmt.Fprintf(w, "%s %s %d %s", r.Method, r.URL.RequestURI(), r.ContentLength, data)
}

const leanWriter, netWriter = "*h1.response", "*http.response"

func TestKeepAliveOnOneConnection(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(which), nil)
	c := l.client(t)
	for i := range 50 {
		body := strings.Repeat("x", i*100)
		resp, err := c.Post("http://"+l.addr+"/v1/chat/completions?i="+fmt.Sprint(i), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		want := fmt.Sprintf("POST /v1/chat/completions?i=%d %d %s", i, len(body), body)
		if resp.StatusCode != 200 || string(data) != want || resp.Header.Get("X-Writer") != leanWriter {
			t.Fatalf("request %d: %d %q %q", i, resp.StatusCode, resp.Header.Get("X-Writer"), truncate(string(data)))
		}
		if resp.Header.Get("Date") == "" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Fatalf("head: %v", resp.Header)
		}
		if len(want) <= sniffLen && resp.ContentLength != int64(len(want)) {
			t.Fatalf("small answer of %d bytes has length %d (chunked %v)", len(want), resp.ContentLength, resp.TransferEncoding)
		}
		if len(want) > sniffLen && (len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked") {
			t.Fatalf("large answer not chunked: %v", resp.TransferEncoding)
		}
	}
	if n := l.accepted.Load(); n != 1 {
		t.Fatalf("%d connections for sequential requests", n)
	}
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// TestFallback sends what the lean path leaves to net/http and checks that
// net/http answered (and that the lean path serves a plain request after
// a fallback on another connection).
func TestFallback(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(which), nil)
	cases := []struct {
		name, raw  string
		status     int
		wantWriter string
	}{
		{"chunked body", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 200, netWriter},
		{"expect", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabc", 200, netWriter},
		{"http/1.0", "GET /a HTTP/1.0\r\nHost: x\r\n\r\n", 200, netWriter},
		{"head", "HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n", 200, netWriter},
		{"no host", "GET /a HTTP/1.1\r\nUser-Agent: t\r\n\r\n", 400, ""},
		{"two hosts", "GET /a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, ""},
		{"bad header name", "GET /a HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n", 400, ""},
		{"conflicting lengths", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400, ""},
		{"bare LF", "GET /a HTTP/1.1\nHost: x\n\n", 200, netWriter},
		{"bad escape", "GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, ""},
		{"absolute form", "GET http://x/a HTTP/1.1\r\nHost: x\r\n\r\n", 200, netWriter},
		{"large head", "GET /a HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 6000) + "\r\n\r\n", 200, netWriter},
		{"plain", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", 200, leanWriter},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn := l.dial(t)
			if _, err := io.WriteString(conn, tc.raw); err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(strings.Fields(tc.raw)[0], "/", nil)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, req)
			for err == nil && resp.StatusCode == http.StatusContinue {
				resp, err = http.ReadResponse(br, req)
			}
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Header.Get("X-Writer") != tc.wantWriter {
				t.Fatalf("status %d writer %q (%q); want %d %q", resp.StatusCode, resp.Header.Get("X-Writer"), data, tc.status, tc.wantWriter)
			}
		})
	}
}

// TestPipelined writes three requests at once; the answers come in order
// on the one connection.
func TestPipelined(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(which), nil)
	conn := l.dial(t)
	raw := "POST /1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nabGET /2 HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /3 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\nz"
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for i, want := range []string{"POST /1 2 ab", "GET /2 0 ", "POST /3 1 z"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(i, err)
		}
		data, _ := io.ReadAll(resp.Body)
		if string(data) != want {
			t.Fatalf("answer %d: %q, want %q", i, data, want)
		}
		if i == 2 && !resp.Close {
			t.Fatal("Connection: close was not answered in kind")
		}
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("connection not closed after Connection: close: %v", err)
	}
}

// TestStreamFlushes checks that each flushed event reaches the client
// before the handler writes the next.
func TestStreamFlushes(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range 5 {
			_, _ = fmt.Fprintf(w, "data: %d\n\n", i)
			if err := rc.Flush(); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}), nil)
	resp, err := l.client(t).Get("http://" + l.addr + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.TransferEncoding == nil || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("stream not chunked: %v", resp.TransferEncoding)
	}
	br := bufio.NewReader(resp.Body)
	for i := range 5 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		_, _ = br.ReadString('\n')
		next <- struct{}{}
	}
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Fatalf("after the events: %q", rest)
	}
}

// TestDeclaredBodyGoesOutAtOnce: an answer whose declared Content-Length
// is all written reaches the client while the handler is still running
// (small and held back for sniffing, or large, in one write or several);
// what the handler writes after that is refused.
func TestDeclaredBodyGoesOutAtOnce(t *testing.T) {
	t.Parallel()
	for name, parts := range map[string][]string{
		"small":          {"ok"},
		"small sniffed":  {"<html>", "</html>"},
		"large":          {strings.Repeat("x", 3000)},
		"large in parts": {strings.Repeat("y", 300), strings.Repeat("z", 2700)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body := strings.Join(parts, "")
			release := make(chan struct{})
			extra := make(chan error, 1)
			l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				for _, p := range parts {
					if _, err := io.WriteString(w, p); err != nil {
						t.Error(err)
					}
				}
				<-release
				_, err := io.WriteString(w, "more")
				extra <- err
			}), nil)
			conn := l.dial(t)
			if _, err := io.WriteString(conn, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				close(release)
				t.Fatalf("no answer while the handler runs: %v", err)
			}
			got, err := io.ReadAll(resp.Body)
			close(release)
			if err != nil || string(got) != body {
				t.Fatalf("body %q, %v; want %q", truncate(string(got)), err, truncate(body))
			}
			if err := <-extra; !errors.Is(err, http.ErrContentLength) {
				t.Fatalf("a write past the declared length: %v, want ErrContentLength", err)
			}
		})
	}
}

// TestClientLeavingCancels: a request still running when its client
// closes the connection sees its context cancelled, buffered (the watch)
// and streaming (the failed write).
func TestClientLeavingCancels(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			t.Parallel()
			started, cancelled := make(chan struct{}), make(chan error, 1)
			l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				close(started)
				if stream {
					for r.Context().Err() == nil {
						_, _ = io.WriteString(w, "data: x\n\n")
						w.(http.Flusher).Flush()
						time.Sleep(5 * time.Millisecond)
					}
				}
				select {
				case <-r.Context().Done():
					cancelled <- r.Context().Err()
				case <-time.After(10 * time.Second):
					cancelled <- errors.New("not cancelled")
				}
			}), nil)
			conn, err := net.Dial("tcp", l.addr)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.WriteString(conn, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody")
			<-started
			time.Sleep(2 * watchDelay)
			_ = conn.Close()
			if err := <-cancelled; !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
		})
	}
}

// TestWatchOfManyRequests: the server's one watch timer serves requests
// that start at different times, on many connections, among short ones
// that end before their watch: each long request whose client leaves is
// cancelled, and the line of requests waiting for a watch empties.
func TestWatchOfManyRequests(t *testing.T) {
	t.Parallel()
	const long = 12
	var started sync.WaitGroup
	started.Add(long)
	cancelled := make(chan error, long)
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/short" {
			which(w, r)
			return
		}
		started.Done()
		select {
		case <-r.Context().Done():
			cancelled <- r.Context().Err()
		case <-time.After(10 * time.Second):
			cancelled <- errors.New("not cancelled")
		}
	}), nil)
	client := l.client(t)
	var conns []net.Conn
	for i := range long {
		conn := l.dial(t)
		conns = append(conns, conn)
		_, _ = io.WriteString(conn, "GET /long HTTP/1.1\r\nHost: x\r\n\r\n")
		// Short requests between the long ones, some ending before a
		// long one's watch is due, others after.
		for range 3 {
			resp, err := client.Get("http://" + l.addr + "/short")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		if i%3 == 0 {
			time.Sleep(watchDelay / 3)
		}
	}
	started.Wait()
	time.Sleep(2 * watchDelay)
	for _, conn := range conns {
		_ = conn.Close()
	}
	for range long {
		if err := <-cancelled; !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		w := &l.srv.watcher
		w.mu.Lock()
		empty := w.head == nil && w.tail == nil
		w.mu.Unlock()
		if empty {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("requests left in line for a watch")
		}
		time.Sleep(watchDelay)
	}
}

// TestWatchStartedByNextRequest: while requests keep coming, the watcher's
// timer waits a tick between firings, and a request that has run
// watchDelay is watched when the next one arrives; its client leaving then
// cancels it. The tick here is an hour, so only the arriving request can
// have started the watch.
func TestWatchStartedByNextRequest(t *testing.T) {
	t.Parallel()
	started, cancelled := make(chan struct{}), make(chan error, 1)
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/short" {
			which(w, r)
			return
		}
		close(started)
		select {
		case <-r.Context().Done():
			cancelled <- r.Context().Err()
		case <-time.After(10 * time.Second):
			cancelled <- errors.New("not cancelled")
		}
	}), func(s *Server) { s.watcher.tick = time.Hour })
	w := &l.srv.watcher
	inspect := func(f func()) {
		w.mu.Lock()
		defer w.mu.Unlock()
		f()
	}
	client := l.client(t)
	short := func() {
		t.Helper()
		resp, err := client.Get("http://" + l.addr + "/short")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	// The first request arms the timer for watchDelay; once it has fired
	// with requests having come, it is armed for the tick.
	short()
	for deadline := time.Now().Add(5 * time.Second); ; {
		var ticking bool
		inspect(func() { ticking = w.armed && !w.added })
		if ticking {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watcher's timer did not fire after the first request")
		}
		time.Sleep(watchDelay / 10)
	}
	lc := l.dial(t)
	_, _ = io.WriteString(lc, "GET /long HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	time.Sleep(watchDelay * 3 / 2)
	var long *conn
	inspect(func() { long = w.head })
	if long == nil {
		t.Fatal("the long request is not in line for its watch")
	}
	long.mu.Lock()
	armed := long.watchSt == watchArmed
	long.mu.Unlock()
	if !armed {
		t.Fatal("the long request is watched before the next one arrived")
	}
	short()
	inspect(func() {
		// Only the long one: the short one may not have left the line
		// yet when its answer arrives.
		if long.waiting {
			t.Error("the next request did not take the long one's watch out of line")
		}
	})
	_ = lc.Close()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// TestWatchKeepsPipelinedByte: the watch of a slow request reads the next
// request's first byte; the next request is still served whole.
func TestWatchKeepsPipelinedByte(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(10 * watchDelay)
			if r.Context().Err() != nil {
				t.Error("the next request cancelled this one")
			}
		}
		which(w, r)
	}), nil)
	conn := l.dial(t)
	_, _ = io.WriteString(conn, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(3 * watchDelay)
	_, _ = io.WriteString(conn, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	for _, want := range []string{"GET /slow 0 ", "GET /next 0 "} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		if string(data) != want || resp.Header.Get("X-Writer") != leanWriter {
			t.Fatalf("%q (%s), want %q", data, resp.Header.Get("X-Writer"), want)
		}
	}
}

// TestPanicClosesConnection: a handler that panics (http.ErrAbortHandler
// is how a proxy cuts an answer whose upstream broke) gets no answer, or,
// after part of one went out, no end of it: the client reads an error.
func TestPanicClosesConnection(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic(http.ErrAbortHandler)
		case "/cut":
			_, _ = io.WriteString(w, "data: part\n\n")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		which(w, r)
	}), nil)
	c := l.client(t)
	if resp, err := c.Get("http://" + l.addr + "/panic"); err == nil {
		_ = resp.Body.Close()
		t.Fatal("a panicking handler answered")
	}
	if resp, err := c.Get("http://" + l.addr + "/cut"); err == nil {
		data, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err == nil {
			t.Fatalf("an answer cut by a panic read whole: %q", data)
		}
	}
	resp, err := c.Get("http://" + l.addr + "/after")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
}

// TestUnreadBody: a body the handler leaves is drained so the connection
// carries the next request; one beyond maxDrain closes the connection
// after an answer that says so.
func TestUnreadBody(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ignored")
	}), nil)
	c := l.client(t)
	for _, size := range []int{1000, 100 << 10, 1000} {
		resp, err := c.Post("http://"+l.addr+"/", "text/plain", strings.NewReader(strings.Repeat("u", size)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	if n := l.accepted.Load(); n != 1 {
		t.Fatalf("%d connections; drained bodies should keep one", n)
	}
	resp, err := c.Post("http://"+l.addr+"/", "text/plain", strings.NewReader(strings.Repeat("u", maxDrain+1)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if !resp.Close {
		t.Fatal("an undrainable body left the connection open")
	}
}

func TestReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(which), func(s *Server) { s.ReadHeaderTimeout = 100 * time.Millisecond })
	conn := l.dial(t)
	_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n")
	start := time.Now()
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a trickled head: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("closed after %s", d)
	}
}

// TestLongHeadKeepsItsDeadline trickles a head longer than the lean
// server's buffer: handed to net/http part way, it still has
// read_header_timeout from its first byte in all, not that again from
// the hand-off.
func TestLongHeadKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 1500 * time.Millisecond
	for _, served := range []int{0, 1} {
		t.Run(fmt.Sprintf("after %d requests", served), func(t *testing.T) {
			t.Parallel()
			l := startLeanFallback(t, http.HandlerFunc(which),
				func(s *Server) { s.ReadHeaderTimeout = timeout },
				func(s *http.Server) { s.ReadHeaderTimeout = timeout })
			conn := l.dial(t)
			br := bufio.NewReader(conn)
			for range served {
				_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			// The head's first part, then, after most of the timeout, past
			// the buffer: the hand-off.
			_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n")
			start := time.Now()
			time.Sleep(timeout * 2 / 3)
			_, _ = io.WriteString(conn, "X-Long: "+strings.Repeat("a", 2*bufferSize)+"\r\n")
			// Then a field line now and then, never the head's end.
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := io.WriteString(conn, "X-More: b\r\n"); err != nil {
							return
						}
					}
				}
			}()
			_, _ = io.Copy(io.Discard, br)
			// From the head's first byte: the timeout once (a second from
			// the hand-off would end it at 1.67 times the timeout).
			if d := time.Since(start); d > timeout*3/2 {
				t.Fatalf("the trickled head ended after %s, read_header_timeout %s", d, timeout)
			}
		})
	}
}

func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(which), func(s *Server) { s.IdleTimeout = 100 * time.Millisecond })
	conn := l.dial(t)
	_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle connection: %v", err)
	}
}

// TestIdleTimeoutAfterRequests: a kept connection closes once idle for
// IdleTimeout (give or take the slack of its deadline), after a run of
// quick requests and after slow ones whose watch read the connection,
// whether the watch was stopped or ended on the next request arriving.
func TestIdleTimeoutAfterRequests(t *testing.T) {
	t.Parallel()
	const idle = time.Second // its slack (1/16) is longer than a slow request
	slow := "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
	quick := "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	for name, parts := range map[string][]string{
		"quick": {strings.Repeat(quick, 50)},
		"slow":  {slow},
		// After a quick request (the idle deadline is set), the next
		// request arrives while a slow one's watch reads.
		"next during the watch": {quick, slow, quick},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/slow" {
					time.Sleep(2 * watchDelay)
				}
				which(w, r)
			}), func(s *Server) { s.IdleTimeout = idle })
			conn := l.dial(t)
			// The server's idle wait starts after the last request, so
			// after the last part was sent: the lower bound of the wait
			// is counted from there, whenever the answers are read.
			var idleFrom time.Time
			for i, p := range parts {
				if i > 0 {
					time.Sleep(watchDelay * 3 / 2)
				}
				idleFrom = time.Now()
				_, _ = io.WriteString(conn, p)
			}
			br := bufio.NewReader(conn)
			for range strings.Count(strings.Join(parts, ""), "GET") {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
			}
			_ = conn.SetReadDeadline(time.Now().Add(4 * idle))
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				t.Fatalf("an idle connection: %v", err)
			}
			if waited := time.Since(idleFrom); waited < idle-idle/4 {
				t.Fatalf("closed after %v idle, want about %v", waited, idle)
			}
		})
	}
}

// TestShutdown: an idle connection closes at once; a request in flight
// finishes with Connection: close; Shutdown returns when both are gone.
func TestShutdown(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{})
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		which(w, r)
	}), nil)
	idle := l.dial(t)
	ibr := bufio.NewReader(idle)
	_, _ = io.WriteString(idle, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(ibr, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)

	busy := l.dial(t)
	_, _ = io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered

	done := make(chan error, 1)
	go func() { done <- l.srv.Shutdown(context.Background()) }()
	if _, err := ibr.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection at shutdown: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned with a request in flight: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	resp, err = http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	if string(data) != "GET /slow 0 " || !resp.Close {
		t.Fatalf("in-flight answer %q close=%v", data, resp.Close)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSameAnswersAsNetHTTP runs handlers that exercise the answer's
// framing on the lean server and on net/http's, and compares what a client
// reads: status, headers (but Date) and body, and the framing.
func TestSameAnswersAsNetHTTP(t *testing.T) {
	t.Parallel()
	handlers := map[string]http.HandlerFunc{
		"empty":      func(w http.ResponseWriter, r *http.Request) {},
		"status":     func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) },
		"no content": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204); _, _ = w.Write([]byte("x")) },
		"sniff html": func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "<html><body>hi</body></html>") },
		"typed": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, "{}")
		},
		"declared length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5000")
			_, _ = io.WriteString(w, strings.Repeat("d", 5000))
		},
		"declared short": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "2")
			_, _ = io.WriteString(w, "ok")
			_, _ = io.WriteString(w, "no")
		},
		"large": func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, strings.Repeat("l", 10000)) },
		"flushed": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "a")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "b")
		},
		"header after write": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(201)
			w.Header().Set("X-Late", "1")
			_, _ = io.WriteString(w, "c")
		},
		"split attempt": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Split", "a\r\nInjected: yes")
			w.Header()["Bad Name"] = []string{"v"}
		},
		"spaced value": func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Spaced", " \tv w \t") },
		"past the length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "4")
			_, _ = io.WriteString(w, "toolong")
			_, _ = io.WriteString(w, "ok") // refused too: the answer is broken
		},
		"multi value": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Add("X-M", "1")
			w.Header().Add("X-M", "2")
		},
		"error": func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", http.StatusNotFound) },
		"no content with length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusNoContent)
		},
		"not modified": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "1234")
			w.Header().Set("Etag", `"x"`)
			w.WriteHeader(http.StatusNotModified)
		},
		"encoded": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0})
		},
	}
	mux := http.NewServeMux()
	for name, h := range handlers {
		mux.Handle("/"+strings.ReplaceAll(name, " ", "-"), h)
	}
	l := startLean(t, mux, nil)
	refAddr := startNetHTTP(t, mux)
	get := func(addr, path string) (*http.Response, string) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Header.Del("Date")
		return resp, string(data)
	}
	for name := range handlers {
		path := "/" + strings.ReplaceAll(name, " ", "-")
		a, abody := get(l.addr, path)
		b, bbody := get(refAddr, path)
		if a.StatusCode != b.StatusCode || abody != bbody || fmt.Sprint(a.Header) != fmt.Sprint(b.Header) ||
			a.ContentLength != b.ContentLength || fmt.Sprint(a.TransferEncoding) != fmt.Sprint(b.TransferEncoding) {
			t.Errorf("%s:\nlean    %d %v len=%d te=%v %q\nnet/http %d %v len=%d te=%v %q", name,
				a.StatusCode, a.Header, a.ContentLength, a.TransferEncoding, truncate(abody),
				b.StatusCode, b.Header, b.ContentLength, b.TransferEncoding, truncate(bbody))
		}
	}
}

// TestCodingNamed: a handler that names a transfer coding gets no sniffed
// Content-Type and no Content-Length of its own beside it, as from
// net/http; the framing stays the lean server's.
func TestCodingNamed(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Transfer-Encoding", "chunked")
		w.Header().Set("Content-Length", "300")
		_, _ = io.WriteString(w, "<html>not sniffed")
	}), nil)
	resp, err := l.client(t).Get("http://" + l.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || string(data) != "<html>not sniffed" || resp.Header.Get("Content-Type") != "" {
		t.Fatalf("%q %v, Content-Type %q", data, err, resp.Header.Get("Content-Type"))
	}
}

// TestBodyAfterHandler: a body read by a goroutine the handler left
// behind fails, and the next request on the connection is read whole.
func TestBodyAfterHandler(t *testing.T) {
	t.Parallel()
	late := make(chan error, 1)
	// The left-behind goroutine reads once the next request is being
	// served: the first one's body is surely ended by then.
	next := make(chan struct{})
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/leave" {
			go func() {
				<-next
				_, err := r.Body.Read(make([]byte, 64))
				late <- err
			}()
			return
		}
		close(next)
		if err := <-late; !errors.Is(err, http.ErrBodyReadAfterClose) {
			t.Errorf("a read after the handler returned: %v", err)
		}
		which(w, r)
	}), nil)
	conn := l.dial(t)
	br := bufio.NewReader(conn)
	_, _ = io.WriteString(conn, "POST /leave HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatal(resp, err)
	}
	_, _ = io.WriteString(conn, "POST /next HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nzz")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	if string(data) != "POST /next 2 zz" {
		t.Fatalf("next request read as %q", data)
	}
}

// TestAnswerBeforeBodyRead: when a handler answers without reading the
// body, the body is read (and dropped) before the answer's head goes out,
// as net/http does, so a client that sends its whole body before reading
// is not left blocked; the handler then finds the body closed, as with
// net/http (a read says so, not that the body ended where it did not).
func TestAnswerBeforeBodyRead(t *testing.T) {
	t.Parallel()
	after := make(chan error, 1)
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := strings.Repeat("a", 64<<10)
		_, _ = io.WriteString(w, chunk)
		w.(http.Flusher).Flush()
		n, err := r.Body.Read(make([]byte, 16))
		if n != 0 || !errors.Is(err, http.ErrBodyReadAfterClose) {
			err = fmt.Errorf("read %d bytes of the body after the head went out (%w)", n, err)
		} else {
			err = nil
		}
		after <- err
		for range 63 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	}), nil)
	conn := l.dial(t)
	size := 200 << 10
	_, err := io.WriteString(conn, fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", size, strings.Repeat("b", size)))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != 64*64<<10 {
		t.Fatalf("%d bytes, %v", n, err)
	}
	if err := <-after; err != nil {
		t.Fatal(err)
	}
}

// TestStrayLineBreaksAfterPost: up to four CR or LF bytes after a POST's
// body are skipped, as net/http skips them for old clients, and the next
// request is served on the lean path; after a GET they are not.
func TestStrayLineBreaksAfterPost(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(which), nil)
	conn := l.dial(t)
	br := bufio.NewReader(conn)
	_, _ = io.WriteString(conn, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi\r\n"+
		"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []string{"POST /a 2 hi", "GET /b 0 "} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(data) != want || resp.Header.Get("X-Writer") != leanWriter {
			t.Fatalf("%d %q (%s), want %q from the lean path", resp.StatusCode, data, resp.Header.Get("X-Writer"), want)
		}
	}
	// After a GET a line break is no request: net/http's 400.
	_, _ = io.WriteString(conn, "\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a line break after a GET: %d", resp.StatusCode)
	}
}

// TestNextRequestAwaitsFourBytes: on a kept connection the lean server
// waits for four bytes of the next request as net/http does: idle, under
// the idle timeout rather than the header timeout (a client that sends a
// byte and pauses is served), and taking the line breaks after a POST
// from those four whatever writes they came in.
func TestNextRequestAwaitsFourBytes(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(which), func(s *Server) { s.ReadHeaderTimeout = 200 * time.Millisecond })
	for name, parts := range map[string][]string{
		"a byte, a pause":      {"GET /a HTTP/1.1\r\nHost: x\r\n\r\nG", "ET /b HTTP/1.1\r\nHost: x\r\n\r\n"},
		"split line breaks":    {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi\r", "\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"},
		"line breaks in two":   {"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi\r\n", "\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"},
		"three bytes, a pause": {"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET", " /b HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		conn := l.dial(t)
		br := bufio.NewReader(conn)
		for i, p := range parts {
			if i > 0 {
				time.Sleep(400 * time.Millisecond) // past the header timeout
			}
			if _, err := io.WriteString(conn, p); err != nil {
				t.Fatal(err)
			}
		}
		for _, want := range []string{"/a", "/b"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: %s: %v", name, want, err)
			}
			data, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !strings.Contains(string(data), want+" ") {
				t.Errorf("%s: %d %q, want %s answered", name, resp.StatusCode, data, want)
			}
		}
	}
}

// TestHeadCutShort: a client that ends its side within a head gets
// net/http's 400, not a silent close.
func TestHeadCutShort(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(which), nil)
	conn := l.dial(t)
	_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n")
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a head cut short: %d", resp.StatusCode)
	}

	// After a request it served, as net/http: fewer than four bytes of the
	// next and the end of the client's side close the connection without
	// an answer; four or more cut short are answered 400.
	const first = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
	for next, want := range map[string]int{"G": 1, "\n": 1, "GET": 1, "\r\n\r": 1, "GET ": 2, "GET / HTTP/1.1\r\n": 2} {
		conn := l.dial(t)
		_, _ = io.WriteString(conn, first+next)
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		all, err := io.ReadAll(conn)
		if err != nil {
			t.Fatal(err)
		}
		answers := strings.Count(string(all), "HTTP/1.1 ")
		if answers != want || want == 2 && !strings.Contains(string(all), "HTTP/1.1 400 ") {
			t.Errorf("%q after a request: %d answers, want %d: %q", next, answers, want, all)
		}
	}
}

// TestWriteTimeout: a client that takes none of its answer holds its
// request no longer than about WriteTimeout: the handler's write fails
// (on the lean path, and on a connection net/http serves, bounded by
// WithWriteTimeout), while a client that reads a slow stream is never cut
// off however long the stream lasts.
func TestWriteTimeout(t *testing.T) {
	t.Parallel()
	const d = 300 * time.Millisecond
	failed := make(chan error, 2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" { // a stream: a chunk every d, for 4d
			for range 4 {
				time.Sleep(d)
				if _, err := w.Write([]byte("data: x\n\n")); err != nil {
					failed <- err
					return
				}
				w.(http.Flusher).Flush()
			}
			return
		}
		chunk := make([]byte, 1<<20)
		for range 256 { // far more than socket buffers hold
			if _, err := w.Write(chunk); err != nil {
				failed <- err
				return
			}
		}
		failed <- nil
	})
	l := startLean(t, h, func(s *Server) {
		s.WriteTimeout = d
		give := s.Fallback
		s.Fallback = func(c net.Conn) { give(WithWriteTimeout(c, d)) }
	})
	for _, req := range []string{
		"GET /big HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /big HTTP/1.0\r\nHost: x\r\n\r\n", // handed off to net/http
	} {
		c, err := net.Dial("tcp", l.addr)
		if err != nil {
			t.Fatal(err)
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10)
		}
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-failed:
			if err == nil {
				t.Errorf("%q: a client that read nothing took 256 MiB", req)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%q: the handler still writes to a client that reads nothing", req)
		}
		_ = c.Close()
	}
	resp, err := http.Get("http://" + l.addr + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || strings.Count(string(body), "data: x") != 4 {
		t.Errorf("a slow stream read as it came: %q, %v", body, err)
	}
	select {
	case err := <-failed:
		t.Errorf("the slow stream's write failed: %v", err)
	default:
	}
}

// TestShutdownWaitsForAHandOff: a connection being handed off to the
// fallback server is the lean server's until the fallback has it, so that
// a Shutdown meanwhile waits for it; Drain then waits until its request
// has reached the fallback's handler, so that the fallback's shutdown
// (which drops a request read after it began) answers it.
func TestShutdownWaitsForAHandOff(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	q := NewHandoff(ln.Addr())
	// A slow start between accepting the connection and reading its
	// request: the window in which a shutdown would drop it.
	srv := &http.Server{Handler: h, ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
		time.Sleep(100 * time.Millisecond)
		return ctx
	}}
	served := make(chan struct{})
	go func() { defer close(served); _ = q.Serve(srv) }()
	inFallback := make(chan struct{})
	lean := &Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, Fallback: func(c net.Conn) {
		close(inFallback)
		time.Sleep(200 * time.Millisecond) // a slow hand-off
		q.Give(c)
	}}
	go func() {
		if c, err := ln.Accept(); err == nil && !lean.Go(c) {
			_ = c.Close()
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// Chunked: only net/http serves it.
	_, _ = io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n")
	<-inFallback
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lean.Shutdown(ctx); err != nil {
		t.Fatalf("lean shutdown: %v", err)
	}
	if err := q.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("fallback shutdown: %v", err)
	}
	<-served
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(conn)
	if !strings.HasSuffix(string(b), "ok") {
		t.Errorf("the request handed off during the shutdown got %q", b)
	}
}

// TestDrainSettles: Drain does not wait for a handed-off connection that
// never reaches the handler: one net/http refuses (400, then closed), one
// whose request net/http answers itself (OPTIONS *, then idle), or one
// given after the hand-off closed.
func TestDrainSettles(t *testing.T) {
	t.Parallel()
	q := NewHandoff(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a malformed request reached the handler")
	})}
	served := make(chan struct{})
	go func() { defer close(served); _ = q.Serve(srv) }()
	client, server := net.Pipe()
	go q.Give(server)
	go func() { _, _ = io.WriteString(client, "GET / HTTP/1.1\r\nHost: x\r\nBad Field\r\n\r\n") }()
	b, _ := io.ReadAll(client)
	if !strings.HasPrefix(string(b), "HTTP/1.1 400") {
		t.Fatalf("got %q", b)
	}
	// Shorter than Drain's own bound: only a settled count ends it.
	ctx, cancel := context.WithTimeout(context.Background(), drainWait/2)
	defer cancel()
	if err := q.Drain(ctx); err != nil {
		t.Fatalf("drain after a refused request: %v", err)
	}
	// A request net/http answers itself, the connection then idle.
	client, server = net.Pipe()
	defer func() { _ = client.Close() }()
	go q.Give(server)
	go func() { _, _ = io.WriteString(client, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n") }()
	if resp, err := http.ReadResponse(bufio.NewReader(client), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("OPTIONS *: %v %v", resp, err)
	}
	if err := q.Drain(ctx); err != nil {
		t.Fatalf("drain after OPTIONS *: %v", err)
	}
	_ = q.Close()
	<-served
	c2, s2 := net.Pipe()
	defer func() { _ = c2.Close() }()
	q.Give(s2)
	if err := q.Drain(ctx); err != nil {
		t.Fatalf("drain after a give to a closed hand-off: %v", err)
	}
	if _, err := s2.Write([]byte("x")); err == nil {
		t.Error("a connection given to a closed hand-off was left open")
	}
}

// TestLeavingAfterTheAnswer: a client that leaves once its declared-length
// answer is all sent (the answer goes out at the handler's last write,
// before it returns) does not end the request's context: the handler's
// work after its last write still runs for a served request. One that
// leaves before its answer does end it.
func TestLeavingAfterTheAnswer(t *testing.T) {
	t.Parallel()
	ended := make(chan bool, 2)
	l := startLean(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/before" {
			select {
			case <-r.Context().Done():
				ended <- true
			case <-time.After(10 * time.Second):
				ended <- false
			}
			return
		}
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
		// Past the watch's delay, with the client gone.
		select {
		case <-r.Context().Done():
			ended <- true
		case <-time.After(5 * watchDelay):
			ended <- false
		}
	}), nil)
	conn := l.dial(t)
	_, _ = io.WriteString(conn, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
		t.Fatalf("body %q", b)
	}
	_ = conn.Close()
	if <-ended {
		t.Error("a client leaving after its whole answer ended the request's context")
	}
	conn = l.dial(t)
	_, _ = io.WriteString(conn, "GET /before HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(watchDelay / 2)
	_ = conn.Close()
	if !<-ended {
		t.Error("a client leaving before its answer did not end the request's context")
	}
}

// TestFramingConflictCloses: a request whose head frames its body two ways
// (Transfer-Encoding beside Content-Length; Transfer-Encoding on HTTP/1.0,
// whose framing RFC 9112 calls faulty) is answered 400 and its connection
// closed: the bytes after it, which a hop in front that framed it the other
// way would take for part of its body, are never served as a request of
// their own (net/http, which the lean server hands what it does not serve,
// would serve them).
func TestFramingConflictCloses(t *testing.T) {
	t.Parallel()
	l := startLean(t, http.HandlerFunc(which), nil)
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
	size := strconv.FormatInt(int64(len(smuggled)), 16) + "\r\n"
	for name, in := range map[string]string{
		"te and cl": "POST /first HTTP/1.1\r\nHost: a\r\nContent-Length: " + strconv.Itoa(5+len(smuggled)) + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"0\r\n\r\n" + smuggled,
		"cl and te, lower case": "POST /first HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\ncontent-length: " + strconv.Itoa(5+len(smuggled)) + "\r\n\r\n" +
			"0\r\n\r\n" + smuggled,
		"te on http/1.0": "POST /first HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: " + strconv.Itoa(len(size)) + "\r\n\r\n" +
			size + smuggled + "\r\n0\r\n\r\n",
		"past the lean buffer": "POST /first HTTP/1.1\r\nHost: a\r\nContent-Length: " + strconv.Itoa(5+len(smuggled)) + "\r\nTransfer-Encoding: chunked\r\nX-Pad: " +
			strings.Repeat("p", 5000) + "\r\n\r\n0\r\n\r\n" + smuggled,
	} {
		conn := l.dial(t)
		if _, err := io.WriteString(conn, in); err != nil {
			t.Fatal(err)
		}
		_ = conn.(*net.TCPConn).CloseWrite()
		out, err := io.ReadAll(conn)
		_ = conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "/smuggled") || !strings.HasPrefix(string(out), "HTTP/1.1 400 ") || strings.Count(string(out), "HTTP/1.") != 1 {
			t.Errorf("%s: %q", name, out)
		}
	}
}
