package main_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/testutil"
)

// TestSecondSignalEndsServe: the first SIGTERM makes serve drain its
// requests for --shutdown-grace; a second one ends it at once, for an
// operator who will not wait.
func TestSecondSignalEndsServe(t *testing.T) {
	t.Parallel()
	release, got := make(chan struct{}), make(chan struct{}, 1)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return // the router's health checks
		}
		select {
		case got <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); slow.Close() })
	cfg := filepath.Join(t.TempDir(), "continuum.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "server: {bind_address: \"127.0.0.1:0\"}\nbackends:\n  - {name: slow, url: %q}\n", slow.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "serve", "--config", cfg, "--shutdown-grace", "60s", "--log-format", "json")
	testutil.Eventually(t, 30*time.Second, "serve ready", func() bool { return servingRe.MatchString(p.errOut()) })
	router := "http://" + servingRe.FindStringSubmatch(p.errOut())[1]
	go func() {
		resp, err := http.Post(router+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	select {
	case <-got: // the request is in flight
	case <-time.After(30 * time.Second):
		t.Fatal("the request did not reach the backend")
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		t.Fatal("serve ended on the first signal with a request in flight")
	case <-time.After(time.Second):
	}
	// The second signal ends it. A process starved since the first may
	// not yet have handed signals back to the default action (it then
	// takes a signal as the first again): signal again, once a second.
	deadline := time.After(10 * time.Second)
	for {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-deadline:
			t.Fatal("serve still draining 10 s after a second SIGTERM")
		case <-time.After(time.Second):
		}
	}
}
