package fleetsim

import "testing"

func TestPromptShapeAndPrefixCache(t *testing.T) {
	n, blocks, ok := promptShape("<len:1100> <b:7> <b:8> <b:9>")
	if !ok || n != 1100 || len(blocks) != 3 {
		t.Fatalf("%d %v %v", n, blocks, ok)
	}
	if _, _, ok := promptShape("hello"); ok {
		t.Fatal("an ordinary prompt was shaped")
	}
	c := newPrefixCache(3)
	if hit := c.lookupAndInsert([]uint64{1, 2}); hit != 0 {
		t.Fatalf("cold hit %d", hit)
	}
	if hit := c.lookupAndInsert([]uint64{1, 2, 3}); hit != 2 {
		t.Fatalf("prefix hit %d", hit)
	}
	if hit := c.lookupAndInsert([]uint64{9, 1}); hit != 0 { // a different first block: no prefix
		t.Fatalf("non-prefix hit %d", hit)
	}
	// 9 evicted the least recently used block (2): 1,2 now hits only 1.
	if hit := c.lookupAndInsert([]uint64{1, 2}); hit != 1 {
		t.Fatalf("after eviction %d", hit)
	}
}
