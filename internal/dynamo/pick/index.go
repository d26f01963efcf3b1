package pick

import (
	"slices"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// index is the candidates of one phase of one request shape (a model and
// its candidate namespaces) in one fleet snapshot, in the order the rules
// rank ties, with each candidate's costing state kept up to date instead
// of recomputed per pick:
//
//   - a candidate is recomputed when its sample changes (the store's change
//     log) or its ledger entries change (the ledger's change log), both
//     read once per snapshot by the shapeCache, which hands each changed
//     key to the indexes holding it (dirty); or when time crosses an
//     instant at which its state may change (its sample going stale, a
//     ledger entry expiring or becoming a possible stall), found in a
//     deadline heap processed at pick time;
//   - costed candidates sit in one segment tree per cost class (same block
//     size and capacity, so the same cost order as their backlog), the
//     candidates that are not excluded in another; a pick reads the
//     minimum of each class and finds the k-th tied candidate by the
//     round-robin cursor in O(log n).
//
// An index is used under its picker's lock.
type index struct {
	phase int
	cands []cand

	st    []cstate
	fresh int // candidates with a fresh sample for this phase
	// sampled counts the candidates with a fresh sample of any fields.
	sampled int
	// busyN counts the busy candidates the request does not exclude, and
	// excludedN those it excludes (see exclude).
	busyN, excludedN int
	incl             *segtree // 0: may be chosen; +Inf: excluded, busy or excluded by the request
	classes          []class
	due              deadlines
	// busy is the picker's busy rule and latches.
	busy *busyState
	// cursor is the round-robin cursor of this candidate set (see
	// rotations), advanced by take under the picker's lock.
	cursor *uint64

	built bool
	// dirty: candidates whose sample or ledger entries changed since the
	// last sync; stale: too many of them (or a change log overflowed), so
	// the next sync recomputes everything.
	dirty  []int32
	stale  bool
	maxAge time.Duration
	// validFrom: every state holds from this instant to its deadline; a
	// pick at an earlier instant recomputes everything.
	validFrom time.Time

	// prefill indexes of each group (decode indexes only), built on use.
	groups  []group
	prefill []*index
	// Of a decode index over two or more namespaces that pair prefill and
	// decode workers, for a scorer choosing prefill first among them (see
	// prefillFirst): the prefill workers of all of them, and each group's
	// own decode candidates; built on use.
	allPrefill *index
	decodeOf   []*index
	// pairedGroups counts the groups that pair prefill and decode workers
	// for the model: with any, decode is chosen by the load rule.
	// selfGroups counts the others with decode candidates (decode or
	// aggregated workers, which prefill their own requests).
	pairedGroups, selfGroups int
}

// paired reports whether a group pairs prefill and decode workers: only
// then is a prefill worker a candidate, and an aggregated one is not.
func (g *group) paired() bool { return len(g.prefill) > 0 && len(g.decode) > 0 }

type cand struct {
	w     *fleet.Worker
	key   load.Key
	group int32
	class int32 // -1: no defined cost (capacity missing)
	local int32 // leaf in the class's tree
}

type cstate struct {
	fresh bool
	// sampled: the candidate has a fresh sample, whatever fields it
	// carries; its busyness can then be judged from its blocks in use even
	// when the sample has no backlog for this phase (dynamo.vllm's prefill
	// workers publish no active_prefill_tokens).
	sampled  bool
	excluded bool
	// busy: over the busy threshold (see BusyThreshold); banned: excluded
	// by the request being picked (set only during its pick).
	busy, banned bool
	// idle: quiet by its last sample, gone stale with this phase's
	// backlog at 0 (a worker never heard from is quiet but not idle).
	idle bool
	// stalled: possibly stalled (a request it was sent long unanswered)
	// and excluded for it alone, with a backlog to cost: it is chosen by
	// that cost when no other candidate has one.
	stalled bool
	backlog float64
	// other is the other phase's backlog, for scorers: the fresh sample's
	// (decode blocks of a prefill candidate, prefill tokens of a decode
	// one; 0 for a worker that went idle), and for a decode candidate the
	// prompt tokens it was sent since to prefill itself. hasOther: the
	// sample carries the field, or the decode candidate never published.
	other    float64
	hasOther bool
	next     time.Time // when the state may change; zero: never by time alone
}

// class is the costed candidates sharing a cost denominator: decode
// (block size, total KV blocks), prefill (max batched tokens).
type class struct {
	blockSize int
	capacity  float64
	pos       []int32 // candidates, ascending
	tree      *segtree
}

func newIndex(phase int, cands []candidate, gs []group, busy *busyState, rr *rotations) *index {
	x := &index{phase: phase, cands: make([]cand, len(cands)), st: make([]cstate, len(cands)), incl: newSegtree(len(cands)), groups: gs,
		busy: busy, cursor: rr.cursor(phase, cands)}
	if phase == phaseDecode {
		x.prefill = make([]*index, len(gs))
	}
	for i := range gs {
		if gs[i].paired() {
			x.pairedGroups++
		} else if len(gs[i].decode)+len(gs[i].aggregated) > 0 {
			x.selfGroups++
		}
	}
	type classKey struct {
		bs  int
		cap uint64
	}
	classOf := map[classKey]int32{}
	for i, c := range cands {
		k := load.RankOf(c.w, c.rank)
		x.cands[i] = cand{w: c.w, key: k, group: int32(c.group), class: -1}
		var ck classKey
		ok := false
		if phase == phaseDecode {
			if w := c.w; w.BlockSize != nil && *w.BlockSize != 0 && w.Capacity.TotalKVBlocks != nil && *w.Capacity.TotalKVBlocks != 0 {
				ck, ok = classKey{int(*w.BlockSize), *w.Capacity.TotalKVBlocks}, true
			}
		} else if m := c.w.Capacity.MaxNumBatchedTokens; m != nil && *m != 0 {
			ck, ok = classKey{0, *m}, true
		}
		if !ok {
			continue
		}
		ci, seen := classOf[ck]
		if !seen {
			ci = int32(len(x.classes))
			classOf[ck] = ci
			x.classes = append(x.classes, class{blockSize: ck.bs, capacity: float64(ck.cap)})
		}
		cl := &x.classes[ci]
		x.cands[i].class, x.cands[i].local = ci, int32(len(cl.pos))
		cl.pos = append(cl.pos, int32(i))
	}
	for i := range x.classes {
		x.classes[i].tree = newSegtree(len(x.classes[i].pos))
	}
	return x
}

// markDirty records that candidate i's sample or ledger entries changed.
func (x *index) markDirty(i int32) {
	switch {
	case x.stale:
	case len(x.dirty) >= len(x.cands):
		x.stale, x.dirty = true, x.dirty[:0]
	default:
		x.dirty = append(x.dirty, i)
	}
}

// sync brings every state up to now; the shapeCache has handed it the
// changes of the logs.
func (x *index) sync(r load.ReadView, l *ledger, now time.Time, maxAge time.Duration) {
	if !x.built || x.stale || maxAge != x.maxAge || now.Before(x.validFrom) {
		x.rebuild(r, l, now, maxAge)
		return
	}
	for _, i := range x.dirty {
		x.update(int(i), r, l, now)
	}
	x.dirty = x.dirty[:0]
	for len(x.due) > 0 && !now.Before(x.due[0].at) {
		d := x.due.pop()
		if d.at.Equal(x.st[d.i].next) {
			x.update(int(d.i), r, l, now)
		}
	}
	if len(x.due) > 2*len(x.cands)+64 {
		x.rebuildDue()
	}
}

func (x *index) rebuild(r load.ReadView, l *ledger, now time.Time, maxAge time.Duration) {
	x.built, x.stale, x.maxAge, x.validFrom = true, false, maxAge, time.Time{}
	x.dirty = x.dirty[:0]
	for i := range x.cands {
		x.update(i, r, l, now)
	}
	x.rebuildDue()
}

func (x *index) rebuildDue() {
	x.due = x.due[:0]
	for i, s := range x.st {
		if !s.next.IsZero() {
			x.due = append(x.due, deadline{s.next, int32(i)})
		}
	}
	for i := len(x.due)/2 - 1; i >= 0; i-- {
		x.due.down(i)
	}
}

// update recomputes candidate i at now for one (worker, rank). Its backlog
// is the fresh sample's (decode: active_decode_blocks, else
// kv_used_blocks; prefill: active_prefill_tokens) plus the ledger's
// dispatches the store has not accounted for (since that sample, or since
// the worker or its publisher restarted). A worker never heard from, or last seen
// with backlog 0, is quiet; one gone stale with a backlog, lacking the
// phase's field, or possibly stalled is excluded while another has a cost.
func (x *index) update(i int, r load.ReadView, l *ledger, now time.Time) {
	c := &x.cands[i]
	smp := r.Get(c.key)
	since := r.Since(c.key)
	var inPrefill, inDecode int
	stalled := false
	var b bounds
	if l != nil {
		inPrefill, inDecode, stalled, b = l.view(c.key, since, now)
	}
	var backlog *uint64
	if smp != nil {
		b.add(smp.ReceivedAt.Add(x.maxAge+1), now) // first instant it is stale
		backlog = smp.Backlog(x.phase == phasePrefill)
	}
	fresh := smp != nil && now.Sub(smp.ReceivedAt) <= x.maxAge
	s := cstate{fresh: fresh && backlog != nil, sampled: fresh, next: b.next}
	if smp == nil && x.phase == phaseDecode {
		// Never heard from: quiet, an idle worker with no backlog of
		// either kind, so the prompt tokens it was sent since to prefill
		// itself are its prefill backlog, as for a worker that went idle.
		// Left out, a worker that never publishes would look half as
		// loaded per request as the others and draw the most requests.
		s.other, s.hasOther = float64(inPrefill), true
	}
	if smp != nil {
		other := smp.Load.ActivePrefillTokens
		if x.phase == phasePrefill {
			other = smp.Load.ActiveDecodeBlocks
		}
		switch {
		case other == nil:
		case fresh:
			s.other, s.hasOther = float64(*other), true
		case backlog != nil && *backlog == 0 && *other == 0:
			s.hasOther = true // went idle: only what it was sent since
		}
		if s.hasOther && x.phase == phaseDecode {
			// A decode candidate given a request without a prefill worker
			// prefills it itself: the prompt tokens sent since its sample
			// are prefill backlog too (a prefill candidate is never sent
			// decode work, so its other backlog is the sample's alone).
			s.other += float64(inPrefill)
		}
	}
	switch {
	case s.fresh:
		s.backlog = float64(*backlog)
	case smp == nil:
		// quiet: never published
	case backlog != nil && *backlog == 0:
		s.idle = true // quiet: went idle
	default:
		s.excluded = true // silent with a backlog, or no field for this phase
	}
	if stalled {
		s.stalled = !s.excluded
		s.excluded = true
	}
	if x.busy != nil && x.busy.on {
		blocks, tokens := signals(smp, fresh, inPrefill, inDecode)
		s.busy = x.busy.judge(c.key, c.w, blocks, tokens)
	}
	if !s.excluded || s.stalled {
		if x.phase == phaseDecode {
			s.backlog += float64(inDecode)
		} else {
			s.backlog += float64(inPrefill)
		}
	}
	x.set(i, s)
	if !b.prev.IsZero() && x.validFrom.Before(b.prev) {
		x.validFrom = b.prev
	}
}

func (x *index) set(i int, s cstate) {
	old := x.st[i]
	if old.fresh != s.fresh {
		if s.fresh {
			x.fresh++
		} else {
			x.fresh--
		}
	}
	x.sampled += b2i(s.sampled) - b2i(old.sampled)
	x.busyN += b2i(s.busy && !s.banned) - b2i(old.busy && !old.banned)
	x.excludedN += b2i(s.banned) - b2i(old.banned)
	key := 0.0
	if s.excluded || s.busy || s.banned {
		key = inf
	}
	x.incl.set(i, key)
	if c := x.cands[i]; c.class >= 0 {
		if key == 0 {
			key = s.backlog
		}
		x.classes[c.class].tree.set(int(c.local), key)
	}
	x.st[i] = s
	if !s.next.IsZero() && !s.next.Equal(old.next) {
		x.due.push(deadline{s.next, int32(i)})
	}
}

// cost is a class's cost at a backlog (the formulas of LoadBased).
func (cl *class) cost(phase int, backlog float64, est int) float64 {
	if phase == phaseDecode {
		bs := cl.blockSize
		return (backlog + float64((est+bs-1)/bs)) / cl.capacity
	}
	return backlog / cl.capacity
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// exclude takes the workers the request excludes out of candidacy for the
// request's pick, and returns what puts them back. The caller holds the
// picker's lock until then.
func (x *index) exclude(req *Request) (restore func()) {
	if len(req.Exclude) == 0 {
		return func() {}
	}
	return x.ban(func(i int) bool { return req.excluded(x.cands[i].w) })
}

// ban takes the candidates for which out holds out of candidacy, as
// exclude does, and returns what puts them back.
func (x *index) ban(out func(i int) bool) (restore func()) {
	type saved struct {
		i int
		s cstate
	}
	var undo []saved
	for i := range x.cands {
		if out(i) {
			undo = append(undo, saved{i, x.st[i]})
			s := x.st[i]
			s.banned = true
			x.set(i, s)
		}
	}
	return func() {
		for _, u := range undo {
			x.set(u.i, u.s)
		}
	}
}

// take returns the set's round-robin position and moves it on; the
// caller holds the picker's lock.
func (x *index) take() uint64 {
	v := *x.cursor
	*x.cursor++
	return v
}

// rotate returns the candidate at the round-robin cursor among those the
// request does not exclude and, while busyness can be judged, that are
// not busy: ErrAllBusy when every one left is busy.
func (x *index) rotate(cursor uint64) (int, string, error) {
	skipBusy := x.judgesBusy()
	n := len(x.cands) - x.excludedN
	if skipBusy {
		n -= x.busyN
	}
	if n <= 0 {
		if skipBusy && x.busyN > 0 {
			return 0, "", ErrAllBusy
		}
		return 0, "", ErrNoWorkers
	}
	k := int(cursor % uint64(n))
	if x.excludedN == 0 && (!skipBusy || x.busyN == 0) {
		return k, ReasonRoundRobinStale, nil
	}
	for i := range x.cands {
		if s := &x.st[i]; s.banned || skipBusy && s.busy {
			continue
		}
		if k == 0 {
			return i, ReasonRoundRobinStale, nil
		}
		k--
	}
	return 0, "", ErrNoWorkers // not reached: n counts the candidates left
}

// judgesBusy reports whether busy candidates are passed over: while any
// candidate has a fresh sample, which tells its blocks in use. With none
// (the load stream silent or cut) nothing can be judged, and the
// round-robin rule ignores busyness as it ignores load.
func (x *index) judgesBusy() bool { return x.sampled > 0 }

// cheapestStalled returns the cheapest candidate excluded only as possibly
// stalled that has a cost (its class's capacity), not busy and not
// excluded by the request, ties broken by the cursor in candidate order;
// false when there is none. A scan: only a pick that finds no other
// candidate with a cost comes here.
func (x *index) cheapestStalled(cursor uint64, est int) (int, bool) {
	best, ties := inf, 0
	for i := range x.st {
		s := &x.st[i]
		ci := x.cands[i].class
		if !s.stalled || s.busy || s.banned || ci < 0 {
			continue
		}
		switch cost := x.classes[ci].cost(x.phase, s.backlog, est); {
		case cost < best:
			best, ties = cost, 1
		case cost == best:
			ties++
		}
	}
	if ties == 0 {
		return 0, false
	}
	k := int(cursor % uint64(ties))
	for i := range x.st {
		s := &x.st[i]
		ci := x.cands[i].class
		if !s.stalled || s.busy || s.banned || ci < 0 || x.classes[ci].cost(x.phase, s.backlog, est) != best {
			continue
		}
		if k == 0 {
			return i, true
		}
		k--
	}
	return 0, false // not reached: ties counts them
}

// choose returns the candidate the rules pick and the reason, given the
// phase's round-robin cursor: ErrAllBusy when every candidate that could
// be chosen is busy, ErrNoWorkers when the request excludes them all.
func (x *index) choose(cursor uint64, est int) (int, string, error) {
	if x.fresh == 0 {
		// No candidate has a cost: rotate. Busy candidates are passed
		// over still while any has a fresh sample at all (its blocks in
		// use are known though this phase's backlog is not).
		return x.rotate(cursor)
	}
	best, ties, tied := inf, 0, 0
	first := -1
	for ci := range x.classes {
		cl := &x.classes[ci]
		m, cnt := cl.tree.root()
		if m == inf {
			continue
		}
		switch cost := cl.cost(x.phase, m, est); {
		case first < 0 || cost < best:
			best, ties, tied, first = cost, cnt, 1, ci
		case cost == best:
			ties += cnt
			tied++
		}
	}
	if first < 0 {
		// No candidate that may be chosen has a cost. A possibly
		// stalled one is passed over only while another has a cost: the
		// cheapest of those that have one is chosen.
		if i, ok := x.cheapestStalled(cursor, est); ok {
			return i, ReasonLoad, nil
		}
		// Fresh samples exist but no candidate that may be chosen has
		// every field a cost needs: rotate over those not excluded; when
		// every one is excluded or busy, the request waits if any is busy,
		// else rotate over all.
		m, cnt := x.incl.root()
		switch {
		case m == 0:
			return x.incl.kth(int(cursor % uint64(cnt))), ReasonRoundRobinStale, nil
		case x.busyN > 0:
			return 0, "", ErrAllBusy
		}
		return x.rotate(cursor)
	}
	k := int(cursor % uint64(ties))
	if tied == 1 {
		cl := &x.classes[first]
		return int(cl.pos[cl.tree.kth(k)]), ReasonLoad, nil
	}
	// Ties across classes: the k-th tied candidate in candidate order is
	// at the smallest position p with more than k tied ones before p+1.
	before := func(p int) int {
		total := 0
		for ci := first; ci < len(x.classes); ci++ {
			cl := &x.classes[ci]
			m, _ := cl.tree.root()
			if m == inf || cl.cost(x.phase, m, est) != best {
				continue
			}
			j, _ := slices.BinarySearch(cl.pos, int32(p))
			total += cl.tree.countPrefix(j, m)
		}
		return total
	}
	lo, hi := 0, len(x.cands)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if before(mid+1) > k {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, ReasonLoad, nil
}

// deadline: candidate i may change state at at.
type deadline struct {
	at time.Time
	i  int32
}

// deadlines is a min-heap by instant.
type deadlines []deadline

func (d *deadlines) push(v deadline) {
	*d = append(*d, v)
	h := *d
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].at.Before(h[p].at) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (d *deadlines) pop() deadline {
	h := *d
	v := h[0]
	h[0] = h[len(h)-1]
	*d = h[:len(h)-1]
	d.down(0)
	return v
}

func (d deadlines) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(d) {
			return
		}
		if r := l + 1; r < len(d) && d[r].at.Before(d[l].at) {
			l = r
		}
		if !d[l].at.Before(d[i].at) {
			return
		}
		d[i], d[l] = d[l], d[i]
		i = l
	}
}
