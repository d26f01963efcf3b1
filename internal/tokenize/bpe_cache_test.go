package tokenize

import (
	"math/rand/v2"
	"testing"
)

// TestWordCacheBoundedInBytes: clients choose the words the cache keeps
// and so their length; long words with an id per byte (what a byte-level
// vocabulary gives for text it has never seen) stay within the cache's
// bytes, not only its count of words.
func TestWordCacheBoundedInBytes(t *testing.T) {
	t.Parallel()
	var c wordCache
	c.init()
	rng := rand.New(rand.NewPCG(1, 2))
	word := make([]byte, maxCachedWord)
	ids := make([]uint32, maxCachedWord)
	for range 400_000 {
		n := maxCachedWord - rng.IntN(32)
		for i := range n {
			word[i] = 'a' + byte(rng.IntN(26))
		}
		c.put(string(word[:n]), ids[:n])
	}
	held := 0
	for i := range c.shards {
		sh := &c.shards[i]
		real := 0
		for w, v := range sh.m {
			real += len(w) + 4*len(v)
		}
		if real > sh.bytes {
			t.Fatalf("shard %d counts %d bytes and holds %d", i, sh.bytes, real)
		}
		held += real
	}
	if limit := len(c.shards) * cacheShardBytes; held > limit {
		t.Errorf("the cache holds %d MiB of words and ids, past its %d MiB", held>>20, limit>>20)
	}
}
