package router

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// maxSelectionKeys bounds the per-rank selection counters. Departed
// workers' counters are forgotten as keys are added (pruneFrom) and when
// the admin API lists the load, so the bound is only reached by a fleet
// larger than any the router is sized for.
const maxSelectionKeys = 1 << 16

// pruneFrom is the least number of keys at which adding one first forgets
// the keys of workers no longer in the fleet; after that, twice the keys
// left, at most the bound (a prune at the bound that frees less than an
// eighth of it holds the next off for pruneWait: a fleet of that many live
// ranks would otherwise prune on every insert). Restarted workers come back
// under new instance ids, so a fleet that churns would otherwise fill the
// map with the dead, and the living would go uncounted past the bound.
const (
	pruneFrom = 1024
	pruneWait = time.Second
)

// selections counts picks per (namespace, worker, rank) since the router started, for
// GET /admin/dynamo/load (continuum top turns them into rates), and
// remembers when each last served a pinned request (which worker of a
// failed pair to blame). Prometheus keeps only role and reason, which
// bounds its cardinality. Counting a known key takes no lock: a lookup in
// a sync.Map and an atomic add.
type selections struct {
	n    sync.Map // load.Key -> *selection
	keys atomic.Int64
	mu   sync.Mutex // serialises inserts and pruning (the bound)
	// live, when set, gives what tells the keys of the fleet's workers now.
	live func() func(load.Key) bool
	// pruneAt is the number of keys at which an insert prunes, not before
	// holdUntil (under mu).
	pruneAt   int64
	holdUntil time.Time
}

type selection struct {
	picks atomic.Uint64
	// served is when it last served a pinned request (Unix ns; 0: never).
	served atomic.Int64
}

// get returns k's counters, made when absent (nil past the bound).
func (s *selections) get(k load.Key) *selection {
	if c, ok := s.n.Load(k); ok {
		return c.(*selection)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.n.Load(k)
	if !ok {
		if n := s.keys.Load(); n >= max(s.pruneAt, pruneFrom) && s.live != nil && time.Now().After(s.holdUntil) {
			s.prune(s.live())
			left := s.keys.Load()
			s.pruneAt = min(2*left, maxSelectionKeys)
			if n >= maxSelectionKeys && n-left < maxSelectionKeys/8 {
				s.holdUntil = time.Now().Add(pruneWait)
			}
		}
		if s.keys.Load() >= maxSelectionKeys {
			return nil
		}
		c = new(selection)
		s.n.Store(k, c)
		s.keys.Add(1)
	}
	return c.(*selection)
}

func (s *selections) add(k load.Key) {
	if c := s.get(k); c != nil {
		c.picks.Add(1)
	}
}

// served records that k served a pinned request at now.
func (s *selections) served(k load.Key, now time.Time) {
	if c := s.get(k); c != nil {
		c.served.Store(now.UnixNano())
	}
}

// lastServed is when k last served a pinned request (zero: never, or not
// since the router started).
func (s *selections) lastServed(k load.Key) time.Time {
	if c, ok := s.n.Load(k); ok {
		if ns := c.(*selection).served.Load(); ns != 0 {
			return time.Unix(0, ns)
		}
	}
	return time.Time{}
}

// snapshot copies the counters of live keys and forgets the others.
func (s *selections) snapshot(live func(load.Key) bool) map[load.Key]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune(live)
	out := make(map[load.Key]uint64)
	s.n.Range(func(k, c any) bool {
		out[k.(load.Key)] = c.(*selection).picks.Load()
		return true
	})
	return out
}

// prune forgets the keys live does not tell (under mu).
func (s *selections) prune(live func(load.Key) bool) {
	s.n.Range(func(k, _ any) bool {
		if key := k.(load.Key); !live(key) {
			s.n.Delete(key)
			s.keys.Add(-1)
		}
		return true
	})
}

// liveRanks tells the keys of the ranks of snap's workers.
func liveRanks(snap *fleet.Snapshot) func(load.Key) bool {
	return func(k load.Key) bool {
		w := snap.Workers.Get(k.ID())
		return w != nil && k.DPRank >= w.DPStartRank && k.DPRank < w.DPStartRank+max(w.DPSize, 1)
	}
}
