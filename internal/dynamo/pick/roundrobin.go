package pick

import (
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// RoundRobin ignores load: it rotates decode candidates across the
// candidate namespaces, then prefill candidates inside the chosen one, with
// the same mixed-namespace rules as LoadBased. It is the baseline the
// routing benchmark compares against.
type RoundRobin struct {
	cursors [2]atomic.Uint64
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
	decode := appendDecodeCandidates(nil, gs)
	if len(decode) == 0 {
		return Pin{}, ErrNoWorkers
	}
	d := decode[(p.cursors[phaseDecode].Add(1)-1)%uint64(len(decode))]
	g := gs[d.group]
	pin := Pin{Namespace: g.namespace, Decode: target(d), DecodeReason: ReasonRoundRobinStale}
	if d.w.Role == fleet.RoleAggregated || len(g.prefill) == 0 {
		pin.PrefillReason = ReasonNoPrefillPool
		return pin, nil
	}
	prefill := appendRanks(nil, d.group, g.prefill)
	pc := prefill[(p.cursors[phasePrefill].Add(1)-1)%uint64(len(prefill))]
	t := target(pc)
	pin.Prefill, pin.PrefillReason = &t, ReasonRoundRobinStale
	return pin, nil
}
