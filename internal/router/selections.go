package router

import (
	"sync"
	"sync/atomic"

	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// maxSelectionKeys bounds the per-rank selection counters; the admin API
// prunes departed workers, so the bound is only reached by a fleet larger
// than any the router is sized for.
const maxSelectionKeys = 1 << 16

// selections counts picks per (worker, rank) since the router started, for
// GET /admin/dynamo/load (continuum top turns them into rates). Prometheus
// keeps only role and reason, which bounds its cardinality. Counting a
// known key takes no lock: a lookup in a sync.Map and an atomic add.
type selections struct {
	n    sync.Map // load.Key -> *atomic.Uint64
	keys atomic.Int64
	mu   sync.Mutex // serialises inserts and pruning (the bound)
}

func (s *selections) add(k load.Key) {
	if c, ok := s.n.Load(k); ok {
		c.(*atomic.Uint64).Add(1)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.n.Load(k)
	if !ok {
		if s.keys.Load() >= maxSelectionKeys {
			return
		}
		c = new(atomic.Uint64)
		s.n.Store(k, c)
		s.keys.Add(1)
	}
	c.(*atomic.Uint64).Add(1)
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
		out[key] = c.(*atomic.Uint64).Load()
		return true
	})
	return out
}
