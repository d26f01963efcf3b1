package router

import (
	"errors"
	"net/http"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// busyRetryAfter is the Retry-After of a 503 all_workers_busy, in seconds:
// workers publish their load as it changes, so room shows within moments.
const busyRetryAfter = "1"

// busyThreshold is the picker's form of dynamo.load.busy_threshold (nil:
// off; an absent threshold judges nothing).
func busyThreshold(b *config.BusyThreshold) *pick.BusyThreshold {
	if b == nil {
		return nil
	}
	return pick.NewBusyThreshold(b.KVBlocks, b.PrefillTokens, b.Hysteresis)
}

// reserve pins the request. It returns nil when the request is not
// pinned: answered then says whether an answer was written (503
// all_workers_busy) or the client left while it waited, rather than the
// request going the plain way. A request that finds every candidate worker
// busy waits in the queue when dynamo.load.queue is set (and joins the
// line at once when requests for its model already wait there).
func (x *exchange) reserve(req *shim.Request[*Backend]) (d *shim.Dispatch[*Backend], answered bool) {
	q := x.s.cfg.Load().Dynamo.Load.Queue
	var line string
	if q != nil {
		line = x.queueLine(req.Model)
	}
	if q == nil || !x.s.queue.waiting(line) {
		d, err := x.s.dispatch.Reserve(x.s.opts.Registry.Snapshot(), *req, x.s.opts.Now())
		if errors.Is(err, shim.ErrNotPinned) && x.awaitDiscovery() {
			d, err = x.s.dispatch.Reserve(x.s.opts.Registry.Snapshot(), *req, x.s.opts.Now())
		}
		if err != nil && x.ctx.Err() != nil {
			// The client left while the request waited for discovery:
			// nothing is routed for it, not even the plain way.
			return nil, true
		}
		switch {
		case err == nil:
			return d, false
		case errors.Is(err, shim.ErrNoReplica):
			x.shimUnavailable(shim.NoReplicaPath(err))
			return nil, true
		case !errors.Is(err, pick.ErrAllBusy):
			return nil, false
		case q == nil:
			x.refuseBusy(telemetry.BusyNoQueue)
			return nil, true
		}
	}
	m := x.s.opts.Metrics
	unpinned, noReplica := false, ""
	start := time.Now()
	result := x.s.queue.wait(x.ctx, line, q.Size, q.MaxWait.D(), func() bool {
		nd, err := x.s.dispatch.Reserve(x.s.opts.Registry.Snapshot(), *req, x.s.opts.Now())
		switch {
		case err == nil:
			d = nd
		case errors.Is(err, pick.ErrAllBusy):
			return false
		case errors.Is(err, shim.ErrNoReplica):
			unpinned, noReplica = true, shim.NoReplicaPath(err)
		default:
			unpinned = true
		}
		return true
	})
	if result == telemetry.BusyQueueFull {
		x.refuseBusy(telemetry.BusyQueueFull)
		return nil, true
	}
	if unpinned {
		result = telemetry.QueueUnpinned
	}
	m.QueueWaits.WithLabelValues(result).Inc()
	m.QueueWaitSeconds.Observe(time.Since(start).Seconds())
	switch result {
	case telemetry.QueueDispatched:
		return d, false
	case telemetry.QueueUnpinned:
		if noReplica != "" {
			x.shimUnavailable(noReplica)
			return nil, true
		}
		return nil, false
	case telemetry.QueueTimeout:
		x.refuseBusy(telemetry.BusyQueueTimeout)
	}
	return nil, true // answered, or the client left
}

// queueLine names the busy queue's line of the request: its model, and
// what narrows the replicas it may go to (a key's allowed_backends, a
// Responses request that only a native backend takes). Requests in one
// line have the same candidates, so the head's finding no room holds for
// those behind it; a request with other candidates (a key that may use a
// namespace whose workers are free) never waits behind it.
func (x *exchange) queueLine(model string) string {
	line := model
	if x.policy != nil && x.policy.allowed != nil {
		line += "\x00key:" + string(x.policy.hash[:])
	}
	if x.only != nil {
		line += "\x00native"
	}
	return line
}

// refuseBusy answers 503 all_workers_busy with Retry-After, in the
// request's ingress's shape.
func (x *exchange) refuseBusy(reason string) {
	x.s.opts.Metrics.BusyRefusals.WithLabelValues(reason).Inc()
	x.w.Header().Set("Retry-After", busyRetryAfter)
	x.fail(http.StatusServiceUnavailable, CodeAllWorkersBusy, "",
		"every Dynamo worker that could serve model "+strconvQuote(x.q.Model)+" is busy; retry later")
}
