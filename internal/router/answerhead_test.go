package router_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/testutil"
)

// rawBackend answers every completion request on its connections with
// answer, bytes as given, after reading the request's head and body.
func rawBackend(t *testing.T, answer string) string {
	t.Helper()
	return newScriptBackend(t, func(c net.Conn, _, _ int) bool {
		_, err := io.WriteString(c, answer)
		return err == nil
	}).url
}

// TestAnswerFieldsRelayed: a backend's answer fields reach the client as
// they would through a header map, whether the router's server relays
// their lines as they came (the lean server) or adds them to its map
// (net/http's): names in any case, repeats in order, and none of the
// hop-by-hop, framing, pin, request id or x-continuum-* fields, which are
// the router's (a backend does not say who served a request).
func TestAnswerFieldsRelayed(t *testing.T) {
	t.Parallel()
	fields := "content-type: text/event-stream\r\nx-Custom: a\r\nkeep-alive: timeout=5\r\nX-Dynamo-Worker-Instance-Id: 7\r\n" +
		"x-request-id: backend-id\r\nx-continuum-routing-path: forged\r\nX-Multi: 1\r\nx-multi: 2\r\nDate: Wed, 02 Dec 2026 06:00:00 GMT\r\n" +
		"x-continuum-worker: forged\r\nX-Continuum-Backend: forged\r\n"
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
				h.Get("X-Request-Id") == "" || !reflect.DeepEqual(h["X-Continuum-Routing-Path"], []string{"unified"}) ||
				h.Get("X-Continuum-Worker") != "" || h.Get("X-Continuum-Backend") != "" {
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

// TestClientFieldsRelayed: a backend sees the client's fields alike
// whichever server read the client's request (the lean server or
// net/http's), names in any case: none of the hop-by-hop, credential,
// routing or pin fields, the router's Content-Type, the client's request
// id when valid and the router's when not, repeats in order, and the
// client's User-Agent.
func TestClientFieldsRelayed(t *testing.T) {
	t.Parallel()
	seen := make(chan http.Header, 8)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		seen <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(be.Close)
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "b", Type: "openai", URL: be.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
	srv := router.New(router.Options{Config: cfg})
	srv.SetReady(true)
	std := httptest.NewServer(srv.Handler())
	t.Cleanup(std.Close)
	lean := testutil.LeanServer(t, srv.Handler())
	for _, id := range []string{"client-id-1", "not valid!"} {
		var heads []http.Header
		for _, url := range []string{lean, std.URL} {
			// Written by hand: names in the case a client may use, which
			// net/http's client would canonicalize.
			c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: router\r\ncontent-type: text/plain\r\n"+
				"x-custom: a\r\nX-Multi: 1\r\nx-multi: 2\r\nuser-agent: my-client/2\r\naccept-encoding: gzip\r\nconnection: keep-alive\r\n"+
				"authorization: Bearer secret\r\nx-api-key: k\r\nx-backend: 1\r\nx-dynamo-worker-instance-id: 5\r\nx-worker-instance-id: 6\r\n"+
				"x-request-id: "+id+"\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = c.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: status %d", url, resp.StatusCode)
			}
			h := <-seen
			if h.Get("X-Custom") != "a" || !reflect.DeepEqual(h["X-Multi"], []string{"1", "2"}) || h.Get("User-Agent") != "my-client/2" ||
				h.Get("Content-Type") != "application/json" {
				t.Fatalf("%s: relayed fields: %q", url, h)
			}
			for _, gone := range []string{"Authorization", "X-Api-Key", "X-Backend", "X-Dynamo-Worker-Instance-Id", "X-Worker-Instance-Id", "Accept-Encoding", "Connection"} {
				if v, ok := h[gone]; ok && (gone != "Accept-Encoding" || v[0] == "gzip") {
					t.Fatalf("%s: %s reached the backend: %q", url, gone, h)
				}
			}
			if got := h.Get("X-Request-Id"); (id == "client-id-1") != (got == id) || got == "" || len(h["X-Request-Id"]) != 1 {
				t.Fatalf("%s: request id %q sent, %q relayed", url, id, h["X-Request-Id"])
			}
			if resp.Header.Get("X-Request-Id") != h.Get("X-Request-Id") {
				t.Fatalf("%s: the answer's request id %q, the backend's %q", url, resp.Header.Get("X-Request-Id"), h.Get("X-Request-Id"))
			}
			h = h.Clone()
			delete(h, "X-Request-Id") // a new one per request when the client's is not valid
			delete(h, "Accept-Encoding")
			heads = append(heads, h)
		}
		if !reflect.DeepEqual(heads[0], heads[1]) {
			t.Fatalf("request id %q: through the lean server %q, through net/http's %q", id, heads[0], heads[1])
		}
	}
}
