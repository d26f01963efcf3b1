package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsServer serves a client's /metrics and /healthz.
type MetricsServer struct {
	ln  net.Listener
	srv *http.Server
}

// ListenMetrics binds addr for g's metrics; nothing is served until Run.
func ListenMetrics(addr string, g prometheus.Gatherer, logger *slog.Logger) (*MetricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	// The port is open to whatever reaches it: a connection has a time
	// to send its request and to take its answer, and a kept-alive one
	// that sends nothing more is closed, so that none is held for ever.
	// (No cap on connections at once: one that queued the rest would
	// starve the liveness probe.)
	return &MetricsServer{ln: ln, srv: &http.Server{Handler: mux,
		ReadHeaderTimeout: metricsReadTimeout, ReadTimeout: metricsReadTimeout, WriteTimeout: metricsWriteTimeout,
		IdleTimeout: metricsIdleTimeout, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}}, nil
}

// Bounds of the metrics listener: the time a request may take to arrive
// and its answer to leave (a scrape of a large registry included), and
// the time a kept-alive connection may wait for its next request (a
// scraper reconnects at need).
const (
	metricsReadTimeout  = 10 * time.Second
	metricsWriteTimeout = 30 * time.Second
	metricsIdleTimeout  = 30 * time.Second
)

// Addr is the bound address.
func (m *MetricsServer) Addr() string { return m.ln.Addr().String() }

// Run serves until ctx ends.
func (m *MetricsServer) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = m.srv.Shutdown(sctx)
	})
	defer stop()
	if err := m.srv.Serve(m.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ServingMetrics is a MetricsServer serving from the moment it was bound
// (StartMetrics) until Stop.
type ServingMetrics struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// StartMetrics binds addr and serves /metrics and /healthz on it at once,
// until Stop: a command that has slow work before its client starts (the
// broker's first read of the fleet, up to its --timeout) answers its
// probes meanwhile. An empty addr serves nothing (nil, nil).
func StartMetrics(addr string, g prometheus.Gatherer, logger *slog.Logger) (*ServingMetrics, error) {
	if addr == "" {
		return nil, nil
	}
	ms, err := ListenMetrics(addr, g, logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	sm := &ServingMetrics{addr: ms.Addr(), cancel: cancel, done: make(chan error, 1)}
	go func() { sm.done <- ms.Run(ctx) }()
	return sm, nil
}

// Addr is the bound address ("" for nil).
func (m *ServingMetrics) Addr() string {
	if m == nil {
		return ""
	}
	return m.addr
}

// Stop stops serving (at most a second for requests in flight) and says
// whether serving had failed; later calls return the same. Nil is a no-op.
func (m *ServingMetrics) Stop() error {
	if m == nil {
		return nil
	}
	m.once.Do(func() {
		m.cancel()
		if err := <-m.done; err != nil {
			m.err = fmt.Errorf("serving metrics: %w", err)
		}
	})
	return m.err
}

// Process is how RunProcess runs a client.
type Process struct {
	// Metrics serves /metrics and /healthz (StartMetrics); nowhere when
	// nil. RunProcess stops it once the client has drained.
	Metrics *ServingMetrics
	Logger  *slog.Logger
	// Started, when set, is called with the metrics address before the
	// client starts.
	Started func(metricsAddr string)
	// Follow, when set, runs beside the client until it ends.
	Follow func(ctx context.Context)
}

// RunProcess runs a client as its command does: its metrics served (until
// it has drained), Follow beside it, until ctx ends.
func RunProcess(ctx context.Context, c *Client, p Process) error {
	if p.Started != nil {
		p.Started(p.Metrics.Addr())
	}
	aux, stopAux := context.WithCancel(ctx)
	defer stopAux()
	var wg sync.WaitGroup
	if p.Follow != nil {
		wg.Go(func() { p.Follow(aux) })
	}
	err := c.Run(ctx)
	stopAux()
	wg.Wait()
	return errors.Join(err, p.Metrics.Stop())
}
