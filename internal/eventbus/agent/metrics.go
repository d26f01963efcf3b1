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
	return &MetricsServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}}, nil
}

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

// Process is how RunProcess runs a client.
type Process struct {
	// MetricsAddress is where /metrics and /healthz are served; nowhere
	// when "".
	MetricsAddress string
	Gatherer       prometheus.Gatherer
	Logger         *slog.Logger
	// Ready, when set, is told the metrics address once bound.
	Ready func(metricsAddr string)
	// Started, when set, is called once the metrics are bound, before the
	// client starts.
	Started func(metricsAddr string)
	// Follow, when set, runs beside the client until it ends.
	Follow func(ctx context.Context)
}

// RunProcess runs a client as its command does: its metrics served, Follow
// beside it, until ctx ends and the client has drained.
func RunProcess(ctx context.Context, c *Client, p Process) error {
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	var ms *MetricsServer
	addr := ""
	if p.MetricsAddress != "" {
		var err error
		if ms, err = ListenMetrics(p.MetricsAddress, p.Gatherer, p.Logger); err != nil {
			return err
		}
		addr = ms.Addr()
		if p.Ready != nil {
			p.Ready(addr)
		}
	}
	if p.Started != nil {
		p.Started(addr)
	}
	aux, stopAux := context.WithCancel(ctx)
	defer stopAux()
	var wg sync.WaitGroup
	var metricsErr error
	if ms != nil {
		wg.Go(func() {
			if err := ms.Run(aux); err != nil {
				metricsErr = fmt.Errorf("serving metrics: %w", err)
			}
		})
	}
	if p.Follow != nil {
		wg.Go(func() { p.Follow(aux) })
	}
	err := c.Run(ctx)
	stopAux()
	wg.Wait()
	return errors.Join(err, metricsErr)
}
