package agent

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsServerIdleKeepAliveBounded: the broker's and kv-listener's
// metrics port (every interface by default) is fed by whatever reaches
// it: a client that sends one request and then keeps its connection idle
// does not hold it (a goroutine and its buffers) for ever, and a request
// has a time to arrive and to be answered in.
func TestMetricsServerIdleKeepAliveBounded(t *testing.T) {
	t.Parallel()
	ms, err := ListenMetrics("127.0.0.1:0", prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if ms.srv.IdleTimeout <= 0 || ms.srv.ReadTimeout <= 0 || ms.srv.WriteTimeout <= 0 {
		t.Fatalf("metrics server unbounded: idle %v, read %v, write %v", ms.srv.IdleTimeout, ms.srv.ReadTimeout, ms.srv.WriteTimeout)
	}
	ms.srv.IdleTimeout = 200 * time.Millisecond // the same rule, sooner
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = ms.Run(ctx) }()
	defer func() { cancel(); <-done }()

	c, br := healthzKeptAlive(t, ms.Addr())
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive connection not closed by the server: %v", err)
	}
}

// TestMetricsHealthzNotStarvedByIdleConns: connections kept idle on the
// metrics port do not keep the liveness probe out.
func TestMetricsHealthzNotStarvedByIdleConns(t *testing.T) {
	t.Parallel()
	ms, err := ListenMetrics("127.0.0.1:0", prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = ms.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for range 100 {
		healthzKeptAlive(t, ms.Addr())
	}
	probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := probe.Get("http://" + ms.Addr() + "/healthz")
	if err != nil {
		t.Fatalf("liveness probe with 100 idle kept-alive connections open: %v", err)
	}
	_ = resp.Body.Close()
}

// healthzKeptAlive asks addr for /healthz on a connection of its own and
// leaves it open, kept alive, until the test ends.
func healthzKeptAlive(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return c, br
}
