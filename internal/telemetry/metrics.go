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
	if reg != nil {
		reg.MustRegister(m.Events, m.Connected)
	}
	return m
}

// Load event results beyond the rejections: a sample stored.
const ResultAccepted = "accepted"

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
}

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
	}
	if reg != nil {
		reg.MustRegister(m.Selections, m.DisaggRequests, m.DisaggErrors, m.Requests, m.RequestDuration)
	}
	return m
}
