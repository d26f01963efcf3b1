package load

import (
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// Handle feeds one message to a reader for publisher pid (tests).
type Reader struct{ r *reader }

// NewReader returns a reader counting results into count.
func NewReader(pid uint64, store *Store, count func(string)) *Reader {
	return &Reader{&reader{pid: pid, ns: NS("dynamo"), topic: "kv_metrics", store: store, count: count}}
}

// Handle applies one message.
func (r *Reader) Handle(frames [][]byte, now time.Time) { r.r.handle(frames, now) }

// DepartForTest makes the supervisor's reader for p and tells p stopped
// (it left), and returns the reader's Message: its loop delivering a
// sample it had read.
func (s *Supervisor) DepartForTest(p fleet.Publisher) (late func(frames [][]byte, now time.Time)) {
	h := s.pool.NewHandler(p)
	s.pool.Stopped(p)
	return h.Message
}

// PublisherKeys is the number of keys the store links to publisher pid.
func (s *Store) PublisherKeys(pid uint64) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if pl := s.byPub[pid]; pl != nil {
		return len(pl.keys)
	}
	return 0
}
