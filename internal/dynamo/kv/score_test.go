package kv

import (
	"math"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// TestCosts: the formula's terms, computed by hand.
func TestCosts(t *testing.T) {
	t.Parallel()
	one := Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}
	cases := []struct {
		name            string
		terms           Terms
		isl, bs, ov     int
		prefill, decode float64
		want            Cost
	}{
		// 100 tokens in blocks of 16: 6.25 raw prefill blocks, 7 blocks to
		// decode into.
		{"cold, idle", one, 100, 16, 0, 0, 0, Cost{0, 0, 6.25, 0, 6.25, 7, 13.25}},
		{"4 blocks held", one, 100, 16, 4, 0, 0, Cost{4, 64, 6.25, 4, 2.25, 3, 5.25}},
		{"every complete block held", one, 100, 16, 6, 0, 0, Cost{6, 96, 6.25, 6, 0.25, 1, 1.25}},
		{"held, with backlogs", one, 100, 16, 4, 320, 5, Cost{4, 64, 26.25, 4, 22.25, 8, 30.25}},
		{"scale 2, credit 0.5", Terms{OverlapScoreCredit: 0.5, PrefillLoadScale: 2}, 100, 16, 4, 0, 0, Cost{4, 64, 6.25, 2, 4.25, 3, 11.5}},
		// The credit never makes the prefill term negative.
		{"credit beyond the prompt", Terms{OverlapScoreCredit: 10, PrefillLoadScale: 1}, 100, 16, 6, 0, 0, Cost{6, 96, 6.25, 60, 0, 1, 1}},
		// An overlap longer than the request's blocks caps the cached tokens.
		{"overlap past the prompt", one, 40, 16, 3, 0, 0, Cost{3, 40, 2.5, 3, 0, 0, 0}},
	}
	for _, c := range cases {
		if got := c.terms.Costs(c.isl, c.bs, c.ov, c.prefill, c.decode); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

type overlapMap map[[2]uint64]int

func (m overlapMap) Overlap(k load.Key, _ int) int {
	return m[[2]uint64{k.WorkerID, uint64(k.DPRank)}]
}

// InFlight: the prefixes of requests in flight sit at rank 1<<31 of the
// same worker in the map.
func (m overlapMap) InFlight(k load.Key, _ int) int {
	return m[[2]uint64{k.WorkerID, uint64(k.DPRank) | 1<<31}]
}

func cand(id uint64, bs uint32) pick.Candidate {
	b := bs
	return pick.Candidate{Worker: &fleet.Worker{ID: fleet.WorkerID{Namespace: "dynamo", InstanceID: id}, BlockSize: &b}}
}

func counter() func() uint64 {
	n := uint64(0)
	return func() uint64 { n++; return n - 1 }
}

// TestScoreFreshness: with a fresh backlog anywhere, the fresh and quiet
// candidates compete and the others are left out however much they hold;
// without, everyone competes on overlap and size alone.
func TestScoreFreshness(t *testing.T) {
	t.Parallel()
	terms := Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}
	a, b, c := cand(1, 16), cand(2, 16), cand(3, 16)
	a.Fresh, a.HasPrefill, a.PrefillTokens = true, true, 1000
	b.Quiet = true
	c.Excluded = true
	ch := &choice{terms: terms, isl: 100, overlaps: overlapMap{{3, 0}: 6}}
	i, reason, ok := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b, c}, freshIn([]pick.Candidate{a, b, c}), counter())
	if !ok || i != 1 || reason != pick.ReasonKVAware {
		t.Errorf("fresh fleet: chose %d (%s, %v), want the quiet candidate 1; costs %v", i, reason, ok, ch.costs)
	}
	if !math.IsNaN(ch.costs[2]) {
		t.Errorf("the excluded candidate competed: %v", ch.costs)
	}
	// A fresh candidate with enough overlap beats a quiet one.
	a.PrefillTokens = 16
	ch.overlaps = overlapMap{{1, 0}: 6}
	if i, _, _ := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b, c}, freshIn([]pick.Candidate{a, b, c}), counter()); i != 0 || ch.Chosen.Overlap != 6 {
		t.Errorf("chose %d (%+v), want the holder 0; costs %v", i, ch.Chosen, ch.costs)
	}

	// Nothing fresh: backlogs do not count, the excluded compete too.
	a.Fresh, b.Quiet, c.Excluded = false, false, true
	ch.overlaps = overlapMap{{3, 0}: 4}
	if i, reason, _ := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b, c}, freshIn([]pick.Candidate{a, b, c}), counter()); i != 2 || reason != pick.ReasonKVAware {
		t.Errorf("stale fleet: chose %d (%s), want the holder 2; costs %v", i, reason, ch.costs)
	}
	// Nothing fresh, two holding the same: the cursor rotates between them,
	// and that is round_robin_stale too.
	ch.overlaps = overlapMap{{1, 0}: 4, {3, 0}: 4}
	next2 := counter()
	for _, want := range []int{0, 2, 0} {
		if i, reason, _ := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b, c}, freshIn([]pick.Candidate{a, b, c}), next2); i != want || reason != pick.ReasonRoundRobinStale {
			t.Fatalf("tied holders: chose %d (%s), want %d under round_robin_stale; costs %v", i, reason, want, ch.costs)
		}
	}
	// Nothing fresh and nothing held: the cursor rotates over equal costs.
	ch.overlaps = overlapMap{}
	next := counter()
	for want := range 6 {
		if i, reason, _ := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b, c}, freshIn([]pick.Candidate{a, b, c}), next); i != want%3 || reason != pick.ReasonRoundRobinStale {
			t.Fatalf("rotation %d: chose %d (%s)", want, i, reason)
		}
	}
}

// TestScoreTiesAndTemperature: ties at temperature 0 rotate by the cursor
// among the cheapest only; above 0 a draw follows the softmax weights.
func TestScoreTiesAndTemperature(t *testing.T) {
	t.Parallel()
	cands := []pick.Candidate{cand(1, 16), cand(2, 16), cand(3, 16), cand(4, 16)}
	for i := range cands {
		cands[i].Quiet = true
	}
	cands[0].Fresh, cands[0].Quiet = true, false // fresh, backlog 0
	held := overlapMap{{2, 0}: 4, {4, 0}: 4}
	ch := &choice{terms: Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}, isl: 100, overlaps: held}
	next := counter()
	var got []int
	for range 4 {
		i, _, _ := ch.Score(pick.PhasePrefill, cands, freshIn(cands), next)
		got = append(got, i)
	}
	if got[0] != 1 || got[1] != 3 || got[2] != 1 || got[3] != 3 {
		t.Errorf("ties rotate over the holders 1 and 3: %v", got)
	}

	// Costs 13.25, 5.25, 13.25, 5.25: with T=1 the weights are 1 for the
	// cheap ones and exp(-1) for the others.
	ch.terms.Temperature = 1
	w := math.Exp(-1)
	total := 2 + 2*w
	for _, c := range []struct {
		u    float64
		want int
	}{{0, 0}, {(w - 1e-9) / total, 0}, {(w + 1e-9) / total, 1}, {(w + 1 + 1e-9) / total, 2}, {0.999999, 3}} {
		ch.rng = func() float64 { return c.u }
		if i, _, _ := ch.Score(pick.PhasePrefill, cands, freshIn(cands), next); i != c.want {
			t.Errorf("u=%g: drew %d, want %d", c.u, i, c.want)
		}
	}

	// Costs all equal: the draw is uniform, as the upstream router's
	// softmax makes it (not the cursor's rotation), and without fresh
	// backlogs still a round_robin_stale choice.
	same := []pick.Candidate{cand(1, 16), cand(2, 16), cand(3, 16)}
	for i := range same {
		same[i].Quiet = true
	}
	ch.overlaps = overlapMap{}
	for _, c := range []struct {
		u    float64
		want int
	}{{0, 0}, {0.34, 1}, {0.5, 1}, {0.67, 2}, {0.999999, 2}} {
		ch.rng = func() float64 { return c.u }
		i, reason, _ := ch.Score(pick.PhasePrefill, same, freshIn(same), func() uint64 { return 0 })
		if i != c.want || reason != pick.ReasonRoundRobinStale {
			t.Errorf("equal costs, u=%g: drew %d (%s), want %d (round_robin_stale)", c.u, i, reason, c.want)
		}
	}
}

// TestScoreNeedsBlockSizes: a candidate without a block size cannot be
// costed; with none costable the load rule decides. One whose block size
// prompts are not hashed at (below 16) is costed at its own size as
// holding none of the prompt, whatever the index says of its rank.
func TestScoreNeedsBlockSizes(t *testing.T) {
	t.Parallel()
	a := pick.Candidate{Worker: &fleet.Worker{ID: fleet.WorkerID{InstanceID: 1}}, Quiet: true}
	ch := &choice{terms: Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}, isl: 100, overlaps: overlapMap{{2, 0}: 5}}
	if _, _, ok := ch.Score(pick.PhasePrefill, []pick.Candidate{a}, freshIn([]pick.Candidate{a}), counter()); ok {
		t.Error("scored a candidate without a block size")
	}
	b := cand(2, 8) // below the smallest hashed size
	b.Quiet = true
	i, reason, ok := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b}, freshIn([]pick.Candidate{a, b}), counter())
	if !ok || i != 1 || reason != pick.ReasonKVAware {
		t.Fatalf("chose %d (%s, %v), want the block size 8 candidate by the formula", i, reason, ok)
	}
	// 100 tokens in blocks of 8: 12.5 to prefill, 13 to decode, nothing held.
	if got := ch.Chosen; got.Overlap != 0 || got.Total != 25.5 || ch.ChosenIndexed != 0 {
		t.Errorf("cost %+v (indexed %d), want 25.5 with no overlap", got, ch.ChosenIndexed)
	}
}

// TestScoreLoneCandidateIsTheFormulas: without fresh backlogs,
// round_robin_stale is a choice between equal costs; a lone candidate is
// the formula's (kv_aware), at any temperature.
func TestScoreLoneCandidateIsTheFormulas(t *testing.T) {
	t.Parallel()
	a := cand(1, 16)
	for _, temp := range []float64{0, 1} {
		ch := &choice{terms: Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1, Temperature: temp}, isl: 100, overlaps: overlapMap{}, rng: func() float64 { return 0.5 }}
		if i, reason, ok := ch.Score(pick.PhasePrefill, []pick.Candidate{a}, false, counter()); !ok || i != 0 || reason != pick.ReasonKVAware {
			t.Errorf("temperature %g: chose %d (%s, %v), want 0 as kv_aware", temp, i, reason, ok)
		}
	}
}

// TestScoreStaleTieAmongTheCostable: without fresh backlogs, a tie among
// the cheapest candidates rotates as round_robin_stale, whatever the
// others (here one of an unhashed block size, costed higher) cost.
func TestScoreStaleTieAmongTheCostable(t *testing.T) {
	t.Parallel()
	a, b, c := cand(1, 16), cand(2, 16), cand(3, 8) // c's block size is not hashed: 25.5 to their 13.25
	ch := &choice{terms: Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}, isl: 100, overlaps: overlapMap{}}
	next := counter()
	for want := range 4 {
		i, reason, ok := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b, c}, freshIn([]pick.Candidate{a, b, c}), next)
		if !ok || i != want%2 || reason != pick.ReasonRoundRobinStale {
			t.Errorf("pick %d: chose %d (%s, %v), want %d under round_robin_stale; costs %v", want, i, reason, ok, want%2, ch.costs)
		}
	}
	// An overlap tells them apart: kv_aware.
	ch.overlaps = overlapMap{{2, 0}: 3}
	if i, reason, _ := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b, c}, freshIn([]pick.Candidate{a, b, c}), next); i != 1 || reason != pick.ReasonKVAware {
		t.Errorf("with an overlap: chose %d (%s)", i, reason)
	}
}

// TestScoreStalledFresh: a candidate the load picker found possibly
// stalled (a request of two blocks or more and no sample for 5 s) is left
// out even when its last sample is still fresh (a max_staleness above
// 5 s), however cheap its backlog looks; alone, the load rule decides.
func TestScoreStalledFresh(t *testing.T) {
	t.Parallel()
	terms := Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}
	a, b := cand(1, 16), cand(2, 16)
	a.Fresh, a.HasPrefill, a.PrefillTokens = true, true, 0
	a.Excluded = true
	b.Fresh, b.HasPrefill, b.PrefillTokens = true, true, 800
	ch := &choice{terms: terms, isl: 100, overlaps: overlapMap{{1, 0}: 6}}
	i, reason, ok := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b}, freshIn([]pick.Candidate{a, b}), counter())
	if !ok || i != 1 || reason != pick.ReasonKVAware || !math.IsNaN(ch.costs[0]) {
		t.Errorf("chose %d (%s, %v), costs %v: want 1, the stalled candidate left out", i, reason, ok, ch.costs)
	}
	if _, _, ok := ch.Score(pick.PhasePrefill, []pick.Candidate{a}, freshIn([]pick.Candidate{a}), counter()); ok {
		t.Errorf("the stalled candidate alone was costed: %v", ch.costs)
	}
}

// TestScoreInFlight: with fresh backlogs, what the requests in flight on a
// rank share with the request counts as held (the larger of it and the
// index's overlap), hand-computed: isl 100, bs 16, a fresh with 160
// tokens queued and 6 blocks in flight: raw (160+100)/16 = 16.25, credit
// 6, adjusted 10.25, decode 0 + (7-6) = 1, cost 11.25; b quiet and empty:
// 100/16 = 6.25 + 7 = 13.25. Without fresh backlogs the in-flight blocks
// do not count, and the overlaps alone decide.
func TestScoreInFlight(t *testing.T) {
	t.Parallel()
	terms := Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}
	a, b := cand(1, 16), cand(2, 16)
	a.Fresh, a.HasPrefill, a.PrefillTokens = true, true, 160
	b.Quiet = true
	held := overlapMap{{1, 1 << 31}: 6}
	ch := &choice{terms: terms, isl: 100, overlaps: held}
	i, _, _ := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b}, freshIn([]pick.Candidate{a, b}), counter())
	if i != 0 || ch.costs[0] != 11.25 || ch.Chosen.Overlap != 6 {
		t.Errorf("chose %d (%+v), costs %v: want 0 at 11.25 with 6 blocks", i, ch.Chosen, ch.costs)
	}
	if ch.costs[1] != 13.25 {
		t.Errorf("the quiet rank's cost %v, want 13.25", ch.costs[1])
	}
	// The index holding more than is in flight: the larger counts.
	held[[2]uint64{1, 0}] = 7
	if ch.Score(pick.PhasePrefill, []pick.Candidate{a, b}, freshIn([]pick.Candidate{a, b}), counter()); ch.details[0].Overlap != 7 {
		t.Errorf("overlap %d, want the index's 7", ch.details[0].Overlap)
	}
	delete(held, [2]uint64{1, 0})
	held[[2]uint64{2, 0}] = 1
	a.Fresh, a.HasPrefill, b.Quiet = false, false, false
	if i, _, _ := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b}, freshIn([]pick.Candidate{a, b}), counter()); i != 1 || ch.details[0].Overlap != 0 {
		t.Errorf("stale fleet: chose %d with overlaps %d/%d, want 1 (in-flight blocks not counted)", i, ch.details[0].Overlap, ch.details[1].Overlap)
	}
}

// freshIn is what the picker tells the scorer of cands when it set none
// aside: whether any has a fresh sample.
func freshIn(cands []pick.Candidate) bool {
	for _, c := range cands {
		if c.Fresh {
			return true
		}
	}
	return false
}

// TestScoreBlockSizeAboveTheRange: a candidate whose card claims blocks
// above 65536 tokens (no engine uses them) is not costed beside others:
// costed in blocks that large, it would draw every request.
func TestScoreBlockSizeAboveTheRange(t *testing.T) {
	t.Parallel()
	a, b := cand(1, 16), cand(2, MaxBlockSize+1)
	ch := &choice{terms: Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}, isl: 100, overlaps: overlapMap{}}
	for range 3 {
		if i, _, ok := ch.Score(pick.PhasePrefill, []pick.Candidate{a, b}, false, counter()); !ok || i != 0 {
			t.Fatalf("chose %d (%v); costs %v", i, ok, ch.costs)
		}
	}
	if _, _, ok := ch.Score(pick.PhasePrefill, []pick.Candidate{b}, false, counter()); ok {
		t.Error("costed a lone candidate of blocks above the range (the load rule decides)")
	}
}
