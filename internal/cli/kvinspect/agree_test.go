package kvinspect_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestHashAgreesWithTheRouter: for chat requests, kv-inspect hash gives the
// ids and block hashes the router's KV-aware selection computes from the
// same artifacts: the generation prompt on by default (off after an
// assistant's message), text-part lists joined, top-level keys that are not
// template variables ignored, chat_template_kwargs honoured, the body's
// cache salt used.
func TestHashAgreesWithTheRouter(t *testing.T) {
	t.Parallel()
	snap, _, pins := kvFleet(t, t.TempDir(), nil)
	loader, err := artifact.NewLoader(artifact.LoaderOptions{Policy: artifact.NewPolicy(mustChecksums(t, pins)...), Build: kv.Build})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = loader.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	prompts := kv.NewPrompts(loader)

	bodies := []string{
		`{"messages":[{"role":"user","content":"hello world"}]}`,
		`{"model":"m","temperature":0.2,"messages":[{"role":"user","content":[{"type":"text","text":"hello"},{"type":"text","text":"world"}]}]}`,
		`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello! How"}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}`,
		`{"messages":[{"role":"user","content":"think first"}],"enable_thinking":false}`,
		`{"messages":[{"role":"user","content":"think first"}],"chat_template_kwargs":{"enable_thinking":false}}`,
		`{"messages":[{"role":"user","content":"a salted prompt long enough for a complete block of sixteen tokens, or two"}],"nvext":{"cache_salt":"tenant-b"}}`,
		`{"messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"required":[]}}}]}`,
	}
	want := make([]*kv.Prompt, len(bodies))
	testutil.Eventually(t, 30*time.Second, "the router's prompts", func() bool {
		for i, b := range bodies {
			pr, result := prompts.Prepare(snap, "m", "/v1/chat/completions", []byte(b), []int{16})
			if result != "" {
				return false
			}
			want[i] = pr
		}
		return true
	})

	tok := tokenizerFile(t, "qwen3")
	cfg := filepath.Join(testutil.RepoRoot(t), "testdata/chattemplate/qwen3.tokenizer_config.json")
	code, out, errOut := run(t, strings.Join(bodies, "\n")+"\n", "kv-inspect", "hash", "--tokenizer", tok, "--block-size", "16", "--tokenizer-config", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	got := lines(t, out)
	if len(got) != len(bodies) {
		t.Fatalf("%d lines for %d requests:\n%s", len(got), len(bodies), out)
	}
	for i, g := range got {
		var ids []uint32
		var hashes []uint64
		if json.Unmarshal(g["ids"], &ids) != nil || json.Unmarshal(g["block_hashes"], &hashes) != nil {
			t.Fatalf("request %d: %s", i, g["error"])
		}
		if !slices.Equal(ids, want[i].IDs) {
			t.Errorf("request %d: kv-inspect %d ids, the router %d:\n%v\n%v", i, len(ids), len(want[i].IDs), ids, want[i].IDs)
		}
		if !slices.Equal(hashes, want[i].Hashes[16]) {
			t.Errorf("request %d: block hashes differ from the router's", i)
		}
	}
	// The cases differ where the router's reading says they should, so
	// agreement is not agreement on a default that ignores them.
	if slices.Equal(want[4].IDs, want[5].IDs) {
		t.Error("a top-level enable_thinking renders as chat_template_kwargs does")
	}
	if unsalted, err := kv.BlockHashes(want[6].IDs, 16, wire.XXH3Seed); err != nil || slices.Equal(unsalted, want[6].Hashes[16]) {
		t.Errorf("the body's cache salt is not in the hashes (%v)", err)
	}
}
