package testutil

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a target address, so that a test can
// cut them as a network fault would: Cut drops the open connections and
// goes on accepting, Close stops accepting too (a peer killed).
type Proxy struct {
	ln     net.Listener
	target string
	retry  time.Duration
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
	closed sync.Once
}

// StartProxy forwards connections to target until the test ends. With
// retryDial above zero a connection whose upstream dial fails retries it
// for that long (as an L4 balancer that retries its upstream does, its
// client side accepted at once whatever the server behind is doing);
// otherwise the connection is closed.
func StartProxy(t testing.TB, target string, retryDial time.Duration) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, retry: retryDial}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
	t.Cleanup(p.Close)
	return p
}

func (p *Proxy) forward(c net.Conn) {
	deadline := time.Now().Add(p.retry)
	up, err := net.Dial("tcp", p.target)
	for err != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		up, err = net.Dial("tcp", p.target)
	}
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	p.wg.Go(func() { _, _ = io.Copy(up, c); _ = up.Close() })
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut drops every open connection; new ones are still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// Close stops accepting, drops every connection and waits for the
// forwarding to end.
func (p *Proxy) Close() {
	p.closed.Do(func() {
		_ = p.ln.Close()
		p.Cut()
		p.wg.Wait()
	})
}

// maxSilentConns bounds the connections a SilentListener holds; those past
// it are closed at once.
const maxSilentConns = 64

// SilentListener listens on a loopback port, accepts connections and holds
// them open without ever answering (a server that hangs: an etcd that
// never completes a read, say), until the test ends; it returns the
// address.
func SilentListener(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, maxSilentConns)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case held <- c:
			default:
				_ = c.Close()
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for len(held) > 0 {
			_ = (<-held).Close()
		}
	})
	return ln.Addr().String()
}
