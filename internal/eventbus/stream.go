package eventbus

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/zmtp"
)

type streamState int

const (
	statePending streamState = iota // subscribe sent, no data stream yet
	stateOpen                       // its data stream arrived
	stateGone                       // forgotten: closed, refused or abandoned
)

// stream is one commanded stream, from subscribe to its end.
type stream struct {
	id   string
	sess *session
	// ready receives the data stream once it arrives (at most one).
	ready chan *Stream
	// ended is closed when the carrier side ended the stream: the client
	// reported it closed (code), the session drained or ended (lost).
	ended chan struct{}

	// Guarded by bus.mu.
	state   streamState
	endCode string
	lost    bool
	isEnded bool
}

// endLocked records how the carrier side ended the stream. b.mu is held.
func (st *stream) endLocked(code string, lost bool) {
	if st.isEnded {
		return
	}
	st.isEnded, st.endCode, st.lost = true, code, lost
	close(st.ended)
}

// forgetLocked removes a stream from its session, freeing its slot. b.mu
// is held.
func (b *Bus) forgetLocked(st *stream) {
	if st.state == stateGone {
		return
	}
	if st.state == stateOpen {
		b.streams--
		b.metrics.Streams.Set(float64(b.streams))
	}
	st.state = stateGone
	if st.sess.streams[st.id] == st {
		delete(st.sess.streams, st.id)
	}
}

// release forgets a stream the router is done with; unsubscribe tells the
// client to stop relaying it (not needed when the client ended it).
func (b *Bus) release(st *stream, unsubscribe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if st.state == stateGone {
		return
	}
	b.forgetLocked(st)
	s := st.sess
	if unsubscribe && !st.isEnded && !s.closed {
		if !s.send(&Message{Type: TypeUnsubscribe, StreamID: st.id}) {
			// A control channel that does not drain cannot carry the
			// session's commands any more.
			b.closeSessionLocked(s, CodeControlBacklog, "the control channel is not being read")
		}
	}
}

// streamClosedByClient handles stream_closed: the client refused the
// stream or its relay ended.
func (b *Bus) streamClosedByClient(s *session, id, code string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := s.streams[id]
	if st == nil {
		return
	}
	b.forgetLocked(st)
	if code == "" {
		code = CodeStreamRefused
	}
	st.endLocked(code, false)
}

// serveStream is POST /bus/v1/streams/{id}: the data stream of a stream
// the router commanded on the same credential's session. The handler
// lasts as long as the stream.
func (b *Bus) serveStream(bc *busConn, ent *entry, version int, id string, w http.ResponseWriter, r *http.Request) {
	if version != ProtocolVersion {
		b.refuse(w, http.StatusBadRequest, CodeUnsupportedVersion, fmt.Sprintf("the session negotiated protocol version %d", ProtocolVersion))
		return
	}
	b.mu.Lock()
	s := b.sessions[r.Header.Get(HeaderSession)]
	var st *stream
	if s != nil {
		st = s.streams[id]
	}
	switch {
	case s == nil:
		b.mu.Unlock()
		b.refuse(w, http.StatusNotFound, CodeUnknownStream, "no such session: send "+HeaderSession)
		return
	case s.entID != ent.id:
		b.mu.Unlock()
		b.refuse(w, http.StatusForbidden, CodeForbidden, "the session belongs to another credential")
		return
	case st == nil:
		b.mu.Unlock()
		b.refuse(w, http.StatusNotFound, CodeUnknownStream, "the router did not command this stream on this session")
		return
	case st.state != statePending:
		b.mu.Unlock()
		b.refuse(w, http.StatusConflict, CodeDuplicateStream, "this stream is already open")
		return
	}
	st.state = stateOpen
	b.streams++
	b.metrics.Streams.Set(float64(b.streams))
	c := &Stream{bus: b, st: st, carrier: s.entID, w: w, rc: http.NewResponseController(w), body: r.Body,
		local: bc.raw.LocalAddr(), remote: bc.raw.RemoteAddr(), closing: make(chan struct{}), torn: make(chan struct{})}
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	err := c.rc.Flush()
	if err == nil {
		bc.authed.Store(true)
	}
	// Always handed over, so that an opener that gave up meanwhile finds
	// it and closes it.
	st.ready <- c
	if err == nil {
		select {
		case <-c.closing:
		case <-r.Context().Done():
		case <-st.ended:
		}
	}
	c.teardown()
	b.release(st, false)
}

// Stream is an open data stream as a net.Conn: reads return what the
// client relays from the target, writes go to it. Its buffers are the
// stream's budget: the HTTP/2 receive window for reads, and writes that
// wait for the client's window. Close ends it and tells the client to
// unsubscribe.
type Stream struct {
	bus     *Bus
	st      *stream
	carrier string
	w       http.ResponseWriter
	rc      *http.ResponseController
	body    io.ReadCloser

	local, remote net.Addr

	// mu is held shared by writes and deadline changes (which use the
	// response writer) and exclusively by the handler's teardown, after
	// which the writer is gone.
	mu        sync.RWMutex
	done      bool
	closing   chan struct{}
	shutOnce  sync.Once
	closeOnce sync.Once
	torn      chan struct{}
	closed    atomic.Bool
}

var (
	_ net.Conn     = (*Stream)(nil)
	_ zmtp.Carried = (*Stream)(nil)
)

// Carrier is the id of the broker (or kv-listener) relaying the stream.
func (c *Stream) Carrier() string { return c.carrier }

// Read implements net.Conn.
func (c *Stream) Read(p []byte) (int, error) {
	n, err := c.body.Read(p)
	if err != nil {
		err = c.why(err)
	}
	return n, err
}

// Write implements net.Conn.
func (c *Stream) Write(p []byte) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.done {
		return 0, c.why(net.ErrClosed)
	}
	n, err := c.w.Write(p)
	if err == nil {
		err = c.rc.Flush()
	}
	if err != nil {
		return n, c.why(err)
	}
	return n, nil
}

// why turns a stream error into what happened to the stream: closed here,
// its carrier lost (the session ended or is draining), or ended by the
// client with a code. It waits up to SessionLossGrace for the carrier's
// fate to be known.
func (c *Stream) why(err error) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	t := time.NewTimer(c.bus.t.lossGrace)
	defer t.Stop()
	lost := false
	select {
	case <-c.st.ended:
	case <-c.st.sess.done:
		lost = true
	case <-t.C:
		return fmt.Errorf("event bus stream via %s: %w", c.carrier, err)
	}
	c.bus.mu.Lock()
	code := c.st.endCode
	lost = lost || c.st.lost
	c.bus.mu.Unlock()
	if lost {
		return fmt.Errorf("event bus stream via %s: %w", c.carrier, zmtp.ErrCarrierLost)
	}
	return fmt.Errorf("event bus stream closed by %s: %s", c.carrier, code)
}

// Close implements net.Conn: the stream ends and the client is told to
// stop relaying it. It waits for the stream's handler at most
// CloseTimeout.
func (c *Stream) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.shut()
		c.bus.release(c.st, true)
	})
	t := time.NewTimer(c.bus.t.close)
	defer t.Stop()
	select {
	case <-c.torn:
	case <-t.C:
	}
	return nil
}

func (c *Stream) shut() { c.shutOnce.Do(func() { close(c.closing) }) }

// teardown ends the stream's reads and writes (a blocked write returns)
// and retires the response writer. It runs on the handler's goroutine.
func (c *Stream) teardown() {
	past := time.Unix(1, 0)
	_ = c.rc.SetReadDeadline(past)
	_ = c.rc.SetWriteDeadline(past)
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
	close(c.torn)
}

// LocalAddr implements net.Conn.
func (c *Stream) LocalAddr() net.Addr { return c.local }

// RemoteAddr implements net.Conn: the client's address (the relay, not
// the target).
func (c *Stream) RemoteAddr() net.Addr { return c.remote }

// SetDeadline implements net.Conn.
func (c *Stream) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline implements net.Conn. A deadline that passes ends the
// stream's reads for good (HTTP/2 closes the body).
func (c *Stream) SetReadDeadline(t time.Time) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.done {
		return net.ErrClosed
	}
	return c.rc.SetReadDeadline(t)
}

// SetWriteDeadline implements net.Conn. A deadline that passes resets
// the stream.
func (c *Stream) SetWriteDeadline(t time.Time) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.done {
		return net.ErrClosed
	}
	return c.rc.SetWriteDeadline(t)
}
