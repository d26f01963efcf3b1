package router_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/telemetry"
)

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// failingFrontend is a frontend that lists no models and answers every
// POST with status and body (JSON), counting the POSTs in hits.
func failingFrontend(t *testing.T, status int, body string, hits *atomic.Int32) *httptest.Server {
	t.Helper()
	fe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(fe.Close)
	return fe
}

// waitClientGone waits (up to 5 s: the handler counts its request once it
// returns) for the one request on path to be counted as the client's
// (499, in the 4xx class), and fails the test if it is not.
func waitClientGone(t *testing.T, metrics *telemetry.RouterMetrics, path string) {
	t.Helper()
	count := func(class string) float64 { return promtest.ToFloat64(metrics.Requests.WithLabelValues(path, class)) }
	deadline := time.Now().Add(5 * time.Second)
	for count("4xx") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("not counted as the client's (499): 4xx %v, 5xx %v", count("4xx"), count("5xx"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scriptBackend is an HTTP/1.1 backend over a raw listener, free to
// misbehave: answer writes the answer to the req-th request (from 0) of
// the conn-th connection (from 1) on c, and reports whether to keep the
// connection.
type scriptBackend struct {
	url             string
	conns, requests atomic.Int32
	// seen, when set, is told of every request but GETs (with its body)
	// before it is answered.
	seen func(conn int, req *http.Request, body []byte)
}

func newScriptBackend(t *testing.T, answer func(c net.Conn, conn, req int) bool, opts ...func(*scriptBackend)) *scriptBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sb := &scriptBackend{url: "http://" + ln.Addr().String()}
	for _, o := range opts {
		o(sb)
	}
	var mu sync.Mutex
	var open []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
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
			open = append(open, c)
			mu.Unlock()
			n := int(sb.conns.Add(1))
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					if req.Method == http.MethodGet {
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"object\":\"list\",\"data\":[]}")
						i--
						continue
					}
					sb.requests.Add(1)
					if sb.seen != nil {
						sb.seen(n, req, body)
					}
					if !answer(c, n, i) {
						return
					}
				}
			})
		}
	})
	return sb
}

// onlyBackend edits a harness's configuration down to one plain backend
// at url with timeout, Dynamo off.
func onlyBackend(url string, timeout time.Duration) func(*config.Config) {
	return func(c *config.Config) {
		c.Backends = []config.Backend{{Name: "only", Type: "openai", URL: url, Role: config.RoleUnified,
			Enabled: true, Timeout: config.Duration(timeout)}}
		c.Dynamo.Enabled = false
	}
}

// fixedStreamFrontend answers every POST with stream, as a text/event-stream
// body, and GET /v1/models with an empty list.
func fixedStreamFrontend(t *testing.T, stream string) *httptest.Server {
	t.Helper()
	return fixedFrontend(t, "text/event-stream", stream)
}

// fixedFrontend answers every POST with body, of type contentType, and GET
// /v1/models with an empty list.
func fixedFrontend(t *testing.T, contentType, body string) *httptest.Server {
	t.Helper()
	fe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		w.Header().Set("Content-Type", contentType)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(fe.Close)
	return fe
}

// endlessStreamBackend answers every POST with an SSE stream of one
// event every gap until its client leaves, counting the POSTs in hits.
func endlessStreamBackend(t *testing.T, gap time.Duration) (url string, hits *atomic.Int32) {
	t.Helper()
	hits = new(atomic.Int32)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		hits.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(gap)
		}
	}))
	t.Cleanup(be.Close)
	return be.URL, hits
}
