package wire

// KV event kinds (KvCacheEventData's externally tagged variants).
const (
	KVStored  = "stored"
	KVRemoved = "removed"
	KVCleared = "cleared"
	// KVUnknown is the kind of an event whose variant this decoder does
	// not read (a newer publisher's: hybrid keys, a tier's clear). Its
	// content is skipped; it is still numbered, so it moves its rank's
	// cursor, as a newer reader ignores what an older one cannot use.
	KVUnknown = "unknown"
)

// Storage tiers (StorageTier's snake_case names). A publisher that omits
// the field means the device tier.
const (
	TierDevice     = "device"
	TierHostPinned = "host_pinned"
	TierDisk       = "disk"
	TierExternal   = "external"
)

// Residency domains (residency_domain, sent only by the newest publishers).
// An absent field means the legacy semantics: the blocks belong to the
// worker, and a cleared event clears every domain of the rank.
const (
	ResidencyWorker     = "worker"
	ResidencyCacheOwner = "cache_owner"
	// ResidencyUnknown is a domain this decoder does not know, or a nil
	// one: the event is not about a worker's cache as the router reads it,
	// and only moves its rank's cursor.
	ResidencyUnknown = "unknown"
)

// StoredBlock is one block of a stored event: the engine's own
// (sequence-aware, opaque) hash and Dynamo's tokens_hash. Both take the
// whole u64 range: vLLM's hashes are i64 values reinterpreted, so about
// half have the top bit set.
type StoredBlock struct {
	BlockHash  uint64
	TokensHash uint64
	// Multimodal: the block carried multimodal metadata (a non-nil
	// mm_extra_info), so its tokens_hash mixes in the objects' hashes.
	Multimodal bool
}

// RouterEvent is one KV cache event of a worker rank, as published on
// kv-events.
type RouterEvent struct {
	WorkerID uint64
	// StorageTier: one of the Tier constants, or another tier's name as
	// sent. Encoding writes "" as device; decoding never returns "".
	StorageTier string
	// Residency: "" when the publisher sent no residency_domain (legacy
	// worker semantics), otherwise ResidencyWorker or ResidencyCacheOwner.
	Residency string
	EventID   uint64
	DPRank    uint32
	Kind      string // KVStored, KVRemoved or KVCleared
	// Stored: the block before Blocks[0] (nil at the root) and the blocks.
	ParentHash *uint64
	// Stored: the absolute block index of Blocks[0] in its sequence, when
	// the publisher sent it (Blocks[i] is then block StartPosition+i,
	// counted in blocks from 0, whatever ParentHash says).
	StartPosition *uint32
	Blocks        []StoredBlock
	// Removed: the engine hashes of the blocks that left.
	Removed []uint64
}

// EncodeRouterEvent writes e as rmp_serde's named msgpack: maps with field
// names in declaration order, the event data externally tagged, None as nil.
// residency_domain is written only when set (upstream skips it when
// missing), and a multimodal block's mm_extra_info as {"mm_objects": []}.
func EncodeRouterEvent(e RouterEvent) []byte {
	var w mpWriter
	if e.Residency != "" {
		w.mapHeader(4)
	} else {
		w.mapHeader(3)
	}
	w.str("worker_id")
	w.uint(e.WorkerID)
	w.str("storage_tier")
	tier := e.StorageTier
	if tier == "" {
		tier = TierDevice
	}
	w.str(tier)
	if e.Residency != "" {
		w.str("residency_domain")
		w.str(e.Residency)
	}
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
		if e.StartPosition != nil {
			w.uint(uint64(*e.StartPosition))
		} else {
			w.nil()
		}
		w.str("blocks")
		w.arrayHeader(len(e.Blocks))
		for _, b := range e.Blocks {
			w.mapHeader(3)
			w.str("block_hash")
			w.uint(b.BlockHash)
			w.str("tokens_hash")
			w.uint(b.TokensHash)
			w.str("mm_extra_info")
			if b.Multimodal {
				w.mapHeader(1)
				w.str("mm_objects")
				w.arrayHeader(0)
			} else {
				w.nil()
			}
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
	case KVUnknown:
		// A variant the decoder did not know, its data dropped: written as
		// a unit variant of that name, which decodes as KVUnknown again
		// (never as a clear, which would empty the rank).
		w.str(KVUnknown)
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
