package h1

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// wrapped is a connection that exposes the one it wraps, as tls.Conn and
// the router's counted connections do.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

func TestSocketOnlyForTCP(t *testing.T) {
	t.Parallel()
	c, _ := tcpPair(t)
	if newSocket(c) == nil {
		t.Fatal("no socket for a TCP connection")
	}
	if newSocket(wrapped{wrapped{c}}) == nil {
		t.Fatal("no socket for a TCP connection behind NetConn")
	}
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	if newSocket(a) != nil || newSocket(wrapped{a}) != nil {
		t.Fatal("a socket for an in-memory pipe")
	}
	if rw := SocketIO(a); rw != a {
		t.Fatalf("SocketIO of a pipe is %T, not the pipe", rw)
	}
	if _, ok := SocketIO(wrapped{c}).(*Socket); !ok {
		t.Fatal("SocketIO of a TCP connection is not its socket")
	}
}

func TestSocketReadWrite(t *testing.T) {
	t.Parallel()
	c, s := tcpPair(t)
	cs, ss := newSocket(c), newSocket(s)
	if n, err := cs.Write([]byte("hello")); n != 5 || err != nil {
		t.Fatalf("write: %d %v", n, err)
	}
	buf := make([]byte, 16)
	n, err := io.ReadAtLeast(ss, buf, 5)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	if n, err := ss.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty read: %d %v", n, err)
	}
	// The peer's end of stream is io.EOF, unwrapped, as net.Conn gives it.
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := ss.Read(buf); n != 0 || err != io.EOF { //nolint:errorlint // net.Conn returns io.EOF itself
		t.Fatalf("read at the end: %d %v, want io.EOF", n, err)
	}
}

// TestSocketLargeWrite: a write many times the socket's buffers waits in
// the poller for room and completes as the peer reads, whole and in order.
// (Buffers of a few KiB would make loopback TCP crawl: small windows and
// delayed acknowledgements.)
func TestSocketLargeWrite(t *testing.T) {
	t.Parallel()
	c, s := tcpPair(t)
	_ = c.SetWriteBuffer(64 << 10)
	_ = s.SetReadBuffer(64 << 10)
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	done := make(chan error, 1)
	go func() {
		n, err := newSocket(c).Write(want)
		if err == nil && n != len(want) {
			err = errors.New("short write")
		}
		done <- err
		_ = c.CloseWrite()
	}()
	got, err := io.ReadAll(newSocket(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(want))
	}
}

// TestSocketDeadlinesAndClose: deadlines and closing end a waiting read or
// write with the errors net.Conn gives, wrapped as net.Conn wraps them.
func TestSocketDeadlinesAndClose(t *testing.T) {
	t.Parallel()
	c, s := tcpPair(t)
	ss := newSocket(s)
	_ = s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := ss.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v", err)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "read" || !strings.Contains(err.Error(), s.RemoteAddr().String()) {
		t.Fatalf("the error is not net.Conn's: %#v", err)
	}
	_ = s.SetReadDeadline(time.Time{})

	// A write with no room waits, then ends at its deadline.
	_ = s.SetWriteBuffer(4 << 10)
	_ = c.SetReadBuffer(4 << 10)
	// Long enough that the write surely starts before it (the buffers
	// stay full whatever the wait).
	_ = s.SetWriteDeadline(time.Now().Add(time.Second))
	n, err := ss.Write(make([]byte, 8<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n <= 0 || n >= 8<<20 {
		t.Fatalf("write past its deadline: %d bytes, %v", n, err)
	}

	// A read waiting when the connection is closed ends with net.ErrClosed.
	got := make(chan error, 1)
	go func() {
		cs, buf := newSocket(c), make([]byte, 64<<10)
		var err error
		for err == nil { // what the write above left, then a wait
			_, err = cs.Read(buf)
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = c.Close()
	if err := <-got; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a closed connection: %v", err)
	}
}

// TestSocketPeerReset: a write to a connection the peer reset fails with
// the system's error, which errors.Is finds.
func TestSocketPeerReset(t *testing.T) {
	t.Parallel()
	c, s := tcpPair(t)
	_ = s.SetLinger(0)
	_ = s.Close() // a reset
	cs := newSocket(c)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = cs.Write([]byte("x"))
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write after a reset: %v", err)
	}
	var se *os.SyscallError
	if !errors.As(err, &se) || se.Syscall != "write" {
		t.Fatalf("the error does not name its system call: %#v", err)
	}
}

func TestSocketQuiet(t *testing.T) {
	t.Parallel()
	c, s := tcpPair(t)
	cs := newSocket(c)
	if !cs.Quiet() {
		t.Fatal("an open, silent connection is not quiet")
	}
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return !cs.Quiet() })
	// The peeked byte is still there to read.
	b := make([]byte, 1)
	if n, err := cs.Read(b); n != 1 || b[0] != 'x' || err != nil {
		t.Fatalf("after the peek: %d %q %v", n, b, err)
	}
	if !cs.Quiet() {
		t.Fatal("not quiet once read")
	}
	_ = s.Close()
	waitFor(t, func() bool { return !cs.Quiet() })
	_ = c.Close()
	if cs.Quiet() {
		t.Fatal("a closed connection is quiet")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if cond() {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("condition not reached in 1 s")
}
