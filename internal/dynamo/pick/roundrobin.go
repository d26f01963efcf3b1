package pick

import (
	"slices"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// RoundRobin ignores load: it rotates decode candidates across the
// candidate namespaces, then prefill candidates inside the chosen one, with
// the same mixed-namespace rules as LoadBased, skipping the workers the
// request excludes (it has no notion of busy). It is the baseline the
// routing benchmark compares against.
type RoundRobin struct {
	rr rotations
}

var _ Picker = (*RoundRobin)(nil)

// Reserve implements Picker; RoundRobin records nothing.
func (p *RoundRobin) Reserve(snap *fleet.Snapshot, req Request, _ time.Time) (Pin, Ticket, error) {
	pin, err := p.pick(snap, req)
	return pin, Ticket{}, err
}

// Release implements Picker.
func (p *RoundRobin) Release(Ticket) {}

func (p *RoundRobin) pick(snap *fleet.Snapshot, req Request) (Pin, error) {
	gs := groups(snap, req)
	// A set's cursor is that of all its candidates, those the request
	// excludes too (as the load-based picker's), taken before they go.
	decode := appendDecodeCandidates(nil, gs)
	cur := p.rr.cursor(phaseDecode, decode)
	decode = without(decode, &req)
	if len(decode) == 0 {
		return Pin{}, ErrNoWorkers
	}
	d := decode[p.rr.next(cur)%uint64(len(decode))]
	g := gs[d.group]
	pin := Pin{Namespace: g.namespace, Decode: target(d), DecodeReason: ReasonRoundRobinStale}
	if d.w.Role == fleet.RoleAggregated || len(g.prefill) == 0 {
		pin.PrefillReason = ReasonNoPrefillPool
		return pin, nil
	}
	prefill := appendRanks(nil, d.group, g.prefill)
	cur = p.rr.cursor(phasePrefill, prefill)
	prefill = without(prefill, &req)
	if len(prefill) == 0 {
		return Pin{}, ErrNoWorkers
	}
	pc := prefill[p.rr.next(cur)%uint64(len(prefill))]
	t := target(pc)
	pin.Prefill, pin.PrefillReason = &t, ReasonRoundRobinStale
	return pin, nil
}

// without drops the candidates of workers the request excludes.
func without(cands []candidate, req *Request) []candidate {
	if len(req.Exclude) == 0 {
		return cands
	}
	return slices.DeleteFunc(cands, func(c candidate) bool { return req.excluded(c.w) })
}
