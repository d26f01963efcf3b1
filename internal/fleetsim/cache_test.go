package fleetsim

import (
	"fmt"
	"testing"
)

func TestPromptShapeAndPrefixCache(t *testing.T) {
	n, blocks, ok := promptShape("<len:1100> <b:7> <b:8> <b:9>")
	if !ok || n != 1100 || len(blocks) != 3 {
		t.Fatalf("%d %v %v", n, blocks, ok)
	}
	if _, _, ok := promptShape("hello"); ok {
		t.Fatal("an ordinary prompt was shaped")
	}
	c := newPrefixCache(3)
	if hit, ins, ev := c.lookupAndInsert([]uint64{1, 2}); hit != 0 || fmt.Sprint(ins, ev) != "[true true] []" {
		t.Fatalf("cold hit %d %v %v", hit, ins, ev)
	}
	if hit, ins, _ := c.lookupAndInsert([]uint64{1, 2, 3}); hit != 2 || fmt.Sprint(ins) != "[false false true]" {
		t.Fatalf("prefix hit %d %v", hit, ins)
	}
	// A different first block: no prefix; 9 evicts the least recently used
	// block (1), which then comes back and evicts 2.
	if hit, ins, ev := c.lookupAndInsert([]uint64{9, 1}); hit != 0 || fmt.Sprint(ins, ev) != "[true true] [1 2]" {
		t.Fatalf("non-prefix hit %d %v %v", hit, ins, ev)
	}
	if hit, _, _ := c.lookupAndInsert([]uint64{1, 2}); hit != 1 {
		t.Fatalf("after eviction %d", hit)
	}
}
