package router

import (
	"strings"
	"testing"
)

func TestNewRequestID(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for range 1000 {
		id := newRequestID()
		if len(id) != 26 || !validRequestID(id) || strings.Trim(id, idAlphabet) != "" {
			t.Fatalf("id %q: want 26 characters of %s", id, idAlphabet)
		}
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id] = true
	}
	// Every character position takes more than one value (no position is
	// left at a constant by the bit bookkeeping).
	for i := range 26 {
		vals := make(map[byte]bool)
		for id := range seen {
			vals[id[i]] = true
		}
		if len(vals) < 16 {
			t.Errorf("position %d takes %d values over %d ids", i, len(vals), len(seen))
		}
	}
}
