package fleetsim

import (
	"context"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// A simulated worker publishes its KV cache as a vLLM worker under Dynamo
// does, once the prefill that computed the blocks is done: a stored event
// per run of newly cached blocks (each with Dynamo's XXH3 tokens_hash and
// the engine's own hash, the run chained to the engine hash of the block
// before it, none at the root), a removed event for the blocks evicted to
// make room, and a cleared event per rank after a restart. Event ids count
// up by one per rank.

// maxBlocksPerEvent splits longer runs into several chained stored events
// (and longer evictions into several removed events), well under what one
// kv-events payload may carry.
const maxBlocksPerEvent = 4096

// rankEngine is one data-parallel rank of a worker: its KV cache, the end
// of the prefill work queued on it, and its kv-events. The worker's kvMu
// guards everything but out, which has its own lock.
type rankEngine struct {
	cache     *blockCache
	busyUntil time.Time
	// arrivals counts the requests the rank has prefilled or queued.
	arrivals uint64
	out      eventQueue
}

// kvBatch is the events of one cache update, to send at a time.
type kvBatch struct {
	at     time.Time
	gen    uint64
	events []wire.RouterEvent
}

// eventQueue holds a rank's kv-events until their prefill is done, in the
// order they were made (their send times never decrease).
type eventQueue struct {
	mu     sync.Mutex
	items  []kvBatch
	gen    uint64 // a reset drops the batches of older generations
	notify chan struct{}
}

func (q *eventQueue) init() { q.notify = make(chan struct{}, 1) }

func (q *eventQueue) push(b kvBatch) {
	q.mu.Lock()
	b.gen = q.gen
	q.items = append(q.items, b)
	q.mu.Unlock()
	q.wake()
}

func (q *eventQueue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// reset drops every batch not yet sent, a batch being waited on included.
func (q *eventQueue) reset() {
	q.mu.Lock()
	q.items = nil
	q.gen++
	q.mu.Unlock()
	q.wake()
}

// next returns the first batch, if any, and whether it is still current.
func (q *eventQueue) next() (kvBatch, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return kvBatch{}, false
	}
	return q.items[0], true
}

// done drops the first batch, unless a reset already did.
func (q *eventQueue) done(b kvBatch) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if b.gen != q.gen || len(q.items) == 0 {
		return false
	}
	q.items = q.items[1:]
	return true
}

// current says whether a batch survived every reset.
func (q *eventQueue) current(b kvBatch) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return b.gen == q.gen
}

// sendLoop sends a rank's batches at their times until ctx ends.
func (w *simWorker) sendLoop(ctx context.Context, rank int) {
	q := &w.ranks[rank].out
	for {
		b, ok := q.next()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-q.notify:
				continue
			}
		}
		if d := time.Until(b.at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-q.notify:
				t.Stop()
				continue // a reset, or a new batch: look again
			case <-t.C:
			}
		}
		w.sendMu.Lock()
		if q.current(b) {
			w.sendKV(rank, b.events)
			q.done(b)
		}
		w.sendMu.Unlock()
	}
}

// updateEvents are the events of one cache update on a rank: removed first
// (the engine evicts to make room for what it stores), then the stored runs
// in prompt order.
func (w *simWorker) updateEvents(rank int, blocks []promptBlock, u cacheUpdate) []wire.RouterEvent {
	var events []wire.RouterEvent
	for len(u.evicted) > 0 {
		n := min(len(u.evicted), maxBlocksPerEvent)
		events = append(events, wire.RouterEvent{WorkerID: w.id, DPRank: uint32(rank), Kind: wire.KVRemoved, Removed: u.evicted[:n]})
		u.evicted = u.evicted[n:]
	}
	for _, run := range u.stored {
		for off := 0; off < len(run.blocks); off += maxBlocksPerEvent {
			ev := wire.RouterEvent{WorkerID: w.id, DPRank: uint32(rank), Kind: wire.KVStored}
			if i := run.start + off; i > 0 {
				parent := blocks[i-1].engine
				ev.ParentHash = &parent
			}
			for _, b := range run.blocks[off:min(off+maxBlocksPerEvent, len(run.blocks))] {
				ev.Blocks = append(ev.Blocks, wire.StoredBlock{BlockHash: b.engine, TokensHash: b.tokens})
			}
			events = append(events, ev)
		}
	}
	return events
}

// sendKV numbers and sends a rank's events; w.sendMu is held. A silent or
// dead worker sends nothing (its events are lost, as a stalled publisher's
// are).
func (w *simWorker) sendKV(rank int, events []wire.RouterEvent) {
	for _, ev := range events {
		w.mu.Lock()
		if w.silent || w.dead {
			w.mu.Unlock()
			return
		}
		ev.EventID = w.kvEventIDs[rank]
		w.kvEventIDs[rank]++
		seq := w.kvSeq
		w.kvSeq++
		w.mu.Unlock()
		_ = w.kvPub.Send(zmq4.NewMsgFrom(wire.EncodeEventMessage("kv-events", w.kvPublisherID, seq, uint64(time.Now().UnixMilli()), wire.EncodeRouterEvent(ev))...))
	}
}

// publishCleared says every rank's cache is empty (after a restart): the
// events not yet sent are dropped, and a cleared event goes out on each
// rank at once.
func (w *simWorker) publishCleared() {
	for r := range w.ranks {
		w.ranks[r].out.reset()
	}
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	for r := range w.ranks {
		w.sendKV(r, []wire.RouterEvent{{WorkerID: w.id, DPRank: uint32(r), Kind: wire.KVCleared}})
	}
}
