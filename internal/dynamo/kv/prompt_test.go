package kv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/gcpolicy"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/tokenize"
)

func qwen3(t testing.TB) *kv.Preparer {
	t.Helper()
	root := testutil.RepoRoot(t)
	data := testutil.TokenizerJSON(t, "qwen3")
	tok, err := tokenize.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(root, "testdata/chattemplate/qwen3.tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattemplate.FromTokenizerConfig(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	return &kv.Preparer{Tokenizer: tok, Template: tmpl}
}

// request8k is the chat template benchmark's long conversation
// (testdata/chattemplate/long_request.json), its turns repeated until the
// rendered prompt is at least 8,192 Qwen3 tokens.
func request8k(t testing.TB, p *kv.Preparer) chattemplate.Input {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "testdata/chattemplate/long_request.json"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := chattemplate.DecodeRequestKwargs(b)
	if err != nil {
		t.Fatal(err)
	}
	turns := slices.Clone(in.Messages[1:])
	for i := 0; ; i++ {
		_, ids, err := p.Chat(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) >= 8192 {
			return in
		}
		// Insert before the final user turn, keeping the conversation's shape.
		last := len(in.Messages) - 1
		in.Messages = slices.Insert(in.Messages, last, turns[i%len(turns)])
	}
}

// The pipeline's pieces agree with their own references: the rendered text
// is the template's, the ids are the tokenizer's encoding of it without
// added special tokens, and the hashes are wire.LocalBlockHashes of them.
func TestPipeline(t *testing.T) {
	p := qwen3(t)
	in := request8k(t, p)
	text, ids, err := p.Chat(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want, err := p.Template.Render(context.Background(), in)
	if err != nil || want != text {
		t.Fatalf("rendered text differs from the template's render (%v)", err)
	}
	wantIDs, _ := p.Tokenizer.Encode(text, false)
	if !slices.Equal(ids, wantIDs) {
		t.Fatal("ids differ from the tokenizer's")
	}
	if len(ids) < 8192 || len(ids) > 9000 {
		t.Fatalf("the benchmark request is %d tokens, want about 8k", len(ids))
	}
	seed := wire.BlockHashSeed("adapter-a", "tenant-a")
	hashes, err := kv.BlockHashes(ids, 64, seed)
	if err != nil || len(hashes) != len(ids)/64 || !slices.Equal(hashes, wire.LocalBlockHashes(ids, 64, seed)) {
		t.Fatalf("hashes: %d for %d ids (%v)", len(hashes), len(ids), err)
	}
	pooled, err := p.ChatBlockHashes(context.Background(), in, 64, seed)
	if err != nil || !slices.Equal(pooled, hashes) {
		t.Fatalf("ChatBlockHashes differs from render+encode+hash (%v)", err)
	}
	for _, bs := range []int{0, 15, 65537} {
		if _, err := kv.BlockHashes(ids, bs, seed); !errors.Is(err, kv.ErrBlockSize) {
			t.Errorf("block size %d: %v", bs, err)
		}
	}
	for _, bs := range []int{16, 65536} {
		if _, err := kv.BlockHashes(ids, bs, seed); err != nil {
			t.Errorf("block size %d: %v", bs, err)
		}
	}
	if _, _, err := (&kv.Preparer{Tokenizer: p.Tokenizer}).Chat(context.Background(), in); !errors.Is(err, kv.ErrNoTemplate) {
		t.Fatalf("chat without a template: %v", err)
	}
	// A known vector (also in wire's TestBlockHashVectors): tokens 0..63,
	// block size 16, seed 1337.
	seq := make([]uint32, 64)
	for i := range seq {
		seq[i] = uint32(i)
	}
	h, _ := kv.BlockHashes(seq, 16, wire.XXH3Seed)
	if h[0] != 0xd47a8f41c833328a || h[3] != 0xcf2d99a33cc42682 {
		t.Fatalf("reference vector: %x", h)
	}
}

// BenchmarkRenderEncodeHash: render + encode + hash of an ~8k-token chat
// request with Qwen3's template and tokenizer, at block size 64 (target:
// p99 ≤ 1 ms).
//   - cold: the tokenizer's segment cache off, every prompt encoded from
//     scratch;
//   - conversation: the cache on, and every request's last user turn new
//     (as in a chat, where each request repeats the conversation so far);
//   - baseline-copy: copying the rendered prompt's bytes once, the least any
//     pipeline does, in the same run;
//
// each with Go's default collector and with the one `continuum serve` runs
// (gcpolicy: GOGC=400).
func BenchmarkRenderEncodeHash(b *testing.B) {
	p := qwen3(b)
	in := request8k(b, p)
	seed := wire.BlockHashSeed("", "")
	ctx := context.Background()
	text, ids, err := p.Chat(ctx, in)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, p *kv.Preparer, next func(i int) chattemplate.Input) {
		b.SetBytes(int64(len(text)))
		times := make([]time.Duration, 0, 1024)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			req := next(i)
			i++
			start := time.Now()
			if _, err := p.ChatBlockHashes(ctx, req, 64, seed); err != nil {
				b.Fatal(err)
			}
			times = append(times, time.Since(start))
		}
		reportP99(b, times)
		b.ReportMetric(float64(len(ids)), "tokens")
	}
	cold := qwen3(b)
	cold.Tokenizer.SetSegmentCache(false)
	last := len(in.Messages) - 1
	msgs := slices.Clone(in.Messages)
	followUp := func(i int) chattemplate.Input {
		req := in
		req.Messages = msgs
		msgs[last] = map[string]any{"role": "user", "content": fmt.Sprintf(
			"Thanks. Follow-up %d: compare the prefill and decode pools again, and say which workers you would drain first and why.", i)}
		return req
	}
	for _, gc := range []string{"default", "serve"} {
		b.Run("gc="+gc+"/cold", func(b *testing.B) {
			defer applyGC(gc)()
			run(b, cold, func(int) chattemplate.Input { return in })
		})
		b.Run("gc="+gc+"/conversation", func(b *testing.B) {
			defer applyGC(gc)()
			run(b, p, followUp)
		})
	}
	b.Run("baseline-copy", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		var sink []byte
		for b.Loop() {
			sink = bytes.Clone([]byte(text))
		}
		_ = sink
	})
}

// applyGC sets the collector as `continuum serve` does (gc "serve"), for
// the whole benchmark process, or leaves Go's default.
func applyGC(gc string) (restore func()) {
	if gc != "serve" {
		return func() {}
	}
	return gcpolicy.Apply(func(string) (string, bool) { return "", false }, nil)
}

func reportP99(b *testing.B, times []time.Duration) {
	if len(times) == 0 {
		return
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds()), "p99-µs")
}
