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
