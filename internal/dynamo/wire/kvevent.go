package wire

// KV event kinds (KvCacheEventData's externally tagged variants).
const (
	KVStored  = "stored"
	KVRemoved = "removed"
	KVCleared = "cleared"
)

// StoredBlock is one block of a stored event: the engine's own
// (sequence-aware, opaque) hash and Dynamo's tokens_hash.
type StoredBlock struct {
	BlockHash  uint64
	TokensHash uint64
}

// RouterEvent is one KV cache event of a worker rank, as published on
// kv-events.
type RouterEvent struct {
	WorkerID    uint64
	StorageTier string // "" is device
	EventID     uint64
	DPRank      uint32
	Kind        string // KVStored, KVRemoved or KVCleared
	// Stored: the block before Blocks[0] (nil at the root) and the blocks.
	ParentHash *uint64
	Blocks     []StoredBlock
	// Removed: the engine hashes of the blocks that left.
	Removed []uint64
}

// EncodeRouterEvent writes e as rmp_serde's named msgpack: maps with field
// names in declaration order, the event data externally tagged, None as nil.
func EncodeRouterEvent(e RouterEvent) []byte {
	var w mpWriter
	w.mapHeader(3)
	w.str("worker_id")
	w.uint(e.WorkerID)
	w.str("storage_tier")
	tier := e.StorageTier
	if tier == "" {
		tier = "device"
	}
	w.str(tier)
	w.str("event")
	w.mapHeader(3)
	w.str("event_id")
	w.uint(e.EventID)
	w.str("data")
	switch e.Kind {
	case KVStored:
		w.mapHeader(1)
		w.str(KVStored)
		w.mapHeader(3)
		w.str("parent_hash")
		w.optUint(e.ParentHash)
		w.str("start_position")
		w.nil()
		w.str("blocks")
		w.arrayHeader(len(e.Blocks))
		for _, b := range e.Blocks {
			w.mapHeader(3)
			w.str("block_hash")
			w.uint(b.BlockHash)
			w.str("tokens_hash")
			w.uint(b.TokensHash)
			w.str("mm_extra_info")
			w.nil()
		}
	case KVRemoved:
		w.mapHeader(1)
		w.str(KVRemoved)
		w.mapHeader(1)
		w.str("block_hashes")
		w.arrayHeader(len(e.Removed))
		for _, h := range e.Removed {
			w.uint(h)
		}
	default:
		w.str(KVCleared)
	}
	w.str("dp_rank")
	w.uint(uint64(e.DPRank))
	return w.b
}

func (w *mpWriter) nil() { w.b = append(w.b, 0xc0) }

func (w *mpWriter) optUint(v *uint64) {
	if v == nil {
		w.nil()
		return
	}
	w.uint(*v)
}

func (w *mpWriter) arrayHeader(n int) {
	switch {
	case n < 16:
		w.b = append(w.b, 0x90|byte(n))
	case n < 1<<16:
		w.b = append(w.b, 0xdc, byte(n>>8), byte(n))
	default:
		w.b = append(w.b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}
