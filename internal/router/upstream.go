package router

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/h1"
)

// upstream is the router's HTTP/1.1 client for plain http:// backends: a
// request's whole exchange (write the request, read the answer's head,
// read its body) runs on the goroutine that sends it, over a pool of
// keep-alive connections. http.Transport gives each connection a reading
// and a writing goroutine and hands every request and answer between them
// and the caller, which costs a few goroutine wake-ups per request; on a
// small machine that is a good part of what the router adds to a request.
// https backends and backends reached through an environment proxy go
// through http.Transport (fallback).
type upstream struct {
	fallback *http.Transport
	dialer   *net.Dialer
	// noHTTPProxy: fallback's Proxy is http.ProxyFromEnvironment and the
	// environment names no proxy for http:// URLs, so no request inline
	// accepts (all http://) goes through one, and inline does not ask it
	// per request. (The environment is read once, as that function reads
	// it once.)
	noHTTPProxy bool

	mu   sync.Mutex
	idle map[string]*[]*upConn // by host:port, most recently used last
	// lastAddr's list is idle[lastAddr] (nil: none kept): a router with
	// one backend, or sending most requests to one, finds the list
	// without hashing the address twice per request.
	lastAddr  string
	lastIdle  *[]*upConn
	n         int // idle connections in all
	lastSweep time.Time
	// sweeper closes idle connections past their timeout while any are
	// held, so that they do not outlive the traffic that left them.
	sweeper *time.Timer
}

// Bounds of the pool, as http.Transport's were configured.
const (
	maxIdleConns        = 4096
	upstreamIdleTimeout = 90 * time.Second
	// maxResponseHeaderBytes bounds an answer's status line and headers
	// (http.Transport's default).
	maxResponseHeaderBytes = 10 << 20
	upstreamBufferSize     = 4 << 10
	// maxInlineBody is the largest request (body and headers) sent by the
	// goroutine that then reads the answer. A backend may answer before it
	// has read a request (an error) and stop reading; a request this small
	// fits in the socket's buffer, so its write completes whatever the
	// backend does. Larger ones go through http.Transport, which writes
	// and reads at once.
	maxInlineBody = 64 << 10
)

func newUpstream(fallback *http.Transport, dialer *net.Dialer) *upstream {
	return &upstream{fallback: fallback, dialer: dialer, idle: map[string]*[]*upConn{}}
}

// upConn is one keep-alive connection to a backend.
type upConn struct {
	conn net.Conn
	// rw reads and writes conn (h1.SocketIO).
	rw       io.ReadWriter
	br       *bufio.Reader
	bw       *bufio.Writer
	addr     string
	lastUsed time.Time
	// headLimit is what the answer's head may still read (reads of the
	// body are unbounded).
	headLimit int64
	// reused: the connection carried a request before this one.
	reused bool
	// written and read count the bytes of the current exchange, which
	// decide whether a failed request may be sent again; connErr is the
	// connection's write error, if any.
	written, read int64
	connErr       error
	// deadline is the connection's deadline (zero: none), the current
	// exchange's end when the caller gave one.
	deadline time.Time
	// kill ends a blocked read or write at once (made once per
	// connection, so that cutting an exchange allocates nothing).
	kill func()
}

// setDeadline makes d the connection's deadline, or keeps the one it has
// when that is no earlier than d and at most a sixteenth of the time left
// (and at most deadlineSlack) later, and when it moves it, moves it that
// much beyond d. Moving a connection's deadline modifies two of the
// runtime's timers; on a connection that carries request after request, a
// deadline a little late then moves about once per sixteenth of the
// timeout instead of once per request. A timeout may so end an exchange
// up to that much after it was due, never before.
func (c *upConn) setDeadline(d, now time.Time) {
	if d.IsZero() {
		if !c.deadline.IsZero() {
			_ = c.conn.SetDeadline(d)
			c.deadline = d
		}
		return
	}
	slack := max(min(d.Sub(now)/16, deadlineSlack), 0)
	if !c.deadline.Before(d) && c.deadline.Sub(d) <= slack {
		return
	}
	d = d.Add(slack)
	_ = c.conn.SetDeadline(d)
	c.deadline = d
}

// deadlineSlack bounds how late a connection's deadline may be.
const deadlineSlack = time.Second

// ended is why the exchange on c has ended, or nil: its context ended, or
// its deadline passed (read as the context's deadline, as a timeout
// context would have ended).
func (c *upConn) ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// cut is what ends an exchange when its request's context ends: the lean
// server's own notifier, or context.AfterFunc for any other context.
type cut struct {
	end  h1.EndNotifier
	stop func() bool
}

func cutOn(ctx context.Context, kill func()) cut {
	if n, ok := ctx.(h1.EndNotifier); ok && n.AfterEnd(kill) {
		return cut{end: n}
	}
	return cut{stop: context.AfterFunc(ctx, kill)}
}

// release forgets the cut; false when it has happened (the connection's
// deadline was moved to end the exchange).
func (k cut) release() bool {
	if k.end != nil {
		return k.end.StopAfterEnd()
	}
	return k.stop()
}

// connWriter is the connection's side for bw, counting what reaches it.
type connWriter struct{ c *upConn }

func (w connWriter) Write(p []byte) (int, error) {
	n, err := w.c.rw.Write(p)
	w.c.written += int64(n)
	if err != nil {
		w.c.connErr = err
	}
	return n, err
}

// Read reads the connection for br, within the head's bound.
func (c *upConn) Read(p []byte) (int, error) {
	if c.headLimit <= 0 {
		return 0, errResponseHeadTooLarge
	}
	if int64(len(p)) > c.headLimit {
		p = p[:c.headLimit]
	}
	n, err := c.rw.Read(p)
	c.headLimit -= int64(n)
	c.read += int64(n)
	return n, err
}

// aLongTimeAgo is a deadline that has passed: set, it ends a blocked read
// or write at once.
var aLongTimeAgo = time.Unix(1, 0)

var errResponseHeadTooLarge = errors.New("the backend's response head is larger than 10 MiB")

// RoundTrip implements http.RoundTripper.
func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if !u.inline(req, "", nil) {
		return u.fallback.RoundTrip(req)
	}
	return u.roundTrip(req.Context(), req, "", nil, time.Time{}, false)
}

// RoundTripUntil is RoundTrip with the exchange bounded by deadline as a
// context's deadline would bound it (dial, request, answer and body), set
// as the connection's deadline instead, and by ctx, which stands for the
// request's own context: the router's own requests then need no timeout
// context, nor a copy of the request to carry one. It sends only what
// inline accepts: anything else it refuses with errNotInline, req
// untouched, for the caller to send through RoundTrip with a timeout
// context. Nothing keeps req once the answer's body is closed (the caller
// may use it again then).
//
// A plain answer comes without its header map (resp.Header nil): the
// caller relays its fields as they are (answerFields) or makes the map
// when it wants one (answerHeader).
//
// fields are a client's field lines (h1.RawRequest.Fields) sent with the
// request's header map: those a proxy passes on (clientLine), less the
// names the map holds, are written as they came. own, when not nil,
// stands for the header map (which is then empty): the request is written
// from its prepared head (see ownHead).
func (u *upstream) RoundTripUntil(ctx context.Context, req *http.Request, fields string, own *ownHead, deadline time.Time) (*http.Response, error) {
	if !u.inline(req, fields, own) {
		return nil, errNotInline
	}
	return u.roundTrip(ctx, req, fields, own, deadline, true)
}

var errNotInline = errors.New("router: RoundTripUntil given a request only http.Transport sends")

// inline reports whether req goes through this client's own exchange;
// else http.Transport sends it. A body of unknown length (ContentLength 0
// with a body) may be of any size, and an upgrade needs the connection
// handed over: http.Transport does both.
func (u *upstream) inline(req *http.Request, fields string, own *ownHead) bool {
	unsized := req.ContentLength == 0 && req.Body != nil && req.Body != http.NoBody
	if req.URL.Scheme != "http" || req.ContentLength < 0 || req.ContentLength+headerBytes(req.Header)+own.size()+int64(len(fields)) > maxInlineBody || unsized || first(req.Header, "Upgrade") != "" {
		return false
	}
	if u.noHTTPProxy {
		return true
	}
	p, err := u.fallback.Proxy(req)
	return err == nil && p == nil
}

// roundTrip sends req inline; fieldsOnly leaves a plain answer's header
// map unbuilt (RoundTripUntil).
func (u *upstream) roundTrip(ctx context.Context, req *http.Request, fields string, own *ownHead, deadline time.Time, fieldsOnly bool) (*http.Response, error) {
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	// A kept-alive connection may have been closed by the backend (its
	// idle timeout) just as the request went out on it. That request is
	// sent once more, on a new connection, when that is safe (see
	// retryable); a new connection is never retried, so a
	// backend that hangs up on a request is not sent it again and again.
	c, err := u.get(ctx, deadline, addr, true)
	for {
		if err != nil {
			closeRequestBody(req)
			return nil, err
		}
		var resp *http.Response
		if resp, err = u.exchange(ctx, c, req, fields, own, fieldsOnly); err == nil {
			if !idleTimeoutAnswer(ctx, resp, req, c) {
				return resp, nil
			}
			// The backend timed the kept-alive connection out as the
			// request went out on it: it says it did not act on it.
			_ = resp.Body.Close()
			if req, err = rewound(req); err != nil {
				return nil, err
			}
			c, err = u.get(ctx, deadline, addr, false)
			continue
		}
		if !c.reused || !retryable(ctx, req, fields, c) {
			closeRequestBody(req)
			return nil, err
		}
		if req, err = rewound(req); err != nil {
			return nil, err
		}
		c, err = u.get(ctx, deadline, addr, false)
	}
}

// exchange writes req on c and reads the answer's head (see roundTrip for
// fieldsOnly). On an error the connection is closed.
func (u *upstream) exchange(ctx context.Context, c *upConn, req *http.Request, fields string, own *ownHead, fieldsOnly bool) (*http.Response, error) {
	c.written, c.read, c.connErr = 0, 0, nil
	// The context ends a blocked read or write at once: its deadline, the
	// client going away. (A deadline given apart from the context is the
	// connection's already.)
	stop := cutOn(ctx, c.kill)
	fail := func(err error) (*http.Response, error) {
		stop.release()
		_ = c.conn.Close()
		if end := c.ended(ctx); end != nil {
			return nil, fmt.Errorf("the request to the backend ended: %w", end)
		}
		return nil, err
	}
	// The request (headers and a body of at most maxInlineBody) is
	// written whole before the answer is read. Expect: 100-continue does
	// not make it wait: a client may send the body without waiting for
	// 100 Continue, which is then read and skipped like any 1xx.
	var werr error
	if own != nil {
		werr = writeOwnRequest(c.bw, req, own, fields)
	} else {
		werr = writeRequest(c.bw, req, fields)
	}
	if werr == nil {
		werr = c.bw.Flush()
	}
	if werr != nil && (c.connErr == nil || c.written == 0 || c.ended(ctx) != nil) {
		return fail(werr)
	}
	// A write the connection failed after some of the request went out
	// may be a backend that answered before reading the whole body (a
	// refusal, an error) and closed the connection: its answer is read all
	// the same (the kernel keeps what had arrived), and the connection is
	// not reused. A connection that failed reads at once, so this never
	// waits.
	c.headLimit = maxResponseHeaderBytes
	var resp *http.Response
	b := new(upBody) // with the plain answer's body readers in it
	b.pb.fieldsOnly = fieldsOnly
	for {
		var err error
		resp, err = readResponse(c.br, req, &b.pb)
		if err != nil {
			switch {
			case werr != nil:
				err = werr
			case c.read == 0 && !errors.Is(err, errResponseHeadTooLarge):
				err = fmt.Errorf("the backend closed the connection without an answer: %w", err)
			}
			return fail(err)
		}
		// Informational answers (100 Continue, 103 Early Hints) come
		// before the answer; their heads count against the same bound.
		if resp.StatusCode == http.StatusSwitchingProtocols && first(req.Header, "Upgrade") == "" {
			// A switch no request asked for (the router sends no
			// Upgrade inline) leaves no HTTP answer to relay.
			return fail(errors.New("the backend switched protocols for a request that asked for no upgrade"))
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	c.headLimit = 1<<63 - 1
	// The connection carries the next request only when both sides meant
	// to keep it (no Connection: close, no HTTP/1.0 answer without
	// keep-alive, no body that ends with the connection, which
	// ReadResponse marks as Close) and it still speaks HTTP (not after a
	// 101).
	reuse := !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols && werr == nil
	b.u, b.c, b.rc, b.ctx, b.stop, b.reuse = u, c, resp.Body, ctx, stop, reuse
	if resp.Body == http.NoBody {
		b.finish(true, io.EOF)
	}
	resp.Body = b
	return resp, nil
}

// retryable reports whether req, which failed on a kept-alive connection
// before any of an answer came back, may be sent again: when none of it
// reached the connection (the backend cannot have seen it), or when it is
// idempotent (sending it twice does no harm); in both cases only if its
// body can be sent again. A request the context ended is not retried.
func retryable(ctx context.Context, req *http.Request, fields string, c *upConn) bool {
	if c.ended(ctx) != nil || c.read > 0 {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	if c.written == 0 {
		return true
	}
	if pinned(req) {
		// A pinned dispatch that may have reached its worker runs again
		// only with the workers' consent (a card's migration_limit), which
		// the dispatch judges, never by the transport's own rule: the
		// frontend applies no idempotency key, and the worker would
		// compute the answer twice.
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	// A client that names its request with an idempotency key says that
	// the backend applies it once however often it is sent.
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != "" ||
		clientValue(fields, "Idempotency-Key") != "" || clientValue(fields, "X-Idempotency-Key") != ""
}

// headerBytes is about what h takes on the wire.
func headerBytes(h http.Header) int64 {
	if len(h) == 0 {
		return 0 // the plain path's: no iterator set up over an empty map
	}
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

// idleTimeoutAnswer reports whether resp is the 408 a backend sends as it
// closes a kept-alive connection it timed out, which a request sent on
// that connection at the same moment reads as its answer: a 408 closing a
// reused connection, for a request whose body can be sent again. A 408
// means the backend did not act on the request (it did not get all of it
// in time), so any request may be sent again, once, on a new connection.
//
// Not for a pinned dispatch (whose frontend, or a mesh proxy in front of
// it, may say 408 of a request it ran): its 408 is the dispatch's failure
// to judge (see retryable).
func idleTimeoutAnswer(ctx context.Context, resp *http.Response, req *http.Request, c *upConn) bool {
	return resp.StatusCode == http.StatusRequestTimeout && resp.Close && c.reused && c.ended(ctx) == nil &&
		(req.Body == nil || req.Body == http.NoBody || req.GetBody != nil) && !pinned(req)
}

// pinKey is the pin header every pinned dispatch carries, canonical.
var pinKey = http.CanonicalHeaderKey(shim.HeaderWorkerInstanceID)

// pinned reports whether req is a dispatch pinned to a Dynamo worker.
func pinned(req *http.Request) bool {
	_, ok := req.Header[pinKey]
	return ok
}

// rewound is req with its body from the start again, for a retry; the
// caller's request is not modified (a shallow copy carries the new body).
func rewound(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("rewinding the request body for a retry: %w", err)
	}
	r := *req
	r.Body = body
	return &r, nil
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// get takes an idle connection to addr that the backend has not closed
// (when idle allows it), or dials one, with deadline as its deadline.
func (u *upstream) get(ctx context.Context, deadline time.Time, addr string, idle bool) (*upConn, error) {
	now := time.Now()
	for idle {
		u.mu.Lock()
		lp := u.idleList(addr, false)
		if lp == nil || len(*lp) == 0 {
			u.mu.Unlock()
			break
		}
		list := *lp
		c := list[len(list)-1]
		list[len(list)-1] = nil
		// An emptied list keeps its key and its array for the put that
		// follows (a sweep drops the key of a backend gone from the
		// configuration).
		*lp = list[:len(list)-1]
		u.n--
		u.mu.Unlock()
		if now.Sub(c.lastUsed) < upstreamIdleTimeout {
			// The new deadline first: the last exchange's may have
			// passed while the connection was idle, and the check reads.
			c.setDeadline(deadline, now)
			if c.open() {
				c.reused = true
				return c, nil
			}
		}
		_ = c.conn.Close()
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	conn, err := u.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &upConn{conn: conn, rw: h1.SocketIO(conn), addr: addr}
	c.kill = func() { _ = conn.SetDeadline(aLongTimeAgo) }
	c.setDeadline(deadline, now)
	c.br = bufio.NewReaderSize(c, upstreamBufferSize)
	c.bw = bufio.NewWriterSize(connWriter{c}, upstreamBufferSize)
	return c, nil
}

// put keeps c for the next request to its backend.
func (u *upstream) put(c *upConn) {
	c.lastUsed = time.Now()
	u.mu.Lock()
	if c.lastUsed.Sub(u.lastSweep) > upstreamIdleTimeout/4 {
		u.sweep(c.lastUsed)
	}
	lp := u.idleList(c.addr, true)
	if len(*lp) >= maxIdleConnsPerBE || u.n >= maxIdleConns {
		u.mu.Unlock()
		_ = c.conn.Close()
		return
	}
	*lp = append(*lp, c)
	u.n++
	if u.sweeper == nil {
		u.sweeper = time.AfterFunc(upstreamIdleTimeout/4, u.sweepIdle)
	}
	u.mu.Unlock()
}

// sweepIdle is the sweeper's turn: it closes what timed out and comes
// again while connections are held.
func (u *upstream) sweepIdle() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.sweep(time.Now())
	if u.n > 0 {
		u.sweeper.Reset(upstreamIdleTimeout / 4)
		return
	}
	u.sweeper = nil
}

// upBody is an answer's body: read to its end, it gives the connection
// back to the pool; closed before, it closes the connection (the rest of a
// stream is not drained). Close may be called while a Read is blocked (to
// end it, as http.Transport's bodies allow): the first of them to end the
// body decides what becomes of the connection.
type upBody struct {
	u     *upstream
	c     *upConn
	rc    io.ReadCloser
	pb    plainBody // rc, for a plain answer
	ctx   context.Context
	stop  cut
	reuse bool

	mu   sync.Mutex
	done atomic.Bool
	err  error // what reads return once done: io.EOF, or why the body ended
	// broke: a read from the backend failed (a reset, a body shorter than
	// its length), not by a timeout nor the router's own ending of it
	// (readEnd's wait, Close).
	broke, ending bool
}

// Broke reports whether reading the body from the backend failed.
func (b *upBody) Broke() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.broke
}

// Buffered is how many bytes of the connection's input are read and not
// yet taken: some of the body when not zero.
func (b *upBody) Buffered() int {
	if b.c == nil || b.c.br == nil || b.done.Load() {
		return 0
	}
	return b.c.br.Buffered()
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.done.Load() {
		return 0, b.doneErr()
	}
	n, err := b.rc.Read(p)
	if err == nil {
		return n, nil
	}
	if errors.Is(err, io.EOF) {
		if !b.finish(true, io.EOF) {
			return n, b.doneErr() // closed meanwhile
		}
		return n, io.EOF
	}
	if end := b.c.ended(b.ctx); end != nil {
		err = fmt.Errorf("reading the backend's response: %w", end)
	}
	if !b.finish(false, err) {
		return n, b.doneErr() // closed meanwhile: the router ended it
	}
	// A read that timed out (the backend's timeout reached in a long
	// answer, or a client too slow to take it) is no broken answer: the
	// backend was sending.
	var ne net.Error
	timedOut := errors.As(err, &ne) && ne.Timeout()
	b.mu.Lock()
	b.broke = !b.ending && !timedOut
	b.mu.Unlock()
	return n, err
}

func (b *upBody) Close() error {
	b.finish(false, errBodyClosed)
	return nil
}

func (b *upBody) doneErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

var errBodyClosed = errors.New("read on a closed response body")

// A stream the router has read to its final event (data: [DONE]) is not
// over on the wire: the backend writes the end of its chunked body after
// it, usually a few bytes and microseconds later, in a segment of its own.
// Closing the body then would close a connection that is about to be
// reusable, and a converted stream would dial anew for every request. So
// the rest is read, within endWait and endBytes: more than a body's framing
// takes, too little to hold a backend that keeps its stream open after its
// last event.
const (
	endWait  = 50 * time.Millisecond
	endBytes = 4 << 10
)

// readEnd reads the rest of a body whose answer the caller has whole (a
// stream read to its final event), so that the connection goes back to the
// pool; past endWait or endBytes, or on an error, the connection is closed
// as Close would close it.
func (b *upBody) readEnd() {
	if b.done.Load() || b.ctx.Err() != nil {
		return // ended, or cut by the client's leaving (Close closes it)
	}
	b.mu.Lock()
	b.ending = true
	b.mu.Unlock()
	// Not setDeadline: its slack would let this wait run past endWait.
	if d := time.Now().Add(endWait); b.c.deadline.IsZero() || d.Before(b.c.deadline) {
		_ = b.c.conn.SetDeadline(d)
		b.c.deadline = d
	}
	var buf [512]byte
	for read := 0; read <= endBytes; {
		n, err := b.Read(buf[:])
		if err != nil {
			return // the end (pooled) or a failure (closed)
		}
		read += n
	}
	_ = b.Close()
}

// finish ends the body, unless it has ended already (it then reports
// false): reads return err from now on, and the connection goes back to
// the pool when the body ended cleanly and the context did not touch the
// connection's deadline, else it is closed.
func (b *upBody) finish(ended bool, err error) bool {
	b.mu.Lock()
	if b.done.Load() {
		b.mu.Unlock()
		return false
	}
	b.err = err
	b.done.Store(true)
	b.mu.Unlock()
	if b.stop.release() && ended && b.reuse {
		b.u.put(b.c)
		return true
	}
	_ = b.c.conn.Close()
	return true
}

// CloseIdleConnections closes the idle connections, this client's and the
// fallback's (http.Client.CloseIdleConnections calls it).
func (u *upstream) CloseIdleConnections() {
	u.mu.Lock()
	idle := u.idle
	u.idle, u.n = map[string]*[]*upConn{}, 0
	u.lastAddr, u.lastIdle = "", nil
	if u.sweeper != nil {
		u.sweeper.Stop()
		u.sweeper = nil
	}
	u.mu.Unlock()
	for _, list := range idle {
		for _, c := range *list {
			_ = c.conn.Close()
		}
	}
	u.fallback.CloseIdleConnections()
}

// sweep closes the connections idle for longer than upstreamIdleTimeout
// (a backend removed by a reload leaves its connections here); u.mu is
// held.
func (u *upstream) sweep(now time.Time) {
	u.lastSweep = now
	u.lastAddr, u.lastIdle = "", nil // lists may be dropped below
	for addr, lp := range u.idle {
		list := *lp
		// Oldest first: keep from the first connection still fresh.
		if len(list) == 0 {
			delete(u.idle, addr)
			continue
		}
		i := 0
		for i < len(list) && now.Sub(list[i].lastUsed) >= upstreamIdleTimeout {
			_ = list[i].conn.Close()
			i++
		}
		if i == 0 {
			continue
		}
		u.n -= i
		if i == len(list) {
			delete(u.idle, addr)
			continue
		}
		n := copy(list, list[i:])
		clear(list[n:])
		*lp = list[:n]
	}
}

// idleList is the list of idle connections to addr, made when create is
// set (else nil when there is none); u.mu is held.
func (u *upstream) idleList(addr string, create bool) *[]*upConn {
	if u.lastIdle != nil && u.lastAddr == addr {
		return u.lastIdle
	}
	lp := u.idle[addr]
	if lp == nil {
		if !create {
			return nil
		}
		lp = new([]*upConn)
		u.idle[addr] = lp
	}
	u.lastAddr, u.lastIdle = addr, lp
	return lp
}

// answerFields is the field lines of an answer whose header map the
// router's own client left unbuilt (RoundTripUntil's plain answers): ok is
// false when resp.Header is the answer's header.
func answerFields(resp *http.Response) (fields string, ok bool) {
	if resp.Header != nil {
		return "", false
	}
	if b, isOwn := resp.Body.(*upBody); isOwn {
		return b.pb.fields, true
	}
	return "", false
}

// answerHeader is resp's header map, made from its fields first when the
// router's own client left it unbuilt.
func answerHeader(resp *http.Response) http.Header {
	if resp.Header == nil {
		if fields, ok := answerFields(resp); ok {
			resp.Header = h1.HeaderOf(fields)
		} else {
			resp.Header = http.Header{}
		}
	}
	return resp.Header
}

// answerContentType is the first Content-Type of resp, "" when none.
func answerContentType(resp *http.Response) string {
	if fields, ok := answerFields(resp); ok {
		v, _ := h1.FieldValue(fields, "Content-Type")
		return v
	}
	if ct := resp.Header["Content-Type"]; len(ct) > 0 { // the parsers keep names canonical
		return ct[0]
	}
	return ""
}
