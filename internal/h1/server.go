// Package h1 is a lean HTTP/1.1 server for the router's plain listener.
//
// net/http's server reads every request on the connection's goroutine,
// then starts a second goroutine per request that blocks in a read of the
// connection (to notice a client that leaves) and wakes the first when the
// handler ends; on a small machine those hand-offs and the wake-ups of
// threads they cause are a good part of what a proxy adds to a short
// request. Here one goroutine per connection reads a request, runs the
// handler and writes the answer, and a client that leaves is looked for
// only once a request has run for a while (watchDelay): the requests that
// matter for cancellation (generations) are long, and short ones then cost
// no second goroutine.
//
// The lean path serves only plain requests: HTTP/1.1 in origin form, a head
// within 4 KiB, a body announced by Content-Length or none. Anything else
// (chunked bodies, Expect, upgrades, HTTP/1.0, malformed heads) is handed,
// with the bytes already read, to a net/http server through Fallback, which
// then owns the connection; so every edge of the protocol keeps net/http's
// behaviour, errors included.
package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// bufferSize is each connection's read and write buffer; a request head
	// must fit in the read buffer to be served here.
	bufferSize = 4 << 10
	// watchDelay is how long a request runs before a read of its connection
	// looks out for the client leaving (net/http looks from the start). The
	// requests that arrive start the watches that are due, and the
	// watcher's one timer only covers a quiet spell (see watcher): a client
	// that leaves is noticed within about watchDelay while requests keep
	// coming and within watchDelay plus watchTick otherwise, long before a
	// model would have finished the answer it no longer waits for; a
	// stream notices at its next write.
	watchDelay = 100 * time.Millisecond
	// maxDrain is what is read and dropped of a body the handler left
	// unread so that the connection can carry the next request (net/http's
	// bound); beyond it the connection is closed.
	maxDrain = 256 << 10
	// sniffLen is the answer's first bytes held back so that a handler that
	// ends within them gets a Content-Length (and a sniffed Content-Type
	// when it set none), as net/http does.
	sniffLen = 2 << 10
)

// Server serves the connections given to ServeConn. Set the fields before
// the first connection; they are not changed afterwards.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request's head, ReadTimeout the
	// whole request, IdleTimeout the wait for the next request on a kept
	// connection (ReadTimeout when zero), as in http.Server.
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// WriteTimeout bounds how long a write may wait for a client that
	// takes no bytes of its answer: past it the write fails and the
	// request ends (its handler sees the error). 0: no bound.
	WriteTimeout time.Duration
	// Fallback takes a connection whose next request the lean path does
	// not serve, with what was read of it replayed; it owns the connection
	// from then on. Required.
	Fallback func(net.Conn)
	Logger   *slog.Logger

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutting atomic.Bool
	// retiring: no new connection is taken (Retire); noKeepAlive: every
	// answer closes its connection (EndKeepAlives).
	retiring    atomic.Bool
	noKeepAlive atomic.Bool
	watcher     watcher
}

// Go serves c on a new goroutine until the client or the server closes
// it, or hands it to Fallback; false, with c left open, when the server is
// shutting down.
func (s *Server) Go(rwc net.Conn) bool {
	c := &conn{srv: s, rwc: rwc, sock: SocketIO(rwc)}
	if !s.track(c) {
		return false
	}
	go c.serveConn()
	return true
}

func (c *conn) serveConn() {
	rwc := c.rwc
	c.br = bufio.NewReaderSize(readerFunc(c.read), bufferSize)
	c.bw = bufio.NewWriterSize(writerFunc(c.write), bufferSize)
	c.remote = rwc.RemoteAddr().String()
	c.raw, _ = c.srv.Handler.(RawServer)
	if c.serve() {
		return // handed off
	}
	c.untrack()
	_ = rwc.Close()
}

// Shutdown stops serving: idle connections close at once, busy ones after
// the answer they are writing; it returns when none is left, or closes
// what is left when ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.CloseIdle()
	return s.awaitNone(ctx, 5*time.Millisecond)
}

// CloseIdle stops serving without waiting: idle connections close at
// once, busy ones after the answer they are writing (a server retiring
// once its process shuts down).
func (s *Server) CloseIdle() {
	s.shutting.Store(true)
	s.mu.Lock()
	for c := range s.conns {
		c.wakeIfIdle()
	}
	s.mu.Unlock()
}

// EndKeepAlives makes every answer from now on close its connection
// (Connection: close) and leaves idle connections be: a client's next
// request on one is served, then the connection ends. Clients so move to
// other connections without a request sent on one closed under it, which
// no client may safely send again (a POST).
func (s *Server) EndKeepAlives() { s.noKeepAlive.Store(true) }

// Retire ends the server as another takes its place: it takes no new
// connection, every answer closes its connection (EndKeepAlives), and idle
// ones stay until their next request or their idle timeout, not closed
// under a request. It returns when none is left, or closes what is left
// when ctx ends.
func (s *Server) Retire(ctx context.Context) error {
	s.retiring.Store(true)
	s.EndKeepAlives()
	// Connections leave over seconds (an idle timeout): polled slowly.
	return s.awaitNone(ctx, 100*time.Millisecond)
}

// awaitNone returns when no connection is left, or closes them all when
// ctx ends.
func (s *Server) awaitNone(ctx context.Context, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			_ = s.Close()
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Close closes every connection at once.
func (s *Server) Close() error {
	s.shutting.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.cut.Store(true) // before the close its request's context may end by
		_ = c.rwc.Close()
	}
	return nil
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() || s.retiring.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = map[*conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) headerTimeout() time.Duration {
	if s.ReadHeaderTimeout > 0 {
		return s.ReadHeaderTimeout
	}
	return s.ReadTimeout
}

func (s *Server) logf(msg string, args ...any) {
	if s.Logger != nil {
		s.Logger.Warn(msg, args...)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Connection states, for Shutdown.
const (
	stateActive int32 = iota
	stateIdle         // waiting for the first byte of a request
)

// Watch states.
const (
	watchOff     = iota
	watchArmed   // the timer runs
	watchReading // a read looks out for the client
	watchAborted // the request ended; the read is being woken
)

type conn struct {
	srv *Server
	rwc net.Conn
	// sock reads and writes rwc (SocketIO).
	sock   io.ReadWriter
	br     *bufio.Reader
	bw     *bufio.Writer
	remote string
	// raw is the handler's RawServer, nil when it has none.
	raw    RawServer
	state  atomic.Int32
	served int // requests so far
	// started is when the current request's head began (with a
	// ReadTimeout).
	started time.Time
	// afterPost: the last request was a POST, after whose body old
	// clients may send a stray CRLF (net/http skips up to four such
	// bytes then, and so does readHead).
	afterPost bool
	// pendBuf holds the start of an answer's body until its head is
	// committed.
	pendBuf [sniffLen]byte
	// writeUntil is the write deadline write set last (WriteTimeout).
	writeUntil time.Time
	// idleUntil is the read deadline setIdleDeadline set last, zero when
	// the deadline has been set otherwise since.
	idleUntil time.Time
	// headBy is the deadline of the head being read: zero when no head
	// timeout applies or, after a connection's first request, when the
	// head came in one read. A head handed off unfinished keeps it
	// (replayConn).
	headBy time.Time

	// The current request's context; ended when the client leaves or a
	// write fails.
	rctx *reqContext
	// cut: the server's Close closed the connection (the end of a
	// shutdown's grace): the request it served was cut, not left.
	cut atomic.Bool
	// answered: the current request's declared body is all written and
	// being sent. A client that leaves after that has its answer: the
	// watch does not end the context (the handler's accounting after its
	// last write would otherwise call a served request abandoned, and cut
	// what it hands back, such as a backend connection).
	answered atomic.Bool

	mu        sync.Mutex // guards the watch and what it read
	watchSt   int
	watchDone chan struct{}
	// The server's watcher links the requests waiting for their watch
	// (under its lock).
	wprev, wnext *conn
	waiting      bool
	armedAt      time.Time
	// peek is a byte the watch read (the next request's first), read again
	// before the connection.
	peek    [1]byte
	hasPeek bool
}

// read is the connection as the read buffer sees it: the watch's byte,
// then the socket.
func (c *conn) read(p []byte) (int, error) {
	if len(p) > 0 && c.hasPeek {
		// The watch has ended (stopWatch waits for it), so no lock.
		c.hasPeek = false
		p[0] = c.peek[0]
		return 1, nil
	}
	return c.sock.Read(p)
}

func (c *conn) write(p []byte) (int, error) {
	if d := c.srv.WriteTimeout; d > 0 {
		c.writeUntil = moveWriteDeadline(c.rwc, c.writeUntil, d)
	}
	n, err := c.sock.Write(p)
	if err != nil && c.rctx != nil {
		c.rctx.end()
	}
	return n, err
}

func (c *conn) untrack() {
	c.srv.mu.Lock()
	delete(c.srv.conns, c)
	c.srv.mu.Unlock()
}

func (c *conn) wakeIfIdle() {
	if c.state.Load() == stateIdle {
		_ = c.rwc.SetReadDeadline(aLongTimeAgo)
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// NextWriteDeadline is the write deadline to set, and whether to set it,
// for a write waiting at least d/2 for a client that takes nothing: the
// one set before, until, while it is at least d/2 away, else d from now.
// A busy connection moves its deadline about twice per d rather than per
// write.
func NextWriteDeadline(until time.Time, d time.Duration) (time.Time, bool) {
	now := time.Now()
	if until.Sub(now) >= d/2 {
		return until, false
	}
	return now.Add(d), true
}

// moveWriteDeadline moves c's write deadline as NextWriteDeadline says and
// returns the deadline now set.
func moveWriteDeadline(c net.Conn, until time.Time, d time.Duration) time.Time {
	if next, move := NextWriteDeadline(until, d); move {
		_ = c.SetWriteDeadline(next)
		return next
	}
	return until
}

// WithWriteTimeout returns c whose writes wait at most d (at least d/2)
// for a peer that takes no bytes, as Server.WriteTimeout bounds the lean
// server's: for the connections net/http serves (TLS, handed off), whose
// own WriteTimeout bounds a whole answer, a stream included. One writer at
// a time, as net/http writes.
func WithWriteTimeout(c net.Conn, d time.Duration) net.Conn {
	if d <= 0 {
		return c
	}
	return &stallBound{Conn: c, d: d}
}

type stallBound struct {
	net.Conn
	d time.Duration
	// until is the write deadline Write set last, in Unix nanoseconds (0:
	// none). Atomic: net/http sets deadlines of its own from another
	// goroutine than the one writing (an HTTP/2 connection's frames are
	// written by a goroutine of their own).
	until atomic.Int64
}

func (c *stallBound) Write(p []byte) (int, error) {
	var until time.Time
	if n := c.until.Load(); n != 0 {
		until = time.Unix(0, n)
	}
	if next, move := NextWriteDeadline(until, c.d); move {
		_ = c.Conn.SetWriteDeadline(next)
		c.until.Store(next.UnixNano())
	}
	return c.Conn.Write(p)
}

// SetWriteDeadline and SetDeadline replace the deadline Write set last, so
// Write sets its own again before the next write: net/http clears the
// socket's deadlines after a TLS handshake and after each request, and a
// bound that believed its deadline still set would let a write to a peer
// that takes nothing wait for ever. (A deadline set from outside thus holds
// until the next write; net/http sets one only around a TLS handshake,
// whose few KiB of writes a socket buffer takes whole.)
func (c *stallBound) SetWriteDeadline(t time.Time) error {
	c.until.Store(0)
	return c.Conn.SetWriteDeadline(t)
}

func (c *stallBound) SetDeadline(t time.Time) error {
	c.until.Store(0)
	return c.Conn.SetDeadline(t)
}

// stallBound has no NetConn method: SocketIO would unwrap it and write
// past its Write, the bound with it.

// CloseWrite shuts the write side when c can (net/http does so before
// closing a connection with unread input).
func (c *stallBound) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

var errHandedOff = errors.New("handed off")

// serve runs the connection's requests; true when it was handed off.
func (c *conn) serve() bool {
	for {
		h, err := c.readHead()
		if err != nil {
			return errors.Is(err, errHandedOff)
		}
		if !c.serveRequest(h) {
			return false
		}
	}
}

// readHead waits for the next request and parses its head. A request the
// lean path does not serve is handed off (errHandedOff).
func (c *conn) readHead() (head, error) {
	s := c.srv
	c.headBy = time.Time{}
	if c.served == 0 {
		// The first request's deadline, set before its first byte, covers
		// its whole head (net/http's rule).
		if c.br.Buffered() == 0 {
			c.headBy = c.setReadDeadline(s.headerTimeout())
			if _, err := c.idlePeek(1); err != nil {
				return head{}, err
			}
		}
	} else if err := c.awaitNext(); err != nil {
		return head{}, err
	}
	if s.ReadTimeout > 0 {
		c.started = time.Now() // ReadTimeout counts from the head's first byte
	}
	// A later request's header deadline is set when its head does not
	// come in one read.
	headerSet := c.served == 0
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		end, plain := HeadEnd(buf)
		if !plain {
			return head{}, c.handOff()
		}
		if end > 0 {
			h, ok := parseHead(buf[:end], c.raw == nil)
			if ok {
				ok = h.parseTarget()
			}
			if !ok {
				if FramesTwoWays(buf[:end]) {
					return head{}, c.refuseFraming()
				}
				return head{}, c.handOff()
			}
			_, _ = c.br.Discard(end)
			return h, nil
		}
		if len(buf) >= bufferSize {
			if FramesTwoWays(buf) {
				return head{}, c.refuseFraming()
			}
			return head{}, c.handOff()
		}
		if !headerSet {
			headerSet = true
			c.headBy = c.setReadDeadline(s.headerTimeout())
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			if errors.Is(err, io.EOF) && len(buf) > 0 {
				// A head cut short: net/http answers 400 to it.
				return head{}, c.handOff()
			}
			return head{}, err
		}
	}
}

// awaitNext waits, on a connection that has served a request, for four
// bytes of the next, as net/http does before it reads one: idle (under
// the idle deadline, and closed by Shutdown), the end of the client's side
// or the deadline before them closing the connection without an answer.
// After a POST, the line breaks among those four are dropped (some
// clients end a body with one, as net/http tolerates).
func (c *conn) awaitNext() error {
	if c.br.Buffered() < 4 {
		wait := c.srv.IdleTimeout
		if wait == 0 {
			wait = c.srv.ReadTimeout
		}
		c.setIdleDeadline(wait)
		if _, err := c.idlePeek(4); err != nil {
			return err
		}
	}
	if c.afterPost {
		c.afterPost = false
		peek, _ := c.br.Peek(4)
		n := 0
		for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
			n++
		}
		_, _ = c.br.Discard(n)
	}
	return nil
}

// idlePeek waits, idle, until n bytes are buffered.
func (c *conn) idlePeek(n int) ([]byte, error) {
	c.state.Store(stateIdle)
	if c.srv.shutting.Load() {
		return nil, net.ErrClosed
	}
	b, err := c.br.Peek(n)
	c.state.Store(stateActive)
	return b, err
}

// HeadEnd finds the end of the head in buf (the byte after its empty
// line), or -1 when it is not all there. plain is false when a line ends
// in a bare LF, which net/http accepts and the lean path leaves to it.
func HeadEnd(buf []byte) (end int, plain bool) {
	for i := 0; ; {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return -1, true
		}
		j += i
		if j == 0 || buf[j-1] != '\r' {
			return -1, false
		}
		if j >= 3 && buf[j-2] == '\n' && buf[j-3] == '\r' {
			return j + 1, true
		}
		i = j + 1
	}
}

// setReadDeadline sets the read deadline d from now (none for 0) and
// returns it.
func (c *conn) setReadDeadline(d time.Duration) time.Time {
	var t time.Time
	if d > 0 {
		t = time.Now().Add(d)
	}
	c.setDeadline(t)
	return t
}

// setDeadline sets the connection's read deadline to t from the
// connection's goroutine.
func (c *conn) setDeadline(t time.Time) {
	c.idleUntil = time.Time{}
	_ = c.rwc.SetReadDeadline(t)
}

// setIdleDeadline sets the wait for the next request on a kept connection
// to at least d, moving the read deadline only when the one set before is
// earlier than that: each time it moves, it is set idleSlack later than
// asked, so that a busy connection moves it about once per idleSlack
// rather than per request. Moving a deadline wakes a thread (to sleep
// in the network poller until the new earliest timer) about as often as
// it moves; the idle wait is then between d and d plus idleSlack.
func (c *conn) setIdleDeadline(d time.Duration) {
	if d <= 0 {
		c.setDeadline(time.Time{})
		return
	}
	want := time.Now().Add(d)
	if !c.idleUntil.IsZero() && !want.After(c.idleUntil) {
		return
	}
	until := want.Add(idleSlack(d))
	_ = c.rwc.SetReadDeadline(until)
	c.idleUntil = until
}

// idleSlack is how much later than asked an idle deadline is set: a
// sixteenth of the wait, at most a second.
func idleSlack(d time.Duration) time.Duration {
	return min(d/16, time.Second)
}

// FramesTwoWays reports whether a message head (or its first bytes)
// frames its body two ways: Transfer-Encoding beside Content-Length, or
// Transfer-Encoding in an HTTP/1.0 request or answer, whose framing RFC
// 9112 calls faulty. net/http reads such a message (by its
// Transfer-Encoding, or on HTTP/1.0 by its Content-Length) and keeps the
// connection, so a hop that framed it the other way would have the bytes
// after it read as a message of their own: the lean server refuses such a
// request and closes its connection; the router's client does not keep
// the connection of such an answer.
func FramesTwoWays(b []byte) bool {
	s := string(b)
	eol := indexCRLF(s)
	if eol < 0 {
		return false
	}
	http10 := strings.HasSuffix(s[:eol], " HTTP/1.0") || strings.HasPrefix(s, "HTTP/1.0 ")
	te, cl := false, false
	for rest := s[eol+2:]; rest != ""; {
		line := rest
		if i := strings.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = ""
		}
		name, _, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		name = strings.TrimRight(name, " \t")
		te = te || asciiEqualFold(name, "transfer-encoding")
		cl = cl || asciiEqualFold(name, "content-length")
	}
	return te && (cl || http10)
}

// refuseFraming answers a request whose head frames its body two ways 400
// and ends the connection (nothing after the head is read as a request).
func (c *conn) refuseFraming() error {
	const msg = "the request frames its body two ways: Transfer-Encoding with Content-Length, or in a version 1.0 request\n"
	_, _ = c.write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(msg)) + "\r\n\r\n" + msg))
	c.closeWithRead(true)
	return errFramingRefused
}

var errFramingRefused = errors.New("a request that frames its body two ways")

// handOff gives the connection to the fallback server with the bytes read
// so far in front of it.
func (c *conn) handOff() error {
	buf, _ := c.br.Peek(c.br.Buffered())
	pending := bytes.Clone(buf)
	if c.hasPeek {
		// The byte a watch read off the socket comes after the buffer's
		// (the order read keeps).
		pending = append(pending, c.peek[0])
		c.hasPeek = false
	}
	rc := &replayConn{Conn: c.rwc, pending: pending, headBy: c.headBy}
	_ = c.rwc.SetReadDeadline(time.Time{})
	c.srv.watcher.remove(c)
	// Counted until the fallback has it: a Shutdown meanwhile waits for
	// the hand-off rather than returning with the connection in no
	// server's count (the fallback's own shutdown would then miss it).
	c.srv.Fallback(rc)
	c.untrack()
	return errHandedOff
}

// replayConn reads pending before the connection.
//
// A head handed off unfinished (longer than the lean server's buffer, or
// cut short) has had part of its time already: the fallback server's
// first read deadline, the one it sets for the head, is held to headBy
// when that is earlier, so that a client trickling its head gets
// read_header_timeout once, not again from the hand-off.
type replayConn struct {
	net.Conn
	pending []byte
	headBy  time.Time
	// set: the fallback has set a read deadline (the first is the head's).
	set atomic.Bool
}

// headDeadline is t, or headBy for the first read deadline set when t is
// later (or none).
func (r *replayConn) headDeadline(t time.Time) time.Time {
	if r.headBy.IsZero() || r.set.Swap(true) {
		return t
	}
	if t.IsZero() || t.After(r.headBy) {
		return r.headBy
	}
	return t
}

func (r *replayConn) SetReadDeadline(t time.Time) error {
	return r.Conn.SetReadDeadline(r.headDeadline(t))
}

func (r *replayConn) SetDeadline(t time.Time) error {
	rt := r.headDeadline(t)
	if rt.Equal(t) {
		return r.Conn.SetDeadline(t)
	}
	if err := r.SetWriteDeadline(t); err != nil {
		return err
	}
	return r.Conn.SetReadDeadline(rt)
}

// CloseWrite shuts the connection's write side when it has one (net/http
// does so before closing a connection with unread input).
func (r *replayConn) CloseWrite() error { return closeWrite(r.Conn) }

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (r *replayConn) Read(p []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	return r.Conn.Read(p)
}

// serveRequest runs one request; false when the connection is to close.
func (c *conn) serveRequest(h head) (keep bool) {
	c.served++
	c.afterPost = h.method == http.MethodPost
	w := &response{c: c, declared: -1, reqClose: h.close}
	c.rctx = &w.rctx
	w.rctx.cut = &c.cut
	c.answered.Store(false)
	defer w.rctx.end()
	w.reqBody = body{c: c, remain: h.contentLength, armOnLastBytes: true}
	b := &w.reqBody
	w.body = b
	if h.contentLength == 0 {
		c.armWatch()
	} else if int64(c.br.Buffered()) < h.contentLength {
		var deadline time.Time
		if c.srv.ReadTimeout > 0 {
			deadline = c.started.Add(c.srv.ReadTimeout)
		}
		c.setDeadline(deadline)
	}
	if !c.run(w, &h) {
		b.end()
		c.stopWatch()
		return false
	}
	w.finish()
	// The body ends here whatever the handler left reading it; what it
	// left unread is dropped (at most maxDrain) so that the connection
	// carries the next request.
	drained := b.drain(true)
	keep = w.err == nil && !w.closeAfter && drained
	c.stopWatch()
	c.rctx = nil
	if !keep {
		c.closeWithRead(!drained)
		return false
	}
	return !c.srv.shutting.Load()
}

// run offers the request to the handler's RawServer, then calls the
// handler if that declined; false when it panicked.
func (c *conn) run(w *response, h *head) (ok bool) {
	defer func() {
		if err := recover(); err != nil {
			if e, isErr := err.(error); !isErr || !errors.Is(e, http.ErrAbortHandler) {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.logf("http: panic serving "+c.remote, "err", err, "stack", string(buf))
			}
			ok = false
		}
	}()
	var body io.ReadCloser = http.NoBody
	if h.contentLength > 0 {
		body = &w.reqBody
	}
	if c.raw != nil {
		w.raw = RawRequest{Method: h.method, Target: h.target, Fields: h.fields[:len(h.fields)-2],
			ContentLength: h.contentLength, Body: body, RemoteAddr: c.remote, ctx: &w.rctx}
		if c.raw.ServeRaw(w, &w.raw) {
			return true
		}
	}
	req := h.request(&w.rctx, &w.url)
	req.RemoteAddr = c.remote
	req.Body = body
	c.srv.Handler.ServeHTTP(w, req)
	return true
}

// closeWithRead ends a connection after its last answer. With unread
// request bytes in the socket, closing at once may make the kernel reset
// the connection and lose the answer before the client reads it, so the
// write side is shut first and the close waits a little, as net/http does.
func (c *conn) closeWithRead(unread bool) {
	if !unread {
		return
	}
	_ = closeWrite(c.rwc)
	time.Sleep(500 * time.Millisecond)
}

// armWatch puts the connection in line for a watch watchDelay from now;
// the request has been read whole, so nothing else reads the connection.
func (c *conn) armWatch() {
	c.mu.Lock()
	c.watchSt = watchArmed
	c.mu.Unlock()
	c.srv.watcher.add(c)
}

// watch runs on a goroutine of the watcher's: it reads the connection
// until the request ends (stopWatch) or the client leaves, which cancels
// the request's context. A byte that arrives meanwhile (the next request,
// pipelined) is kept for the next read.
func (c *conn) watch() {
	c.mu.Lock()
	// Bytes already read (a stray CRLF, the next request, pipelined) do
	// not stop the watch: the buffer's bytes go first, then the watch's
	// byte, so the order stays; and the client may still leave.
	if c.watchSt != watchArmed || c.hasPeek {
		c.mu.Unlock()
		return
	}
	c.watchSt = watchReading
	done := make(chan struct{})
	c.watchDone = done
	rctx := c.rctx
	_ = c.rwc.SetReadDeadline(time.Time{})
	c.mu.Unlock()
	n, err := c.sock.Read(c.peek[:])
	c.mu.Lock()
	c.hasPeek = n == 1
	aborted := c.watchSt == watchAborted
	c.watchSt = watchOff
	c.mu.Unlock()
	if n == 0 && err != nil && !aborted && rctx != nil && !c.answered.Load() {
		rctx.end()
	}
	close(done)
}

// stopWatch ends the watch of the request that ended, waiting for a read
// in progress.
func (c *conn) stopWatch() {
	c.mu.Lock()
	switch c.watchSt {
	case watchArmed:
		c.watchSt = watchOff
		c.srv.watcher.remove(c)
	case watchReading:
		c.watchSt = watchAborted
		c.setDeadline(aLongTimeAgo)
		// A watch that started on its own after an earlier request left
		// this one in line; it is watched already.
		c.srv.watcher.remove(c)
	}
	done := c.watchDone
	c.watchDone = nil
	c.mu.Unlock()
	if done != nil {
		<-done
		c.idleUntil = time.Time{} // the watch cleared the deadline
	}
}

// body is a request body of a known length. Reads after the handler
// returned fail (the connection has moved on), so a reader the handler
// left behind cannot take the next request's bytes.
type body struct {
	c  *conn
	mu sync.Mutex
	// remain is what is left to read; closed by the handler; ended when
	// the request is over or the rest was drained.
	remain         int64
	closed, ended  bool
	armOnLastBytes bool // reading the last byte arms the watch
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.ended {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

func (b *body) readLocked(p []byte) (int, error) {
	if b.remain == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remain {
		p = p[:b.remain]
	}
	n, err := b.c.br.Read(p)
	b.remain -= int64(n)
	if b.remain == 0 {
		if b.armOnLastBytes {
			b.c.armWatch()
		}
		if err == nil {
			err = io.EOF
		}
	} else if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		// The client left (or stalled past the read timeout) inside its
		// body: the request ends, as a client leaving ends it anywhere.
		b.c.rctx.end()
	}
	return n, err
}

func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

// drain reads and drops what is left of the body when it is at most
// maxDrain; false when some is left unread. With end, the body ends: later
// reads fail; else they find its end.
func (b *body) drain(end bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return b.remain == 0
	}
	if end {
		b.ended = true
		b.armOnLastBytes = false
	}
	if b.remain > maxDrain {
		return false
	}
	if b.remain == 0 {
		return true // no buffer: one would be allocated per request
	}
	var buf [512]byte
	for b.remain > 0 {
		if _, err := b.readLocked(buf[:]); err != nil && !errors.Is(err, io.EOF) {
			return false
		}
	}
	return true
}

// end ends the body without reading the rest.
func (b *body) end() {
	b.mu.Lock()
	b.ended = true
	b.armOnLastBytes = false
	b.mu.Unlock()
}
