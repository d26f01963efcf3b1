package pick

import (
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// BusyThreshold says when a (worker, rank) is too full to be sent more
// work. It is busy when the KV blocks it has in use exceed KVBlocks of its
// total_kv_blocks, or its prefill backlog exceeds PrefillTokens times its
// max_num_batched_tokens (a zero threshold, or a card without the
// capacity, judges nothing). Once busy it stays busy until every signal is
// at least Hysteresis below its threshold, so that a worker hovering at
// the threshold does not flap in and out of candidacy.
//
// The signals are the router's view of the (worker, rank): its fresh
// sample (blocks in use: the larger of active_decode_blocks and
// kv_used_blocks; prefill: active_prefill_tokens) plus what was dispatched
// to it since. Busy candidates are passed over while the phase has a fresh
// sample at all; with none, nothing can be judged and the round-robin rule
// ignores busyness as it ignores load.
type BusyThreshold struct {
	KVBlocks      float64
	PrefillTokens float64
	Hysteresis    float64
}

// NewBusyThreshold is the rule a dynamo.load.busy_threshold block sets: a
// fraction it leaves unset is 0, a signal that never makes a rank busy.
func NewBusyThreshold(kvBlocks, prefillTokens *float64, hysteresis float64) *BusyThreshold {
	t := &BusyThreshold{Hysteresis: hysteresis}
	if kvBlocks != nil {
		t.KVBlocks = *kvBlocks
	}
	if prefillTokens != nil {
		t.PrefillTokens = *prefillTokens
	}
	return t
}

// busyState is a picker's busy rule and the (worker, rank)s it holds busy
// (the latches the hysteresis needs), shared by the picker's indexes and
// guarded by the picker's lock.
type busyState struct {
	on      bool
	rule    BusyThreshold
	latched map[load.Key]struct{}
}

// maxLatched bounds the latches held; past it a busy key is not latched
// (it is busy only while over its threshold).
const maxLatched = maxLedgerKeys

// judge says whether k (of worker w) is busy with blocks in use and
// prefill tokens, and updates its latch. Judging the same signals again
// gives the same answer, so when a key is judged does not matter, only
// with what.
func (b *busyState) judge(k load.Key, w *fleet.Worker, blocks, tokens float64) bool {
	_, latched := b.latched[k]
	over := func(v, threshold float64, capacity *uint64) bool {
		if threshold <= 0 || capacity == nil || *capacity == 0 {
			return false
		}
		if latched {
			threshold -= b.rule.Hysteresis
		}
		return v > threshold*float64(*capacity)
	}
	busy := over(blocks, b.rule.KVBlocks, w.Capacity.TotalKVBlocks) || over(tokens, b.rule.PrefillTokens, w.Capacity.MaxNumBatchedTokens)
	switch {
	case busy && !latched && len(b.latched) < maxLatched:
		b.latched[k] = struct{}{}
	case !busy && latched:
		delete(b.latched, k)
	}
	return busy
}

// signals are the busy signals of a (worker, rank): blocks in use and
// prefill tokens, from its sample when fresh plus what was dispatched to
// it since.
func signals(smp *load.Sample, fresh bool, inPrefill, inDecode int) (blocks, tokens float64) {
	blocks, tokens = float64(inDecode), float64(inPrefill)
	if fresh {
		l := &smp.Load
		var used uint64
		if v := l.ActiveDecodeBlocks; v != nil {
			used = *v
		}
		if v := l.KVUsedBlocks; v != nil && *v > used {
			used = *v
		}
		blocks += float64(used)
		if v := l.ActivePrefillTokens; v != nil {
			tokens += float64(*v)
		}
	}
	return blocks, tokens
}

// setBusy makes rule the busy rule (nil: off). A changed rule forgets the
// latches and has every index recompute its candidates. The caller holds
// p.mu.
func (p *LoadBased) setBusy(rule *BusyThreshold) {
	b := &p.busy
	on := rule != nil
	if on == b.on && (!on || *rule == b.rule) {
		return
	}
	b.on = on
	b.rule = BusyThreshold{}
	if on {
		b.rule = *rule
	}
	clear(b.latched)
	for _, c := range p.caches {
		if c != nil {
			for _, x := range c.all {
				x.stale = true
			}
		}
	}
}

// pruneLatches forgets the latches of workers not in snap (departed).
// The caller holds p.mu.
func (p *LoadBased) pruneLatches(snap *fleet.Snapshot) {
	if len(p.busy.latched) == 0 {
		return
	}
	ids := make(map[fleet.WorkerID]struct{}, snap.Workers.Len())
	for w := range snap.Workers.All() {
		ids[w.ID] = struct{}{}
	}
	for k := range p.busy.latched {
		if _, ok := ids[k.ID()]; !ok {
			delete(p.busy.latched, k)
		}
	}
}
