package benchcmd

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/fleetsim"
)

// oracle is the benchmark's bound on KV-aware routing: the KV-aware cost
// formula (kv.Terms.Costs, with the daemon's terms) fed exact facts
// instead of the router's views. It asks the simulated fleet itself, for
// each candidate rank, how many of the request's leading blocks its cache
// holds at this instant (the blocks of prefills still queued included,
// which kv-events announce only once computed) and the prefill backlog
// the rank would publish at this instant (no sample in transit, no stale
// one), and adds the requests it has pinned to the rank that have not
// reached it yet. That is everything a Dynamo fleet could tell a router,
// without delay. It makes the choice the KV-aware picker makes, the
// prefill worker of a disaggregated pin or the worker of an aggregated
// one; the decode worker of a disaggregated pin is chosen round-robin (the
// simulated decode time does not depend on it).
//
// With ttft set it knows more than any worker publishes, how far each
// queued prefill has got, and minimises the request's exact time to first
// token in the simulation: the prefill work left on the rank (and in
// transit to it) plus the tokens of the request its cache lacks.
type oracle struct {
	ttft  bool
	sim   atomic.Pointer[fleetsim.Sim]
	terms atomic.Pointer[kv.Terms]
	rr    pick.RoundRobin

	mu      sync.Mutex
	transit map[rankKey]*inTransit
	cursor  uint64
}

type rankKey struct {
	worker uint64
	rank   int
}

// inTransit is what the oracle pinned to a rank: how many requests, and
// the prefill tokens of the latest ones, with when they were pinned.
type inTransit struct {
	pinned uint64
	recent []pinned
}

type pinned struct {
	tokens float64
	at     time.Time
}

// Bounds of the in-transit accounting: a request that has not reached its
// worker within transitTTL never will (it failed on the way).
const (
	transitTTL    = 2 * time.Second
	transitRecent = 256
)

func newOracle(ttft bool) *oracle { return &oracle{ttft: ttft, transit: map[rankKey]*inTransit{}} }

// attach points the oracle at the fleet it reads and the daemon's terms.
func (o *oracle) attach(sim *fleetsim.Sim, terms kv.Terms) {
	o.terms.Store(&terms)
	o.sim.Store(sim)
}

// Reserve implements pick.Picker.
func (o *oracle) Reserve(snap *fleet.Snapshot, req pick.Request, now time.Time) (pick.Pin, pick.Ticket, error) {
	pin, t, err := o.rr.Reserve(snap, req, now)
	sim, terms := o.sim.Load(), o.terms.Load()
	if err != nil || sim == nil || terms == nil {
		return pin, t, err
	}
	role := fleet.RolePrefill
	if pin.Prefill == nil {
		if pin.Decode.Worker.Role != fleet.RoleAggregated {
			return pin, t, nil // a decode worker without prefill workers prefills itself
		}
		role = fleet.RoleAggregated
	}
	byID := map[uint64]*fleet.Worker{}
	var ids []uint64
	for w := range snap.Workers.All() {
		if w.Model == req.Model && w.ID.Namespace == pin.Namespace && w.Role == role {
			byID[w.ID.InstanceID] = w
			ids = append(ids, w.ID.InstanceID)
		}
	}
	isl, bs, views := sim.Probe(req.Path, req.Body, ids)
	if len(views) == 0 {
		return pin, t, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	best, bestCost := -1, math.Inf(1)
	start := int(o.cursor % uint64(len(views))) // equal costs take turns
	o.cursor++
	for k := range views {
		i := (start + k) % len(views)
		v := views[i]
		transit := o.inTransit(rankKey{v.Worker, v.Rank}, v.Arrivals, now)
		var c float64
		if o.ttft {
			c = v.QueuedTokens + transit + float64(isl-min(v.CachedBlocks*bs, max(isl-1, 0)))
		} else {
			queued := float64(v.PrefillTokens) + transit
			decode := 0.0
			if role == fleet.RoleAggregated {
				decode = float64(v.DecodeBlocks)
			}
			c = terms.Costs(isl, bs, v.CachedBlocks, queued, decode).Total
		}
		if c < bestCost {
			best, bestCost = i, c
		}
	}
	v := views[best]
	cached := min(v.CachedBlocks*bs, max(isl-1, 0))
	tr := o.transitOf(rankKey{v.Worker, v.Rank})
	tr.pinned++
	tr.recent = append(tr.recent, pinned{tokens: float64(isl - cached), at: now})
	if len(tr.recent) > transitRecent {
		tr.recent = tr.recent[len(tr.recent)-transitRecent:]
	}
	w := byID[v.Worker]
	target := pick.Target{Worker: w, DPRank: w.DPStartRank + uint32(v.Rank), SendRank: w.DPDeclared}
	if role == fleet.RolePrefill {
		pin.Prefill, pin.PrefillReason = &target, pick.ReasonKVAware
	} else {
		pin.Decode, pin.DecodeReason = target, pick.ReasonKVAware
	}
	return pin, t, nil
}

func (o *oracle) transitOf(k rankKey) *inTransit {
	tr := o.transit[k]
	if tr == nil {
		tr = &inTransit{}
		o.transit[k] = tr
	}
	return tr
}

// inTransit is the prefill tokens of the requests pinned to a rank that
// have not reached it: the latest pinned-minus-arrived of them, if pinned
// within transitTTL; o.mu is held.
func (o *oracle) inTransit(k rankKey, arrivals uint64, now time.Time) float64 {
	tr := o.transit[k]
	if tr == nil || tr.pinned <= arrivals {
		return 0
	}
	n := min(int(tr.pinned-arrivals), len(tr.recent))
	sum := 0.0
	for _, p := range tr.recent[len(tr.recent)-n:] {
		if now.Sub(p.at) <= transitTTL {
			sum += p.tokens
		}
	}
	return sum
}

// Release implements pick.Picker.
func (o *oracle) Release(t pick.Ticket) { o.rr.Release(t) }
