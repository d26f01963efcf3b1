package tokenize

import (
	"hash/maphash"
	"strings"
	"sync"
)

// Segment cache. Added tokens split text into segments that the library
// normalizes, pre-tokenizes and encodes independently of each other, so a
// segment's ids depend only on its text and on whether it starts the input
// (Metaspace's "first" scheme). Chat prompts repeat long segments request
// after request — the system prompt, the tool schemas, every earlier turn of
// a conversation between its <|im_start|> and <|im_end|> — so the ids of
// long segments are kept, bounded in bytes, and reused exactly.
const (
	// segCacheMinBytes: shorter segments are cheap to encode again.
	segCacheMinBytes = 256
	// segCacheShards * segCacheShardBytes bounds the cache (keys and ids):
	// 8 MiB per tokenizer (16 tokenizers at most are loaded). A shard past
	// its budget is emptied.
	segCacheShards     = 16
	segCacheShardBytes = 512 << 10
)

type segCache struct {
	seed   maphash.Seed
	shards [segCacheShards]segShard
}

type segShard struct {
	mu    sync.RWMutex
	m     map[segKey][]uint32
	bytes int
}

type segKey struct {
	text  string
	first bool
}

func newSegCache() *segCache {
	return &segCache{seed: maphash.MakeSeed()}
}

func (c *segCache) shard(text string) *segShard {
	return &c.shards[maphash.String(c.seed, text)%segCacheShards]
}

func (c *segCache) get(text string, first bool) ([]uint32, bool) {
	sh := c.shard(text)
	sh.mu.RLock()
	ids, ok := sh.m[segKey{text, first}]
	sh.mu.RUnlock()
	return ids, ok
}

// put keeps a copy of ids for text; the key is cloned so the cache never
// holds the caller's whole prompt.
func (c *segCache) put(text string, first bool, ids []uint32) {
	size := len(text) + 4*len(ids)
	if size > segCacheShardBytes/4 {
		return // one segment may not take a quarter of a shard
	}
	sh := c.shard(text)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := segKey{strings.Clone(text), first}
	if _, ok := sh.m[k]; ok {
		return
	}
	if sh.m == nil || sh.bytes+size > segCacheShardBytes {
		sh.m, sh.bytes = map[segKey][]uint32{}, 0
	}
	sh.m[k] = append([]uint32(nil), ids...)
	sh.bytes += size
}

// SetSegmentCache turns the segment cache on or off (on after Load); off,
// every encode starts cold. Call it before the tokenizer is shared.
func (t *Tokenizer) SetSegmentCache(on bool) {
	switch {
	case on && t.segs == nil:
		t.segs = newSegCache()
	case !on:
		t.segs = nil
	}
}
