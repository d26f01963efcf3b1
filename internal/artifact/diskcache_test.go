package artifact_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/artifact"
)

// TestLoaderCacheHoldsOnlyPins: the artifact cache (kv.artifact_cache_dir,
// blobs/<hex>) holds the blobs of pinned artifacts only: a reload that
// unpins some removes theirs, and a loader started over a cache kept from
// an earlier run removes the blobs its pins do not name. The cache's size
// is then bounded by the pins, not by every artifact ever fetched.
func TestLoaderCacheHoldsOnlyPins(t *testing.T) {
	payload := func(i int) []byte { return fmt.Appendf(nil, "artifact-%02d-%s", i, strings.Repeat("x", 88)) } // 100 bytes
	byPath := map[string][]byte{}
	var sums []artifact.Checksum
	for i := range 3 {
		byPath[fmt.Sprintf("/%d", i)] = payload(i)
		sums = append(sums, artifact.Sum(payload(i)))
	}
	srv := serveFiles(t, byPath)
	cache := t.TempDir()
	pol := artifact.NewPolicy(sums...)
	pol.AllowHTTP, pol.CacheDir = true, cache
	h := startLoader(t, pol, localClient(t), buildText)
	for i := range 3 {
		if _, err := h.waitReady(t, "m", refFor(t, artifact.SlotTokenizer, fmt.Sprintf("%s/%d", srv.srv.URL, i), payload(i))); err != nil {
			t.Fatal(err)
		}
	}
	blobs := func() []string {
		entries, _ := os.ReadDir(filepath.Join(cache, "blobs"))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	if got := blobs(); len(got) != 3 {
		t.Fatalf("blobs after three fetches: %v", got)
	}
	// A reload that keeps one pin.
	one := artifact.NewPolicy(sums[1])
	one.AllowHTTP, one.CacheDir = true, cache
	h.loader.SetPolicy(one)
	if got := blobs(); len(got) != 1 || got[0] != sums[1].Hex() {
		t.Errorf("blobs after a reload pinning one: %v, want [%s]", got, sums[1].Hex())
	}
	// A loader started over that cache with another pin.
	other := artifact.NewPolicy(sums[2])
	other.CacheDir = cache
	if _, err := artifact.NewLoader(artifact.LoaderOptions{Policy: other, Build: buildText}); err != nil {
		t.Fatal(err)
	}
	if got := blobs(); len(got) != 0 {
		t.Errorf("blobs after a start pinning none of them: %v", got)
	}
}
