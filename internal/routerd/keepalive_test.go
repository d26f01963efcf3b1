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

// keptAlive is a client's kept-alive HTTP/1.1 connection to the router.
type keptAlive struct {
	c  net.Conn
	br *bufio.Reader
}

func dialKeptAlive(t *testing.T, addr string) *keptAlive {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &keptAlive{c: c, br: bufio.NewReader(c)}
}

// post sends a chat completion, its body chunked (a request only net/http
// serves: the lean server hands the connection off) or of declared length,
// and reads the answer.
func (k *keptAlive) post(chunked bool) (*http.Response, error) {
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
	var err error
	if chunked {
		_, err = fmt.Fprintf(k.c, "%sTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", head, len(body), body)
	} else {
		_, err = fmt.Fprintf(k.c, "%sContent-Length: %d\r\n\r\n%s", head, len(body), body)
	}
	if err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp, fmt.Errorf("status %d", resp.StatusCode)
	}
	return resp, nil
}

// idleAcrossReload leaves two kept-alive connections idle, one the lean
// server serves and one it handed to net/http, each after an answer, then
// reloads a server setting (server.idle_timeout), which replaces the
// server.
func idleAcrossReload(t *testing.T, f *reloadFixture, backendURL, root string) (lean, handed *keptAlive) {
	t.Helper()
	lean, handed = dialKeptAlive(t, f.d.Addr()), dialKeptAlive(t, f.d.Addr())
	if _, err := lean.post(false); err != nil {
		t.Fatal(err)
	}
	if _, err := handed.post(true); err != nil {
		t.Fatal(err)
	}
	f.write(strings.Replace(configYAML(backendURL, root, ""), "server:\n", "server:\n  idle_timeout: 90s\n", 1))
	if r := f.waitReload(1); r.Result != "applied" {
		t.Fatalf("reload: %+v", r)
	}
	return lean, handed
}

func completionBackend(t *testing.T) *httptest.Server {
	t.Helper()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	}))
	t.Cleanup(backend.Close)
	return backend
}

// TestReloadKeepsIdleKeepAlives: a reload that changes server.* settings
// (here server.idle_timeout) applies them to the connections that follow;
// a kept-alive connection open before it finishes on the old settings. It
// is not closed by the reload itself, neither the lean server's nor one it
// handed to net/http: a client sending its next POST on it at that moment
// would lose the request (net/http's client does not retry a POST on
// "server closed idle connection" or a reset). The next answer on it says
// Connection: close.
func TestReloadKeepsIdleKeepAlives(t *testing.T) {
	t.Parallel()
	backend := completionBackend(t)
	root := t.TempDir()
	f := startReload(t, configYAML(backend.URL, root, ""))
	lean, handed := idleAcrossReload(t, f, backend.URL, root)
	for name, k := range map[string]*keptAlive{"lean": lean, "handed off": handed} {
		if closedWithin(k.c, 2*time.Second) {
			t.Fatalf("%s: the reload closed an idle kept-alive connection (a request sent on it now is lost)", name)
		}
		_ = k.c.SetReadDeadline(time.Time{})
		resp, err := k.post(name == "handed off")
		if err != nil {
			t.Fatalf("%s: the next request on the kept-alive connection: %v", name, err)
		}
		if !resp.Close {
			t.Errorf("%s: the answer on a replaced server's connection does not close it", name)
		}
	}
}

// TestShutdownDelayEndsKeepAlives: during --shutdown-delay the router
// serves on, not ready, so that clients move away before it stops
// accepting. A client on a kept-alive connection (an ingress's or a load
// balancer's pool) is not steered by readiness: the answers it gets
// meanwhile say Connection: close, so that it does not reuse the
// connection until the drain closes it idle under its next POST.
func TestShutdownDelayEndsKeepAlives(t *testing.T) {
	t.Parallel()
	backend := completionBackend(t)
	d, err := routerd.New(plainCfg(backend.URL), routerd.Deps{ShutdownGrace: 5 * time.Second, ShutdownDelay: 10 * time.Second})
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
	k := dialKeptAlive(t, d.Addr())
	if resp, err := k.post(false); err != nil || resp.Close {
		t.Fatalf("before the signal: %v, close %v", err, resp != nil && resp.Close)
	}
	cancel() // SIGTERM
	testutil.Eventually(t, 10*time.Second, "not ready", func() bool { return ready() == http.StatusServiceUnavailable })
	resp, err := k.post(false)
	if err != nil {
		t.Fatalf("during the shutdown delay: %v", err)
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
	backend := completionBackend(t)
	root := t.TempDir()
	file := filepath.Join(t.TempDir(), "continuum.yaml")
	testutil.ReplaceFile(t, file, configYAML(backend.URL, root, ""))
	f := startReloadGrace(t, file, nil, 20*time.Second)
	idleAcrossReload(t, f, backend.URL, root)
	start := time.Now()
	f.cancel()
	select {
	case err := <-f.done:
		f.done <- err // for the fixture's cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the daemon took %v to stop: a replaced server's idle connection held it", d)
	}
}
