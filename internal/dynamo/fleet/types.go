// Package fleet turns Dynamo's discovery records into the router's view of a
// fleet: a pure reducer from etcd-shaped key/value events to a Snapshot of
// workers, event publishers and problems, and the Registry that publishes
// snapshots lock-free to readers.
//
// Imports: wire and telemetry only.
package fleet

import (
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

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
	Capacity    Capacity
	// DisaggregatedEndpoint is the card's value as compact JSON (a string
	// in older cards, an object in newer ones); nil when absent.
	DisaggregatedEndpoint json.RawMessage
	FirstSeen             time.Time
	LastUpdated           time.Time
	// Card is nil for a worker without a (usable) card.
	Card *Card

	transport wire.Transport
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
}

// NamespaceModel names a model served in one Dynamo namespace.
type NamespaceModel struct {
	Namespace, Model string
}

// Snapshot is one immutable fleet view. Readers share it; nobody mutates it.
type Snapshot struct {
	Workers    []*Worker
	Publishers []*Publisher
	Problems   []Problem
	// Mixed lists the (namespace, model) pairs served by prefill or decode
	// workers and aggregated workers at once, sorted.
	Mixed []NamespaceModel

	// added holds the workers that are new in this snapshot; problemsGen
	// changes whenever Problems is rebuilt.
	added       []*Worker
	problemsGen uint64
}

// Advertises reports whether the snapshot holds a publisher of topic at
// host and port in namespace: what a broker may relay (it dials nothing
// else). host and port are compared as the publisher's record spells them.
func (s *Snapshot) Advertises(namespace, host string, port int, topic string) bool {
	for _, p := range s.Publishers {
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
	out := &Snapshot{problemsGen: s.problemsGen + 1}
	for _, w := range s.Workers {
		if keep(w.ID.Namespace) {
			out.Workers = append(out.Workers, w)
		}
	}
	for _, p := range s.Publishers {
		if keep(p.Namespace) {
			out.Publishers = append(out.Publishers, p)
		}
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
