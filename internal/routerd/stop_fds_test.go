package routerd_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestStopClosesBackendConnections: once Run has returned, the router holds
// no connection to its backends: the keep-alive connections its requests
// and health checks left idle are closed with it, not kept until the
// client's idle timeout (90 s) in a process that goes on (the demo, an
// embedding program). A body past the router's inline bound goes through
// http.Transport, whose idle connections close with the router's own.
func TestStopClosesBackendConnections(t *testing.T) {
	t.Parallel()
	var open atomic.Int64
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/models" {
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	}))
	backend.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	backend.Start()
	defer backend.Close()

	d, err := routerd.New(plainCfg(backend.URL), routerd.Deps{Metrics: prometheus.NewRegistry(), ShutdownGrace: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		default:
		}
	}()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(content string) (int, error) {
		resp, err := client.Post("http://"+d.Addr()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"`+content+`"}]}`))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	status := 0
	testutil.Eventually(t, 10*time.Second, "the router answering", func() bool {
		status, err = post("hello")
		return err == nil
	})
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	// A body over the router's inline bound (64 KiB) goes through
	// http.Transport, which keeps two goroutines per idle connection. The
	// Transport itself closes a connection whose request's write it has
	// not seen reported within 50 ms of the answer (a loaded machine), so
	// the pair is asked again until both clients hold one.
	testutil.Eventually(t, 10*time.Second, "connections through both clients", func() bool {
		for _, content := range []string{"hello", strings.Repeat("x", 100<<10)} {
			if status, err = post(content); err != nil {
				t.Fatal(err)
			}
			if status != http.StatusOK {
				t.Fatalf("status %d of a %d-byte request", status, len(content))
			}
		}
		return open.Load() >= 2
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	deadline := time.Now().Add(5 * time.Second)
	for open.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := open.Load(); n != 0 {
		t.Errorf("%d connection(s) from the router to its backend still open 5 s after Run returned", n)
	}
}
