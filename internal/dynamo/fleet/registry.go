package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// MaxMixedWarningsPerPublish bounds the mixed-namespace warnings one publish
// logs; the rest are summarised in one line.
const MaxMixedWarningsPerPublish = 8

// ProblemObserver is told about problems that appear in a published
// snapshot and were not in the previous one (metrics, logs).
type ProblemObserver func(p Problem)

// Registry publishes fleet snapshots. Readers call Snapshot without locks;
// Wait blocks until a newer generation is published. The snapshot is always
// swapped before its generation is announced.
type Registry struct {
	logger  *slog.Logger
	observe ProblemObserver

	snap atomic.Pointer[Snapshot]
	gen  atomic.Uint64

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every publish
	problems map[string]bool
	mixed    map[NamespaceModel]bool
	// reset: the view was emptied (Reset) and the next publish is a new
	// watcher's first; what it shows is compared with what was reported,
	// whatever the empty snapshot between says.
	reset bool
}

// NewRegistry returns a registry holding an empty snapshot at generation 0.
func NewRegistry(logger *slog.Logger, observe ProblemObserver) *Registry {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{logger: logger, observe: observe, changed: make(chan struct{}),
		problems: map[string]bool{}, mixed: map[NamespaceModel]bool{}}
	r.snap.Store(&Snapshot{})
	return r
}

// Snapshot returns the current fleet view. It never blocks.
func (r *Registry) Snapshot() *Snapshot { return r.snap.Load() }

// Generation returns the generation of the current snapshot.
func (r *Registry) Generation() uint64 { return r.gen.Load() }

// Wait blocks until the generation is greater than after, and returns it.
// It holds no snapshot while it waits.
func (r *Registry) Wait(ctx context.Context, after uint64) (uint64, error) {
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		if g := r.gen.Load(); g > after {
			return g, nil
		}
		select {
		case <-ctx.Done():
			return r.gen.Load(), ctx.Err()
		case <-ch:
		}
	}
}

// Changed returns a channel closed when a generation newer than the
// current one is published. Take it before reading the snapshot it is to
// follow, so that no generation falls between the two.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Subscription follows the registry's generations. It holds a number, never
// a snapshot, so a slow subscriber pins no memory.
type Subscription struct {
	reg  *Registry
	seen uint64
}

// Subscribe returns a subscription that has seen the current generation.
func (r *Registry) Subscribe() *Subscription { return &Subscription{reg: r, seen: r.Generation()} }

// Next blocks until a newer generation is published and returns the latest.
func (s *Subscription) Next(ctx context.Context) (uint64, error) {
	g, err := s.reg.Wait(ctx, s.seen)
	if err == nil {
		s.seen = g
	}
	return g, err
}

// Publish installs snap as the next generation and returns it.
func (r *Registry) Publish(snap *Snapshot) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report(snap)
	return r.storeLocked(snap)
}

func (r *Registry) storeLocked(snap *Snapshot) uint64 {
	r.snap.Store(snap)
	g := r.gen.Add(1)
	close(r.changed)
	r.changed = make(chan struct{})
	return g
}

// Reset empties the view (a watcher replaced by another), as a new
// generation. What was reported stays remembered: the next watcher reads
// the same records again, and a conflict or a mixed namespace that never
// left the store is not logged or counted a second time.
func (r *Registry) Reset() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reset = true
	return r.storeLocked(&Snapshot{})
}

// problemKey is a problem's identity: a problem is logged and counted when
// one of its identity appears, and not again while it lasts. A record
// refused on its own (malformed, unsupported or oversized: one key) is one problem
// per kind and key, whatever its reason says: the reason quotes the
// record's value, and a key put again with another bad value is the same
// refusal, logged once per key. Other problems are told apart by all they
// say, a conflict by its whole key set too, so that one whose keys change
// is a new conflict.
func problemKey(p Problem) string {
	if (p.Kind == ProblemMalformed || p.Kind == ProblemUnsupported || p.Kind == ProblemOversized) && p.KeyCount == 1 && len(p.Keys) == 1 {
		return p.Kind + "\x00" + p.Keys[0]
	}
	return p.Kind + "\x00" + p.Namespace + "\x00" + strings.Join(p.Keys, "\x00") + "\x00" + fmt.Sprint(p.KeyCount) + "\x00" + p.Reason +
		"\x00" + strconv.FormatUint(p.keySet, 16)
}

// report logs what is new in snap: problems (once per identity while they
// last, see problemKey), release versions (once per instance) and mixed namespaces. It
// costs nothing for the parts of the view that did not change.
func (r *Registry) report(snap *Snapshot) {
	prev := r.snap.Load()
	// After a reset, the new watcher's first view is compared with what
	// was reported before it, even where it matches the empty snapshot:
	// a conflict or mixed namespace it no longer shows has left, and is
	// reported again if it comes back.
	reset := r.reset
	r.reset = false
	if reset || snap.problemsGen != prev.problemsGen || len(snap.Problems) != len(prev.Problems) {
		seen := make(map[string]bool, len(snap.Problems))
		for _, p := range snap.Problems {
			k := problemKey(p)
			seen[k] = true
			if r.problems[k] {
				continue
			}
			if r.observe != nil {
				r.observe(p)
			}
			r.logger.Warn("dynamo discovery problem", "kind", p.Kind, "namespace", p.Namespace, "keys", p.Keys, "count", p.KeyCount, "reason", p.Reason)
		}
		r.problems = seen
	}
	if r.logger.Enabled(context.Background(), slog.LevelDebug) {
		for _, w := range snap.releases {
			r.logger.Debug("dynamo worker release", "namespace", w.ID.Namespace, "instance_id", w.InstanceHex(), "versions", w.Card.Typed.Versions)
		}
	}
	if reset || !sameList(snap.Mixed, prev.Mixed) {
		r.reportMixed(snap)
	}
}

// sameList reports whether a and b are one list: the reducer hands each
// snapshot the list of the one before unless it rebuilt it.
func sameList[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// reportMixed warns once per (namespace, model) that becomes mixed, with
// its workers counted by role, at most MaxMixedWarningsPerPublish times
// per publish plus one summary line (how many pairs were logged and how
// many left out: model names come from the fleet's records).
func (r *Registry) reportMixed(snap *Snapshot) {
	now := make(map[NamespaceModel]bool, len(snap.Mixed))
	var fresh []NamespaceModel
	for _, k := range snap.Mixed {
		now[k] = true
		if !r.mixed[k] {
			fresh = append(fresh, k)
		}
	}
	r.mixed = now
	for i, k := range fresh {
		if i == MaxMixedWarningsPerPublish {
			r.logger.Warn("more dynamo namespaces became mixed", "omitted", len(fresh)-i, "logged", i)
			break
		}
		byRole := map[Role]int{}
		for w := range snap.Workers.Serving(k.Namespace, k.Model) {
			byRole[w.Role]++
		}
		r.logger.Warn("dynamo namespace serves a model with both prefill/decode and aggregated workers; a direct-mode frontend picks one worker set per request and refuses instance ids of the other",
			"namespace", k.Namespace, "model", k.Model,
			"prefill", byRole[RolePrefill], "decode", byRole[RoleDecode], "aggregated", byRole[RoleAggregated])
	}
}
