package zmtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// ResolveTimeout bounds the one name resolution of a publisher endpoint.
const ResolveTimeout = 10 * time.Second

// ErrNotAllowed is returned when no resolved address is inside the allowed
// CIDRs.
var ErrNotAllowed = errors.New("publisher address not in direct_allow_cidrs")

// Connector opens the byte stream a subscription runs on.
type Connector interface {
	// Connect returns a connection to endpoint (tcp://host:port).
	Connect(ctx context.Context, endpoint string) (net.Conn, error)
	// Transport names the connector for metrics ("direct", "broker").
	Transport() string
}

// Direct dials publishers over TCP. When Allow is not empty, the host is
// resolved once and only addresses inside Allow are dialled: the address
// checked is the address connected to.
type Direct struct {
	Allow    []netip.Prefix
	Resolver *net.Resolver
	Dialer   net.Dialer
}

var _ Connector = (*Direct)(nil)

// Transport implements Connector.
func (d *Direct) Transport() string { return "direct" }

// SplitTCPEndpoint parses tcp://host:port.
func SplitTCPEndpoint(endpoint string) (host, port string, err error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", "", fmt.Errorf("endpoint %q is not tcp://host:port", endpoint)
	}
	host, port, err = net.SplitHostPort(rest)
	if err != nil || host == "" || port == "" || host == "*" {
		return "", "", fmt.Errorf("endpoint %q is not tcp://host:port", endpoint)
	}
	return host, port, nil
}

// Connect implements Connector.
func (d *Direct) Connect(ctx context.Context, endpoint string) (net.Conn, error) {
	host, port, err := SplitTCPEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		rctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
		defer cancel()
		r := d.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		ips, err := r.LookupNetIP(rctx, "ip", host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		addrs = ips
	}
	lastErr := ErrNotAllowed
	for _, a := range addrs {
		a = a.Unmap()
		if !d.allowed(a) {
			continue
		}
		conn, err := d.Dialer.DialContext(ctx, "tcp", net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func (d *Direct) allowed(a netip.Addr) bool {
	if len(d.Allow) == 0 {
		return true
	}
	for _, p := range d.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseCIDRs parses direct_allow_cidrs.
func ParseCIDRs(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("direct_allow_cidrs: %w", err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
