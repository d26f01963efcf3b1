package router_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/testutil"
)

// writeLog records every write the router makes to its clients'
// connections.
type writeLog struct {
	net.Listener
	mu     sync.Mutex
	writes []string
}

func (l *writeLog) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &loggedConn{Conn: c, log: l}, nil
}

func (l *writeLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.writes...)
}

type loggedConn struct {
	net.Conn
	log *writeLog
}

func (c *loggedConn) Write(p []byte) (int, error) {
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, string(p))
	c.log.mu.Unlock()
	return c.Conn.Write(p)
}

// TestStreamRelayEventByEvent: each event of a plain SSE relay reaches the
// client before the backend sends the next (the backend waits for the
// client to have read it), and the last event leaves in the same write as
// the end of the chunked body.
func TestStreamRelayEventByEvent(t *testing.T) {
	t.Parallel()
	const events = 3
	read := make(chan struct{})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			_, _ = io.WriteString(w, "data: {\"n\":"+strconv.Itoa(i)+"}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-read:
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Second):
				t.Error("the client never read event", i)
				return
			}
		}
		// The last event and the end of the body leave the backend
		// together (the handler returns without a flush).
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer be.Close()
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "be", Type: "openai", URL: be.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
	srv := router.New(router.Options{Config: cfg})
	srv.SetReady(true)
	rt := httptest.NewUnstartedServer(srv.Handler())
	log := &writeLog{Listener: rt.Listener}
	rt.Listener = log
	rt.Start()
	defer rt.Close()

	resp, err := http.Post(rt.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	br := bufio.NewReader(resp.Body)
	for i := range events {
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data: {") {
			t.Fatalf("event %d: %q, %v", i, line, err)
		}
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		read <- struct{}{}
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "data: [DONE]\n\n" {
		t.Fatalf("end of stream %q, %v", rest, err)
	}
	writes := log.all()
	last := writes[len(writes)-1]
	if !strings.Contains(last, "data: [DONE]\n\n") || !strings.HasSuffix(last, "0\r\n\r\n") {
		t.Fatalf("the last event and the end of the body left in different writes: %q", writes)
	}
}

// TestPlainAnswerKeepsLength: a buffered answer copied through from a
// plain backend keeps the backend's Content-Length (a large one is not
// re-framed in chunks), on the lean server and on net/http's.
func TestPlainAnswerKeepsLength(t *testing.T) {
	t.Parallel()
	answer := `{"id":"x","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"` + strings.Repeat("z", 3000) + `"}}]}`
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(be.Close)
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "b", Type: "openai", URL: be.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
	srv := router.New(router.Options{Config: cfg})
	srv.SetReady(true)
	netHTTP := httptest.NewServer(srv.Handler())
	t.Cleanup(netHTTP.Close)
	for name, url := range map[string]string{"lean": testutil.LeanServer(t, srv.Handler()), "net/http": netHTTP.URL} {
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || string(body) != answer {
			t.Fatalf("%s: %d bytes, %v", name, len(body), err)
		}
		if resp.ContentLength != int64(len(answer)) || len(resp.TransferEncoding) > 0 {
			t.Fatalf("%s: Content-Length %d, Transfer-Encoding %v; want %d", name, resp.ContentLength, resp.TransferEncoding, len(answer))
		}
	}
}

// TestStreamHeadBeforeFirstEvent: a stream whose head comes before its
// first event (a prefill still queued) has its head relayed at once, on
// the lean server and on net/http's, not held until the first token.
func TestStreamHeadBeforeFirstEvent(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "Text/Event-Stream; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: {\"n\":0}\n\ndata: [DONE]\n\n")
	}))
	defer be.Close()
	defer close(release)
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "be", Type: "openai", URL: be.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
	srv := router.New(router.Options{Config: cfg})
	srv.SetReady(true)
	ns := httptest.NewServer(srv.Handler())
	defer ns.Close()
	for name, url := range map[string]string{"lean": testutil.LeanServer(t, srv.Handler()), "net/http": ns.URL} {
		got := make(chan *http.Response, 1)
		go func() {
			resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
			if err != nil {
				t.Error(err)
				return
			}
			got <- resp
		}()
		select {
		case resp := <-got:
			_ = resp.Body.Close()
			if resp.StatusCode != 200 || !strings.EqualFold(resp.Header.Get("Content-Type"), "text/event-stream; charset=utf-8") {
				t.Errorf("%s: %d %v", name, resp.StatusCode, resp.Header)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no head while the backend holds its first event", name)
		}
	}
}

// TestPlainChunkedStreamFlows: a stream a plain backend sends chunked in
// another type than text/event-stream (NDJSON, or no type: a framework's
// default) reaches the client as it comes, not whole at its end.
func TestPlainChunkedStreamFlows(t *testing.T) {
	t.Parallel()
	for _, ct := range []string{"", "Content-Type: application/x-ndjson\r\n"} {
		t.Run(fmt.Sprintf("type=%q", ct), func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			be := newScriptBackend(t, func(c net.Conn, _, _ int) bool {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n"+ct+"Transfer-Encoding: chunked\r\n\r\n9\r\n{\"n\":1}\n\r\n")
				<-release
				_, _ = io.WriteString(c, "9\r\n{\"n\":2}\n\r\n0\r\n\r\n")
				return true
			})
			defer close(release)
			h := newHarness(t, onlyBackend(be.url, 10*time.Second))
			got := make(chan string, 1)
			go func() {
				resp, err := http.Post(h.router.URL+"/v1/chat/completions", "application/json",
					strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
				if err != nil {
					got <- err.Error()
					return
				}
				defer func() { _ = resp.Body.Close() }()
				line, _ := bufio.NewReader(resp.Body).ReadString('\n')
				got <- line
			}()
			select {
			case line := <-got:
				if line != "{\"n\":1}\n" {
					t.Errorf("first line %q", line)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the stream's first chunk is held back until the stream ends")
			}
		})
	}
}

// TestUnaskedSwitchIsAnError: a backend answering 101 Switching Protocols
// to a completion request (which asks for no upgrade) gives the client a
// 502, not a broken 101.
func TestUnaskedSwitchIsAnError(t *testing.T) {
	t.Parallel()
	be := newScriptBackend(t, func(c net.Conn, _, _ int) bool {
		_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\n\r\n")
		return false
	})
	h := newHarness(t, onlyBackend(be.url, 5*time.Second))
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Post(h.router.URL+"/v1/chat/completions", "application/json", strings.NewReader(chat(false)))
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d: %s", resp.StatusCode, body)
	}
}

// TestInvalidBackendStatus: a backend's status line whose code is no
// valid status (below 100, which http.ReadResponse takes, or past 999) is
// no answer to relay: the client gets a 502, not a connection closed by a
// handler's panic.
func TestInvalidBackendStatus(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"099 Odd", "000 Zero", "1000 Big"} {
		be := newScriptBackend(t, func(c net.Conn, _, _ int) bool {
			_, _ = io.WriteString(c, "HTTP/1.1 "+status+"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
			return true
		})
		h := newHarness(t, onlyBackend(be.url, 5*time.Second))
		client := &http.Client{Timeout: 5 * time.Second}
		resp, err := client.Post(h.router.URL+"/v1/chat/completions", "application/json", strings.NewReader(chat(false)))
		if err != nil {
			t.Errorf("backend status %q: no answer: %v", status, err)
			continue
		}
		if body := readAll(t, resp); resp.StatusCode != http.StatusBadGateway {
			t.Errorf("backend status %q: status %d, want 502: %s", status, resp.StatusCode, body)
		}
	}
}
