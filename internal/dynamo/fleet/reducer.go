package fleet

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// problemGens numbers the problem lists of every reducer, so that the
// registry, comparing a published view's number with the one before it,
// sees a new list even where a new reducer (a watcher replaced by a
// reload) takes over from an old one.
var problemGens atomic.Uint64

// GenerateEndpoint is the only endpoint that becomes a worker.
const GenerateEndpoint = "generate"

// record is one held etcd key: its parsed form, or why it has none.
type record struct {
	key   string
	hash  uint64
	putAt time.Time
	seen  bool // marked during a resync
	// unread: the value was too large for the source to read (PutOversized).
	unread  bool
	problem *Problem

	endpoint *wire.Endpoint
	model    *wire.ModelRecord
	card     *Card
	channel  *wire.EventChannel
	pod      *wire.PodRecord
	ns       string // namespace from the key
}

// Reducer holds the records of one watcher and materialises snapshots from
// them. It is a pure function of the events fed to it and the timestamps
// passed in; it does no I/O and is not safe for concurrent use.
//
// Work is incremental: a put or delete marks the identities it touches, and
// Build recomputes only those and changes them in persistent trees that
// share every untouched node with the previous snapshot.
type Reducer struct {
	seed   maphash.Seed
	spaces map[wire.Keyspace]map[string]*record
	// refused marks keyspaces that refused new keys at their cap;
	// refusedNow collects the marks of a resync in progress, and seen counts
	// the keys a resync has put and still holds (the cap applies to those:
	// a keyspace holds at most the cap after a resync, and twice the cap
	// while one runs, the old keys and the new).
	refused    map[wire.Keyspace]bool
	refusedNow map[wire.Keyspace]bool
	seen       map[wire.Keyspace]int
	resyncing  bool
	dirty      bool

	// Indexes from identities to the records that claim them.
	gens  map[WorkerID]map[string]*record // generate endpoints
	cards map[WorkerID]map[string]*record // base cards, scoped and legacy
	chans map[pubID]map[string]*record
	bad   map[string]*record // records that failed to parse

	dirtyW     map[WorkerID]struct{}
	dirtyP     map[pubID]struct{}
	problemsUp bool

	// Scratch lists of recomputeWorker.
	cardBuf, genBuf []*record

	// Materialised state of the last Build.
	workers   map[WorkerID]*Worker
	wprobs    map[WorkerID][]Problem
	pubs      map[pubID][]*Publisher
	pprobs    map[pubID][]Problem
	firstSeen map[WorkerID]time.Time
	// carried holds the first_seen of the workers of a view this reducer
	// takes over (KeepFirstSeen), until its first full resync has been
	// built: a worker it finds there keeps its time.
	carried     map[WorkerID]time.Time
	dropCarried bool
	order       tree[*Worker] // by compareWorkers
	byID        tree[*place]
	porder      tree[*Publisher]
	problems    []Problem
	probGen     uint64 // from problemGens: no two reducers' lists share one
	mix         map[NamespaceModel]*roleCount
	mixed       []NamespaceModel
	mixedUp     bool
	releases    []*Worker

	// released marks the workers whose release versions were handed to
	// the registry to log, so that each instance's are logged once, not
	// on every change of its card.
	released map[WorkerID]struct{}
}

// roleCount counts the routable roles serving one (namespace, model).
type roleCount struct{ disagg, agg int }

func (r *Reducer) countRoles(w *Worker, delta int) {
	if w == nil || (w.Role != RolePrefill && w.Role != RoleDecode && w.Role != RoleAggregated) {
		return
	}
	k := NamespaceModel{w.ID.Namespace, w.Model}
	c := r.mix[k]
	if c == nil {
		c = &roleCount{}
		r.mix[k] = c
	}
	wasMixed := c.disagg > 0 && c.agg > 0
	if w.Role == RoleAggregated {
		c.agg += delta
	} else {
		c.disagg += delta
	}
	if isMixed := c.disagg > 0 && c.agg > 0; isMixed != wasMixed {
		r.mixedUp = true
	}
	if c.disagg == 0 && c.agg == 0 {
		delete(r.mix, k)
	}
}

// NewReducer returns an empty reducer.
func NewReducer() *Reducer {
	return &Reducer{
		seed: maphash.MakeSeed(),
		spaces: map[wire.Keyspace]map[string]*record{
			wire.KeyspaceInstances: {}, wire.KeyspaceModelCards: {}, wire.KeyspaceEventChannels: {},
			wire.KeyspacePods: {}, wire.KeyspaceRefusals: {},
		},
		refused: map[wire.Keyspace]bool{}, refusedNow: map[wire.Keyspace]bool{}, seen: map[wire.Keyspace]int{},
		gens: map[WorkerID]map[string]*record{}, cards: map[WorkerID]map[string]*record{},
		chans: map[pubID]map[string]*record{}, bad: map[string]*record{},
		dirtyW: map[WorkerID]struct{}{}, dirtyP: map[pubID]struct{}{},
		workers: map[WorkerID]*Worker{}, wprobs: map[WorkerID][]Problem{},
		pubs: map[pubID][]*Publisher{}, pprobs: map[pubID][]Problem{},
		firstSeen: map[WorkerID]time.Time{},
		order:     newTree(compareWorkers), byID: newTree(comparePlaces), porder: newTree(comparePublishers),
		mix:      map[NamespaceModel]*roleCount{},
		released: map[WorkerID]struct{}{},
		dirty:    true,
	}
}

// Dirty reports whether events since the last Build may change the view.
func (r *Reducer) Dirty() bool { return r.dirty }

// Len returns the number of keys held.
func (r *Reducer) Len() int {
	n := 0
	for _, s := range r.spaces {
		n += len(s)
	}
	return n
}

// ResyncBegin starts a full resync: keys not put again before ResyncEnd,
// and keys put past a keyspace's cap, are deleted then. Until then the
// previous records stay in force.
func (r *Reducer) ResyncBegin() {
	r.resyncing = true
	for _, s := range r.spaces {
		for _, rec := range s {
			rec.seen = false
		}
	}
	clear(r.refusedNow)
	clear(r.seen)
}

// ResyncEnd drops every key the resync did not put.
func (r *Reducer) ResyncEnd() {
	if !r.resyncing {
		return
	}
	r.resyncing = false
	r.dropCarried = r.carried != nil
	if !maps.Equal(r.refused, r.refusedNow) {
		r.refused, r.refusedNow = r.refusedNow, r.refused
		r.problemsUp = true
		r.dirty = true
	}
	for _, s := range r.spaces {
		for k, rec := range s {
			if !rec.seen {
				delete(s, k)
				r.unindex(rec)
				r.dirty = true
			}
		}
	}
}

func spaceOf(key string) wire.Keyspace {
	switch {
	case strings.HasPrefix(key, wire.PrefixInstances):
		return wire.KeyspaceInstances
	case strings.HasPrefix(key, wire.PrefixModelCards):
		return wire.KeyspaceModelCards
	case strings.HasPrefix(key, wire.PrefixEventChannels):
		return wire.KeyspaceEventChannels
	case strings.HasPrefix(key, wire.PrefixPods):
		return wire.KeyspacePods
	case strings.HasPrefix(key, wire.PrefixRefusals):
		return wire.KeyspaceRefusals
	}
	return 0
}

// Put applies a put of value at key, at time now.
func (r *Reducer) Put(key string, value []byte, now time.Time) {
	r.put(key, value, 0, now)
}

// PutOversized applies a put at key of a value the source could not read,
// being larger than limit bytes: the key is held and refused as oversized,
// as a value over MaxRecordBytes is.
func (r *Reducer) PutOversized(key string, limit int, now time.Time) {
	r.put(key, nil, max(limit, 1), now)
}

// put applies a put of value at key, or of an unread value over limit
// bytes when limit is positive.
func (r *Reducer) put(key string, value []byte, limit int, now time.Time) {
	space := spaceOf(key)
	if space == 0 {
		return // not a watched bucket
	}
	if space == wire.KeyspaceEventChannels && unsubscribedChannel(key) {
		return
	}
	recs := r.spaces[space]
	h := maphash.Bytes(r.seed, value)
	old, held := recs[key]
	switch {
	case r.resyncing && (!held || !old.seen):
		// A resync reads the keyspace again as if it were empty: the cap
		// keeps the first keys it puts, in the order they come, held
		// before or not. A held key past them is left unmarked, so
		// ResyncEnd drops it; were held keys always taken, new keys put
		// before them would carry the keyspace past its cap.
		if r.seen[space] >= MaxRecordsPerKeyspace {
			r.refusedNow[space] = true
			return
		}
		r.seen[space]++
	case !held && len(recs) >= MaxRecordsPerKeyspace:
		// Outside a resync, new keys past the cap are refused; keys held
		// are still updated (their owners' heartbeats).
		if !r.refused[space] {
			r.refused[space] = true
			r.problemsUp = true
			r.dirty = true
		}
		return
	}
	unread := limit > 0
	if held {
		old.seen = true
		if old.hash == h && old.unread == unread {
			return
		}
	}
	rec := &record{key: key, hash: h, putAt: now, seen: true, unread: unread}
	parseIsolated(rec, space, value, limit)
	recs[key] = rec
	// Index the new record before dropping the old one: when both claim
	// the same identity its set is kept rather than freed and made again.
	r.index(rec)
	if held {
		r.unindex(old)
	}
	r.dirty = true
}

// Delete applies the deletion of key (a delete event or a lease expiry).
func (r *Reducer) Delete(key string) {
	space := spaceOf(key)
	if space == 0 {
		return
	}
	if old, ok := r.spaces[space][key]; ok {
		if r.resyncing && old.seen {
			r.seen[space]-- // its room is free again for the resync's keys
		}
		delete(r.spaces[space], key)
		r.unindex(old)
		r.dirty = true
	}
}

// identities returns the index entries a record claims.
func (rec *record) identities() (wid WorkerID, isGen, isCard bool, pid pubID, isChan bool) {
	switch {
	case rec.endpoint != nil:
		return WorkerID{rec.ns, rec.endpoint.InstanceID.Value}, rec.endpoint.Endpoint == GenerateEndpoint, false, pubID(0), false
	case rec.pod != nil:
		return WorkerID{rec.ns, rec.pod.InstanceID}, true, false, pubID(0), false
	case rec.model != nil:
		m := rec.model
		return WorkerID{rec.ns, m.InstanceID.Value}, false, m.ModelSuffix == "" && !m.Card.LoRA, pubID(0), false
	case rec.channel != nil:
		return WorkerID{}, false, false, pubID(rec.channel.PublisherID.Value), true
	}
	return WorkerID{}, false, false, pubID(0), false
}

func addTo[K comparable](m map[K]map[string]*record, k K, rec *record) {
	set := m[k]
	if set == nil {
		set = map[string]*record{}
		m[k] = set
	}
	set[rec.key] = rec
}

// removeFrom drops rec from k's set, unless a newer record of its key has
// taken its place.
func removeFrom[K comparable](m map[K]map[string]*record, k K, rec *record) {
	if set := m[k]; set != nil && set[rec.key] == rec {
		delete(set, rec.key)
		if len(set) == 0 {
			delete(m, k)
		}
	}
}

func (r *Reducer) index(rec *record) {
	if rec.problem != nil {
		r.bad[rec.key] = rec
		r.problemsUp = true
		return
	}
	wid, isGen, isCard, pid, isChan := rec.identities()
	switch {
	case isGen:
		addTo(r.gens, wid, rec)
		r.dirtyW[wid] = struct{}{}
	case isCard:
		addTo(r.cards, wid, rec)
		r.dirtyW[wid] = struct{}{}
	case isChan:
		addTo(r.chans, pid, rec)
		r.dirtyP[pid] = struct{}{}
	}
}

func (r *Reducer) unindex(rec *record) {
	if rec.problem != nil {
		if r.bad[rec.key] == rec {
			delete(r.bad, rec.key)
		}
		r.problemsUp = true
		return
	}
	wid, isGen, isCard, pid, isChan := rec.identities()
	switch {
	case isGen:
		removeFrom(r.gens, wid, rec)
		r.dirtyW[wid] = struct{}{}
	case isCard:
		removeFrom(r.cards, wid, rec)
		r.dirtyW[wid] = struct{}{}
	case isChan:
		removeFrom(r.chans, pid, rec)
		r.dirtyP[pid] = struct{}{}
	}
}

// MaxProblemReasonBytes bounds the reason of a record's problem. A reason
// may quote what a parser found wrong, and the record it came from may be
// up to MaxRecordBytes: the problem is kept, logged and served by the
// admin API for as long as the record stays, so it must stay small.
const MaxProblemReasonBytes = 512

func problemFor(rec *record, kind, format string, args ...any) {
	reason := fmt.Sprintf(format, args...)
	if len(reason) > MaxProblemReasonBytes {
		reason = strings.ToValidUTF8(reason[:MaxProblemReasonBytes], "") + "…"
	}
	rec.problem = &Problem{Kind: kind, Namespace: rec.ns, Keys: []string{rec.key}, KeyCount: 1, Reason: reason}
}

// parseIsolated is parseRecord with a failure of its own (a panic: a bug
// meeting a record nobody foresaw) confined to the record, which is then
// malformed as any record that fails is, rather than ending the watcher
// and, the record being read again at start, the router again and again.
func parseIsolated(rec *record, space wire.Keyspace, value []byte, limit int) {
	defer func() {
		if v := recover(); v != nil {
			*rec = record{key: rec.key, hash: rec.hash, putAt: rec.putAt, seen: rec.seen, unread: rec.unread, ns: rec.ns}
			problemFor(rec, ProblemMalformed, "the record could not be read (internal error: %v)", v)
		}
	}()
	parseRecord(rec, space, value, limit)
}

// parseRecord parses value once, at put time. A record that fails keeps a
// problem and takes no part in the view. A positive limit stands for a
// value over limit bytes that was never read.
func parseRecord(rec *record, space wire.Keyspace, value []byte, limit int) {
	k, err := wire.ParseKey(rec.key)
	// keyed: the key has Dynamo's layout, so its segments stand in for
	// what the value leaves out.
	keyed := err == nil
	if !keyed {
		// An endpoint or a model card is joined and published by the
		// identity its value names, not its key: a key of another shape
		// (an id segment that is not hex, say) needs only to sit under a
		// namespace, which is the watched prefix's, and the record stands
		// on its value alone.
		ns, ok := looseNamespace(rec.key, space)
		if !ok {
			problemFor(rec, ProblemMalformed, "%v", err)
			return
		}
		k = wire.Key{Space: space, Namespace: ns}
	}
	rec.ns = k.Namespace
	if limit > 0 {
		problemFor(rec, ProblemOversized, "value larger than %d bytes, what one read from the source may carry; refused unread", limit)
		return
	}
	if len(value) > MaxRecordBytes {
		if len(value) == MaxRecordBytes+1 {
			// A source that reads one byte past the bound (the file store)
			// gives no more: the value's true size is not known here.
			problemFor(rec, ProblemOversized, "value larger than %d bytes; refused before parsing", MaxRecordBytes)
		} else {
			problemFor(rec, ProblemOversized, "value of %d bytes is larger than %d bytes; refused before parsing", len(value), MaxRecordBytes)
		}
		return
	}
	switch space {
	case wire.KeyspacePods:
		p, err := wire.ParsePodRecord(value)
		if err != nil {
			problemFor(rec, ProblemMalformed, "pod record: %v", err)
			return
		}
		rec.pod = p
		return
	case wire.KeyspaceRefusals:
		rf, err := wire.ParseRefusal(value)
		if err != nil {
			problemFor(rec, ProblemMalformed, "refusal record: %v", err)
			return
		}
		rec.ns = rf.Namespace
		problemFor(rec, rf.Kind, "%s", rf.Reason)
		return
	}
	var want string
	switch space {
	case wire.KeyspaceInstances:
		want = wire.TypeEndpoint
	case wire.KeyspaceModelCards:
		want = wire.TypeModel
	case wire.KeyspaceEventChannels:
		want = wire.TypeEventChannel
	}
	wrongType := func(typ string) bool {
		if space == wire.KeyspaceEventChannels && typ == wire.TypeEventSource {
			return false // the newer name of the same record
		}
		if typ != "" && typ != want {
			problemFor(rec, ProblemMalformed, "record type %q under %s; want %q", truncate(typ), space, want)
			return true
		}
		return false
	}
	switch space {
	case wire.KeyspaceInstances:
		e, err := wire.ParseEndpoint(value)
		switch {
		case err != nil:
			problemFor(rec, ProblemMalformed, "endpoint record: %v", err)
		case wrongType(e.Type):
		case !e.InstanceID.Set:
			problemFor(rec, ProblemMalformed, "endpoint record has no instance_id")
		default:
			// A field the value leaves out comes from the key; one it
			// writes, even empty, is the value's.
			if !e.ComponentSet {
				e.Component = k.Component
			}
			if !e.EndpointSet {
				e.Endpoint = k.Endpoint
			}
			rec.endpoint = e
		}
	case wire.KeyspaceModelCards:
		m, err := wire.ParseModel(value)
		if err != nil {
			problemFor(rec, ProblemMalformed, "model record: %v", err)
			return
		}
		if wrongType(m.Type) {
			return
		}
		if !m.InstanceID.Set {
			if !keyed {
				problemFor(rec, ProblemMalformed, "model record has no instance_id and its key names none")
				return
			}
			m.InstanceID = wire.ID{Value: k.InstanceID, Set: true}
		}
		// A card's component and endpoint come from its key when its value
		// leaves them out, as an endpoint's do, so that two cards of one
		// instance under different endpoints whose values omit both are two
		// scoped cards, not two legacy ones. A value that writes them, even
		// empty, is read as written: the card is joined by the identity its
		// value names, and one whose writer left both empty is a legacy
		// card, joined by instance id alone, under whatever key.
		if !m.ComponentSet {
			m.Component = k.Component
		}
		if !m.EndpointSet {
			m.Endpoint = k.Endpoint
		}
		if m.ModelSuffix == "" {
			m.ModelSuffix = k.ModelSuffix
		}
		rec.model = m
		if m.CardJSON != nil {
			card := &Card{Typed: m.Card, Raw: m.CardJSON}
			if len(m.CardJSON) > MaxRetainedCardBytes || m.CardDroppedBytes > MaxRetainedCardBytes {
				card.Raw = nil
			}
			rec.card = card
			m.CardJSON = nil // held once, in card
		}
	case wire.KeyspaceEventChannels:
		ch, err := wire.ParseEventChannel(value)
		switch {
		case err != nil:
			problemFor(rec, ProblemMalformed, "event channel record: %v", err)
		case wrongType(ch.Type):
		case !ch.PublisherID.Set:
			problemFor(rec, ProblemMalformed, "event channel record has no instance_id (publisher id)")
		case ch.Topic != "" && ch.Topic != k.Topic:
			problemFor(rec, ProblemMalformed, "record topic %q differs from the key's topic %q", truncate(ch.Topic), truncate(k.Topic))
		case !ch.Legacy && ch.Scope != wire.ScopeNamespace && ch.Scope != wire.ScopeComponent && ch.Scope != wire.ScopeEndpoint:
			problemFor(rec, ProblemUnsupported, "event channel scope kind %q is not namespace, component or endpoint", truncate(string(ch.Scope)))
		default:
			// The publisher's namespace is its key's, as a worker's is: a
			// namespace the record names otherwise is not read.
			ch.Topic = k.Topic
			rec.channel = ch
		}
	}
}

// looseNamespace returns the namespace of an instance or model card key
// that does not have Dynamo's layout: its first segment under the bucket,
// when that and the rest are not empty. Other keyspaces have no loose
// keys: an event channel's key is what says its topic and scope.
func looseNamespace(key string, space wire.Keyspace) (string, bool) {
	var rest string
	switch space {
	case wire.KeyspaceInstances:
		rest = strings.TrimPrefix(key, wire.PrefixInstances)
	case wire.KeyspaceModelCards:
		rest = strings.TrimPrefix(key, wire.PrefixModelCards)
	default:
		return "", false
	}
	ns, tail, ok := strings.Cut(rest, "/")
	return ns, ok && ns != "" && tail != ""
}

// pubID is a publisher's identity: its publisher id alone, in whatever
// namespace its channel record sits. Subscriptions and the load samples
// they feed are keyed by publisher id, so two channels that claim one id
// are both rejected as duplicates even when their namespaces differ (one
// subscription cannot follow both). The one exception is a Dynamo 1.2
// worker's legacy channels, one per topic family, which all carry the
// worker's instance id (claimGroups): each feeds a subscription of its
// own family.
type pubID uint64

// KeepFirstSeen makes the workers of prev that this reducer's first full
// resync finds again keep their first_seen: a watcher that replaces
// another over the same fleet (a reload that prunes namespaces or changes
// only the backoff) keeps the view's workers as they were, not as new.
// Workers the resync does not find are forgotten once it is built.
func (r *Reducer) KeepFirstSeen(prev *Snapshot) {
	if prev == nil || prev.Workers.Len() == 0 {
		return
	}
	r.carried = make(map[WorkerID]time.Time, prev.Workers.Len())
	for w := range prev.Workers.All() {
		r.carried[w.ID] = w.FirstSeen
		// Its release was logged by the watcher before: the view is
		// kept, not read anew.
		if w.Card != nil && len(w.Card.Typed.Versions) > 0 {
			r.released[w.ID] = struct{}{}
		}
	}
	r.dropCarried = false
}

// Build materialises the current records into a snapshot and clears the
// dirty flag. now stamps workers seen for the first time. Only identities
// touched since the last Build are recomputed.
func (r *Reducer) Build(now time.Time) *Snapshot {
	r.dirty = false
	if r.order.Len() == 0 && len(r.dirtyW) > resetAbove {
		r.loadWorkers(now)
	}
	for id := range r.dirtyW {
		old := r.workers[id]
		r.recomputeWorker(id, now)
		w := r.workers[id]
		moved := old == nil || w == nil || compareWorkers(old, w) != 0
		if old != nil && moved {
			r.order.remove(old)
		}
		switch {
		case w != nil && moved:
			r.order.put(w)
			r.byID.put(placeOf(w))
		case w != nil:
			r.order.put(w) // in its place: the identity index stays
		case old != nil:
			r.byID.remove(&place{id: id})
		}
	}
	r.dirtyW = emptied(r.dirtyW)
	if r.dropCarried {
		// Carried workers the first resync did not find are gone: one
		// that comes back later is logged as new.
		for id := range r.carried {
			if _, found := r.workers[id]; !found {
				delete(r.released, id)
			}
		}
		r.carried, r.dropCarried = nil, false
	}
	for id := range r.dirtyP {
		old := r.pubs[id]
		r.recomputePublisher(id)
		now := r.pubs[id]
		// The list is ordered by namespace, id and topic: a publisher id
		// whose channel moved to another namespace (or topic) takes
		// another place, and its old one must go.
		for _, o := range old {
			if !slices.ContainsFunc(now, func(p *Publisher) bool { return comparePublishers(o, p) == 0 }) {
				r.porder.remove(o)
			}
		}
		for _, p := range now {
			r.porder.put(p)
		}
	}
	r.dirtyP = emptied(r.dirtyP)
	if r.problemsUp {
		r.problemsUp = false
		r.problems = r.collectProblems()
		r.probGen = problemGens.Add(1)
	}
	if r.mixedUp {
		r.mixedUp = false
		r.mixed = nil
		for k, c := range r.mix {
			if c.disagg > 0 && c.agg > 0 {
				r.mixed = append(r.mixed, k)
			}
		}
		slices.SortFunc(r.mixed, func(a, b NamespaceModel) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Model, b.Model))
		})
	}
	releases := r.releases
	r.releases = nil
	return &Snapshot{
		Workers:    Workers{byOrder: r.order.freeze(), byID: r.byID.freeze()},
		Publishers: Publishers{byID: r.porder.freeze()},
		Problems:   r.problems, Mixed: r.mixed, releases: releases, problemsGen: r.probGen,
	}
}

// loadWorkers builds the first view of a fleet (the end of an initial sync)
// in one pass: its lists are built full from sorted workers, rather than
// grown by inserts, which leave their nodes part empty and the trees
// deeper.
func (r *Reducer) loadWorkers(now time.Time) {
	for id := range r.dirtyW {
		r.recomputeWorker(id, now)
	}
	r.dirtyW = emptied(r.dirtyW)
	sorted := slices.SortedFunc(maps.Values(r.workers), compareWorkers)
	ws := workersOf(sorted)
	r.order, r.byID = ws.byOrder, ws.byID
	r.order.epoch, r.byID.epoch = epochs.Add(1), epochs.Add(1)
}

// emptied returns m emptied. A map keeps the room it once grew to, and
// ranging over it costs that room even when it is empty: a set that held a
// whole fleet (the first sync) is dropped rather than cleared, so that
// later builds cost what they change.
func emptied[K comparable](m map[K]struct{}) map[K]struct{} {
	if len(m) > resetAbove {
		return map[K]struct{}{}
	}
	clear(m)
	return m
}

// resetAbove is the size past which a dirty set is dropped, not cleared.
const resetAbove = 64

func dupProblem(what string, recs []*record, identity string) Problem {
	keys := make([]string, len(recs))
	for i, rec := range recs {
		keys[i] = rec.key
	}
	slices.Sort(keys)
	set := fnv.New64a()
	for _, k := range keys {
		_, _ = set.Write([]byte(k))
		_, _ = set.Write([]byte{0})
	}
	return Problem{Kind: ProblemDuplicate, Namespace: recs[0].ns, Keys: keys[:min(len(keys), MaxProblemKeys)], KeyCount: len(keys),
		Reason: fmt.Sprintf("%d %s records claim %s; every claimant is rejected", len(keys), what, identity), keySet: set.Sum64()}
}

func values(m map[string]*record) []*record {
	return sortedRecords(make([]*record, 0, len(m)), m, compareKeys)
}

// sortedRecords returns m's records in buf, sorted by cmpFn.
func sortedRecords(buf []*record, m map[string]*record, cmpFn func(a, b *record) int) []*record {
	buf = buf[:0]
	for _, rec := range m {
		buf = append(buf, rec)
	}
	if len(buf) > 1 {
		slices.SortFunc(buf, cmpFn)
	}
	return buf
}

// clearAll empties a scratch list so that it holds no record alive.
func clearAll(recs []*record) []*record {
	clear(recs)
	return recs[:0]
}

func compareKeys(a, b *record) int { return strings.Compare(a.key, b.key) }

func compareCards(a, b *record) int {
	return cmp.Or(cmp.Compare(a.model.Component, b.model.Component), cmp.Compare(a.model.Endpoint, b.model.Endpoint), compareKeys(a, b))
}

// cardGroup returns the run of cards (sorted by compareCards) for one
// (component, endpoint).
func cardGroup(cards []*record, component, endpoint string) []*record {
	at := func(rec *record, _ int) int {
		return cmp.Or(cmp.Compare(rec.model.Component, component), cmp.Compare(rec.model.Endpoint, endpoint))
	}
	i, _ := slices.BinarySearchFunc(cards, 0, at)
	j := i
	for j < len(cards) && at(cards[j], 0) == 0 {
		j++
	}
	return cards[i:j]
}

// recomputeWorker materialises one identity from its generate endpoint and
// base cards, with the problems that explain what it is not.
func (r *Reducer) recomputeWorker(id WorkerID, now time.Time) {
	var probs []Problem
	// Base cards sorted by (component, endpoint, key): each run of one
	// (component, endpoint) is a group, and two cards in a group are a
	// duplicate.
	cards := sortedRecords(r.cardBuf, r.cards[id], compareCards)
	gens := sortedRecords(r.genBuf, r.gens[id], compareKeys)
	defer func() { r.cardBuf, r.genBuf = clearAll(cards), clearAll(gens) }()
	for i := 0; i < len(cards); {
		m := cards[i].model
		j := i + 1
		for j < len(cards) && cards[j].model.Component == m.Component && cards[j].model.Endpoint == m.Endpoint {
			j++
		}
		switch {
		case j-i < 2:
		case m.Component == "" && m.Endpoint == "":
			probs = append(probs, dupProblem("legacy model card", cards[i:j], "instance "+wire.FormatID(id.InstanceID)))
		default:
			probs = append(probs, dupProblem("model card", cards[i:j], fmt.Sprintf("instance %s of %s/%s", wire.FormatID(id.InstanceID), truncate(m.Component), truncate(m.Endpoint))))
		}
		i = j
	}
	var w *Worker
	switch {
	case len(gens) > 1:
		what := "generate endpoint"
		if gens[0].pod != nil {
			what = "pod" // two pod names hashing to one instance id
		}
		probs = append(probs, dupProblem(what, gens, "instance "+wire.FormatID(id.InstanceID)))
	case len(gens) == 1:
		rec := gens[0]
		var cardRec *record
		if e := rec.endpoint; e != nil { // pods have no cards
			scoped, legacy := cardGroup(cards, e.Component, e.Endpoint), cardGroup(cards, "", "")
			switch {
			case len(scoped) > 1:
			case len(scoped) == 1:
				cardRec = scoped[0]
			case len(legacy) == 1:
				cardRec = legacy[0]
			}
		}
		var prob *Problem
		w, prob = materializeIsolated(id, rec, cardRec)
		if prob != nil {
			probs = append(probs, *prob)
			break
		}
		if cardRec != nil && cardRec.card != nil {
			if cardRec.card.Raw == nil {
				probs = append(probs, Problem{Kind: ProblemCardDropped, Namespace: id.Namespace, Keys: []string{cardRec.key}, KeyCount: 1,
					Reason: fmt.Sprintf("card larger than %d bytes: its opaque JSON is dropped, its typed fields kept", MaxRetainedCardBytes)})
			}
			if errs := cardRec.model.CardErrors; len(errs) > 0 {
				probs = append(probs, Problem{Kind: ProblemCardFields, Namespace: id.Namespace, Keys: []string{cardRec.key}, KeyCount: 1,
					Reason: "card fields that did not parse were ignored: " + strings.Join(errs, ", ")})
			}
		}
		if w.Role == RoleUnknown {
			probs = append(probs, Problem{Kind: ProblemUnknownRole, Namespace: id.Namespace, Keys: []string{rec.key}, KeyCount: 1,
				Reason: fmt.Sprintf("component %q names no role and %s; shown but never routed to", truncate(w.Component), cardNoRole(cardRec))})
		}
		first, ok := r.firstSeen[id]
		if !ok {
			if first, ok = r.carried[id]; !ok {
				first = now
			}
			r.firstSeen[id] = first
		}
		if _, logged := r.released[id]; !logged && w.Card != nil && len(w.Card.Typed.Versions) > 0 {
			r.released[id] = struct{}{}
			r.releases = append(r.releases, w)
		}
		w.FirstSeen = first
		w.LastUpdated = rec.putAt
		if cardRec != nil && cardRec.putAt.After(w.LastUpdated) {
			w.LastUpdated = cardRec.putAt
		}
	}
	r.countRoles(r.workers[id], -1)
	r.countRoles(w, +1)
	if w != nil {
		r.workers[id] = w
	} else {
		delete(r.workers, id)
		if !r.resyncing {
			delete(r.firstSeen, id)
			delete(r.released, id)
		}
	}
	if len(probs) > 0 || len(r.wprobs[id]) > 0 {
		r.problemsUp = true
	}
	if len(probs) > 0 {
		r.wprobs[id] = probs
	} else {
		delete(r.wprobs, id)
	}
}

func (r *Reducer) recomputePublisher(id pubID) {
	recs := values(r.chans[id])
	hadProblem := len(r.pprobs[id]) > 0
	delete(r.pprobs, id)
	delete(r.pubs, id)
	for _, group := range claimGroups(recs) {
		if len(group) > 1 {
			r.pprobs[id] = append(r.pprobs[id], dupProblem("event channel", group, "publisher "+wire.FormatID(uint64(id))))
			continue
		}
		p, prob := publisherOf(group[0], id)
		if prob != nil {
			r.pprobs[id] = append(r.pprobs[id], *prob)
		} else {
			r.pubs[id] = append(r.pubs[id], p)
		}
	}
	if len(r.pprobs[id]) > 0 || hadProblem {
		r.problemsUp = true
	}
}

// claimGroups splits the channels claiming one id into the sets that
// claim one identity: a set of more than one is a duplicate. A scoped
// channel's id is its publisher's own incarnation id, so channels with a
// scoped one among them all claim one identity, whatever their topics. A
// Dynamo 1.2 worker's legacy channels all carry the worker's instance id
// instead, one channel per topic, and the key that makes each unique
// upstream holds its topic: legacy channels alone claim one identity per
// topic family (kv-events and its older spelling kv_events feed one
// subscription).
func claimGroups(recs []*record) [][]*record {
	if len(recs) == 0 {
		return nil
	}
	if len(recs) == 1 || slices.ContainsFunc(recs, func(rec *record) bool { return !rec.channel.Legacy }) {
		return [][]*record{recs}
	}
	var groups [][]*record
	at := map[string]int{}
	for _, rec := range recs {
		f := topicFamily(rec.channel.Topic)
		i, ok := at[f]
		if !ok {
			i = len(groups)
			at[f] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], rec)
	}
	return groups
}

// publisherOf is the publisher of one channel record, or why there is none.
func publisherOf(rec *record, id pubID) (*Publisher, *Problem) {
	ch := rec.channel
	if reason := unsupportedChannel(ch); reason != "" {
		return nil, &Problem{Kind: ProblemUnsupported, Namespace: rec.ns, Keys: []string{rec.key}, KeyCount: 1, Reason: reason}
	}
	if reason := undialableEndpoint(ch.ZmqEndpoint); reason != "" {
		return nil, &Problem{Kind: ProblemMalformed, Namespace: rec.ns, Keys: []string{rec.key}, KeyCount: 1,
			Reason: fmt.Sprintf("%s channel endpoint %s; its worker is treated as quiet", truncate(ch.Topic), reason)}
	}
	return &Publisher{
		Namespace: rec.ns, Component: ch.Component, Endpoint: ch.Endpoint, Scope: ch.Scope, Topic: ch.Topic,
		PublisherID: uint64(id), TransportKind: ch.TransportKind, Key: rec.key, zmqEndpoint: ch.ZmqEndpoint,
	}, nil
}

// topicFamily is the subscription a subscribed topic feeds: load samples,
// or kv-events under either spelling.
func topicFamily(topic string) string {
	if topic == TopicKVEvents2 {
		return TopicKVEvents
	}
	return topic
}

// Event-plane topics the router subscribes to.
const (
	TopicLoad      = "kv_metrics"
	TopicKVEvents  = "kv-events"
	TopicKVEvents2 = "kv_events" // older Dynamo releases
)

// subscribedTopic reports whether the router subscribes to topic.
func subscribedTopic(topic string) bool {
	return topic == TopicLoad || topic == TopicKVEvents || topic == TopicKVEvents2
}

// unsubscribedChannel reports whether key is an event channel's on a topic
// the router does not subscribe to (active_sequences_events and the like).
// Such a channel is skipped before its value is read, without a problem,
// a log line or a count, and is not held: it is none of the router's
// business, so it can be neither malformed nor unsupported, and it takes
// no part in the duplicate rule, which applies among the channels the
// router reads (a channel of another topic that claims a kv_metrics
// channel's publisher id must not cost that worker its load). The
// topic is the key's, which the record's must equal; a key that does not
// parse is not skipped but reported malformed.
func unsubscribedChannel(key string) bool {
	k, err := wire.ParseKey(key)
	return err == nil && !subscribedTopic(k.Topic)
}

// IgnoredChannel reports whether the reducer skips key unread and holds
// nothing of it: an event channel of a topic the router does not subscribe
// to. A source that counts keys against MaxRecordsPerKeyspace counts only
// the others, as the reducer does.
func IgnoredChannel(key string) bool { return unsubscribedChannel(key) }

// unsupportedChannel says why a channel cannot be subscribed to directly,
// or "" when it can.
func unsupportedChannel(ch *wire.EventChannel) string {
	switch {
	case ch.TransportKind != "Zmq":
		return fmt.Sprintf("%s channel with transport %q: only direct Zmq publishers are subscribed to; its worker is treated as quiet", truncate(ch.Topic), truncate(ch.TransportKind))
	case !strings.HasPrefix(ch.ZmqEndpoint, "tcp://"):
		return fmt.Sprintf("%s channel endpoint (%s) is not tcp://host:port; its worker is treated as quiet", truncate(ch.Topic), endpointScheme(ch.ZmqEndpoint))
	}
	return ""
}

// undialableEndpoint says what keeps a tcp:// endpoint from being dialled,
// or "" when it names a host and a port. A publisher advertises the
// address it can be reached at; one that advertises its bind address
// instead (a wildcard, an unspecified address, no port, port 0) would be
// retried forever without a connection, so it is refused here, where an
// operator sees it among the fleet's problems. The reason never quotes
// the address.
func undialableEndpoint(endpoint string) string {
	host, port, err := net.SplitHostPort(strings.TrimPrefix(endpoint, "tcp://"))
	switch {
	case err != nil:
		return "is not tcp://host:port"
	case host == "" || host == "*":
		return "names no host (a wildcard is a bind address)"
	}
	if a, err := netip.ParseAddr(host); err == nil && a.IsUnspecified() {
		return "names an unspecified address (a bind address, not one to connect to)"
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "has no port number from 1 to 65535"
	}
	return ""
}

// endpointScheme names the scheme of a publisher endpoint that is not
// tcp://, for a problem's reason. The endpoint itself is a worker's
// address, which problems (logged, and served by the admin API) never
// quote.
func endpointScheme(endpoint string) string {
	scheme, _, ok := strings.Cut(endpoint, "://")
	if !ok || scheme == "" {
		return "no scheme"
	}
	return fmt.Sprintf("scheme %q", truncate(scheme))
}

func (r *Reducer) collectProblems() []Problem {
	var out []Problem
	for _, rec := range r.bad {
		out = append(out, *rec.problem)
	}
	for _, ps := range r.wprobs {
		out = append(out, ps...)
	}
	for _, ps := range r.pprobs {
		out = append(out, ps...)
	}
	for space, on := range r.refused {
		if on {
			out = append(out, Problem{Kind: ProblemOverCapacity, Reason: fmt.Sprintf("new %s keys refused: at most %d keys are held per keyspace", space, MaxRecordsPerKeyspace)})
		}
	}
	slices.SortFunc(out, compareProblems)
	return out
}

// cardNoRole says why a worker's card claims no role.
func cardNoRole(rec *record) string {
	if rec == nil || rec.model == nil || rec.card == nil {
		return "the worker has no base model card"
	}
	c := &rec.model.Card
	switch {
	case c.WorkerTypeProblem != "" && c.RawWorkerType == "":
		// Not a string: there is no spelling to quote.
		return fmt.Sprintf("the card's worker_type claims none (%s)", c.WorkerTypeProblem)
	case c.WorkerTypeProblem != "":
		return fmt.Sprintf("the card's worker_type %q claims none (%s)", truncate(c.RawWorkerType), c.WorkerTypeProblem)
	case c.WorkerType == wire.WorkerEncode:
		return fmt.Sprintf("the card's worker_type %q is an encode worker's", truncate(c.RawWorkerType))
	}
	return "the card claims none"
}

// maxShown bounds a record's string quoted in a problem: records are
// written by the fleet, and a problem is kept and logged.
const maxShown = 64

func truncate(s string) string {
	if len(s) > maxShown {
		return strings.ToValidUTF8(s[:maxShown], "") + "…"
	}
	return s
}

// componentRole is the role a component name claims, if any: it names
// prefill or decode as a word of its own (prefill, VllmPrefillWorker,
// TRTLLMDecodeWorker, sglang-decode, decode2), not inside a longer word
// (VllmWorker-decodeheavy, an aggregated pool, claims nothing and its card
// decides).
func componentRole(component string) Role {
	p, d := namesWord(component, "prefill"), namesWord(component, "decode")
	switch {
	case p && !d:
		return RolePrefill
	case d && !p:
		return RoleDecode
	}
	return ""
}

// namesWord reports whether word (lower-case ASCII) appears in name, in
// any case, as a word: starting at the name's start, after a character
// that is not a letter, or with a capital after any letter (camel case);
// and ending at the name's end or before a character that is not a
// lower-case letter. Only ASCII letters are folded, so that the positions
// found are the name's own (Unicode case mapping changes some characters'
// lengths: a name from the fleet would index past its end).
func namesWord(name, word string) bool {
	lower := asciiLower(name)
	for from := 0; ; {
		i := strings.Index(lower[from:], word)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(word)
		startOK := i == 0 || !isLetter(name[i-1]) || isUpper(name[i])
		endOK := end == len(name) || !isLower(name[end])
		if startOK && endOK {
			return true
		}
		from = i + 1
	}
}

// asciiLower is s with its ASCII capitals in lower case, every other byte
// as it is.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if isUpper(s[i]) {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if isUpper(b[j]) {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

func isLower(c byte) bool  { return 'a' <= c && c <= 'z' }
func isUpper(c byte) bool  { return 'A' <= c && c <= 'Z' }
func isLetter(c byte) bool { return isLower(c) || isUpper(c) }

// roleClaim is the role a card claims, and the card that says so.
type roleClaim struct {
	role Role
	// byDefault is true for the aggregated role of a card without
	// worker_type and without the Prefill model_type flag: such a card
	// cannot tell a decode worker from an aggregated one, so a component
	// naming prefill or decode decides instead of conflicting.
	byDefault bool
	card      *wire.Card
}

// source says what in the card claims the role (for a conflict's reason;
// built only then, as every worker of every event claims one).
func (c roleClaim) source() string {
	switch {
	case c.card.WorkerTypeAbsent && c.role == RolePrefill:
		return "the card's model_type (no worker_type) says prefill"
	case c.card.WorkerTypeAbsent:
		return "the card (no worker_type, no Prefill model_type) says aggregated"
	}
	return fmt.Sprintf("the card's worker_type %q says %s", truncate(c.card.RawWorkerType), c.role)
}

// cardRole is the role a card claims, or none:
//   - a worker_type naming prefill, decode or aggregated (in any spelling)
//     claims that role;
//   - a card without worker_type, as Dynamo wrote them before worker types
//     existed, is a prefill worker's when its model_type has the Prefill
//     flag and an aggregated worker's otherwise, as Dynamo reads it;
//   - encode, an unrecognised worker_type, or encode joined with another
//     stage claims none.
func cardRole(c *wire.Card) roleClaim {
	switch {
	case c.WorkerTypeAbsent && c.ModelType.Has(wire.ModelPrefill):
		return roleClaim{role: RolePrefill, card: c}
	case c.WorkerTypeAbsent:
		return roleClaim{role: RoleAggregated, byDefault: true, card: c}
	}
	var role Role
	switch c.WorkerType {
	case wire.WorkerPrefill:
		role = RolePrefill
	case wire.WorkerDecode:
		role = RoleDecode
	case wire.WorkerAggregated:
		role = RoleAggregated
	default:
		return roleClaim{}
	}
	return roleClaim{role: role, card: c}
}

// materializeIsolated is materialize with a failure of its own confined
// to the endpoint's record (see parseIsolated): no worker, a malformed
// record.
func materializeIsolated(id WorkerID, rec, cardRec *record) (w *Worker, p *Problem) {
	defer func() {
		if v := recover(); v != nil {
			w = nil
			reason := fmt.Sprintf("the record could not be read (internal error: %v)", v)
			if len(reason) > MaxProblemReasonBytes {
				reason = strings.ToValidUTF8(reason[:MaxProblemReasonBytes], "") + "…"
			}
			p = &Problem{Kind: ProblemMalformed, Namespace: id.Namespace, Keys: []string{rec.key}, KeyCount: 1, Reason: reason}
		}
	}()
	return materialize(id, rec, cardRec)
}

// materialize builds the worker of one generate endpoint and its card, or
// says why there is none.
func materialize(id WorkerID, rec, cardRec *record) (*Worker, *Problem) {
	if p := rec.pod; p != nil {
		role := Role(p.Role)
		if role != RolePrefill && role != RoleDecode && role != RoleAggregated {
			role = RoleUnknown
		}
		return &Worker{ID: id, Role: role, Model: p.Model, Component: p.Component, Endpoint: GenerateEndpoint, DPSize: 1, ns: InternNamespace(id.Namespace)}, nil
	}
	e := rec.endpoint
	w := &Worker{ID: id, Component: e.Component, Endpoint: e.Endpoint, DPSize: 1, transport: e.Transport, ns: InternNamespace(id.Namespace)}
	compRole := componentRole(e.Component)
	var claim roleClaim
	if cardRec != nil && cardRec.model != nil {
		c := &cardRec.model.Card
		if cardRec.card != nil {
			claim = cardRole(c)
		}
		w.Model = c.Model()
		w.BlockSize, w.MigrationLimit = c.KVCacheBlockSize, c.MigrationLimit
		rc := c.Runtime
		w.Capacity = Capacity{TotalKVBlocks: rc.TotalKVBlocks, MaxNumBatchedTokens: rc.MaxNumBatchedTokens, MaxNumSeqs: rc.MaxNumSeqs, ContextLength: rc.ContextLength}
		w.DPStartRank, w.DPSize, w.DPDeclared = rc.DataParallelStartRank, rc.DataParallelSize, rc.DataParallelDeclared
		w.Eagle = rc.EnableEagle
		w.DisaggregatedEndpoint = rc.DisaggregatedEndpoint
		w.Card = cardRec.card
	}
	// A component naming prefill or decode and a card claiming another
	// role exclude the worker; a component naming no role lets the card
	// decide; a worker without a card follows its component.
	switch {
	case compRole != "" && claim.role != "" && compRole != claim.role && !claim.byDefault:
		keys := []string{rec.key, cardRec.key}
		slices.Sort(keys)
		return nil, &Problem{Kind: ProblemRoleConflict, Namespace: id.Namespace, Keys: keys, KeyCount: 2,
			Reason: fmt.Sprintf("component %q says %s but %s; the worker is excluded", truncate(e.Component), compRole, claim.source())}
	case compRole != "":
		w.Role = compRole
	case claim.role != "":
		w.Role = claim.role
	default:
		w.Role = RoleUnknown
	}
	return w, nil
}

func compareWorkers(a, b *Worker) int {
	return cmp.Or(cmp.Compare(a.ID.Namespace, b.ID.Namespace), cmp.Compare(a.Model, b.Model),
		cmp.Compare(a.Role, b.Role), cmp.Compare(a.ID.InstanceID, b.ID.InstanceID))
}

func comparePublishers(a, b *Publisher) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.PublisherID, b.PublisherID), cmp.Compare(a.Topic, b.Topic))
}

func compareProblems(a, b Problem) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace),
		slices.Compare(a.Keys, b.Keys), cmp.Compare(a.Reason, b.Reason))
}
