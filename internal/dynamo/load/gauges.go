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

func labels(k Key) prometheus.Labels {
	return prometheus.Labels{"namespace": k.Namespace.String(), "worker": wire.FormatID(k.WorkerID), "dp_rank": strconv.FormatUint(uint64(k.DPRank), 10)}
}

func setOrDelete(g *prometheus.GaugeVec, l prometheus.Labels, v *uint64) {
	if v == nil {
		g.Delete(l)
		return
	}
	g.With(l).Set(float64(*v))
}

// SampleSet implements Observer.
func (g Gauges) SampleSet(k Key, s *Sample) {
	if g.M == nil {
		return
	}
	l := labels(k)
	setOrDelete(g.M.ActiveDecodeBlocks, l, s.Load.ActiveDecodeBlocks)
	setOrDelete(g.M.ActivePrefillTokens, l, s.Load.ActivePrefillTokens)
	setOrDelete(g.M.KVUsedBlocks, l, s.Load.KVUsedBlocks)
}

// SampleDropped implements Observer.
func (g Gauges) SampleDropped(k Key) {
	if g.M == nil {
		return
	}
	l := labels(k)
	g.M.ActiveDecodeBlocks.Delete(l)
	g.M.ActivePrefillTokens.Delete(l)
	g.M.KVUsedBlocks.Delete(l)
}
