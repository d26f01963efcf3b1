package eventbus

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/continuum-router/continuum/internal/zmtp"
)

// Connector runs subscriptions over the event bus (transport: broker): a
// publisher's endpoint becomes a target in its Dynamo namespace, opened
// through OpenStream. A subscription whose namespace no session covers
// waits (pending) on the sessions' watch. With no bus (the event bus
// disabled) every subscription stays pending: the broker transport never
// falls back to dialling publishers directly.
type Connector struct {
	Bus *Bus
}

var _ zmtp.Gated = (*Connector)(nil)

// never is a channel that is never closed.
var never = make(chan struct{})

// Transport implements zmtp.Connector.
func (c *Connector) Transport() string { return "broker" }

// OpenTimeout implements zmtp.Gated.
func (c *Connector) OpenTimeout() time.Duration {
	if c.Bus == nil {
		return OpenTimeout
	}
	return c.Bus.t.open
}

// Ready implements zmtp.Gated.
func (c *Connector) Ready(t zmtp.Target) <-chan struct{} {
	if c.Bus == nil {
		return never
	}
	changed := c.Bus.Changed()
	if c.Bus.Covers(t.Namespace) {
		return nil
	}
	return changed
}

// Connect implements zmtp.Connector.
func (c *Connector) Connect(ctx context.Context, t zmtp.Target) (net.Conn, error) {
	if c.Bus == nil {
		return nil, ErrNoSession
	}
	host, port, err := zmtp.SplitTCPEndpoint(t.Endpoint)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("%w: port %q", ErrInvalidTarget, port)
	}
	return c.Bus.OpenStream(ctx, Target{Namespace: t.Namespace, Host: host, Port: p, Topic: t.Topic})
}
