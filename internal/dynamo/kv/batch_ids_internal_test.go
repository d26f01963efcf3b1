package kv

import (
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// mp is a minimal msgpack writer for the bytes rmp_serde::to_vec_named
// writes (fixmap/fixstr/fixarray and compact uints).
type mp struct{ b []byte }

func (m *mp) mapN(n int)   { m.b = append(m.b, 0x80|byte(n)) }
func (m *mp) arrN(n int)   { m.b = append(m.b, 0x90|byte(n)) }
func (m *mp) str(s string) { m.b = append(m.b, 0xa0|byte(len(s))); m.b = append(m.b, s...) }
func (m *mp) null()        { m.b = append(m.b, 0xc0) }
func (m *mp) u64(v uint64) {
	if v < 128 {
		m.b = append(m.b, byte(v))
		return
	}
	m.b = append(m.b, 0xcf, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// oldStoredEvent is one RouterEvent as the older worker publisher
// (lib/llm/src/kv_router/publisher.rs, convert_event(raw_event, seq, ...))
// sends it: RouterEvent::new(worker_id, event) with event_id = the vLLM
// batch's ZMQ sequence number, shared by every event of that batch, one
// RouterEvent per event-plane message; KvCacheStoredBlockData skips a None
// mm_extra_info.
func oldStoredEvent(worker, eventID uint64, parent *uint64, blocks [][2]uint64) []byte {
	var m mp
	m.mapN(2)
	m.str("worker_id")
	m.u64(worker)
	m.str("event")
	m.mapN(3)
	m.str("event_id")
	m.u64(eventID)
	m.str("data")
	m.mapN(1)
	m.str("stored")
	m.mapN(2)
	m.str("parent_hash")
	if parent == nil {
		m.null()
	} else {
		m.u64(*parent)
	}
	m.str("blocks")
	m.arrN(len(blocks))
	for _, b := range blocks {
		m.mapN(2)
		m.str("block_hash")
		m.u64(b[0])
		m.str("tokens_hash")
		m.u64(b[1])
	}
	m.str("dp_rank")
	m.u64(0)
	return m.b
}

// TestOlderPublisherBatchSharesEventID: an older Dynamo worker
// publisher numbers every event of one vLLM KVEventBatch with the batch's
// sequence number and publishes each as its own message. Two requests
// whose blocks were stored in the same engine step arrive as two messages
// with event_id 7 and different content; both must be indexed.
// TestOlderPublisherBatchSharesEventID: the events of one engine batch,
// numbered alike and sent one per message, are all indexed.
func TestOlderPublisherBatchSharesEventID(t *testing.T) {
	t.Parallel()
	ix := NewIndex()
	ix.SetLive(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1}: {DPSize: 1}})
	s := NewSubscriptions(nil, ix, nil, nil, nil)
	const pid = 0x1f3a4b
	h := s.newReader(fleet.Publisher{Namespace: "dynamo", Component: "backend", Topic: "kv_events", PublisherID: pid})
	r := h.(*eventReader)

	// vLLM batch seq 7: request A stored two blocks, request B one.
	msgs := [][]byte{
		oldStoredEvent(1, 7, nil, [][2]uint64{{0x8000000000000001, 101}, {0x8000000000000002, 102}}),
		oldStoredEvent(1, 7, nil, [][2]uint64{{0x8000000000000003, 201}}),
	}
	for seq, payload := range msgs {
		r.Message(wire.EncodeEventMessage("kv_events", pid, uint64(seq), uint64(time.Now().UnixMilli()), payload), time.Now())
	}
	for _, tc := range []struct {
		name   string
		hashes []uint64
		want   int
	}{{"request A", []uint64{101, 102}, 2}, {"request B", []uint64{201}, 1}} {
		got := ix.FindMatches(tc.hashes, nil)
		if len(got) != 1 || got[0].Blocks != tc.want {
			t.Errorf("%s: matches %+v, want worker 1 holding %d blocks (the second event of engine batch 7 was taken for a replay)", tc.name, got, tc.want)
		}
	}
}
