package telemetry

import "github.com/prometheus/client_golang/prometheus"

// Discovery event kinds (continuum_dynamo_discovery_events_total{kind}).
const (
	KindDuplicate = "duplicate"
	KindRestart   = "restart"
	KindRefused   = "refused"
	KindMismatch  = "mismatch"
	KindMalformed = "malformed"
)

// DiscoveryKinds is the closed set of continuum_dynamo_discovery_events_total
// kinds: every kind of problem the registry reports (why records did not
// become a worker or publisher, Kubernetes objects refused as a whole) and
// watcher restarts. Each is exported at zero from the start, so that a
// rate or an alert over a kind works before its first event.
var DiscoveryKinds = []string{
	KindDuplicate, "role_conflict", KindMalformed, "oversized", "over_capacity", "unknown_role",
	"card_fields", "card_dropped", "unsupported", KindRefused, KindMismatch, KindRestart,
}

// Subscription states and transports, the labels of
// continuum_dynamo_load_subscriptions and continuum_dynamo_kv_subscriptions.
// Both sets are closed; every pair is exported from the start.
var (
	SubscriptionStates = []string{"pending", "connecting", "connected", "backoff"}
	Transports         = []string{"direct", "broker"}
)

// DiscoveryMetrics are the discovery families. Labels are closed sets.
type DiscoveryMetrics struct {
	Events    *prometheus.CounterVec
	Connected prometheus.Gauge
}

// NewDiscoveryMetrics creates the discovery families and registers them on
// reg when reg is not nil.
func NewDiscoveryMetrics(reg prometheus.Registerer) *DiscoveryMetrics {
	m := &DiscoveryMetrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_dynamo_discovery_events_total",
			Help: "Dynamo discovery events by kind (duplicate, restart, refused, mismatch, malformed, ...).",
		}, []string{"kind"}),
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_dynamo_discovery_connected",
			Help: "1 while the discovery source is seeded and watching, else 0.",
		}),
	}
	for _, k := range DiscoveryKinds {
		m.Events.WithLabelValues(k)
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.Connected)
	}
	return m
}

// presetSubscriptions exports every {state, transport} pair of a
// subscription gauge at zero.
func presetSubscriptions(g *prometheus.GaugeVec) {
	for _, st := range SubscriptionStates {
		for _, tr := range Transports {
			g.WithLabelValues(st, tr)
		}
	}
}

// Load event results beyond the rejections: a sample stored.
const ResultAccepted = "accepted"

// LoadResults is the closed set of continuum_dynamo_load_events_total
// results: accepted, or why a kv_metrics message was dropped.
var LoadResults = []string{
	ResultAccepted, "malformed", "unknown_version", "topic_mismatch", "oversized",
	"identity_mismatch", "over_capacity", "duplicate", "transport_refused",
}

// LoadMetrics are the load-signal families.
type LoadMetrics struct {
	Events              *prometheus.CounterVec
	Subscriptions       *prometheus.GaugeVec
	ActiveDecodeBlocks  *prometheus.GaugeVec
	ActivePrefillTokens *prometheus.GaugeVec
	KVUsedBlocks        *prometheus.GaugeVec
}

// NewLoadMetrics creates the load families and registers them on reg when
// reg is not nil. Per-worker labels are bounded by the fleet: namespace (at
// most 16 configured), worker (lowercase hex instance id) and dp_rank.
func NewLoadMetrics(reg prometheus.Registerer) *LoadMetrics {
	worker := []string{"namespace", "worker", "dp_rank"}
	m := &LoadMetrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_dynamo_load_events_total",
			Help: "kv_metrics messages by result: accepted, or why one was dropped (malformed, unknown_version, topic_mismatch, oversized, identity_mismatch, over_capacity, duplicate, transport_refused).",
		}, []string{"result"}),
		Subscriptions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "continuum_dynamo_load_subscriptions",
			Help: "kv_metrics subscriptions by state (pending, connecting, connected, backoff) and transport (direct, broker).",
		}, []string{"state", "transport"}),
		ActiveDecodeBlocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "continuum_dynamo_worker_active_decode_blocks",
			Help: "Latest active_decode_blocks sample of a worker rank.",
		}, worker),
		ActivePrefillTokens: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "continuum_dynamo_worker_active_prefill_tokens",
			Help: "Latest active_prefill_tokens sample of a worker rank.",
		}, worker),
		KVUsedBlocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "continuum_dynamo_worker_kv_used_blocks",
			Help: "Latest kv_used_blocks sample of a worker rank.",
		}, worker),
	}
	for _, r := range LoadResults {
		m.Events.WithLabelValues(r)
	}
	presetSubscriptions(m.Subscriptions)
	if reg != nil {
		reg.MustRegister(m.Events, m.Subscriptions, m.ActiveDecodeBlocks, m.ActivePrefillTokens, m.KVUsedBlocks)
	}
	return m
}

// RouterMetrics are the router's families.
type RouterMetrics struct {
	Selections      *prometheus.CounterVec
	DisaggRequests  *prometheus.CounterVec
	DisaggErrors    *prometheus.CounterVec
	Requests        *prometheus.CounterVec
	RequestDuration *prometheus.HistogramVec
	// Repins counts pinned dispatches tried again on other workers, by the
	// failure that called for it.
	Repins *prometheus.CounterVec
	// BusyRefusals counts 503 all_workers_busy answers, by why the request
	// did not wait.
	BusyRefusals *prometheus.CounterVec
	// QueueDepth, QueueWaits and QueueWaitSeconds follow the queue of
	// requests waiting for a worker with room.
	QueueDepth       prometheus.Gauge
	QueueWaits       *prometheus.CounterVec
	QueueWaitSeconds prometheus.Histogram
	// Overloaded counts what the listener refused by reason
	// (OverloadInFlight, OverloadConnections).
	Overloaded *prometheus.CounterVec
	// Connections is the number of open client connections.
	Connections prometheus.Gauge
}

// Reasons of continuum_dynamo_busy_refusals_total{reason}. The set is
// closed.
const (
	// BusyNoQueue: every worker was busy and no queue is configured.
	BusyNoQueue = "no_queue"
	// BusyQueueFull: every worker was busy and the queue was full.
	BusyQueueFull = "queue_full"
	// BusyQueueTimeout: the request waited its max_wait in the queue.
	BusyQueueTimeout = "queue_timeout"
)

// Results of continuum_dynamo_queue_waits_total{result}: how a request
// left the queue. The set is closed.
const (
	// QueueDispatched: a worker had room; the request was pinned.
	QueueDispatched = "dispatched"
	// QueueTimeout: it waited max_wait (and was answered 503).
	QueueTimeout = "timeout"
	// QueueCancelled: its client went away.
	QueueCancelled = "cancelled"
	// QueueUnpinned: while it waited the model could no longer be pinned
	// (its workers left, or pinning was turned off): it went the plain way.
	QueueUnpinned = "unpinned"
)

// Reasons of continuum_http_overload_rejections_total.
const (
	// OverloadInFlight: a request beyond server.max_in_flight (503).
	OverloadInFlight = "in_flight"
	// OverloadConnections: a connection beyond server.max_connections,
	// closed once accepted.
	OverloadConnections = "connections"
)

// SelectionReasons is the closed set of continuum_dynamo_selection_total
// labels: the reasons each role's selection can have. A decode worker is
// chosen by load, by the stale round robin or by the KV-aware formula; a
// prefill selection can also be none (no_prefill_pool: the decode worker
// is aggregated or the model has no prefill worker) or the decode worker
// prefilling itself (conditional_bypass).
var SelectionReasons = map[string][]string{
	"decode":  {"load", "round_robin_stale", "kv_aware"},
	"prefill": {"load", "round_robin_stale", "no_prefill_pool", "kv_aware", "conditional_bypass"},
}

// RoutingPaths and ErrorPhases are the closed sets of
// disaggregated_requests_total{routing_path} and
// disaggregated_errors_total{phase}.
var (
	RoutingPaths = []string{"disaggregated", "aggregated", "unified", "fallback"}
	ErrorPhases  = []string{"orchestration", "decode"}
)

// NewRouterMetrics creates the router families and registers them on reg
// when reg is not nil.
func NewRouterMetrics(reg prometheus.Registerer) *RouterMetrics {
	m := &RouterMetrics{
		Selections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_dynamo_selection_total",
			Help: "Worker selections by role (prefill, decode) and reason (load, round_robin_stale, no_prefill_pool, kv_aware, conditional_bypass).",
		}, []string{"role", "reason"}),
		DisaggRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "disaggregated_requests_total",
			Help: "Requests by routing path (disaggregated, aggregated, unified, fallback), once per request.",
		}, []string{"routing_path"}),
		DisaggErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "disaggregated_errors_total",
			Help: "Disaggregated dispatch failures by phase (orchestration, decode).",
		}, []string{"phase"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_http_requests_total",
			Help: "HTTP requests by route and status class.",
		}, []string{"route", "code"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "continuum_http_request_duration_seconds",
			Help:    "HTTP request duration by route, to the last byte.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}, []string{"route"}),
		Repins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_dynamo_repin_total",
			Help: "Pinned dispatches tried again on other workers before any response byte, by the frontend's failure (instance_not_found, engine_unreachable, status_5xx).",
		}, []string{"reason"}),
		BusyRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_dynamo_busy_refusals_total",
			Help: "Requests answered 503 all_workers_busy, by why they did not wait (no_queue, queue_full, queue_timeout).",
		}, []string{"reason"}),
		QueueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_dynamo_queue_depth",
			Help: "Requests waiting for a worker with room (dynamo.load.queue).",
		}),
		QueueWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_dynamo_queue_waits_total",
			Help: "Requests that waited for a worker with room, by how the wait ended (dispatched, timeout, cancelled, unpinned).",
		}, []string{"result"}),
		QueueWaitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "continuum_dynamo_queue_wait_seconds",
			Help:    "Time requests waited for a worker with room, however the wait ended.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}),
		Overloaded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_http_overload_rejections_total",
			Help: "Requests and connections the listener refused by reason (in_flight: over server.max_in_flight; connections: over server.max_connections).",
		}, []string{"reason"}),
		Connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_http_connections",
			Help: "Open client connections on the main listener.",
		}),
	}
	for _, r := range []string{"instance_not_found", "engine_unreachable", "status_5xx"} {
		m.Repins.WithLabelValues(r)
	}
	for _, r := range []string{BusyNoQueue, BusyQueueFull, BusyQueueTimeout} {
		m.BusyRefusals.WithLabelValues(r)
	}
	for _, r := range []string{QueueDispatched, QueueTimeout, QueueCancelled, QueueUnpinned} {
		m.QueueWaits.WithLabelValues(r)
	}
	for _, r := range []string{OverloadConnections, OverloadInFlight} {
		m.Overloaded.WithLabelValues(r)
	}
	for role, reasons := range SelectionReasons {
		for _, r := range reasons {
			m.Selections.WithLabelValues(role, r)
		}
	}
	for _, p := range RoutingPaths {
		m.DisaggRequests.WithLabelValues(p)
	}
	for _, p := range ErrorPhases {
		m.DisaggErrors.WithLabelValues(p)
	}
	if reg != nil {
		reg.MustRegister(m.Selections, m.DisaggRequests, m.DisaggErrors, m.Requests, m.RequestDuration,
			m.Repins, m.BusyRefusals, m.QueueDepth, m.QueueWaits, m.QueueWaitSeconds, m.Overloaded, m.Connections)
	}
	return m
}

// Results of continuum_dynamo_kv_artifacts_total: one per artifact (or
// block size) judged. The set is closed.
const (
	// ArtifactLoaded: fetched, verified and built.
	ArtifactLoaded = "loaded"
	// ArtifactUnpinned: the declared checksum is not in kv.pinned_artifacts;
	// nothing was fetched.
	ArtifactUnpinned = "unpinned"
	// ArtifactUnsupported: a slot format, URI scheme or block size the
	// router does not handle.
	ArtifactUnsupported = "unsupported"
	// ArtifactDisallowed: an http(s):// or hf:// reference while
	// kv.allow_http_artifacts or kv.allow_hf_artifacts is off.
	ArtifactDisallowed = "disallowed"
	// ArtifactMalformed: a slot that is not a valid CheckedFile.
	ArtifactMalformed = "malformed"
	// ArtifactTooLarge: larger than 64 MiB.
	ArtifactTooLarge = "too_large"
	// ArtifactChecksumMismatch: the bytes fetched do not hash to the
	// declared checksum.
	ArtifactChecksumMismatch = "checksum_mismatch"
	// ArtifactCacheCorrupt: a cached blob failed verification on read and
	// was removed (it is fetched again).
	ArtifactCacheCorrupt = "cache_corrupt"
	// ArtifactFetchFailed: the file or URL could not be read.
	ArtifactFetchFailed = "fetch_failed"
	// ArtifactBuildFailed: the bytes verified but did not build (a
	// tokenizer or template that does not load).
	ArtifactBuildFailed = "build_failed"
	// ArtifactOverCapacity: 16 artifacts or 256 MiB are loaded and none
	// can be evicted.
	ArtifactOverCapacity = "over_capacity"
)

// ArtifactResults lists every result of continuum_dynamo_kv_artifacts_total.
var ArtifactResults = []string{
	ArtifactLoaded, ArtifactUnpinned, ArtifactUnsupported, ArtifactDisallowed, ArtifactMalformed,
	ArtifactTooLarge, ArtifactChecksumMismatch, ArtifactCacheCorrupt, ArtifactFetchFailed,
	ArtifactBuildFailed, ArtifactOverCapacity,
}

// ArtifactMetrics is the artifact family of KV-aware selection. The kv
// package counts unsupported block sizes on the same counter.
type ArtifactMetrics struct {
	Artifacts *prometheus.CounterVec
}

// NewArtifactMetrics creates continuum_dynamo_kv_artifacts_total and
// registers it on reg when reg is not nil.
func NewArtifactMetrics(reg prometheus.Registerer) *ArtifactMetrics {
	m := &ArtifactMetrics{
		Artifacts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_dynamo_kv_artifacts_total",
			Help: "Tokenizer and chat-template artifacts by result (loaded, unpinned, unsupported, disallowed, malformed, too_large, checksum_mismatch, cache_corrupt, fetch_failed, build_failed, over_capacity).",
		}, []string{"result"}),
	}
	for _, r := range ArtifactResults {
		m.Artifacts.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Artifacts)
	}
	return m
}

// KVMetrics are the families of KV-aware selection: the kv-events
// subscriptions, what became of each event, the index's size, and what
// each selection came to.
type KVMetrics struct {
	Subscriptions *prometheus.GaugeVec
	Events        *prometheus.CounterVec
	Selections    *prometheus.CounterVec
	IndexNodes    prometheus.Gauge
	IndexOwners   prometheus.Gauge
	IndexBytes    prometheus.Gauge
}

// KVEventResults is the closed set of continuum_dynamo_kv_events_total
// results: what the index did with an event, and why a kv-events message
// or session was refused before reaching it.
var KVEventResults = []string{
	ResultAccepted, "replay", "gap", "over_capacity", "identity_mismatch", "other_tier", "cache_owner",
	"multimodal", "unknown_parent", "unsupported", "malformed", "unknown_version", "topic_mismatch", "oversized", "transport_refused",
}

// KVSelectionResults is the closed set of
// continuum_dynamo_kv_selection_total results.
var KVSelectionResults = []string{
	"overlap", "no_overlap", "tokenizer_unavailable", "prompt_too_large", "render_unavailable", "artifact_unpinned", "bypass",
}

// NewKVMetrics creates the KV families and registers them on reg when reg
// is not nil.
func NewKVMetrics(reg prometheus.Registerer) *KVMetrics {
	m := &KVMetrics{
		Subscriptions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "continuum_dynamo_kv_subscriptions",
			Help: "kv-events subscriptions by state (pending, connecting, connected, backoff) and transport (direct, broker).",
		}, []string{"state", "transport"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_dynamo_kv_events_total",
			Help: "kv-events by result: accepted, or why one was not indexed (malformed, oversized, transport_refused, identity_mismatch, replay, gap, over_capacity, other_tier, cache_owner, multimodal, unknown_parent, ...).",
		}, []string{"result"}),
		Selections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_dynamo_kv_selection_total",
			Help: "KV-aware selections by result (overlap, no_overlap, tokenizer_unavailable, prompt_too_large, render_unavailable, artifact_unpinned, bypass).",
		}, []string{"result"}),
		IndexNodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_dynamo_kv_index_nodes",
			Help: "Blocks (radix nodes) held by the KV index.",
		}),
		IndexOwners: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_dynamo_kv_index_ownerships",
			Help: "(worker rank, block) ownerships held by the KV index.",
		}),
		IndexBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_dynamo_kv_index_bytes",
			Help: "Estimated memory held by the KV index, in bytes.",
		}),
	}
	presetSubscriptions(m.Subscriptions)
	for _, r := range KVEventResults {
		m.Events.WithLabelValues(r)
	}
	for _, r := range KVSelectionResults {
		m.Selections.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Subscriptions, m.Events, m.Selections, m.IndexNodes, m.IndexOwners, m.IndexBytes)
	}
	return m
}

// Reload results: continuum_config_reloads_total{result}.
const (
	ReloadApplied  = "applied"
	ReloadRejected = "rejected"
)

// ConfigMetrics are the configuration reload families.
type ConfigMetrics struct {
	Reloads    *prometheus.CounterVec
	Generation prometheus.Gauge
	LastReload prometheus.Gauge
	LastOK     prometheus.Gauge
}

// NewConfigMetrics creates the reload families and registers them on reg
// when reg is not nil.
func NewConfigMetrics(reg prometheus.Registerer) *ConfigMetrics {
	m := &ConfigMetrics{
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_config_reloads_total",
			Help: "Configuration reloads by result (applied, rejected).",
		}, []string{"result"}),
		Generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_config_generation",
			Help: "Generation of the running configuration: 1 at start, one more per applied reload.",
		}),
		LastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_config_last_reload_timestamp_seconds",
			Help: "When the last reload was attempted (Unix seconds; 0 before the first).",
		}),
		LastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_config_last_reload_success",
			Help: "1 when the last reload was applied, 0 when it was rejected (1 before the first).",
		}),
	}
	m.Generation.Set(1)
	m.LastOK.Set(1)
	if reg != nil {
		reg.MustRegister(m.Reloads, m.Generation, m.LastReload, m.LastOK)
	}
	return m
}

// EventBusMetrics are the event bus families of the router: its listener,
// and how the broker transport's subscriptions are covered. No label
// carries a stream id, a session id or a client string; broker is a
// configured broker id and namespace a configured Dynamo namespace.
type EventBusMetrics struct {
	Sessions             prometheus.Gauge
	Streams              prometheus.Gauge
	Refusals             *prometheus.CounterVec
	NamespaceSessions    *prometheus.GaugeVec
	PendingSubscriptions *prometheus.GaugeVec
	BrokerSubscriptions  *prometheus.GaugeVec
}

// NewEventBusMetrics creates the event bus families and registers them on
// reg when reg is not nil.
func NewEventBusMetrics(reg prometheus.Registerer) *EventBusMetrics {
	m := &EventBusMetrics{
		Sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_dynamo_event_bus_sessions",
			Help: "Event bus sessions (brokers and kv-listeners) past their welcome.",
		}),
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_dynamo_event_bus_streams",
			Help: "Event bus data streams open.",
		}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_dynamo_event_bus_refusals_total",
			Help: "Connections and requests the event bus listener refused, by code (tls_required, unauthenticated, forbidden, too_many_sessions, ...).",
		}, []string{"code"}),
		NamespaceSessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "continuum_dynamo_broker_namespace_sessions",
			Help: "Broker sessions covering each configured Dynamo namespace (transport: broker).",
		}, []string{"namespace"}),
		PendingSubscriptions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "continuum_dynamo_broker_pending_subscriptions",
			Help: "Broker-transport subscriptions waiting for a broker to cover their namespace, by family and configured namespace.",
		}, []string{"family", "namespace"}),
		BrokerSubscriptions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "continuum_dynamo_broker_subscriptions",
			Help: "Connected subscriptions each configured broker relays, by family.",
		}, []string{"family", "broker"}),
	}
	if reg != nil {
		reg.MustRegister(m.Sessions, m.Streams, m.Refusals, m.NamespaceSessions, m.PendingSubscriptions, m.BrokerSubscriptions)
	}
	return m
}

// Broker stream results: continuum_broker_streams_total{result} counts
// "opened" and each code a stream was refused or ended with.
const BrokerStreamOpened = "opened"

// BrokerMetrics are the families of `continuum broker` and `continuum
// kv-listener`, served on their own metrics address.
type BrokerMetrics struct {
	Connected  prometheus.Gauge
	Sessions   *prometheus.CounterVec
	Streams    prometheus.Gauge
	StreamsBy  *prometheus.CounterVec
	Bytes      *prometheus.CounterVec
	Advertised prometheus.Gauge
}

// NewBrokerMetrics creates the broker families and registers them on reg
// when reg is not nil.
func NewBrokerMetrics(reg prometheus.Registerer) *BrokerMetrics {
	m := &BrokerMetrics{
		Connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_broker_session_connected",
			Help: "1 while the session with the router's event bus is up, else 0.",
		}),
		Sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_broker_sessions_total",
			Help: "Session attempts by result: welcomed, or the refusal code (unauthenticated, forbidden, ...), or failed.",
		}, []string{"result"}),
		Streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_broker_streams",
			Help: "Streams being relayed.",
		}),
		StreamsBy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_broker_streams_total",
			Help: "Streams the router commanded, by result: opened, or the code it was refused or ended with (target_not_advertised, connect_failed, publisher_closed, ...).",
		}, []string{"result"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "continuum_broker_relayed_bytes_total",
			Help: "Bytes relayed, by direction (to_router, to_source).",
		}, []string{"direction"}),
		Advertised: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "continuum_broker_advertised_publishers",
			Help: "Publishers discovery advertises in the declared namespaces (the targets the broker accepts).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Connected, m.Sessions, m.Streams, m.StreamsBy, m.Bytes, m.Advertised)
	}
	return m
}
