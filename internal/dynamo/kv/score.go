package kv

import (
	"math"
	"math/rand/v2"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// Terms are the kv.* settings the cost formula and the choice read. They
// are read at each request, so a change applies at the next one.
type Terms struct {
	// OverlapScoreCredit is the prefill blocks credited per block a rank
	// already holds.
	OverlapScoreCredit float64
	// PrefillLoadScale weighs the prefill term against the decode term.
	PrefillLoadScale float64
	// Temperature 0 takes the cheapest candidate; above 0 a candidate is
	// drawn with softmax weights over the costs.
	Temperature float64
}

// Cost is the formula's terms for one rank, in blocks of its block size:
//
//	overlap_blocks        = the request's leading blocks the rank holds
//	cached_tokens         = min(overlap_blocks * bs, isl)
//	raw_prefill_tokens    = active_prefill_tokens + (isl - cached_tokens) + cached_tokens
//	raw_prefill_blocks    = raw_prefill_tokens / bs
//	overlap_credit_blocks = overlap_score_credit * overlap_blocks
//	adjusted_prefill      = max(0, raw_prefill_blocks - overlap_credit_blocks)
//	decode_cost_blocks    = active_decode_blocks + max(0, ceil(isl / bs) - overlap_blocks)
//	cost                  = prefill_load_scale * adjusted_prefill + decode_cost_blocks
//
// raw_prefill_tokens keeps the cached tokens on purpose: the credit, not a
// smaller prompt, is what rewards the overlap, so overlap_score_credit
// decides how much a cache hit is worth against queued work.
type Cost struct {
	Overlap          int
	CachedTokens     int
	RawPrefillBlocks float64
	CreditBlocks     float64
	AdjustedPrefill  float64
	DecodeCostBlocks float64
	Total            float64
}

// Costs computes the formula for a request of isl prompt tokens on a rank
// of block size bs holding overlap of its leading blocks, with the rank's
// prefill backlog (tokens) and decode backlog (blocks).
func (t Terms) Costs(isl, bs, overlap int, prefillTokens, decodeBlocks float64) Cost {
	c := Cost{Overlap: overlap}
	c.CachedTokens = min(overlap*bs, isl)
	raw := prefillTokens + float64(isl-c.CachedTokens) + float64(c.CachedTokens)
	c.RawPrefillBlocks = raw / float64(bs)
	c.CreditBlocks = t.OverlapScoreCredit * float64(overlap)
	c.AdjustedPrefill = math.Max(0, c.RawPrefillBlocks-c.CreditBlocks)
	c.DecodeCostBlocks = decodeBlocks + math.Max(0, float64((isl+bs-1)/bs-overlap))
	c.Total = t.PrefillLoadScale*c.AdjustedPrefill + c.DecodeCostBlocks
	return c
}

// Overlaps answers, for one request, how many of its leading blocks a rank
// holds, for the rank's block size, by the index (Overlap) and by the
// requests in flight on it (InFlight).
type Overlaps interface {
	Overlap(k load.Key, hashing int) int
	InFlight(k load.Key, hashing int) int
}

// eagleHashing marks a hashing (see hashingOf) as an Eagle worker's: its
// blocks' tokens_hash covers a window one token longer than the block
// (wire.EagleBlockHashes). It lies above every supported block size.
const eagleHashing = 1 << 24

// hashingOf is how worker w's blocks are hashed: its block size, with
// eagleHashing set for an Eagle worker; 0 without a block size. A prompt's
// hashes, its overlaps and the dispatches in flight are kept per hashing,
// since one prompt hashes differently for the two kinds of worker.
func hashingOf(w *fleet.Worker) int {
	if w.BlockSize == nil {
		return 0
	}
	h := int(*w.BlockSize)
	if w.Eagle {
		h |= eagleHashing
	}
	return h
}

// hashable reports whether prompts are hashed at block size bs. A worker of
// a smaller block size (SGLang's page size 1, say) still competes, costed
// at its own size as holding none of the prompt.
func hashable(bs int) bool { return bs >= MinBlockSize && bs <= MaxBlockSize }

// indexed is how many of the prompt's leading blocks the index says cd's
// rank holds: none where the prompt is not hashed at its block size.
func (c *choice) indexed(cd *pick.Candidate) int {
	if b := cd.Worker.BlockSize; b == nil || !hashable(int(*b)) {
		return 0
	}
	return c.overlaps.Overlap(load.RankOf(cd.Worker, cd.DPRank), hashingOf(cd.Worker))
}

// hashingBlockSize is the block size of a hashing.
func hashingBlockSize(h int) int { return h &^ eagleHashing }

// choice is one request's KV-aware choice of a phase: it implements
// pick.Scorer. Its fields after Score say what was chosen, for metrics and
// for kv-inspect.
type choice struct {
	terms    Terms
	isl      int
	overlaps Overlaps
	// conditional scores the decode choice of a prefill/decode fleet with
	// max(0, decode_cost_blocks - overlap_credit_blocks) and lets the
	// chosen decode worker prefill the request itself when it is not
	// busier than busy (a fraction of its total_kv_blocks; nil: always).
	conditional bool
	busy        *float64
	// Bypassed says the last Bypass let the decode worker prefill.
	Bypassed bool
	// explain, when set, keeps every candidate's cost of every phase.
	explain   bool
	explained []Explained
	rng       func() float64 // uniform in [0, 1); nil: math/rand/v2

	// costs and details hold the candidates' costs of the last Score
	// (NaN: not competing).
	costs   []float64
	details []Cost
	// Chosen is the chosen candidate's cost; Scored is false when the
	// load rule decided.
	Chosen Cost
	Scored bool
	// ChosenIndexed is the blocks of the prompt the index says the chosen
	// rank holds: the selection counts as an overlap only for those, not
	// for the prefixes of requests in flight there (Chosen.Overlap may
	// count them).
	ChosenIndexed int
	// cached is, per phase the formula chose, the chosen rank and the
	// prompt tokens it holds.
	cached [2]struct {
		set    bool
		worker fleet.WorkerID
		rank   uint32
		tokens int
	}
}

var _ pick.PrefillSizer = (*choice)(nil)

// PrefillTokens implements pick.PrefillSizer: the prompt tokens the
// prefilling rank of pin (its prefill worker, else its decode worker) lacks,
// when the formula chose that rank. The rank is matched rather than the
// phase: a choice among the prefill side of several graphs may give the
// request to a worker that prefills what it decodes.
func (c *choice) PrefillTokens(pin pick.Pin) (int, bool) {
	target := pin.Decode
	if pin.Prefill != nil {
		target = *pin.Prefill
	}
	for _, e := range c.cached {
		if e.set && e.worker == target.Worker.ID && e.rank == target.DPRank {
			return max(0, c.isl-e.tokens), true
		}
	}
	return 0, false
}

var _ pick.Bypasser = (*choice)(nil)

// ScoresDecode implements pick.Bypasser.
func (c *choice) ScoresDecode() bool { return c.conditional }

// The conditional bypass's bounds on the prompt tokens the decode worker
// lacks (the prompt less the prefix it holds): fewer than this many, and
// under this share of the prompt. A prompt mostly cached on the decode
// worker and short in what remains is cheaper to finish there than to
// send through a prefill worker and move its KV cache; anything else goes
// to the prefill pool. These are upstream's defaults for the same rule.
const (
	bypassMaxNewTokens = 2048
	bypassMaxNewShare  = 0.7
)

// Bypass implements pick.Bypasser: the decode worker prefills the request
// itself only when what it lacks of the prompt is under bypassMaxNewTokens
// and under bypassMaxNewShare of it (a worker without a block size holds
// nothing the router can see, so never). With a busy threshold, also only
// when its expected active blocks (its backlog and the blocks this request
// adds) are at most that share of its total_kv_blocks; without a sample or
// a capacity it does not. A worker whose last sample went stale at 0
// blocks has one: a worker that went idle publishes 0 once and then
// nothing until it is given work, and its backlog is then what it was sent
// since.
func (c *choice) Bypass(d pick.Candidate) bool {
	if !c.conditional {
		return false
	}
	c.Bypassed = false
	if d.Worker.BlockSize == nil || *d.Worker.BlockSize == 0 {
		return false
	}
	bs := int(*d.Worker.BlockSize)
	held := c.indexed(&d)
	lacks := max(0, c.isl-held*bs)
	if lacks >= bypassMaxNewTokens || float64(lacks) >= bypassMaxNewShare*float64(max(c.isl, 1)) {
		return false
	}
	if c.busy != nil {
		capacity := d.Worker.Capacity.TotalKVBlocks
		if !d.HasDecode && !d.Idle || capacity == nil || *capacity == 0 {
			return false
		}
		adds := math.Max(0, float64((c.isl+bs-1)/bs-held))
		if d.DecodeBlocks+adds > *c.busy*float64(*capacity) {
			return false
		}
	}
	c.Bypassed = true
	return true
}

// Score implements pick.Scorer. The freshness rules: when any candidate
// of the phase has a fresh sample carrying its backlog (anyFresh, counted
// before busy and excluded candidates were set aside, as the load rule
// counts it), the fresh candidates and the quiet ones (backlog 0 at their
// last sample, plus what was dispatched to them since) compete with the
// whole formula and the rest are left out, also when the fresh ones were
// all set aside; when none has, every candidate competes with the formula
// without backlogs (the overlap and the request's size), and the
// round-robin cursor decides only between equal costs.
func (c *choice) Score(phase pick.Phase, cands []pick.Candidate, anyFresh bool, cursor func() uint64) (int, string, bool) {
	c.costs = c.costs[:0]
	c.details = append(c.details[:0], make([]Cost, len(cands))...)
	details := c.details
	minCost, maxCost := math.Inf(1), math.Inf(-1)
	for i := range cands {
		cd := &cands[i]
		bs := 0
		if b := cd.Worker.BlockSize; b != nil {
			bs = int(*b)
		}
		// With fresh backlogs about, an excluded candidate never competes:
		// one silent with a backlog, and one that took a request of two
		// blocks or more and sent no sample for 5 s (possibly stalled),
		// whose last sample may still be fresh under a max_staleness
		// above that. Alone, it is the load rule's to pick or not. A
		// candidate without a block size cannot be costed at all, nor one
		// above MaxBlockSize: no engine uses such blocks, and costed in
		// them a card claiming one would draw every request.
		if bs <= 0 || bs > MaxBlockSize || (anyFresh && (cd.Excluded || !cd.Fresh && !cd.Quiet)) {
			c.costs = append(c.costs, math.NaN())
			continue
		}
		var prefill, decode float64
		switch {
		case anyFresh && cd.Fresh:
			if cd.HasPrefill {
				prefill = cd.PrefillTokens
			}
			if cd.HasDecode {
				decode = cd.DecodeBlocks
			}
		case anyFresh && cd.Quiet:
			// Idle at its last sample: its backlog is what the router
			// dispatched to it since.
			prefill, decode = cd.PrefillTokens, cd.DecodeBlocks
		}
		ov := c.indexed(cd)
		inFlight := 0
		if anyFresh && hashable(bs) {
			// Where backlogs compete, the prefixes of the requests in
			// flight on a rank count as held: the rank computes them
			// before it gets to this request, and its backlog already
			// charges for that work.
			inFlight = c.overlaps.InFlight(load.RankOf(cd.Worker, cd.DPRank), hashingOf(cd.Worker))
		}
		details[i] = c.terms.Costs(c.isl, bs, max(ov, inFlight), prefill, decode)
		cost := details[i].Total
		if phase == pick.PhaseDecode && cd.Paired {
			// A decode worker of a pair (conditional disaggregation):
			// what it decodes, less what it already holds. Any other
			// decode candidate prefills its requests itself.
			cost = math.Max(0, details[i].DecodeCostBlocks-details[i].CreditBlocks)
		}
		c.costs = append(c.costs, cost)
		minCost, maxCost = math.Min(minCost, cost), math.Max(maxCost, cost)
	}
	if c.explain {
		for i := range cands {
			cd := &cands[i]
			e := Explained{Phase: phase, Worker: cd.Worker, DPRank: cd.DPRank, Competing: !math.IsNaN(c.costs[i]), Cost: details[i], Total: c.costs[i]}
			e.Indexed = c.indexed(cd)
			switch {
			case cd.Fresh:
				e.State = "fresh"
			case cd.Quiet:
				e.State = "quiet"
			case cd.Excluded:
				e.State = "excluded"
			}
			c.explain1(e)
		}
	}
	if math.IsInf(minCost, 1) {
		return 0, "", false // no candidate can be costed: the load rule decides
	}
	var chosen int
	reason := pick.ReasonKVAware
	ties, competing := 0, 0
	for _, v := range c.costs {
		if v == minCost {
			ties++
		}
		if !math.IsNaN(v) {
			competing++
		}
	}
	if c.terms.Temperature > 0 {
		// Softmax sampling, as the upstream router samples: costs all
		// equal make it a uniform draw.
		chosen = c.sample(minCost, maxCost)
		if !anyFresh && ties == competing && competing > 1 {
			reason = pick.ReasonRoundRobinStale
		}
	} else {
		k := int(cursor() % uint64(ties))
		for i, v := range c.costs {
			if v == minCost {
				if k == 0 {
					chosen = i
					break
				}
				k--
			}
		}
		if !anyFresh && ties > 1 {
			// Without backlogs, the cursor chose between candidates the
			// formula could not tell apart. A lone candidate, or one the
			// formula set apart, is the formula's choice.
			reason = pick.ReasonRoundRobinStale
		}
	}
	c.Chosen, c.Scored = details[chosen], true
	c.ChosenIndexed = c.indexed(&cands[chosen])
	if int(phase) < len(c.cached) {
		e := &c.cached[phase]
		e.set, e.worker, e.rank, e.tokens = true, cands[chosen].Worker.ID, cands[chosen].DPRank, details[chosen].CachedTokens
	}
	return chosen, reason, true
}

// explain1 records e, in place of what an earlier scoring of the same
// phase said of the same rank: a choice over several namespaces may score
// a phase again after setting one aside, and each candidate is listed once,
// with its latest cost.
func (c *choice) explain1(e Explained) {
	for i := range c.explained {
		if o := &c.explained[i]; o.Phase == e.Phase && o.Worker == e.Worker && o.DPRank == e.DPRank {
			*o = e
			return
		}
	}
	c.explained = append(c.explained, e)
}

// Explained is one candidate's cost in one phase of a choice.
type Explained struct {
	Phase  pick.Phase
	Worker *fleet.Worker
	DPRank uint32
	// State is the candidate's load state: fresh, quiet or excluded.
	State string
	// Competing: the freshness rules let it compete; Total is the cost
	// the choice compared (the decode term alone for the decode worker of
	// a pair under conditional disaggregation), NaN when not competing.
	Competing bool
	Cost      Cost
	Total     float64
	// Indexed is the blocks the index says the rank holds; Cost.Overlap
	// is more when requests in flight on the rank share more of the
	// prompt.
	Indexed int
}

// sample draws a candidate with softmax weights over the negated costs
// scaled by their range and the temperature: exp(-(cost-min)/((max-min)*T)),
// each candidate as likely when the costs are all equal.
func (c *choice) sample(minCost, maxCost float64) int {
	span := (maxCost - minCost) * c.terms.Temperature
	weight := func(v float64) float64 {
		if span == 0 { // every cost the same: each as likely
			return 1
		}
		return math.Exp(-(v - minCost) / span)
	}
	total := 0.0
	for _, v := range c.costs {
		if !math.IsNaN(v) {
			total += weight(v)
		}
	}
	u := rand.Float64()
	if c.rng != nil {
		u = c.rng()
	}
	x := u * total
	last := -1
	for i, v := range c.costs {
		if math.IsNaN(v) {
			continue
		}
		last = i
		x -= weight(v)
		if x < 0 {
			return i
		}
	}
	return last
}
