package kv

import (
	"slices"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// A rank that was sent a request is about to hold its prompt's blocks:
// it prefills in turn, so a later request with the same prefix pinned to
// it finds them cached. kv-events announce those blocks only once their
// prefill is done, so, to the index alone, every request sharing a prefix
// that arrives during that prefill (or while it waits in the rank's
// queue) looks like a miss everywhere, and is spread by load over ranks
// that will all compute the prefix again. The picker therefore counts, for
// each rank, the leading blocks of the requests in flight on it as held,
// beside what the index says: a rank's overlap is the larger of the two.
// It does so only where backlogs compete (some candidate has a fresh
// sample): there the rank's backlog, which includes those requests, still
// weighs against the credit, so a burst sharing a prefix gathers on one
// rank only while waiting there beats computing the prefix elsewhere.
// Without backlogs the overlap alone would decide, and a burst would pile
// onto whichever rank took its first request.
// A dispatch's blocks stop counting when it ends (its prefill is long
// done, and the index has heard of its blocks) or after the in-flight
// window, like its load in the ledger.

// Bounds of the in-flight prefixes, independent of what the network sends:
// a request whose prompt is longer records only its first
// maxPendingBlocksPerRequest blocks, and past maxPendingRequests or
// maxPendingBlocks recorded the oldest dispatches are forgotten first.
// A request compares its blocks with at most maxPendingScan of the
// in-flight prompts sharing its first block, the latest first.
const (
	maxPendingRequests         = 16384
	maxPendingBlocksPerRequest = 16384
	maxPendingBlocks           = 1 << 21
	maxPendingScan             = 512
)

// pendingKey groups in-flight prefixes by their first block's hash and
// block size: only those can share leading blocks with a request.
type pendingKey struct {
	first uint64
	bs    int
}

type pendingPrefix struct {
	ticket uint64
	rank   load.Key
	key    pendingKey
	hashes []uint64
	at     time.Time
}

// pending holds the prompt blocks of the dispatches in flight, per rank.
type pending struct {
	mu       sync.Mutex
	byTicket map[uint64]*pendingPrefix
	byKey    map[pendingKey][]*pendingPrefix
	// order is the dispatches in the order they were recorded (released
	// ones are skipped when met), to forget the oldest first.
	order  []*pendingPrefix
	blocks int
}

func newPending() *pending {
	return &pending{byTicket: map[uint64]*pendingPrefix{}, byKey: map[pendingKey][]*pendingPrefix{}}
}

// add records that the dispatch t sends a prompt with hashes (of block
// size bs) to rank.
func (p *pending) add(t pick.Ticket, rank load.Key, bs int, hashes []uint64, now time.Time) {
	if t.ID() == 0 || len(hashes) == 0 {
		return
	}
	n := min(len(hashes), maxPendingBlocksPerRequest)
	e := &pendingPrefix{ticket: t.ID(), rank: rank, key: pendingKey{hashes[0], bs}, hashes: slices.Clone(hashes[:n]), at: now}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expire(now)
	for len(p.byTicket) >= maxPendingRequests || p.blocks+n > maxPendingBlocks {
		if !p.dropOldest() {
			break
		}
	}
	p.byTicket[e.ticket] = e
	p.byKey[e.key] = append(p.byKey[e.key], e)
	p.order = append(p.order, e)
	p.blocks += n
}

// done forgets dispatch t's prompt.
func (p *pending) done(t pick.Ticket) {
	if t.ID() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.byTicket[t.ID()]; e != nil {
		p.remove(e)
	}
	p.compact()
}

// overlaps appends to ms, for hashes of block size bs, the most leading
// blocks each rank's in-flight prompts share with hashes, and returns ms.
func (p *pending) overlaps(hashes []uint64, bs int, now time.Time, ms []Match) []Match {
	if len(hashes) == 0 {
		return ms
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	start := len(ms)
	var at map[load.Key]int
	list := p.byKey[pendingKey{hashes[0], bs}]
	for k := len(list) - 1; k >= max(0, len(list)-maxPendingScan); k-- {
		e := list[k]
		if now.Sub(e.at) > pick.InFlightWindow {
			continue
		}
		n := commonPrefix(hashes, e.hashes)
		// Ranks already listed are found by scanning while they are few,
		// then through a map (a prefix shared fleet-wide).
		i := -1
		switch {
		case at != nil:
			if j, ok := at[e.rank]; ok {
				i = j
			}
		default:
			i = slices.IndexFunc(ms[start:], func(m Match) bool { return m.Rank == e.rank })
			if i >= 0 {
				i += start
			}
		}
		if i >= 0 {
			ms[i].Blocks = max(ms[i].Blocks, n)
			continue
		}
		ms = append(ms, Match{Rank: e.rank, Blocks: n})
		if at != nil {
			at[e.rank] = len(ms) - 1
		} else if len(ms)-start > smallMatches {
			at = make(map[load.Key]int, 2*smallMatches)
			for j := start; j < len(ms); j++ {
				at[ms[j].Rank] = j
			}
		}
	}
	return ms
}

// size returns the dispatches and blocks recorded.
func (p *pending) size() (requests, blocks int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byTicket), p.blocks
}

func commonPrefix(a, b []uint64) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// remove forgets e; p.mu is held.
func (p *pending) remove(e *pendingPrefix) {
	if p.byTicket[e.ticket] != e {
		return
	}
	delete(p.byTicket, e.ticket)
	list := p.byKey[e.key]
	if i := slices.Index(list, e); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(p.byKey, e.key)
	} else {
		p.byKey[e.key] = list
	}
	p.blocks -= len(e.hashes)
	e.hashes = nil
}

// dropOldest forgets the oldest dispatch still recorded; p.mu is held.
func (p *pending) dropOldest() bool {
	for len(p.order) > 0 {
		e := p.order[0]
		p.order[0] = nil
		p.order = p.order[1:]
		if p.byTicket[e.ticket] == e {
			p.remove(e)
			return true
		}
	}
	return false
}

// expire forgets the dispatches older than the in-flight window; p.mu is
// held.
func (p *pending) expire(now time.Time) {
	for len(p.order) > 0 {
		e := p.order[0]
		if p.byTicket[e.ticket] == e && now.Sub(e.at) <= pick.InFlightWindow {
			break
		}
		p.order[0] = nil
		p.order = p.order[1:]
		p.remove(e)
	}
	p.compact()
}

// compact drops released dispatches from the front of order and, when
// most of order is released, rebuilds it, so that order stays within a
// small multiple of what is recorded; p.mu is held.
func (p *pending) compact() {
	for len(p.order) > 0 && p.byTicket[p.order[0].ticket] != p.order[0] {
		p.order[0] = nil
		p.order = p.order[1:]
	}
	if len(p.order) > 64 && len(p.order) > 2*len(p.byTicket) {
		live := make([]*pendingPrefix, 0, len(p.byTicket))
		for _, e := range p.order {
			if p.byTicket[e.ticket] == e {
				live = append(live, e)
			}
		}
		p.order = live
	}
}
