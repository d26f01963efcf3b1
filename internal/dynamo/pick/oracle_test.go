package pick

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// oracle is the straightforward LoadBased picker the indexed one replaced:
// it costs every candidate on every pick. The differential test holds the
// indexed picker to it. It enumerates the candidates itself (oracleGroups,
// oracleRanks), so a fault in the picker's enumeration shows as a
// difference instead of being shared.
type oracle struct {
	Loads  Loads
	Ledger *ledger
	rr     rotations // a cursor per candidate set, as the picker's
	// skipGroups: namespaces whose prefill choice failed for the request
	// being picked, out of its decode choice.
	skipGroups map[int]bool
	mu         sync.Mutex // guards Ledger when the oracle is a Picker
	// busyRule is the busy rule of the last request (nil: off) and
	// busyHeld the keys it holds busy.
	busyRule *BusyThreshold
	busyHeld map[load.Key]bool
}

// ocand is one (worker, rank) of the oracle, with its cost.
type ocand struct {
	w        *fleet.Worker
	group    int
	rank     uint32
	cost     float64
	defined  bool
	excluded bool
	busy     bool
	banned   bool // excluded by the request
	stalled  bool // excluded as possibly stalled alone: costed all the same
}

// ogroup is the workers of the request's model in one candidate namespace,
// by role.
type ogroup struct {
	namespace                   string
	prefill, decode, aggregated []*fleet.Worker
}

// oracleGroups enumerates the candidates from the rules, sharing nothing
// with the picker's enumeration: for each candidate namespace in the
// request's order (one listed twice counts twice), the workers of the
// request's model there, by role, in snapshot order; namespaces without
// any are left out.
func oracleGroups(snap *fleet.Snapshot, req Request) []ogroup {
	var out []ogroup
	for _, ns := range req.Namespaces {
		g := ogroup{namespace: ns}
		for w := range snap.Workers.All() {
			if w.ID.Namespace != ns || w.Model != req.Model {
				continue
			}
			switch w.Role {
			case fleet.RolePrefill:
				g.prefill = append(g.prefill, w)
			case fleet.RoleDecode:
				g.decode = append(g.decode, w)
			case fleet.RoleAggregated:
				g.aggregated = append(g.aggregated, w)
			}
		}
		if len(g.prefill)+len(g.decode)+len(g.aggregated) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// oracleRanks appends every global data-parallel rank of the workers:
// DPStartRank .. DPStartRank+max(DPSize,1)-1.
func oracleRanks(out []ocand, group int, ws []*fleet.Worker) []ocand {
	for _, w := range ws {
		n := w.DPSize
		if n == 0 {
			n = 1
		}
		for i := uint32(0); i < n; i++ {
			out = append(out, ocand{w: w, group: group, rank: w.DPStartRank + i})
		}
	}
	return out
}

// oracleTarget pins the candidate's absolute rank.
func oracleTarget(c ocand) Target {
	return Target{Worker: c.w, DPRank: c.rank, SendRank: c.w.DPDeclared}
}

// pick is the old LoadBased.pick; the caller holds the ledger lock.
func (p *oracle) pick(snap *fleet.Snapshot, req Request, now time.Time) (Pin, error) {
	gs := oracleGroups(snap, req)
	// Decode candidates: each group's decode workers, then its aggregated
	// workers unless the model has both prefill and decode workers there
	// (the mixed-namespace rule).
	var decode []ocand
	for gi, g := range gs {
		decode = oracleRanks(decode, gi, g.decode)
		if len(g.prefill) == 0 || len(g.decode) == 0 {
			decode = oracleRanks(decode, gi, g.aggregated)
		}
	}
	if len(decode) == 0 {
		return Pin{}, ErrNoWorkers
	}
	if (req.Busy == nil) != (p.busyRule == nil) || (req.Busy != nil && *req.Busy != *p.busyRule) {
		p.busyRule, p.busyHeld = nil, map[load.Key]bool{} // a new rule: nothing held
		if req.Busy != nil {
			r := *req.Busy
			p.busyRule = &r
		}
	}
	// A namespace whose prefill choice fails leaves the decode choice,
	// which is made again among the others'.
	p.skipGroups = map[int]bool{}
	defer func() { p.skipGroups = nil }()
	var prefillErr error
	var d, pc ocand
	var reason, preason string
	for {
		var err error
		d, reason, err = p.choose(decode, phaseDecode, &req, now)
		if err != nil {
			if prefillErr != nil {
				err = prefillErr
			}
			return Pin{}, err
		}
		g := gs[d.group]
		if d.w.Role == fleet.RoleAggregated || len(g.prefill) == 0 {
			return Pin{Namespace: g.namespace, Decode: oracleTarget(d), DecodeReason: reason, PrefillReason: ReasonNoPrefillPool}, nil
		}
		if pc, preason, err = p.choose(oracleRanks(nil, d.group, g.prefill), phasePrefill, &req, now); err == nil {
			break
		}
		if prefillErr == nil || errors.Is(err, ErrAllBusy) {
			prefillErr = err
		}
		p.skipGroups[d.group] = true
	}
	g := gs[d.group]
	pin := Pin{Namespace: g.namespace, Decode: oracleTarget(d), DecodeReason: reason}
	t := oracleTarget(pc)
	pin.Prefill, pin.PrefillReason = &t, preason
	return pin, nil
}

// oracleView is the old Ledger.view.
func oracleView(l *ledger, k load.Key, since, now time.Time) (prefill, decode int, stalled bool) {
	for _, e := range l.entries[k] {
		if now.Sub(e.at) > InFlightWindow || !e.at.After(since) {
			continue
		}
		prefill += e.prefillTokens
		decode += e.decodeBlocks
		if e.stallable && !e.done && now.Sub(e.at) >= StallAfter {
			stalled = true
		}
	}
	return prefill, decode, stalled
}

func oracleDecodeCost(w *fleet.Worker, backlogBlocks float64, est int) (float64, bool) {
	if w.BlockSize == nil || *w.BlockSize == 0 || w.Capacity.TotalKVBlocks == nil || *w.Capacity.TotalKVBlocks == 0 {
		return 0, false
	}
	bs := int(*w.BlockSize)
	return (backlogBlocks + float64((est+bs-1)/bs)) / float64(*w.Capacity.TotalKVBlocks), true
}

func oraclePrefillCost(w *fleet.Worker, backlogTokens float64) (float64, bool) {
	if w.Capacity.MaxNumBatchedTokens == nil || *w.Capacity.MaxNumBatchedTokens == 0 {
		return 0, false
	}
	return backlogTokens / float64(*w.Capacity.MaxNumBatchedTokens), true
}

// oracleBusy judges a key busy: over a threshold, or held busy and not
// yet Hysteresis below every threshold.
func (p *oracle) oracleBusy(k load.Key, w *fleet.Worker, smp *load.Sample, fresh bool, inPrefill, inDecode int) bool {
	rule := p.busyRule
	if rule == nil {
		return false
	}
	blocks, tokens := float64(inDecode), float64(inPrefill)
	if fresh {
		var used uint64
		if v := smp.Load.ActiveDecodeBlocks; v != nil {
			used = *v
		}
		if v := smp.Load.KVUsedBlocks; v != nil && *v > used {
			used = *v
		}
		blocks += float64(used)
		if v := smp.Load.ActivePrefillTokens; v != nil {
			tokens += float64(*v)
		}
	}
	kvT, prT := rule.KVBlocks, rule.PrefillTokens
	if p.busyHeld[k] {
		kvT, prT = kvT-rule.Hysteresis, prT-rule.Hysteresis
	}
	busy := false
	if c := w.Capacity.TotalKVBlocks; rule.KVBlocks > 0 && c != nil && *c > 0 && blocks > kvT*float64(*c) {
		busy = true
	}
	if c := w.Capacity.MaxNumBatchedTokens; rule.PrefillTokens > 0 && c != nil && *c > 0 && tokens > prT*float64(*c) {
		busy = true
	}
	if busy {
		p.busyHeld[k] = true
	} else {
		delete(p.busyHeld, k)
	}
	return busy
}

// choose is the old LoadBased.choose, with the request's exclusions and
// busy thresholds.
func (p *oracle) choose(cands []ocand, phase int, req *Request, now time.Time) (ocand, string, error) {
	est := req.EstPromptTokens
	maxAge := p.Loads.MaxStaleness()
	anyFresh, anySampled := false, false
	p.Loads.Read(func(r load.ReadView) {
		for i := range cands {
			c := &cands[i]
			k := load.RankOf(c.w, c.rank)
			c.banned = slices.Contains(req.Exclude, c.w.ID) || phase == phaseDecode && p.skipGroups[c.group]
			smp := r.Get(k)
			since := r.Since(k)
			var inPrefill, inDecode int
			stalled := false
			if p.Ledger != nil {
				inPrefill, inDecode, stalled = oracleView(p.Ledger, k, since, now)
			}
			c.busy = p.oracleBusy(k, c.w, smp, smp != nil && now.Sub(smp.ReceivedAt) <= maxAge, inPrefill, inDecode)
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
			anySampled = anySampled || fresh
			var base float64
			switch {
			case fresh && backlog != nil:
				anyFresh = true
				base = float64(*backlog)
			case smp == nil, backlog != nil && *backlog == 0:
				base = 0
			default:
				c.excluded = true
				continue
			}
			if stalled {
				c.excluded, c.stalled = true, true
			}
			if phase == phaseDecode {
				c.cost, c.defined = oracleDecodeCost(c.w, base+float64(inDecode), est)
			} else {
				c.cost, c.defined = oraclePrefillCost(c.w, base+float64(inPrefill))
			}
		}
	})
	set := make([]candidate, len(cands))
	for i, c := range cands {
		set[i] = candidate{w: c.w, group: c.group, rank: c.rank}
	}
	cursor := p.rr.next(p.rr.cursor(phase, set))
	// rotate: the cursor over the candidates the request does not exclude
	// and, while any candidate has a fresh sample, that are not busy.
	rotate := func() (ocand, string, error) {
		var left []ocand
		busy := false
		for _, c := range cands {
			switch {
			case c.banned:
			case anySampled && c.busy:
				busy = true
			default:
				left = append(left, c)
			}
		}
		if len(left) == 0 && busy {
			return ocand{}, "", ErrAllBusy
		}
		if len(left) == 0 {
			return ocand{}, "", ErrNoWorkers
		}
		return left[cursor%uint64(len(left))], ReasonRoundRobinStale, nil
	}
	if !anyFresh {
		return rotate()
	}
	usable := func(c ocand) bool { return !c.excluded && !c.busy && !c.banned }
	best := -1
	ties := 0
	for i, c := range cands {
		switch {
		case !c.defined || !usable(c):
		case best < 0 || c.cost < cands[best].cost:
			best, ties = i, 1
		case c.cost == cands[best].cost:
			ties++
		}
	}
	if best < 0 {
		// A possibly stalled candidate is passed over only while
		// another has a cost: with none, the cheapest of them.
		var stalled []ocand
		for _, c := range cands {
			if c.stalled && c.defined && !c.busy && !c.banned {
				stalled = append(stalled, c)
			}
		}
		if len(stalled) > 0 {
			low := stalled[0].cost
			for _, c := range stalled {
				low = min(low, c.cost)
			}
			var tied []ocand
			for _, c := range stalled {
				if c.cost == low {
					tied = append(tied, c)
				}
			}
			return tied[cursor%uint64(len(tied))], ReasonLoad, nil
		}
		var ok, busy []ocand
		for _, c := range cands {
			if usable(c) {
				ok = append(ok, c)
			}
			if c.busy && !c.banned {
				busy = append(busy, c)
			}
		}
		switch {
		case len(ok) > 0:
			return ok[cursor%uint64(len(ok))], ReasonRoundRobinStale, nil
		case len(busy) > 0:
			return ocand{}, "", ErrAllBusy
		}
		return rotate()
	}
	if ties > 1 {
		n := int(cursor % uint64(ties))
		for i, c := range cands {
			if c.defined && usable(c) && c.cost == cands[best].cost {
				if n == 0 {
					return cands[i], ReasonLoad, nil
				}
				n--
			}
		}
	}
	return cands[best], ReasonLoad, nil
}

// randomFleet builds a snapshot of up to n workers with random roles,
// namespaces, models, data-parallel ranks and (possibly missing) capacity
// from a few cost classes.
func randomFleet(rng *rand.Rand, n int, at time.Time) *fleet.Snapshot {
	r := fleet.NewReducer()
	roles := []struct{ component, kind string }{{"prefill", "Prefill"}, {"decode", "Decode"}, {"backend", "Aggregated"}}
	for id := uint64(1); id <= uint64(n); id++ {
		role := roles[rng.IntN(len(roles))]
		ns := []string{"a", "b", "c"}[rng.IntN(3)]
		model := []string{"m", "n"}[rng.IntN(2)]
		var rc []string
		if rng.IntN(5) > 0 {
			rc = append(rc, fmt.Sprintf(`"total_kv_blocks":%d`, []int{1000, 2000, 1000}[rng.IntN(3)]))
		}
		if rng.IntN(5) > 0 {
			rc = append(rc, fmt.Sprintf(`"max_num_batched_tokens":%d`, []int{8192, 4096}[rng.IntN(2)]))
		}
		// Global ranks start above 0 on most workers (-1: not declared),
		// with or without a declared data_parallel_size of 1 to 3.
		if dp := rng.IntN(4); dp > 0 {
			rc = append(rc, fmt.Sprintf(`"data_parallel_size":%d`, dp))
		}
		if start := []int{-1, 0, 1, 4, 7}[rng.IntN(5)]; start >= 0 {
			rc = append(rc, fmt.Sprintf(`"data_parallel_start_rank":%d`, start))
		}
		bs := ""
		if rng.IntN(5) > 0 {
			bs = fmt.Sprintf(`,"kv_cache_block_size":%d`, []int{16, 32, 16}[rng.IntN(3)])
		}
		r.Put(fmt.Sprintf("v1/instances/%s/%s/generate/%x", ns, role.component, id),
			fmt.Appendf(nil, `{"component":%q,"endpoint":"generate","instance_id":%d}`, role.component, id), at)
		r.Put(fmt.Sprintf("v1/mdc/%s/%s/generate/%x", ns, role.component, id), fmt.Appendf(nil,
			`{"component":%q,"endpoint":"generate","instance_id":%d,"card_json":{"display_name":%q,"worker_type":%q%s,"runtime_config":{%s}}}`,
			role.component, id, model, role.kind, bs, joinComma(rc)), at)
	}
	return r.Build(at)
}

// workersOf lists a snapshot's workers in order.
func workersOf(s *fleet.Snapshot) []*fleet.Worker { return slices.Collect(s.Workers.All()) }

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

func samePin(a, b Pin) bool {
	if a.Namespace != b.Namespace || a.DecodeReason != b.DecodeReason || a.PrefillReason != b.PrefillReason ||
		a.Decode != b.Decode || (a.Prefill == nil) != (b.Prefill == nil) {
		return false
	}
	return a.Prefill == nil || *a.Prefill == *b.Prefill
}

func pinString(p Pin) string {
	s := fmt.Sprintf("ns=%s decode=%d/%d(%s)", p.Namespace, p.Decode.Worker.ID.InstanceID, p.Decode.DPRank, p.DecodeReason)
	if p.Prefill != nil {
		s += fmt.Sprintf(" prefill=%d/%d", p.Prefill.Worker.ID.InstanceID, p.Prefill.DPRank)
	}
	return s + " (" + p.PrefillReason + ")"
}

// TestDifferential drives the indexed picker and the oracle through the
// same random fleets, samples, dispatches, completions and clock (forward
// across every freshness, stall and expiry boundary, and sometimes back),
// and requires the same pin from both at every request.
func TestDifferential(t *testing.T) {
	t.Parallel()
	scenarios := 300
	if testing.Short() {
		scenarios = 60
	}
	// Each scenario is a subtest with its own store, picker and oracle.
	for sc := range scenarios {
		t.Run(fmt.Sprint(sc), func(t *testing.T) {
			t.Parallel()
			// Sample sequences only need to rise within the scenario's
			// own store.
			var seq uint64
			rng := rand.New(rand.NewPCG(uint64(sc), 7))
			base := time.Unix(1_800_000_000, 0)
			fleetSeed, size := rng.Uint64(), 2+rng.IntN(24)
			snap := randomFleet(rand.New(rand.NewPCG(fleetSeed, 1)), size, base)
			snap2 := snap // the previous generation
			now := base.Add(time.Minute)
			store := load.NewStore(3*time.Second, nil)
			store.SetClock(func() time.Time { return now })
			live := map[fleet.WorkerID]load.LiveWorker{}
			for w := range snap.Workers.All() {
				live[w.ID] = load.LiveWorker{DPStartRank: w.DPStartRank, DPSize: w.DPSize}
			}
			store.SetLiveAndRetain(live)
			p := NewLoadBased(store)
			o := &oracle{Loads: store, Ledger: &p.ledger}
			var tickets []Ticket
			// Busy rules near the loads the scenario makes (samples of 0-5,
			// dispatches of up to 13 blocks and 200 tokens), or none.
			rules := []*BusyThreshold{nil, {KVBlocks: 0.005, Hysteresis: 0.002}, {KVBlocks: 0.01, PrefillTokens: 0.03, Hysteresis: 0.004},
				{PrefillTokens: 0.02, Hysteresis: 0.01}}
			busy := rules[rng.IntN(len(rules))]
			small := func() *uint64 {
				switch rng.IntN(4) {
				case 0:
					return nil
				case 1:
					v := uint64(0)
					return &v
				default:
					v := uint64(rng.IntN(6))
					return &v
				}
			}
			steps := []time.Duration{0, time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second, 3*time.Second + 1,
				5 * time.Second, 5*time.Second - 1, 30 * time.Second, 30*time.Second + 1, -time.Millisecond, -2 * time.Second}
			for step := range 300 {
				switch op := rng.IntN(22); {
				case op < 4:
					now = now.Add(steps[rng.IntN(len(steps))])
				case op < 9 && snap.Workers.Len() > 0:
					w := workersOf(snap)[rng.IntN(snap.Workers.Len())]
					rank := w.DPStartRank + uint32(rng.IntN(int(max(w.DPSize, 1))))
					seq++
					at := now.Add(-time.Duration(rng.IntN(5)) * time.Second)
					if rng.IntN(3) == 0 {
						at = now
					}
					store.Apply(load.Sample{Load: wire.ActiveLoad{WorkerID: w.ID.InstanceID, DPRank: rank, ActiveDecodeBlocks: small(),
						ActivePrefillTokens: small(), KVUsedBlocks: small()}, Namespace: load.NS(w.ID.Namespace), PublisherID: w.ID.InstanceID, Sequence: seq, ReceivedAt: at})
				case op == 9 && snap.Workers.Len() > 0:
					store.DropPublisher(workersOf(snap)[rng.IntN(snap.Workers.Len())].ID.InstanceID)
				case op == 10:
					store.SetMaxStaleness([]time.Duration{2 * time.Second, 3 * time.Second}[rng.IntN(2)])
				case op == 11 && len(tickets) > 0:
					p.Release(tickets[rng.IntN(len(tickets))])
				case op == 13 && snap.Workers.Len() > 0:
					// A publisher's session restarts: what it answered and
					// what was sent before no longer count.
					store.ResetPublisher(workersOf(snap)[rng.IntN(snap.Workers.Len())].ID.InstanceID)
				case op == 14 && snap.Workers.Len() > 0:
					// A worker leaves the live set and comes back.
					gone := workersOf(snap)[rng.IntN(snap.Workers.Len())].ID
					without := maps.Clone(live)
					delete(without, gone)
					store.SetLiveAndRetain(without)
					if rng.IntN(2) == 0 {
						now = now.Add(steps[rng.IntN(len(steps))])
					}
					store.SetLiveAndRetain(live)
				case op == 12:
					// A new snapshot generation of the same fleet.
					snap2 = snap
					snap = randomFleet(rand.New(rand.NewPCG(fleetSeed, 1)), size, base)
				default:
					var nss []string
					for _, ns := range rng.Perm(3)[:1+rng.IntN(3)] {
						nss = append(nss, []string{"a", "b", "c"}[ns])
					}
					if rng.IntN(10) == 0 {
						nss = append(nss, nss[0]) // a namespace listed twice
					}
					r := Request{Model: []string{"m", "n"}[rng.IntN(2)], Namespaces: nss, EstPromptTokens: rng.IntN(200), Busy: busy}
					if rng.IntN(40) == 0 {
						busy = rules[rng.IntN(len(rules))] // a reload
					}
					for range rng.IntN(3) * rng.IntN(2) { // a re-pin excludes the workers that failed
						r.Exclude = append(r.Exclude, workersOf(snap)[rng.IntN(snap.Workers.Len())].ID)
					}
					use := snap
					if rng.IntN(8) == 0 {
						use = snap2 // a request still holding the previous snapshot
					}
					p.mu.Lock()
					want, werr := o.pick(use, r, now)
					p.mu.Unlock()
					var got Pin
					var gerr error
					if rng.IntN(3) == 0 {
						got, gerr = p.Pick(use, r, now)
					} else {
						var tk Ticket
						got, tk, gerr = p.Reserve(use, r, now)
						if gerr == nil {
							tickets = append(tickets, tk)
						}
					}
					if (werr != nil) != (gerr != nil) {
						t.Fatalf("scenario %d step %d: errors differ: oracle %v, indexed %v", sc, step, werr, gerr)
					}
					if werr == nil && !samePin(want, got) {
						t.Fatalf("scenario %d step %d %+v at +%v:\n oracle  %s\n indexed %s", sc, step, r, now.Sub(base), pinString(want), pinString(got))
					}
				}
			}
			if !slices.EqualFunc(workersOf(snap), workersOf(snap2), func(a, b *fleet.Worker) bool { return a.ID == b.ID }) {
				t.Fatalf("scenario %d: generations differ", sc)
			}
		})
	}
}

// Reserve implements Picker (the benchmarks' baseline).
func (p *oracle) Reserve(snap *fleet.Snapshot, req Request, now time.Time) (Pin, Ticket, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pin, err := p.pick(snap, req, now)
	if err != nil {
		return pin, Ticket{}, err
	}
	return pin, p.Ledger.dispatched(pin, req.EstPromptTokens, req.EstPromptTokens, now), nil
}

// Release implements Picker.
func (p *oracle) Release(t Ticket) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Ledger.finished(t)
}

// TestIndexCatchesUp: changes beyond the store's and the ledger's change
// logs, and a deadline heap full of superseded entries, still give the
// oracle's picks.
func TestIndexCatchesUp(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_800_000_000, 0)
	snap := randomFleet(rand.New(rand.NewPCG(3, 1)), 40, base)
	store := load.NewStore(3*time.Second, nil)
	live := map[fleet.WorkerID]load.LiveWorker{}
	for w := range snap.Workers.All() {
		live[w.ID] = load.LiveWorker{DPStartRank: w.DPStartRank, DPSize: w.DPSize}
	}
	store.SetLiveAndRetain(live)
	now := base.Add(time.Minute)
	p := NewLoadBased(store)
	o := &oracle{Loads: store, Ledger: &p.ledger}
	r := Request{Model: "m", Namespaces: []string{"a", "b", "c"}, EstPromptTokens: 100}
	check := func(what string) {
		t.Helper()
		for range 5 {
			p.mu.Lock()
			want, werr := o.pick(snap, r, now)
			p.mu.Unlock()
			got, gerr := p.Pick(snap, r, now)
			if werr != nil || gerr != nil || !samePin(want, got) {
				t.Fatalf("%s: oracle %s (%v), indexed %s (%v)", what, pinString(want), werr, pinString(got), gerr)
			}
		}
	}
	check("start")
	seq := uint64(0)
	samples := func(n int) {
		for i := range n {
			w := workersOf(snap)[i%snap.Workers.Len()]
			seq++
			v := seq % 7
			store.Apply(load.Sample{Load: wire.ActiveLoad{WorkerID: w.ID.InstanceID, DPRank: w.DPStartRank, ActiveDecodeBlocks: &v, ActivePrefillTokens: &v},
				Namespace: load.NS(w.ID.Namespace), PublisherID: w.ID.InstanceID, Sequence: seq, ReceivedAt: now.Add(-time.Duration(seq%4000) * time.Millisecond)})
		}
	}
	for range 200 { // superseded deadlines pile up in the heap
		samples(snap.Workers.Len())
		check("while samples arrive")
		now = now.Add(time.Millisecond)
	}
	samples(70_000) // beyond the store's log
	check("after 70,000 samples")
	for i := range 20_000 { // beyond the ledger's log
		w := workersOf(snap)[i%snap.Workers.Len()]
		p.Dispatched(Pin{Decode: Target{Worker: w, DPRank: w.DPStartRank}}, 100+i%50, now.Add(-time.Duration(i%7)*time.Second))
	}
	check("after 20,000 dispatches")
	now = now.Add(6 * time.Second)
	check("after 6 s")
}

// TestConcurrentUse: picks, reservations, completions, samples, dropped
// publishers and snapshot generations from many goroutines at once (run
// with -race); every pin names a worker of the snapshot it was made from.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_800_000_000, 0)
	snaps := []*fleet.Snapshot{randomFleet(rand.New(rand.NewPCG(9, 1)), 30, base), randomFleet(rand.New(rand.NewPCG(9, 1)), 30, base)}
	store := load.NewStore(3*time.Second, nil)
	live := map[fleet.WorkerID]load.LiveWorker{}
	for w := range snaps[0].Workers.All() {
		live[w.ID] = load.LiveWorker{DPStartRank: w.DPStartRank, DPSize: w.DPSize}
	}
	store.SetLiveAndRetain(live)
	var clock atomic.Int64
	clock.Store(base.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Add(int64(time.Millisecond))) }
	p := NewLoadBased(store)
	var seq atomic.Uint64
	done := make(chan struct{})
	errs := make(chan error, 8)
	for g := range 6 {
		go func() {
			defer func() { done <- struct{}{} }()
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for range 2000 {
				snap := snaps[rng.IntN(2)]
				w := workersOf(snap)[rng.IntN(snap.Workers.Len())]
				switch rng.IntN(6) {
				case 0:
					v := uint64(rng.IntN(50))
					store.Apply(load.Sample{Load: wire.ActiveLoad{WorkerID: w.ID.InstanceID, DPRank: w.DPStartRank, ActiveDecodeBlocks: &v, ActivePrefillTokens: &v},
						Namespace: load.NS(w.ID.Namespace), PublisherID: w.ID.InstanceID, Sequence: seq.Add(1), ReceivedAt: now()})
				case 1:
					store.DropPublisher(w.ID.InstanceID)
				default:
					r := Request{Model: []string{"m", "n"}[rng.IntN(2)], Namespaces: []string{"a", "b", "c"}, EstPromptTokens: rng.IntN(300)}
					var pin Pin
					var err error
					if rng.IntN(2) == 0 {
						pin, err = p.Pick(snap, r, now())
					} else {
						var tk Ticket
						pin, tk, err = p.Reserve(snap, r, now())
						p.Release(tk)
					}
					if err != nil {
						continue // no worker of that model
					}
					if !slices.Contains(workersOf(snap), pin.Decode.Worker) || (pin.Prefill != nil && !slices.Contains(workersOf(snap), pin.Prefill.Worker)) {
						errs <- fmt.Errorf("a pin outside its snapshot: %s", pinString(pin))
						return
					}
				}
			}
		}()
	}
	for range 6 {
		<-done
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// TestRoundRobinDifferential: RoundRobin rotates through the oracle's
// decode candidates, then through the chosen group's prefill candidates,
// pinning absolute ranks, over random fleets and requests: each candidate
// set (its members in any order) with its own turn, so that requests for
// other models or namespaces in between take none of its turns.
func TestRoundRobinDifferential(t *testing.T) {
	t.Parallel()
	for sc := range 100 {
		rng := rand.New(rand.NewPCG(uint64(sc), 11))
		snap := randomFleet(rng, 2+rng.IntN(24), time.Unix(1_800_000_000, 0))
		p := &RoundRobin{}
		turns := map[string]int{}
		turn := func(phase string, cands []ocand) int {
			var ks []string
			for _, c := range cands {
				ks = append(ks, fmt.Sprintf("%s/%d/%d", c.w.ID.Namespace, c.w.ID.InstanceID, c.rank))
			}
			slices.Sort(ks)
			k := phase + ":" + strings.Join(ks, ",")
			n := turns[k]
			turns[k]++
			return n
		}
		for step := range 100 {
			var nss []string
			for _, ns := range rng.Perm(3)[:1+rng.IntN(3)] {
				nss = append(nss, []string{"a", "b", "c"}[ns])
			}
			r := Request{Model: []string{"m", "n"}[rng.IntN(2)], Namespaces: nss}
			gs := oracleGroups(snap, r)
			var decode []ocand
			for gi, g := range gs {
				decode = oracleRanks(decode, gi, g.decode)
				if len(g.prefill) == 0 || len(g.decode) == 0 {
					decode = oracleRanks(decode, gi, g.aggregated)
				}
			}
			got, _, err := p.Reserve(snap, r, time.Time{})
			if len(decode) == 0 {
				if !errors.Is(err, ErrNoWorkers) {
					t.Fatalf("scenario %d step %d %+v: err = %v, want ErrNoWorkers", sc, step, r, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("scenario %d step %d %+v: %v", sc, step, r, err)
			}
			d := decode[turn("decode", decode)%len(decode)]
			g := gs[d.group]
			want := Pin{Namespace: g.namespace, Decode: oracleTarget(d), DecodeReason: ReasonRoundRobinStale, PrefillReason: ReasonNoPrefillPool}
			if d.w.Role != fleet.RoleAggregated && len(g.prefill) > 0 {
				prefill := oracleRanks(nil, d.group, g.prefill)
				pt := oracleTarget(prefill[turn("prefill", prefill)%len(prefill)])
				want.Prefill, want.PrefillReason = &pt, ReasonRoundRobinStale
			}
			if !samePin(want, got) {
				t.Fatalf("scenario %d step %d %+v:\n oracle      %s\n round robin %s", sc, step, r, pinString(want), pinString(got))
			}
		}
	}
}
