package router

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// Dynamo's direct-mode frontend refuses a request without a prefill id
// while prefill workers are registered with this text.
const directModePrefillError = "Prefill worker ID required in Direct routing mode"

// Outbound pin headers (decimal ids).
const (
	HeaderWorkerInstanceID  = "x-dynamo-worker-instance-id"
	HeaderPrefillInstanceID = "x-dynamo-prefill-instance-id"
	HeaderDPRank            = "x-dynamo-dp-rank"
	HeaderPrefillDPRank     = "x-dynamo-prefill-dp-rank"
)

// Routing paths (disaggregated_requests_total{routing_path}).
const (
	PathDisaggregated = "disaggregated"
	PathAggregated    = "aggregated"
	PathUnified       = "unified"
	PathFallback      = "fallback"
)

// maxReplicaAttempts bounds the replicas one pinned request is sent to.
const maxReplicaAttempts = 3

// exchange is one client request being routed.
type exchange struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	path   string
	body   []byte
	q      *request
	policy *keyPolicy
	reveal bool // the client sent x-backend: show routing identities
	// path2 is the routing path of a plain dispatch (unified or fallback).
	path2 string
}

// route sends the request through the shim with a pin when Dynamo serves
// its model, else to a plain backend.
func (x *exchange) route() {
	cfg := x.s.cfg.Load()
	if cfg.DisaggregatedServing.Enabled && cfg.Dynamo.Enabled && x.s.opts.Registry != nil && x.s.opts.Registry.IsEnabled() {
		if done := x.shim(cfg); done {
			return
		}
	}
	x.plain(nil, PathUnified)
}

// poolPlan is, for one configuration, the shim replicas of each
// configured namespace, worked out once instead of per request.
type poolPlan struct {
	cfg        *config.Config
	namespaces []string     // discovery namespaces, in their order
	replicas   [][]*Backend // by namespace index
}

func newPoolPlan(cfg *config.Config, bs *backends) *poolPlan {
	byName := map[string][]*Backend{}
	add := func(ns string, names []string) {
		for _, n := range names {
			if b := bs.get(n); b != nil {
				byName[ns] = append(byName[ns], b)
			}
		}
	}
	namespaces := cfg.Dynamo.Discovery.Namespaces()
	if len(cfg.Dynamo.Shim.Pools) > 0 {
		for _, p := range cfg.Dynamo.Shim.Pools {
			if slices.Contains(namespaces, p.Namespace) {
				add(p.Namespace, p.Backends)
			}
		}
	} else {
		for _, ns := range namespaces {
			add(ns, cfg.Dynamo.Shim.Backends)
		}
	}
	plan := &poolPlan{cfg: cfg, namespaces: namespaces, replicas: make([][]*Backend, len(namespaces))}
	for i, ns := range namespaces {
		plan.replicas[i] = byName[ns]
	}
	return plan
}

// requestPools are the shim replicas a request may use now, by candidate
// namespace.
type requestPools struct {
	namespaces []string
	replicas   [][]*Backend
}

func (p *requestPools) of(ns string) []*Backend {
	for i, n := range p.namespaces {
		if n == ns {
			return p.replicas[i]
		}
	}
	return nil
}

// pools returns the namespaces (in discovery order) with a shim replica
// this request may use now, and those replicas. When every replica of a
// namespace passes, its list is shared, not copied.
func (x *exchange) pools(cfg *config.Config) requestPools {
	plan := x.s.poolPlan.Load()
	if plan == nil || plan.cfg != cfg {
		plan = newPoolPlan(cfg, x.s.backends)
		x.s.poolPlan.Store(plan)
	}
	now := x.s.opts.Now()
	ok := func(b *Backend) bool { return x.policy.allows(b.Name()) && b.Available(now) }
	shared := true
	for _, all := range plan.replicas {
		shared = shared && len(all) > 0 && !slices.ContainsFunc(all, func(b *Backend) bool { return !ok(b) })
	}
	if shared {
		return requestPools{namespaces: plan.namespaces, replicas: plan.replicas} // the common case: nothing to leave out
	}
	var out requestPools
	for i, ns := range plan.namespaces {
		all := plan.replicas[i]
		usable := all
		for j, b := range all {
			if !ok(b) {
				// Copy the ones that pass.
				usable = slices.Clone(all[:j])
				for _, b := range all[j+1:] {
					if ok(b) {
						usable = append(usable, b)
					}
				}
				break
			}
		}
		if len(usable) > 0 {
			out.namespaces = append(out.namespaces, ns)
			out.replicas = append(out.replicas, usable)
		}
	}
	return out
}

// shim dispatches through the direct-mode frontend pool of the picked
// namespace. It returns false when the request should go the plain way
// (no worker serves the model, or no replica is usable).
func (x *exchange) shim(cfg *config.Config) bool {
	pools := x.pools(cfg)
	if len(pools.namespaces) == 0 {
		return false
	}
	model := x.q.Model
	if m, ok := cfg.Dynamo.Shim.ModelMap[model]; ok {
		model = m
	}
	namespaces := pools.namespaces
	picker, _ := x.s.opts.Registry.Picker().(pick.Picker)
	if picker == nil {
		return false
	}
	est := pick.EstimateTokens(x.q.promptText())
	preq := pick.Request{Model: model, Namespaces: namespaces, EstPromptTokens: est}
	var pin pick.Pin
	var ticket pick.Ticket
	var err error
	if r, ok := picker.(pick.Reserver); ok {
		// Pick and record the dispatch in one step, so that requests
		// arriving together see each other.
		pin, ticket, err = r.Reserve(x.s.opts.Registry.Snapshot(), preq, x.s.opts.Now())
	} else if pin, err = picker.Pick(x.s.opts.Registry.Snapshot(), preq); err == nil {
		ticket = x.s.opts.Ledger.Dispatched(pin, est, x.s.opts.Now())
	}
	if err != nil {
		return false // no worker serves the model: plain routing
	}
	m := x.s.opts.Metrics
	m.Selections.WithLabelValues(pick.RoleDecode, pin.DecodeReason).Inc()
	x.s.picks.add(load.Key{WorkerID: pin.Decode.Worker.ID.InstanceID, DPRank: pin.Decode.DPRank})
	if pin.PrefillReason != "" {
		m.Selections.WithLabelValues(pick.RolePrefill, pin.PrefillReason).Inc()
	}
	if pin.Prefill != nil {
		x.s.picks.add(load.Key{WorkerID: pin.Prefill.Worker.ID.InstanceID, DPRank: pin.Prefill.DPRank})
	}
	routingPath := PathAggregated
	if pin.Prefill != nil {
		routingPath = PathDisaggregated
	}
	hdr := pinHeaders(pin)
	defer x.s.opts.Ledger.Finished(ticket)

	res := x.send(pools.of(pin.Namespace), hdr, &pin)
	switch res.kind {
	case sentOK:
		m.DisaggRequests.WithLabelValues(routingPath).Inc()
		return true
	case sentPrefillRefused:
		m.DisaggRequests.WithLabelValues(routingPath).Inc()
		m.DisaggErrors.WithLabelValues("orchestration").Inc()
		writeError(x.w, http.StatusServiceUnavailable, CodePrefillDecodeUnavailable,
			"the Dynamo frontend requires a prefill worker the router did not pin; the fleet view is out of date")
		return true
	case sentClientGone:
		m.DisaggRequests.WithLabelValues(routingPath).Inc()
		return true
	}
	m.DisaggErrors.WithLabelValues("decode").Inc()
	if cfg.DisaggregatedServing.FallbackToUnified {
		x.plain(nil, PathFallback)
		return true
	}
	m.DisaggRequests.WithLabelValues(routingPath).Inc()
	writeError(x.w, http.StatusBadGateway, CodeDisaggregatedDecodeFailed, "the pinned Dynamo dispatch failed: "+res.detail)
	return true
}

// The pin headers in canonical form, so that building them per request
// does not canonicalise (and allocate) the names again.
var (
	canonWorkerInstanceID  = http.CanonicalHeaderKey(HeaderWorkerInstanceID)
	canonPrefillInstanceID = http.CanonicalHeaderKey(HeaderPrefillInstanceID)
	canonDPRank            = http.CanonicalHeaderKey(HeaderDPRank)
	canonPrefillDPRank     = http.CanonicalHeaderKey(HeaderPrefillDPRank)
)

// pinHeaders renders a pin as the decimal headers the frontend reads.
func pinHeaders(pin pick.Pin) http.Header {
	h := make(http.Header, 4)
	h[canonWorkerInstanceID] = []string{strconv.FormatUint(pin.Decode.Worker.ID.InstanceID, 10)}
	if pin.Decode.SendRank {
		h[canonDPRank] = []string{strconv.FormatUint(uint64(pin.Decode.DPRank), 10)}
	}
	if p := pin.Prefill; p != nil {
		h[canonPrefillInstanceID] = []string{strconv.FormatUint(p.Worker.ID.InstanceID, 10)}
		if p.SendRank {
			h[canonPrefillDPRank] = []string{strconv.FormatUint(uint64(p.DPRank), 10)}
		}
	}
	return h
}

// plain routes to a unified backend serving the model, without pins. While
// dispatch goes through the shim, its replicas are direct-mode frontends
// that refuse unpinned requests, so they are not plain candidates.
func (x *exchange) plain(_ *pick.Pin, routingPath string) {
	x.path2 = routingPath
	cfg := x.s.cfg.Load()
	now := x.s.opts.Now()
	shimReplica := map[string]bool{}
	if cfg.DisaggregatedServing.Enabled && cfg.Dynamo.Enabled {
		for _, n := range cfg.Dynamo.Shim.Backends {
			shimReplica[n] = true
		}
		for _, p := range cfg.Dynamo.Shim.Pools {
			for _, n := range p.Backends {
				shimReplica[n] = true
			}
		}
	}
	var cands []*Backend
	for _, b := range x.s.backends.all() {
		if b.cfg.Internal || b.cfg.Role != config.RoleUnified || shimReplica[b.Name()] || !b.Serves(x.q.Model) || !x.policy.allows(b.Name()) || !b.Available(now) {
			continue
		}
		cands = append(cands, b)
	}
	if cfg.DisaggregatedServing.Enabled && cfg.Dynamo.Enabled {
		x.s.opts.Metrics.DisaggRequests.WithLabelValues(routingPath).Inc()
	}
	if len(cands) == 0 {
		writeError(x.w, http.StatusServiceUnavailable, CodeNoBackend, "no available backend serves model "+strconvQuote(x.q.Model))
		return
	}
	res := x.send(cands, nil, nil)
	switch res.kind {
	case sentOK, sentClientGone:
	case sentPrefillRefused:
		// A frontend without pins refusing: relay as a gateway error.
		writeError(x.w, http.StatusBadGateway, CodeUpstream, res.detail)
	default:
		if res.status == http.StatusGatewayTimeout {
			writeError(x.w, http.StatusGatewayTimeout, CodeTimeout, res.detail)
			return
		}
		writeError(x.w, http.StatusBadGateway, CodeUpstream, res.detail)
	}
}

func strconvQuote(s string) string { return strconv.Quote(s) }

type sendKind int

const (
	sentOK             sendKind = iota + 1
	sentPrefillRefused          // the direct-mode frontend wants a prefill id
	sentFailed                  // transport error, 5xx, 429 or 408: may fall back
	sentClientGone
)

type sendResult struct {
	kind   sendKind
	status int
	detail string
}

// send tries the replicas in turn (starting at a rotating offset) on
// connection failures, with the same pin headers, and relays the first
// answer. Non-retryable answers (2xx, other 4xx) are relayed as they are.
func (x *exchange) send(replicas []*Backend, pinHdr http.Header, pin *pick.Pin) sendResult {
	if len(replicas) == 0 {
		return sendResult{kind: sentFailed, detail: "no replica available"}
	}
	start := int(x.s.rr.Add(1))
	var last sendResult
	tried := 0
	for i := 0; i < len(replicas) && tried < maxReplicaAttempts; i++ {
		b := replicas[(start+i)%len(replicas)]
		if !b.acquire(x.s.opts.Now()) {
			continue
		}
		tried++
		res, retry := x.sendOnce(b, pinHdr, pin)
		if !retry {
			return res
		}
		last = res
	}
	if tried == 0 {
		return sendResult{kind: sentFailed, detail: "every replica is unavailable"}
	}
	return last
}

// sendOnce performs one upstream request. retry is true for a failure to
// reach the replica (the request never started there).
func (x *exchange) sendOnce(b *Backend, pinHdr http.Header, pin *pick.Pin) (res sendResult, retry bool) {
	ctx, cancel := context.WithTimeout(x.r.Context(), b.cfg.Timeout.D())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.URL()+x.path, bytes.NewReader(x.body))
	if err != nil {
		b.release(false, x.s.opts.Now())
		return sendResult{kind: sentFailed, detail: err.Error()}, false
	}
	copyRequestHeaders(req.Header, x.r.Header)
	req.ContentLength = int64(len(x.body))
	req.Header.Set("Content-Type", "application/json")
	if b.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+b.cfg.APIKey)
	} else {
		req.Header.Del("Authorization")
	}
	for k, v := range pinHdr {
		req.Header[k] = v
	}
	// The transport directly: the client would only copy the headers and
	// the URL for redirects, which the router never follows.
	resp, err := x.s.client.Transport.RoundTrip(req)
	if err != nil {
		if x.r.Context().Err() != nil {
			b.release(true, x.s.opts.Now())
			return sendResult{kind: sentClientGone}, false
		}
		b.release(false, x.s.opts.Now())
		status := http.StatusBadGateway
		if errors.Is(err, context.DeadlineExceeded) {
			status = http.StatusGatewayTimeout
		}
		// Only a failure to connect is retried on another replica: the
		// request never reached this one.
		var op *net.OpError
		dialFailed := errors.As(err, &op) && op.Op == "dial"
		return sendResult{kind: sentFailed, status: status, detail: "backend " + b.Name() + ": " + err.Error()}, dialFailed
	}
	defer func() { _ = resp.Body.Close() }()
	// A shim answer that is not 2xx is a failure (fallback or decode
	// error) for a buffered request; for a streaming one only 5xx, 429 and
	// 408 are, and other 4xx pass through.
	failed := resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout
	if !x.q.Stream && (resp.StatusCode < 200 || resp.StatusCode > 299) {
		failed = true
	}
	b.release(resp.StatusCode < 500, x.s.opts.Now())
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if pin == nil && !stream {
		// Plain routing has nothing to inspect: copy through.
		x.writeHead(resp, b, pin)
		bp := streamBufPool.Get().(*[]byte)
		_, err := io.CopyBuffer(x.w, resp.Body, *bp)
		streamBufPool.Put(bp)
		if err != nil && x.r.Context().Err() != nil {
			return sendResult{kind: sentClientGone}, false
		}
		return sendResult{kind: sentOK, status: resp.StatusCode}, false
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 || !stream {
		// Buffered (or an error before a stream): inspect, then relay.
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxBufferedResponse))
		if err != nil {
			if x.r.Context().Err() != nil {
				return sendResult{kind: sentClientGone}, false
			}
			return sendResult{kind: sentFailed, status: http.StatusBadGateway, detail: "backend " + b.Name() + ": reading the response: " + err.Error()}, false
		}
		if pin != nil && resp.StatusCode >= 400 && bytes.Contains(data, []byte(directModePrefillError)) {
			return sendResult{kind: sentPrefillRefused, status: resp.StatusCode, detail: string(truncate(data, 512))}, false
		}
		if pin != nil && failed {
			return sendResult{kind: sentFailed, status: resp.StatusCode, detail: "backend " + b.Name() + " answered " + resp.Status}, false
		}
		x.writeHead(resp, b, pin)
		_, _ = x.w.Write(data)
		return sendResult{kind: sentOK, status: resp.StatusCode}, false
	}
	x.writeHead(resp, b, pin)
	if err := relayStream(x.w, resp.Body); err != nil && x.r.Context().Err() != nil {
		return sendResult{kind: sentClientGone}, false
	}
	return sendResult{kind: sentOK, status: resp.StatusCode}, false
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// hop-by-hop and routing headers never forwarded upstream.
var dropRequestHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Host": true, "X-Backend": true,
	"Accept-Encoding": true, "Authorization": true, "X-Api-Key": true,
}

func copyRequestHeaders(dst, src http.Header) {
	for k, v := range src {
		if dropRequestHeaders[k] || isDynamoHeader(k) {
			continue
		}
		dst[k] = slices.Clone(v)
	}
}

// isDynamoHeader reports whether a header name starts with x-dynamo- (in
// any case), without allocating.
func isDynamoHeader(k string) bool {
	return len(k) >= 9 && strings.EqualFold(k[:9], "x-dynamo-")
}

// writeHead relays the upstream status and headers, without hop-by-hop or
// x-dynamo-* headers, adding routing identities when the client asked.
func (x *exchange) writeHead(resp *http.Response, b *Backend, pin *pick.Pin) {
	h := x.w.Header()
	for k, v := range resp.Header {
		if isDynamoHeader(k) || dropRequestHeaders[k] {
			continue
		}
		h[k] = v // the upstream response is not read again: no copy
	}
	if x.reveal {
		h.Set("x-continuum-backend", b.Name())
		path := PathUnified
		if x.path2 != "" {
			path = x.path2
		}
		if pin != nil {
			path = PathAggregated
			h.Set("x-continuum-worker", strconv.FormatUint(pin.Decode.Worker.ID.InstanceID, 10))
			if pin.Prefill != nil {
				path = PathDisaggregated
				h.Set("x-continuum-prefill-worker", strconv.FormatUint(pin.Prefill.Worker.ID.InstanceID, 10))
			}
		}
		h.Set("x-continuum-routing-path", path)
	}
	x.w.WriteHeader(resp.StatusCode)
}

var streamBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// relayStream copies an SSE body to the client, flushing after every read
// so events are not held back.
func relayStream(w http.ResponseWriter, body io.Reader) error {
	rc := http.NewResponseController(w)
	bp := streamBufPool.Get().(*[]byte)
	defer streamBufPool.Put(bp)
	buf := *bp
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
