package router_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

// servers serves a router handler both ways a router is reached: the lean
// HTTP/1.1 server of serve's plain listener, and net/http (TLS, HTTP/2 and
// what the lean server hands off).
var servers = []struct {
	name  string
	serve func(t *testing.T, h http.Handler) string
}{
	{"lean", func(t *testing.T, h http.Handler) string { return testutil.LeanServer(t, h) }},
	{"net/http", func(t *testing.T, h http.Handler) string {
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		return s.URL
	}},
}

func oneBackend(url string, timeout time.Duration) *config.Config {
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "be", Type: "openai", URL: url, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(timeout)}}
	return cfg
}

// TestBackendTimeout: a backend that does not answer within its timeout
// gets a 504 to the client and its request cut; one whose stream stalls
// past the timeout has the stream cut there.
func TestBackendTimeout(t *testing.T) {
	t.Parallel()
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			cut := make(chan string, 2)
			be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					return
				}
				body, _ := io.ReadAll(r.Body)
				if strings.Contains(string(body), `"stream":true`) {
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, "data: {}\n\n")
					w.(http.Flusher).Flush()
				}
				select {
				case <-r.Context().Done():
					cut <- "cut"
				case <-time.After(10 * time.Second):
					cut <- "not cut"
				}
			}))
			defer be.Close()
			// Long enough for the stream's first event to come in time on
			// a loaded machine.
			rt := sv.serve(t, router.New(router.Options{Config: oneBackend(be.URL, time.Second)}).Handler())

			start := time.Now()
			resp, err := http.Post(rt+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "timeout") {
				t.Fatalf("buffered: status %d, %s; want 504 about the timeout", resp.StatusCode, body)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("the 504 came after %v", d)
			}
			if got := <-cut; got != "cut" {
				t.Fatalf("buffered: the backend's request was %s", got)
			}

			resp, err = http.Post(rt+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "data: {}\n\n") {
				t.Fatalf("stream: status %d, %q", resp.StatusCode, body)
			}
			if got := <-cut; got != "cut" {
				t.Fatalf("stream: the backend's request was %s", got)
			}
		})
	}
}

// TestClientLeavingCutsBackend: a client that goes away while the backend
// works has the backend's request cut, through either server.
func TestClientLeavingCutsBackend(t *testing.T) {
	t.Parallel()
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			started, cut := make(chan struct{}), make(chan struct{})
			be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					return
				}
				_, _ = io.ReadAll(r.Body)
				close(started)
				select {
				case <-r.Context().Done():
					close(cut)
				case <-time.After(15 * time.Second): // not cut: the test has failed by then
				}
			}))
			defer be.Close()
			// The backend's timeout is longer than the test waits, so only
			// the client leaving can cut the request.
			rt := sv.serve(t, router.New(router.Options{Config: oneBackend(be.URL, 20*time.Second)}).Handler())
			c, err := net.Dial("tcp", strings.TrimPrefix(rt, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			const body = `{"model":"m","messages":[]}`
			_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
				strconv.Itoa(len(body))+"\r\n\r\n"+body)
			<-started
			_ = c.Close()
			select {
			case <-cut:
			case <-time.After(10 * time.Second):
				t.Fatal("the backend's request was not cut")
			}
		})
	}
}

// TestConnectionKeptPastTimeout: a kept-alive connection to a backend is
// used again after it idled for longer than the backend's timeout (the
// last exchange's deadline passed while it idled).
func TestConnectionKeptPastTimeout(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	be.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	be.Start()
	defer be.Close()
	// Each exchange, the first one's dial included, must finish within
	// the timeout even on a loaded machine; the idle gap outlasts it.
	rt := testutil.LeanServer(t, router.New(router.Options{Config: oneBackend(be.URL, time.Second)}).Handler())
	for i := range 3 {
		if i > 0 {
			time.Sleep(1200 * time.Millisecond)
		}
		resp, err := http.Post(rt+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections to the backend for 3 requests; want 1", n)
	}
}

// TestLargeBodyTimeout: a request too large for the router's own client
// goes through http.Transport, and the backend's timeout still bounds it.
func TestLargeBodyTimeout(t *testing.T) {
	t.Parallel()
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return
		}
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"content":"stall`) {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	defer be.Close()
	rt := testutil.LeanServer(t, router.New(router.Options{Config: oneBackend(be.URL, 2*time.Second)}).Handler())
	pad := strings.Repeat("x", 80<<10)
	for _, tc := range []struct {
		content string
		want    int
	}{{"fine", http.StatusOK}, {"stall", http.StatusGatewayTimeout}} {
		body := `{"model":"m","messages":[{"role":"user","content":"` + tc.content + pad + `"}]}`
		resp, err := http.Post(rt+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("%s: status %d, want %d", tc.content, resp.StatusCode, tc.want)
		}
	}
}

// TestWriteFailureEndsRequest: a client that resets its connection while a
// stream is relayed to it is seen through the failed write, not only
// through the read that watches an idle connection: the request ends as
// the client's (499), and the backend's request is cut. The client sends a
// byte after its request (the start of a next one, pipelined) so that the
// server has input in hand and does not watch the connection: only the
// write can tell.
func TestWriteFailureEndsRequest(t *testing.T) {
	t.Parallel()
	for _, sv := range servers {
		t.Run(sv.name, func(t *testing.T) {
			t.Parallel()
			cut := make(chan struct{})
			be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					return
				}
				_, _ = io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				stop := time.After(15 * time.Second) // not cut: the test has failed by then
				for {
					select {
					case <-r.Context().Done():
						close(cut)
						return
					case <-stop:
						return
					case <-tick.C:
						_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
						w.(http.Flusher).Flush()
					}
				}
			}))
			defer be.Close()
			metrics := telemetry.NewRouterMetrics(nil)
			rt := sv.serve(t, router.New(router.Options{Config: oneBackend(be.URL, 20*time.Second), Metrics: metrics}).Handler())
			c, err := net.Dial("tcp", strings.TrimPrefix(rt, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			const body = `{"model":"m","stream":true,"messages":[]}`
			_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
				strconv.Itoa(len(body))+"\r\n\r\n"+body+"P")
			// Events arrive: the stream runs.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			var got []byte
			buf := make([]byte, 4096)
			for strings.Count(string(got), "data:") < 3 {
				n, err := c.Read(buf)
				if err != nil {
					t.Fatalf("reading the stream: %v (got %q)", err, got)
				}
				got = append(got, buf[:n]...)
			}
			// A reset, not a close: the next write fails at once.
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
			select {
			case <-cut:
			case <-time.After(10 * time.Second):
				t.Fatal("the backend's request was not cut")
			}
			waitClientGone(t, metrics, "/v1/chat/completions")
		})
	}
}
