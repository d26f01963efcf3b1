package wire

import (
	"fmt"
	"slices"
)

// Decoding kv-events payloads.
//
// One payload is either a single RouterEvent or a batch of them. Older
// publishers sent one RouterEvent per message; Dynamo's newer event-plane
// KV publisher (lib/llm/src/kv_router/publisher/sinks.rs) sends a msgpack
// array of RouterEvents per message, cut at event boundaries so that a
// batch holds at most KVBatchBlocks blocks (an event bigger than that goes
// alone: the blocks of a prompt over 131,072 tokens at block size 16), and
// its subscribers decode a list. The two are told apart by their first
// bytes: a map is one RouterEvent in the named form; an array whose first
// element is a map or an array is a batch (its elements are RouterEvents
// in either form); any other array is one RouterEvent in the positional
// form, its first element the worker id. An empty array is an empty batch.
//
// start_position, when present, is the absolute index of blocks[0] within
// its sequence, counted in blocks (not tokens) from 0: blocks[i] is block
// start_position+i. It takes precedence over parent_hash for placing the
// blocks; without it blocks[0] follows the block whose engine hash is
// parent_hash, or is block 0 when parent_hash is nil (Dynamo's positional
// indexer, lib/kv-router/src/indexer/positional.rs, places them so, and
// its dumps carry start_position with a nil parent).
//
// Both forms are rmp_serde's: the named form (to_vec_named) writes structs
// as maps keyed by field name, in any order here, unknown fields skipped;
// the positional form writes them as arrays in declaration order, where
// fields newer than the writer are absent at the end and fields newer than
// this reader are skipped. Enums are externally tagged: a unit variant is
// its name as a string ("cleared"), a variant with data a one-entry map
// ({"stored": {...}}); rmp_serde also reads a unit variant written as a
// one-entry map with a nil value ({"cleared": nil}), and so do we.
//
// Every error means the payload is malformed; its text names the field.

// The sizes upstream's batcher cuts kv-events batches at, for which the
// 1 MiB frame cap (MaxKVEventsPayloadBytes) is sized. They are not limits:
// the frame cap is. A payload that fits the frame is decoded whatever its
// counts, since upstream sends an event of more blocks on its own, and the
// KV index's capacity bounds (nodes, blocks per rank, ownerships, owners
// per node) decide what of it is kept.
const (
	KVBatchEvents = 128
	// KVBatchBlocks counts stored blocks and removed hashes over every
	// event of a batch.
	KVBatchBlocks = 8192
)

// The fewest bytes an element of a payload takes, to refuse a count its
// payload cannot hold before allocating for it: decoding a payload then
// allocates a bounded multiple of its size (at most 1 MiB), and a
// header's count cannot ask for more.
const (
	// minEventBytes: the shortest RouterEvent is positional: an array
	// header and a one-byte worker_id, a storage tier, and its event, an
	// array header, a one-byte event_id and "cleared" with its header;
	// 12 bytes without the tier.
	minEventBytes = 12
	// minBlockBytes: a positional stored block, [block_hash, tokens_hash].
	minBlockBytes = 3
	// minHashBytes: a removed block's hash, a one-byte integer.
	minHashBytes = 1
)

// DecodeRouterEvents appends the RouterEvents of one kv-events payload to
// dst and returns the extended slice; on error it returns dst with its
// length as it was (its spare capacity may have been written).
// Decoded events alias nothing in payload. Hashes take the whole u64
// range: a negative integer is read as the two's-complement bits of an
// i64 (vLLM's hashes are i64 values reinterpreted); worker and event ids
// are u64 and a negative one is malformed. StorageTier is never "" (a
// missing storage_tier is TierDevice); Residency is "" only when
// residency_domain was absent (an explicit nil, or a domain not known
// here, is ResidencyUnknown). An event of a variant not known here has
// Kind KVUnknown.
func DecodeRouterEvents(payload []byte, dst []RouterEvent) ([]RouterEvent, error) {
	if len(payload) > MaxKVEventsPayloadBytes {
		return dst, mpErr("payload of %d bytes; at most %d", len(payload), MaxKVEventsPayloadBytes)
	}
	d := kvDecoder{r: mpReader{b: payload}}
	out, err := d.payload(dst)
	if err != nil {
		return dst, err
	}
	return out, nil
}

type kvDecoder struct {
	r mpReader
	// events is the payload's count of events.
	events int
	// opts holds ParentHash and StartPosition, one slot per event, so that
	// a payload allocates them once rather than per event.
	opts []kvOpts
}

type kvOpts struct {
	parent uint64
	start  uint32
}

func (d *kvDecoder) slot(idx int) *kvOpts {
	if d.opts == nil {
		d.opts = make([]kvOpts, d.events)
	}
	return &d.opts[idx]
}

func (d *kvDecoder) payload(dst []RouterEvent) ([]RouterEvent, error) {
	c, ok := d.r.peek()
	if !ok {
		return dst, mpErr("empty payload")
	}
	switch {
	case isMapByte(c):
		d.events = 1
		dst = append(dst, RouterEvent{})
		if err := d.routerEvent(&dst[len(dst)-1], 0); err != nil {
			return dst, err
		}
	case isArrayByte(c):
		_, n, err := d.r.container()
		if err != nil {
			return dst, err
		}
		if n == 0 {
			break
		}
		first, ok := d.r.peek()
		if !ok {
			return dst, mpErr("truncated")
		}
		if !isMapByte(first) && !isArrayByte(first) {
			// One RouterEvent in the positional form.
			d.events = 1
			dst = append(dst, RouterEvent{})
			if err := d.routerEventArray(&dst[len(dst)-1], 0, n); err != nil {
				return dst, err
			}
			break
		}
		if err := d.fits(n, minEventBytes); err != nil {
			return dst, fmt.Errorf("batch: %w", err)
		}
		d.events = n
		dst = slices.Grow(dst, n)
		for i := range n {
			dst = append(dst, RouterEvent{})
			if err := d.routerEvent(&dst[len(dst)-1], i); err != nil {
				return dst, fmt.Errorf("event %d: %w", i, err)
			}
		}
	default:
		return dst, mpErr("payload starts with 0x%02x, neither a RouterEvent nor a batch", c)
	}
	// Bytes after the payload's value are ignored, as Dynamo's decoder
	// (one value read from the front of the slice) ignores them.
	return dst, nil
}

// Field bits, to refuse a field given twice (as serde does).
const (
	fWorker = 1 << iota
	fTier
	fResidency
	fEvent
)

func (d *kvDecoder) routerEvent(ev *RouterEvent, idx int) error {
	isMap, n, err := d.r.container()
	if err != nil {
		return err
	}
	if !isMap {
		return d.routerEventArray(ev, idx, n)
	}
	var seen uint
	for range n {
		key, err := d.r.key()
		if err != nil {
			return err
		}
		var bit uint
		switch string(key) {
		case "worker_id":
			bit = fWorker
		case "storage_tier":
			bit = fTier
		case "residency_domain":
			bit = fResidency
		case "event":
			bit = fEvent
		default:
			// state_source and whatever comes later.
			if err := d.r.skip(0); err != nil {
				return unknownErr(key, 0, err)
			}
			continue
		}
		if seen&bit != 0 {
			return mpErr("%s given twice", key)
		}
		seen |= bit
		switch bit {
		case fWorker:
			ev.WorkerID, err = d.r.uint()
		case fTier:
			err = d.tier(ev)
		case fResidency:
			err = d.residency(ev)
		case fEvent:
			err = d.kvEvent(ev, idx)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	if seen&fWorker == 0 {
		return mpErr("no worker_id")
	}
	if seen&fEvent == 0 {
		return mpErr("no event")
	}
	if seen&fTier == 0 {
		ev.StorageTier = TierDevice
	}
	return nil
}

// routerEventArray reads the n elements of a positional RouterEvent:
// worker_id, storage_tier, residency_domain (a string, absent from older
// writers and from newer ones when missing), event (a map or an array),
// then anything newer (state_source), skipped.
func (d *kvDecoder) routerEventArray(ev *RouterEvent, idx, n int) error {
	if n < 1 {
		return mpErr("no worker_id")
	}
	var err error
	if ev.WorkerID, err = d.r.uint(); err != nil {
		return fmt.Errorf("worker_id: %w", err)
	}
	i := 1
	ev.StorageTier = TierDevice
	if i < n {
		if err := d.tier(ev); err != nil {
			return fmt.Errorf("storage_tier: %w", err)
		}
		i++
	}
	if i < n {
		if c, _ := d.r.peek(); !isMapByte(c) && !isArrayByte(c) {
			if err := d.residency(ev); err != nil {
				return fmt.Errorf("residency_domain: %w", err)
			}
			i++
		}
	}
	if i >= n {
		return mpErr("no event")
	}
	if err := d.kvEvent(ev, idx); err != nil {
		return fmt.Errorf("event: %w", err)
	}
	for i++; i < n; i++ {
		if err := d.r.skip(0); err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
	}
	return nil
}

func (d *kvDecoder) tier(ev *RouterEvent) error {
	if !d.r.peekString() {
		return d.r.notA("string")
	}
	s, err := d.r.raw()
	if err != nil {
		return err
	}
	switch string(s) {
	case TierDevice:
		ev.StorageTier = TierDevice
	case TierHostPinned:
		ev.StorageTier = TierHostPinned
	case TierDisk:
		ev.StorageTier = TierDisk
	case TierExternal:
		ev.StorageTier = TierExternal
	case "":
		return mpErr("empty")
	default:
		ev.StorageTier = string(s)
	}
	return nil
}

// residency reads a present residency_domain: only an absent field selects
// the legacy semantics; a domain this decoder does not know is
// ResidencyUnknown (the event then only moves its cursor: a newer
// publisher's domain must not cost the rank its blocks). A value that is
// not a string (nil included: the field is present or omitted, never
// null) is no domain the router reads either, and ResidencyUnknown too:
// upstream's decoder takes it as an invalid domain and refuses that one
// event, not the batch around it, and reading a nil as the field's
// absence would turn a malformed clear into a reset of every domain.
func (d *kvDecoder) residency(ev *RouterEvent) error {
	if !d.r.peekString() {
		ev.Residency = ResidencyUnknown
		return d.r.skip(0)
	}
	s, err := d.r.raw()
	if err != nil {
		return err
	}
	switch string(s) {
	case ResidencyWorker:
		ev.Residency = ResidencyWorker
	case ResidencyCacheOwner:
		ev.Residency = ResidencyCacheOwner
	default:
		ev.Residency = ResidencyUnknown
	}
	return nil
}

// kvEvent reads a KvCacheEvent: event_id, data, dp_rank (default 0).
func (d *kvDecoder) kvEvent(ev *RouterEvent, idx int) error {
	isMap, n, err := d.r.container()
	if err != nil {
		return err
	}
	names := [...]string{"event_id", "data", "dp_rank"}
	var seen uint
	for i := range n {
		f, key, err := d.field(isMap, i, names[:])
		if err != nil {
			return err
		}
		if f < 0 {
			if err := d.r.skip(0); err != nil {
				return unknownErr(key, i, err)
			}
			continue
		}
		if seen&(1<<f) != 0 {
			return mpErr("%s given twice", names[f])
		}
		seen |= 1 << f
		switch f {
		case 0:
			ev.EventID, err = d.r.uint()
		case 1:
			err = d.data(ev, idx)
		case 2:
			ev.DPRank, err = d.r.u32()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", names[f], err)
		}
	}
	if seen&1 == 0 {
		return mpErr("no event_id")
	}
	if seen&2 == 0 {
		return mpErr("no data")
	}
	return nil
}

// field reads the next field's name in a map, or takes the next element's
// place in an array, and returns its index in names (-1 for a field we do
// not know; key is its name, nil for an array element).
func (d *kvDecoder) field(isMap bool, i int, names []string) (f int, key []byte, err error) {
	if !isMap {
		if i < len(names) {
			return i, nil, nil
		}
		return -1, nil, nil
	}
	if key, err = d.r.key(); err != nil {
		return -1, nil, err
	}
	// Writers keep declaration order, so try the field's own place first.
	if i < len(names) && string(key) == names[i] {
		return i, key, nil
	}
	for j, name := range names {
		if string(key) == name {
			return j, key, nil
		}
	}
	return -1, key, nil
}

// data reads KvCacheEventData, externally tagged.
func (d *kvDecoder) data(ev *RouterEvent, idx int) error {
	if d.r.peekString() {
		s, err := d.r.raw()
		if err != nil {
			return err
		}
		switch string(s) {
		case KVCleared:
			ev.Kind = KVCleared
		case KVStored, KVRemoved:
			return mpErr("unit variant %q; only cleared has no data", s)
		default:
			ev.Kind = KVUnknown // a newer unit variant
		}
		return nil
	}
	isMap, n, err := d.r.container()
	if err != nil {
		return err
	}
	if !isMap || n != 1 {
		return mpErr("a variant is a string or a map of one entry")
	}
	tag, err := d.r.key()
	if err != nil {
		return err
	}
	switch string(tag) {
	case KVStored:
		ev.Kind = KVStored
		err = d.stored(ev, idx)
	case KVRemoved:
		ev.Kind = KVRemoved
		err = d.removed(ev)
	case KVCleared:
		ev.Kind = KVCleared
		var c byte
		if c, err = d.r.byte1(); err == nil && c != 0xc0 {
			err = mpErr("0x%02x where nil is required", c)
		}
	default:
		// A newer variant: its data skipped (bounded like any value).
		ev.Kind = KVUnknown
		err = d.r.skip(0)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", truncate(tag), err)
	}
	return nil
}

// stored reads KvCacheStoreData: parent_hash, start_position, blocks. In
// the positional form older writers lack start_position, and newer
// revisions may add fields; so after parent_hash the first array is the
// blocks, the first integer or nil before it start_position, and anything
// else is skipped.
func (d *kvDecoder) stored(ev *RouterEvent, idx int) error {
	isMap, n, err := d.r.container()
	if err != nil {
		return err
	}
	const (
		fParent = iota
		fStart
		fBlocks
	)
	names := [...]string{"parent_hash", "start_position", "blocks"}
	var seen uint
	for i := range n {
		f := -1
		var key []byte
		if isMap {
			if f, key, err = d.field(true, i, names[:]); err != nil {
				return err
			}
		} else {
			c, _ := d.r.peek()
			switch {
			case i == 0:
				f = fParent
			case seen&(1<<fBlocks) != 0:
			case isArrayByte(c):
				f = fBlocks
			case seen&(1<<fStart) == 0 && (c == 0xc0 || isIntByte(c)):
				f = fStart
			}
		}
		if f < 0 {
			if err := d.r.skip(0); err != nil {
				return unknownErr(key, i, err)
			}
			continue
		}
		if seen&(1<<f) != 0 {
			return mpErr("%s given twice", names[f])
		}
		seen |= 1 << f
		switch f {
		case fParent:
			var v uint64
			var isNil bool
			if v, isNil, err = d.r.optBits64(); err == nil && !isNil {
				s := d.slot(idx)
				s.parent = v
				ev.ParentHash = &s.parent
			}
		case fStart:
			var v uint32
			var isNil bool
			if v, isNil, err = d.r.optU32(); err == nil && !isNil {
				s := d.slot(idx)
				s.start = v
				ev.StartPosition = &s.start
			}
		case fBlocks:
			err = d.storedBlocks(ev)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", names[f], err)
		}
	}
	if seen&(1<<fBlocks) == 0 {
		return mpErr("no blocks")
	}
	return nil
}

// fits refuses a count of n elements of at least size bytes each that the
// rest of the payload cannot hold.
func (d *kvDecoder) fits(n, size int) error {
	if left := d.r.left(); n > left/size {
		return mpErr("%d elements cannot fit in the %d bytes left", n, left)
	}
	return nil
}

func (d *kvDecoder) storedBlocks(ev *RouterEvent) error {
	isMap, n, err := d.r.container()
	if err != nil {
		return err
	}
	if isMap {
		return mpErr("a map, not an array")
	}
	if err := d.fits(n, minBlockBytes); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	ev.Blocks = make([]StoredBlock, n)
	for i := range ev.Blocks {
		if err := d.block(&ev.Blocks[i]); err != nil {
			return fmt.Errorf("block %d: %w", i, err)
		}
	}
	return nil
}

// block reads KvCacheStoredBlockData: block_hash, tokens_hash,
// mm_extra_info (nil, absent, or a BlockExtraInfo, which is skipped).
func (d *kvDecoder) block(b *StoredBlock) error {
	isMap, n, err := d.r.container()
	if err != nil {
		return err
	}
	names := [...]string{"block_hash", "tokens_hash", "mm_extra_info"}
	var seen uint
	for i := range n {
		f, key, err := d.field(isMap, i, names[:])
		if err != nil {
			return err
		}
		if f < 0 {
			if err := d.r.skip(0); err != nil {
				return unknownErr(key, i, err)
			}
			continue
		}
		if seen&(1<<f) != 0 {
			return mpErr("%s given twice", names[f])
		}
		seen |= 1 << f
		switch f {
		case 0:
			b.BlockHash, err = d.r.bits64()
		case 1:
			b.TokensHash, err = d.r.bits64()
		case 2:
			b.Multimodal, err = d.mm()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", names[f], err)
		}
	}
	if seen&1 == 0 {
		return mpErr("no block_hash")
	}
	if seen&2 == 0 {
		return mpErr("no tokens_hash")
	}
	return nil
}

func (d *kvDecoder) mm() (bool, error) {
	c, ok := d.r.peek()
	switch {
	case !ok:
		return false, mpErr("truncated")
	case c == 0xc0:
		d.r.i++
		return false, nil
	case isMapByte(c) || isArrayByte(c):
		return true, d.r.skip(1)
	}
	return false, d.r.notA("map or nil")
}

// removed reads KvCacheRemoveData: block_hashes.
func (d *kvDecoder) removed(ev *RouterEvent) error {
	isMap, n, err := d.r.container()
	if err != nil {
		return err
	}
	names := [...]string{"block_hashes"}
	seen := false
	for i := range n {
		f, key, err := d.field(isMap, i, names[:])
		if err != nil {
			return err
		}
		if f < 0 {
			if err := d.r.skip(0); err != nil {
				return unknownErr(key, i, err)
			}
			continue
		}
		if seen {
			return mpErr("block_hashes given twice")
		}
		seen = true
		if err := d.removedHashes(ev); err != nil {
			return fmt.Errorf("block_hashes: %w", err)
		}
	}
	if !seen {
		return mpErr("no block_hashes")
	}
	return nil
}

func (d *kvDecoder) removedHashes(ev *RouterEvent) error {
	isMap, n, err := d.r.container()
	if err != nil {
		return err
	}
	if isMap {
		return mpErr("a map, not an array")
	}
	if err := d.fits(n, minHashBytes); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	ev.Removed = make([]uint64, n)
	for i := range ev.Removed {
		if ev.Removed[i], err = d.r.bits64(); err != nil {
			return fmt.Errorf("hash %d: %w", i, err)
		}
	}
	return nil
}

func unknownErr(key []byte, i int, err error) error {
	if key == nil {
		return fmt.Errorf("element %d: %w", i, err)
	}
	return fmt.Errorf("field %q: %w", truncate(key), err)
}
