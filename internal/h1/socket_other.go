//go:build !linux

package h1

import (
	"io"
	"net"
)

// SocketIO is what reads and writes c: on Linux a TCP connection is read
// and written with system calls the Go scheduler is not told of; elsewhere
// c itself.
func SocketIO(c net.Conn) io.ReadWriter { return c }
