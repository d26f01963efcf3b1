package eventbus

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
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
	st.endLocked(reasonWord(code), false)
}

// reasonWordRe is a stream code as the router passes it on: one word of
// lowercase letters, digits and underscores.
var reasonWordRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// reasonWord is the code a client reported for a stream, as the reason its
// opener and its subscription's errors carry: a word, such as
// target_not_advertised or connect_failed, of a client's own vocabulary as
// well. Anything else (an address, an error text, a control character) is
// not repeated and becomes stream_refused, so that what a client reports
// cannot bring an address, a name or a secret into the router's errors
// and logs.
func reasonWord(code string) string {
	if !reasonWordRe.MatchString(code) {
		return CodeStreamRefused
	}
	return code
}

// serveStream is POST /bus/v1/streams/{id}: the data stream of a stream
// the router commanded on a session of the same credential. The stream id
// alone names it (ids are 128 random bits, unique across sessions), so a
// client sends no more than the contract's headers. The handler lasts as
// long as the stream.
func (b *Bus) serveStream(bc *busConn, ent *entry, version int, id string, w http.ResponseWriter, r *http.Request) {
	if version != ProtocolVersion {
		b.refuse(w, http.StatusBadRequest, CodeUnsupportedVersion, fmt.Sprintf("the session negotiated protocol version %d", ProtocolVersion))
		return
	}
	b.mu.Lock()
	var s *session
	var st *stream
	for _, cand := range b.sessions {
		if st = cand.streams[id]; st != nil {
			s = cand
			break
		}
	}
	switch {
	case st == nil:
		b.mu.Unlock()
		b.refuse(w, http.StatusNotFound, CodeUnknownStream, "the router commanded no such stream on an open session")
		return
	case s.entID != ent.id:
		b.mu.Unlock()
		b.refuse(w, http.StatusForbidden, CodeForbidden, "the stream's session belongs to another credential")
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
		bc.accepted()
		defer b.requestEnded(bc)
	}
	// Always handed over, so that an opener that gave up meanwhile finds
	// it and closes it.
	st.ready <- c
	if err == nil {
		select {
		case <-c.closing:
		case <-r.Context().Done():
			// The client ended the data stream. A client whose relay
			// ended says why in a stream_closed that follows on the
			// control stream: the stream is kept for it a while, so that
			// the reason reaches the stream's reader rather than the bare
			// end of its body.
			t := time.NewTimer(b.t.lossGrace)
			select {
			case <-st.ended:
			case <-s.done:
			case <-c.closing:
			case <-t.C:
			}
			t.Stop()
		case <-st.ended:
		}
	}
	c.teardown()
	b.release(st, false)
}

// timedReadBytes bounds a read made under a read deadline. Such a read
// runs on a goroutine of its own into a buffer of the stream's, so that
// the caller can return at the deadline while the read goes on (an HTTP/2
// body read cannot be interrupted without ending the body). What it reads
// is returned by the next reads, so a stream holds at most this much
// beyond its budget. A ZMTP subscriber reads under a deadline only while
// it waits for a message's first bytes (with a read buffer of 2 KiB), and
// reads the rest without one, straight from the body.
const timedReadBytes = 2 << 10

// timedReadPool holds the buffers of timed reads: a stream holds one only
// while its timed read is outstanding or its bytes are not all returned.
var timedReadPool = sync.Pool{New: func() any { b := make([]byte, timedReadBytes); return &b }}

// Stream is an open data stream as a net.Conn: reads return what the
// client relays from the target, writes go to it. Its buffers are the
// stream's budget: the HTTP/2 receive window for reads (and what a read
// under a deadline took from it, timedReadBytes at most), and writes that
// wait for the client's window. Close ends it and tells the client to
// unsubscribe.
//
// A read deadline keeps the net.Conn contract: a read whose deadline
// passes returns os.ErrDeadlineExceeded and the stream goes on, as a TCP
// connection does. HTTP/2's own read deadline would close the body for
// good, so it is not used for reads; a ZMTP subscriber waits for each
// message under a deadline, and a stream that ended there would drop
// every quiet subscription and the events published while it reconnects.
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
	// writing counts the writes under way (each holds mu shared).
	writing atomic.Int32

	// rmu serializes reads and guards timed, tbuf, left and leftErr.
	rmu sync.Mutex
	// timed, while a read made under a deadline is outstanding, receives
	// its result (capacity 1: the reading goroutine never waits).
	timed chan timedRead
	// tbuf is the pooled buffer of that read, held until left is empty.
	tbuf *[]byte
	// left is what such a read returned beyond the caller's buffer, and
	// leftErr the error that came with it; both go to the next reads.
	left    []byte
	leftErr error

	// dmu guards the read deadline; deadlineChanged is closed when it
	// changes, which wakes a read waiting under the old one.
	dmu             sync.Mutex
	readDeadline    time.Time
	deadlineChanged chan struct{}
}

// timedRead is the result of a body read made under a deadline.
type timedRead struct {
	b   []byte
	err error
}

var (
	_ net.Conn     = (*Stream)(nil)
	_ zmtp.Carried = (*Stream)(nil)
)

// Carrier is the id of the broker (or kv-listener) relaying the stream.
func (c *Stream) Carrier() string { return c.carrier }

// Read implements net.Conn. Without a read deadline, and with no earlier
// timed read outstanding, it reads the body straight into p. Under a
// deadline the body is read on a goroutine of its own (see
// timedReadBytes), and a read that outlives its caller's deadline is
// picked up by the next Read: no byte is lost or reordered. Unlike a
// net.Conn's, a read already waiting without a deadline does not see one
// set meanwhile (an HTTP/2 body read cannot be interrupted but for good);
// it applies from the next Read, and Close ends any read. Every caller in
// this program sets its deadline before the read it bounds (the ZMTP
// handshake under its connect budget, idle waits under their own).
func (c *Stream) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	deadline, changed := c.readDeadlineFor()
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return 0, os.ErrDeadlineExceeded
	}
	if len(c.left) > 0 {
		n := copy(p, c.left)
		c.left = c.left[n:]
		c.releaseTimed()
		return n, nil
	}
	if c.leftErr != nil {
		return 0, c.leftErr
	}
	if len(p) == 0 {
		return 0, nil
	}
	if c.timed == nil && deadline.IsZero() {
		n, err := c.body.Read(p)
		if err != nil {
			// A body's error is final: every later Read returns it.
			err = c.why(err)
			c.leftErr = err
		}
		return n, err
	}
	if c.timed == nil {
		// The goroutine ends with the body read: at the latest when the
		// stream's handler tears the body down.
		c.tbuf = timedReadPool.Get().(*[]byte)
		buf, timed := (*c.tbuf)[:min(len(p), timedReadBytes)], make(chan timedRead, 1)
		c.timed = timed
		go func() {
			n, err := c.body.Read(buf)
			timed <- timedRead{b: buf[:n], err: err}
		}()
	}
	for {
		var expired <-chan time.Time
		var timer *time.Timer
		if !deadline.IsZero() {
			timer = time.NewTimer(time.Until(deadline))
			expired = timer.C
		}
		select {
		case r := <-c.timed:
			stopTimer(timer)
			c.timed = nil
			n := copy(p, r.b)
			c.left = r.b[n:]
			c.releaseTimed()
			if r.err != nil {
				c.leftErr = c.why(r.err)
				if n == 0 {
					return 0, c.leftErr
				}
			}
			return n, nil
		case <-expired:
			return 0, os.ErrDeadlineExceeded
		case <-changed:
			stopTimer(timer)
			deadline, changed = c.readDeadlineFor()
			if !deadline.IsZero() && !time.Now().Before(deadline) {
				return 0, os.ErrDeadlineExceeded
			}
		}
	}
}

// releaseTimed gives a timed read's buffer back once its bytes are all
// returned. c.rmu is held.
func (c *Stream) releaseTimed() {
	if len(c.left) > 0 || c.timed != nil || c.tbuf == nil {
		return
	}
	c.left = nil
	timedReadPool.Put(c.tbuf)
	c.tbuf = nil
}

// readDeadlineFor is the deadline a read waits under: none once the
// stream is torn down (what remains comes at once, and then the reason it
// ended, which a timeout would hide from the reader), else the read
// deadline; and a channel closed when the deadline changes. c.rmu is held.
func (c *Stream) readDeadlineFor() (time.Time, <-chan struct{}) {
	deadline, changed := c.deadline()
	select {
	case <-c.torn:
		return time.Time{}, changed
	default:
		return deadline, changed
	}
}

// deadline is the read deadline and a channel closed when it changes.
func (c *Stream) deadline() (time.Time, <-chan struct{}) {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	if c.deadlineChanged == nil {
		c.deadlineChanged = make(chan struct{})
	}
	return c.readDeadline, c.deadlineChanged
}

func stopTimer(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}

// Write implements net.Conn.
func (c *Stream) Write(p []byte) (int, error) {
	n, err := c.write(p)
	if err != nil {
		// Told outside c.mu: why may wait for the carrier's fate.
		return n, c.why(err)
	}
	return n, nil
}

// write writes p to the client, holding c.mu shared and counted in
// writing while it does.
func (c *Stream) write(p []byte) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.done {
		return 0, net.ErrClosed
	}
	c.writing.Add(1)
	defer c.writing.Add(-1)
	n, err := c.w.Write(p)
	if err == nil {
		err = c.rc.Flush()
	}
	return n, err
}

// why turns a stream error into what happened to the stream: closed here,
// its carrier lost (the session ended or is draining), or ended by the
// client with a code. It waits up to SessionLossGrace for the carrier's
// fate to be known.
func (c *Stream) why(err error) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Only the teardown sets the body's deadline: the stream is over,
		// not waiting.
		err = net.ErrClosed
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
	if code == CodePublisherClosed {
		// The publisher closed its connection: the end of the stream, as
		// a direct connection's read would report it (and so a protocol
		// error when it comes during the handshake, as it is directly).
		return fmt.Errorf("event bus stream closed by %s: %s: %w", c.carrier, code, io.EOF)
	}
	return fmt.Errorf("event bus stream closed by %s: %s", c.carrier, code)
}

// Close implements net.Conn: the stream ends and the client is told to
// stop relaying it. It waits for the stream's handler at most
// CloseTimeout.
func (c *Stream) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		// Released (and the client told to unsubscribe) before the
		// handler is woken: its own release, which tells nothing, would
		// otherwise win whenever it ran first.
		c.bus.release(c.st, true)
		c.shut()
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
//
// A write deadline that passes makes the HTTP/2 server reset the stream
// with INTERNAL_ERROR, which a client takes for a fault of the router, not
// for the stream's end. So it is used only to free a write under way
// (which may wait for the client's window as long as the client wants);
// with none, the handler returns and the response ends as any does: with
// END_STREAM, then RST_STREAM NO_ERROR when the client still sends (RFC
// 9113 section 8.1), which tells a relay to stop. Deadline changes hold
// c.mu shared only for a moment, so teardown waits them out.
func (c *Stream) teardown() {
	_ = c.rc.SetReadDeadline(time.Unix(1, 0))
	for !c.mu.TryLock() {
		if c.writing.Load() > 0 {
			_ = c.rc.SetWriteDeadline(time.Unix(1, 0))
			c.mu.Lock()
			break
		}
		runtime.Gosched()
	}
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

// SetReadDeadline implements net.Conn: a read waiting past t returns
// os.ErrDeadlineExceeded, and the stream stays usable (see Read).
func (c *Stream) SetReadDeadline(t time.Time) error {
	c.mu.RLock()
	done := c.done
	c.mu.RUnlock()
	if done {
		return net.ErrClosed
	}
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.readDeadline = t
	if c.deadlineChanged != nil {
		close(c.deadlineChanged)
	}
	c.deadlineChanged = make(chan struct{})
	return nil
}

// SetWriteDeadline implements net.Conn. A deadline that passes resets
// the stream (HTTP/2 cannot interrupt a write otherwise): unlike a read
// deadline, it is for bounding a stream's end, not for waiting.
func (c *Stream) SetWriteDeadline(t time.Time) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.done {
		return net.ErrClosed
	}
	return c.rc.SetWriteDeadline(t)
}
