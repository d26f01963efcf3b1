// Package zmtp is a bounded ZMTP 3.x subscriber: NULL security, a SUB socket
// on one connection, ZMTP 3.0 subscriptions, PONG replies to a ZMTP 3.1
// peer's heartbeat PINGs, and multipart messages whose every declared
// length is checked against a limit before anything is allocated. It knows
// nothing about Dynamo.
//
// Imports: no internal package (it is fuzzed alone).
package zmtp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// Limits bound what one subscription receives.
type Limits struct {
	// MaxFrameBytes is the largest frame body held in memory.
	MaxFrameBytes int
	// MaxMessageBytes bounds the frames of one message together.
	MaxMessageBytes int
	// MaxFrames bounds the frames of one message.
	MaxFrames int
}

// Limits per use: kv_metrics carries ActiveLoad payloads of at most 16 KiB,
// kv-events payloads of at most 1 MiB, each behind the 5-byte frame header.
var (
	LimitsKVMetrics = Limits{MaxFrameBytes: 16<<10 + 5, MaxMessageBytes: 16<<10 + 5 + 256 + 16, MaxFrames: 4}
	LimitsKVEvents  = Limits{MaxFrameBytes: 1<<20 + 5, MaxMessageBytes: 1<<20 + 5 + 256 + 16, MaxFrames: 4}
)

// Buffer sizes of a subscription.
const (
	readBufferBytes    = 2 << 10
	initialFrameBuffer = 512
	maxCommandBytes    = 1 << 10
	// maxReadyBytes bounds the READY command, read once per session: its
	// metadata has no limit in the protocol, and a publisher may add
	// properties of its own (libzmq's ZMQ_METADATA) past maxCommandBytes.
	maxReadyBytes = 64 << 10
	greetingBytes = 64
	// pingHeadBytes is what is read of a PING command: the name (length
	// byte and "PING"), the 2-byte TTL and a context of at most 16 bytes,
	// which the PONG echoes; a longer context is cut to 16, as libzmq does.
	pingHeadBytes       = 1 + 4 + 2 + maxPingContextBytes
	maxPingContextBytes = 16
	// maxPooledFrameBuffer bounds a frame buffer kept for reuse once its
	// subscription goes quiet; a larger one (a kv-events burst) is left to
	// the collector.
	maxPooledFrameBuffer = 64 << 10
)

// PongTimeout bounds writing one PONG. The write is a few bytes into the
// socket's buffer; a peer that stops reading its own heartbeat replies for
// this long is stuck, and the session ends rather than block on it.
const PongTimeout = 10 * time.Second

// IdleAfter is how long a subscription waits for a message with its
// buffers before it gives them back and waits with none. Publishers send
// on change, so most of a large fleet is quiet most of the time, while a
// busy publisher's messages come closer together than this and keep the
// buffers (and one read per message).
const IdleAfter = time.Second

// idleAfter is IdleAfter, shortened by tests.
var idleAfter = IdleAfter

// MessageTimeout bounds the rest of a message once its first byte has
// come: a peer that starts a message and stops sending (a stuck or
// hostile publisher on a live connection, which TCP keepalive does not
// catch) ends the session, which reconnects, instead of holding it and
// its buffers forever. A message within the limits comes in one or a few
// reads; the bound is far above what the slowest honest link needs for
// the longest message a subscription reads or skips.
const MessageTimeout = 30 * time.Second

// messageTimeout is MessageTimeout, shortened by tests.
var messageTimeout = MessageTimeout

// Pools of the buffers a quiet subscription gives back. A busy fleet's
// subscriptions hold theirs; a quiet one's hold none.
var (
	readPool  = sync.Pool{New: func() any { return &buffer{b: make([]byte, readBufferBytes)} }}
	framePool = sync.Pool{New: func() any { return &buffer{b: make([]byte, 0, initialFrameBuffer)} }}
)

// buffer is a pooled byte slice.
type buffer struct{ b []byte }

// Errors. ErrProtocol and ErrOversized wrap the detail.
var (
	// ErrProtocol: the peer broke ZMTP; the connection must be closed.
	ErrProtocol = errors.New("zmtp protocol violation")
	// ErrOversized: a message over the limits was cut to them (see
	// OverLimitError); the connection stays usable.
	ErrOversized = errors.New("zmtp message over the size limit")
	// ErrQuiet: no message came for IdleAfter; the buffers were given
	// back. Call Wake, then Next again.
	ErrQuiet = errors.New("zmtp subscription quiet")
)

// OverLimitError is what Next returns for a message over the limits: more
// than MaxFrames frames, a frame over MaxFrameBytes, or more than
// MaxMessageBytes in all. The message was read to its end, and what did
// not fit was read and thrown away, never buffered, so the connection
// stays usable. Next returns with it what fits: the first MaxFrames
// frames, each cut to the bytes that fit the limits, valid until the next
// call like any message, so that the caller can judge the message by its
// own rules (a frame count it does not expect, or a frame whose kept head
// says why it is too long). It matches ErrOversized.
type OverLimitError struct {
	// Frames is the number of frames the message had.
	Frames int
	// Sizes are the declared sizes of the frames returned, in order.
	Sizes []uint64
	kept  []int
}

func (e *OverLimitError) Error() string {
	return fmt.Sprintf("%v: %d frames of %v bytes", ErrOversized, e.Frames, e.Sizes)
}

// Unwrap makes the error match ErrOversized.
func (e *OverLimitError) Unwrap() error { return ErrOversized }

// Cut reports whether returned frame i was cut short of its declared size.
func (e *OverLimitError) Cut(i int) bool {
	return i >= 0 && i < len(e.Sizes) && uint64(e.kept[i]) < e.Sizes[i]
}

func protocolErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// Flag bits of a frame header.
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
	flagMask    = 0x07
)

// Sub is one subscribed connection. It is not safe for concurrent use.
//
// A quiet subscription holds no buffer: after IdleAfter without a message
// it returns its read and frame buffers to pools and waits for the next
// message's first byte in a one-byte read, with no timer armed.
type Sub struct {
	conn net.Conn
	// rb is the read buffer (nil while quiet): bytes rb.b[r:w] are read
	// from conn and not consumed.
	rb   *buffer
	r, w int
	fb   *buffer // the frame buffer's pool entry (nil while quiet)
	lim  Limits
	buf  []byte
	// frames are the last message's frames, slices of buf, and sizes their
	// declared sizes (larger when a frame was cut to the limits).
	frames [][]byte
	sizes  []uint64
	one    [1]byte
	// heartbeats: the peer greeted as ZMTP 3.1 or later, whose PING
	// commands are answered.
	heartbeats bool
	// inMessage: Next is reading a message, whose reads are bounded by
	// messageTimeout; armed: that deadline is set on conn (only once a
	// message needs a read beyond its first, so that a message that came
	// whole costs no deadline).
	inMessage, armed bool
}

// arm sets the message's deadline before a read within it.
func (s *Sub) arm() {
	if s.inMessage && !s.armed {
		s.armed = true
		_ = s.conn.SetReadDeadline(time.Now().Add(messageTimeout))
	}
}

// disarm clears the message's deadline, if set.
func (s *Sub) disarm() {
	if s.armed {
		s.armed = false
		_ = s.conn.SetReadDeadline(time.Time{})
	}
}

// warm takes the buffers from the pools.
func (s *Sub) warm() {
	s.rb = readPool.Get().(*buffer)
	s.r, s.w = 0, 0
	s.fb = framePool.Get().(*buffer)
	s.buf = s.fb.b[:0]
}

// cool gives the buffers back; nothing is buffered and no frame returned
// by Next is in use.
func (s *Sub) cool() {
	readPool.Put(s.rb)
	s.rb = nil
	if cap(s.buf) <= maxPooledFrameBuffer {
		s.fb.b = s.buf[:0]
		framePool.Put(s.fb)
	}
	s.fb, s.buf = nil, nil
}

// fill reads at least one more byte into the read buffer.
func (s *Sub) fill() error {
	if s.r == s.w {
		s.r, s.w = 0, 0
	} else if s.w == len(s.rb.b) {
		s.w = copy(s.rb.b, s.rb.b[s.r:s.w])
		s.r = 0
	}
	s.arm()
	for {
		n, err := s.conn.Read(s.rb.b[s.w:])
		s.w += n
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (s *Sub) readByte() (byte, error) {
	if s.r == s.w {
		if err := s.fill(); err != nil {
			return 0, err
		}
	}
	c := s.rb.b[s.r]
	s.r++
	return c, nil
}

// readFull fills p: from the buffer first, then straight from the
// connection.
func (s *Sub) readFull(p []byte) error {
	n := copy(p, s.rb.b[s.r:s.w])
	s.r += n
	if n == len(p) {
		return nil
	}
	s.arm()
	_, err := io.ReadFull(s.conn, p[n:])
	return err
}

// skip consumes n bytes.
func (s *Sub) skip(n uint64) error {
	for n > 0 {
		if s.r == s.w {
			if err := s.fill(); err != nil {
				return err
			}
		}
		k := min(n, uint64(s.w-s.r))
		s.r += int(k)
		n -= k
	}
	return nil
}

// greeting is ZMTP 3.0 with the NULL mechanism, as a client.
func greeting() []byte {
	g := make([]byte, greetingBytes)
	g[0], g[9] = 0xFF, 0x7F
	g[10], g[11] = 3, 0
	copy(g[12:32], "NULL")
	return g
}

// Subscribe performs the ZMTP handshake on conn as a SUB socket and
// subscribes to topic (empty: everything). The context bounds the handshake.
// On error the connection is left to the caller to close.
func Subscribe(ctx context.Context, conn net.Conn, topic []byte, lim Limits) (*Sub, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
		defer func() { _ = conn.SetDeadline(time.Time{}) }()
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	s := &Sub{conn: conn, lim: lim}
	s.warm()
	if _, err := conn.Write(greeting()); err != nil {
		return nil, closedInHandshake(err)
	}
	if err := s.readGreeting(); err != nil {
		return nil, closedInHandshake(err)
	}
	if _, err := conn.Write(readyCommand("SUB")); err != nil {
		return nil, closedInHandshake(err)
	}
	if err := s.readReady(); err != nil {
		return nil, closedInHandshake(err)
	}
	// ZMTP 3.0 subscription: a one-frame message, 0x01 then the topic.
	if _, err := conn.Write(frame(0, append([]byte{1}, topic...))); err != nil {
		return nil, closedInHandshake(err)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return s, nil
}

// closedInHandshake makes a connection the peer closed during the
// handshake a protocol error: the peer refused the handshake. libzmq does
// so without a word when it will not talk to this client (another
// security mechanism than NULL, a socket type it does not pair with a
// SUB), closing before it has sent the greeting that would have said why.
// A carrier lost under the connection stays what it is.
func closedInHandshake(err error) error {
	if errors.Is(err, ErrProtocol) || errors.Is(err, ErrCarrierLost) {
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		// The cause without the connection's addresses, which a
		// network error quotes: a protocol error's text is reported and
		// printed as the publisher's (a problem, tail-load), and the
		// fleet's addresses never are.
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			err = op.Err
		}
		return fmt.Errorf("%w: peer closed the connection during the handshake: %w", ErrProtocol, err)
	}
	return err
}

func (s *Sub) readGreeting() error {
	var g [greetingBytes]byte
	if err := s.readFull(g[:10]); err != nil {
		return err
	}
	if g[0] != 0xFF || g[9]&0x01 == 0 {
		return protocolErr("peer greeting is not ZMTP 3 (signature % x)", g[:10])
	}
	if err := s.readFull(g[10:11]); err != nil {
		return err
	}
	if g[10] < 3 {
		return protocolErr("peer speaks ZMTP %d; 3 or later is required", g[10])
	}
	if err := s.readFull(g[11:]); err != nil {
		return err
	}
	mech := bytes.TrimRight(g[12:32], "\x00")
	if string(mech) != "NULL" {
		return protocolErr("peer security mechanism %q; only NULL is supported", mech)
	}
	s.heartbeats = g[10] > 3 || g[11] >= 1
	return nil
}

// readyCommand builds READY with one property, Socket-Type.
func readyCommand(socketType string) []byte {
	body := []byte{5}
	body = append(body, "READY"...)
	body = append(body, byte(len("Socket-Type")))
	body = append(body, "Socket-Type"...)
	body = binary.BigEndian.AppendUint32(body, uint32(len(socketType)))
	body = append(body, socketType...)
	return frame(flagCommand, body)
}

// frame encodes one frame with the given flags.
func frame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		out := []byte{flags | flagLong}
		out = binary.BigEndian.AppendUint64(out, uint64(len(body)))
		return append(out, body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// header reads one frame header: flags and the declared body size.
func (s *Sub) header() (byte, uint64, error) {
	flags, err := s.readByte()
	if err != nil {
		return 0, 0, err
	}
	if flags&^flagMask != 0 {
		return 0, 0, protocolErr("reserved frame flag bits set (0x%02x)", flags)
	}
	if flags&flagLong == 0 {
		n, err := s.readByte()
		return flags, uint64(n), err
	}
	var b [8]byte
	if err := s.readFull(b[:]); err != nil {
		return 0, 0, err
	}
	return flags, binary.BigEndian.Uint64(b[:]), nil
}

func (s *Sub) readReady() error {
	flags, size, err := s.header()
	if err != nil {
		return err
	}
	if flags&flagCommand == 0 {
		return protocolErr("expected a READY command")
	}
	if size > maxReadyBytes {
		return protocolErr("READY command of %d bytes, more than %d", size, maxReadyBytes)
	}
	body := make([]byte, size)
	if err := s.readFull(body); err != nil {
		return err
	}
	name, props, ok := splitCommand(body)
	switch {
	case !ok:
		return protocolErr("malformed command")
	case name == "ERROR":
		return protocolErr("peer refused: %q", errorReason(props))
	case name != "READY":
		return protocolErr("expected READY, got %q", name)
	}
	st, ok, err := property(props, "Socket-Type")
	switch {
	case err != nil:
		return err
	case !ok:
		return protocolErr("READY without Socket-Type")
	}
	if st != "PUB" && st != "XPUB" {
		return protocolErr("peer socket type %q cannot feed a SUB socket", st)
	}
	return nil
}

func splitCommand(body []byte) (string, []byte, bool) {
	if len(body) < 1 || int(body[0])+1 > len(body) {
		return "", nil, false
	}
	n := int(body[0])
	return string(body[1 : 1+n]), body[1+n:], true
}

func errorReason(b []byte) string {
	if len(b) < 1 || int(b[0])+1 > len(b) {
		return ""
	}
	return string(b[1 : 1+int(b[0])])
}

// property finds a metadata property in a READY body (case-insensitive
// name). The metadata must parse to its end: a property cut short or bytes
// left over are a protocol error wherever they are, as libzmq treats them,
// since a peer whose metadata does not parse cannot be trusted to have
// meant the Socket-Type it did send.
func property(b []byte, name string) (string, bool, error) {
	val, found := "", false
	for len(b) > 0 {
		n := int(b[0])
		if 1+n+4 > len(b) {
			return "", false, protocolErr("malformed READY metadata")
		}
		key := b[1 : 1+n]
		vlen := binary.BigEndian.Uint32(b[1+n : 5+n])
		if uint64(5+n)+uint64(vlen) > uint64(len(b)) {
			return "", false, protocolErr("malformed READY metadata")
		}
		if !found && bytes.EqualFold(key, []byte(name)) {
			val, found = string(b[5+n:5+n+int(vlen)]), true
		}
		b = b[5+n+int(vlen):]
	}
	return val, found, nil
}

// Next returns the next message. Its frames are valid until the next call.
// A message over the limits comes cut to them, with an *OverLimitError
// (ErrOversized), and Next may be called again; ErrQuiet means none came
// for IdleAfter (call Wake, then Next); any other error ends the
// subscription.
func (s *Sub) Next() ([][]byte, error) {
	s.frames = s.frames[:0]
	s.sizes = s.sizes[:0]
	if err := s.Wait(); err != nil {
		return nil, err
	}
	frames, err := s.message()
	s.inMessage = false
	if s.armed {
		s.disarm()
		if err != nil && isTimeout(err) {
			err = fmt.Errorf("zmtp: a message stopped arriving for %v: %w", messageTimeout, err)
		}
	}
	return frames, err
}

// message reads the message whose first byte Wait found.
func (s *Sub) message() ([][]byte, error) {
	s.inMessage = true
	s.buf = s.buf[:0]
	count, over := 0, false
	for {
		flags, size, err := s.header()
		if err != nil {
			return nil, err
		}
		if flags&flagCommand != 0 {
			if flags&flagMore != 0 || size > maxCommandBytes {
				return nil, protocolErr("command frame of %d bytes", size)
			}
			if err := s.command(size); err != nil {
				return nil, err
			}
			if count == 0 {
				// Between messages: wait for the next one as for any, so
				// that a subscription that gets only heartbeats can go
				// quiet. (Wait sets a deadline of its own.)
				s.disarm()
				s.inMessage = false
				if err := s.Wait(); err != nil {
					return nil, err
				}
				s.inMessage = true
			}
			continue
		}
		count++
		// Keep what fits the limits; read the rest and throw it away, in
		// the read buffer, however long the frame is declared: ZMTP allows
		// any 64-bit length, and a message too long is dropped, not a
		// reason to end the session. Memory stays bounded by the limits;
		// what a longer frame costs is the reading of bytes the peer
		// really sends.
		var keep uint64
		if len(s.frames) < s.lim.MaxFrames {
			keep = min(size, uint64(s.lim.MaxFrameBytes), uint64(s.lim.MaxMessageBytes-len(s.buf)))
			start := len(s.buf)
			s.grow(int(keep))
			s.buf = s.buf[:start+int(keep)]
			if err := s.readFull(s.buf[start:]); err != nil {
				return nil, err
			}
			s.frames = append(s.frames, s.buf[start:start+int(keep):start+int(keep)])
			s.sizes = append(s.sizes, size)
		} else {
			over = true // past MaxFrames, even an empty frame
		}
		if keep < size {
			over = true
			if err := s.skip(size - keep); err != nil {
				return nil, err
			}
		}
		if flags&flagMore == 0 {
			if over {
				return s.frames, s.overLimit(count)
			}
			return s.frames, nil
		}
	}
}

// command reads a command frame's body of size bytes (at most
// maxCommandBytes). A PING from a ZMTP 3.1 peer is answered with a PONG
// that echoes its context: a peer with heartbeats on (libzmq's
// ZMQ_HEARTBEAT_IVL and ZMQ_HEARTBEAT_TIMEOUT) drops a connection that
// sends nothing back within its timeout, and a SUB socket sends nothing
// else after subscribing. Any other command (or a PING from a ZMTP 3.0
// peer, which has none) is ignored.
func (s *Sub) command(size uint64) error {
	var head [pingHeadBytes]byte
	n := min(size, uint64(len(head)))
	if err := s.readFull(head[:n]); err != nil {
		return err
	}
	if err := s.skip(size - n); err != nil {
		return err
	}
	if !s.heartbeats || n < 1+4+2 || string(head[:5]) != "\x04PING" {
		return nil
	}
	return s.pong(head[7:n])
}

// pong writes a PONG command carrying the PING's context (at most
// maxPingContextBytes), within PongTimeout.
func (s *Sub) pong(pingContext []byte) error {
	var b [2 + 5 + maxPingContextBytes]byte
	b[0], b[1] = flagCommand, byte(5+len(pingContext))
	copy(b[2:], "\x04PONG")
	n := 7 + copy(b[7:], pingContext)
	_ = s.conn.SetWriteDeadline(time.Now().Add(PongTimeout))
	_, err := s.conn.Write(b[:n])
	_ = s.conn.SetWriteDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("zmtp pong: %w", err)
	}
	return nil
}

// overLimit describes the message just read, over the limits.
func (s *Sub) overLimit(count int) *OverLimitError {
	e := &OverLimitError{Frames: count, Sizes: append([]uint64(nil), s.sizes...), kept: make([]int, len(s.frames))}
	for i, f := range s.frames {
		e.kept[i] = len(f)
	}
	return e
}

// Wait returns once the next message's first byte is readable, waiting
// with the buffers for IdleAfter at most; then it gives them back and
// returns ErrQuiet (call Wake). A message's other bytes are then read by
// Next within MessageTimeout. Call it from a shallow frame, as Wake.
func (s *Sub) Wait() error {
	if s.rb == nil {
		return ErrQuiet
	}
	if s.r < s.w {
		return nil
	}
	_ = s.conn.SetReadDeadline(time.Now().Add(idleAfter))
	err := s.fill()
	_ = s.conn.SetReadDeadline(time.Time{})
	if err != nil && isTimeout(err) {
		s.cool()
		return ErrQuiet
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Wake waits, holding no buffer, until the next message starts, and takes
// the buffers for Next. Call it after Next returned ErrQuiet, from as
// shallow a frame as can be: the goroutine of a quiet subscription blocks
// in it, and a shallow wait keeps the goroutine's stack at its smallest.
func (s *Sub) Wake() error {
	if s.rb != nil {
		return nil
	}
	for {
		n, err := s.conn.Read(s.one[:])
		if n == 1 {
			s.warm()
			s.rb.b[0], s.w = s.one[0], 1
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// grow makes room for n more bytes, doubling the buffer up to the message
// limit. Frames already appended point into the old array; they are
// re-sliced from the new one.
func (s *Sub) grow(n int) {
	need := len(s.buf) + n
	if need <= cap(s.buf) {
		return
	}
	c := max(cap(s.buf), initialFrameBuffer)
	for c < need {
		c *= 2
	}
	c = min(c, s.lim.MaxMessageBytes)
	nb := make([]byte, len(s.buf), c)
	copy(nb, s.buf)
	off := 0
	for i, f := range s.frames {
		s.frames[i] = nb[off : off+len(f) : off+len(f)]
		off += len(f)
	}
	s.buf = nb
}

// Close closes the connection.
func (s *Sub) Close() error { return s.conn.Close() }

// Conn returns the underlying connection.
func (s *Sub) Conn() net.Conn { return s.conn }
