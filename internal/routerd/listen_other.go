//go:build !linux

package routerd

import "net"

// listenTCP listens on addr; the runtime sets keep-alive probing on each
// accepted connection.
func listenTCP(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
