package pick

import (
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// Phase is the choice a Scorer is asked to make.
type Phase int

const (
	// PhaseDecode is the decode choice (an aggregated worker prefills its
	// own requests).
	PhaseDecode Phase = iota
	// PhasePrefill is the prefill worker of a disaggregated pair.
	PhasePrefill
)

// Candidate is one (worker, rank) of a phase as its load picker sees it at
// the moment of the choice.
type Candidate struct {
	Worker *fleet.Worker
	DPRank uint32
	// Fresh: a fresh sample carries this phase's backlog. Quiet: never
	// heard from, or last heard from idle. Excluded: silent with a backlog,
	// possibly stalled, or lacking this phase's field while others have it.
	Fresh, Quiet, Excluded bool
	// Idle: quiet by its last sample, which went stale with this phase's
	// backlog at 0; a quiet candidate never heard from is not idle.
	Idle bool
	// PrefillTokens and DecodeBlocks are the fresh sample's backlogs (0
	// without one), the phase's own plus what was dispatched since the
	// sample (for a quiet candidate, what was dispatched since alone); decode blocks are active_decode_blocks, or kv_used_blocks in
	// the decode phase when a sample lacks them (vLLM workers). HasPrefill
	// and HasDecode say whether the sample carried them.
	PrefillTokens, DecodeBlocks float64
	HasPrefill, HasDecode       bool
	// Paired: a decode worker whose namespace has a prefill pool for the
	// model (the decode side of a pair); any other decode candidate
	// prefills its own requests.
	Paired bool
}

// Scorer makes a phase's choice in place of the load rule: KV-aware
// selection gives one per request. Score runs under the picker's lock and
// must not block. It returns the chosen index into cands and the reason
// for the selection metric, or false to keep the load rule's choice.
// fresh says whether any of the phase's candidates has a fresh sample,
// those cands leaves out included (busy ones, ones the request excludes):
// the load rule's test for whether backlogs compete, which the scorer
// follows rather than judging from cands alone. cursor returns the phase's
// next deterministic tie-break position.
type Scorer interface {
	Score(phase Phase, cands []Candidate, fresh bool, cursor func() uint64) (int, string, bool)
}

// Bypasser is a Scorer that may also make the decode choice when the
// model has a prefill pool, and then let the chosen decode worker prefill
// the request itself (conditional disaggregation).
type Bypasser interface {
	Scorer
	// ScoresDecode reports whether the decode choice is the scorer's in
	// every fleet, not only in an aggregated one.
	ScoresDecode() bool
	// Bypass decides, for the chosen decode candidate of a pair, whether
	// it prefills the request itself (no prefill worker is pinned).
	Bypass(decode Candidate) bool
}

// ReserveScored is Reserve with a scorer making the prefill choice of a
// disaggregated pin, and the decode choice when no candidate namespace
// pairs prefill and decode workers (an aggregated fleet, whose workers
// prefill their own requests, as a decode worker without a prefill pool
// does). Where prefill workers serve the model, decode is chosen by the
// load rule: over two or more candidate namespaces that pair prefill and
// decode workers, the scorer chooses among the prefill workers of all of
// them first and the decode worker comes from the winner's namespace
// (beside a namespace whose workers prefill themselves, once the load
// rule's decode choice over every namespace lands on a pair; an
// aggregated choice is pinned alone); with one such namespace, decode is
// chosen first and the scorer chooses among its prefill workers. A nil
// scorer is Reserve.
func (p *LoadBased) ReserveScored(snap *fleet.Snapshot, req Request, now time.Time, s Scorer) (Pin, Ticket, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scorer = s
	pin, err := p.pick(snap, req, now)
	p.scorer = nil
	if err != nil {
		return pin, Ticket{}, err
	}
	book := max(req.EstPromptTokens, req.BookTokens)
	prefill := book
	if ps, ok := s.(PrefillSizer); ok {
		if n, ok := ps.PrefillTokens(pin); ok {
			prefill = n
		}
	}
	return pin, p.ledger.dispatched(pin, book, prefill, now), nil
}

// PrefillSizer is a Scorer that knows how much of the prompt the rank that
// prefills the pinned request already holds: the ledger then adds to that
// rank's backlog only the tokens it must compute (what the rank itself
// will publish once the request reaches it), not the whole prompt.
type PrefillSizer interface {
	// PrefillTokens returns the tokens pin's prefilling rank computes,
	// or false when the scorer did not choose that rank.
	PrefillTokens(pin Pin) (int, bool)
}

// candidates describes an index's candidates for a scorer; the caller
// holds p.mu, and x is synced. The phase's
// backlog comes from the index's state (the fresh sample plus what was
// dispatched since); the other phase's from the sample, plus, for a decode
// candidate, the prompt tokens it was sent since to prefill itself (a
// prefill candidate is sent no decode work).
func (p *LoadBased) candidates(x *index) []Candidate {
	out := p.candBuf[:0]
	for i, c := range x.cands {
		st := x.st[i]
		cd := Candidate{Worker: c.w, DPRank: c.key.DPRank, Fresh: st.fresh, Excluded: st.excluded, Quiet: !st.fresh && !st.excluded,
			Idle: st.idle && !st.excluded}
		if x.phase == phaseDecode && c.w.Role == fleet.RoleDecode {
			cd.Paired = x.groups[c.group].paired()
		}
		switch {
		case cd.Quiet:
			// Idle at its last sample (or never heard from): what was
			// dispatched to it since is its whole backlog. A worker that
			// died idle publishes nothing more, so what it was sent keeps
			// counting (for the in-flight window) and it stops looking
			// like the emptiest worker after a few requests.
			if x.phase == phasePrefill {
				cd.PrefillTokens = st.backlog
			} else {
				cd.DecodeBlocks = st.backlog
			}
		case st.fresh:
			if x.phase == phasePrefill {
				cd.PrefillTokens, cd.HasPrefill = st.backlog, true
			} else {
				cd.DecodeBlocks, cd.HasDecode = st.backlog, true
			}
		}
		if st.hasOther {
			if x.phase == phasePrefill {
				cd.DecodeBlocks, cd.HasDecode = st.other, true
			} else {
				cd.PrefillTokens, cd.HasPrefill = st.other, true
			}
		}
		out = append(out, cd)
	}
	p.candBuf = out
	return out
}

// PickScored is ReserveScored without recording the dispatch: what it
// would pick at now (kv-inspect match).
func (p *LoadBased) PickScored(snap *fleet.Snapshot, req Request, now time.Time, s Scorer) (Pin, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scorer = s
	defer func() { p.scorer = nil }()
	return p.pick(snap, req, now)
}

// scoresDecode reports whether the scorer makes the decode choice.
func (p *LoadBased) scoresDecode(x *index) bool {
	if p.scorer == nil {
		return false
	}
	if b, ok := p.scorer.(Bypasser); ok && b.ScoresDecode() {
		return true
	}
	return x.pairedGroups == 0
}

// bypass asks a Bypasser whether decode candidate i of x prefills the
// request itself; the caller holds p.mu, and x is synced.
func (p *LoadBased) bypass(x *index, i int) bool {
	b, ok := p.scorer.(Bypasser)
	if !ok || !b.ScoresDecode() {
		return false
	}
	cands := p.candidates(x)
	return b.Bypass(cands[i])
}

// scored asks the scorer for phase's choice among x's candidates; the
// caller holds p.mu, and x is synced.
func (p *LoadBased) scored(phase Phase, x *index) (int, string, bool) {
	if p.scorer == nil {
		return 0, "", false
	}
	cands := p.candidates(x)
	// Candidates the request excludes, and busy ones while busyness can
	// be judged (index.judgesBusy), do not compete: the scorer sees the
	// others only.
	var pos []int
	judge := x.judgesBusy()
	if x.excludedN > 0 || (judge && x.busyN > 0) {
		kept, at := p.scoredBuf[:0], p.posBuf[:0]
		for i := range cands {
			if st := &x.st[i]; st.banned || (judge && st.busy) {
				continue
			}
			kept, at = append(kept, cands[i]), append(at, i)
		}
		p.scoredBuf, p.posBuf = kept, at
		if len(kept) == 0 {
			return 0, "", false // the load rule says why
		}
		cands, pos = kept, at
	}
	i, reason, ok := p.scorer.Score(phase, cands, x.fresh > 0, x.take)
	if !ok || i < 0 || i >= len(cands) {
		return 0, "", false
	}
	if pos != nil {
		i = pos[i]
	}
	return i, reason, true
}
