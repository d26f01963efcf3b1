package kv

import (
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// TestBypassBusyThresholdInclusive: with
// decode_busy_threshold the bypass is allowed only when the decode
// worker's expected active blocks are at most that share of
// total_kv_blocks: equal passes, one block over refuses; no capacity
// refuses.
func TestBypassBusyThresholdInclusive(t *testing.T) {
	t.Parallel()
	bs, capacity := uint32(16), uint64(100)
	w := &fleet.Worker{ID: fleet.WorkerID{Namespace: "dynamo", InstanceID: 21}, BlockSize: &bs}
	w.Capacity.TotalKVBlocks = &capacity
	busy := 0.5
	// 100 tokens, 6 blocks held: lacks 4 tokens; adds ceil(100/16)-6 = 1 block.
	ch := &choice{terms: Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}, isl: 100, overlaps: overlapMap{{21, 0}: 6}, conditional: true, busy: &busy}
	d := pick.Candidate{Worker: w, HasDecode: true, Fresh: true}
	d.DecodeBlocks = 49 // 49 + 1 = 50 = 0.5 * 100
	if !ch.Bypass(d) {
		t.Errorf("expected active blocks equal to the threshold: bypass refused")
	}
	d.DecodeBlocks = 50 // 51 > 50
	if ch.Bypass(d) {
		t.Errorf("expected active blocks over the threshold: bypassed")
	}
	w.Capacity.TotalKVBlocks = nil
	d.DecodeBlocks = 0
	if ch.Bypass(d) {
		t.Errorf("no capacity: bypassed")
	}
}
