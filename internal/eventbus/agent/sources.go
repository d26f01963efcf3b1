package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"

	"github.com/continuum-router/continuum/internal/eventbus"
)

// Publishers opens the publishers a broker may relay: targets in a
// declared namespace that discovery advertises, dialled over TCP. A
// target that is not advertised is refused (target_not_advertised)
// before anything is dialled, so that a session cannot make the broker
// reach arbitrary addresses inside the cluster.
type Publishers struct {
	// Namespaces are the Dynamo namespaces the broker declared.
	Namespaces []string
	// Advertised reports whether discovery advertises a publisher of the
	// target's topic at its host and port in its namespace.
	Advertised func(t eventbus.Target) bool
	Dialer     net.Dialer
}

var _ Opener = (*Publishers)(nil)

// Open implements Opener.
func (p *Publishers) Open(ctx context.Context, m *eventbus.Message) (io.ReadWriteCloser, string, error) {
	t := m.Target
	switch {
	case t == nil:
		return nil, eventbus.CodeStreamRefused, errors.New("a broker relays targets, not announced backends")
	case !slices.Contains(p.Namespaces, t.Namespace):
		return nil, eventbus.CodeNamespaceNotDeclared, nil
	case p.Advertised == nil || !p.Advertised(*t):
		return nil, eventbus.CodeTargetNotAdvertised, nil
	}
	conn, err := p.Dialer.DialContext(ctx, "tcp", net.JoinHostPort(t.Host, strconv.Itoa(t.Port)))
	if err != nil {
		return nil, eventbus.CodeConnectFailed, err
	}
	return conn, "", nil
}

// Backends opens the SSE streams of a kv-listener's announced backends.
type Backends struct {
	// URLs maps each announced backend to its SSE endpoint.
	URLs   map[string]string
	Client *http.Client
}

var _ Opener = (*Backends)(nil)

// Open implements Opener: a GET of the backend's SSE stream, resumed
// after the announced Last-Event-ID.
func (b *Backends) Open(ctx context.Context, m *eventbus.Message) (io.ReadWriteCloser, string, error) {
	a := m.Announced
	if a == nil {
		return nil, eventbus.CodeStreamRefused, errors.New("a kv-listener relays announced backends, not targets")
	}
	u, ok := b.URLs[a.Backend]
	if !ok {
		return nil, eventbus.CodeBackendUnknown, nil
	}
	// The stream outlives ctx (which bounds reaching the backend): the
	// relay closes it.
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, u, nil)
	if err != nil {
		return nil, eventbus.CodeBackendFailed, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if a.LastEventID != nil {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(*a.LastEventID, 10))
	}
	client := b.Client
	if client == nil {
		client = http.DefaultClient
	}
	type result struct {
		resp *http.Response
		err  error
	}
	ch := make(chan result, 1)
	rctx, cancel := context.WithCancel(req.Context())
	go func() {
		resp, err := client.Do(req.WithContext(rctx)) //nolint:bodyclose // handed over; the source or the caller closes it
		ch <- result{resp, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		cancel()
		if r = <-ch; r.err == nil {
			_ = r.resp.Body.Close()
		}
		return nil, eventbus.CodeBackendFailed, ctx.Err()
	}
	if r.err != nil {
		cancel()
		return nil, eventbus.CodeBackendFailed, r.err
	}
	if r.resp.StatusCode/100 != 2 {
		_ = r.resp.Body.Close()
		cancel()
		return nil, eventbus.CodeBackendFailed, fmt.Errorf("backend %s answered %s", a.Backend, r.resp.Status)
	}
	return &sseSource{body: r.resp.Body, cancel: cancel}, "", nil
}

// sseSource is a backend's SSE body as a relay source: what the router
// writes towards it is discarded (an SSE stream takes no input).
type sseSource struct {
	body   io.ReadCloser
	cancel context.CancelFunc
}

func (s *sseSource) Read(p []byte) (int, error)  { return s.body.Read(p) }
func (s *sseSource) Write(p []byte) (int, error) { return len(p), nil }
func (s *sseSource) Close() error {
	s.cancel()
	return s.body.Close()
}
