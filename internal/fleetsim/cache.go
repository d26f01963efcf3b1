package fleetsim

import (
	"container/list"
	"encoding/binary"

	"github.com/zeebo/xxh3"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// A simulated worker rank's KV cache holds blocks of kv_cache_block_size
// tokens. A block is known by its engine hash, which stands for the whole
// token prefix up to and including the block (the engine's prefix caching
// key), and carries Dynamo's tokens_hash of its own tokens. The cache holds
// total_kv_blocks of them and evicts the least recently used first; a
// request touches its blocks from the last to the first, so that a prefix
// is always more recent than its extensions and eviction takes leaves
// before the blocks they hang from.

// promptBlock is one complete block of a prompt.
type promptBlock struct {
	engine, tokens uint64
}

// engineSeed seeds the engine hashes, apart from Dynamo's tokens hashes.
const engineSeed = 0x5eed_0f_b10c_4a5e

// promptBlocks returns the complete blocks of a prompt's token ids: the
// tokens_hash of each (XXH3 with seed, as Dynamo hashes them) and an
// engine hash unique to the prefix it ends, spread over the whole u64
// range as vLLM's are (i64 values reinterpreted: about half have the top bit
// set).
func promptBlocks(ids []uint32, blockSize int, seed uint64) []promptBlock {
	local := wire.LocalBlockHashes(ids, blockSize, seed)
	seq := wire.SequenceHashes(local, seed)
	out := make([]promptBlock, len(local))
	var buf [8]byte
	for i := range local {
		binary.LittleEndian.PutUint64(buf[:], seq[i])
		out[i] = promptBlock{engine: xxh3.HashSeed(buf[:], engineSeed), tokens: local[i]}
	}
	return out
}

// blockCache is one rank's cache. It is not safe for concurrent use: the
// worker's kvMu guards it.
type blockCache struct {
	cap   int
	order *list.List // of promptBlock, most recent first
	items map[uint64]*list.Element
}

func newBlockCache(capacity int) *blockCache {
	return &blockCache{cap: max(capacity, 1), order: list.New(), items: map[uint64]*list.Element{}}
}

// prefix is how many leading blocks of a prompt the cache holds.
func (c *blockCache) prefix(blocks []promptBlock) int {
	for i, b := range blocks {
		if _, ok := c.items[b.engine]; !ok {
			return i
		}
	}
	return len(blocks)
}

// cacheUpdate is what computing a prompt did to a cache: the leading blocks
// it found, the runs of blocks it stored (in prompt order, each with the
// index of its first block), and the engine hashes it evicted to make room.
type cacheUpdate struct {
	hit     int
	stored  []storedRun
	evicted []uint64
}

type storedRun struct {
	start  int
	blocks []promptBlock
}

// compute caches a prompt's blocks (the worker has now computed the whole
// prompt) and says what changed. A prompt longer than the cache keeps only
// its leading blocks.
func (c *blockCache) compute(blocks []promptBlock) cacheUpdate {
	u := cacheUpdate{hit: c.prefix(blocks)}
	blocks = blocks[:min(len(blocks), c.cap)]
	missing := 0
	for _, b := range blocks {
		if e, ok := c.items[b.engine]; ok {
			c.order.MoveToFront(e) // kept from eviction below
		} else {
			missing++
		}
	}
	for c.order.Len()+missing > c.cap {
		last := c.order.Back()
		c.order.Remove(last)
		h := last.Value.(promptBlock).engine
		delete(c.items, h)
		u.evicted = append(u.evicted, h)
	}
	for i := 0; i < len(blocks); {
		if _, ok := c.items[blocks[i].engine]; ok {
			i++
			continue
		}
		run := storedRun{start: i}
		for ; i < len(blocks); i++ {
			if _, ok := c.items[blocks[i].engine]; ok {
				break
			}
			run.blocks = append(run.blocks, blocks[i])
			c.items[blocks[i].engine] = c.order.PushFront(blocks[i])
		}
		u.stored = append(u.stored, run)
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		c.order.MoveToFront(c.items[blocks[i].engine])
	}
	return u
}

// clear empties the cache (a restarted worker).
func (c *blockCache) clear() {
	c.order.Init()
	clear(c.items)
}
