package pick

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// Loads is the load view a picker reads: the store.
type Loads interface {
	View(fn func(get func(load.Key) *load.Sample))
	MaxStaleness() time.Duration
}

// LoadBased is the default picker: Dynamo's load-only cost formulas.
//
//	prefill cost = active_prefill_tokens / max_num_batched_tokens
//	decode cost  = (active_decode_blocks + ceil(est_prompt_tokens / block_size)) / total_kv_blocks
//
// Backlogs come from fresh samples plus what was dispatched since
// (the Ledger); quiet workers have backlog 0; a worker that went silent with
// a backlog, or that may be stalled, has no cost while another has one; with
// no fresh sample anywhere, a per-phase round-robin cursor decides.
type LoadBased struct {
	Loads  Loads
	Ledger *Ledger
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	cursors [2]atomic.Uint64 // decode, prefill
}

var _ Picker = (*LoadBased)(nil)

// candidate is one (worker, rank) being costed.
type candidate struct {
	w        *fleet.Worker
	group    int
	rank     uint32
	cost     float64
	defined  bool
	excluded bool // silent with a backlog, or maybe stalled
	fresh    bool // a fresh sample carrying this phase's field
}

const (
	phaseDecode = iota
	phasePrefill
)

// group is the workers of one model in one namespace, by role.
type group struct {
	namespace                   string
	prefill, decode, aggregated []*fleet.Worker
}

// groups finds the request's model in each candidate namespace. Workers are
// sorted by namespace, model, role and id, so each group and each role in it
// is a contiguous run of the snapshot, found by binary search and shared
// without copying.
func groups(snap *fleet.Snapshot, req Request) []group {
	var out []group
	ws := snap.Workers
	for _, ns := range req.Namespaces {
		bound := func(role fleet.Role, after bool) int {
			i, _ := slices.BinarySearchFunc(ws, role, func(w *fleet.Worker, r fleet.Role) int {
				c := cmp.Or(cmp.Compare(w.ID.Namespace, ns), cmp.Compare(w.Model, req.Model), cmp.Compare(w.Role, r))
				if c == 0 && after {
					return -1 // find the end of the run
				}
				return c
			})
			return i
		}
		g := group{namespace: ns}
		g.aggregated = ws[bound(fleet.RoleAggregated, false):bound(fleet.RoleAggregated, true)]
		g.decode = ws[bound(fleet.RoleDecode, false):bound(fleet.RoleDecode, true)]
		g.prefill = ws[bound(fleet.RolePrefill, false):bound(fleet.RolePrefill, true)]
		if len(g.prefill)+len(g.decode)+len(g.aggregated) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// Reserver is a picker that can pick and record the dispatch in one step,
// so that concurrent requests see each other's in-flight load.
type Reserver interface {
	Reserve(snap *fleet.Snapshot, req Request, now time.Time) (Pin, Ticket, error)
}

var _ Reserver = (*LoadBased)(nil)

// Pick implements Picker.
func (p *LoadBased) Pick(snap *fleet.Snapshot, req Request) (Pin, error) {
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	if p.Ledger != nil {
		p.Ledger.mu.RLock()
		defer p.Ledger.mu.RUnlock()
	}
	return p.pick(snap, req, now)
}

// Reserve picks and records the pin in the ledger under one lock.
func (p *LoadBased) Reserve(snap *fleet.Snapshot, req Request, now time.Time) (Pin, Ticket, error) {
	if p.Ledger == nil {
		pin, err := p.pick(snap, req, now)
		return pin, Ticket{}, err
	}
	p.Ledger.mu.Lock()
	defer p.Ledger.mu.Unlock()
	pin, err := p.pick(snap, req, now)
	if err != nil {
		return pin, Ticket{}, err
	}
	return pin, p.Ledger.dispatchedLocked(pin, req.EstPromptTokens, now), nil
}

// pick chooses; the caller holds the ledger lock (read or write).
func (p *LoadBased) pick(snap *fleet.Snapshot, req Request, now time.Time) (Pin, error) {
	gs := groups(snap, req)
	// Decode candidates across namespaces.
	buf := candidatePool.Get().(*[]candidate)
	defer func() { *buf = (*buf)[:0]; candidatePool.Put(buf) }()
	decode := appendDecodeCandidates((*buf)[:0], gs)
	*buf = decode
	if len(decode) == 0 {
		return Pin{}, ErrNoWorkers
	}
	d, reason := p.choose(decode, phaseDecode, req.EstPromptTokens, now)
	g := gs[d.group]
	pin := Pin{Namespace: g.namespace, Decode: target(d), DecodeReason: reason}
	if d.w.Role == fleet.RoleAggregated || len(g.prefill) == 0 {
		// No prefill id goes with an aggregated worker, and a decode
		// worker without a prefill pool prefills itself.
		pin.PrefillReason = ReasonNoPrefillPool
		return pin, nil
	}
	pbuf := candidatePool.Get().(*[]candidate)
	defer func() { *pbuf = (*pbuf)[:0]; candidatePool.Put(pbuf) }()
	prefill := appendRanks((*pbuf)[:0], d.group, g.prefill)
	*pbuf = prefill
	pc, preason := p.choose(prefill, phasePrefill, req.EstPromptTokens, now)
	t := target(pc)
	pin.Prefill, pin.PrefillReason = &t, preason
	return pin, nil
}

func target(c candidate) Target {
	return Target{Worker: c.w, DPRank: c.rank, SendRank: c.w.DPDeclared}
}

var candidatePool = sync.Pool{New: func() any { s := make([]candidate, 0, 64); return &s }}

// appendDecodeCandidates appends every group's decode candidates. Where a
// model has prefill and decode workers, aggregated workers are not decode
// candidates (the mixed-namespace rule).
func appendDecodeCandidates(out []candidate, gs []group) []candidate {
	for gi, g := range gs {
		out = appendRanks(out, gi, g.decode)
		if len(g.prefill) == 0 || len(g.decode) == 0 {
			out = appendRanks(out, gi, g.aggregated)
		}
	}
	return out
}

func appendRanks(out []candidate, group int, ws []*fleet.Worker) []candidate {
	for _, w := range ws {
		size := max(w.DPSize, 1)
		for r := range size {
			out = append(out, candidate{w: w, group: group, rank: w.DPStartRank + r})
		}
	}
	return out
}

// choose costs the candidates of one phase and returns the pick and reason.
func (p *LoadBased) choose(cands []candidate, phase int, est int, now time.Time) (candidate, string) {
	maxAge := p.Loads.MaxStaleness()
	anyFresh := false
	p.Loads.View(func(get func(load.Key) *load.Sample) {
		ledger := p.Ledger
		if ledger != nil && len(ledger.entries) == 0 {
			ledger = nil
		}
		for i := range cands {
			c := &cands[i]
			k := load.Key{WorkerID: c.w.ID.InstanceID, DPRank: c.rank}
			smp := get(k)
			var since time.Time
			if smp != nil {
				since = smp.ReceivedAt
			}
			var inPrefill, inDecode int
			stalled := false
			if ledger != nil {
				inPrefill, inDecode, stalled = ledger.view(k, since, now)
			}
			var backlog *uint64
			if smp != nil {
				if phase == phaseDecode {
					backlog = smp.Load.ActiveDecodeBlocks
					if backlog == nil {
						backlog = smp.Load.KVUsedBlocks
					}
				} else {
					backlog = smp.Load.ActivePrefillTokens
				}
			}
			fresh := smp != nil && now.Sub(smp.ReceivedAt) <= maxAge
			var base float64
			switch {
			case fresh && backlog != nil:
				c.fresh = true
				anyFresh = true
				base = float64(*backlog)
			case smp == nil, backlog != nil && *backlog == 0:
				base = 0 // quiet: never published, or went idle
			default:
				c.excluded = true
				continue // silent with a backlog, or no field for this phase
			}
			if stalled {
				c.excluded = true
				continue
			}
			if phase == phaseDecode {
				c.cost, c.defined = decodeCost(c.w, base+float64(inDecode), est)
			} else {
				c.cost, c.defined = prefillCost(c.w, base+float64(inPrefill))
			}
		}
	})
	cursor := p.cursors[phase].Add(1) - 1
	if !anyFresh {
		return cands[cursor%uint64(len(cands))], ReasonRoundRobinStale
	}
	best := -1
	ties := 0
	for i, c := range cands {
		switch {
		case !c.defined:
		case best < 0 || c.cost < cands[best].cost:
			best, ties = i, 1
		case c.cost == cands[best].cost:
			ties++
		}
	}
	if best < 0 {
		// Fresh samples exist but no candidate has every field a cost needs
		// (capacity missing from the cards): rotate over those not excluded.
		n := 0
		for _, c := range cands {
			if !c.excluded {
				n++
			}
		}
		if n == 0 {
			return cands[cursor%uint64(len(cands))], ReasonRoundRobinStale
		}
		k := int(cursor % uint64(n))
		for _, c := range cands {
			if !c.excluded {
				if k == 0 {
					return c, ReasonRoundRobinStale
				}
				k--
			}
		}
	}
	if ties > 1 {
		n := int(cursor % uint64(ties))
		for i, c := range cands {
			if c.defined && c.cost == cands[best].cost {
				if n == 0 {
					return cands[i], ReasonLoad
				}
				n--
			}
		}
	}
	return cands[best], ReasonLoad
}

func decodeCost(w *fleet.Worker, backlogBlocks float64, est int) (float64, bool) {
	if w.BlockSize == nil || *w.BlockSize == 0 || w.Capacity.TotalKVBlocks == nil || *w.Capacity.TotalKVBlocks == 0 {
		return 0, false
	}
	bs := int(*w.BlockSize)
	return (backlogBlocks + float64((est+bs-1)/bs)) / float64(*w.Capacity.TotalKVBlocks), true
}

func prefillCost(w *fleet.Worker, backlogTokens float64) (float64, bool) {
	if w.Capacity.MaxNumBatchedTokens == nil || *w.Capacity.MaxNumBatchedTokens == 0 {
		return 0, false
	}
	return backlogTokens / float64(*w.Capacity.MaxNumBatchedTokens), true
}
