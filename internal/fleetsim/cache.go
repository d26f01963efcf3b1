package fleetsim

import (
	"container/list"
	"regexp"
	"strconv"
	"sync"
)

// Workload prompts name their blocks: "<len:N>" gives the prompt's tokens
// and each "<b:ID>" is one TraceBlockTokens-token block of a shared prefix
// (the Mooncake traces' hash_ids), in order.
const TraceBlockTokens = 512

var (
	lenMarker   = regexp.MustCompile(`<len:(\d+)>`)
	blockMarker = regexp.MustCompile(`<b:(\d+)>`)
)

// promptShape reads a workload prompt: its length in tokens and its block
// ids; ok is false for an ordinary prompt.
func promptShape(text string) (tokens int, blocks []uint64, ok bool) {
	m := lenMarker.FindStringSubmatch(text)
	if m == nil {
		return 0, nil, false
	}
	tokens, _ = strconv.Atoi(m[1])
	for _, b := range blockMarker.FindAllStringSubmatch(text, -1) {
		id, err := strconv.ParseUint(b[1], 10, 64)
		if err == nil {
			blocks = append(blocks, id)
		}
	}
	return tokens, blocks, true
}

// prefixCache is a worker's KV cache of trace blocks, least recently used
// evicted first.
type prefixCache struct {
	mu    sync.Mutex
	cap   int
	order *list.List
	items map[uint64]*list.Element
}

func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{cap: max(capacity, 1), order: list.New(), items: map[uint64]*list.Element{}}
}

// lookupAndInsert returns how many leading blocks were cached, then caches
// them all (the worker has now computed the whole prompt). inserted marks
// the blocks that were not cached; evicted lists the blocks that made room.
func (c *prefixCache) lookupAndInsert(blocks []uint64) (hit int, inserted []bool, evicted []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range blocks {
		if _, ok := c.items[b]; !ok {
			break
		}
		hit++
	}
	inserted = make([]bool, len(blocks))
	for i, b := range blocks {
		if e, ok := c.items[b]; ok {
			c.order.MoveToFront(e)
			continue
		}
		inserted[i] = true
		c.items[b] = c.order.PushFront(b)
		if c.order.Len() > c.cap {
			last := c.order.Back()
			c.order.Remove(last)
			id := last.Value.(uint64)
			delete(c.items, id)
			evicted = append(evicted, id)
		}
	}
	return hit, inserted, evicted
}

// clear empties the cache (a restarted worker).
func (c *prefixCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order.Init()
	clear(c.items)
}
