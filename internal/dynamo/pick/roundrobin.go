package pick

import (
	"sync/atomic"

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

// Pick implements Picker.
func (p *RoundRobin) Pick(snap *fleet.Snapshot, req Request) (Pin, error) {
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
