package pick

import (
	"hash/maphash"
	"sync"
)

// maxRotations bounds the cursors a picker keeps: one per candidate set
// it has rotated over. Past it they start over from 0, which costs only
// where the next rotation of each set begins.
const maxRotations = 4096

// rotations holds a round-robin cursor for each candidate set (a phase
// and the workers and ranks it may choose among). One cursor per phase
// shared by every model would give interleaved requests interleaved
// positions: with two models' requests alternating, each model would see
// every other position only, and with two candidates apiece always the
// same one, the other never chosen. A set's own cursor visits each of its
// candidates in turn whatever other sets are picked from between, and
// survives the rebuilding of an index (a new snapshot) when the set is
// the same. Safe for concurrent use.
type rotations struct {
	mu   sync.Mutex
	seed maphash.Seed
	m    map[uint64]*uint64
}

// cursor returns the cursor of the set of cands in phase; the set is
// identified by its members in any order (a hash: two sets that collide
// share a cursor, which costs only evenness between them).
func (r *rotations) cursor(phase int, cands []candidate) *uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.seed, r.m = maphash.MakeSeed(), map[uint64]*uint64{}
	}
	key := setKey(r.seed, phase, cands)
	c, ok := r.m[key]
	if !ok {
		if len(r.m) >= maxRotations {
			clear(r.m)
		}
		c = new(uint64)
		r.m[key] = c
	}
	return c
}

// next takes the cursor's position and moves it on.
func (r *rotations) next(c *uint64) uint64 {
	r.mu.Lock()
	v := *c
	*c++
	r.mu.Unlock()
	return v
}

// setKey hashes a candidate set in any order: the sum of its members'
// hashes, with the phase.
func setKey(seed maphash.Seed, phase int, cands []candidate) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	sum := uint64(phase+1) * 0x9e3779b97f4a7c15
	var b [12]byte
	for _, c := range cands {
		h.Reset()
		_, _ = h.WriteString(c.w.ID.Namespace)
		id := c.w.ID.InstanceID
		for i := range 8 {
			b[i] = byte(id >> (8 * i))
		}
		for i := range 4 {
			b[8+i] = byte(c.rank >> (8 * i))
		}
		_, _ = h.Write(b[:])
		sum += h.Sum64()
	}
	return sum
}
