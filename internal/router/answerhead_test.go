package router_test

import (
	"bufio"
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

// rawBackend answers every request on its connections with answer, bytes
// as given, after reading the request's head and body.
func rawBackend(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	// Closed when the test ends, the router's kept-alive connections
	// with it, and waited for: no goroutine outlives the test.
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
				}
			})
		}
	})
	return "http://" + ln.Addr().String()
}

// TestAnswerFieldsRelayed: a backend's answer fields reach the client as
// they would through a header map, whether the router's server relays
// their lines as they came (the lean server) or adds them to its map
// (net/http's): names in any case, repeats in order, and none of the
// hop-by-hop, framing, pin or request id fields, which are the router's.
func TestAnswerFieldsRelayed(t *testing.T) {
	t.Parallel()
	fields := "content-type: text/event-stream\r\nx-Custom: a\r\nkeep-alive: timeout=5\r\nX-Dynamo-Worker-Instance-Id: 7\r\n" +
		"x-request-id: backend-id\r\nx-continuum-routing-path: forged\r\nX-Multi: 1\r\nx-multi: 2\r\nDate: Wed, 02 Dec 2026 06:00:00 GMT\r\n"
	for _, tc := range []struct{ name, answer, body string }{
		{"sse", "HTTP/1.1 200 OK\r\n" + fields + "Transfer-Encoding: chunked\r\n\r\n8\r\ndata: 1\n\r\n0\r\n\r\n", "data: 1\n"},
		{"buffered", "HTTP/1.1 200 OK\r\n" + strings.Replace(fields, "text/event-stream", "application/json", 1) + "Content-Length: 2\r\n\r\n{}", "{}"},
	} {
		be := rawBackend(t, tc.answer)
		cfg := config.Default()
		cfg.Backends = []config.Backend{{Name: "raw", Type: "openai", URL: be, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
		srv := router.New(router.Options{Config: cfg})
		srv.SetReady(true)
		std := httptest.NewServer(srv.Handler())
		t.Cleanup(std.Close)
		var heads []http.Header
		for _, url := range []string{testutil.LeanServer(t, srv.Handler()), std.URL} {
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil || string(body) != tc.body || resp.StatusCode != http.StatusOK {
				t.Fatalf("%s %s: %d %q %v", tc.name, url, resp.StatusCode, body, err)
			}
			h := resp.Header
			if h.Get("X-Custom") != "a" || !reflect.DeepEqual(h["X-Multi"], []string{"1", "2"}) ||
				h.Get("Content-Type") == "" || len(h["Date"]) != 1 || h.Get("Date") != "Wed, 02 Dec 2026 06:00:00 GMT" {
				t.Fatalf("%s %s: relayed fields missing: %q", tc.name, url, h)
			}
			if h.Get("Keep-Alive") != "" || h.Get("X-Dynamo-Worker-Instance-Id") != "" || h.Get("X-Request-Id") == "backend-id" ||
				h.Get("X-Request-Id") == "" || !reflect.DeepEqual(h["X-Continuum-Routing-Path"], []string{"unified"}) {
				t.Fatalf("%s %s: fields the router owns or drops: %q", tc.name, url, h)
			}
			h = h.Clone()
			for _, own := range []string{"X-Request-Id", "Content-Length", "Transfer-Encoding"} {
				delete(h, own)
			}
			heads = append(heads, h)
		}
		if !reflect.DeepEqual(heads[0], heads[1]) {
			t.Fatalf("%s: the lean server relayed %q, net/http's %q", tc.name, heads[0], heads[1])
		}
	}
}
