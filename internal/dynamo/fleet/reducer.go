package fleet

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// GenerateEndpoint is the only endpoint that becomes a worker.
const GenerateEndpoint = "generate"

// record is one held etcd key: its parsed form, or why it has none.
type record struct {
	key     string
	hash    uint64
	putAt   time.Time
	seen    bool // marked during a resync
	problem *Problem

	endpoint *wire.Endpoint
	model    *wire.ModelRecord
	card     *Card
	channel  *wire.EventChannel
	ns       string // namespace from the key
}

// Reducer holds the records of one watcher and materialises snapshots from
// them. It is a pure function of the events fed to it and the timestamps
// passed in; it does no I/O and is not safe for concurrent use.
type Reducer struct {
	seed      maphash.Seed
	spaces    map[wire.Keyspace]map[string]*record
	refused   map[wire.Keyspace]int
	firstSeen map[WorkerID]time.Time
	resyncing bool
	dirty     bool
}

// NewReducer returns an empty reducer.
func NewReducer() *Reducer {
	return &Reducer{
		seed: maphash.MakeSeed(),
		spaces: map[wire.Keyspace]map[string]*record{
			wire.KeyspaceInstances: {}, wire.KeyspaceModelCards: {}, wire.KeyspaceEventChannels: {},
		},
		refused:   map[wire.Keyspace]int{},
		firstSeen: map[WorkerID]time.Time{},
		dirty:     true,
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

// ResyncBegin starts a full resync: keys not put again before ResyncEnd are
// deleted. Until then the previous records stay in force.
func (r *Reducer) ResyncBegin() {
	r.resyncing = true
	for _, s := range r.spaces {
		for _, rec := range s {
			rec.seen = false
		}
	}
	clear(r.refused)
}

// ResyncEnd drops every key the resync did not put.
func (r *Reducer) ResyncEnd() {
	if !r.resyncing {
		return
	}
	r.resyncing = false
	for _, s := range r.spaces {
		for k, rec := range s {
			if !rec.seen {
				delete(s, k)
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
	}
	return 0
}

// Put applies a put of value at key, at time now.
func (r *Reducer) Put(key string, value []byte, now time.Time) {
	space := spaceOf(key)
	if space == 0 {
		return // not a watched bucket
	}
	recs := r.spaces[space]
	h := maphash.Bytes(r.seed, value)
	if old, ok := recs[key]; ok {
		old.seen = true
		if old.hash == h {
			return
		}
	} else if len(recs) >= MaxRecordsPerKeyspace {
		r.refused[space]++
		r.dirty = true
		return
	}
	rec := &record{key: key, hash: h, putAt: now, seen: true}
	parseRecord(rec, space, value)
	recs[key] = rec
	r.dirty = true
}

// Delete applies the deletion of key (a delete event or a lease expiry).
func (r *Reducer) Delete(key string) {
	space := spaceOf(key)
	if space == 0 {
		return
	}
	if _, ok := r.spaces[space][key]; ok {
		delete(r.spaces[space], key)
		r.dirty = true
	}
}

func problemFor(rec *record, kind, format string, args ...any) {
	rec.problem = &Problem{Kind: kind, Namespace: rec.ns, Keys: []string{rec.key}, KeyCount: 1, Reason: fmt.Sprintf(format, args...)}
}

// parseRecord parses value once, at put time. A record that fails keeps a
// problem and takes no part in the view.
func parseRecord(rec *record, space wire.Keyspace, value []byte) {
	k, err := wire.ParseKey(rec.key)
	if err != nil {
		problemFor(rec, ProblemMalformed, "%v", err)
		return
	}
	rec.ns = k.Namespace
	if len(value) > MaxRecordBytes {
		problemFor(rec, ProblemOversized, "value of %d bytes is larger than %d bytes; refused before parsing", len(value), MaxRecordBytes)
		return
	}
	want := map[wire.Keyspace]string{wire.KeyspaceInstances: wire.TypeEndpoint, wire.KeyspaceModelCards: wire.TypeModel, wire.KeyspaceEventChannels: wire.TypeEventChannel}[space]
	typ, err := wire.RecordType(value)
	if err != nil {
		problemFor(rec, ProblemMalformed, "value is not JSON: %v", err)
		return
	}
	if typ != "" && typ != want {
		problemFor(rec, ProblemMalformed, "record type %q under %s; want %q", typ, space, want)
		return
	}
	switch space {
	case wire.KeyspaceInstances:
		e, err := wire.ParseEndpoint(value)
		switch {
		case err != nil:
			problemFor(rec, ProblemMalformed, "endpoint record: %v", err)
		case !e.InstanceID.Set:
			problemFor(rec, ProblemMalformed, "endpoint record has no instance_id")
		default:
			if e.Component == "" {
				e.Component = k.Component
			}
			if e.Endpoint == "" {
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
		if !m.InstanceID.Set {
			m.InstanceID = wire.ID{Value: k.InstanceID, Set: true}
		}
		if m.ModelSuffix == "" {
			m.ModelSuffix = k.ModelSuffix
		}
		rec.model = m
		if m.CardJSON != nil {
			card := &Card{Typed: m.Card, Raw: m.CardJSON}
			if len(m.CardJSON) > MaxRetainedCardBytes {
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
		case !ch.PublisherID.Set:
			problemFor(rec, ProblemMalformed, "event channel record has no instance_id (publisher id)")
		default:
			if ch.Topic == "" {
				ch.Topic = k.Topic
			}
			rec.channel = ch
		}
	}
}

type cardKey struct {
	id                  WorkerID
	component, endpoint string
}

type pubID struct {
	namespace string
	id        uint64
}

// Build materialises the current records into a snapshot and clears the
// dirty flag. now stamps workers seen for the first time.
func (r *Reducer) Build(now time.Time) *Snapshot {
	r.dirty = false
	snap := &Snapshot{}
	var problems []Problem
	gens := map[WorkerID][]*record{}
	scoped := map[cardKey][]*record{}
	legacy := map[WorkerID][]*record{}
	chans := map[pubID][]*record{}
	for _, space := range []wire.Keyspace{wire.KeyspaceInstances, wire.KeyspaceModelCards, wire.KeyspaceEventChannels} {
		for _, rec := range r.spaces[space] {
			if rec.problem != nil {
				problems = append(problems, *rec.problem)
				continue
			}
			switch {
			case rec.endpoint != nil:
				if rec.endpoint.Endpoint == GenerateEndpoint {
					id := WorkerID{rec.ns, rec.endpoint.InstanceID.Value}
					gens[id] = append(gens[id], rec)
				}
			case rec.model != nil:
				m := rec.model
				if m.ModelSuffix != "" || m.Card.LoRA {
					continue // adapter cards do not join
				}
				id := WorkerID{rec.ns, m.InstanceID.Value}
				if m.Component == "" && m.Endpoint == "" {
					legacy[id] = append(legacy[id], rec)
				} else {
					ck := cardKey{id, m.Component, m.Endpoint}
					scoped[ck] = append(scoped[ck], rec)
				}
			case rec.channel != nil:
				p := pubID{rec.ns, rec.channel.PublisherID.Value}
				chans[p] = append(chans[p], rec)
			}
		}
	}
	for space, n := range r.refused {
		problems = append(problems, Problem{Kind: ProblemOverCapacity, Reason: fmt.Sprintf("%d new %s keys refused: at most %d keys are held per keyspace", n, space, MaxRecordsPerKeyspace)})
	}
	dup := func(what string, recs []*record, identity string) {
		keys := make([]string, len(recs))
		for i, rec := range recs {
			keys[i] = rec.key
		}
		slices.Sort(keys)
		problems = append(problems, Problem{Kind: ProblemDuplicate, Namespace: recs[0].ns, Keys: keys[:min(len(keys), MaxProblemKeys)], KeyCount: len(keys),
			Reason: fmt.Sprintf("%d %s records claim %s; every claimant is rejected", len(keys), what, identity)})
	}
	rejectedScoped := map[cardKey]bool{}
	for ck, recs := range scoped {
		if len(recs) > 1 {
			dup("model card", recs, fmt.Sprintf("instance %s of %s/%s", wire.FormatID(ck.id.InstanceID), ck.component, ck.endpoint))
			rejectedScoped[ck] = true
		}
	}
	rejectedLegacy := map[WorkerID]bool{}
	for id, recs := range legacy {
		if len(recs) > 1 {
			dup("legacy model card", recs, "instance "+wire.FormatID(id.InstanceID))
			rejectedLegacy[id] = true
		}
	}
	live := make(map[WorkerID]bool, len(gens))
	for id, recs := range gens {
		if len(recs) > 1 {
			dup("generate endpoint", recs, "instance "+wire.FormatID(id.InstanceID))
			continue
		}
		rec := recs[0]
		e := rec.endpoint
		ck := cardKey{id, e.Component, e.Endpoint}
		var cardRec *record
		switch {
		case rejectedScoped[ck]:
		case len(scoped[ck]) == 1:
			cardRec = scoped[ck][0]
		case !rejectedLegacy[id] && len(legacy[id]) == 1:
			cardRec = legacy[id][0]
		}
		w, prob := materialize(id, rec, cardRec)
		if prob != nil {
			problems = append(problems, *prob)
			continue
		}
		if cardRec != nil && cardRec.card != nil {
			if cardRec.card.Raw == nil {
				problems = append(problems, Problem{Kind: ProblemCardDropped, Namespace: id.Namespace, Keys: []string{cardRec.key}, KeyCount: 1,
					Reason: fmt.Sprintf("card larger than %d bytes: its opaque JSON is dropped, its typed fields kept", MaxRetainedCardBytes)})
			}
			if errs := cardRec.model.CardErrors; len(errs) > 0 {
				problems = append(problems, Problem{Kind: ProblemCardFields, Namespace: id.Namespace, Keys: []string{cardRec.key}, KeyCount: 1,
					Reason: "card fields that did not parse were ignored: " + strings.Join(errs, ", ")})
			}
		}
		if w.Role == RoleUnknown {
			problems = append(problems, Problem{Kind: ProblemUnknownRole, Namespace: id.Namespace, Keys: []string{rec.key}, KeyCount: 1,
				Reason: fmt.Sprintf("neither component %q nor the card's worker_type %q names a prefill, decode or aggregated role; shown but never routed to", w.Component, cardWorkerType(cardRec))})
		}
		first, ok := r.firstSeen[id]
		if !ok {
			first = now
			r.firstSeen[id] = now
		}
		w.FirstSeen = first
		w.LastUpdated = rec.putAt
		if cardRec != nil && cardRec.putAt.After(w.LastUpdated) {
			w.LastUpdated = cardRec.putAt
		}
		live[id] = true
		snap.Workers = append(snap.Workers, w)
	}
	if !r.resyncing {
		for id := range r.firstSeen {
			if !live[id] {
				delete(r.firstSeen, id)
			}
		}
	}
	for p, recs := range chans {
		if len(recs) > 1 {
			dup("event channel", recs, "publisher "+wire.FormatID(p.id))
			continue
		}
		rec := recs[0]
		ch := rec.channel
		snap.Publishers = append(snap.Publishers, &Publisher{
			Namespace: rec.ns, Component: ch.Component, Endpoint: ch.Endpoint, Scope: ch.Scope, Topic: ch.Topic,
			PublisherID: p.id, TransportKind: ch.TransportKind, Key: rec.key, zmqEndpoint: ch.ZmqEndpoint,
		})
	}
	sortSnapshot(snap, problems)
	return snap
}

func cardWorkerType(rec *record) string {
	if rec == nil || rec.model == nil {
		return ""
	}
	return rec.model.Card.RawWorkerType
}

// componentRole is the role a component name claims, if any.
func componentRole(component string) Role {
	c := strings.ToLower(component)
	p, d := strings.Contains(c, "prefill"), strings.Contains(c, "decode")
	switch {
	case p && !d:
		return RolePrefill
	case d && !p:
		return RoleDecode
	}
	return ""
}

func cardRole(wt wire.WorkerType) Role {
	switch wt {
	case wire.WorkerPrefill:
		return RolePrefill
	case wire.WorkerDecode:
		return RoleDecode
	case wire.WorkerAggregated:
		return RoleAggregated
	}
	return ""
}

// materialize builds the worker of one generate endpoint and its card, or
// says why there is none.
func materialize(id WorkerID, rec, cardRec *record) (*Worker, *Problem) {
	e := rec.endpoint
	w := &Worker{ID: id, Component: e.Component, Endpoint: e.Endpoint, DPSize: 1, transport: e.Transport}
	compRole := componentRole(e.Component)
	var cRole Role
	if cardRec != nil && cardRec.model != nil {
		c := &cardRec.model.Card
		cRole = cardRole(c.WorkerType)
		w.Model = c.Model()
		w.BlockSize = c.KVCacheBlockSize
		rc := c.Runtime
		w.Capacity = Capacity{TotalKVBlocks: rc.TotalKVBlocks, MaxNumBatchedTokens: rc.MaxNumBatchedTokens, MaxNumSeqs: rc.MaxNumSeqs, ContextLength: rc.ContextLength}
		w.DPStartRank, w.DPSize, w.DPDeclared = rc.DataParallelStartRank, rc.DataParallelSize, rc.DataParallelDeclared
		w.DisaggregatedEndpoint = rc.DisaggregatedEndpoint
		w.Card = cardRec.card
	}
	switch {
	case compRole != "" && cRole != "" && compRole != cRole:
		keys := []string{rec.key, cardRec.key}
		slices.Sort(keys)
		return nil, &Problem{Kind: ProblemRoleConflict, Namespace: id.Namespace, Keys: keys, KeyCount: 2,
			Reason: fmt.Sprintf("component %q says %s but the card's worker_type says %s; the worker is excluded", e.Component, compRole, cRole)}
	case compRole != "":
		w.Role = compRole
	case cRole != "":
		w.Role = cRole
	default:
		w.Role = RoleUnknown
	}
	return w, nil
}

func sortSnapshot(s *Snapshot, problems []Problem) {
	slices.SortFunc(s.Workers, func(a, b *Worker) int {
		return cmp.Or(cmp.Compare(a.ID.Namespace, b.ID.Namespace), cmp.Compare(a.Model, b.Model),
			cmp.Compare(a.Role, b.Role), cmp.Compare(a.ID.InstanceID, b.ID.InstanceID))
	})
	slices.SortFunc(s.Publishers, func(a, b *Publisher) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.PublisherID, b.PublisherID))
	})
	slices.SortFunc(problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(strings.Join(a.Keys, "\n"), strings.Join(b.Keys, "\n")), cmp.Compare(a.Reason, b.Reason))
	})
	s.Problems = problems
}
