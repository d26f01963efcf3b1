// Package fleet turns Dynamo's discovery records into the router's view of a
// fleet: a pure reducer from etcd-shaped key/value events to a Snapshot of
// workers, event publishers and problems, and the Registry that publishes
// snapshots lock-free to readers.
//
// Imports: wire and telemetry only.
package fleet

import (
	"cmp"
	"encoding/json"
	"iter"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
	"unique"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// Memory bounds of the reducer: whatever is written under the watched
// prefixes, the fleet view holds a bounded amount of it.
const (
	// MaxRecordBytes: a larger etcd value is refused before it is parsed.
	MaxRecordBytes = 16 << 20
	// MaxRetainedCardBytes: a larger card keeps its typed fields and drops
	// its opaque JSON.
	MaxRetainedCardBytes = 1 << 20
	// MaxRecordsPerKeyspace: new keys past this many in one keyspace are
	// refused; updates of held keys are still applied.
	MaxRecordsPerKeyspace = 16384
)

// Role is what a worker does in a disaggregated fleet.
type Role string

// Roles. RoleUnknown workers are shown to operators but never routed to.
const (
	RolePrefill    Role = "prefill"
	RoleDecode     Role = "decode"
	RoleAggregated Role = "aggregated"
	RoleUnknown    Role = "unknown"
)

// WorkerID identifies a worker: the namespace it was discovered under (from
// the watched prefix, never the payload) and its instance id.
type WorkerID struct {
	Namespace  string
	InstanceID uint64
}

// NamespaceID is a namespace name interned: comparing or hashing one costs
// what a pointer's does, where a string costs a pass over its bytes, so
// that maps keyed by worker (load samples, cached blocks, dispatches in
// flight) stay as fast as when a worker was its instance id alone. The
// zero NamespaceID is the empty name. An interned name is freed once no
// NamespaceID of it is left, so names of departed namespaces do not
// accumulate.
type NamespaceID struct{ h unique.Handle[string] }

// InternNamespace returns the NamespaceID of name.
func InternNamespace(name string) NamespaceID {
	if name == "" {
		return NamespaceID{}
	}
	return NamespaceID{unique.Make(name)}
}

// String is the namespace's name.
func (n NamespaceID) String() string {
	if n == (NamespaceID{}) {
		return ""
	}
	return n.h.Value()
}

// Capacity is what a worker's card declares; nil fields were not declared.
type Capacity struct {
	TotalKVBlocks       *uint64 `json:"total_kv_blocks"`
	MaxNumBatchedTokens *uint64 `json:"max_num_batched_tokens"`
	MaxNumSeqs          *uint64 `json:"max_num_seqs"`
	ContextLength       *uint32 `json:"context_length"`
}

// Card is a worker's model card: its typed fields and, unless it was larger
// than MaxRetainedCardBytes, the whole card as opaque JSON. One Card is
// shared by every snapshot that holds the worker; it is never copied.
type Card struct {
	Typed wire.Card
	// Raw is nil when the card was too large to retain.
	Raw json.RawMessage
}

// Worker is one materialised Dynamo worker (a generate endpoint).
type Worker struct {
	ID        WorkerID
	Role      Role
	Model     string
	Component string
	Endpoint  string
	// DPStartRank and DPSize give the global data-parallel ranks
	// DPStartRank .. DPStartRank+DPSize-1; DPDeclared says whether the card
	// set data_parallel_size (then the rank header is always sent).
	DPStartRank uint32
	DPSize      uint32
	DPDeclared  bool
	BlockSize   *uint32
	// Eagle is the card's runtime_config.enable_eagle: its blocks are
	// hashed over windows one token longer (wire.EagleBlockHashes).
	Eagle    bool
	Capacity Capacity
	// MigrationLimit is the card's migration_limit: how many times a
	// request that failed because its worker is gone or refused may be
	// pinned again to another worker before anything reached its client
	// (0: never).
	MigrationLimit uint32
	// DisaggregatedEndpoint is the card's value as compact JSON (a string
	// in older cards, an object in newer ones); nil when absent.
	DisaggregatedEndpoint json.RawMessage
	FirstSeen             time.Time
	LastUpdated           time.Time
	// Card is nil for a worker without a (usable) card.
	Card *Card

	transport wire.Transport
	// ns is ID.Namespace interned (NamespaceID), set when the reducer
	// builds the worker.
	ns NamespaceID
}

// NamespaceID is the worker's namespace interned. A worker built outside
// the reducer has its namespace interned on each call.
func (w *Worker) NamespaceID() NamespaceID {
	if w.ns == (NamespaceID{}) {
		return InternNamespace(w.ID.Namespace)
	}
	return w.ns
}

// InstanceHex is the instance id as keys and the registry write it.
func (w *Worker) InstanceHex() string { return wire.FormatID(w.ID.InstanceID) }

// WorkerIDDecimal is the instance id as the frontend's headers and
// GET /health write it.
func (w *Worker) WorkerIDDecimal() string { return strconv.FormatUint(w.ID.InstanceID, 10) }

// Transport is the worker's internal request-plane address. It is never
// shown to clients, operators or metrics.
func (w *Worker) Transport() wire.Transport { return w.transport }

// Publisher is an event-plane publisher (kv_metrics, kv-events, ...).
type Publisher struct {
	Namespace     string
	Component     string
	Endpoint      string
	Scope         wire.ScopeKind
	Topic         string
	PublisherID   uint64
	TransportKind string
	Key           string

	zmqEndpoint string
}

// ZmqEndpoint is the publisher's tcp:// address (internal; never exposed).
func (p *Publisher) ZmqEndpoint() string { return p.zmqEndpoint }

// Subject is the publisher's dotted event-plane subject, as Dynamo names
// it for NATS and broker transports:
// namespace.<ns>[.component.<c>[.endpoint.<e>]].<topic>, each part escaped
// as a key segment, as deep as the channel's scope. A direct ZMQ
// subscription filters on the plain topic; the subject is for diagnostics.
func (p *Publisher) Subject() string {
	s := "namespace." + wire.EncodeSegment(p.Namespace)
	if p.Scope != wire.ScopeNamespace && p.Component != "" {
		s += ".component." + wire.EncodeSegment(p.Component)
		if p.Scope == wire.ScopeEndpoint && p.Endpoint != "" {
			s += ".endpoint." + wire.EncodeSegment(p.Endpoint)
		}
	}
	return s + "." + wire.EncodeSegment(p.Topic)
}

// Problem kinds: why a record did not become (all of) a worker or publisher.
const (
	ProblemDuplicate    = "duplicate"
	ProblemRoleConflict = "role_conflict"
	ProblemMalformed    = "malformed"
	ProblemOversized    = "oversized"
	ProblemOverCapacity = "over_capacity"
	ProblemUnknownRole  = "unknown_role"
	ProblemCardFields   = "card_fields"
	ProblemCardDropped  = "card_dropped"
	ProblemUnsupported  = "unsupported"
)

// MaxProblemKeys is how many keys a problem names; KeyCount has the total.
const MaxProblemKeys = 4

// Problem is one reason the fleet view differs from the records.
type Problem struct {
	Kind      string
	Namespace string
	// Keys are up to MaxProblemKeys of the etcd keys involved, sorted.
	Keys     []string
	KeyCount int
	Reason   string
	// keySet identifies every key involved, where Keys may show only
	// some: a conflict whose key set changes is a new conflict (logged
	// and counted again) even when its first keys and count do not.
	keySet uint64
}

// KeySet identifies every key a conflict involves, where Keys may name
// only some: two conflicts with one KeySet have one key set. Zero for a
// problem that is not a conflict of several claimants.
func (p Problem) KeySet() uint64 { return p.keySet }

// NamespaceModel names a model served in one Dynamo namespace.
type NamespaceModel struct {
	Namespace, Model string
}

// Snapshot is one immutable fleet view. Readers share it; nobody mutates
// it. Its worker and publisher lists are persistent trees: a snapshot
// shares all but a few nodes with the one before it, so publishing a view
// after one record changed costs the same at any fleet size.
type Snapshot struct {
	Workers    Workers
	Publishers Publishers
	Problems   []Problem
	// Mixed lists the (namespace, model) pairs served by prefill or decode
	// workers and aggregated workers at once, sorted.
	Mixed []NamespaceModel

	// releases holds the workers whose release versions this snapshot
	// logs: each instance's once, with the first card that carries any;
	// problemsGen changes whenever Problems is rebuilt.
	releases    []*Worker
	problemsGen uint64
}

// NewSnapshot returns a view of the given workers and publishers (for
// tests and tools that make a fleet by hand). Later items replace earlier
// ones with the same identity.
func NewSnapshot(workers []*Worker, publishers []*Publisher) *Snapshot {
	byID := map[WorkerID]*Worker{}
	for _, w := range workers {
		byID[w.ID] = w
	}
	ws := slices.SortedFunc(maps.Values(byID), compareWorkers)
	pt := newTree(comparePublishers)
	for _, p := range publishers {
		pt.put(p)
	}
	return &Snapshot{Workers: workersOf(ws), Publishers: Publishers{byID: pt.freeze()}}
}

// Workers is a snapshot's workers, ordered by namespace, model, role and
// instance id, and indexed by identity.
type Workers struct {
	byOrder tree[*Worker]
	byID    tree[*place]
}

// place is where a worker sits in the ordered list: its identity and the
// model and role that order it. The identity index holds places rather
// than workers so that it changes only when a worker comes, goes or
// changes model or role, not on every update of its other fields.
type place struct {
	id    WorkerID
	model string
	role  Role
}

func placeOf(w *Worker) *place { return &place{id: w.ID, model: w.Model, role: w.Role} }

func comparePlaces(a, b *place) int {
	return cmp.Or(cmp.Compare(a.id.Namespace, b.id.Namespace), cmp.Compare(a.id.InstanceID, b.id.InstanceID))
}

// workersOf returns the frozen lists of sorted (by compareWorkers).
func workersOf(sorted []*Worker) Workers {
	places := make([]*place, len(sorted))
	for i, w := range sorted {
		places[i] = placeOf(w)
	}
	slices.SortFunc(places, comparePlaces)
	return Workers{byOrder: buildTree(sorted, compareWorkers), byID: buildTree(places, comparePlaces)}
}

// Len returns the number of workers.
func (ws *Workers) Len() int { return ws.byOrder.Len() }

// All yields every worker, ordered by namespace, model, role and instance
// id.
func (ws *Workers) All() iter.Seq[*Worker] { return ws.byOrder.All() }

// Get returns the worker with identity id, or nil. It costs the
// logarithm of the fleet.
func (ws *Workers) Get(id WorkerID) *Worker {
	p, ok := ws.byID.find(func(p *place) int {
		return cmp.Or(cmp.Compare(p.id.Namespace, id.Namespace), cmp.Compare(p.id.InstanceID, id.InstanceID))
	})
	if !ok {
		return nil
	}
	w, _ := ws.byOrder.find(func(w *Worker) int {
		return cmp.Or(cmp.Compare(w.ID.Namespace, p.id.Namespace), cmp.Compare(w.Model, p.model),
			cmp.Compare(w.Role, p.role), cmp.Compare(w.ID.InstanceID, p.id.InstanceID))
	})
	return w
}

// Serving yields the workers of model in namespace, by role (aggregated,
// decode, prefill, unknown) and then instance id. It costs the number of
// those workers plus the logarithm of the fleet.
func (ws *Workers) Serving(namespace, model string) iter.Seq[*Worker] {
	return ws.byOrder.span(func(w *Worker) int {
		return cmp.Or(cmp.Compare(w.ID.Namespace, namespace), cmp.Compare(w.Model, model))
	})
}

// InNamespace yields the workers of one namespace, in order.
func (ws *Workers) InNamespace(namespace string) iter.Seq[*Worker] {
	return ws.byOrder.span(func(w *Worker) int { return cmp.Compare(w.ID.Namespace, namespace) })
}

// Publishers is a snapshot's publishers, ordered by namespace and
// publisher id.
type Publishers struct {
	byID tree[*Publisher]
}

// Len returns the number of publishers.
func (ps *Publishers) Len() int { return ps.byID.Len() }

// All yields every publisher, ordered by namespace, publisher id and topic.
func (ps *Publishers) All() iter.Seq[*Publisher] { return ps.byID.All() }

// Advertises reports whether the snapshot holds a publisher of topic at
// host and port in namespace: what a broker may relay (it dials nothing
// else). host and port are compared as the publisher's record spells them.
func (s *Snapshot) Advertises(namespace, host string, port int, topic string) bool {
	for p := range s.Publishers.All() {
		if p.Namespace != namespace || p.Topic != topic {
			continue
		}
		rest, ok := strings.CutPrefix(p.zmqEndpoint, "tcp://")
		if !ok {
			continue
		}
		h, ps, err := net.SplitHostPort(rest)
		if err == nil && h == host && ps == strconv.Itoa(port) {
			return true
		}
	}
	return false
}

// Within returns the snapshot's view of the given namespaces only: their
// workers, publishers, problems and mixed pairs (a reload that stops
// watching some namespaces drops the others at once and keeps routing to
// these). Problems that name no namespace are kept.
func (s *Snapshot) Within(namespaces []string) *Snapshot {
	keep := func(ns string) bool { return slices.Contains(namespaces, ns) }
	var workers []*Worker
	for w := range s.Workers.All() {
		if keep(w.ID.Namespace) {
			workers = append(workers, w)
		}
	}
	var pubs []*Publisher
	for p := range s.Publishers.All() {
		if keep(p.Namespace) {
			pubs = append(pubs, p)
		}
	}
	out := &Snapshot{
		Workers:     workersOf(workers),
		Publishers:  Publishers{byID: buildTree(pubs, comparePublishers)},
		problemsGen: problemGens.Add(1), // a list of its own, never another reducer's number
	}
	for _, p := range s.Problems {
		if p.Namespace == "" || keep(p.Namespace) {
			out.Problems = append(out.Problems, p)
		}
	}
	for _, m := range s.Mixed {
		if keep(m.Namespace) {
			out.Mixed = append(out.Mixed, m)
		}
	}
	return out
}
