// Package admin holds the admin API's JSON views of the fleet, shared by the
// router's /admin handlers and the commands that print the same shapes
// (discover, top). Views never carry transport addresses, pod IPs, node
// names, UIDs, publisher endpoints or raw cards.
//
// Imports: fleet, load and config only.
package admin

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// TimeFormat is how the admin API writes instants: RFC 3339 in UTC with an
// explicit offset, to the second.
const TimeFormat = "2006-01-02T15:04:05+00:00"

// Capacity is a worker's declared capacity; null fields were not declared.
type Capacity struct {
	TotalKVBlocks       *uint64 `json:"total_kv_blocks"`
	MaxNumBatchedTokens *uint64 `json:"max_num_batched_tokens"`
	MaxNumSeqs          *uint64 `json:"max_num_seqs"`
	ContextLength       *uint32 `json:"context_length"`
}

// Worker is one worker as GET /admin/dynamo/workers shows it.
type Worker struct {
	InstanceID            string          `json:"instance_id"`
	Namespace             string          `json:"namespace"`
	WorkerID              string          `json:"worker_id"`
	Role                  string          `json:"role"`
	Model                 string          `json:"model"`
	Component             string          `json:"component"`
	Endpoint              string          `json:"endpoint"`
	DPStartRank           uint32          `json:"dp_start_rank"`
	DPSize                uint32          `json:"dp_size"`
	BlockSize             *uint32         `json:"block_size"`
	Capacity              Capacity        `json:"capacity"`
	DisaggregatedEndpoint json.RawMessage `json:"disaggregated_endpoint"`
	FirstSeen             string          `json:"first_seen"`
	LastUpdated           string          `json:"last_updated"`
}

// Publisher is one event-plane publisher, without its address.
type Publisher struct {
	PublisherID string `json:"publisher_id"`
	Namespace   string `json:"namespace"`
	Component   string `json:"component"`
	Topic       string `json:"topic"`
	// Subject is the dotted event-plane subject (diagnostics only).
	Subject string `json:"subject"`
}

// Problem says why records did not become (all of) a worker or publisher.
type Problem struct {
	Kind     string   `json:"kind"`
	Keys     []string `json:"keys"`
	KeyCount int      `json:"key_count"`
	Reason   string   `json:"reason"`
}

// WorkerView renders a worker.
func WorkerView(w *fleet.Worker) Worker {
	v := Worker{
		InstanceID: w.InstanceHex(), Namespace: w.ID.Namespace, WorkerID: w.WorkerIDDecimal(),
		Role: string(w.Role), Model: w.Model, Component: w.Component, Endpoint: w.Endpoint,
		DPStartRank: w.DPStartRank, DPSize: w.DPSize, BlockSize: w.BlockSize,
		Capacity: Capacity{TotalKVBlocks: w.Capacity.TotalKVBlocks, MaxNumBatchedTokens: w.Capacity.MaxNumBatchedTokens,
			MaxNumSeqs: w.Capacity.MaxNumSeqs, ContextLength: w.Capacity.ContextLength},
		FirstSeen: formatTime(w.FirstSeen), LastUpdated: formatTime(w.LastUpdated),
	}
	v.DisaggregatedEndpoint = json.RawMessage("null")
	// The string form names an endpoint ("ns/component/endpoint"); the
	// object form of newer cards carries the engine's bootstrap host and
	// port, a pod address, which the view never exposes.
	if e := w.DisaggregatedEndpoint; len(e) > 0 && e[0] == '"' {
		v.DisaggregatedEndpoint = e
	}
	return v
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(TimeFormat)
}

// PublisherView renders a publisher.
func PublisherView(p *fleet.Publisher) Publisher {
	return Publisher{PublisherID: strconv.FormatUint(p.PublisherID, 10), Namespace: p.Namespace, Component: p.Component, Topic: p.Topic,
		Subject: p.Subject()}
}

// ProblemView renders a problem.
func ProblemView(p fleet.Problem) Problem {
	keys := p.Keys
	if keys == nil {
		keys = []string{}
	}
	return Problem{Kind: p.Kind, Keys: keys, KeyCount: p.KeyCount, Reason: p.Reason}
}

// Views renders a whole snapshot; the lists are never null.
func Views(s *fleet.Snapshot) (workers []Worker, publishers []Publisher, problems []Problem) {
	workers, publishers, problems = []Worker{}, []Publisher{}, []Problem{}
	for w := range s.Workers.All() {
		workers = append(workers, WorkerView(w))
	}
	for p := range s.Publishers.All() {
		publishers = append(publishers, PublisherView(p))
	}
	for _, p := range s.Problems {
		problems = append(problems, ProblemView(p))
	}
	return workers, publishers, problems
}

// Signals says which load signals the source provides.
type Signals struct {
	Load     bool `json:"load"`
	Capacity bool `json:"capacity"`
}

// Subscription is one load or kv-events subscription, without addresses.
// Its fields are exactly those GET /admin/dynamo/workers documents for a
// subscription, broker only while one relays it: the shape is part of the
// API, so nothing beyond them is added here.
type Subscription struct {
	Family      string `json:"family"`
	PublisherID string `json:"publisher_id"`
	Namespace   string `json:"namespace"`
	Component   string `json:"component"`
	State       string `json:"state"`
	Transport   string `json:"transport"`
	Broker      string `json:"broker,omitempty"`
}

// SubscriptionView renders a subscription.
func SubscriptionView(s load.SubscriptionInfo) Subscription {
	return Subscription{Family: s.Family, PublisherID: strconv.FormatUint(s.PublisherID, 10), Namespace: s.Namespace,
		Component: s.Component, State: s.State, Transport: s.Transport, Broker: s.Broker}
}

// WorkersResponse is GET /admin/dynamo/workers.
type WorkersResponse struct {
	Enabled           bool           `json:"enabled"`
	Connected         bool           `json:"connected"`
	Source            string         `json:"source,omitempty"`
	Signals           Signals        `json:"signals"`
	Namespace         string         `json:"namespace,omitempty"`
	Namespaces        []string       `json:"namespaces"`
	Generation        uint64         `json:"generation"`
	Workers           []Worker       `json:"workers"`
	LoadPublishers    int            `json:"load_publishers"`
	KVEventPublishers int            `json:"kv_event_publishers"`
	Subscriptions     []Subscription `json:"subscriptions"`
	// BrokerCoverage is present with transport: broker: for each
	// configured namespace, the broker sessions covering it and the
	// subscriptions waiting for one.
	BrokerCoverage []BrokerCoverage `json:"broker_coverage,omitempty"`
}

// BrokerCoverage is how one configured Dynamo namespace is covered by
// event bus broker sessions.
type BrokerCoverage struct {
	Namespace string `json:"namespace"`
	Covered   bool   `json:"covered"`
	// Brokers are the configured ids of the covering sessions.
	Brokers              []string `json:"brokers"`
	PendingSubscriptions int      `json:"pending_subscriptions"`
}

// LoadSample is one (worker, rank)'s latest load as the router holds it.
type LoadSample struct {
	WorkerID            string  `json:"worker_id"`
	Namespace           string  `json:"namespace"`
	DPRank              uint32  `json:"dp_rank"`
	ActiveDecodeBlocks  *uint64 `json:"active_decode_blocks"`
	ActivePrefillTokens *uint64 `json:"active_prefill_tokens"`
	KVUsedBlocks        *uint64 `json:"kv_used_blocks"`
	// AgeMs is how long ago the sample arrived; State is fresh (within
	// max_staleness), quiet (old, no backlog) or
	// stale (old, with a backlog); none before the first sample.
	AgeMs int64  `json:"age_ms"`
	State string `json:"state"`
	// Selections counts the router's picks of this rank since it started.
	Selections uint64 `json:"selections"`
}

// LoadResponse is GET /admin/dynamo/load (used by continuum top).
// MaxRanks bounds the (worker, rank) rows a view of the fleet's load
// lists: as many as the router's load store holds.
const MaxRanks = load.MaxStoreKeys

type LoadResponse struct {
	MaxStalenessMs int64        `json:"max_staleness_ms"`
	Samples        []LoadSample `json:"samples"`
	// OmittedRanks counts the ranks past the first MaxRanks, which the
	// load store does not hold and the list leaves out.
	OmittedRanks int64 `json:"omitted_ranks,omitempty"`
}

// ProblemsResponse is GET /admin/dynamo/problems (used by continuum top).
type ProblemsResponse struct {
	Generation uint64    `json:"generation"`
	Problems   []Problem `json:"problems"`
}

// KVResponse is GET /admin/dynamo/kv: the router's view of the workers' KV
// caches, as its index holds it (also what `kv-inspect workers -o json`
// prints of its own index).
type KVResponse struct {
	Enabled bool     `json:"enabled"`
	Index   KVIndex  `json:"index"`
	Ranks   []KVRank `json:"ranks"`
	// Subscriptions are the kv-events subscriptions feeding the index.
	Subscriptions []Subscription `json:"subscriptions"`
	// Events counts the kv-events taken, by result (accepted, replay, gap,
	// ...); Results the KV-aware selections, by result.
	Events  []KVCount `json:"events"`
	Results []KVCount `json:"selection_results"`
}

// KVIndex is the index's size and what it has taken since the start.
type KVIndex struct {
	Nodes           int    `json:"nodes"`
	Ownerships      int    `json:"ownerships"`
	Ranks           int    `json:"ranks"`
	Subscriptions   int    `json:"subscriptions"`
	Cursors         int    `json:"cursors"`
	Bytes           int64  `json:"bytes"`
	StoredBlocks    uint64 `json:"stored_blocks"`
	RemovedBlocks   uint64 `json:"removed_blocks"`
	UnknownRemovals uint64 `json:"unknown_removals"`
	RefusedBlocks   uint64 `json:"refused_blocks"`
	Rebinds         uint64 `json:"rebinds"`
	Gaps            uint64 `json:"gaps"`
	// InFlightRequests are the requests in flight whose prompt blocks
	// count as held by the rank they were sent to (the router's own
	// picks, beside the index), InFlightBlocks those blocks.
	InFlightRequests int `json:"in_flight_requests"`
	InFlightBlocks   int `json:"in_flight_blocks"`
}

// KVRank is one (worker, dp rank)'s device-tier blocks in the index, and
// the cursor of each subscription feeding it.
type KVRank struct {
	WorkerID  string     `json:"worker_id"`
	Namespace string     `json:"namespace"`
	DPRank    uint32     `json:"dp_rank"`
	Blocks    int        `json:"blocks"`
	Cursors   []KVCursor `json:"cursors"`
}

// KVCursor is the last event id a subscription took for a rank, and the
// gaps it saw there.
type KVCursor struct {
	PublisherID string `json:"publisher_id"`
	EventID     uint64 `json:"event_id"`
	Gaps        uint32 `json:"gaps"`
}

// KVCount is a selection result and how often it happened.
type KVCount struct {
	Result string `json:"result"`
	Count  uint64 `json:"count"`
}

// ConfigStatus is GET /admin/config/status: the running configuration's
// generation and how the last reload went.
type ConfigStatus struct {
	Generation uint64 `json:"generation"`
	// LastReload is empty before the first reload.
	LastReload *Reload `json:"last_reload"`
}

// Reload results (Reload.Result).
const (
	ReloadApplied  = "applied"
	ReloadRejected = "rejected"
)

// Reload is one reload attempt: where it came from (file, signal, admin),
// when, whether it was applied, and why not, or what it did.
type Reload struct {
	Trigger string   `json:"trigger"`
	At      string   `json:"at"`
	Result  string   `json:"result"`
	Error   string   `json:"error,omitempty"`
	Changes []string `json:"changes"`
	// Findings are the document's warnings (applied) or errors (rejected),
	// as config validate prints them.
	Findings []string `json:"findings"`
}
