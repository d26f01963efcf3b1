package routerd_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestReloadKeepsIdleKeepAlives: a reload that changes server.* settings
// (here server.idle_timeout) applies them to the connections that follow;
// a kept-alive connection open before it finishes on the old settings. It
// must not be closed by the reload itself: a client sending its next POST
// on it at that moment loses the request (net/http's client does not
// retry a POST on "server closed idle connection" or a reset).
func TestReloadKeepsIdleKeepAlives(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	}))
	defer backend.Close()
	root := t.TempDir()
	f := startReload(t, configYAML(backend.URL, root, ""))
	c, err := net.Dial("tcp", f.d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	post := func() error {
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := post(); err != nil {
		t.Fatal(err)
	}
	// The connection is idle, kept alive. A reload of a server setting.
	f.write(strings.Replace(configYAML(backend.URL, root, ""), "server:\n", "server:\n  idle_timeout: 90s\n", 1))
	if r := f.waitReload(1); r.Result != "applied" {
		t.Fatalf("reload: %+v", r)
	}
	if closedWithin(c, 2*time.Second) {
		t.Fatal("the reload closed an idle kept-alive connection (a request sent on it now is lost)")
	}
	_ = c.SetReadDeadline(time.Time{})
	if err := post(); err != nil {
		t.Fatalf("the next request on the kept-alive connection: %v", err)
	}
}

// TestShutdownDelayEndsKeepAlives: during --shutdown-delay the router
// serves on, not ready, so that clients move away before it stops
// accepting. A client on a kept-alive connection (an ingress's or a load
// balancer's pool) is not steered by readiness: unless the answers it gets
// meanwhile say Connection: close, it goes on reusing the connection until
// the drain closes it idle, racing its next POST (lost, not retried).
func TestShutdownDelayEndsKeepAlives(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	}))
	t.Cleanup(backend.Close)
	d, err := routerd.New(plainCfg(backend.URL), routerd.Deps{ShutdownGrace: 5 * time.Second, ShutdownDelay: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	ready := func() int {
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + d.Addr() + "/ready")
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	testutil.Eventually(t, 10*time.Second, "ready", func() bool { return ready() == http.StatusOK })
	c, err := net.Dial("tcp", d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	post := func() *http.Response {
		t.Helper()
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp
	}
	if resp := post(); resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("before the signal: %d, close %v", resp.StatusCode, resp.Close)
	}
	cancel() // SIGTERM
	testutil.Eventually(t, 10*time.Second, "not ready", func() bool { return ready() == http.StatusServiceUnavailable })
	resp := post()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("during the shutdown delay: %d", resp.StatusCode)
	}
	if !resp.Close {
		t.Error("an answer on a kept-alive connection during the shutdown delay does not say Connection: close: the client keeps the connection until the drain closes it under its next request")
	}
}

// TestShutdownClosesReplacedIdleConns: a server a reload replaced keeps its
// idle connections for their next request, but the shutdown's drain closes
// them at once, as the listeners' own: the daemon does not wait out its
// grace for a client that sends nothing.
func TestShutdownClosesReplacedIdleConns(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	}))
	defer backend.Close()
	root := t.TempDir()
	file := filepath.Join(t.TempDir(), "continuum.yaml")
	testutil.ReplaceFile(t, file, configYAML(backend.URL, root, ""))
	f := startReloadGrace(t, file, nil, 20*time.Second)
	c, err := net.Dial("tcp", f.d.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	f.write(strings.Replace(configYAML(backend.URL, root, ""), "server:\n", "server:\n  idle_timeout: 90s\n", 1))
	if r := f.waitReload(1); r.Result != "applied" {
		t.Fatalf("reload: %+v", r)
	}
	start := time.Now()
	f.cancel()
	select {
	case err := <-f.done:
		f.done <- err // for the fixture's cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the daemon took %v to stop: the replaced server's idle connection held it", d)
	}
}
