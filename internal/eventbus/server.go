package eventbus

import (
	"context"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
)

// protoH2 is HTTP/2's ALPN name.
const protoH2 = "h2"

// connKey keys a request context's busConn.
type connKey struct{}

// server is one generation of the HTTP/2 server. The listener accepts,
// checks the first byte and completes the TLS handshake itself, then
// hands the connection over; the server serves it with the limits of the
// settings it was built with (net/http's HTTP2Config gives the listener
// the flow-control windows: the per-stream receive window is the stream's
// budget). A reload that changes the limits builds a new generation for
// the connections that follow; the old one keeps serving its own.
type server struct {
	settings *Settings
	srv      *http.Server
	ln       *handoff
	done     chan struct{} // Serve returned
}

// handoff is the listener a server accepts handed-over connections from.
type handoff struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
	addr   net.Addr
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.closed:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() { close(h.closed) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }

// handOff gives a handshaken connection to the current server; false when
// none takes it (shutting down), and the caller closes it.
func (b *Bus) handOff(ctx context.Context, bc *busConn) bool {
	sv := b.server()
	if sv == nil {
		return false
	}
	b.mu.Lock()
	b.byTLS[bc.tls] = bc
	b.mu.Unlock()
	select {
	case sv.ln.conns <- bc.tls:
		return true
	case <-sv.ln.closed:
	case <-ctx.Done():
	}
	b.mu.Lock()
	delete(b.byTLS, bc.tls)
	b.mu.Unlock()
	return false
}

// server returns the server of the current settings, building it when
// the settings changed; nil when the bus is stopped.
func (b *Bus) server() *server {
	s := b.settings.Load()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return nil
	}
	if b.current != nil && b.current.settings == s {
		return b.current
	}
	if b.current != nil {
		_ = b.current.ln.Close()
	}
	budget := StreamBudget(s.MaxSessionBufferBytes, s.MaxStreamsPerSession)
	var protos http.Protocols
	protos.SetHTTP2(true)
	sv := &server{settings: s, ln: &handoff{conns: make(chan net.Conn), closed: make(chan struct{}), addr: b.addr}, done: make(chan struct{})}
	sv.srv = &http.Server{
		Handler:   http.HandlerFunc(b.serveHTTP),
		Protocols: &protos,
		HTTP2: &http.HTTP2Config{
			// The control channel and every stream of a session fit; more
			// is refused by HTTP/2 itself.
			MaxConcurrentStreams: s.MaxStreamsPerSession + 8,
			// One frame is the "current receive frame" of the budget.
			MaxReadFrameSize: maxFrameBytes,
			// A client can send a stream no more than its budget before
			// the router reads it.
			MaxReceiveBufferPerStream:     budget,
			MaxReceiveBufferPerConnection: int(min(int64(budget)*int64(s.MaxStreamsPerSession+1), math.MaxInt32)),
			SendPingTimeout:               b.t.keepalive,
			PingTimeout:                   b.t.pingTimeout,
			WriteByteTimeout:              s.IdleTimeout,
		},
		// A connection closes 30 s after its last request ended, sooner
		// when idle_timeout is shorter.
		IdleTimeout:    min(b.t.idleConn, s.IdleTimeout),
		MaxHeaderBytes: 16 << 10,
		ErrorLog:       slog.NewLogLogger(b.logger.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			b.mu.Lock()
			defer b.mu.Unlock()
			return context.WithValue(ctx, connKey{}, b.byTLS[c])
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			switch st {
			case http.StateActive, http.StateIdle:
				b.connStreaming(c, st == http.StateActive)
			case http.StateClosed, http.StateHijacked:
				b.connClosed(c)
			}
		},
	}
	b.current = sv
	// Earlier generations whose Serve returned need no waiting for.
	live := b.servers[:0]
	for _, o := range b.servers {
		select {
		case <-o.done:
		default:
			live = append(live, o)
		}
	}
	b.servers = append(live, sv)
	go func() {
		defer close(sv.done)
		_ = sv.srv.Serve(sv.ln)
	}()
	return sv
}

// connStreaming records whether the server has a stream open on c: it
// reports a connection active at its first open stream and idle when its
// last has closed (the stream's last frame written).
func (b *Bus) connStreaming(c net.Conn, streaming bool) {
	b.mu.Lock()
	bc := b.byTLS[c]
	b.mu.Unlock()
	if bc == nil {
		return
	}
	bc.streaming.Store(streaming)
	if !streaming {
		b.quieterNow()
	}
}

// connClosed releases a connection the server is done with.
func (b *Bus) connClosed(c net.Conn) {
	b.mu.Lock()
	bc := b.byTLS[c]
	b.mu.Unlock()
	if bc == nil {
		return
	}
	bc.authTimer.Stop()
	bc.stopIdle()
	_ = bc.raw.Close()
	b.releaseConn(bc)
}
