package kv

// This file: the bounded radix index of the workers' KV caches. It is fed
// decoded KV events and answers, for a request's block hashes, how many
// leading blocks each (namespace, worker, dp rank) already holds.

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// Capacity of the index. They are the design's MAX_INDEX_BLOCKS,
// MAX_BLOCKS_PER_RANK, MAX_INDEX_OWNERSHIPS, MAX_OWNERS_PER_NODE and the
// cursors of one subscription. A block that would exceed one of them is
// refused (ResultOverCapacity), and so is the rest of its event: a chain
// cannot continue past a block that is not in the tree.
const (
	// MaxIndexBlocks bounds the nodes of the tree, the root not counted.
	MaxIndexBlocks = 1 << 20
	// MaxBlocksPerRank bounds the engine block hashes one rank holds.
	MaxBlocksPerRank = 1 << 18
	// MaxIndexOwnerships bounds the (rank, node) pairs of all ranks.
	MaxIndexOwnerships = 1 << 23
	// MaxOwnersPerNode bounds the ranks holding one node.
	MaxOwnersPerNode = 4096
	// MaxCursorsPerSubscription bounds the (worker, dp rank) cursors of one
	// subscription.
	MaxCursorsPerSubscription = 4096
)

// Results of applying one KV event, as counted in
// continuum_dynamo_kv_events_total{result}.
const (
	// ResultAccepted: the event was applied in full.
	ResultAccepted = "accepted"
	// ResultReplay: the event's id is at or below the rank's cursor (and,
	// at the cursor, its content equals the last event taken); skipped.
	ResultReplay = "replay"
	// ResultGap: the event's id skipped ahead of the rank's cursor, so
	// events were lost and the rank's blocks were dropped. Apply reports it
	// in Outcome.Gap, beside the result of the event itself.
	ResultGap = "gap"
	// ResultOverCapacity: a cap refused a block (and the rest of the
	// event), or the subscription has no cursor left for a new rank.
	ResultOverCapacity = wire.ResultOverCapacity
	// ResultIdentityMismatch: the worker is not live, or the rank is not
	// one its card declares.
	ResultIdentityMismatch = wire.ResultIdentityMismatch
	// ResultOtherTier: the event is about a tier other than the device's;
	// it moves the cursor and nothing else.
	ResultOtherTier = "other_tier"
	// ResultCacheOwner: the event is about a cache owner's residency
	// domain (a shared cache), not a worker's; it moves the cursor and
	// nothing else.
	ResultCacheOwner = "cache_owner"
	// ResultMultimodal: the stored chain starts with a multimodal block,
	// which a text request's hashes never reach; it moves the cursor and
	// nothing else. (A chain that reaches one later is indexed up to it.)
	ResultMultimodal = "multimodal"
	// ResultUnknownParent: the stored chain's parent is not a block the
	// rank holds, so the chain cannot be placed; its blocks are dropped.
	ResultUnknownParent = "unknown_parent"
	// ResultUnsupported: the event is of a kind, or about a residency
	// domain, that this router does not read (a newer publisher's); it
	// moves the cursor and nothing else.
	ResultUnsupported = "unsupported"
	// ResultMalformed: the event cannot be: a kind it has none of. It does
	// not move the cursor, so the next event of the rank is a gap.
	ResultMalformed = wire.ResultMalformed
)

// Results lists every result Apply returns, gap included (to pre-register
// the label values).
var Results = []string{ResultAccepted, ResultReplay, ResultGap, ResultOverCapacity,
	ResultIdentityMismatch, ResultOtherTier, ResultCacheOwner, ResultMultimodal, ResultUnknownParent, ResultUnsupported, ResultMalformed}

// SubscriptionID names one publisher's subscription. The event_id cursors of
// the ranks it feeds belong to it and outlive its connections; a restarted
// publisher (a new publisher id) is a new subscription.
type SubscriptionID uint64

// Outcome is what Apply did with one event.
type Outcome struct {
	// Result is one of the Result constants other than ResultGap.
	Result string
	// Gap is set when events were lost before this one: the rank's blocks
	// were dropped, then the event was handled as Result says. The caller
	// counts ResultGap in addition to Result.
	Gap bool
}

// Match is how many leading blocks of a request one rank holds.
type Match struct {
	Rank   load.Key
	Blocks int
}

// Stats is the size of the index and its counters since NewIndex.
type Stats struct {
	// Nodes in the tree (the root not counted), (rank, node) ownerships,
	// ranks holding at least one block, subscriptions and their cursors.
	Nodes, Ownerships, Ranks, Subscriptions, Cursors int
	// Bytes estimates the memory the index holds: slices and hash tables by
	// their capacity times their element size; the few Go maps (ranks by
	// key, cursors, ranks holding a node twice) by their length times their
	// slot size plus a control byte, over the 2/3 average load of Go's hash
	// tables.
	Bytes int64

	// StoredBlocks counts blocks placed (a new hold, or an engine hash
	// stored again where it is held); RemovedBlocks holds released by removed
	// events; UnknownRemovals removed hashes the rank did not hold;
	// RefusedBlocks blocks of stored events dropped (over_capacity,
	// unknown_parent); Rebinds engine hashes stored again at another place
	// in the tree (the old place is released); Gaps ranks dropped after
	// lost events; Compactions rewrites of the owner arena.
	StoredBlocks, RemovedBlocks, UnknownRemovals, RefusedBlocks, Rebinds, Gaps, Compactions uint64
}

// limits are the caps of one index: the constants above, smaller in tests.
type limits struct {
	blocks, perRank, ownerships, perNode, cursors int
}

var defaultLimits = limits{MaxIndexBlocks, MaxBlocksPerRank, MaxIndexOwnerships, MaxOwnersPerNode, MaxCursorsPerSubscription}

// Index is the radix tree of the device-tier blocks every rank holds.
//
// A node is one block at one place: its parent node and its tokens_hash
// (Dynamo's hash of the block's tokens), so a node stands for the whole
// token prefix from the root to it. Each node keeps its owners, the ranks
// holding it, as a sorted list of rank numbers. Each rank maps the engine's
// block hashes (sequence-aware, opaque) to nodes: removed events name blocks
// by those only. A rank holds a node as long as one engine hash of the rank
// maps to it; a node with no owners and no children is freed, and so, in
// turn, are its parents that are left the same.
//
// Nodes live in one slice, by int32 number, with a free list; owner lists
// in one arena; the edges and the ranks' engine hashes in open-addressing
// tables (index_table.go). The edges are keyed by the parent and a path
// hash (the tokens hashes chained from the root), so the slots a chain will
// touch are known, and read ahead, before its nodes are found: the cache
// misses of a batch overlap.
//
// Writers (Apply, SetLive, ClearSubscription) hold the lock alone;
// FindMatches and Stats share it.
type Index struct {
	mu  sync.RWMutex
	lim limits

	nodes     []node // nodes[0] is the root; a free node has parent -1
	freeNodes []int32
	nodeCount int
	// edges finds a child by its parent and path hash.
	edges  edgeTable
	owners ownerArena
	// seed is the root's path hash, and seeds the ranks' tables: random,
	// as the keys come from workers.
	seed uint64

	ranks      []rankState // by rank number; a free one is not inUse
	freeRanks  []int32
	rankOf     map[load.Key]int32
	ownerships int

	live load.LiveSet
	subs map[SubscriptionID]*subscription
	nCur int // cursors of all subscriptions

	cnt counters
	// sink and keep take what prefetching reads, so that the reads are not
	// optimized away.
	sink int32
	keep atomic.Int64
}

type counters struct {
	stored, removed, unknownRemovals, refused, rebinds, gaps, compactions uint64
}

type node struct {
	path   uint64 // pathHash of the tokens_hash from the root to the node
	parent int32
	kids   int32 // children
	// own is the one owner itself when nown is 1, else the offset of the
	// owner list in the arena (-1 without owners).
	own   int32
	nown  uint16
	class uint8 // an arena list's chunk holds 1<<class ranks
}

type rankState struct {
	key    load.Key
	inUse  bool
	blocks blockTable
	// multi counts, for the nodes this rank holds under two or more engine
	// hashes, how many; a node held under one is not in it.
	multi map[int32]uint32
}

type subscription struct {
	cursors map[load.Key]cursor
}

// cursor is the last event taken from one rank of one subscription: its id
// and a fingerprint of its content, and the gaps seen on the rank.
type cursor struct {
	id, fp uint64
	// more are the fingerprints of the other events taken under id (an
	// older publisher's batch), at most maxSameID-1; nil while there is one.
	more []uint64
	gaps uint32
}

// maxSameID bounds the events one cursor remembers under one id: a
// publisher that numbers an engine batch alike sends at most a batch's
// events (wire.KVBatchEvents) under it. Past the bound, further events of
// the id are taken, not checked for resends.
const maxSameID = wire.KVBatchEvents

// resent reports whether an event of fingerprint fp with the cursor's id was
// taken before.
func (c *cursor) resent(fp uint64) bool { return fp == c.fp || slices.Contains(c.more, fp) }

// bigRankTable: a freed rank keeps its emptied table for reuse up to this
// many slots; a larger one is dropped.
const bigRankTable = 1 << 12

// NewIndex returns an empty index whose gate admits no worker until SetLive.
func NewIndex() *Index { return newIndex(defaultLimits) }

func newIndex(lim limits) *Index {
	ix := &Index{
		lim:    lim,
		nodes:  make([]node, 1, 1024),
		seed:   newSeed(),
		rankOf: map[load.Key]int32{},
		live:   load.LiveSet{},
		subs:   map[SubscriptionID]*subscription{},
	}
	ix.nodes[0] = node{path: ix.seed, own: -1}
	ix.edges.init(10)
	return ix
}

// SetLive installs the live-worker gate: an event is indexed only if its
// worker (its publisher's namespace and its worker_id) is in live and its
// rank is one the worker declares. In the same step, the blocks and
// cursors of every rank that left are dropped.
func (ix *Index) SetLive(byID map[fleet.WorkerID]load.LiveWorker) {
	live := load.NewLiveSet(byID)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for k, r := range ix.rankOf {
		if !live.Declares(k) {
			ix.dropRank(r)
		}
	}
	for _, s := range ix.subs {
		for k := range s.cursors {
			if !live.Declares(k) {
				delete(s.cursors, k)
				ix.nCur--
			}
		}
	}
	ix.live = live
	ix.maybeCompact()
}

// ClearSubscription forgets a subscription: the blocks of every rank it fed
// and its cursors. The caller calls it when the subscription stopped. A
// rank fed by two subscriptions loses its blocks when either is cleared.
func (ix *Index) ClearSubscription(id SubscriptionID) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s, ok := ix.subs[id]
	if !ok {
		return
	}
	ix.dropRanksOf(s)
	ix.nCur -= len(s.cursors)
	delete(ix.subs, id)
	ix.maybeCompact()
}

// dropRanksOf drops the blocks of every rank subscription s fed; ix.mu is
// held.
func (ix *Index) dropRanksOf(s *subscription) {
	for k := range s.cursors {
		if r, ok := ix.rankOf[k]; ok {
			ix.dropRank(r)
		}
	}
}

// ClearRanks drops the blocks of every rank the subscription fed, keeping
// its cursors: for a subscription that could not connect for long enough
// that its ranks are no longer believed, but whose events, when it
// connects again, must still be told apart as replays (skipped) or after a
// gap (counted as one).
func (ix *Index) ClearRanks(id SubscriptionID) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s, ok := ix.subs[id]
	if !ok {
		return
	}
	ix.dropRanksOf(s)
	ix.maybeCompact()
}

// admit holds the per-event checks, those that need nothing but the event.
// It returns "" for an event to index, the result of one that only moves
// its rank's cursor (another tier, say), or ResultMalformed for one that
// cannot be. The checks of new event fields belong here; those of new
// block fields belong in store's loop over the blocks.
func admit(ev *wire.RouterEvent) string {
	switch ev.Kind {
	case wire.KVStored, wire.KVRemoved, wire.KVCleared:
	case wire.KVUnknown:
		return ResultUnsupported
	default:
		return ResultMalformed
	}
	// A clear resets the rank in every tier, whatever tier it names: Dynamo's
	// indexer applies it to the device tier as well as the lower ones, so
	// the blocks the engine dropped are not left in the index.
	if ev.Kind != wire.KVCleared && ev.StorageTier != "" && ev.StorageTier != "device" {
		return ResultOtherTier
	}
	// A cache owner's domain (a shared cache) is not a worker's cache.
	switch ev.Residency {
	case wire.ResidencyCacheOwner:
		return ResultCacheOwner
	case wire.ResidencyUnknown:
		return ResultUnsupported
	}
	// A publisher numbers an event that carries no block as any other
	// (one whose blocks it could not hash whole, say): it changes nothing
	// but is no loss, so it moves the cursor and the next event is not
	// taken for a gap.
	if ev.Kind != wire.KVCleared && len(ev.Blocks) == 0 && len(ev.Removed) == 0 {
		return ResultAccepted
	}
	// The router hashes text only: a chain that starts with a multimodal
	// block holds nothing a request's hashes can reach.
	if ev.Kind == wire.KVStored && ev.Blocks[0].Multimodal {
		return ResultMultimodal
	}
	return ""
}

// Apply takes one event of subscription sub, in the order the publisher
// sent it; ev is read, not kept. The event is about worker ev.WorkerID of
// namespace ns, the namespace of the publisher as discovered: a worker is
// its namespace and id, and the payload does not name the namespace. In
// turn: the per-event checks; the live-identity gate; the rank's cursor
// (replays skipped, a gap drops the rank's blocks first); then the event
// itself, if it is about the device tier. The index keeps a subscription from its first event until
// ClearSubscription; the caller bounds how many subscriptions it feeds.
//
// An event older than the cursor is a resend. One with the cursor's id is a
// resend when its content is that of an event already taken under the id;
// with other content it is the batch going on: an older worker-side
// publisher numbers every event of one engine batch alike, each sent in a
// message of its own.
func (ix *Index) Apply(sub SubscriptionID, ns fleet.NamespaceID, ev *wire.RouterEvent) Outcome {
	adm := admit(ev)
	if adm == ResultMalformed {
		return Outcome{Result: ResultMalformed}
	}
	k := load.Key{Namespace: ns, WorkerID: ev.WorkerID, DPRank: ev.DPRank}
	fp := fingerprint(ev)

	ix.mu.Lock()
	defer ix.mu.Unlock()
	if !ix.live.Declares(k) {
		return Outcome{Result: ResultIdentityMismatch}
	}
	s := ix.subs[sub]
	if s == nil {
		s = &subscription{cursors: map[load.Key]cursor{}}
		ix.subs[sub] = s
	}
	var out Outcome
	c, seen := s.cursors[k]
	switch {
	case !seen:
		if len(s.cursors) >= ix.lim.cursors {
			return Outcome{Result: ResultOverCapacity}
		}
		ix.nCur++
	case ev.EventID < c.id, ev.EventID == c.id && c.resent(fp):
		return Outcome{Result: ResultReplay}
	case ev.EventID-c.id > 1:
		if r, ok := ix.rankOf[k]; ok {
			ix.dropRank(r)
		}
		ix.cnt.gaps++
		c.gaps++
		out.Gap = true
	}
	if seen && ev.EventID == c.id {
		if len(c.more) < maxSameID-1 {
			c.more = append(c.more, fp)
		}
		s.cursors[k] = c
	} else {
		s.cursors[k] = cursor{id: ev.EventID, fp: fp, gaps: c.gaps}
	}
	if adm != "" {
		out.Result = adm
		return out
	}
	switch ev.Kind {
	case wire.KVStored:
		out.Result = ix.store(k, ev)
	case wire.KVRemoved:
		ix.remove(k, ev.Removed)
		out.Result = ResultAccepted
	default:
		if r, ok := ix.rankOf[k]; ok {
			ix.dropRank(r)
		}
		out.Result = ResultAccepted
	}
	ix.maybeCompact()
	return out
}

// fingerprint digests an event's content (not its id), to tell a replay
// from the next event of a batch numbered alike.
func fingerprint(ev *wire.RouterEvent) uint64 {
	h := mix(0x9e3779b97f4a7c15, uint64(len(ev.Kind))<<32|uint64(len(ev.StorageTier)))
	if ev.Kind != "" {
		h = mix(h, uint64(ev.Kind[0]))
	}
	for i := 0; i < len(ev.StorageTier); i++ {
		h = mix(h, uint64(ev.StorageTier[i]))
	}
	if ev.ParentHash != nil {
		h = mix(mix(h, 1), *ev.ParentHash)
	}
	h = mix(h, uint64(len(ev.Blocks)))
	for _, b := range ev.Blocks {
		h = mix(mix(h, b.BlockHash), b.TokensHash)
	}
	h = mix(h, uint64(len(ev.Removed)))
	for _, r := range ev.Removed {
		h = mix(h, r)
	}
	return h
}

func mix(h, v uint64) uint64 {
	h ^= v * 0xbf58476d1ce4e5b9
	h = bits.RotateLeft64(h, 29) * 0x94d049bb133111eb
	return h ^ h>>32
}

// store places a stored event's chain under its parent; ix.mu is held.
func (ix *Index) store(k load.Key, ev *wire.RouterEvent) string {
	r, ok := ix.rankOf[k]
	parent := int32(0)
	// start_position is the block index of blocks[0] in its sequence:
	// without a parent, a chain that does not start at block 0 cannot be
	// placed. With a parent the parent places it.
	if ev.ParentHash == nil && ev.StartPosition != nil && *ev.StartPosition > 0 {
		ix.cnt.refused += uint64(len(ev.Blocks))
		return ResultUnknownParent
	}
	if ev.ParentHash != nil {
		var i int
		if ok {
			i, ok = ix.ranks[r].blocks.find(*ev.ParentHash)
		}
		if !ok {
			ix.cnt.refused += uint64(len(ev.Blocks))
			return ResultUnknownParent
		}
		parent = ix.ranks[r].blocks.slots[i].node
	}
	if !ok {
		r = ix.newRank(k)
	}
	res := ResultAccepted
	var paths [prefetchWindow]uint64
	path := ix.nodes[parent].path
	for i := range ev.Blocks {
		if ev.Blocks[i].Multimodal {
			// The chain stops at its first multimodal block: what follows
			// extends a prefix no text request can match.
			ix.cnt.refused += uint64(len(ev.Blocks) - i)
			break
		}
		if i%prefetchWindow == 0 {
			path = ix.prefetchStore(&ix.ranks[r].blocks, ev.Blocks[i:min(i+prefetchWindow, len(ev.Blocks))], path, &paths)
		}
		n, placed := ix.storeBlock(r, parent, ev.Blocks[i], paths[i%prefetchWindow])
		if !placed {
			ix.cnt.refused += uint64(len(ev.Blocks) - i)
			res = ResultOverCapacity
			break
		}
		parent = n
	}
	if ix.ranks[r].blocks.n == 0 {
		ix.freeRank(r)
	}
	return res
}

// storeBlock makes rank r hold the block b, whose path hash is path, under
// parent and returns its node, or false if a cap refuses it; ix.mu is held.
func (ix *Index) storeBlock(r, parent int32, b wire.StoredBlock, path uint64) (int32, bool) {
	rs := &ix.ranks[r]
	ei, exists := ix.edges.find(path, parent)
	var child int32
	if exists {
		child = ix.edges.slots[ei].node
	}
	bi, had := rs.blocks.find(b.BlockHash)
	var old int32
	if had {
		s := &rs.blocks.slots[bi]
		if exists && s.node == child {
			// Stored again where it is: the rank holds it, once. An engine
			// hash names one block; the publisher passes on every store of
			// it but only the removal that ends its last copy, so one
			// removal must release it whatever the stores before.
			ix.cnt.stored++
			return child, true
		}
		old = s.node
	}
	// The engine hash comes to child: a new entry, or one that leaves
	// another node (the engine holds one block per hash, so the event is the
	// newer truth). Caps are checked before anything changes, a moving hash
	// as if it added to the counts.
	if !had && rs.blocks.n >= ix.lim.perRank {
		return 0, false
	}
	owns := exists && ix.owns(child, r)
	if !owns {
		switch {
		case ix.ownerships >= ix.lim.ownerships,
			exists && int(ix.nodes[child].nown) >= ix.lim.perNode,
			!exists && ix.nodeCount >= ix.lim.blocks:
			return 0, false
		}
	}
	if !exists {
		child = ix.newNode(ei, parent, path)
	}
	if owns {
		if rs.multi == nil {
			rs.multi = map[int32]uint32{}
		}
		rs.multi[child] = max(rs.multi[child], 1) + 1
	} else {
		ix.addOwner(child, r)
		ix.ownerships++
	}
	slot := blockSlot{hash: b.BlockHash, node: child}
	if had {
		rs.blocks.slots[bi] = slot
		// child is in place first, so releasing the old node cannot free
		// the chain this block hangs from.
		ix.cnt.rebinds++
		ix.release(r, old)
	} else {
		rs.blocks.insert(bi, slot)
	}
	ix.cnt.stored++
	return child, true
}

// remove releases the engine hashes of a removed event; ix.mu is held.
func (ix *Index) remove(k load.Key, hashes []uint64) {
	r, ok := ix.rankOf[k]
	if !ok {
		ix.cnt.unknownRemovals += uint64(len(hashes))
		return
	}
	t := &ix.ranks[r].blocks
	for len(hashes) > 0 {
		w := hashes[:min(len(hashes), prefetchWindow)]
		hashes = hashes[len(w):]
		ix.prefetchRemove(t, w)
		ix.removeSome(r, t, w)
	}
	if t.n == 0 {
		ix.freeRank(r)
	}
}

// prefetchWindow: how many blocks the prefetching reads ahead.
const prefetchWindow = 16

// prefetchStore computes the path hashes of blocks, which follow the path
// hash path, into paths and returns the last; and reads, ahead of the work,
// the slots the blocks will touch.
func (ix *Index) prefetchStore(t *blockTable, blocks []wire.StoredBlock, path uint64, paths *[prefetchWindow]uint64) uint64 {
	var sink int32
	for i := range blocks {
		path = pathHash(path, blocks[i].TokensHash)
		paths[i] = path
		sink += t.slots[t.home(blocks[i].BlockHash)].node
		sink += ix.edges.slots[ix.edges.home(path)].node
	}
	ix.sink += sink
	return path
}

// prefetchRemove reads, ahead of the work, the slots and nodes the removal
// of hashes will touch: the loads do not depend on each other, so their
// cache misses overlap instead of following one another.
func (ix *Index) prefetchRemove(t *blockTable, hashes []uint64) {
	var sink int32
	for _, h := range hashes {
		sink += t.slots[t.home(h)].node
	}
	for _, h := range hashes {
		if i, ok := t.find(h); ok {
			nd := &ix.nodes[t.slots[i].node]
			sink += nd.kids
			sink += ix.edges.slots[ix.edges.home(nd.path)].node
		}
	}
	ix.sink += sink
}

func (ix *Index) removeSome(r int32, t *blockTable, hashes []uint64) {
	for _, h := range hashes {
		i, ok := t.find(h)
		if !ok {
			ix.cnt.unknownRemovals++
			continue
		}
		n := t.slots[i].node
		t.remove(i)
		ix.release(r, n)
		ix.cnt.removed++
	}
}

// release drops one engine hash of rank r from node n: the rank's ownership
// ends with its last one, and the node goes if nothing else keeps it.
func (ix *Index) release(r, n int32) {
	rs := &ix.ranks[r]
	if m, ok := rs.multi[n]; ok {
		if m <= 2 {
			delete(rs.multi, n)
		} else {
			rs.multi[n] = m - 1
		}
		return
	}
	ix.removeOwner(n, r)
	ix.ownerships--
	ix.prune(n)
}

// prune frees n and then its parents while they have neither owners nor
// children.
func (ix *Index) prune(n int32) {
	for n != 0 {
		nd := &ix.nodes[n]
		if nd.nown != 0 || nd.kids != 0 {
			return
		}
		p := nd.parent
		i, _ := ix.edges.find(nd.path, p)
		ix.edges.remove(i)
		*nd = node{parent: -1, own: -1}
		ix.freeNodes = append(ix.freeNodes, n)
		ix.nodeCount--
		ix.nodes[p].kids--
		n = p
	}
}

// newNode makes the node of path under parent, whose edge goes to the empty
// slot ei.
func (ix *Index) newNode(ei int, parent int32, path uint64) int32 {
	var n int32
	if k := len(ix.freeNodes); k > 0 {
		n = ix.freeNodes[k-1]
		ix.freeNodes = ix.freeNodes[:k-1]
	} else {
		n = int32(len(ix.nodes))
		ix.nodes = append(ix.nodes, node{})
	}
	ix.nodes[n] = node{path: path, parent: parent, own: -1}
	ix.nodes[parent].kids++
	ix.edges.insert(ei, edgeSlot{path: path, parent: parent, node: n})
	ix.nodeCount++
	return n
}

func (ix *Index) newRank(k load.Key) int32 {
	var r int32
	if n := len(ix.freeRanks); n > 0 {
		r = ix.freeRanks[n-1]
		ix.freeRanks = ix.freeRanks[:n-1]
	} else {
		r = int32(len(ix.ranks))
		ix.ranks = append(ix.ranks, rankState{})
	}
	rs := &ix.ranks[r]
	rs.key, rs.inUse = k, true
	if rs.blocks.slots == nil {
		rs.blocks.init(minTableLog, ix.seed^uint64(r)*0x9e3779b97f4a7c15)
	}
	ix.rankOf[k] = r
	return r
}

// dropRank releases every block of rank r and frees it.
func (ix *Index) dropRank(r int32) {
	for _, s := range ix.ranks[r].blocks.slots {
		if s.node != 0 {
			ix.release(r, s.node)
		}
	}
	ix.freeRank(r)
}

// freeRank frees rank r, which holds no node any more.
func (ix *Index) freeRank(r int32) {
	rs := &ix.ranks[r]
	delete(ix.rankOf, rs.key)
	if len(rs.blocks.slots) > bigRankTable {
		rs.blocks = blockTable{}
	} else {
		clear(rs.blocks.slots)
		rs.blocks.n = 0
	}
	rs.multi = nil
	rs.inUse = false
	ix.freeRanks = append(ix.freeRanks, r)
}

// FindMatches appends to dst, for each rank holding the first block of
// hashes (the tokens_hash of a request's blocks from the start of its
// prompt), how many leading blocks of hashes the rank holds without a hole,
// and returns dst. Ranks holding none are not listed; the order is not
// specified. It allocates nothing when dst has room for the ranks holding
// the first block.
func (ix *Index) FindMatches(hashes []uint64, dst []Match) []Match {
	if len(hashes) == 0 {
		return dst
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var paths [prefetchWindow]uint64
	path, sink := ix.prefetchFind(hashes, ix.seed, &paths)
	defer func() {
		// The prefetching loads must count as used: this condition is
		// next to never true, and what it does then is harmless.
		if sink == math.MinInt32 {
			ix.keep.Add(1)
		}
	}()
	i, ok := ix.edges.find(paths[0], 0)
	if !ok {
		return dst
	}
	n := ix.edges.slots[i].node
	// dst[base:] is the ranks still matching, sorted by rank number (held
	// in Blocks meanwhile), then the ranks done, with their counts.
	base := len(dst)
	for _, r := range ix.ownersOf(n) {
		dst = append(dst, Match{Rank: ix.ranks[r].key, Blocks: int(r)})
	}
	active := dst[base:]
	depth := 1
	for ; depth < len(hashes) && len(active) > 0; depth++ {
		if depth%prefetchWindow == 0 {
			var more int32
			path, more = ix.prefetchFind(hashes[depth:], path, &paths)
			sink += more
		}
		i, ok := ix.edges.find(paths[depth%prefetchWindow], n)
		if !ok {
			break
		}
		c := ix.edges.slots[i].node
		// Keep the ranks that hold c too, in order, in front; the others
		// end at depth and move behind them.
		own := ix.ownersOf(c)
		kept, j := 0, 0
		for i := range active {
			r := int32(active[i].Blocks)
			for j < len(own) && own[j] < r {
				j++
			}
			if j < len(own) && own[j] == r {
				active[i], active[kept] = active[kept], active[i]
				kept++
				j++
				continue
			}
			active[i].Blocks = depth
		}
		active = active[:kept]
		n = c
	}
	for i := range active {
		active[i].Blocks = depth
	}
	return dst
}

// prefetchFind computes the path hashes of the next window of hashes, which
// follow the path hash path, into paths, and reads their edge slots ahead.
// It returns the last path hash and the sum of what it read.
func (ix *Index) prefetchFind(hashes []uint64, path uint64, paths *[prefetchWindow]uint64) (uint64, int32) {
	var sink int32
	for i, h := range hashes[:min(len(hashes), prefetchWindow)] {
		path = pathHash(path, h)
		paths[i] = path
		sink += ix.edges.slots[ix.edges.home(path)].node
	}
	return path, sink
}

// Stats returns the size of the index and its counters.
func (ix *Index) Stats() Stats {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	st := Stats{
		Nodes:           ix.nodeCount,
		Ownerships:      ix.ownerships,
		Ranks:           len(ix.rankOf),
		Subscriptions:   len(ix.subs),
		Cursors:         ix.nCur,
		StoredBlocks:    ix.cnt.stored,
		RemovedBlocks:   ix.cnt.removed,
		UnknownRemovals: ix.cnt.unknownRemovals,
		RefusedBlocks:   ix.cnt.refused,
		Rebinds:         ix.cnt.rebinds,
		Gaps:            ix.cnt.gaps,
		Compactions:     ix.cnt.compactions,
	}
	b := int64(cap(ix.nodes))*int64(unsafe.Sizeof(node{})) + int64(cap(ix.freeNodes))*4
	b += ix.owners.bytes()
	b += int64(len(ix.edges.slots)) * int64(unsafe.Sizeof(edgeSlot{}))
	b += int64(cap(ix.ranks))*int64(unsafe.Sizeof(rankState{})) + int64(cap(ix.freeRanks))*4
	b += int64(len(ix.rankOf)) * mapEntryBytes(unsafe.Sizeof(load.Key{})+4)
	for i := range ix.ranks {
		b += int64(len(ix.ranks[i].blocks.slots))*int64(unsafe.Sizeof(blockSlot{})) +
			int64(len(ix.ranks[i].multi))*mapEntryBytes(8)
	}
	b += int64(ix.nCur) * mapEntryBytes(unsafe.Sizeof(load.Key{})+unsafe.Sizeof(cursor{}))
	b += int64(len(ix.subs)) * (mapEntryBytes(16) + int64(unsafe.Sizeof(subscription{})))
	st.Bytes = b
	return st
}

// RankInfo is one (worker, dp rank) as the index knows it: the device-tier
// blocks it holds and, per subscription feeding it, the last event id
// taken and the gaps seen.
type RankInfo struct {
	Rank    load.Key
	Blocks  int
	Cursors []CursorInfo
}

// CursorInfo is one subscription's cursor of a rank.
type CursorInfo struct {
	Subscription SubscriptionID
	EventID      uint64
	Gaps         uint32
}

// Ranks lists every rank the index holds blocks of or has a cursor for,
// ordered by namespace, worker and rank.
func (ix *Index) Ranks() []RankInfo {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	byKey := map[load.Key]*RankInfo{}
	get := func(k load.Key) *RankInfo {
		ri := byKey[k]
		if ri == nil {
			ri = &RankInfo{Rank: k}
			byKey[k] = ri
		}
		return ri
	}
	for k, r := range ix.rankOf {
		get(k).Blocks = ix.ranks[r].blocks.n
	}
	for id, s := range ix.subs {
		for k, c := range s.cursors {
			ri := get(k)
			ri.Cursors = append(ri.Cursors, CursorInfo{Subscription: id, EventID: c.id, Gaps: c.gaps})
		}
	}
	out := make([]RankInfo, 0, len(byKey))
	for _, ri := range byKey {
		slices.SortFunc(ri.Cursors, func(a, b CursorInfo) int { return cmp.Compare(a.Subscription, b.Subscription) })
		out = append(out, *ri)
	}
	slices.SortFunc(out, func(a, b RankInfo) int {
		return cmp.Or(cmp.Compare(a.Rank.Namespace.String(), b.Rank.Namespace.String()), cmp.Compare(a.Rank.WorkerID, b.Rank.WorkerID), cmp.Compare(a.Rank.DPRank, b.Rank.DPRank))
	})
	return out
}

// mapEntryBytes estimates what one entry of a Go map costs: its slot and a
// control byte, over the average load (2/3) of Go's hash tables.
func mapEntryBytes(slot uintptr) int64 { return int64(slot+1) * 3 / 2 }
