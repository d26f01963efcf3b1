package routerd

import (
	"net"
	"syscall"
	"testing"
)

// TestAcceptedConnectionsProbe: connections the router accepts carry
// keep-alive probing though the listener sets it once on itself (a client
// that vanished without a FIN is found out rather than held forever), and
// Nagle's delay is off as on any Go connection.
func TestAcceptedConnectionsProbe(t *testing.T) {
	t.Parallel()
	ln, err := listenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Close() }()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name       string
		level, opt int
		value      int
	}{
		{"SO_KEEPALIVE", syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, keepAliveIdle},
		{"TCP_KEEPINTVL", syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, keepAliveInterval},
		{"TCP_KEEPCNT", syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount},
		{"TCP_NODELAY", syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1},
	}
	if err := rc.Control(func(fd uintptr) {
		for _, w := range want {
			got, err := syscall.GetsockoptInt(int(fd), w.level, w.opt)
			if err != nil || got != w.value {
				t.Errorf("%s of an accepted connection = %d (%v), want %d", w.name, got, err, w.value)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
}
