package h1

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Handoff is a net.Listener whose connections are given to it rather than
// accepted from a socket: the net/http server behind a lean one serves
// from it what the lean server hands off (Fallback), and whatever else
// its owner gives it (TLS connections).
//
// net/http drops, unanswered, a request it reads after its Shutdown began.
// A handed-off connection's request was already sent, and partly read, so
// the Handoff counts each one given until its first request reaches the
// handler (or net/http is done with it otherwise), and Drain waits, a few
// seconds at most, for that count to reach zero: shut the lean server
// down, Drain, then net/http's server.
type Handoff struct {
	addr    net.Addr
	ch      chan net.Conn
	done    chan struct{}
	once    sync.Once
	pending atomic.Int64
}

// handedConn is a connection given by Give: settled once its first
// request reached the handler or it closed.
//
// It also watches the bytes net/http reads for a Content-Length field
// line: net/http serves a request framed two ways (Content-Length beside
// Transfer-Encoding) by its coding and drops the length without a word,
// keeping the connection, so that a hop in front framing by the length
// would see the bytes after the chunked body as part of it where net/http
// reads them as a request of its own. The lean server refuses such a head;
// on a connection it handed off, the handler ends the connection after a
// chunked request whose head may have held a length (sawLength, set by the
// reads since the previous request reached the handler: that request's
// body, this head, and what net/http buffered after it; a length named in
// a body only costs a kept-alive connection).
type handedConn struct {
	net.Conn
	h    *Handoff
	once sync.Once
	// sawLength: a line starting "Content-Length" (any case) was read
	// since the last request reached the handler.
	sawLength atomic.Bool
	// tail holds the last bytes read, for a name cut across two reads.
	tail  [len(lengthLine) - 1]byte
	ntail int
}

// lengthLine is what starts a Content-Length field line, lower case, and
// lengthName the field's name in it.
const lengthLine = "\ncontent-length"

var lengthName = []byte(lengthLine[1:])

func (c *handedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.sawLength.Load() {
		c.scan(p[:n])
	}
	return n, err
}

// scan looks for lengthLine in b and across the end of the bytes before it.
func (c *handedConn) scan(b []byte) {
	var joint [2 * (len(lengthLine) - 1)]byte
	j := append(append(joint[:0], c.tail[:c.ntail]...), b[:min(len(b), len(lengthLine)-1)]...)
	if hasLengthLine(j) || hasLengthLine(b) {
		c.sawLength.Store(true)
	}
	if len(b) >= len(c.tail) {
		c.ntail = copy(c.tail[:], b[len(b)-len(c.tail):])
	} else {
		keep := min(c.ntail, len(c.tail)-len(b))
		copy(c.tail[:], c.tail[c.ntail-keep:c.ntail])
		c.ntail = keep + copy(c.tail[keep:], b)
	}
}

// hasLengthLine reports whether b holds lengthLine, in any case.
func hasLengthLine(b []byte) bool {
	for i := 0; ; {
		k := bytes.IndexByte(b[i:], '\n')
		if k < 0 {
			return false
		}
		i += k + 1
		if len(b)-i < len(lengthName) {
			return false
		}
		if bytes.EqualFold(b[i:i+len(lengthName)], lengthName) {
			return true
		}
	}
}

func (c *handedConn) settle() { c.once.Do(func() { c.h.pending.Add(-1) }) }

// CloseWrite half-closes what it wraps, as net/http does before closing a
// connection with input unread (a refused head, a body past its limit).
func (c *handedConn) CloseWrite() error { return closeWrite(c.Conn) }

var _ interface{ CloseWrite() error } = (*handedConn)(nil)

// drainWait bounds Drain's wait beyond a connection's first request: one
// handed off with its head incomplete (a stalled client) would otherwise
// hold it until net/http's read-header timeout. net/http's own shutdown
// likewise stops waiting for a connection new for 5 s.
const drainWait = 5 * time.Second

type handedKey struct{}

// NewHandoff returns a Handoff that reports addr as its address.
func NewHandoff(addr net.Addr) *Handoff {
	return &Handoff{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// Offer waits until the server accepts c (true) or the listener is closed
// (false, c left open).
func (h *Handoff) Offer(c net.Conn) bool {
	select {
	case h.ch <- c:
		return true
	case <-h.done:
		return false
	}
}

// Give offers c and closes it if the listener is closed: a Fallback.
// The connection counts as pending, for Drain, until its first request
// reaches the handler of a server started by Serve, or it closes.
func (h *Handoff) Give(c net.Conn) {
	hc := &handedConn{Conn: c, h: h}
	h.pending.Add(1)
	if !h.Offer(hc) {
		hc.settle()
		_ = c.Close()
	}
}

// Serve serves srv from the hand-off until it is closed, as srv.Serve(h)
// does, with srv's Handler, ConnContext and ConnState wrapped to settle
// the connections Give counts (at the handler, or when net/http is done
// with the request or the connection otherwise).
func (h *Handoff) Serve(srv *http.Server) error {
	next := srv.Handler
	if next == nil {
		next = http.DefaultServeMux
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hc, handed := r.Context().Value(handedKey{}).(*handedConn)
		sawLength := false
		if handed {
			hc.settle()
			sawLength = hc.sawLength.Swap(false)
		}
		if strings.IndexByte(r.RequestURI, '#') >= 0 {
			// A request target holds no fragment (RFC 9112, section
			// 3.2): the request line is invalid, as the lean server
			// judges it, not a path to look up.
			w.Header().Set("Connection", "close")
			http.Error(w, "400 Bad Request: the request target holds a fragment", http.StatusBadRequest)
			return
		}
		if sawLength && r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 {
			// Possibly framed two ways (see handedConn): the connection
			// ends after the answer, so that nothing after the chunked
			// body is read as a request of its own (RFC 9112, section 6.1).
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
	connContext := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if connContext != nil {
			ctx = connContext(ctx, c)
		}
		if hc, ok := c.(*handedConn); ok {
			ctx = context.WithValue(ctx, handedKey{}, hc)
		}
		return ctx
	}
	connState := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if connState != nil {
			connState(c, st)
		}
		// Idle comes after a request net/http answered itself (OPTIONS *),
		// past its shutdown check like the handler's.
		if st == http.StateIdle || st == http.StateClosed || st == http.StateHijacked {
			if hc, ok := c.(*handedConn); ok {
				hc.settle()
			}
		}
	}
	return srv.Serve(h)
}

// Drain waits until every connection given has had its first request
// reach the handler, or closed, or drainWait has passed; ctx's error if it
// ends first.
func (h *Handoff) Drain(ctx context.Context) error {
	if h.pending.Load() == 0 {
		return nil
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	limit := time.NewTimer(drainWait)
	defer limit.Stop()
	for h.pending.Load() != 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-limit.C:
			return nil
		case <-tick.C:
		}
	}
	return nil
}

// Accept returns the next connection given, or net.ErrClosed once the
// listener is closed.
func (h *Handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.ch:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Offer return; connections already accepted are
// the server's.
func (h *Handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

func (h *Handoff) Addr() net.Addr { return h.addr }
