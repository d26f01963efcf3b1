package kv_test

import (
	"bytes"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// FuzzIndexPayloads: kv-events payloads off the network (msgpack, several
// split at "\x00SEP\x00") decoded and applied to an index with small caps
// from two subscriptions, one of them cleared now and then: the index's
// invariants hold after every event and its sizes within the caps.
func FuzzIndexPayloads(f *testing.F) {
	p := func(u uint64) *uint64 { return &u }
	evs := []wire.RouterEvent{
		{WorkerID: 1, EventID: 1, Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: 10, TokensHash: 100}, {BlockHash: 11, TokensHash: 101}}},
		{WorkerID: 1, EventID: 2, Kind: wire.KVStored, ParentHash: p(11), Blocks: []wire.StoredBlock{{BlockHash: 12, TokensHash: 102}}},
		{WorkerID: 2, DPRank: 1, EventID: 1, Kind: wire.KVStored, Blocks: []wire.StoredBlock{{BlockHash: 10, TokensHash: 100}}},
		{WorkerID: 1, EventID: 3, Kind: wire.KVRemoved, Removed: []uint64{11}},
		{WorkerID: 1, EventID: 5, Kind: wire.KVCleared},
	}
	var all [][]byte
	for _, e := range evs {
		all = append(all, wire.EncodeRouterEvent(e))
	}
	sep := []byte("\x00SEP\x00")
	f.Add(bytes.Join(all, sep))
	for _, b := range all {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ix := kv.NewIndexWithLimits(kv.Limits{Blocks: 16, PerRank: 8, Ownerships: 24, PerNode: 2, Cursors: 3})
		live := map[fleet.WorkerID]load.LiveWorker{}
		for w := uint64(0); w < 4; w++ {
			live[fleet.WorkerID{Namespace: "d", InstanceID: w}] = load.LiveWorker{DPSize: 2}
		}
		ix.SetLive(live)
		var dst []wire.RouterEvent
		var m []kv.Match
		for i, payload := range bytes.Split(data, sep) {
			var err error
			dst, err = wire.DecodeRouterEvents(payload, dst[:0])
			if err != nil {
				continue
			}
			for j := range dst {
				ix.Apply(kv.SubscriptionID(1+i%2), load.NS("d"), &dst[j])
				if s := ix.CheckInvariants(); s != "" {
					t.Fatalf("payload %d event %d %+v: %s", i, j, dst[j], s)
				}
				var hs []uint64
				for _, b := range dst[j].Blocks {
					hs = append(hs, b.TokensHash)
				}
				m = ix.FindMatches(hs, m[:0])
			}
			if i%3 == 2 {
				ix.ClearSubscription(kv.SubscriptionID(1))
				if s := ix.CheckInvariants(); s != "" {
					t.Fatalf("after clear: %s", s)
				}
			}
		}
		st := ix.Stats()
		if st.Nodes > 16 || st.Ownerships > 24 || st.Cursors > 6 {
			t.Fatalf("over the caps: %+v", st)
		}
	})
}
