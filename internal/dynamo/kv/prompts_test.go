package kv_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/testutil"
)

// artifactFleet writes Qwen3's tokenizer and tokenizer config to a
// directory and returns a snapshot of workers of model "m" whose cards
// declare them (checksums as given per worker), and the files' pins.
func artifactFleet(t *testing.T, checksums ...string) (*fleet.Snapshot, []string, string) {
	t.Helper()
	dir := t.TempDir()
	tok := testutil.TokenizerJSON(t, "qwen3")
	cfg, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "testdata/chattemplate/qwen3.tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tokPath, cfgPath := filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(tokPath, tok, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	pins := []string{artifact.Sum(tok).String(), artifact.Sum(cfg).String()}
	r := fleet.NewReducer()
	t0 := time.Unix(1_800_000_000, 0)
	for i, tokSum := range checksums {
		id := uint64(i + 1)
		if tokSum == "" {
			tokSum = pins[0]
		}
		r.Put(fmt.Sprintf("v1/instances/dynamo/backend/generate/%x", id), fmt.Appendf(nil, `{"component":"backend","endpoint":"generate","instance_id":%d}`, id), t0)
		r.Put(fmt.Sprintf("v1/mdc/dynamo/backend/generate/%x", id), fmt.Appendf(nil,
			`{"component":"backend","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m","worker_type":"Aggregated","kv_cache_block_size":16,
			"tokenizer":{"hf_tokenizer_json":{"path":%q,"checksum":%q}},
			"prompt_formatter":{"hf_tokenizer_config_json":{"path":%q,"checksum":%q}}}}`, id, tokPath, tokSum, cfgPath, pins[1]), t0)
	}
	return r.Build(t0), pins, dir
}

func startLoader(t testing.TB, pins ...string) *artifact.Loader {
	t.Helper()
	pol, err := artifact.PolicyFor(artifact.Settings{Pinned: pins}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := artifact.NewLoader(artifact.LoaderOptions{Policy: pol, Build: kv.Build})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// prepared waits for the model's artifacts to load and returns the prompt.
func prepared(t *testing.T, p *kv.Prompts, snap *fleet.Snapshot, path, body string, sizes ...int) *kv.Prompt {
	t.Helper()
	var pr *kv.Prompt
	var result string
	testutil.Eventually(t, 30*time.Second, "artifacts loaded", func() bool {
		pr, result = p.Prepare(snap, "m", path, []byte(body), sizes)
		return result != kv.ResultTokenizerUnavailable
	})
	if result != "" {
		t.Fatalf("prepare: %s", result)
	}
	return pr
}

// TestPromptsMatchThePipeline: a chat request is rendered with the pinned
// template (the generation prompt added), encoded without added special
// tokens, and hashed per block size, exactly as the verified pipeline does;
// a completions prompt is encoded as given.
func TestPromptsMatchThePipeline(t *testing.T) {
	t.Parallel()
	snap, pins, _ := artifactFleet(t, "", "")
	p := kv.NewPrompts(startLoader(t, pins...))
	ref := qwen3(t)
	body := `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Name three primes."}]}`
	pr := prepared(t, p, snap, "/v1/chat/completions", body, 16, 32)
	in, err := chattemplate.DecodeRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	in.AddGenerationPrompt = true
	_, ids, err := ref.Chat(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pr.IDs, ids) {
		t.Fatalf("ids differ from the pipeline's:\n%v\n%v", pr.IDs, ids)
	}
	for _, bs := range []int{16, 32} {
		if want := wire.LocalBlockHashes(ids, bs, wire.XXH3Seed); !slices.Equal(pr.Hashes[bs], want) || len(want) != len(ids)/bs {
			t.Errorf("block size %d: %x, want %x", bs, pr.Hashes[bs], want)
		}
	}
	// Text parts are joined by newlines, as the frontend does.
	parts := `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":[{"type":"text","text":"Name three"},{"type":"text","text":"primes."}]}]}`
	joined := `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Name three\nprimes."}]}`
	if a, b := prepared(t, p, snap, "/v1/chat/completions", parts, 16), prepared(t, p, snap, "/v1/chat/completions", joined, 16); !slices.Equal(a.IDs, b.IDs) {
		t.Error("text parts were not joined")
	}
	// A cache salt changes the hashes, not the ids.
	salted := prepared(t, p, snap, "/v1/chat/completions", `{"model":"m","nvext":{"cache_salt":"tenant-a"},"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Name three primes."}]}`, 16)
	if !slices.Equal(salted.IDs, ids) || !slices.Equal(salted.Hashes[16], wire.LocalBlockHashes(ids, 16, wire.BlockHashSeed("", "tenant-a"))) {
		t.Error("cache salt")
	}
	// Completions: the prompt as given.
	text := "The quick brown fox jumps over the lazy dog, again and again and again."
	cp := prepared(t, p, snap, "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":%q}`, text), 16)
	want, err := ref.Text(text, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cp.IDs, want) {
		t.Errorf("completions ids %v, want %v", cp.IDs, want)
	}
	// Token ids are the prompt as they are, salt and all (the frontend
	// passes them to the engine untouched).
	idsJSON, _ := json.Marshal(want)
	tp := prepared(t, p, snap, "/v1/completions", `{"model":"m","cache_salt":"s","prompt":`+string(idsJSON)+`}`, 16)
	if !slices.Equal(tp.IDs, want) || !slices.Equal(tp.Hashes[16], wire.LocalBlockHashes(want, 16, wire.BlockHashSeed("", "s"))) {
		t.Errorf("token id prompt: ids %v, hashes %v", tp.IDs, tp.Hashes[16])
	}
	// A prompt that is neither one text nor one list of ids has no KV
	// terms.
	for _, batch := range []string{`["a","b"]`, `[[1,2],[3,4]]`, `[1,-2]`, `[1,4294967296]`, `[1.5]`} {
		if _, result := p.Prepare(snap, "m", "/v1/completions", []byte(`{"model":"m","prompt":`+batch+`}`), []int{16}); result != kv.ResultRenderUnavailable {
			t.Errorf("prompt %s: %q", batch, result)
		}
	}
	// No body: a pick by model alone, with no result to count.
	if pr, result := p.Prepare(snap, "m", "/v1/responses", nil, []int{16}); pr != nil || result != "" {
		t.Errorf("no body: %v %q", pr, result)
	}
	// Count is the size of the prompt Prepare renders, or why there is none.
	if n, result := p.Count(snap, "m", []byte(body)); n != len(ids) || result != "" {
		t.Errorf("count %d %q, want %d", n, result, len(ids))
	}
	if n, result := p.Count(snap, "other", []byte(body)); n != 0 || result != kv.ResultTokenizerUnavailable {
		t.Errorf("count of a model without workers: %d %q", n, result)
	}
}

// TestPromptsFleetAgreement: workers that declare different tokenizers
// (a rolling upgrade) give no prompt; unpinned artifacts are never loaded.
func TestPromptsFleetAgreement(t *testing.T) {
	t.Parallel()
	other := artifact.Sum([]byte("another tokenizer")).String()
	snap, pins, _ := artifactFleet(t, "", other)
	p := kv.NewPrompts(startLoader(t, pins...))
	if _, result := p.Prepare(snap, "m", "/v1/chat/completions", []byte(`{"messages":[]}`), []int{16}); result != kv.ResultTokenizerUnavailable {
		t.Errorf("disagreeing fleet: %q", result)
	}
	snap, _, _ = artifactFleet(t, "")
	unpinned := kv.NewPrompts(startLoader(t))
	if _, result := unpinned.Prepare(snap, "m", "/v1/chat/completions", []byte(`{"messages":[]}`), []int{16}); result != kv.ResultArtifactUnpinned {
		t.Errorf("unpinned: %q", result)
	}
	if _, result := p.Prepare(snap, "absent", "/v1/chat/completions", []byte(`{"messages":[]}`), []int{16}); result != kv.ResultTokenizerUnavailable {
		t.Errorf("a model no worker serves: %q", result)
	}
}

// TestPromptsDiagnose: Diagnose says why there is no prompt in words
// (disagreeing workers, unpinned checksums, an artifact still loading, a
// model no worker serves), and nothing once the artifacts are loaded.
func TestPromptsDiagnose(t *testing.T) {
	t.Parallel()
	other := artifact.Sum([]byte("another tokenizer")).String()
	snap, pins, _ := artifactFleet(t, "", other)
	p := kv.NewPrompts(startLoader(t, pins...))
	if result, why := p.Diagnose(snap, "m", "/v1/chat/completions"); result != kv.ResultTokenizerUnavailable || why == nil ||
		!strings.Contains(why.Error(), "declare different") {
		t.Errorf("disagreeing fleet: %q %v", result, why)
	}
	snap, _, _ = artifactFleet(t, "")
	unpinned := kv.NewPrompts(startLoader(t))
	if result, why := unpinned.Diagnose(snap, "m", "/v1/chat/completions"); result != kv.ResultArtifactUnpinned || !errors.Is(why, artifact.ErrUnpinned) ||
		!strings.Contains(why.Error(), pins[0]) {
		t.Errorf("unpinned: %q %v", result, why)
	}
	if result, why := p.Diagnose(snap, "absent", "/v1/completions"); result != kv.ResultTokenizerUnavailable || !strings.Contains(why.Error(), "no worker serves") {
		t.Errorf("absent model: %q %v", result, why)
	}
	// A count while the loads are pending says so (a moment's wait).
	counting := kv.NewPrompts(startLoader(t, pins...))
	if n, result := counting.Count(snap, "m", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)); n != 0 || result != kv.CountLoading {
		t.Errorf("count while loading: %d %q", n, result)
	}
	// The first look queues the loads: pending until they are done.
	fresh := kv.NewPrompts(startLoader(t, pins...))
	if result, why := fresh.Diagnose(snap, "m", "/v1/chat/completions"); result != kv.ResultTokenizerUnavailable || !errors.Is(why, artifact.ErrPending) {
		t.Errorf("loading: %q %v", result, why)
	}
	testutil.Eventually(t, 30*time.Second, "artifacts loaded", func() bool {
		result, why := fresh.Diagnose(snap, "m", "/v1/chat/completions")
		return result == "" && why == nil
	})
}

// TestPromptsRenderBudget: the encoding of a prompt observes the request's
// render deadline, so an over-long raw prompt gives its permit back by the
// deadline (render_unavailable) instead of after seconds of encoding, and
// under a whole budget the same prompt is prompt_too_large.
func TestPromptsRenderBudget(t *testing.T) {
	t.Parallel()
	snap, pins, _ := artifactFleet(t, "")
	p := kv.NewPrompts(startLoader(t, pins...))
	prepared(t, p, snap, "/v1/completions", `{"model":"m","prompt":"warm up"}`, 16)
	// 4 MiB of "a ": 2 Mi tokens, a third of a second of encoding to find
	// out (without -race).
	body := `{"model":"m","prompt":"` + strings.Repeat("a ", 2<<20) + `"}`
	kv.SetRenderBudget(p, 50*time.Millisecond)
	start := time.Now()
	_, result := p.Prepare(snap, "m", "/v1/completions", []byte(body), []int{16})
	took := time.Since(start)
	if result != kv.ResultRenderUnavailable {
		t.Fatalf("over the budget: %q, want %q", result, kv.ResultRenderUnavailable)
	}
	// Generous for -race on a loaded machine: decoding the body and the
	// encoder's single passes over the text (UTF-8 check, added-token
	// split, normalizer) run before it first looks at the deadline.
	if took > 3*time.Second {
		t.Errorf("the permit was held %v on a 50ms budget", took)
	}
	kv.SetRenderBudget(p, time.Minute)
	if _, result := p.Prepare(snap, "m", "/v1/completions", []byte(body), []int{16}); result != kv.ResultPromptTooLarge {
		t.Errorf("within the budget: %q, want %q", result, kv.ResultPromptTooLarge)
	}
}

// TestPromptsChatTooLargeToRender: a chat prompt whose rendered text would
// pass the template's 1 MiB output limit is prompt_too_large (the prompt's
// size, as an encoding over the token limit is), not render_unavailable.
func TestPromptsChatTooLargeToRender(t *testing.T) {
	t.Parallel()
	snap, pins, _ := artifactFleet(t, "")
	p := kv.NewPrompts(startLoader(t, pins...))
	prepared(t, p, snap, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"warm up"}]}`, 16)
	// The render's deadline is not what this is about (-race on a loaded
	// machine renders slowly).
	kv.SetRenderBudget(p, time.Minute)
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a ", 600<<10) + `"}]}`
	if _, result := p.Prepare(snap, "m", "/v1/chat/completions", []byte(body), []int{16}); result != kv.ResultPromptTooLarge {
		t.Errorf("a chat prompt of 1.2 MiB: %q, want %q", result, kv.ResultPromptTooLarge)
	}
	if n, result := p.Count(snap, "m", []byte(body)); n != 0 || result != kv.ResultPromptTooLarge {
		t.Errorf("count of a chat prompt of 1.2 MiB: %d %q", n, result)
	}
}

// TestBuiltTemplatesRunOnTheRequestClock: a template Build returns has no
// wall clock of its own; it runs until the request's deadline, whatever is
// left of the render budget, rather than failing at a fixed second.
func TestBuiltTemplatesRunOnTheRequestClock(t *testing.T) {
	t.Parallel()
	// length is cheap in instructions and slow on a long string: the loop
	// runs out of wall clock long before it runs out of fuel.
	src := `{% for i in range(100000) %}{% for j in range(100000) %}{% set n = messages[0].content | length %}{% endfor %}{% endfor %}`
	for _, ref := range []struct {
		format string
		data   []byte
	}{
		{artifact.FormatHFChatTemplate, []byte(src)},
		{artifact.FormatHFTokenizerConfigJSON, fmt.Appendf(nil, `{"chat_template":%q}`, src)},
	} {
		t.Run(ref.format, func(t *testing.T) {
			t.Parallel()
			built, err := kv.Build(artifact.Ref{Slot: artifact.SlotPromptFormatter, Format: ref.format}, ref.data)
			if err != nil {
				t.Fatal(err)
			}
			const budget = 1500 * time.Millisecond
			start := time.Now() // before the deadline is set: a lower bound
			ctx, cancel := context.WithTimeout(t.Context(), budget)
			defer cancel()
			in := chattemplate.Input{Messages: []any{map[string]any{"role": "user", "content": strings.Repeat("a", 256<<10)}}}
			_, err = kv.RenderBuilt(ctx, built, in)
			took := time.Since(start)
			if !errors.Is(err, chattemplate.ErrRenderUnavailable) {
				t.Fatalf("render: %v, want render_unavailable", err)
			}
			if took < budget-100*time.Millisecond {
				t.Errorf("the render stopped after %v, before the request's %v deadline", took, budget)
			}
		})
	}
}

// TestBuiltTemplatesWriteJSONAsTheFrontend: a template Build returns, in
// every artifact format, writes tojson as Dynamo's frontend does
// (minijinja's compact, HTML-safe JSON), since the workers cache the tokens
// of the frontend's rendering: with transformers' ", " and ": " a prompt
// listing tools would share no block past the tools with any cached one.
func TestBuiltTemplatesWriteJSONAsTheFrontend(t *testing.T) {
	t.Parallel()
	src := `{{ tools | tojson }}|{{ tools[0] | tojson(indent=1) }}`
	in := chattemplate.Input{Tools: []any{map[string]any{"type": "function", "function": map[string]any{"name": "f", "description": "a < b"}}}}
	const want = `[{"function":{"description":"a \u003c b","name":"f"},"type":"function"}]|{` + "\n" +
		` "function": {` + "\n" + `  "description": "a \u003c b",` + "\n" + `  "name": "f"` + "\n" + ` },` + "\n" + ` "type": "function"` + "\n}"
	for _, ref := range []struct {
		format string
		data   []byte
	}{
		{artifact.FormatHFChatTemplate, []byte(src)},
		{artifact.FormatHFTokenizerConfigJSON, fmt.Appendf(nil, `{"chat_template":%q}`, src)},
		{artifact.FormatHFChatTemplateJSON, fmt.Appendf(nil, `{"chat_template":%q}`, src)},
	} {
		built, err := kv.Build(artifact.Ref{Slot: artifact.SlotPromptFormatter, Format: ref.format}, ref.data)
		if err != nil {
			t.Fatal(err)
		}
		got, err := kv.RenderBuilt(t.Context(), built, in)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", ref.format, got, err, want)
		}
	}
}
