//go:build unix

package router

import (
	"errors"
	"syscall"
)

// open reports whether an idle connection is still open and silent: a
// backend that closed it (its keep-alive timeout) has sent its FIN, which a
// read that does not wait sees.
func (c *upConn) open() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if s, ok := c.rw.(interface{ Quiet() bool }); ok {
		return s.Quiet() // h1's socket: the same peek, unseen by the scheduler
	}
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Nothing to read yet: open. A byte, or the end (no error), is
		// not a connection a request can start on.
		open = errors.Is(err, syscall.EAGAIN)
		return true
	})
	return err == nil && open
}
