// Package router is the HTTP server: the OpenAI-compatible API (with the
// Anthropic Messages and Responses ingresses, converted to chat
// completions and back), the middleware (x-dynamo-* stripping, API keys,
// rate limits), the backends with health checks and circuit breakers,
// dispatch through Dynamo's direct-mode shim with pin headers, the admin
// API and /metrics.
//
// Imports: admin, config, fleet, h1, jsonscan, load, pick, shim and
// telemetry; never a discovery source, the daemon or the simulator.
package router

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpproxy"

	"github.com/continuum-router/continuum/internal/config"
)

// Breaker and health-check settings.
const (
	breakerFailures = 5
	breakerOpenFor  = 10 * time.Second
	healthInterval  = 10 * time.Second
	healthTimeout   = 3 * time.Second
	healthFailures  = 2
	// healthDrainBytes bounds what of a check's answer is read: a model
	// list is a few KiB; a longer one costs its connection, not a wait.
	healthDrainBytes  = 1 << 20
	maxIdleConnsPerBE = 256
)

// Backend is one upstream with its health and breaker state.
type Backend struct {
	cfg config.Backend

	healthy      atomic.Bool
	healthFails  atomic.Int32
	consecutive  atomic.Int32
	openUntil    atomic.Int64 // unix nanos; breaker open while now < openUntil
	probing      atomic.Bool  // a half-open probe is in flight
	inflight     atomic.Int64
	lastHealthAt atomic.Int64
	// targets holds the parsed URL of each request path sent to the
	// backend, read without a lock and replaced whole when a path is
	// added. The paths are the router's routes, a handful.
	targets atomic.Pointer[map[string]*target]
	// lastTarget is the target found last: the path of most requests is
	// the last one's, met without hashing it and reading the map.
	lastTarget atomic.Pointer[target]
	auth       atomic.Pointer[[]string]
}

// authorization is the Authorization header the backend's requests carry
// (its api_key as a bearer token), nil without a key; one slice per
// backend, shared by its requests.
func (b *Backend) authorization() []string {
	if b.cfg.APIKey == "" {
		return nil
	}
	if v := b.auth.Load(); v != nil {
		return *v
	}
	v := []string{"Bearer " + b.cfg.APIKey}
	b.auth.Store(&v)
	return v
}

// maxTargets bounds a backend's parsed URLs; past it a URL is parsed per
// request (the router has fewer routes than this).
const maxTargets = 32

// target is a request path on a backend: its URL, and the request line
// and Host line of a POST to it when writeOwnRequest may write them as
// they are ("" when the request goes through writeRequest's checks).
type target struct {
	path  string // the request path it is made for
	u     *url.URL
	start string
}

// target is the target of path on the backend, made once per path: every
// request to that path shares it, so nothing may write to it.
func (b *Backend) target(path string) (*target, error) {
	if t := b.lastTarget.Load(); t != nil && t.path == path {
		return t, nil
	}
	cached := b.targets.Load()
	var known map[string]*target
	if cached != nil {
		known = *cached
	}
	if t, ok := known[path]; ok {
		b.lastTarget.Store(t)
		return t, nil
	}
	u, err := url.Parse(b.URL() + path)
	if err != nil {
		return nil, err
	}
	// An empty port ("host:") means the scheme's, as an outgoing
	// request's host is written without it.
	if i := strings.LastIndexByte(u.Host, ':'); i >= 0 && i > strings.LastIndexByte(u.Host, ']') {
		u.Host = strings.TrimSuffix(u.Host, ":")
	}
	t := &target{path: path, u: u, start: postStart(u)}
	if len(known) < maxTargets {
		next := make(map[string]*target, len(known)+1)
		maps.Copy(next, known)
		next[path] = t
		b.targets.CompareAndSwap(cached, &next) // losing a race loses only the cache entry
	}
	b.lastTarget.Store(t)
	return t, nil
}

// Name is the configured name.
func (b *Backend) Name() string { return b.cfg.Name }

// URL is the base URL without a trailing slash.
func (b *Backend) URL() string { return strings.TrimRight(b.cfg.URL, "/") }

// Available reports whether the backend may take a request now: enabled,
// healthy, breaker closed (or half-open with no probe in flight).
func (b *Backend) Available(now time.Time) bool {
	if !b.cfg.Enabled || !b.healthy.Load() {
		return false
	}
	until := b.openUntil.Load()
	if until == 0 {
		return true
	}
	return now.UnixNano() >= until && !b.probing.Load() // half-open: one probe
}

// acquire takes a slot: when the breaker is half-open, only one request
// (the probe) goes through. It returns false when the backend is closed to
// requests.
func (b *Backend) acquire(now time.Time) bool {
	if !b.cfg.Enabled || !b.healthy.Load() {
		return false
	}
	if until := b.openUntil.Load(); until != 0 {
		if now.UnixNano() < until {
			return false
		}
		if !b.probing.CompareAndSwap(false, true) {
			return false
		}
	}
	b.inflight.Add(1)
	return true
}

// release records the outcome of a request taken with acquire.
func (b *Backend) release(ok bool, now time.Time) {
	b.inflight.Add(-1)
	if ok {
		b.consecutive.Store(0)
		b.openUntil.Store(0)
		b.probing.Store(false)
		return
	}
	if n := b.consecutive.Add(1); n >= breakerFailures || b.probing.Load() {
		b.openUntil.Store(now.Add(breakerOpenFor).UnixNano())
		b.probing.Store(false)
	}
}

// answered gives back a slot whose request had an answer head below 500:
// the breaker closes (a half-open probe has its answer), and whether the
// replica failed waits for the body (settle).
func (b *Backend) answered() {
	b.inflight.Add(-1)
	b.openUntil.Store(0)
	b.probing.Store(false)
}

// settle records how an answered request's body ended: read whole (or
// ended by the client or the router), or broken off by the replica, which
// counts as a failure as a reset before the head does. A replica that
// answers every head and breaks every body is taken out like one that
// fails outright.
func (b *Backend) settle(ok bool, now time.Time) {
	if ok {
		b.consecutive.Store(0)
		return
	}
	if b.consecutive.Add(1) >= breakerFailures {
		b.openUntil.Store(now.Add(breakerOpenFor).UnixNano())
	}
}

// abandon gives back a slot whose request ended with its client before the
// backend showed anything: no evidence either way, so the breaker's count
// stays. A half-open probe abandoned so lets the next request probe.
func (b *Backend) abandon() {
	b.inflight.Add(-1)
	b.probing.Store(false)
}

// Serves reports whether the backend lists model (an empty list serves any).
func (b *Backend) Serves(model string) bool {
	if len(b.cfg.Models) == 0 {
		return true
	}
	for _, m := range b.cfg.Models {
		if m == model {
			return true
		}
	}
	return false
}

// backends holds the configured backends by name and checks their health.
type backends struct {
	mu     sync.RWMutex
	byName map[string]*Backend
	order  []*Backend
	client *http.Client
}

// newTransport is the client of the backends: the router's own HTTP/1.1
// client for http:// backends, http.Transport for the others.
func newTransport() http.RoundTripper {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	u := newUpstream(newHTTPTransport(dialer), dialer)
	u.noHTTPProxy = httpproxy.FromEnvironment().HTTPProxy == ""
	return u
}

func newHTTPTransport(dialer *net.Dialer) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   maxIdleConnsPerBE,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // per backend timeouts bound the whole request
		ForceAttemptHTTP2:     false,
		DisableCompression:    true,
	}
}

func newBackends(cfgs []config.Backend, client *http.Client) *backends {
	bs := &backends{byName: map[string]*Backend{}, client: client}
	for _, c := range cfgs {
		b := &Backend{cfg: c}
		b.healthy.Store(true) // optimistic until the first check says otherwise
		bs.byName[c.Name] = b
		bs.order = append(bs.order, b)
	}
	return bs
}

// replace makes cfgs the backends. A backend whose settings did not change
// is kept as it is, with its health and breaker state; a changed or new one
// starts healthy with a closed breaker, as at start.
func (bs *backends) replace(cfgs []config.Backend) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	byName := make(map[string]*Backend, len(cfgs))
	order := make([]*Backend, 0, len(cfgs))
	for _, c := range cfgs {
		b := bs.byName[c.Name]
		if b == nil || !reflect.DeepEqual(b.cfg, c) {
			b = &Backend{cfg: c}
			b.healthy.Store(true)
		}
		byName[c.Name] = b
		order = append(order, b)
	}
	bs.byName, bs.order = byName, order
}

func (bs *backends) get(name string) *Backend {
	bs.mu.RLock()
	defer bs.mu.RUnlock()
	return bs.byName[name]
}

func (bs *backends) all() []*Backend {
	bs.mu.RLock()
	defer bs.mu.RUnlock()
	return bs.order
}

// runHealth checks every backend's GET /v1/models until ctx ends.
func (bs *backends) runHealth(ctx context.Context) {
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for _, b := range bs.all() {
			if !b.cfg.Enabled {
				continue
			}
			wg.Add(1)
			go func(b *Backend) {
				defer wg.Done()
				bs.check(ctx, b)
			}(b)
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (bs *backends) check(ctx context.Context, b *Backend) {
	cctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, b.URL()+"/v1/models", nil)
	if err != nil {
		return
	}
	if b.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.cfg.APIKey)
	}
	resp, err := bs.client.Do(req)
	ok := err == nil && resp.StatusCode < 500
	if resp != nil {
		// Read to its end (within a bound), the answer gives its keep-alive
		// connection back to the pool; closed unread, it closes it, and a
		// check taking the connection a request just left idle would cost
		// the next request a dial every healthInterval.
		_, _ = io.CopyN(io.Discard, resp.Body, healthDrainBytes)
		_ = resp.Body.Close()
	}
	if ctx.Err() != nil {
		return
	}
	b.lastHealthAt.Store(time.Now().UnixNano())
	if ok {
		b.healthFails.Store(0)
		b.healthy.Store(true)
	} else if b.healthFails.Add(1) >= healthFailures {
		b.healthy.Store(false)
	}
}
