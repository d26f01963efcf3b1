package zmtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// ResolveTimeout bounds the one name resolution of a publisher endpoint.
const ResolveTimeout = 10 * time.Second

// ErrNotAllowed is returned when no resolved address is inside the allowed
// CIDRs.
var ErrNotAllowed = errors.New("publisher address not in direct_allow_cidrs")

// ErrCarrierLost is wrapped by the errors of a connection whose carrier
// (an event bus session relaying its bytes) ended or is draining: the
// publisher may be fine, so the next attempt is made at once through
// another carrier rather than after a longer backoff.
var ErrCarrierLost = errors.New("carrier lost")

// Target is what a subscription connects to.
type Target struct {
	// Endpoint is the publisher's tcp://host:port.
	Endpoint string
	// Namespace is the Dynamo namespace that advertises the publisher.
	Namespace string
	// Topic is the topic subscribed to (kv_metrics, kv-events).
	Topic string
}

// Connector opens the byte stream a subscription runs on.
type Connector interface {
	// Connect returns a connection to the target's endpoint.
	Connect(ctx context.Context, t Target) (net.Conn, error)
	// Transport names the connector for metrics ("direct", "broker").
	Transport() string
}

// Gated is a connector that may have no route to a target yet (a relay
// that no carrier covers). A subscription waits, without polling, until
// Ready returns nil.
type Gated interface {
	Connector
	// Ready returns nil when a connection to t may be attempted now, or a
	// channel that is closed when that may have changed.
	Ready(t Target) <-chan struct{}
	// OpenTimeout bounds Connect; the protocol handshake that follows has
	// its own budget.
	OpenTimeout() time.Duration
}

// Carried is a connection relayed by a carrier: Carrier names it (the
// broker id) for listings and metrics.
type Carried interface {
	Carrier() string
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

// SplitTCPEndpoint parses tcp://host:port, port a number from 1 to 65535
// (ZMQ's tcp transport takes no service names, and no wildcard to
// connect to).
func SplitTCPEndpoint(endpoint string) (host, port string, err error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", "", fmt.Errorf("endpoint %q is not tcp://host:port", endpoint)
	}
	host, port, err = net.SplitHostPort(rest)
	if err != nil || host == "" || port == "" || host == "*" {
		return "", "", fmt.Errorf("endpoint %q is not tcp://host:port", endpoint)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "", "", fmt.Errorf("endpoint %q has no port number from 1 to 65535", endpoint)
	}
	return host, port, nil
}

// Connect implements Connector.
func (d *Direct) Connect(ctx context.Context, t Target) (net.Conn, error) {
	host, port, err := SplitTCPEndpoint(t.Endpoint)
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
		// An IPv4-mapped prefix (::ffff:10.0.0.0/104) is the IPv4 range
		// it maps: dialled addresses are unmapped before they are
		// checked, so the mapped form would never match.
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
