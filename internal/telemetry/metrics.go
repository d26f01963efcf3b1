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
