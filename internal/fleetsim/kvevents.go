package fleetsim

import (
	"encoding/binary"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zeebo/xxh3"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// A simulated worker publishes its KV cache as a vLLM worker under Dynamo
// does: a stored event per run of newly computed blocks (engine blocks of
// kv_cache_block_size tokens, each with Dynamo's XXH3 tokens_hash and the
// engine's own opaque block hash, chained by parent_hash), and a removed
// event for the blocks evicted to make room.

// vocabSize bounds the synthetic token ids (Qwen3's vocabulary).
const vocabSize = 151_936

// TraceBlockTokenIDs returns the tokens a workload block id stands for: the
// same ids for the same block everywhere, so that equal prefixes hash
// equally across workers.
func TraceBlockTokenIDs(id uint64) []uint32 {
	out := make([]uint32, TraceBlockTokens)
	x := id*0x9e3779b97f4a7c15 + 1
	for i := range out {
		// splitmix64
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		out[i] = uint32((z ^ z>>31) % vocabSize)
	}
	return out
}

// engineBlocks returns the stored blocks of one trace block: tokens_hash
// per Dynamo, and an engine hash unique to (trace block, index).
func engineBlocks(id uint64, blockSize int) []wire.StoredBlock {
	local := wire.LocalBlockHashes(TraceBlockTokenIDs(id), blockSize, wire.XXH3Seed)
	out := make([]wire.StoredBlock, len(local))
	for j, h := range local {
		out[j] = wire.StoredBlock{BlockHash: engineHash(id, j), TokensHash: h}
	}
	return out
}

// engineHash is the engine's block hash of block j of trace block id:
// deterministic, and spread over the whole u64 range as vLLM's are (i64
// hashes reinterpreted as u64, so about half have the top bit set).
func engineHash(id uint64, j int) uint64 {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:8], id)
	binary.LittleEndian.PutUint64(buf[8:], uint64(j))
	return xxh3.Hash(buf[:])
}

// publishKV sends the events of one request's cache update on a rank;
// w.kvMu is held.
func (w *simWorker) publishKV(rank int, blocks []uint64, inserted []bool, evicted []uint64) {
	perTrace := TraceBlockTokens / w.blockSize
	var events []wire.RouterEvent
	for i := 0; i < len(blocks); {
		if !inserted[i] {
			i++
			continue
		}
		ev := wire.RouterEvent{WorkerID: w.id, DPRank: uint32(rank), Kind: wire.KVStored}
		if i > 0 {
			parent := engineHash(blocks[i-1], perTrace-1)
			ev.ParentHash = &parent
		}
		for ; i < len(blocks) && inserted[i]; i++ {
			ev.Blocks = append(ev.Blocks, engineBlocks(blocks[i], w.blockSize)...)
		}
		events = append(events, ev)
	}
	if len(evicted) > 0 {
		ev := wire.RouterEvent{WorkerID: w.id, DPRank: uint32(rank), Kind: wire.KVRemoved}
		for _, id := range evicted {
			for j := range perTrace {
				ev.Removed = append(ev.Removed, engineHash(id, j))
			}
		}
		events = append(events, ev)
	}
	w.sendKV(events)
}

// publishCleared says every rank's cache is empty (after a restart);
// w.kvMu is held.
func (w *simWorker) publishCleared() {
	var events []wire.RouterEvent
	for r := range w.dpSize {
		events = append(events, wire.RouterEvent{WorkerID: w.id, DPRank: uint32(r), Kind: wire.KVCleared})
	}
	w.sendKV(events)
}

// sendKV numbers and sends events; w.kvMu is held.
func (w *simWorker) sendKV(events []wire.RouterEvent) {
	for _, ev := range events {
		w.mu.Lock()
		if w.silent || w.dead {
			w.mu.Unlock()
			return
		}
		ev.EventID = w.kvEventID
		w.kvEventID++
		seq := w.kvSeq
		w.kvSeq++
		w.mu.Unlock()
		_ = w.kvPub.Send(zmq4.NewMsgFrom(wire.EncodeEventMessage("kv-events", w.kvPublisherID, seq, uint64(time.Now().UnixMilli()), wire.EncodeRouterEvent(ev))...))
	}
}
