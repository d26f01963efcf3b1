package artifact_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/testutil"
)

// tokenizerSize is about the size of a Qwen3 tokenizer.json.
const tokenizerSize = 11 << 20

// BenchmarkVerify is the blake3 check run on every read of a cached blob;
// BenchmarkVerifyBaselineCopy copies the same bytes once, for scale.
func BenchmarkVerify(b *testing.B) {
	data := vectorInput(tokenizerSize)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		sumSink = artifact.Sum(data)
	}
}

// sumSink keeps the benchmarked sums (what they are is checked against
// BLAKE3's own vectors in TestChecksumMatchesBlake3Vectors).
var sumSink artifact.Checksum

func BenchmarkVerifyBaselineCopy(b *testing.B) {
	data := vectorInput(tokenizerSize)
	dst := make([]byte, len(data))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		copy(dst, data)
	}
}

// BenchmarkLoaderResolve is the per-request lookup of a model's loaded
// tokenizer and template; the baseline is a mutex-guarded map lookup.
func BenchmarkLoaderResolve(b *testing.B) {
	tok, tmpl := []byte("tok"), []byte("tmpl")
	l, err := artifact.NewLoader(artifact.LoaderOptions{Policy: artifact.NewPolicy(artifact.Sum(tok), artifact.Sum(tmpl)), Build: buildText})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	rt := refFor(b, artifact.SlotTokenizer, writeFile(b, "t.json", tok), tok)
	rp := refFor(b, artifact.SlotPromptFormatter, writeFile(b, "c.json", tmpl), tmpl)
	testutil.Eventually(b, 10*time.Second, "loaded", func() bool {
		_, err := l.Resolve("m", rt, rp)
		return !errors.Is(err, artifact.ErrPending)
	})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Resolve("m", rt, rp); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoaderResolveBaselineMap(b *testing.B) {
	var mu sync.Mutex
	m := map[artifact.Key]any{}
	k1 := artifact.Key{Format: artifact.FormatHFTokenizerJSON, Checksum: artifact.Sum([]byte("tok"))}
	k2 := artifact.Key{Format: artifact.FormatHFTokenizerConfigJSON, Checksum: artifact.Sum([]byte("tmpl"))}
	m[k1], m[k2] = 1, 2
	b.ReportAllocs()
	for b.Loop() {
		mu.Lock()
		a, c := m[k1], m[k2]
		mu.Unlock()
		if a == nil || c == nil {
			b.Fatal("missing")
		}
	}
}
