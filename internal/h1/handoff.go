package h1

import (
	"net"
	"sync"
)

// Handoff is a net.Listener whose connections are given to it rather than
// accepted from a socket: the net/http server behind a lean one serves
// from it what the lean server hands off (Fallback), and whatever else
// its owner gives it (TLS connections).
type Handoff struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

// NewHandoff returns a Handoff that reports addr as its address.
func NewHandoff(addr net.Addr) *Handoff {
	return &Handoff{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// Offer waits until the server accepts c (true) or the listener is closed
// (false, c left open).
func (h *Handoff) Offer(c net.Conn) bool {
	select {
	case h.ch <- c:
		return true
	case <-h.done:
		return false
	}
}

// Give offers c and closes it if the listener is closed: a Fallback.
func (h *Handoff) Give(c net.Conn) {
	if !h.Offer(c) {
		_ = c.Close()
	}
}

// Accept returns the next connection given, or net.ErrClosed once the
// listener is closed.
func (h *Handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.ch:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Offer return; connections already accepted are
// the server's.
func (h *Handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

func (h *Handoff) Addr() net.Addr { return h.addr }
