package router

import (
	"sync"

	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// maxSelectionKeys bounds the per-rank selection counters; the admin API
// prunes departed workers, so the bound is only reached by a fleet larger
// than any the router is sized for.
const maxSelectionKeys = 1 << 16

// selections counts picks per (worker, rank) since the router started, for
// GET /admin/dynamo/load (continuum top turns them into rates). Prometheus
// keeps only role and reason, which bounds its cardinality.
type selections struct {
	mu sync.Mutex
	n  map[load.Key]uint64
}

func (s *selections) add(k load.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[load.Key]uint64{}
	}
	if _, ok := s.n[k]; !ok && len(s.n) >= maxSelectionKeys {
		return
	}
	s.n[k]++
}

// snapshot copies the counters of live keys and forgets the others.
func (s *selections) snapshot(live func(load.Key) bool) map[load.Key]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[load.Key]uint64, len(s.n))
	for k, v := range s.n {
		if !live(k) {
			delete(s.n, k)
			continue
		}
		out[k] = v
	}
	return out
}
