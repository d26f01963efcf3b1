package loopport

import (
	"net"
	"testing"
)

// TestFreeIsBindableAndOutsideEphemeralRange: the port can be bound, and
// it lies below the ephemeral range when the kernel says where that is.
func TestFreeIsBindableAndOutsideEphemeralRange(t *testing.T) {
	t.Parallel()
	lo := ephemeralLow()
	for range 20 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("bind %s: %v", addr, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if lo > 2048 && (port >= lo || port < max(1024, lo-span)) {
			t.Fatalf("port %d, want in [%d, %d)", port, max(1024, lo-span), lo)
		}
	}
}
