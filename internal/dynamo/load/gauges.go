package load

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// Gauges mirrors the store into the per-worker gauges: a nil field makes no
// series, and a departed worker's series are deleted at once.
type Gauges struct{ M *telemetry.LoadMetrics }

var _ Observer = Gauges{}

func labels(k Key, namespace string) prometheus.Labels {
	return prometheus.Labels{"namespace": namespace, "worker": wire.FormatID(k.WorkerID), "dp_rank": strconv.FormatUint(uint64(k.DPRank), 10)}
}

func setOrDelete(g *prometheus.GaugeVec, l prometheus.Labels, v *uint64) {
	if v == nil {
		g.Delete(l)
		return
	}
	g.With(l).Set(float64(*v))
}

// SampleSet implements Observer.
func (g Gauges) SampleSet(k Key, namespace string, s *Sample) {
	if g.M == nil {
		return
	}
	l := labels(k, namespace)
	setOrDelete(g.M.ActiveDecodeBlocks, l, s.Load.ActiveDecodeBlocks)
	setOrDelete(g.M.ActivePrefillTokens, l, s.Load.ActivePrefillTokens)
	setOrDelete(g.M.KVUsedBlocks, l, s.Load.KVUsedBlocks)
}

// SampleDropped implements Observer.
func (g Gauges) SampleDropped(k Key, namespace string) {
	if g.M == nil {
		return
	}
	l := labels(k, namespace)
	g.M.ActiveDecodeBlocks.Delete(l)
	g.M.ActivePrefillTokens.Delete(l)
	g.M.KVUsedBlocks.Delete(l)
}
