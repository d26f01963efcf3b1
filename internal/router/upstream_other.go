//go:build !unix

package router

// open reports whether an idle connection may carry a request; without a
// read that does not wait, a connection the backend closed is found when
// the request fails.
func (c *upConn) open() bool { return c.br.Buffered() == 0 }
