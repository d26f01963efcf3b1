package fleetsim

import "testing"

// TestEngineHashes: deterministic per (trace block, index), distinct, and
// spread over the whole u64 range, about half with the top bit set.
func TestEngineHashes(t *testing.T) {
	seen := map[uint64]bool{}
	top := 0
	for id := range uint64(1000) {
		for j := range 8 {
			h := engineHash(id, j)
			if h != engineHash(id, j) {
				t.Fatalf("engineHash(%d, %d) changed", id, j)
			}
			if seen[h] {
				t.Fatalf("engineHash(%d, %d) repeats %x", id, j, h)
			}
			seen[h] = true
			top += int(h >> 63)
		}
	}
	if top < 3800 || top > 4200 {
		t.Errorf("%d of 8000 hashes have the top bit set", top)
	}
}
