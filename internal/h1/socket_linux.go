package h1

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Socket reads and writes a TCP connection with system calls the Go
// scheduler is not told of, waiting in the network poller as net.Conn does
// when the socket has nothing to give or no room to take.
//
// A Go program's read and write calls on a socket go through the
// runtime's system-call entry, which wakes the runtime's monitor thread
// (sysmon) when it has gone to sleep because every processor was idle;
// sysmon then polls at 20 µs until the process is idle again. A proxy on a
// small machine goes idle between a request's two halves (waiting for the
// backend, then for the client), so every request woke it twice: about
// four of the seven thread switches a proxied request cost, and a fifth of
// the process's CPU. The system-call entry exists so that a call that
// blocks gives its processor to other goroutines; Go's sockets are
// non-blocking, so a read or write here never blocks and needs none of it.
type Socket struct {
	rc         syscall.RawConn
	local, rem net.Addr

	// The current call's buffer and outcome, set by Read and Write around
	// rc's callbacks: a Read may run beside a Write, but not beside
	// another Read (or Quiet), nor a Write beside another Write.
	rp, wp  []byte
	rn, wn  int
	rerr    syscall.Errno
	werr    syscall.Errno
	readFn  func(uintptr) bool
	writeFn func(uintptr) bool
	// Quiet's peek.
	peekFn func(uintptr) bool
	peek   [1]byte
	quiet  bool
}

// maxRW bounds one system call, as the runtime's poller does (some
// kernels refuse larger counts).
const maxRW = 1 << 30

// SocketIO is what reads and writes c: its Socket when c is a TCP
// connection, else c itself (TLS, in-memory pipes, other wrappers). A
// connection that wraps a TCP connection may expose it by a NetConn
// method, as crypto/tls does; its own Read and Write must then add
// nothing, since they are not called.
func SocketIO(c net.Conn) io.ReadWriter {
	if s := newSocket(c); s != nil {
		return s
	}
	return c
}

func newSocket(c net.Conn) *Socket {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	s := &Socket{rc: rc, local: tc.LocalAddr(), rem: tc.RemoteAddr()}
	s.readFn, s.writeFn, s.peekFn = s.read, s.write, s.peekOnce
	return s
}

// Read reads into p as net.Conn's Read does: at least one byte, io.EOF at
// the end of the stream, or an error (deadlines and closing included).
func (s *Socket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) > maxRW {
		p = p[:maxRW]
	}
	s.rp, s.rn, s.rerr = p, 0, 0
	err := s.rc.Read(s.readFn)
	s.rp = nil
	switch {
	case err != nil:
		return 0, s.opError("read", err)
	case s.rerr != 0:
		return 0, s.opError("read", os.NewSyscallError("read", s.rerr))
	case s.rn == 0:
		return 0, io.EOF
	}
	return s.rn, nil
}

func (s *Socket) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(s.rp))), uintptr(len(s.rp)))
		switch e {
		case 0:
			s.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait in the poller
		}
		s.rerr = e
		return true
	}
}

// Write writes all of p, or returns how much was written and why it
// stopped, as net.Conn's Write does.
func (s *Socket) Write(p []byte) (int, error) {
	s.wp, s.wn, s.werr = p, 0, 0
	err := s.rc.Write(s.writeFn)
	n := s.wn
	s.wp = nil
	switch {
	case err != nil:
		return n, s.opError("write", err)
	case s.werr != 0:
		return n, s.opError("write", os.NewSyscallError("write", s.werr))
	}
	return n, nil
}

func (s *Socket) write(fd uintptr) bool {
	for s.wn < len(s.wp) {
		p := s.wp[s.wn:]
		if len(p) > maxRW {
			p = p[:maxRW]
		}
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		switch e {
		case 0:
			s.wn += int(n)
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait in the poller for room
		}
		s.werr = e
		return true
	}
	return true
}

// Quiet reports whether the connection is open with nothing to read, as a
// kept-alive connection must be to carry a request: one the peer closed
// has its end of stream to read, and one it wrote to unasked is out of
// step. It does not wait.
func (s *Socket) Quiet() bool {
	s.quiet = false
	err := s.rc.Read(s.peekFn)
	return err == nil && s.quiet
}

func (s *Socket) peekOnce(fd uintptr) bool {
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.peek[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		s.quiet = e == syscall.EAGAIN
		return true
	}
}

// opError wraps err as net.Conn's methods do, so that messages and
// errors.Is/As read the same.
func (s *Socket) opError(op string, err error) error {
	if errors.Is(err, io.EOF) {
		return err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: s.local, Addr: s.rem, Err: err}
}
