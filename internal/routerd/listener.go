package routerd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/h1"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// listener is one bound address. It accepts connections itself (closing
// those beyond server.max_connections at once, wrapping the rest in TLS
// when configured) and hands them to its current http.Server. A reload
// that changes the server's settings (timeouts, header size, TLS) starts a
// new server for the connections that follow while the old one finishes
// its own; the address stays bound throughout.
type listener struct {
	key     string // the configuration key of its address
	ln      net.Listener
	handler http.Handler
	logger  *slog.Logger
	// capped: this listener counts its connections in open against limit
	// (the main one; the admin listener is not capped). open is the
	// daemon's count, shared with the listener a rebind replaced while its
	// connections finish.
	capped  bool
	limit   atomic.Int64
	open    *atomic.Int64
	metrics *telemetry.RouterMetrics

	tls atomic.Pointer[tls.Config] // nil: plain HTTP
	cur atomic.Pointer[served]
	// settings are those of the current server.
	settings serverSettings
	accepted chan struct{} // closed when the accept loop ends
	// closing: shutdown closed the socket; any other close is a failure.
	closing atomic.Bool
}

// serverSettings are what an http.Server is built with.
type serverSettings struct {
	readHeader, read, idle, write time.Duration
	maxHeader                     int
	tls                           *config.ServerTLS
}

func settingsOf(cfg *config.Config) serverSettings {
	s := cfg.Server
	out := serverSettings{readHeader: s.ReadHeaderTimeout.D(), read: s.ReadTimeout.D(), idle: s.IdleTimeout.D(), write: s.WriteTimeout.D(), maxHeader: int(s.MaxHeaderBytes)}
	if s.TLS != nil {
		t := *s.TLS
		out.tls = &t
	}
	return out
}

func (a serverSettings) equal(b serverSettings) bool {
	if (a.tls == nil) != (b.tls == nil) || (a.tls != nil && *a.tls != *b.tls) {
		return false
	}
	return a.readHeader == b.readHeader && a.read == b.read && a.idle == b.idle && a.write == b.write && a.maxHeader == b.maxHeader
}

// served is one server generation: the lean HTTP/1.1 server that plain
// connections go to, and the http.Server that serves TLS connections and
// the requests the lean one hands off, with the queue it takes them from.
type served struct {
	lean  *h1.Server
	srv   *http.Server
	conns *h1.Handoff
	// write is the write timeout of the connections it serves.
	write time.Duration
	// noKeepAlive: net/http's HTTP/1 answers close their connections
	// (endKeepAlives), as the lean server's do.
	noKeepAlive atomic.Bool
	// secure: a TLS listener's (its connections are net/http's, HTTP/2
	// ones among them); httpConns counts net/http's open connections.
	secure    bool
	httpConns atomic.Int64
	// cut ends the contexts of net/http's requests with h1.ErrCut when the
	// grace ends, so that they are accounted as cut by the router, not
	// left by their clients (the lean server marks its own).
	cut context.CancelCauseFunc
}

// bind listens on addr for the key's handler with cfg's settings and the
// TLS configuration tlsCfg (nil for plain HTTP); nothing is served until
// serve.
func (d *Daemon) bind(key, addr string, h http.Handler, capped bool, cfg *config.Config, tlsCfg *tls.Config) (*listener, error) {
	ln, err := listenTCP(addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", key, addr, err)
	}
	l := &listener{key: key, ln: ln, handler: h, logger: d.logger, capped: capped, metrics: d.rm,
		settings: settingsOf(cfg), accepted: make(chan struct{}), open: &d.clientConns}
	l.limit.Store(int64(cfg.Server.MaxConnections))
	l.tls.Store(tlsCfg)
	l.cur.Store(l.newServed())
	return l, nil
}

// newServed builds a server with the listener's settings.
func (l *listener) newServed() *served {
	st := l.settings
	base, cut := context.WithCancelCause(context.Background())
	s := &served{conns: h1.NewHandoff(l.ln.Addr()), write: st.write, cut: cut, secure: l.tls.Load() != nil}
	s.srv = &http.Server{Handler: s.keepAliveGate(streamWriteBound(l.handler, st.write)), ReadHeaderTimeout: st.readHeader, ReadTimeout: st.read,
		IdleTimeout: st.idle, MaxHeaderBytes: st.maxHeader, ErrorLog: slog.NewLogLogger(l.logger.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return base },
		ConnState: func(_ net.Conn, cs http.ConnState) {
			switch cs {
			case http.StateNew:
				s.httpConns.Add(1)
			case http.StateClosed, http.StateHijacked:
				s.httpConns.Add(-1)
			}
		}}
	// net/http's own WriteTimeout would bound a whole answer, streams
	// included: the connections it serves are bounded per write instead,
	// as the lean server bounds its own.
	s.lean = &h1.Server{Handler: l.handler, ReadHeaderTimeout: st.readHeader, ReadTimeout: st.read, IdleTimeout: st.idle,
		WriteTimeout: st.write, Logger: l.logger, Fallback: func(c net.Conn) { s.conns.Give(h1.WithWriteTimeout(c, st.write)) }}
	return s
}

// keepAliveGate closes net/http's HTTP/1 connections after their answer
// once keep-alives end (an HTTP/2 client is sent a GOAWAY at the drain).
func (s *served) keepAliveGate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && s.noKeepAlive.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// endKeepAlives makes every answer from now on close its connection,
// idle connections left be (h1.Server.EndKeepAlives).
func (s *served) endKeepAlives() {
	s.noKeepAlive.Store(true)
	s.lean.EndKeepAlives()
}

// serve starts the accept loop and the current server. An accept failure
// that is not temporary, or a server failure, ends the daemon.
// d.lnMu is held.
func (d *Daemon) serve(l *listener) {
	if d.noKeepAlive {
		l.cur.Load().endKeepAlives() // a listener a reload bound during the shutdown delay
	}
	d.serveOne(l, l.cur.Load())
	go func() {
		defer close(l.accepted)
		if err := l.acceptLoop(); err != nil {
			d.fail(fmt.Errorf("serving %s: %w", l.ln.Addr(), err))
		}
	}()
}

func (d *Daemon) serveOne(l *listener, s *served) {
	go func() {
		if err := s.conns.Serve(s.srv); !errors.Is(err, http.ErrServerClosed) {
			d.fail(fmt.Errorf("serving %s: %w", l.ln.Addr(), err))
		}
	}()
}

// acceptLoop accepts until the listener is closed (nil) or fails.
func (l *listener) acceptLoop() error {
	var delay time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) && l.closing.Load() {
				return nil
			}
			// Out of file descriptors and the like pass: wait and retry,
			// as net/http does.
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				l.logger.Warn("accepting a connection failed; retrying", "address", l.ln.Addr().String(), "err", err, "retry_in", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if l.capped {
			if !l.reserve() {
				// Counted before the close, which the refused client sees:
				// whoever reads the counter after it has the refusal in it.
				l.metrics.Overloaded.WithLabelValues(telemetry.OverloadConnections).Inc()
				_ = c.Close()
				continue
			}
			l.metrics.Connections.Inc()
			c = &trackedConn{Conn: c, l: l}
		}
		if cfg := l.tls.Load(); cfg != nil {
			c = tls.Server(h1.WithWriteTimeout(c, l.cur.Load().lean.WriteTimeout), cfg)
		}
		l.handOff(c)
	}
}

// reserve counts a connection in open if that stays within the limit:
// the listener a rebind replaced may still be accepting beside this one,
// and the two share the count.
func (l *listener) reserve() bool {
	for {
		n := l.open.Load()
		if n >= l.limit.Load() {
			return false
		}
		if l.open.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// handOff gives a connection to the current server, or to the one that
// replaced it if it is closing: a plain one to the lean server, a TLS one
// to net/http's.
func (l *listener) handOff(c net.Conn) {
	_, secure := c.(*tls.Conn)
	for {
		s := l.cur.Load()
		var taken bool
		if secure {
			taken = s.conns.Offer(c)
		} else {
			taken = s.lean.Go(c)
		}
		if taken {
			return
		}
		if l.cur.Load() == s {
			_ = c.Close() // the listener is shutting down
			return
		}
	}
}

// reconfigure applies cfg to the connections that follow: the connection
// limit at once, and a new server when its settings or TLS changed. It
// returns the replaced server, to be shut down, or nil. d.lnMu is held.
func (d *Daemon) reconfigure(l *listener, cfg *config.Config, tlsCfg *tls.Config) *served {
	l.limit.Store(int64(cfg.Server.MaxConnections))
	st := settingsOf(cfg)
	if st.equal(l.settings) {
		if tlsCfg != nil {
			l.tls.Store(tlsCfg)
		}
		return nil
	}
	l.settings = st
	l.tls.Store(tlsCfg)
	next := l.newServed()
	if d.noKeepAlive {
		next.endKeepAlives() // the shutdown delay began
	}
	d.serveOne(l, next)
	return l.cur.Swap(next)
}

// shutdown stops accepting and lets the current server's requests finish
// within grace, then closes what is left.
func (l *listener) shutdown(logger *slog.Logger, grace time.Duration) {
	l.closing.Store(true)
	_ = l.ln.Close()
	<-l.accepted
	l.cur.Load().shutdown(logger, l.ln.Addr().String(), grace)
}

// shutdown lets the servers' requests finish within grace.
func (s *served) shutdown(logger *slog.Logger, addr string, grace time.Duration) {
	ctx, cancel := context.WithTimeoutCause(context.Background(), grace, fmt.Errorf("shutdown grace of %s exceeded", grace))
	defer cancel()
	s.retire(ctx, logger, addr)
}

// replaced retires servers a reload replaced on the same listener: on a
// plain listener no idle kept-alive connection is closed under the
// client's next request (a POST lost): each ends after its next answer
// (Connection: close) or at its idle timeout, the lean server's
// (h1.Server.Retire) and then those it handed to net/http. A TLS
// listener's connections retire as at a shutdown: an HTTP/2 client gets a
// GOAWAY, an idle HTTP/1.1 one is closed. Those left when ctx ends are
// cut; the shutdown's drain closes the idle ones at once (closeIdle).
func (s *served) replaced(ctx context.Context, logger *slog.Logger) {
	s.endKeepAlives()
	// The lean server first: a connection it hands off meanwhile finds
	// net/http's server open.
	err := s.lean.Retire(ctx)
	if !s.secure {
		awaitZero(ctx, &s.httpConns)
	}
	s.stopNetHTTP(ctx, logger, "", err)
}

// closeIdle closes the idle connections of a server a reload replaced:
// the shutdown's drain.
func (s *served) closeIdle() {
	s.lean.CloseIdle()
	s.srv.SetKeepAlivesEnabled(false)
}

// awaitZero returns when n is 0 or ctx ends.
func awaitZero(ctx context.Context, n *atomic.Int64) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for n.Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// retire lets the servers' requests finish until ctx ends, when those
// left are cut.
func (s *served) retire(ctx context.Context, logger *slog.Logger, addr string) {
	// No new request starts on a connection net/http serves: its idle
	// keep-alive connections close now and busy ones after their answer
	// (an HTTP/2 one with a GOAWAY once its streams end), as the lean
	// server does with its own, instead of serving requests that began
	// after the drain did until the end of the grace cuts them.
	s.srv.SetKeepAlivesEnabled(false)
	// The lean server first: a connection it hands off meanwhile (a
	// request only net/http serves) still finds net/http's server open,
	// and net/http's shutdown waits until that request has reached the
	// handler (net/http drops one it reads after its shutdown began).
	s.stopNetHTTP(ctx, logger, addr, s.lean.Shutdown(ctx))
}

// stopNetHTTP ends net/http's server once the lean one is done (err is
// the lean server's outcome): what the lean one handed off has reached
// its handler, then net/http's requests finish until ctx ends, when
// those left are cut.
func (s *served) stopNetHTTP(ctx context.Context, logger *slog.Logger, addr string, err error) {
	if derr := s.conns.Drain(ctx); err == nil {
		err = derr
	}
	s.srv.SetKeepAlivesEnabled(false)
	if serr := s.srv.Shutdown(ctx); serr != nil {
		s.cut(h1.ErrCut)
		_ = s.srv.Close()
		err = serr
	}
	s.cut(nil) // nothing is left to end: its resources go
	if err != nil {
		logger.Warn("requests still in flight at the end of the grace period", "address", addr, "err", context.Cause(ctx))
	}
}

func (l *listener) addr() string {
	if l == nil {
		return ""
	}
	return l.ln.Addr().String()
}

// trackedConn counts an open connection until it is closed.
type trackedConn struct {
	net.Conn
	l    *listener
	once sync.Once
}

// CloseWrite shuts the write side of a TCP connection: servers do so
// before closing a connection with unread input, so that the client reads
// the last answer before a reset.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn is the connection counted, which the lean server reads and
// writes directly (only Close counts).
func (c *trackedConn) NetConn() net.Conn { return c.Conn }

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.metrics.Connections.Dec()
	})
	return c.Conn.Close()
}

// streamWriteBound bounds each write of an answer net/http serves over
// HTTP/2 as the connection's write timeout bounds HTTP/1's: under HTTP/2's
// flow control a client that grants no window takes none of its answer
// without ever blocking a write on the socket, so the handler's Write
// would wait for it forever, holding its in-flight slot and its backend
// request. The stream's own write deadline, moved as the lean server moves
// a connection's, resets that stream alone; a client that reads keeps its
// stream however long it runs. Zero d bounds nothing.
func streamWriteBound(h http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor < 2 {
			h.ServeHTTP(w, r) // the connection's own write timeout holds
			return
		}
		h.ServeHTTP(&boundWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: d}, r)
	})
}

// boundWriter is an HTTP/2 stream's answer whose every write and flush
// waits at most d (at least d/2) for the client.
type boundWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	d     time.Duration
	until time.Time
}

func (w *boundWriter) move() {
	if next, move := h1.NextWriteDeadline(w.until, w.d); move {
		w.until = next
		_ = w.rc.SetWriteDeadline(next)
	}
}

func (w *boundWriter) Write(p []byte) (int, error) {
	w.move()
	return w.ResponseWriter.Write(p)
}

// FlushError flushes what was written, within the same bound.
func (w *boundWriter) FlushError() error {
	w.move()
	return w.rc.Flush()
}

// Flush is FlushError without its error, for http.Flusher.
func (w *boundWriter) Flush() { _ = w.FlushError() }

// Unwrap gives http.ResponseController the stream's own writer.
func (w *boundWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
