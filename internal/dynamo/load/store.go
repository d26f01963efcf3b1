// Package load follows Dynamo workers' live load: a bounded store of the
// latest ActiveLoad sample per (namespace, worker, dp rank); the one
// subscription loop (Loop: dial, handshake, read, back off, report state)
// and the pool that keeps one per wanted publisher (Pool), which the
// supervisor, tail-load and the KV-events subscriptions share; and the
// supervisor that keeps the kv_metrics subscriptions and the store in step
// with the registry.
//
// Imports: zmtp, wire, fleet and telemetry only.
package load

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// MaxStoreKeys bounds the (namespace, worker_id, dp_rank) keys the store
// holds.
const MaxStoreKeys = 65536

// MaxRanksPerWorker bounds the ranks the store holds for one worker: the
// most data-parallel ranks a card may declare. Ranks a card leaves out are
// kept (see LiveWorker), but a publisher naming ever new ranks of one
// worker fills this bound, not the store's, and cannot crowd the rest of
// the fleet out of it.
const MaxRanksPerWorker = 1024

// Key is one data-parallel rank of one worker. A worker is its Dynamo
// namespace and its instance id: two graphs a router fronts (a production
// and a canary one) may each run a worker with the same instance id, and
// the two are different workers, with their own load, cache and requests.
// The namespace is held interned, which keeps keys as cheap to hash and
// compare as plain numbers.
type Key struct {
	Namespace fleet.NamespaceID
	WorkerID  uint64
	DPRank    uint32
}

// NS interns a namespace name (fleet.InternNamespace).
func NS(name string) fleet.NamespaceID { return fleet.InternNamespace(name) }

// RankOf is the key of rank of w.
func RankOf(w *fleet.Worker, rank uint32) Key {
	return Key{Namespace: w.NamespaceID(), WorkerID: w.ID.InstanceID, DPRank: rank}
}

// KeyOf is the key of rank of the worker id; RankOf is cheaper where the
// worker is at hand.
func KeyOf(id fleet.WorkerID, rank uint32) Key {
	return Key{Namespace: NS(id.Namespace), WorkerID: id.InstanceID, DPRank: rank}
}

// Worker is a worker as keys name it: its interned namespace and its
// instance id.
type Worker struct {
	Namespace  fleet.NamespaceID
	InstanceID uint64
}

// Worker is the worker k is a rank of.
func (k Key) Worker() Worker { return Worker{k.Namespace, k.WorkerID} }

// ID is the worker k is a rank of, as the fleet names it.
func (k Key) ID() fleet.WorkerID {
	return fleet.WorkerID{Namespace: k.Namespace.String(), InstanceID: k.WorkerID}
}

// LiveSet is a live-worker gate keyed as Keys name workers.
type LiveSet map[Worker]LiveWorker

// NewLiveSet keys live as Keys name workers.
func NewLiveSet(live map[fleet.WorkerID]LiveWorker) LiveSet {
	s := make(LiveSet, len(live))
	for id, w := range live {
		s[Worker{NS(id.Namespace), id.InstanceID}] = w
	}
	return s
}

// Declares reports whether k's worker is live and declares k's rank.
func (s LiveSet) Declares(k Key) bool {
	w, ok := s[k.Worker()]
	if !ok {
		return false
	}
	size := max(w.DPSize, 1)
	return k.DPRank >= w.DPStartRank && uint64(k.DPRank) < uint64(w.DPStartRank)+uint64(size)
}

// Sample is the latest load of one key and where it came from.
type Sample struct {
	Load wire.ActiveLoad
	// Namespace is the namespace of the publisher the sample came
	// through, as discovery found it (its channel record's key), never a
	// value of the payload: with Load.WorkerID and Load.DPRank it names
	// the key the sample is about.
	Namespace   fleet.NamespaceID
	PublisherID uint64
	Sequence    uint64
	// PublishedAt is the publisher's clock (Unix ms); ReceivedAt is ours.
	PublishedAt uint64
	ReceivedAt  time.Time
}

// Backlog is the backlog the sample reports for a worker's phase: a
// prefill worker's queued prompt tokens; a decode or aggregated worker's
// active decode blocks, else its used KV blocks (what Dynamo 1.4.2 vLLM
// workers publish alone). nil when the sample has no field for it. A
// sample past the staleness bound leaves its worker out of the choice only
// when this is above 0 or nil: at 0 the worker went quiet.
func (s *Sample) Backlog(prefill bool) *uint64 {
	if prefill {
		return s.Load.ActivePrefillTokens
	}
	if s.Load.ActiveDecodeBlocks != nil {
		return s.Load.ActiveDecodeBlocks
	}
	return s.Load.KVUsedBlocks
}

// LiveWorker is a worker of the current snapshot, with the ranks its card
// declares.
//
// The store's gate admits a worker, not its ranks: a sample is refused as
// identity_mismatch when its publisher's namespace has no worker of its
// worker_id in the snapshot, and a sample of a live worker is kept
// whatever rank it names. Pickers read the ranks the card declares, so a
// sample of another rank (a card that leaves its data-parallel fields out,
// a publisher counting ranks its own way) never weighs on a choice; it is
// kept, bounded by MaxRanksPerWorker and MaxStoreKeys, and goes when its
// worker leaves.
type LiveWorker struct {
	DPStartRank uint32
	DPSize      uint32
}

// Observer is told when a key's sample changes or goes (gauges).
type Observer interface {
	SampleSet(k Key, s *Sample)
	SampleDropped(k Key)
}

// Store holds the latest sample per key. Reads take a read lock only.
//
// Beside the samples it keeps, per key, the instant up to which the
// router's own dispatches are accounted for (ReadView.Since): a picker
// counts what it sent a worker after that instant on top of the worker's
// sample. It is the last sample's arrival; it stays there when the sample
// is dropped because a change may have been missed (a sequence gap, a new
// session of its publisher): what the sample answered stays answered, and
// what was sent after it stays unanswered; and it moves to the present
// when the worker may have lost what it had: its publisher went or was
// replaced, or the worker (re)joined the fleet. A worker restarted under
// the same id thus competes as quiet at once, instead of carrying the
// requests its previous life was sent.
type Store struct {
	mu      sync.RWMutex
	samples map[Key]*Sample
	byPub   map[uint64]*pubLinks
	live    LiveSet
	obs     Observer
	// accounted holds the accounting instant of keys whose sample was
	// dropped or whose publisher restarted, until a later sample
	// supersedes it (at most MaxStoreKeys); joined holds when each live
	// worker joined the live set.
	accounted map[Key]time.Time
	joined    map[Worker]time.Time
	// ranks counts each worker's keys in samples (MaxRanksPerWorker).
	ranks map[Worker]int

	maxStaleness atomic.Int64
	now          func() time.Time

	// version counts the changes of samples; changeLog holds the key of the
	// last changeLogSize of them (ReadView.ChangedSince).
	version   uint64
	changeLog []Key
}

// changeLogSize bounds the change log: a reader further behind than this
// re-reads everything.
const changeLogSize = 1 << 16

// changed records that k's sample changed or went; the caller holds s.mu.
func (s *Store) changed(k Key) {
	if s.changeLog == nil {
		s.changeLog = make([]Key, changeLogSize)
	}
	s.changeLog[s.version%changeLogSize] = k
	s.version++
}

// NewStore returns an empty store whose gate admits no worker until
// SetLiveAndRetain is called.
func NewStore(maxStaleness time.Duration, obs Observer) *Store {
	s := &Store{samples: map[Key]*Sample{}, byPub: map[uint64]*pubLinks{}, live: LiveSet{}, obs: obs, now: time.Now,
		accounted: map[Key]time.Time{}, joined: map[Worker]time.Time{}, ranks: map[Worker]int{}}
	s.maxStaleness.Store(int64(maxStaleness))
	return s
}

// SetClock replaces the clock of freshness checks and accounting instants
// (time.Now by default), for tests and simulations that run on their own
// time. Call it before the store is shared.
func (s *Store) SetClock(now func() time.Time) { s.now = now }

// SetMaxStaleness changes the default freshness window (hot reload).
func (s *Store) SetMaxStaleness(d time.Duration) { s.maxStaleness.Store(int64(d)) }

// Apply stores a sample if it passes the gates, and returns "" or the
// result it was refused with (identity_mismatch, duplicate, over_capacity).
func (s *Store) Apply(smp Sample) string {
	k := Key{smp.Namespace, smp.Load.WorkerID, smp.Load.DPRank}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live[k.Worker()]; !ok {
		return wire.ResultIdentityMismatch
	}
	old := s.samples[k]
	switch {
	case old != nil && old.PublisherID == smp.PublisherID && smp.Sequence <= old.Sequence:
		return wire.ResultDuplicate
	case old == nil && (len(s.samples) >= MaxStoreKeys || s.ranks[k.Worker()] >= MaxRanksPerWorker):
		return wire.ResultOverCapacity
	}
	if old != nil {
		s.unlink(old.PublisherID, k)
	} else {
		s.ranks[k.Worker()]++
	}
	if at, ok := s.accounted[k]; ok && !smp.ReceivedAt.Before(at) {
		delete(s.accounted, k) // the sample answers everything before it
	}
	v := smp
	s.samples[k] = &v
	pl := s.byPub[v.PublisherID]
	if pl == nil {
		pl = &pubLinks{keys: map[Key]struct{}{}, pruneAt: MaxRanksPerWorker}
		s.byPub[v.PublisherID] = pl
	}
	if _, linked := pl.keys[k]; !linked && len(pl.keys) >= pl.pruneAt {
		s.pruneLinks(v.PublisherID, pl)
	}
	pl.keys[k] = struct{}{}
	s.changed(k)
	if s.obs != nil {
		s.obs.SampleSet(k, &v)
	}
	return ""
}

// DropPublisher forgets every sample a publisher sent when a change may
// have been missed (a sequence gap, a new session). What the dropped
// samples answered stays answered, and what was dispatched since stays
// counted until a sample answers it. The publisher's keys stay known, so
// that its leaving or replacement (ResetPublisher) still reaches them.
func (s *Store) DropPublisher(publisherID uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pl := s.byPub[publisherID]
	if pl == nil {
		return
	}
	for k := range pl.keys {
		if smp := s.samples[k]; smp != nil && smp.PublisherID == publisherID {
			s.account(k, smp.ReceivedAt)
			s.dropLocked(k)
		}
	}
}

// ResetPublisher forgets every sample a publisher sent and what the router
// dispatched to their keys so far: it left or was replaced. Its engine may
// have restarted, losing its work, so neither its old load nor the
// requests it was sent before count any more, also where its samples were
// dropped before (a reconnect to the replacing process). A key another
// publisher has sent for since is that one's.
func (s *Store) ResetPublisher(publisherID uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	pl := s.byPub[publisherID]
	if pl == nil {
		return
	}
	for k := range pl.keys {
		if smp := s.samples[k]; smp != nil && smp.PublisherID != publisherID {
			continue
		}
		s.account(k, now)
		s.dropLocked(k)
	}
	delete(s.byPub, publisherID)
}

// dropLocked removes k's sample (its publisher link is the caller's); s.mu
// is held.
func (s *Store) dropLocked(k Key) {
	if _, ok := s.samples[k]; ok {
		delete(s.samples, k)
		if w := k.Worker(); s.ranks[w] > 1 {
			s.ranks[w]--
		} else {
			delete(s.ranks, w)
		}
	}
	s.changed(k)
	if s.obs != nil {
		s.obs.SampleDropped(k)
	}
}

// account moves k's accounting instant forward to at; s.mu is held. Past
// MaxStoreKeys keys the instant is not kept (the key then counts from its
// worker's joining).
func (s *Store) account(k Key, at time.Time) {
	if _, ok := s.live[k.Worker()]; !ok && s.live != nil {
		return // a worker that left: nothing of it is kept
	}
	if old, ok := s.accounted[k]; ok {
		if at.After(old) {
			s.accounted[k] = at
		}
		return
	}
	if len(s.accounted) < MaxStoreKeys {
		s.accounted[k] = at
	}
}

// pubLinks are the keys a publisher has sent samples for.
type pubLinks struct {
	keys map[Key]struct{}
	// pruneAt is the size at which keys is pruned next (pruneLinks).
	pruneAt int
}

// pruneLinks bounds a publisher's links: the keys of its samples dropped
// after a gap stay linked (so that its leaving still reaches them,
// ResetPublisher), and a publisher naming ever new ranks between gaps
// would grow them without end. At pruneAt keys (MaxRanksPerWorker, the
// ranks its worker may hold, or twice what the last prune kept, so that
// pruning stays linear in the keys added) those without a sample of its
// own go: what was dispatched to them then counts until a sample or the
// in-flight window ends it, as for any key, not until its leaving. s.mu
// is held.
func (s *Store) pruneLinks(publisherID uint64, pl *pubLinks) {
	for k := range pl.keys {
		if smp := s.samples[k]; smp == nil || smp.PublisherID != publisherID {
			delete(pl.keys, k)
		}
	}
	pl.pruneAt = max(MaxRanksPerWorker, 2*len(pl.keys))
}

func (s *Store) unlink(publisherID uint64, k Key) {
	if pl := s.byPub[publisherID]; pl != nil {
		delete(pl.keys, k)
		if len(pl.keys) == 0 {
			delete(s.byPub, publisherID)
		}
	}
}

// SetLiveAndRetain installs the live-worker gate and, in the same step,
// drops the samples (and gauge series) of workers that left, every rank
// of them. A worker is its namespace and id: the same id in another
// namespace is another worker, which neither keeps nor inherits what the
// one that left had. A worker that joins (first seen, or back after
// leaving) starts with nothing dispatched to it: what its previous life
// was sent does not count.
func (s *Store) SetLiveAndRetain(byID map[fleet.WorkerID]LiveWorker) {
	live := NewLiveSet(byID)
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, smp := range s.samples {
		if _, ok := live[k.Worker()]; ok {
			continue
		}
		s.unlink(smp.PublisherID, k)
		s.dropLocked(k)
	}
	// Keys of workers that left whose samples were dropped before (a
	// reconnect, a publisher the subscription cap left out): their links
	// go too, or a publisher that never leaves through a subscription of
	// its own would keep them for the process's life.
	for pid, pl := range s.byPub {
		for k := range pl.keys {
			if _, ok := live[k.Worker()]; !ok {
				delete(pl.keys, k)
			}
		}
		if len(pl.keys) == 0 {
			delete(s.byPub, pid)
		}
	}
	for k := range s.accounted {
		if _, ok := live[k.Worker()]; !ok {
			delete(s.accounted, k)
		}
	}
	for id := range s.joined {
		if _, ok := live[id]; !ok {
			delete(s.joined, id)
		}
	}
	now := s.now()
	for id, w := range live {
		if _, ok := s.joined[id]; ok {
			continue
		}
		s.joined[id] = now
		for r := range max(w.DPSize, 1) {
			s.changed(Key{id.Namespace, id.InstanceID, w.DPStartRank + r})
		}
	}
	s.live = live
}

// Fresh returns the sample of k if it is at most maxAge old.
func (s *Store) Fresh(k Key, maxAge time.Duration) (Sample, bool) {
	s.mu.RLock()
	smp := s.samples[k]
	s.mu.RUnlock()
	if smp == nil || s.now().Sub(smp.ReceivedAt) > maxAge {
		return Sample{}, false
	}
	return *smp, true
}

// FreshDefault is Fresh with dynamo.load.max_staleness.
func (s *Store) FreshDefault(k Key) (Sample, bool) {
	return s.Fresh(k, time.Duration(s.maxStaleness.Load()))
}

// MaxStaleness is the default freshness window.
func (s *Store) MaxStaleness() time.Duration { return time.Duration(s.maxStaleness.Load()) }

// View calls fn with a lookup of the latest samples under one read lock, for
// callers that read many keys at once (pickers). fn must not keep the
// samples nor call back into the store.
func (s *Store) View(fn func(get func(Key) *Sample)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fn(func(k Key) *Sample { return s.samples[k] })
}

// ReadView reads the store under its read lock (Store.Read); it is valid
// only inside the callback.
type ReadView struct{ s *Store }

// Read calls fn with a ReadView under one read lock. fn must not keep the
// samples nor call back into the store.
func (s *Store) Read(fn func(ReadView)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fn(ReadView{s})
}

// Get returns the latest sample of k, or nil.
func (r ReadView) Get(k Key) *Sample { return r.s.samples[k] }

// Since is the instant after which the router's dispatches to k are not
// yet accounted for (by a sample, or because the worker may have lost its
// work since): the latest of its last sample's arrival (kept when that
// sample is dropped), the instant its publisher went or was replaced, and
// the instant its worker joined. Zero when none is known.
func (r ReadView) Since(k Key) time.Time {
	var t time.Time
	if smp := r.s.samples[k]; smp != nil {
		t = smp.ReceivedAt
	}
	if a, ok := r.s.accounted[k]; ok && a.After(t) {
		t = a
	}
	if j, ok := r.s.joined[k.Worker()]; ok && j.After(t) {
		t = j
	}
	return t
}

// Version is the number of sample changes so far.
func (r ReadView) Version() uint64 { return r.s.version }

// ChangedSince calls each with the key of every change after version
// since (a key may come more than once), and returns false without calling
// it when the log no longer reaches back that far.
func (r ReadView) ChangedSince(since uint64, each func(Key)) bool {
	v := r.s.version
	if since > v || v-since > changeLogSize {
		return false
	}
	for ; since < v; since++ {
		each(r.s.changeLog[since%changeLogSize])
	}
	return true
}

// Latest returns the last sample of k, however old.
func (s *Store) Latest(k Key) (Sample, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	smp := s.samples[k]
	if smp == nil {
		return Sample{}, false
	}
	return *smp, true
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.samples)
}
