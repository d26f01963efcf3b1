package router

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/h1"
)

// maxReplicaAttempts bounds the replicas one pinned request is sent to.
const maxReplicaAttempts = 3

// exchange is one client request being routed.
type exchange struct {
	s *Server
	w http.ResponseWriter
	// r is the client's request; nil for one served from its head's
	// bytes (ServeRaw), whose field lines are then in fields.
	r      *http.Request
	fields string
	// newID is the header value of the request id the router made for a
	// request served from its bytes (the client sent none that is valid),
	// nil when it kept the client's.
	newID []string
	// ctx is the client's request's context.
	ctx  context.Context
	path string
	body []byte
	q    *request
	// query holds q for the ingresses that read it here (allocated with
	// the exchange).
	query  request
	policy *keyPolicy
	reveal bool // the client sent x-backend: show routing identities
	// routingPath is the routing path of a plain dispatch (unified or
	// fallback), for the reveal headers.
	routingPath string
	// out answers the client of a converted request (Messages, Responses)
	// in its API's shapes; nil for requests whose answers are relayed as
	// they are.
	out ingress
	// only, when set, narrows the backends the request may go to.
	only func(*Backend) bool
	// modelOnly pins by the model and the workers' load alone: the
	// picker renders no prompt and no token data is sent (a body that is
	// not a chat or text completion request).
	modelOnly bool
	// bookTokens is the size a modelOnly request is booked at in the
	// picker's in-flight ledger (pick.Request.BookTokens).
	bookTokens int
	// unpinned sends the request the plain way even when its model's
	// workers are pinned for inference.
	unpinned bool
	// freshPins picks the workers again for every replica the request is
	// tried on (the Messages and Responses ingresses). A chat request
	// keeps its one pin for the whole request: its client asked for one
	// dispatch, while an ingress sends one per attempt, each chosen
	// against the fleet as it is then.
	freshPins bool
	// pinnedStream: the stream relayed is a pinned dispatch's (a Dynamo
	// frontend's), whose error events are followed; streamErrored: one
	// came (relayStream).
	pinnedStream, streamErrored bool
	// streamDone: the stream relayed to the client ended with its final
	// event (data: [DONE]; a Responses stream's response.completed,
	// response.incomplete or response.failed). A client that leaves after
	// it has its whole answer: the request is served, not abandoned.
	streamDone bool
	// reruns counts the times a pinned request that may have run was
	// sent again (a re-pin, or another replica after the connection broke
	// once the request was out): at most the card's migration_limit in
	// all.
	reruns int
}

// fail answers the client with a router error, in its ingress's shape.
func (x *exchange) fail(status int, code, param, message string) {
	if x.out != nil {
		x.out.fail(x.w, status, code, param, message)
		return
	}
	writeParamError(x.w, status, code, param, message)
}

// takes reports whether the request may go to b at all.
func (x *exchange) takes(b *Backend) bool {
	return x.policy.allows(b.Name()) && (x.only == nil || x.only(b))
}

// shimPlan builds the dispatch plan of a configuration: the replicas of
// each discovery namespace, from shim.pools or else shim.backends.
func shimPlan(cfg *config.Config, bs *backends, dynamo bool) *shim.Plan[*Backend] {
	namespaces := cfg.Dynamo.Discovery.Namespaces()
	byNS := map[string][]*Backend{}
	add := func(ns string, names []string) {
		for _, n := range names {
			if b := bs.get(n); b != nil {
				byNS[ns] = append(byNS[ns], b)
			}
		}
	}
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
	c := shim.Config[*Backend]{
		Enabled:           dynamo && cfg.DisaggregatedServing.Enabled && cfg.Dynamo.Enabled,
		ModelMap:          cfg.Dynamo.Shim.ModelMap,
		FallbackToUnified: cfg.DisaggregatedServing.FallbackToUnified,
		LegacyPinHeaders:  cfg.Dynamo.Shim.LegacyPinHeaders,
		Busy:              busyThreshold(cfg.Dynamo.Load.BusyThreshold),
	}
	for _, ns := range namespaces {
		c.Pools = append(c.Pools, shim.Pool[*Backend]{Namespace: ns, Replicas: byNS[ns]})
	}
	return shim.NewPlan(c)
}

// route sends the request through the shim with a pin when Dynamo serves
// its model, else to a plain backend.
func (x *exchange) route() {
	plan := x.s.dispatch.Plan()
	if !plan.Enabled() || x.unpinned {
		x.plain(shim.PathUnified)
		return
	}
	pinBody := x.body
	if x.modelOnly {
		pinBody = nil
	}
	req := shim.Request[*Backend]{
		Model:        x.q.Model,
		PromptTokens: x.q.estimateTokens(),
		BookTokens:   x.bookTokens,
		Path:         x.path,
		Body:         pinBody,
		CacheSalt:    x.tenant(),
		Usable:       func(b *Backend) bool { return x.takes(b) && b.Available(x.s.opts.Now()) },
		// A disabled replica is no replica (the catalog's rule): a
		// namespace whose replicas are all disabled goes the plain way.
		Allowed: func(b *Backend) bool { return b.cfg.Enabled && x.takes(b) },
	}
	d, answered := x.reserve(&req)
	if d == nil {
		if !answered {
			x.plain(shim.PathUnified) // no worker serves the model, or no replica is usable
		}
		return
	}
	// The dispatch ends in the picker's accounting (it no longer counts
	// towards its workers' stall, nor its prompt as in flight on them for
	// KV-aware picks) when it is answered or fails, not after a unified
	// fallback it takes no part in: a fallback held longer than
	// pick.StallAfter would have had a worker that publishes no load
	// samples taken for stalled. (What it booked stays until the workers'
	// next samples, as for any finished dispatch.)
	released := false
	release := func() {
		if !released {
			released = true
			d.Done()
			x.s.queue.notify() // a worker may have room for a waiting request
		}
	}
	defer release()
	m := x.s.opts.Metrics
	// Only a pinned dispatch carries the router's tokens; a plain fallback
	// sends the body as it was.
	plainBody := x.body
	defer func() { x.body = plainBody }()
	var res sendResult
	var refresh func(tried []*Backend) *shim.Dispatch[*Backend]
	if x.freshPins {
		refresh = func(tried []*Backend) *shim.Dispatch[*Backend] {
			nd := x.reserveAgain(&req, tried)
			if nd != nil {
				d.Done()
				d = nd
				x.pinned(plainBody, &d.Pin)
			}
			return nd
		}
	}
	limit := shim.RepinLimit(d.Pin)
	for {
		x.pinned(plainBody, &d.Pin)
		res = x.send(d.Replicas, d.Header, &d.Pin, refresh)
		if res.outcome != shim.Failed || res.repin == "" || x.reruns >= limit || x.ctx.Err() != nil {
			break
		}
		nd := x.repin(&req, res, &d.Pin)
		if nd == nil {
			break // nowhere else to go: the failure stands
		}
		x.reruns++
		d.Done()
		d = nd
	}
	x.body = plainBody
	if res.outcome == shim.Relayed && res.status >= 200 && res.status <= 299 {
		x.served(&d.Pin)
	}
	v := plan.Verdict(res.outcome)
	if v.Action == shim.FallBack && len(x.plainCandidates(x.s.routes.Load(), nil)) == 0 {
		// Nothing to fall back to (the shim's frontend is the only
		// backend of the model): the dispatch's own failure says more
		// than "no backend", and a retry would not find one either.
		v = shim.Verdict{Action: shim.FailDecode, CountPath: true, ErrorPhase: v.ErrorPhase}
	}
	if v.ErrorPhase != "" {
		m.DisaggErrors.WithLabelValues(v.ErrorPhase).Inc()
	}
	if v.CountPath {
		m.DisaggRequests.WithLabelValues(d.Path).Inc()
	}
	switch v.Action {
	case shim.RefusePrefill:
		x.fail(http.StatusServiceUnavailable, CodePrefillDecodeUnavailable, "",
			"the Dynamo frontend requires a prefill worker the router did not pin; the fleet view is out of date")
	case shim.FallBack:
		release()
		x.plain(shim.PathFallback)
	case shim.FailDecode:
		x.fail(http.StatusBadGateway, CodeDisaggregatedDecodeFailed, "", "the pinned Dynamo dispatch failed: "+x.failure(res))
	case shim.Abort:
		x.abort(res)
	}
}

// tenant is the client's x-tenant-id header, which Dynamo's frontend
// takes, when not empty, as the request's cache salt over the body's: the
// blocks the request leaves on its workers are hashed under it, and the
// router hashes its prompt alike. A value the frontend cannot read as text
// (bytes outside visible ASCII, space and tab) it ignores, and so does the
// router.
func (x *exchange) tenant() string {
	var v string
	if x.r != nil {
		v = x.r.Header.Get(tenantHeader)
	} else {
		for fields := x.fields; ; {
			name, line, rest, ok := h1.NextField(fields)
			if !ok {
				break
			}
			fields = rest
			if name == tenantHeader {
				v = h1.LineValue(line)
				break
			}
		}
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c != '\t' && (c < ' ' || c > '~') {
			return ""
		}
	}
	return v
}

// tenantHeader is the header Dynamo's frontend reads a cache salt from.
const tenantHeader = "X-Tenant-Id"

// shimUnavailable answers a request for a model whose Dynamo workers are
// behind frontend replicas the client may use, none of which is available
// (a breaker open, a failing health check): a shim failure like a failed
// dispatch, counted in phase decode, then the unified fallback when it is
// on and a backend other than the shim's frontends can take the request,
// else 502 disaggregated_decode_failed, counted under path, the routing
// path the request would have taken (a fallback counts under its own), as
// a dispatch that failed is: each request is counted once.
func (x *exchange) shimUnavailable(path string) {
	v := x.s.dispatch.Plan().Verdict(shim.Failed)
	x.s.opts.Metrics.DisaggErrors.WithLabelValues(shim.PhaseDecode).Inc()
	if v.Action == shim.FallBack && len(x.plainCandidates(x.s.routes.Load(), nil)) > 0 {
		x.plain(shim.PathFallback)
		return
	}
	x.s.opts.Metrics.DisaggRequests.WithLabelValues(path).Inc()
	x.fail(http.StatusBadGateway, CodeDisaggregatedDecodeFailed, "",
		"no Dynamo frontend replica that serves model "+strconvQuote(x.q.Model)+" is available (circuit breaker open or failing its health check)")
}

// pinned counts a pin's selections and makes the body it is sent with:
// only a pinned dispatch carries the router's tokens.
func (x *exchange) pinned(plainBody []byte, pin *pick.Pin) {
	x.countSelection(pin)
	x.body = plainBody
	if len(pin.TokenIDs) > 0 && !x.modelOnly {
		x.body = withTokenData(plainBody, pin.TokenIDs)
	}
}

// reserveAgain picks the workers of a request about to be tried on another
// replica, among the replicas not tried yet; nil when none is left or no
// worker can take it now, and the last failure then stands.
func (x *exchange) reserveAgain(req *shim.Request[*Backend], tried []*Backend) *shim.Dispatch[*Backend] {
	usable := req.Usable
	defer func() { req.Usable = usable }()
	req.Usable = func(b *Backend) bool { return !slices.Contains(tried, b) && usable(b) }
	d, err := x.s.dispatch.Reserve(x.s.opts.Registry.Snapshot(), *req, x.s.opts.Now())
	if err != nil {
		return nil
	}
	return d
}

// failure is what the client is told of a failed dispatch: the backend is
// named only to a client that asked to see backends (x-backend), as in
// the answer's headers; the log has it always.
func (x *exchange) failure(res sendResult) string {
	if left, ok := x.s.failLog.allow(x.s.opts.Now()); ok {
		x.s.logger.Warn("dispatch failed", "path", x.path, "model", x.q.Model, "status", res.status, "detail", res.detail,
			"not_logged_since_last", left)
	}
	switch {
	case x.reveal:
		return res.detail
	case res.public == "":
		return "the dispatch to the backend failed"
	}
	return res.public
}

// logLimiter lets one log line through a second: a backend that is down
// fails every request sent to it, and a line per request would flood the
// log. allow reports whether a line may go now and how many were held
// back since the last one.
type logLimiter struct {
	// burst is how many lines a second may have (1 when zero).
	burst   int
	mu      sync.Mutex
	last    time.Time // the start of the current second
	n       int       // lines logged in it
	skipped int
}

// allow reports whether a line may be logged now, and how many were not
// since the last one that was.
func (l *logLimiter) allow(now time.Time) (skipped int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < time.Second {
		if l.n >= max(l.burst, 1) {
			l.skipped++
			return 0, false
		}
		l.n++
	} else {
		l.last, l.n = now, 1
	}
	skipped, l.skipped = l.skipped, 0
	return skipped, true
}

// abort ends a client's answer whose upstream answer broke after some of
// it was relayed: the connection is closed without the answer's end (the
// last chunk of a chunked answer, or the bytes a length promised), which
// a client reads as an error rather than as a complete answer.
func (x *exchange) abort(res sendResult) {
	if left, ok := x.s.failLog.allow(x.s.opts.Now()); ok {
		x.s.logger.Warn("the backend's answer broke off after the client got part of it; the client's answer is cut short",
			"path", x.path, "model", x.q.Model, "detail", res.detail, "not_logged_since_last", left)
	}
	panic(http.ErrAbortHandler)
}

// countSelection counts a pin's selections, by role and reason, and per
// pinned (worker, rank) for the admin API.
func (x *exchange) countSelection(pin *pick.Pin) {
	m := x.s.opts.Metrics
	m.Selections.WithLabelValues(pick.RoleDecode, pin.DecodeReason).Inc()
	x.s.picks.add(load.RankOf(pin.Decode.Worker, pin.Decode.DPRank))
	if pin.PrefillReason != "" {
		m.Selections.WithLabelValues(pick.RolePrefill, pin.PrefillReason).Inc()
	}
	if pin.Prefill != nil {
		x.s.picks.add(load.RankOf(pin.Prefill.Worker, pin.Prefill.DPRank))
	}
}

// settleWait bounds how long a request that found no worker waits for
// discovery to settle: the grace a replaced watcher has to stop.
const settleWait = 5 * time.Second

// settleCheck is how often a request waiting for discovery to settle
// asks again what it waits for.
const settleCheck = 100 * time.Millisecond

// awaitDiscovery waits, when discovery is between views (a reload replacing
// the watcher, before the new one's first full resync), until it has one;
// true when it then does. A request arriving in that window would
// otherwise fail for want of workers the fleet still has. What it waits
// for is asked again every settleCheck: a reload meanwhile may replace
// the watcher whose view it waits for (that one never comes) or turn
// discovery off.
func (x *exchange) awaitDiscovery() bool {
	if x.s.opts.DiscoverySettling == nil {
		return false
	}
	ch := x.s.opts.DiscoverySettling()
	if ch == nil {
		return false
	}
	t := time.NewTimer(settleWait)
	defer t.Stop()
	check := time.NewTicker(settleCheck)
	defer check.Stop()
	for {
		select {
		case <-ch:
			return true
		case <-check.C:
			if ch = x.s.opts.DiscoverySettling(); ch == nil {
				return true
			}
		case <-t.C:
			return false
		case <-x.ctx.Done():
			return false
		}
	}
}

// plain routes to a unified backend serving the model, without pins. The
// shim's replicas are never plain candidates while dispatch goes through
// them: a direct-mode frontend refuses unpinned requests.
func (x *exchange) plain(routingPath string) {
	x.routingPath = routingPath
	rt := x.s.routes.Load()
	plan := rt.plan
	var buf [4]*Backend // a router with a few backends lists them without an allocation
	cands := x.plainCandidates(rt, buf[:0])
	if len(cands) == 0 {
		x.noPlainBackend(plan, routingPath)
		return
	}
	if plan.Enabled() {
		x.s.opts.Metrics.DisaggRequests.WithLabelValues(routingPath).Inc()
	}
	if res := x.send(cands, nil, nil, nil); res.outcome == shim.Failed || res.outcome == shim.Cut {
		x.plainFailed(res)
	}
}

// plainCandidates lists the unified backends rt may route the request to
// without pins, available now, appended to cands.
func (x *exchange) plainCandidates(rt *routes, cands []*Backend) []*Backend {
	now := x.s.opts.Now()
	for _, b := range rt.backends {
		if b.cfg.Internal || b.cfg.Role != config.RoleUnified || rt.plan.IsReplica(b) || !b.Serves(x.q.Model) || !x.takes(b) || !b.Available(now) {
			continue
		}
		cands = append(cands, b)
	}
	return cands
}

// noPlainBackend answers a request no plain backend may take: its model is
// not here, or none that serves it is available.
func (x *exchange) noPlainBackend(plan *shim.Plan[*Backend], routingPath string) {
	if !x.s.known(x.q.Model, x.policy) {
		// A model that is not here took no routing path: not counted in
		// disaggregated_requests_total, whose unified series would read as
		// traffic routed the plain way.
		x.fail(http.StatusNotFound, CodeModelNotFound, "model",
			"the model "+strconvQuote(x.q.Model)+" does not exist here: no backend lists it and no Dynamo worker serves it (GET /v1/models lists the models)")
		return
	}
	if plan.Enabled() {
		x.s.opts.Metrics.DisaggRequests.WithLabelValues(routingPath).Inc()
	}
	x.fail(http.StatusServiceUnavailable, CodeNoBackend, "", "no available backend serves model "+strconvQuote(x.q.Model))
}

// plainFailed answers a plain dispatch that failed or was cut.
func (x *exchange) plainFailed(res sendResult) {
	switch {
	case res.outcome == shim.Cut:
		x.abort(res)
	case res.status == http.StatusGatewayTimeout:
		x.fail(http.StatusGatewayTimeout, CodeTimeout, "", x.failure(res))
	default:
		x.fail(http.StatusBadGateway, CodeUpstream, "", x.failure(res))
	}
}

func strconvQuote(s string) string { return strconv.Quote(s) }

// sendResult is what sending a request to a list of replicas came to.
type sendResult struct {
	outcome shim.Outcome
	status  int
	// detail says what failed, naming the backend (for the logs, and for
	// a client that asked to see backends with x-backend); public says it
	// without naming the backend or its address, for any other client.
	detail, public string
	// repin is why a failed pinned dispatch calls for other workers
	// (shim.Repin), "" when it does not; blame are the workers it failed on.
	repin string
	blame []fleet.WorkerID
	named bool
	// viewBehind: the answer quotes the frontend's refusal for want of a
	// prefill id; the frontend is up (its breaker counts no failure).
	viewBehind bool
	// frontendUp: the answer is the frontend's own word about its workers
	// or its load (shim.FrontendUp); it is up (its breaker counts no
	// failure).
	frontendUp bool
	// mayHaveRun: the connection broke after the request went out, before
	// an answer: a pinned request retried so runs again (see reruns).
	mayHaveRun bool
	// unreached: a proxy in front of the replica answered that it could
	// not reach it (shim.ProxyUnreachable): tried on another replica.
	unreached bool
}

// send tries the replicas in turn (starting at a rotating offset) on
// connection failures, and relays the first answer. Non-retryable answers
// (2xx, other 4xx) are relayed as they are. Each replica gets the same pin
// headers, unless refresh is set: it then gives the dispatch for the next
// attempt, its workers picked again and its replicas those not tried yet
// (nil: the last failure stands).
func (x *exchange) send(replicas []*Backend, pinHdr http.Header, pin *pick.Pin, refresh func(tried []*Backend) *shim.Dispatch[*Backend]) sendResult {
	if len(replicas) == 0 {
		return sendResult{outcome: shim.Failed, detail: "no replica available", public: "no replica available"}
	}
	start := int(x.s.rr.Add(1))
	var last sendResult
	var triedOn []*Backend
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
		if res.mayHaveRun {
			// Sent again after it may have run: the workers' consent,
			// shared with the re-pins.
			if x.reruns >= shim.RepinLimit(*pin) {
				return res
			}
			x.reruns++
		}
		last = res
		if refresh != nil && tried < maxReplicaAttempts {
			triedOn = append(triedOn, b)
			d := refresh(triedOn)
			if d == nil {
				return last
			}
			// The new dispatch's replicas leave out those tried.
			replicas, pinHdr, pin, i = d.Replicas, d.Header, &d.Pin, -1
		}
	}
	if tried == 0 {
		return sendResult{outcome: shim.Failed, detail: "every replica is unavailable", public: "every replica is unavailable"}
	}
	return last
}

// sendOnce performs one upstream request. retry is true for a failure to
// reach the replica (the request never started there).
//
// The path of a plain answer stays in this function; everything else (a
// request http.Transport sends, a failed exchange, an answer inspected,
// converted or streamed) is a method of its own, so that the code a plain
// request runs is not threaded through code it skips: a process whose
// caches its neighbours take between requests pays for every line of code
// it touches.
func (x *exchange) sendOnce(b *Backend, pinHdr http.Header, pin *pick.Pin) (res sendResult, retry bool) {
	ur, err := x.upstreamRequest(b, pinHdr)
	if err != nil {
		return x.badTarget(b, err), false
	}
	// Runs last (deferred first): once the answer's body is closed, the
	// router's own client holds nothing of the request.
	reuse := false
	defer func() {
		if reuse {
			ur.put()
		}
	}()
	// The transport directly: the client would only copy the headers and
	// the URL for redirects, which the router never follows. The router's
	// own client takes the backend's timeout as its connection's deadline
	// and the client's context beside the request; any other transport
	// gets a copy of the request with a timeout context, and may hold it
	// after it answers (writing the body), so that request is not reused.
	var resp *http.Response
	up, own := x.s.client.Transport.(*upstream)
	if own {
		resp, err = up.RoundTripUntil(x.ctx, &ur.req, ur.fields, ur.ownHead(), time.Now().Add(b.cfg.Timeout.D()))
		reuse = !errors.Is(err, errNotInline)
	}
	if !reuse {
		var cancel context.CancelFunc
		resp, cancel, err = x.roundTripWithTimeout(ur, b)
		defer cancel()
	}
	if err != nil {
		return x.roundTripFailed(b, pin, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 100 || resp.StatusCode > 999 {
		return x.invalidStatus(b, resp.StatusCode), false
	}
	if (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusProxyAuthRequired) && b.authorization() != nil {
		return x.credentialsRefused(b, resp), true
	}
	if pin != nil && resp.StatusCode >= 500 {
		// A frontend that answers that a pinned worker is gone, or that
		// the pin lacks the prefill worker it expects (the router's fleet
		// view is behind its own), is up: the failure is not the
		// replica's and does not count against its breaker. Which it is
		// shows in the body, read below.
		workerFault := false
		defer func() { b.release(workerFault, x.s.opts.Now()) }()
		defer func() {
			workerFault = shim.WorkerFault(res.repin) || res.outcome == shim.PrefillRefused || res.viewBehind || res.frontendUp
		}()
	} else if resp.StatusCode >= 500 {
		b.release(false, x.s.opts.Now())
	} else {
		b.answered()
		defer func() { b.settle(!bodyBroke(resp.Body, x.ctx), x.s.opts.Now()) }()
	}
	// A plain stream in another type than text/event-stream (NDJSON, or
	// none named) framed by its end (chunked) is relayed as it comes too,
	// as any reverse proxy does with a body of unknown length.
	stream := isEventStream(answerContentType(resp)) || (x.q.Stream && resp.ContentLength < 0 && pin == nil && x.out == nil)
	if pin != nil || stream || x.out != nil {
		res := x.relayInspected(resp, b, pin, stream)
		return res, res.unreached
	}
	// Plain routing has nothing to inspect: copy through, with the
	// backend's length (the answer then goes out as its last byte is
	// written, and a large one is not re-framed in chunks).
	if resp.ContentLength >= 0 {
		declareLength(x.w, resp.ContentLength)
	}
	x.writeHead(resp, b, pin, resp.StatusCode)
	bp := streamBufPool.Get().(*[]byte)
	_, err = io.CopyBuffer(x.w, resp.Body, *bp)
	streamBufPool.Put(bp)
	if err != nil {
		return x.broken(b, resp.StatusCode, err), false
	}
	return sendResult{outcome: shim.Relayed, status: resp.StatusCode}, false
}

// invalidStatus is the outcome of an answer whose status line holds no
// valid status code (HTTP's parsers take any three digits, "000" and
// "099" too): no answer to relay, a failure of the backend's. Its body is
// not read, so its connection is not kept.
func (x *exchange) invalidStatus(b *Backend, code int) sendResult {
	b.release(false, x.s.opts.Now())
	return sendResult{outcome: shim.Failed, status: http.StatusBadGateway,
		detail: "backend " + b.Name() + " answered with the invalid status code " + strconv.Itoa(code),
		public: "the backend's answer was not valid HTTP"}
}

// credentialsRefused is the outcome of a 401 or 407 from a backend the
// router sent its own credentials (backends[].api_key): the router's
// configuration is at fault, not the client's key, so the answer (which
// may quote the key it refused) is not relayed, the backend counts it as a
// failure, and the request, which the backend did not run, may go to
// another replica; the client gets a 502 and the log names the backend.
func (x *exchange) credentialsRefused(b *Backend, resp *http.Response) sendResult {
	b.release(false, x.s.opts.Now())
	return sendResult{outcome: shim.Failed, status: http.StatusBadGateway,
		detail: "backend " + b.Name() + " refused the router's credentials (" + resp.Status + "): check its api_key",
		public: "the backend refused the router's credentials"}
}

// bodyBroke reports whether reading an answer's body from the backend
// failed while its client was still there. Only the router's own client
// tells (the bodies of other transports are taken as read whole).
func bodyBroke(body io.ReadCloser, ctx context.Context) bool {
	ub, ok := body.(*upBody)
	return ok && ctx.Err() == nil && ub.Broke()
}

// badTarget is the outcome of a request whose backend's URL makes no
// request.
func (x *exchange) badTarget(b *Backend, err error) sendResult {
	b.release(false, x.s.opts.Now())
	return sendResult{outcome: shim.Failed, detail: "backend " + b.Name() + ": " + errText(err), public: "the backend's URL is not valid"}
}

// roundTripWithTimeout sends ur through the client's transport with the
// backend's timeout as a context's: the requests the router's own client
// does not send (https, a proxy, a large body) or any other transport.
// The caller cancels the context once the answer's body is read.
func (x *exchange) roundTripWithTimeout(ur *upRequest, b *Backend) (*http.Response, context.CancelFunc, error) {
	ur.mapOwnHead()
	if ur.fields != "" {
		h1.AddFields(ur.req.Header, ur.fields, clientLine)
		ur.fields = ""
	}
	if pinned(&ur.req) {
		hideIdempotencyKeys(ur.req.Header)
	}
	ctx, cancel := context.WithTimeout(x.ctx, b.cfg.Timeout.D())
	resp, err := x.s.client.Transport.RoundTrip(ur.req.WithContext(ctx))
	return resp, cancel, err
}

// hideIdempotencyKeys keeps a pinned dispatch's idempotency keys from
// net/http's transport, which reads a POST that names one (under the
// canonical name) as one it may send again on its own, to the same
// frontend, when a kept-alive connection breaks after the request went
// out: a pinned dispatch that may have reached its worker runs again only
// with the workers' consent (a card's migration_limit), which the dispatch
// judges, and the frontend applies no idempotency key. The keys still go
// to the frontend, under their lower-case names (field names are
// case-insensitive).
func hideIdempotencyKeys(h http.Header) {
	for _, k := range [...]string{"Idempotency-Key", "X-Idempotency-Key"} {
		if v, ok := h[k]; ok {
			delete(h, k)
			h[strings.ToLower(k)] = v
		}
	}
}

// roundTripFailed is the outcome of an exchange that brought no answer.
func (x *exchange) roundTripFailed(b *Backend, pin *pick.Pin, err error) (sendResult, bool) {
	if x.ctx.Err() != nil {
		// The client's leaving cut the exchange: neither a success (a
		// hung backend would never trip its breaker when clients time
		// out first) nor a failure.
		b.abandon()
		return sendResult{outcome: shim.ClientGone}, false
	}
	b.release(false, x.s.opts.Now())
	status, public := http.StatusBadGateway, "the connection to the backend failed"
	if errors.Is(err, context.DeadlineExceeded) {
		status, public = http.StatusGatewayTimeout, "the backend did not answer within its timeout"
	}
	// A failure to connect is retried on another replica: the request
	// never reached this one. A connection that broke before any answer
	// header (the replica died, or closed a kept-alive connection as the
	// request went out) may have carried the request to a worker, so it
	// is retried only for a pin whose card declares a migration_limit:
	// the workers' consent to a request running again elsewhere. Nothing
	// reached the client yet. A timeout is never retried: the request may
	// still be running.
	var op *net.OpError
	dialFailed := errors.As(err, &op) && op.Op == "dial" || handshakeFailed(err)
	migrates := pin != nil && shim.RepinLimit(*pin) > 0 && connectionBroken(err)
	if dialFailed {
		public = "the backend could not be reached"
	}
	return sendResult{outcome: shim.Failed, status: status, detail: "backend " + b.Name() + ": " + errText(err), public: public,
		mayHaveRun: migrates && !dialFailed}, dialFailed || migrates
}

// handshakeFailed reports whether err is a TLS handshake's failure (the
// replica's certificate refused, or the replica refusing the handshake):
// the request was never sent, as when the connection is refused.
func handshakeFailed(err error) bool {
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var op *net.OpError
	return errors.As(err, &verify) || errors.As(err, &header) || errors.As(err, &authority) ||
		errors.As(err, &host) || errors.As(err, &invalid) || errors.As(err, &op) && op.Op == "remote error"
}

// relayInspected relays an answer the router reads on its way: a pinned
// dispatch's (whose failures it tells apart), a converted request's, or a
// stream. The caller closes its body.
func (x *exchange) relayInspected(resp *http.Response, b *Backend, pin *pick.Pin, stream bool) sendResult {
	if resp.StatusCode < 200 || resp.StatusCode > 299 || !stream {
		return x.relayBuffered(resp, b, pin)
	}
	return x.relayStreamed(resp, b, pin)
}

// relayBuffered reads a buffered answer (or an error before a stream)
// whole, then relays it or says how the dispatch failed.
func (x *exchange) relayBuffered(resp *http.Response, b *Backend, pin *pick.Pin) sendResult {
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBufferedResponse+1))
	if err != nil {
		if x.ctx.Err() != nil {
			return sendResult{outcome: shim.ClientGone}
		}
		return sendResult{outcome: shim.Failed, status: http.StatusBadGateway, detail: "backend " + b.Name() + ": reading the response: " + errText(err),
			public: "reading the backend's response failed"}
	}
	if len(data) > maxBufferedResponse {
		// Relaying what fits would hand the client a cut answer (under a
		// length it does not have, or as if whole).
		return sendResult{outcome: shim.Failed, status: http.StatusBadGateway,
			detail: "backend " + b.Name() + ": its answer is larger than the " + strconv.Itoa(maxBufferedResponse) + " bytes the router holds to inspect or convert one",
			public: "the backend's answer is too large to relay"}
	}
	// The frontend's refusal for want of a prefill id is answered 503 for
	// a buffered request and for a Messages or Responses stream refused in
	// its head; a chat or text completion stream's refused head is a
	// failed dispatch like any other: fallen back from when it is a 5xx,
	// 429 or 408, relayed otherwise.
	completionStream := x.q.Stream && x.out == nil && (x.path == "/v1/chat/completions" || x.path == "/v1/completions")
	if pin != nil && !completionStream && shim.IsPrefillRefusal(resp.StatusCode, data) {
		return sendResult{outcome: shim.PrefillRefused, status: resp.StatusCode, detail: string(truncate(data, 512))}
	}
	if pin != nil && shim.Failure(resp.StatusCode, x.q.Stream) {
		res := sendResult{outcome: shim.Failed, status: resp.StatusCode, detail: "backend " + b.Name() + " answered " + resp.Status, public: "the backend answered " + resp.Status,
			viewBehind: shim.MentionsPrefillRefusal(data), unreached: shim.ProxyUnreachable(resp.StatusCode, data),
			frontendUp: shim.FrontendUp(resp.StatusCode, data)}
		if msg := answerMessage(data); msg != "" {
			// What the frontend said goes to the log and, when the client
			// asked who served it, to the client; a 4xx's (about the
			// request: a context length exceeded, a bad parameter) to
			// every client, as the frontend would have told it.
			res.detail += ": " + msg
			if resp.StatusCode >= 400 && resp.StatusCode <= 499 {
				res.public += ": " + msg
			}
		}
		if res.repin = shim.Repin(resp.StatusCode, data); res.repin != "" {
			res.blame, res.named = shim.FailedWorkers(*pin, data)
		}
		return res
	}
	if x.out != nil {
		x.relayConverted(resp, b, pin, data)
		return sendResult{outcome: shim.Relayed, status: resp.StatusCode}
	}
	x.writeHead(resp, b, pin, resp.StatusCode)
	_, _ = x.w.Write(data)
	return sendResult{outcome: shim.Relayed, status: resp.StatusCode}
}

// relayStreamed relays a stream's events as they come (or converts them).
func (x *exchange) relayStreamed(resp *http.Response, b *Backend, pin *pick.Pin) sendResult {
	x.writeHead(resp, b, pin, resp.StatusCode)
	relay := x.relayStream
	if x.out != nil {
		relay = x.out.stream
	} else if !bodyBuffered(resp.Body) {
		// The first event has not come with the head (a prefill still
		// queued): the client gets the head now rather than with the
		// first token. When it has come, head and event go out in one
		// write.
		if err := flusher(x.w)(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return x.broken(b, resp.StatusCode, err)
		}
	}
	x.pinnedStream = pin != nil
	err := relay(x.w, resp.Body)
	switch {
	case x.streamErrored && x.ctx.Err() == nil:
		// The frontend told the client of its failure in the stream,
		// relayed as it came: a failure of the decode, as a converted
		// stream's error event is.
		err = toldInStream{status: http.StatusInternalServerError, message: "the frontend's stream carried an error event"}
	case err == nil && x.pinnedStream && x.out == nil && !x.streamDone && x.ctx.Err() == nil:
		// A frontend ends a stream it gave up on (its engine gone, its
		// inactivity timeout) in good order but without its final event:
		// the client's answer is cut short, a failure of the decode.
		err = toldInStream{status: http.StatusBadGateway, message: "the frontend's stream ended before its final event"}
	}
	var told toldInStream
	if errors.As(err, &told) {
		if x.ctx.Err() != nil {
			// The client's leaving cut the stream: the error event went
			// to a connection no one reads (net/http's writes succeed
			// into the socket's buffer), and the request is abandoned,
			// not failed.
			return sendResult{outcome: shim.ClientGone}
		}
		x.streamEnded(told.status)
		if ub, ok := resp.Body.(*upBody); ok && told.upstream {
			ub.readEnd() // what follows its error event is the stream's end
		}
		if left, ok := x.s.failLog.allow(x.s.opts.Now()); ok {
			x.s.logger.Warn("the backend's answer broke off or carried an error after the client got part of it; the client was told in its stream",
				"path", x.path, "model", x.q.Model, "backend", b.Name(), "status", told.status, "detail", told.message,
				"not_logged_since_last", left)
		}
		return sendResult{outcome: shim.Told} // logged above; a told stream has finished
	}
	if err != nil && !x.streamDone {
		return x.broken(b, resp.StatusCode, err)
	}
	if x.out != nil || x.streamDone {
		// On the recorder too: the Messages and Responses handlers' own
		// exchanges are not the one it holds.
		x.streamEnded(0)
	}
	if x.out != nil {
		// The conversion returns at the stream's final event: the rest of
		// the body is read so that its connection is kept.
		if ub, ok := resp.Body.(*upBody); ok {
			ub.readEnd()
		}
	}
	return sendResult{outcome: shim.Relayed, status: resp.StatusCode}
}

// streamEnded notes on the request's recorder that the stream the client
// got has ended with its final event, having failed with status when that
// is not 0 (an error event ended it): a client that leaves now has its
// whole answer, and the request is counted by that status.
func (x *exchange) streamEnded(status int) {
	if rec, ok := x.w.(*statusRecorder); ok {
		rec.ended, rec.failedInStream = true, status
	}
}

// jsonContentType is the upstream request's Content-Type, one slice shared
// by every request (cap = len, so an append copies).
var jsonContentType = []string{"application/json"}

// upRequest is a request to a backend with its header map and body
// reader. The router's own client holds none of it once the answer's body
// is closed, so it serves the next request (upRequests): a request is
// then written from memory that is already in the cache rather than from
// fresh heap, which a process that sleeps between requests reads cold.
type upRequest struct {
	req http.Request
	h   http.Header
	// fields are the client's field lines sent with h (RoundTripUntil),
	// for a request served from its head's bytes.
	fields string
	// own stands for h, which is then empty, when own.start is set: a
	// request of the router's own, served from its head's bytes, with no
	// pins.
	own  ownHead
	body bodyReader
	// src is the body, again the reader of a new copy of it (a method
	// value bound once, for retries).
	src   []byte
	again func() (io.ReadCloser, error)
}

type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

var upRequests = sync.Pool{New: func() any {
	u := &upRequest{h: make(http.Header, 8)}
	u.again = u.bodyAgain
	return u
}}

// bodyAgain is the request body from its start, for a request sent a
// second time.
func (u *upRequest) bodyAgain() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(u.src)), nil
}

// put gives u back for another request, holding no reference to this
// one's data.
func (u *upRequest) put() {
	if len(u.h) > 0 {
		clear(u.h) // (the plain path fills no map: clearing an empty one still walks it)
	}
	u.req = http.Request{}
	u.fields = ""
	u.own = ownHead{}
	u.body.Reset(nil)
	u.src = nil
	upRequests.Put(u)
}

// upstreamRequest is the request to send to b: the client's body, its
// end-to-end headers, the backend's credentials and the pin headers, to
// the backend's URL for the exchange's path. Its context is unset: the
// caller gives the client's beside it.
func (x *exchange) upstreamRequest(b *Backend, pinHdr http.Header) (*upRequest, error) {
	t, err := b.target(x.path)
	if err != nil {
		return nil, err
	}
	u := t.u
	ur := upRequests.Get().(*upRequest)
	h := ur.h
	switch {
	case x.r == nil && len(pinHdr) == 0 && t.start != "":
		// The header map stays empty: the router's own client writes
		// what it would hold (RoundTripUntil), and any other transport
		// gets it filled in (mapOwnHead). The id the router made
		// replaces whatever the client sent.
		ur.fields = x.fields
		ur.own = ownHead{start: t.start, key: b.authorization(), id: x.newID}
	case x.r == nil:
		ur.fields = x.fields
		if x.newID != nil {
			h[requestIDHeader] = x.newID
		}
		fallthrough
	default:
		if x.r != nil {
			copyRequestHeaders(h, x.r.Header)
		}
		h["Content-Type"] = jsonContentType
		if key := b.authorization(); key != nil {
			h["Authorization"] = key
		}
		for k, v := range pinHdr {
			h[k] = v
		}
	}
	ur.req = http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Host: u.Host,
		Body: http.NoBody, GetBody: noBody}
	if len(x.body) > 0 {
		ur.src = x.body
		ur.body.Reset(x.body)
		ur.req.Body, ur.req.GetBody, ur.req.ContentLength = &ur.body, ur.again, int64(len(x.body))
	}
	return ur, nil
}

func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// ownHead is the head u's header map stands for, nil when the map holds
// it.
func (u *upRequest) ownHead() *ownHead {
	if u.own.start == "" {
		return nil
	}
	return &u.own
}

// mapOwnHead puts the fields u's own head stands for into its header map,
// for a transport that writes the map.
func (u *upRequest) mapOwnHead() {
	if u.own.start == "" {
		return
	}
	u.req.Header["Content-Type"] = jsonContentType
	if u.own.key != nil {
		u.req.Header["Authorization"] = u.own.key
	}
	if u.own.id != nil {
		u.req.Header[requestIDHeader] = u.own.id
	}
	u.own = ownHead{}
}

// broken is the outcome of an answer whose relay failed after its head
// went to the client: the client left, or the backend's answer broke off.
func (x *exchange) broken(b *Backend, status int, err error) sendResult {
	if x.ctx.Err() != nil {
		return sendResult{outcome: shim.ClientGone}
	}
	return sendResult{outcome: shim.Cut, status: status, detail: "backend " + b.Name() + ": the answer broke off: " + errText(err)}
}

// errText is err's text without the addresses network errors quote (the
// backend's URL, the peer's address and port): what a dispatch failure's
// detail says, in the log and to a client that asked to see backends
// (x-backend), which are named to it but never located.
func errText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Op + ": " + oe.Err.Error()
	}
	return err.Error()
}

// connectionBroken reports whether err says the connection to a replica
// was closed or reset under the request, rather than timing out.
func connectionBroken(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// relayConverted answers a converted request with a buffered upstream
// answer, converted: a chat completion into the ingress's object, an error
// into its error shape (same status). An answer that is not a chat
// completion is a 502 upstream_error.
func (x *exchange) relayConverted(resp *http.Response, b *Backend, pin *pick.Pin, data []byte) {
	status := resp.StatusCode
	answerHeader(resp) // changed below
	var out []byte
	if status >= 200 && status <= 299 {
		var err error
		if out, err = x.out.answer(data); err != nil {
			status = http.StatusBadGateway
			out = nil
		}
	} else {
		out = x.out.upstreamError(status, data)
	}
	resp.Header.Set("Content-Type", "application/json")
	if out == nil {
		resp.Header.Del("Content-Type")
		x.writeHeaders(resp, b, pin)
		what := "the backend"
		if x.reveal { // named only to a client that asked to see backends
			what = "backend " + b.Name()
		}
		if left, ok := x.s.failLog.allow(x.s.opts.Now()); ok {
			x.s.logger.Warn("a converted request's answer is not a chat completion", "path", x.path, "backend", b.Name(), "status", status,
				"not_logged_since_last", left)
		}
		x.fail(status, CodeUpstream, "", what+" answered with something that is not a chat completion")
		return
	}
	x.writeHead(resp, b, pin, status)
	_, _ = x.w.Write(out)
}

// answerMessage is a failed answer's JSON error message, at most
// maxAnswerMessage bytes (cut at a character's start), or "".
func answerMessage(body []byte) string {
	msg := shim.ErrorMessage(body)
	if len(msg) > maxAnswerMessage {
		cut := maxAnswerMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return msg
}

// maxAnswerMessage bounds what of a backend's error message the router
// repeats.
const maxAnswerMessage = 512

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// dropped reports whether a header (canonical name) is never forwarded:
// hop-by-hop fields, the framing the router writes itself, and the
// client's routing and credential fields. (A switch, not a map: no hash
// per field, and nothing to read from memory that is not the code.)
func dropped(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Content-Length", "Host", "X-Backend", "Accept-Encoding", "Authorization", "X-Api-Key",
		"Proxy-Authorization", "Proxy-Authenticate":
		return true
	}
	return false
}

// connectionNominated is the canonical names of the fields a message's
// Connection values list, beside the connection options close and
// keep-alive: hop-by-hop fields of that connection, which a proxy removes
// before forwarding (RFC 9110, section 7.6.1). Nil when there are none,
// as nearly always.
func connectionNominated(values []string) []string {
	var names []string
	for _, v := range values {
		for tok := range strings.SplitSeq(v, ",") {
			tok = strings.TrimSpace(tok)
			if tok == "" || strings.EqualFold(tok, "close") || strings.EqualFold(tok, "keep-alive") {
				continue
			}
			names = append(names, http.CanonicalHeaderKey(tok))
		}
	}
	return names
}

func copyRequestHeaders(dst, src http.Header) {
	nominated := connectionNominated(src["Connection"])
	for k, v := range src {
		if dropped(k) || shim.IsPinHeader(k) || slices.Contains(nominated, k) {
			continue
		}
		// Shared, not copied: nothing writes an upstream request's
		// values, and a clipped slice is copied by any append.
		dst[k] = slices.Clip(v)
	}
}

// writeHead relays the upstream headers (see writeHeaders) with status.
// An answer whose header map the router's client left unbuilt has its
// field lines relayed as they came, with no map in between, when the
// client's answer takes them (the lean server's, through the recorder).
func (x *exchange) writeHead(resp *http.Response, b *Backend, pin *pick.Pin, status int) {
	if fields, ok := answerFields(resp); ok {
		if fw, ok := x.w.(h1.FieldsWriter); ok {
			x.writeOwnHeaders(b, pin)
			fw.WriteHeaderFields(status, fields, relayedField)
			return
		}
	}
	x.writeHeaders(resp, b, pin)
	x.w.WriteHeader(status)
}

// relayedField reports whether an answer's field (canonical name) goes
// on to the client: not hop-by-hop, not a pin, not the request id or any
// x-continuum-* field (the router's own: the routing path, and who served
// the request, told only a client that asked and never by a backend), not
// a backend's authentication challenge (the client authenticates with the
// router, never with a backend).
func relayedField(k string) bool {
	return !dropped(k) && k != requestIDHeader && k != "Www-Authenticate" && !strings.HasPrefix(k, ownFieldPrefix) && !shim.IsPinHeader(k)
}

// ownFieldPrefix begins the canonical names of the router's own answer
// fields.
const ownFieldPrefix = "X-Continuum-"

// revealHeader is x-backend, canonical (a lookup by it copies nothing): a
// client sends it to learn the backend and workers that served it.
const revealHeader = "X-Backend"

// routingPathHeader is x-continuum-routing-path, canonical, and
// routingPathValue its values: one shared slice each, since every answer
// carries one and nothing changes a header's values once set.
var (
	routingPathHeader = http.CanonicalHeaderKey("x-continuum-routing-path")
	disaggregatedPath = []string{shim.PathDisaggregated}
	aggregatedPath    = []string{shim.PathAggregated}
	unifiedPath       = []string{shim.PathUnified}
	fallbackPath      = []string{shim.PathFallback}
)

// routingPathValue is the value slice of a routing path (a switch: no map
// read on every answer).
func routingPathValue(path string) []string {
	switch path {
	case shim.PathDisaggregated:
		return disaggregatedPath
	case shim.PathAggregated:
		return aggregatedPath
	case shim.PathUnified:
		return unifiedPath
	case shim.PathFallback:
		return fallbackPath
	}
	return []string{path}
}

// writeHeaders sets the upstream headers, without hop-by-hop or x-dynamo-*
// headers, and the routing path the request took; the backend and worker
// identities only when the client asked (x-backend).
func (x *exchange) writeHeaders(resp *http.Response, b *Backend, pin *pick.Pin) {
	h := x.w.Header()
	answer := answerHeader(resp)
	nominated := connectionNominated(answer["Connection"])
	for k, v := range answer {
		if relayedField(k) && !slices.Contains(nominated, k) {
			h[k] = v // the upstream response is not read again: no copy
		}
	}
	x.writeOwnHeaders(b, pin)
}

// writeOwnHeaders sets the router's fields of an answer: the routing path
// and, when the client asked, who served it.
func (x *exchange) writeOwnHeaders(b *Backend, pin *pick.Pin) {
	path := shim.PathUnified
	if x.routingPath != "" {
		path = x.routingPath
	}
	if pin != nil {
		path = shim.PathAggregated
		switch {
		case pin.Prefill != nil:
			path = shim.PathDisaggregated
		case pin.Bypass:
			path = shim.PathUnified
		}
	}
	setField(x.w, routingPathHeader, routingPathValue(path))
	if !x.reveal {
		return
	}
	h := x.w.Header()
	h.Set("x-continuum-backend", b.Name())
	if pin != nil {
		h.Set("x-continuum-worker", strconv.FormatUint(pin.Decode.Worker.ID.InstanceID, 10))
		if pin.Prefill != nil {
			h.Set("x-continuum-prefill-worker", strconv.FormatUint(pin.Prefill.Worker.ID.InstanceID, 10))
		}
	}
}

var streamBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// isEventStream reports whether a Content-Type is text/event-stream (its
// type and subtype are case-insensitive; parameters may follow).
func isEventStream(ct string) bool {
	const t = "text/event-stream"
	return len(ct) >= len(t) && strings.EqualFold(ct[:len(t)], t) && (len(ct) == len(t) || ct[len(t)] == ';' || ct[len(t)] == ' ')
}

// bodyBuffered reports whether some of an answer's body has been read from
// its connection already (the router's own client knows; any other body
// says no).
func bodyBuffered(body io.Reader) bool {
	b, ok := body.(interface{ Buffered() int })
	return ok && b.Buffered() > 0
}

// relayStream copies an SSE body to the client, flushing after every read
// so events are not held back. The read that ends the body is not flushed:
// the handler's return sends it with the end of the chunked response, in
// one write, so the client gets the last event and the end of the stream
// together rather than in two writes it waits for in turn.
// It notes in x.streamDone whether what it wrote last was the stream's
// final event.
func (x *exchange) relayStream(w http.ResponseWriter, body io.Reader) error {
	flush := flusher(w)
	bp := streamBufPool.Get().(*[]byte)
	defer streamBufPool.Put(bp)
	buf := *bp
	var tail doneTail
	// A Responses stream ends with its own final events, not [DONE]; a
	// pinned stream may carry the frontend's error event (relayed as it
	// is, and accounted as the decode's failure): both are followed line
	// by line, other streams by their last bytes only.
	var lines *streamLines
	if x.path == "/v1/responses" || x.pinnedStream {
		lines = new(streamLines)
	}
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if lines != nil {
				x.streamDone = lines.add(buf[:n])
				x.streamErrored = x.streamErrored || lines.errored
			} else {
				x.streamDone = tail.add(buf[:n])
			}
			if err == nil {
				if ferr := flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
					return ferr
				}
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

// doneTail keeps the last bytes of a stream written, enough to tell
// whether they end with its final event.
type doneTail struct {
	b [16]byte
	n int
}

// add takes the bytes p written after the others and reports whether the
// stream written so far ends with data: [DONE] and its blank line.
func (t *doneTail) add(p []byte) bool {
	if len(p) >= len(t.b) {
		t.n = copy(t.b[:], p[len(p)-len(t.b):])
	} else {
		keep := min(t.n, len(t.b)-len(p))
		copy(t.b[:], t.b[t.n-keep:t.n])
		t.n = keep + copy(t.b[keep:], p)
	}
	s := t.b[:t.n]
	return bytes.HasSuffix(s, []byte("data: [DONE]\n\n")) || bytes.HasSuffix(s, []byte("data:[DONE]\n\n")) ||
		bytes.HasSuffix(s, []byte("data: [DONE]\r\n\r\n"))
}

// streamLines follows a stream line by line, reading only each line's
// first bytes, to tell whether what was written so far ends with a final
// event (a Responses stream's response.completed, response.incomplete or
// response.failed, named by its event line or its data's type, or data:
// [DONE]) and its blank line; and whether an error event came (errored):
// one named error (Dynamo's frontend's in-stream error, its message in a
// comment), or data that is an object whose first member is "error".
type streamLines struct {
	line    [64]byte // the first bytes of the current line
	n       int      // the current line's length so far
	cr      bool     // the last byte was a CR (an LF after it ends no line)
	final   bool     // the current event is a final one
	done    bool
	errored bool
}

func (f *streamLines) add(p []byte) bool {
	for _, c := range p {
		switch {
		case c == '\n' && f.cr:
			f.cr = false
		case c == '\n' || c == '\r':
			f.cr = c == '\r'
			f.endLine()
		default:
			f.cr = false
			if f.n < len(f.line) {
				f.line[f.n] = c
			}
			f.n++
			f.done = false
		}
	}
	return f.done
}

func (f *streamLines) endLine() {
	if f.n == 0 { // the event's end
		if f.final {
			f.done = true
		}
		f.final = false
		return
	}
	l := f.line[:min(f.n, len(f.line))]
	if f.n <= len(f.line) && finalResponsesLine(l) || f.n > len(f.line) && finalResponsesData(l) {
		f.final = true
	}
	if !f.errored && (errorEventLine(l, f.n <= len(f.line)) || failedResponsesLine(l, f.n <= len(f.line))) {
		f.errored = true
	}
	f.n = 0
}

// errorEventLine reports whether a line (its first bytes; whole when it is
// all of it) opens an error event: event: error, or data holding an object
// whose first member is "error".
func errorEventLine(l []byte, whole bool) bool {
	if v, ok := bytes.CutPrefix(l, []byte("event:")); ok {
		return whole && string(bytes.TrimPrefix(v, []byte(" "))) == "error"
	}
	v, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return false
	}
	v, ok = bytes.CutPrefix(bytes.TrimLeft(v, " "), []byte("{"))
	return ok && bytes.HasPrefix(bytes.TrimLeft(v, " "), []byte(`"error"`))
}

// failedResponsesLine reports whether a line (its first bytes; whole when
// it is all of it) opens a Responses stream's response.failed event: the
// stream ends in good order, having failed.
func failedResponsesLine(l []byte, whole bool) bool {
	if v, ok := bytes.CutPrefix(l, []byte("event:")); ok {
		return whole && string(bytes.TrimPrefix(v, []byte(" "))) == "response.failed"
	}
	v, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return false
	}
	for _, part := range []string{"{", `"type"`, ":", `"response.failed"`} {
		if v, ok = bytes.CutPrefix(bytes.TrimLeft(v, " "), []byte(part)); !ok {
			return false
		}
	}
	return true
}

// finalResponsesLine reports whether a whole line names a Responses
// stream's final event or is its data.
func finalResponsesLine(l []byte) bool {
	if v, ok := bytes.CutPrefix(l, []byte("event:")); ok {
		switch string(bytes.TrimPrefix(v, []byte(" "))) {
		case "response.completed", "response.incomplete", "response.failed":
			return true
		}
		return false
	}
	if v, ok := bytes.CutPrefix(l, []byte("data:")); ok && string(bytes.TrimSpace(v)) == "[DONE]" {
		return true
	}
	return finalResponsesData(l)
}

// finalResponsesData reports whether a data line (its first bytes) holds
// an object whose first member is a final event's type.
func finalResponsesData(l []byte) bool {
	v, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return false
	}
	v = bytes.TrimLeft(v, " ")
	for _, part := range []string{"{", `"type"`, ":"} {
		if v, ok = bytes.CutPrefix(bytes.TrimLeft(v, " "), []byte(part)); !ok {
			return false
		}
	}
	v = bytes.TrimLeft(v, " ")
	for _, name := range []string{`"response.completed"`, `"response.incomplete"`, `"response.failed"`} {
		if bytes.HasPrefix(v, []byte(name)) {
			return true
		}
	}
	return false
}

// flusher returns w's flush, found once for a whole stream rather than
// per event.
func flusher(w http.ResponseWriter) func() error {
	if f, ok := w.(interface{ FlushError() error }); ok {
		return f.FlushError
	}
	return http.NewResponseController(w).Flush
}
