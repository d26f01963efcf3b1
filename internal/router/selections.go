package router

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// maxSelectionKeys bounds the per-rank selection counters; the admin API
// prunes departed workers, so the bound is only reached by a fleet larger
// than any the router is sized for.
const maxSelectionKeys = 1 << 16

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
	out := make(map[load.Key]uint64)
	s.n.Range(func(k, c any) bool {
		key := k.(load.Key)
		if !live(key) {
			s.n.Delete(key)
			s.keys.Add(-1)
			return true
		}
		out[key] = c.(*selection).picks.Load()
		return true
	})
	return out
}
