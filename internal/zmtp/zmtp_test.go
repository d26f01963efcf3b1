package zmtp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func message(topic string, seq uint64, payload []byte) [][]byte {
	pid := binary.BigEndian.AppendUint64(nil, 0x1f3a4b)
	sq := binary.BigEndian.AppendUint64(nil, seq)
	fr := append([]byte{1}, binary.BigEndian.AppendUint32(nil, uint32(len(payload)))...)
	return [][]byte{[]byte(topic), pid, sq, append(fr, payload...)}
}

// receive subscribes to endpoint and returns the first message whose
// sequence is at least minSeq, while publish keeps sending.
func subscribe(t *testing.T, endpoint, topic string) *zmtp.Sub {
	t.Helper()
	d := &zmtp.Direct{}
	conn, err := d.Connect(ctxT(t), zmtp.Target{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := zmtp.Subscribe(ctxT(t), conn, []byte(topic), zmtp.LimitsKVMetrics)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// TestGoZeromqPublisher: our SUB against a go-zeromq/zmq4 PUB.
func TestGoZeromqPublisher(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	endpoint := "tcp://" + pub.Addr().String()
	sub := subscribe(t, endpoint, "kv_metrics")
	// The subscription reaches the publisher asynchronously: publish until
	// a message arrives (other topics are filtered by the publisher).
	go func() {
		for seq := uint64(0); ctx.Err() == nil; seq++ {
			_ = pub.Send(zmq4.NewMsgFrom(message("kv_events", seq, []byte("other"))...))
			_ = pub.Send(zmq4.NewMsgFrom(message("kv_metrics", seq, []byte("hello"))...))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	frames, err := sub.Next()
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 4 || string(frames[0]) != "kv_metrics" || !bytes.HasSuffix(frames[3], []byte("hello")) {
		t.Fatalf("frames %q", frames)
	}
}

const pyPublisher = `
import sys, time, struct, zmq
ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
port = pub.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
seq = 0
deadline = time.time() + 20
while time.time() < deadline:
    payload = b"libzmq-%d" % seq
    frame = struct.pack(">BI", 1, len(payload)) + payload
    pub.send_multipart([b"kv_metrics", struct.pack(">Q", 0x1f3a4b), struct.pack(">Q", seq), frame])
    seq += 1
    time.sleep(0.005)
`

// startPyPublisher runs a libzmq publisher script (Debian python3-zmq)
// until the test ends and returns the endpoint it printed the port of.
func startPyPublisher(t *testing.T, script string) string {
	t.Helper()
	testutil.RequireLibzmq(t) // skips without python3-zmq, fails in CI
	cmd := exec.Command(testutil.Python, "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return "tcp://127.0.0.1:" + strings.TrimSpace(line)
}

// TestLibzmqPublisher: our SUB against libzmq (Debian python3-zmq).
func TestLibzmqPublisher(t *testing.T) {
	t.Parallel()
	sub := subscribe(t, startPyPublisher(t, pyPublisher), "kv_metrics")
	for i := 0; i < 3; i++ {
		frames, err := sub.Next()
		if err != nil {
			t.Fatal(err)
		}
		if len(frames) != 4 || !bytes.Contains(frames[3], []byte("libzmq-")) {
			t.Fatalf("frames %q", frames)
		}
	}
}

// TestLibzmqPublisherMetadata: a publisher whose READY carries metadata of
// its own past a command's usual bound (4 KiB of ZMQ_METADATA) is read.
func TestLibzmqPublisherMetadata(t *testing.T) {
	t.Parallel()
	script := strings.Replace(pyPublisher, `pub = ctx.socket(zmq.PUB)`,
		`pub = ctx.socket(zmq.PUB)
pub.setsockopt(zmq.METADATA, b"X-Big:" + b"a" * 4096)`, 1)
	sub := subscribe(t, startPyPublisher(t, script), "kv_metrics")
	frames, err := sub.Next()
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 4 || !bytes.Contains(frames[3], []byte("libzmq-")) {
		t.Fatalf("frames %q", frames)
	}
}

// newRawPeer is a hand-written ZMTP 3.0 PUB for fault injection: it
// completes the handshake, then writes script.
func newRawPeer(t *testing.T, greeting []byte, ready []byte, script func(w io.Writer)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(greeting)
		_, _ = c.Write(ready)
		// Read what the subscriber sends (greeting, READY, subscription)
		// before the script runs: a script that closes the connection
		// with some of it unread would reset the subscriber's handshake.
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		readHandshake(c)
		_ = c.SetReadDeadline(time.Time{})
		script(c)
		_, _ = io.Copy(io.Discard, c)
	}()
	return "tcp://" + ln.Addr().String()
}

// readHandshake reads a subscriber's side of the handshake: its 64-byte
// greeting, then two frames (its READY command and its subscription). It
// stops at the first error (a subscriber that gave up).
func readHandshake(r io.Reader) {
	if _, err := io.ReadFull(r, make([]byte, 64)); err != nil {
		return
	}
	for range 2 {
		head := make([]byte, 2)
		if _, err := io.ReadFull(r, head); err != nil {
			return
		}
		size := uint64(head[1])
		if head[0]&0x02 != 0 { // a long frame: an 8-byte size
			rest := make([]byte, 7)
			if _, err := io.ReadFull(r, rest); err != nil {
				return
			}
			size = binary.BigEndian.Uint64(append([]byte{head[1]}, rest...))
		}
		if _, err := io.CopyN(io.Discard, r, int64(size)); err != nil {
			return
		}
	}
}

func pubGreeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10] = 0xFF, 0x7F, 3
	copy(g[12:], "NULL")
	return g
}

func readyFrame(socketType string) []byte {
	body := append([]byte{5}, "READY"...)
	body = append(body, 11)
	body = append(body, "Socket-Type"...)
	body = binary.BigEndian.AppendUint32(body, uint32(len(socketType)))
	body = append(body, socketType...)
	return append([]byte{0x04, byte(len(body))}, body...)
}

// readyWithTrailer is a PUB's READY with trailer after its metadata.
func readyWithTrailer(trailer []byte) []byte {
	body := append(readyFrame("PUB")[2:], trailer...)
	return append([]byte{0x04, byte(len(body))}, body...)
}

func shortFrame(more bool, body []byte) []byte {
	f := byte(0)
	if more {
		f = 1
	}
	return append([]byte{f, byte(len(body))}, body...)
}

func longHeader(more bool, n uint64) []byte {
	f := byte(2)
	if more {
		f = 3
	}
	return binary.BigEndian.AppendUint64([]byte{f}, n)
}

func writeMessage(w io.Writer, frames [][]byte) {
	for i, f := range frames {
		more := i < len(frames)-1
		if len(f) > 255 {
			_, _ = w.Write(append(longHeader(more, uint64(len(f))), f...))
		} else {
			_, _ = w.Write(shortFrame(more, f))
		}
	}
}

func dialRaw(t *testing.T, endpoint string) (*zmtp.Sub, error) {
	t.Helper()
	return dialRawLimits(t, endpoint, zmtp.LimitsKVMetrics)
}

func dialRawLimits(t *testing.T, endpoint string, lim zmtp.Limits) (*zmtp.Sub, error) {
	t.Helper()
	conn, err := (&zmtp.Direct{}).Connect(ctxT(t), zmtp.Target{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return zmtp.Subscribe(ctxT(t), conn, []byte("kv_metrics"), lim)
}

// TestHugeFrameCostsNothing: a peer that declares and sends a 64 MiB
// frame has it read and thrown away in the read buffer: the message comes
// back cut to the limits, nothing near the frame's size is allocated, and
// the connection carries on. Not parallel: it reads the process-wide
// allocation count, which other tests would move.
func TestHugeFrameCostsNothing(t *testing.T) {
	const huge = 64 << 20
	chunk := make([]byte, 64<<10)
	ep := newRawPeer(t, pubGreeting(), readyFrame("PUB"), func(w io.Writer) {
		m := message("kv_metrics", 1, nil)
		for _, f := range m[:3] {
			_, _ = w.Write(shortFrame(true, f))
		}
		_, _ = w.Write(longHeader(false, huge))
		for sent := 0; sent < huge; sent += len(chunk) {
			_, _ = w.Write(chunk)
		}
		var next bytes.Buffer
		writeMessage(&next, message("kv_metrics", 2, []byte("ok")))
		_, _ = w.Write(next.Bytes())
	})
	sub, err := dialRaw(t, ep)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	frames, err := sub.Next()
	runtime.ReadMemStats(&after)
	var over *zmtp.OverLimitError
	if !errors.As(err, &over) || over.Frames != 4 || !over.Cut(3) || over.Sizes[3] != huge || len(frames[3]) != zmtp.LimitsKVMetrics.MaxFrameBytes {
		t.Fatalf("a 64 MiB frame: %d frames, err %v; want it cut to the frame limit", len(frames), err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("allocated %d bytes for a 64 MiB frame", grew)
	}
	frames, err = sub.Next()
	if err != nil || !bytes.HasSuffix(frames[3], []byte("ok")) {
		t.Fatalf("after the 64 MiB frame: %q %v", frames, err)
	}
}

// TestHugeDeclaredFrameIsNoProtocolError: a frame declared 2^60 bytes long
// is not refused as a protocol violation; its bytes are read as they come,
// and a peer that stops sending them ends the connection as any would.
func TestHugeDeclaredFrameIsNoProtocolError(t *testing.T) {
	t.Parallel()
	ep := newRawPeer(t, pubGreeting(), readyFrame("PUB"), func(w io.Writer) {
		_, _ = w.Write(longHeader(false, 1<<60))
		_, _ = w.Write(make([]byte, 1<<20))
		if c, ok := w.(net.Conn); ok {
			_ = c.Close()
		}
	})
	sub, err := dialRaw(t, ep)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(); err == nil || errors.Is(err, zmtp.ErrProtocol) || errors.Is(err, zmtp.ErrOversized) {
		t.Fatalf("err = %v, want the connection's end", err)
	}
}

// TestOversizedSkippedThenNext: a message over the limits is skipped (cut
// to them); the connection carries on.
func TestOversizedSkippedThenNext(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("x"), 20<<10)
	ep := newRawPeer(t, pubGreeting(), readyFrame("PUB"), func(w io.Writer) {
		writeMessage(w, message("kv_metrics", 1, big))
		writeMessage(w, [][]byte{[]byte("kv_metrics"), {1}, {2}, {3}, {4}, {5}}) // too many frames
		writeMessage(w, message("kv_metrics", 2, []byte("ok")))
	})
	sub, err := dialRaw(t, ep)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := sub.Next(); !errors.Is(err, zmtp.ErrOversized) {
			t.Fatalf("message %d: err = %v, want ErrOversized", i, err)
		}
	}
	frames, err := sub.Next()
	if err != nil || !bytes.HasSuffix(frames[3], []byte("ok")) {
		t.Fatalf("after skipping: %q %v", frames, err)
	}
}

// TestOverLimitKeepsWhatFits: a message over the limits comes back cut to
// them, with the number of frames it had and which frames were cut, so that
// the caller can judge it (a fifth frame, an over-long topic, a payload
// frame with bytes past its payload), and the connection carries on.
func TestOverLimitKeepsWhatFits(t *testing.T) {
	t.Parallel()
	lim := zmtp.LimitsKVMetrics
	x := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	id := make([]byte, 8)
	topic := []byte("kv_metrics")
	steps := []struct {
		name   string
		msg    [][]byte
		frames int   // frames the message had
		kept   []int // bytes kept of each frame returned
	}{
		{"a fifth frame", [][]byte{topic, id, id, x(10), x(1)}, 5, []int{10, 8, 8, 10}},
		{"an empty fifth frame", [][]byte{topic, id, id, x(10), {}}, 5, []int{10, 8, 8, 10}},
		{"many frames", [][]byte{topic, id, id, x(10), x(1), x(1), x(1), x(1), x(1)}, 9, []int{10, 8, 8, 10}},
		{"a payload frame over the frame limit", [][]byte{topic, id, id, x(20 << 10)}, 4, []int{10, 8, 8, lim.MaxFrameBytes}},
		{"a topic frame over the frame limit", [][]byte{x(20 << 10), id, id, x(300)}, 4,
			[]int{lim.MaxFrameBytes, 8, 8, lim.MaxMessageBytes - lim.MaxFrameBytes - 16}},
		{"an id frame over the frame limit", [][]byte{topic, x(20 << 10), id, x(10)}, 4, []int{10, lim.MaxFrameBytes, 8, 10}},
	}
	ep := newRawPeer(t, pubGreeting(), readyFrame("PUB"), func(w io.Writer) {
		for _, st := range steps {
			writeMessage(w, st.msg)
		}
		writeMessage(w, message("kv_metrics", 2, []byte("ok")))
	})
	sub, err := dialRaw(t, ep)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		frames, err := sub.Next()
		var over *zmtp.OverLimitError
		if !errors.As(err, &over) || !errors.Is(err, zmtp.ErrOversized) {
			t.Fatalf("%s: err = %v, want an OverLimitError", st.name, err)
		}
		if over.Frames != st.frames || len(frames) != len(st.kept) {
			t.Fatalf("%s: %d frames, %d returned; want %d, %d", st.name, over.Frames, len(frames), st.frames, len(st.kept))
		}
		for i, f := range frames {
			if len(f) != st.kept[i] || !bytes.Equal(f, st.msg[i][:len(f)]) {
				t.Fatalf("%s: frame %d kept %d bytes %.16q, want the first %d of %.16q", st.name, i, len(f), f, st.kept[i], st.msg[i])
			}
			if cut := len(f) < len(st.msg[i]); over.Cut(i) != cut || over.Sizes[i] != uint64(len(st.msg[i])) {
				t.Fatalf("%s: frame %d cut %v of %d bytes, want cut %v of %d", st.name, i, over.Cut(i), over.Sizes[i], cut, len(st.msg[i]))
			}
		}
		if sub.BufferCap() > lim.MaxMessageBytes {
			t.Fatalf("%s: buffer grew to %d", st.name, sub.BufferCap())
		}
	}
	frames, err := sub.Next()
	if err != nil || !bytes.HasSuffix(frames[3], []byte("ok")) {
		t.Fatalf("after the messages over the limits: %q %v", frames, err)
	}
}

// TestFrameAndMessageLimits holds each limit on its own: a frame over the
// frame limit in a message well under the message limit, and a message over
// the message limit made of frames each under the frame limit, are skipped
// (ErrOversized) and the connection carries on; messages at both limits
// are delivered; a frame far over the frame limit is skipped the same way.
func TestFrameAndMessageLimits(t *testing.T) {
	t.Parallel()
	lim := zmtp.Limits{MaxFrameBytes: 100, MaxMessageBytes: 400, MaxFrames: 8}
	x := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	topic := []byte("kv_metrics")
	steps := []struct {
		name string
		msg  [][]byte
		skip bool
	}{
		{"one frame over the frame limit, message under the message limit", [][]byte{topic, x(101)}, true},
		{"frames at the frame limit", [][]byte{topic, x(100), x(100)}, false},
		{"frames under the frame limit, message over the message limit", [][]byte{topic, x(100), x(100), x(100), x(91)}, true},
		{"message at the message limit", [][]byte{topic, x(100), x(100), x(100), x(90)}, false},
		{"oversized frame first, then small ones", [][]byte{x(200), topic, x(10)}, true},
		{"last frame over the frame limit", [][]byte{topic, x(1), x(1), x(101)}, true},
		{"frame far over the frame limit", [][]byte{topic, x(100 << 10)}, true},
		{"small message after the skips", [][]byte{topic, []byte("ok")}, false},
	}
	ep := newRawPeer(t, pubGreeting(), readyFrame("PUB"), func(w io.Writer) {
		for _, st := range steps {
			writeMessage(w, st.msg)
		}
	})
	sub, err := dialRawLimits(t, ep, lim)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		frames, err := sub.Next()
		if st.skip {
			if !errors.Is(err, zmtp.ErrOversized) {
				t.Fatalf("%s: got %d frames, err %v; want ErrOversized", st.name, len(frames), err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if len(frames) != len(st.msg) {
			t.Fatalf("%s: %d frames, want %d", st.name, len(frames), len(st.msg))
		}
		for i := range frames {
			if !bytes.Equal(frames[i], st.msg[i]) {
				t.Fatalf("%s: frame %d is %d bytes %.16q, want %d bytes %.16q", st.name, i, len(frames[i]), frames[i], len(st.msg[i]), st.msg[i])
			}
		}
	}
}

func TestProtocolViolations(t *testing.T) {
	t.Parallel()
	zmtp2 := pubGreeting()
	zmtp2[10] = 2
	curve := pubGreeting()
	copy(curve[12:32], "CURVE\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	tests := []struct {
		name            string
		greeting, ready []byte
		script          func(io.Writer)
	}{
		{"http peer", []byte("HTTP/1.1 400 Bad Request\r\n\r\n" + strings.Repeat(" ", 64)), nil, func(io.Writer) {}},
		{"zmtp 2", zmtp2, readyFrame("PUB"), func(io.Writer) {}},
		{"curve", curve, readyFrame("PUB"), func(io.Writer) {}},
		{"not a PUB", pubGreeting(), readyFrame("REP"), func(io.Writer) {}},
		{"error command", pubGreeting(), append([]byte{0x04, 10, 5}, "ERROR\x03bad"...), func(io.Writer) {}},
		{"reserved flags", pubGreeting(), readyFrame("PUB"), func(w io.Writer) { _, _ = w.Write([]byte{0x80, 1, 0}) }},
		{"huge command", pubGreeting(), readyFrame("PUB"), func(w io.Writer) { _, _ = w.Write(binary.BigEndian.AppendUint64([]byte{0x06}, 1<<40)) }},
		// Metadata that does not parse to its end, after a good Socket-Type:
		// libzmq 4.3.4 (Debian python3-zmq 24.0.1) closes the connection on
		// both.
		{"READY with a cut property", pubGreeting(), readyWithTrailer([]byte{5, 'a', 'b'}), func(io.Writer) {}},
		{"READY with a stray byte", pubGreeting(), readyWithTrailer([]byte{0}), func(io.Writer) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep := newRawPeer(t, tt.greeting, tt.ready, tt.script)
			sub, err := dialRaw(t, ep)
			if err == nil {
				_, err = sub.Next()
			}
			if !errors.Is(err, zmtp.ErrProtocol) {
				t.Fatalf("err = %v, want a protocol error", err)
			}
		})
	}
}

// TestPeerClosesInHandshake: a peer that closes the connection before the
// handshake is done refused it (libzmq does so, silently, on a security
// mechanism or socket type it will not pair with ours): a protocol error,
// whether it closed before its greeting, in it, or after it. A session
// the peer closes once established is no such error.
func TestPeerClosesInHandshake(t *testing.T) {
	t.Parallel()
	for name, sent := range map[string][]byte{
		"before its greeting": nil,
		"in its greeting":     pubGreeting()[:11],
		"after its greeting":  pubGreeting(),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write(sent)
				_, _ = io.ReadFull(c, make([]byte, 64))
				_ = c.Close()
			}()
			_, err = dialRaw(t, "tcp://"+ln.Addr().String())
			if !errors.Is(err, zmtp.ErrProtocol) {
				t.Fatalf("err = %v, want a protocol error", err)
			}
			// Its text is reported as the publisher's and printed by
			// tools: the fleet's addresses never are.
			if _, port, _ := net.SplitHostPort(ln.Addr().String()); strings.Contains(err.Error(), ":"+port) {
				t.Errorf("the protocol error quotes the publisher's address: %v", err)
			}
		})
	}
	t.Run("after the handshake", func(t *testing.T) {
		t.Parallel()
		sub, err := dialRaw(t, newRawPeer(t, pubGreeting(), readyFrame("PUB"), func(w io.Writer) { _ = w.(net.Conn).Close() }))
		if err != nil {
			t.Fatal(err)
		}
		if _, err = sub.Next(); err == nil || errors.Is(err, zmtp.ErrProtocol) {
			t.Fatalf("err = %v, want the connection's end", err)
		}
	})
}

func TestHandshakeTimeout(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c) // never answers
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := zmtp.Subscribe(ctx, conn, nil, zmtp.LimitsKVMetrics); err == nil {
		t.Fatal("a silent peer completed the handshake")
	}
}

func TestDirectConnectorCIDRs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	ok := &zmtp.Direct{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		c, err := ok.Connect(ctxT(t), zmtp.Target{Endpoint: fmt.Sprintf("tcp://%s:%d", host, port)})
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		_ = c.Close()
	}
	// An IPv4-mapped prefix allows the IPv4 range it maps: dialled
	// addresses are unmapped before they are checked.
	mapped, err := zmtp.ParseCIDRs([]string{"::ffff:127.0.0.0/104"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := (&zmtp.Direct{Allow: mapped}).Connect(ctxT(t), zmtp.Target{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", port)})
	if err != nil {
		t.Fatalf("::ffff:127.0.0.0/104: %v", err)
	}
	_ = c.Close()
	deny := &zmtp.Direct{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	if _, err := deny.Connect(ctxT(t), zmtp.Target{Endpoint: fmt.Sprintf("tcp://localhost:%d", port)}); !errors.Is(err, zmtp.ErrNotAllowed) {
		t.Fatalf("err = %v, want ErrNotAllowed", err)
	}
	for _, bad := range []string{"ipc:///tmp/x", "tcp://:1", "tcp://host", "tcp://*:5"} {
		if _, err := ok.Connect(ctxT(t), zmtp.Target{Endpoint: bad}); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// TestQuietSubscription: a subscription that gets no message for the idle
// wait gives its buffers back (ErrQuiet) and waits in Wake with none; the
// byte that wakes it starts the next message, which arrives whole, even a
// multi-frame one whose bytes come in pieces; a busy subscription stays
// warm between messages. It is the one test that changes the idle wait,
// so it does not run in parallel.
func TestQuietSubscription(t *testing.T) {
	defer zmtp.SetIdleAfter(100 * time.Millisecond)()
	next := make(chan [][]byte)
	ep := newRawPeer(t, pubGreeting(), readyFrame("PUB"), func(w io.Writer) {
		for m := range next {
			var b bytes.Buffer
			writeMessage(&b, m)
			// In pieces: the first byte alone, then the rest.
			_, _ = w.Write(b.Bytes()[:1])
			time.Sleep(20 * time.Millisecond)
			_, _ = w.Write(b.Bytes()[1:])
		}
	})
	sub, err := dialRaw(t, ep)
	if err != nil {
		t.Fatal(err)
	}
	defer close(next)
	read := func(seq uint64) {
		t.Helper()
		for {
			if err := sub.Wake(); err != nil {
				t.Fatal(err)
			}
			frames, err := sub.Next()
			if errors.Is(err, zmtp.ErrQuiet) {
				continue
			}
			if err != nil || len(frames) != 4 || binary.BigEndian.Uint64(frames[2]) != seq {
				t.Fatalf("message %d: %q %v", seq, frames, err)
			}
			return
		}
	}
	next <- message("kv_metrics", 1, []byte("first"))
	read(1)
	if sub.Quiet() {
		t.Fatal("quiet right after a message")
	}
	// Nothing for longer than the idle wait.
	if _, err := sub.Next(); !errors.Is(err, zmtp.ErrQuiet) {
		t.Fatalf("after the idle wait: %v, want ErrQuiet", err)
	}
	if !sub.Quiet() {
		t.Fatal("a quiet subscription still holds its buffers")
	}
	if _, err := sub.Next(); !errors.Is(err, zmtp.ErrQuiet) {
		t.Fatalf("Next on a quiet subscription: %v", err)
	}
	go func() { next <- message("kv_metrics", 2, bytes.Repeat([]byte("y"), 5000)) }()
	read(2)
	if sub.Quiet() {
		t.Fatal("still quiet after a message")
	}
}

const pyHeartbeatPublisher = `
import struct, sys, time, zmq
ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
pub.setsockopt(zmq.HEARTBEAT_IVL, 200)
pub.setsockopt(zmq.HEARTBEAT_TIMEOUT, 600)
port = pub.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
seq = 0
deadline = time.time() + 30
while time.time() < deadline:
    payload = b"hb"
    frame = struct.pack(">BI", 1, len(payload)) + payload
    pub.send_multipart([b"kv_metrics", struct.pack(">Q", 0x1f3a4b), struct.pack(">Q", seq), frame])
    seq += 1
    time.sleep(0.02)
`

// TestLibzmqHeartbeats: a libzmq PUB with heartbeats on (a PING every
// 200 ms, and the connection dropped when nothing comes back within
// 600 ms) keeps our subscription, which answers each PING, for several
// times its timeout: the messages keep coming on one connection, in order.
func TestLibzmqHeartbeats(t *testing.T) {
	t.Parallel()
	sub := subscribe(t, startPyPublisher(t, pyHeartbeatPublisher), "kv_metrics")
	var first, last uint64
	start := time.Now()
	for n := 0; time.Since(start) < 3*time.Second; n++ {
		frames, err := sub.Next()
		if err != nil {
			t.Fatalf("after %v and %d messages: %v", time.Since(start).Round(time.Millisecond), n, err)
		}
		seq := binary.BigEndian.Uint64(frames[2])
		if n == 0 {
			first = seq
		} else if seq != last+1 {
			t.Fatalf("message %d after %d", seq, last)
		}
		last = seq
	}
	if last-first < 50 {
		t.Fatalf("only %d messages in 3 s", last-first)
	}
}

// pingPeer is a hand-written PUB greeting as ZMTP 3.minor: after the
// handshake it sends a PING with context, then a message, and returns
// what the subscriber wrote back after its subscription.
func pingPeer(t *testing.T, minor byte, ping []byte) (endpoint string, replies <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	out := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			out <- nil
			return
		}
		defer c.Close()
		g := pubGreeting()
		g[11] = minor
		_, _ = c.Write(append(g, readyFrame("PUB")...))
		// Greeting (64), READY (27) and the subscription to kv_metrics (13).
		hello := make([]byte, 64+27+13)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, hello); err != nil {
			out <- nil
			return
		}
		_, _ = c.Write(append([]byte{0x04, byte(len(ping))}, ping...))
		var m bytes.Buffer
		writeMessage(&m, message("kv_metrics", 1, []byte("after the ping")))
		_, _ = c.Write(m.Bytes())
		// The subscriber answers a PING before it reads the next message, so
		// once that message is read its reply, if any, is on its way.
		buf := make([]byte, 64)
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, _ := io.ReadAtLeast(c, buf, 1)
		out <- buf[:n]
	}()
	return "tcp://" + ln.Addr().String(), out
}

// TestPingPong: a ZMTP 3.1 peer's PING is answered with a PONG echoing its
// context (cut to 16 bytes); a ZMTP 3.0 peer has no heartbeats, and a PING
// from it is ignored. Either way the message after it is delivered.
func TestPingPong(t *testing.T) {
	t.Parallel()
	ping := func(ctx string) []byte { return append([]byte("\x04PING\x00\x0a"), ctx...) }
	tests := []struct {
		name  string
		minor byte
		ping  []byte
		want  []byte // what the subscriber writes back
	}{
		{"3.1, a context", 1, ping("ctx-1"), []byte("\x04\x0a\x04PONGctx-1")},
		{"3.1, no context", 1, ping(""), []byte("\x04\x05\x04PONG")},
		{"3.1, a context over 16 bytes", 1, ping("0123456789abcdefXYZ"), []byte("\x04\x15\x04PONG0123456789abcdef")},
		{"3.1, a PING without its TTL", 1, []byte("\x04PING\x00"), nil},
		{"3.0", 0, ping("ctx-1"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ep, replies := pingPeer(t, tt.minor, tt.ping)
			sub, err := dialRaw(t, ep)
			if err != nil {
				t.Fatal(err)
			}
			frames, err := sub.Next()
			if err != nil || len(frames) != 4 || !bytes.HasSuffix(frames[3], []byte("after the ping")) {
				t.Fatalf("the message after the PING: %q %v", frames, err)
			}
			if got := <-replies; !bytes.Equal(got, tt.want) {
				t.Fatalf("the subscriber wrote back %q, want %q", got, tt.want)
			}
		})
	}
}

// TestHeartbeatsOnlyGoQuiet: a subscription that gets only PINGs between
// messages still gives its buffers back after the idle wait, rather than
// holding them while it waits for a message after each PING. It changes
// the idle wait, so it does not run in parallel.
func TestHeartbeatsOnlyGoQuiet(t *testing.T) {
	defer zmtp.SetIdleAfter(100 * time.Millisecond)()
	g := pubGreeting()
	g[11] = 1
	ep := newRawPeer(t, g, readyFrame("PUB"), func(w io.Writer) {
		_, _ = w.Write([]byte("\x04\x07\x04PING\x00\x0a"))
	})
	sub, err := dialRaw(t, ep)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := sub.Next(); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, zmtp.ErrQuiet) || !sub.Quiet() {
			t.Fatalf("after a PING and nothing else: %v (quiet %v), want ErrQuiet", err, sub.Quiet())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next still waits for a message after a PING, holding its buffers")
	}
}

// TestStalledMessageEnds: a message's rest is bounded by MessageTimeout
// from its first read beyond the first: a message that comes in pieces
// within it is read, and a peer that starts a message and stops sending
// ends the session (which then reconnects) instead of holding it.
func TestStalledMessageEnds(t *testing.T) {
	defer zmtp.SetMessageTimeout(400 * time.Millisecond)()
	whole := bytes.Join(func() [][]byte {
		var b [][]byte
		for i, f := range message("kv_metrics", 1, []byte("split")) {
			b = append(b, shortFrame(i < 3, f))
		}
		return b
	}(), nil)
	ep := newRawPeer(t, pubGreeting(), readyFrame("PUB"), func(w io.Writer) {
		for i := 0; i < len(whole); i += len(whole)/3 + 1 {
			_, _ = w.Write(whole[i:min(i+len(whole)/3+1, len(whole))])
			time.Sleep(60 * time.Millisecond)
		}
		writeMessage(w, message("kv_metrics", 2, []byte("whole")))
		_, _ = w.Write(whole[:len(whole)-4]) // and nothing more
	})
	sub, err := dialRaw(t, ep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"split", "whole"} {
		frames, err := sub.Next()
		if err != nil || !bytes.HasSuffix(frames[3], []byte(want)) {
			t.Fatalf("message %q: %q %v", want, frames, err)
		}
	}
	done := make(chan error, 1)
	go func() { _, err := sub.Next(); done <- err }()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, zmtp.ErrQuiet) || !strings.Contains(err.Error(), "stopped arriving") {
			t.Fatalf("a message cut short: %v, want the session ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next still waits for the rest of a message the peer stopped sending")
	}
}
