//go:build linux

package routerd

import (
	"context"
	"net"
	"syscall"
)

// Keep-alive probing of client connections, Go's default for accepted
// connections: the first probe after 15 s of silence, then every 15 s, the
// connection given up after 9 unanswered.
const (
	keepAliveIdle     = 15
	keepAliveInterval = 15
	keepAliveCount    = 9
)

// listenTCP listens on addr with keep-alive probing set once, on the
// listening socket: Linux gives an accepted connection its listener's
// socket options, so none of the four system calls that would set them
// again runs per connection. Those calls are not cheap for a Go server: a
// system call made while the runtime's monitor sleeps wakes it, and it then
// polls every 20 µs for a while; a burst of new connections (a client
// opening more as its requests queue) was paying for that per connection.
func listenTCP(addr string) (net.Listener, error) {
	lc := net.ListenConfig{
		KeepAlive: -1, // set on the listener below, inherited
		Control: func(_, _ string, c syscall.RawConn) error {
			var err error
			if cerr := c.Control(func(fd uintptr) { err = setKeepAlive(int(fd)) }); cerr != nil {
				return cerr
			}
			return err
		},
	}
	return lc.Listen(context.Background(), "tcp", addr)
}

func setKeepAlive(fd int) error {
	for _, o := range [...]struct{ level, name, value int }{
		{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, keepAliveIdle},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, keepAliveInterval},
		{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount},
	} {
		if err := syscall.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			return err
		}
	}
	return nil
}
