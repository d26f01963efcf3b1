package zmtp_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/continuum-router/continuum/internal/zmtp"
)

// TestMappedPrefixAllowsItsIPv4Range: an IPv4-mapped prefix in
// direct_allow_cidrs (::ffff:127.0.0.0/104) allows the IPv4 range it maps,
// as every dialled address is unmapped before it is checked.
func TestMappedPrefixAllowsItsIPv4Range(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	allow, err := zmtp.ParseCIDRs([]string{"::ffff:127.0.0.0/104"})
	if err != nil {
		t.Fatal(err)
	}
	d := &zmtp.Direct{Allow: allow}
	c, err := d.Connect(ctxT(t), zmtp.Target{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", ln.Addr().(*net.TCPAddr).Port)})
	if err != nil {
		t.Fatalf("direct_allow_cidrs [::ffff:127.0.0.0/104] (validated as a CIDR): connecting to 127.0.0.1: %v", err)
	}
	_ = c.Close()
}
