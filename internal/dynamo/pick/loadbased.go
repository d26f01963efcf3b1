package pick

import (
	"errors"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// Loads is the load view a picker reads: the store.
type Loads interface {
	Read(fn func(load.ReadView))
	MaxStaleness() time.Duration
}

// LoadBased is the default picker: Dynamo's load-only cost formulas.
//
//	prefill cost = active_prefill_tokens / max_num_batched_tokens
//	decode cost  = (active_decode_blocks + ceil(est_prompt_tokens / block_size)) / total_kv_blocks
//
// Backlogs come from fresh samples plus what was dispatched since (its
// ledger); quiet workers have backlog 0; a worker that went silent with a
// backlog, or that may be stalled, has no cost while another has one; with
// no fresh sample anywhere, a per-phase round-robin cursor decides. A
// request may exclude workers (a re-pin after a failure) and set a busy
// threshold (BusyThreshold): neither an excluded nor a busy candidate is
// chosen.
//
// A pick does not scan the candidates: each request shape (model and
// candidate namespaces) of a snapshot has an index of its candidates whose
// costs are kept up to date from the store's and the ledger's change logs
// and a deadline heap for changes that come with time (see index).
type LoadBased struct {
	loads Loads

	// rr holds the round-robin cursor of each candidate set (each
	// index's, advanced under mu).
	rr rotations

	// mu guards the ledger with the indexes built from it, so that a pick
	// and the dispatch it records are one step.
	mu     sync.Mutex
	ledger ledger
	caches [2]*shapeCache
	keyBuf []byte
	// busy is the busy rule of the requests and its latches.
	busy busyState
	// call is the pick in progress and runCall its callback, made once.
	call    pickCall
	runCall func(load.ReadView)
	// scorer makes choices during one ReserveScored; candBuf is its
	// reused candidate list, scoredBuf and posBuf those it is handed when
	// some candidates may not compete.
	scorer    Scorer
	candBuf   []Candidate
	scoredBuf []Candidate
	posBuf    []int
}

// NewLoadBased returns a load-based picker over loads.
func NewLoadBased(loads Loads) *LoadBased {
	p := &LoadBased{loads: loads, ledger: newLedger(), busy: busyState{latched: map[load.Key]struct{}{}}}
	p.ledger.since = func(k load.Key) (t time.Time) {
		loads.Read(func(r load.ReadView) { t = r.Since(k) })
		return t
	}
	return p
}

var _ Picker = (*LoadBased)(nil)

// shapeCache is the decode indexes of one snapshot by request shape (and
// their prefill indexes). It reads the store's and the ledger's change
// logs once for all of them and hands each changed key to the indexes
// that hold it.
type shapeCache struct {
	snap    *fleet.Snapshot
	indexes map[string]*index
	all     []*index // decode and prefill
	owners  map[load.Key][]owner
	// storeVer, ledgerVer: the log versions handed out so far (none
	// before the first drain: every index is then new).
	storeVer, ledgerVer uint64
	drained             bool
}

// owner is a candidate of an index.
type owner struct {
	x   *index
	pos int32
}

func newShapeCache(snap *fleet.Snapshot) *shapeCache {
	return &shapeCache{snap: snap, indexes: map[string]*index{}, owners: map[load.Key][]owner{}}
}

// add registers a new index's candidates. It is built at its first sync,
// from the store and ledger as they are then.
func (c *shapeCache) add(x *index) {
	c.all = append(c.all, x)
	for i, cd := range x.cands {
		c.owners[cd.key] = append(c.owners[cd.key], owner{x, int32(i)})
	}
}

// drain hands the changes logged since the last drain to the indexes.
// The caller holds the store's read lock (r) and the picker's lock.
func (c *shapeCache) drain(r load.ReadView, l *ledger) {
	each := func(k load.Key) {
		for _, o := range c.owners[k] {
			o.x.markDirty(o.pos)
		}
	}
	if !c.drained {
		c.drained, c.storeVer = true, r.Version()
		if l != nil {
			c.ledgerVer = l.version
		}
		return
	}
	ok := r.ChangedSince(c.storeVer, each)
	c.storeVer = r.Version()
	if l != nil {
		ok = l.changedSince(c.ledgerVer, each) && ok
		c.ledgerVer = l.version
	}
	if !ok {
		for _, x := range c.all {
			x.stale = true
		}
	}
}

// maxShapes bounds the request shapes indexed per snapshot; past it the
// cache starts over.
const maxShapes = 256

// candidate is one (worker, rank).
type candidate struct {
	w     *fleet.Worker
	group int
	rank  uint32
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

// groups finds the request's model in each candidate namespace: the
// snapshot yields its workers by role and id, found in time logarithmic in
// the fleet, and each role keeps that order.
func groups(snap *fleet.Snapshot, req Request) []group {
	var out []group
	for _, ns := range req.Namespaces {
		g := group{namespace: ns}
		for w := range snap.Workers.Serving(ns, req.Model) {
			switch w.Role {
			case fleet.RoleAggregated:
				g.aggregated = append(g.aggregated, w)
			case fleet.RoleDecode:
				g.decode = append(g.decode, w)
			case fleet.RolePrefill:
				g.prefill = append(g.prefill, w)
			}
		}
		if len(g.prefill)+len(g.decode)+len(g.aggregated) > 0 {
			out = append(out, g)
		}
	}
	return out
}

// Pick chooses without recording the dispatch: what Reserve would pick at
// now.
func (p *LoadBased) Pick(snap *fleet.Snapshot, req Request, now time.Time) (Pin, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pick(snap, req, now)
}

// Reserve implements Picker.
func (p *LoadBased) Reserve(snap *fleet.Snapshot, req Request, now time.Time) (Pin, Ticket, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pin, err := p.pick(snap, req, now)
	if err != nil {
		return pin, Ticket{}, err
	}
	book := max(req.EstPromptTokens, req.BookTokens)
	return pin, p.ledger.dispatched(pin, book, book, now), nil
}

// Release implements Picker.
func (p *LoadBased) Release(t Ticket) {
	if t.id == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ledger.finished(t)
}

// Dispatched records a dispatch the picker did not choose (a pin forced by
// other means) as Reserve records its own.
func (p *LoadBased) Dispatched(pin Pin, promptTokens int, now time.Time) Ticket {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ledger.dispatched(pin, promptTokens, promptTokens, now)
}

// decodeIndex returns the cache of snap and the decode index of the
// request's shape in it, or nil when no worker serves the model. The
// caller holds p.mu.
func (p *LoadBased) decodeIndex(snap *fleet.Snapshot, req Request) (*shapeCache, *index) {
	c := p.caches[0]
	if c == nil || c.snap != snap {
		if c2 := p.caches[1]; c2 != nil && c2.snap == snap {
			p.caches[0], p.caches[1] = c2, c
		} else {
			p.caches[0], p.caches[1] = newShapeCache(snap), c
			p.pruneLatches(snap)
		}
		c = p.caches[0]
	}
	key := append(p.keyBuf[:0], req.Model...)
	for _, ns := range req.Namespaces {
		key = append(append(key, 0), ns...)
	}
	p.keyBuf = key
	if x, ok := c.indexes[string(key)]; ok {
		return c, x
	}
	gs := groups(snap, req)
	decode := appendDecodeCandidates(nil, gs)
	if len(decode) == 0 {
		return c, nil
	}
	if len(c.indexes) >= maxShapes {
		*c = *newShapeCache(snap) // start over (the logs are read from scratch)
	}
	x := newIndex(phaseDecode, decode, gs, &p.busy, &p.rr)
	c.indexes[string(key)] = x
	c.add(x)
	return c, x
}

// pick chooses; the caller holds p.mu.
func (p *LoadBased) pick(snap *fleet.Snapshot, req Request, now time.Time) (Pin, error) {
	p.setBusy(req.Busy)
	c, dx := p.decodeIndex(snap, req)
	if dx == nil {
		return Pin{}, ErrNoWorkers
	}
	// The choice runs under the store's read lock through a callback; its
	// inputs and outputs live in the picker (guarded by p.mu) so that no
	// per-pick closure or escaping variable allocates.
	k := &p.call
	*k = pickCall{c: c, dx: dx, req: req, now: now, maxAge: p.loads.MaxStaleness()}
	if p.runCall == nil {
		p.runCall = p.choosePin
	}
	p.loads.Read(p.runCall)
	pin, err := k.pin, k.err
	*k = pickCall{}
	if err != nil {
		return Pin{}, err
	}
	return pin, nil
}

// pickCall is one pick's state while the store is read.
type pickCall struct {
	c      *shapeCache
	dx     *index
	req    Request
	now    time.Time
	maxAge time.Duration
	pin    Pin
	err    error
}

// choosePin makes the choice of p.call under the store's read lock; the
// caller holds p.mu.
func (p *LoadBased) choosePin(r load.ReadView) {
	k := &p.call
	c, dx, now, maxAge := k.c, k.dx, k.now, k.maxAge
	c.drain(r, &p.ledger)
	dx.sync(r, &p.ledger, now, maxAge)
	defer dx.exclude(&k.req)()
	if dx.selfGroups == 0 && p.weighsPrefillFirst(dx) && p.prefillFirst(r) {
		return
	}
	// A namespace whose prefill workers cannot take the request (all
	// busy, or all excluded by a re-pin) leaves the choice: its decode
	// candidates are set aside and decode is chosen again among the other
	// namespaces', so that a free pair elsewhere serves the request rather
	// than a 503 or a wait in the queue. At most one pass per namespace.
	var prefillErr error
	var unban []func()
	defer func() {
		for i := len(unban) - 1; i >= 0; i-- {
			unban[i]()
		}
	}()
	for {
		group, err := p.choosePair(r, dx)
		if err == nil || group < 0 {
			if err != nil && prefillErr != nil {
				err = prefillErr // the namespaces' own reason
			}
			k.err = err
			return
		}
		if prefillErr == nil || errors.Is(err, ErrAllBusy) {
			prefillErr = err
		}
		unban = append(unban, dx.ban(func(i int) bool { return dx.cands[i].group == int32(group) }))
	}
}

// choosePair chooses decode among dx's candidates and, for a decode worker
// of a pair, prefill in its namespace, into p.call's pin. A failure of the
// prefill choice returns the decode candidate's group (namespace); any
// other outcome returns -1.
func (p *LoadBased) choosePair(r load.ReadView, dx *index) (int, error) {
	k := &p.call
	c, now, maxAge := k.c, k.now, k.maxAge
	var i int
	var reason string
	var err error
	scored := false
	if p.scoresDecode(dx) {
		i, reason, scored = p.scored(PhaseDecode, dx)
	}
	if !scored {
		if i, reason, err = dx.choose(dx.take(), k.req.EstPromptTokens); err != nil {
			return -1, err
		}
	}
	d := dx.cands[i]
	g := dx.groups[d.group]
	k.pin = Pin{Namespace: g.namespace, Decode: Target{Worker: d.w, DPRank: d.key.DPRank, SendRank: d.w.DPDeclared}, DecodeReason: reason}
	if d.w.Role == fleet.RoleAggregated || len(g.prefill) == 0 {
		// No prefill id goes with an aggregated worker, and a decode
		// worker without a prefill pool prefills itself.
		k.pin.PrefillReason = ReasonNoPrefillPool
		return -1, nil
	}
	if p.scorer != nil && p.bypass(dx, i) {
		k.pin.PrefillReason, k.pin.Bypass = ReasonConditional, true
		return -1, nil
	}
	if dx.selfGroups > 0 && p.weighsPrefillFirst(dx) && p.prefillFirst(r) {
		// The load rule gave the request to the namespaces that pair
		// prefill and decode workers rather than to one whose workers
		// prefill themselves; among those, prefill is weighed first.
		return -1, nil
	}
	px := dx.prefill[d.group]
	if px == nil {
		px = newIndex(phasePrefill, appendRanks(nil, int(d.group), g.prefill), nil, &p.busy, &p.rr)
		dx.prefill[d.group] = px
		c.add(px)
	}
	px.sync(r, &p.ledger, now, maxAge)
	defer px.exclude(&k.req)()
	j, preason, scored := p.scored(PhasePrefill, px)
	if !scored {
		if j, preason, err = px.choose(px.take(), k.req.EstPromptTokens); err != nil {
			k.pin = Pin{}
			return int(d.group), err
		}
	}
	pc := px.cands[j]
	k.pin.Prefill = &Target{Worker: pc.w, DPRank: pc.key.DPRank, SendRank: pc.w.DPDeclared}
	k.pin.PrefillReason = preason
	return -1, nil
}

// weighsPrefillFirst reports whether the scorer weighs the prefill
// workers of dx's pairing namespaces together (prefillFirst): two or more
// namespaces pair them, and the decode choice is the load rule's.
func (p *LoadBased) weighsPrefillFirst(dx *index) bool {
	return p.scorer != nil && dx.pairedGroups > 1 && !p.scoresDecode(dx)
}

// prefillFirst makes the choice of p.call for a scorer over several
// namespaces that all pair prefill and decode workers for the model: the
// scorer weighs the prefill workers of all of them together, and the
// winner's namespace is the pin's, its decode worker chosen there by the
// load rule. Choosing decode first would hand the request to whichever
// namespace's decode worker is least loaded, and a prefill worker of
// another namespace holding the prompt's prefix would never be weighed
// (the prefix computed again from scratch). Where some candidate
// namespace does not pair them (its decode or aggregated workers prefill
// their own requests), decode is chosen first by the load rule over every
// namespace, and only a decode worker of a pair leads here: the
// self-prefilling workers have no prefill candidate to compete with, and
// where they publish no prefill backlog (vLLM) they would lose every such
// contest.
//
// A winner whose namespace has no decode worker that may take the request
// (every one busy or excluded) is set aside and the scorer asked again
// among the rest. False, with no pin, when the scorer makes no choice:
// the decode-first rule then decides. The caller holds p.mu, under the
// store's read lock.
func (p *LoadBased) prefillFirst(r load.ReadView) bool {
	k := &p.call
	c, dx, now, maxAge := k.c, k.dx, k.now, k.maxAge
	ax := dx.allPrefill
	if ax == nil {
		var cands []candidate
		for gi := range dx.groups {
			if g := &dx.groups[gi]; g.paired() {
				cands = appendRanks(cands, gi, g.prefill)
			}
		}
		ax = newIndex(phasePrefill, cands, nil, &p.busy, &p.rr)
		dx.allPrefill, dx.decodeOf = ax, make([]*index, len(dx.groups))
		c.add(ax)
	}
	ax.sync(r, &p.ledger, now, maxAge)
	restore := []func(){ax.exclude(&k.req)}
	defer func() {
		for i := len(restore) - 1; i >= 0; i-- {
			restore[i]()
		}
	}()
	for range dx.pairedGroups {
		j, preason, scored := p.scored(PhasePrefill, ax)
		if !scored {
			return false
		}
		pc := ax.cands[j]
		g := &dx.groups[pc.group]
		gx := dx.decodeOf[pc.group]
		if gx == nil {
			gx = newIndex(phaseDecode, appendRanks(nil, int(pc.group), g.decode), dx.groups, &p.busy, &p.rr)
			dx.decodeOf[pc.group] = gx
			c.add(gx)
		}
		gx.sync(r, &p.ledger, now, maxAge)
		unexclude := gx.exclude(&k.req)
		i, reason, err := gx.choose(gx.take(), k.req.EstPromptTokens)
		unexclude()
		if err != nil {
			group := pc.group
			restore = append(restore, ax.ban(func(i int) bool { return ax.cands[i].group == group }))
			continue
		}
		d := gx.cands[i]
		k.pin = Pin{Namespace: g.namespace,
			Decode: Target{Worker: d.w, DPRank: d.key.DPRank, SendRank: d.w.DPDeclared}, DecodeReason: reason,
			Prefill: &Target{Worker: pc.w, DPRank: pc.key.DPRank, SendRank: pc.w.DPDeclared}, PrefillReason: preason}
		return true
	}
	return false
}

func target(c candidate) Target {
	return Target{Worker: c.w, DPRank: c.rank, SendRank: c.w.DPDeclared}
}

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

// appendRanks appends every rank of ws as a candidate, at most
// load.MaxStoreKeys in all: the load store holds no more (worker, rank)
// keys, so a rank past them would never have a sample and would look
// forever idle, and a fleet of cards each declaring many ranks must not
// make an index as large as it likes.
func appendRanks(out []candidate, group int, ws []*fleet.Worker) []candidate {
	for _, w := range ws {
		size := max(w.DPSize, 1)
		for r := range size {
			if len(out) >= load.MaxStoreKeys {
				return out
			}
			out = append(out, candidate{w: w, group: group, rank: w.DPStartRank + r})
		}
	}
	return out
}
