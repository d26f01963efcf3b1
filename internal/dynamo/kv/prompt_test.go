package kv_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
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

// TestChatRequestAsTheFrontendRenders: a tool call's arguments string that
// holds JSON reaches the template as that JSON (so tojson does not encode
// it a second time), unless the template tests for a string and prints it
// itself; a request listing tools renders with the config's tool_use
// template when it has one (without its tools when tool_choice is "none"),
// every other with its default; an image_url part is the image placeholder.
func TestChatRequestAsTheFrontendRenders(t *testing.T) {
	t.Parallel()
	base := qwen3(t)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[` +
		`{"id":"a","type":"function","function":{"name":"f","arguments":"{\"city\": \"Paris\",\"n\":2}"}},` +
		`{"id":"b","type":"function","function":{"name":"g","arguments":"not json"}}]}]}`)
	compile := func(src string) *chattemplate.Template {
		t.Helper()
		tmpl, err := chattemplate.Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		return tmpl
	}
	for _, tt := range []struct{ template, want string }{
		{`{% for m in messages %}{% for c in m.tool_calls or [] %}{{ c.function.arguments | tojson }};{% endfor %}{% endfor %}`,
			`{"city": "Paris", "n": 2};"not json";`},
		{`{% for m in messages %}{% for c in m.tool_calls or [] %}{% if c.function.arguments is string %}S:{{ c.function.arguments }}` +
			`{% else %}O:{{ c.function.arguments | tojson }}{% endif %};{% endfor %}{% endfor %}`,
			`S:{"city": "Paris","n":2};S:not json;`},
	} {
		p := &kv.Preparer{Tokenizer: base.Tokenizer, Template: compile(tt.template)}
		got, _, err := p.ChatRequest(context.Background(), body)
		if err != nil {
			t.Fatal(err)
		}
		want, err := p.Text(tt.want, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: got ids %v, want the ids of %q", tt.template, got, tt.want)
		}
	}

	// An image_url part reaches the template as the image placeholder.
	img := &kv.Preparer{Tokenizer: base.Tokenizer, Template: compile(`{% for p in messages[0].content %}{{ p | tojson }}{% endfor %}`)}
	got, _, err := img.ChatRequest(context.Background(), []byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:x"}}]}]}`))
	if want, _ := img.Text(`{"type": "text", "text": "a"}{"type": "image"}`, false); err != nil || !slices.Equal(got, want) {
		t.Errorf("image parts: ids %v (%v)", got, err)
	}

	def, toolUse, err := kv.NamedTemplates([]byte(`{"chat_template":[{"name":"default","template":"D"},{"name":"tool_use","template":"T{{ tools | length }}"}]}`))
	if err != nil || def == nil || toolUse == nil {
		t.Fatalf("named templates: %v %v %v", def, toolUse, err)
	}
	if _, toolUse, err := kv.NamedTemplates([]byte(`{"chat_template":"one"}`)); err != nil || toolUse != nil {
		t.Errorf("a single template is both: tool_use %v, %v", toolUse, err)
	}
	if _, _, err := kv.NamedTemplates([]byte(`{"chat_template":[{"name":"default","template":"D"},{"name":"tool_use","template":"{% if %}"}]}`)); err == nil {
		t.Error("a tool_use template that does not compile was taken as absent")
	}
	if def, toolUse, err := kv.NamedTemplates([]byte(`{"chat_template":[{"name":"tool_use","template":"T"}]}`)); err != nil || def != nil || toolUse == nil {
		t.Errorf("only tool_use: %v %v %v", def, toolUse, err)
	}
	p := &kv.Preparer{Tokenizer: base.Tokenizer, Template: def, ToolUse: toolUse}
	for body, want := range map[string]string{
		`{"messages":[{"role":"user","content":"x"}]}`:                                                       "D",
		`{"messages":[{"role":"user","content":"x"}],"tools":[]}`:                                            "D",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`: "T1",
		// tool_choice "none": the tools are left out of the prompt.
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"}`: "D",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto"}`: "T1",
	} {
		got, _, err := p.ChatRequest(context.Background(), []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if w, _ := p.Text(want, false); !slices.Equal(got, w) {
			t.Errorf("%s: rendered ids %v, want the ids of %q", body, got, want)
		}
	}
	// Cards with exclude_tools_when_tool_choice_none: false keep them.
	p.KeepToolsWhenToolChoiceNone = true
	got, _, err = p.ChatRequest(context.Background(), []byte(`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"}`))
	if w, _ := p.Text("T1", false); err != nil || !slices.Equal(got, w) {
		t.Errorf("tools kept: rendered ids %v (%v), want the ids of T1", got, err)
	}
}

// TestChatRequestAsTheFrontendTypesIt: messages and tools reach the
// template as the frontend's typed structs write them back: their fields
// in the structs' order whatever the client's, null optional fields and
// unknown fields gone, a function message's missing content null, a tool
// call's missing type "function" and its object arguments a compact string
// (parsed again for a template that does not test for strings), and
// "type" then "properties" appended to object tool parameters lacking them.
func TestChatRequestAsTheFrontendTypesIt(t *testing.T) {
	t.Parallel()
	base := qwen3(t)
	body := []byte(`{"model":"m","messages":[` +
		`{"content":"x","role":"user","cache_control":{"type":"ephemeral"},"name":null},` +
		`{"tool_calls":[{"function":{"arguments":{"b":1,"a":[2, 3]},"name":"f"},"id":"c1","index":0}],"content":null,"role":"assistant","refusal":null},` +
		`{"role":"tool","name":"f","tool_call_id":"c1","content":"42"},` +
		`{"role":"function","name":"f"},` +
		`{"role":"system","content":[{"text":"s","type":"text"}],"name":"n"}],` +
		`"tools":[{"function":{"strict":null,"parameters":{},"name":"f","x":1},"type":"function"},` +
		`{"type":"function","function":{"parameters":{"properties":{"a":{}}},"description":"d","name":"g"}}]}`)
	for _, tt := range []struct{ template, want string }{
		{`{{ messages | tojson }}|{{ tools | tojson }}`,
			`[{"role": "user", "content": "x"}, ` +
				`{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [2, 3]}}}]}, ` +
				`{"role": "tool", "content": "42", "tool_call_id": "c1"}, ` +
				`{"role": "function", "content": null, "name": "f"}, ` +
				`{"role": "system", "content": "s", "name": "n"}]|` +
				`[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}, ` +
				`{"type": "function", "function": {"name": "g", "description": "d", "parameters": {"properties": {"a": {}}, "type": "object"}}}]`},
		{`{% for m in messages %}{% for c in m.tool_calls or [] %}{% if c.function.arguments is string %}{{ c.function.arguments }}{% endif %}{% endfor %}` +
			`{{ m.content is defined }}{% endfor %}`,
			`True{"b":1,"a":[2,3]}FalseTrueTrueTrue`},
	} {
		tmpl, err := chattemplate.Compile(tt.template)
		if err != nil {
			t.Fatal(err)
		}
		p := &kv.Preparer{Tokenizer: base.Tokenizer, Template: tmpl, ToolUse: tmpl}
		if got, err := p.ChatRequestText(body); err != nil || got != tt.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", tt.template, got, err, tt.want)
		}
	}

	// The frontend reads the members named exactly messages and tools.
	p := &kv.Preparer{Tokenizer: base.Tokenizer, Template: compileTemplate(t, `{{ messages | tojson }}{{ tools | tojson }}`)}
	if got, err := p.ChatRequestText([]byte(`{"Messages":[{"role":"user","content":"y"}],"messages":[{"content":"x","role":"user"}],` +
		`"Tools":[],"Messages":null}`)); err != nil || got != `[{"role": "user", "content": "x"}]null` {
		t.Errorf("keys in another case: %s (%v)", got, err)
	}

	// Object arguments are the text serde_json writes for them: its escapes,
	// numbers and repeated keys, not the client's.
	tmpl, err := chattemplate.Compile(`{% for c in messages[0].tool_calls %}{% if c.function.arguments is string %}{{ c.function.arguments }}{% endif %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	p = &kv.Preparer{Tokenizer: base.Tokenizer, Template: tmpl}
	got, err := p.ChatRequestText([]byte(`{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function",` +
		`"function":{"name":"f","arguments":{"a":"\u00e9\/<","b":1e2,"c":1.50,"d":[-0.0, 12345678901234567890],"a":7}}}]}]}`))
	if want := `{"a":7,"b":100.0,"c":1.5,"d":[-0.0,12345678901234567890]}`; err != nil || got != want {
		t.Errorf("object arguments: %s (%v), want %s", got, err, want)
	}
}

// TestSerdeReads: a tool call's arguments string is parsed only when
// serde_json would parse it, which refuses what encoding/json reads
// leniently.
func TestSerdeReads(t *testing.T) {
	t.Parallel()
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{`{"a": [1, 2.5e-3, "x"]}`, true},
		{`"\ud83d\ude00"`, true},
		{`"\\ud800"`, true}, // an escaped backslash, then text
		{`1e-400`, true},
		{`-12345678901234567890123`, true},
		{deep(127), true},
		{`"\ud800"`, false},
		{`"\ud800\u0041"`, false},
		{`"\udc00"`, false},
		{`"x\ud800`, false}, // not JSON at all
		{`1e400`, false},
		{`[-1e309]`, false},
		{deep(128), false},
	} {
		if got := kv.SerdeReads(tc.s); got != tc.want {
			t.Errorf("SerdeReads(%s) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

// TestChatRequestContentArrays: a template that renders a user's text only
// from a list of text parts is detected as the frontend detects it, and
// then every text content reaches it as a list of one text part, and lists
// of text parts are not joined.
func TestChatRequestContentArrays(t *testing.T) {
	t.Parallel()
	base := qwen3(t)
	compile := func(src string) *chattemplate.Template {
		t.Helper()
		tmpl, err := chattemplate.Compile(src, kv.TemplateOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		return tmpl
	}
	arrays := compile(`{% for m in messages %}<{{ m.role }}>{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}`)
	for src, want := range map[string]bool{
		`{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}`:                       true,
		`{% for m in messages %}{{ m.content }}{% endfor %}`:                                                        false,
		`{% for m in messages %}{% if m.content is string %}{{ m.content }}{% endif %}{% endfor %}`:                 false,
		`{% for m in messages %}{% if m.content is string %}{{ raise_exception("text") }}{% endif %}{% endfor %}ok`: false,
	} {
		if got := kv.RequiresContentArrays(compile(src)); got != want {
			t.Errorf("%s: requires content arrays %v, want %v", src, got, want)
		}
	}
	if kv.RequiresContentArrays(nil) {
		t.Error("no template requires content arrays")
	}
	p := &kv.Preparer{Tokenizer: base.Tokenizer, Template: arrays, ContentArrays: kv.RequiresContentArrays(arrays)}
	got, err := p.ChatRequestText([]byte(`{"messages":[{"role":"system","content":"s"},` +
		`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":""}]}`))
	if want := "<system>s<user>ab<assistant>"; err != nil || got != want {
		t.Errorf("content arrays: rendered %q (%v), want %q", got, err, want)
	}
}

// FuzzChatRequest: whatever body a client sends, preparing its prompt the
// way the frontend would (content parts, image placeholders, tool schemas,
// tool-call arguments, tool_choice) returns the ids of a render or an
// error, within the render budget, and never panics.
func FuzzChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"none"}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\"a\": [1, {\"b\": null}]}"}}],"function_call":{"arguments":"7"}}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"not json"}},3,null]}],"tools":[]}`,
		`{"messages":[{"content":"x","role":"tool","name":"n"},{"role":"function"},{"role":"assistant","content":null,"tool_calls":[{"function":{"arguments":{"a":[1]}},"id":"c"}]}],` +
			`"tools":[{"function":{"name":"f","parameters":{"properties":{}},"strict":null,"x":1},"type":"function"}]}`,
	} {
		f.Add([]byte(s), false)
	}
	tk := qwen3(f).Tokenizer
	tmpl, err := chattemplate.Compile(`{{ messages | tojson }}|{{ tools | tojson }}`)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, keep bool) {
		// Half the bodies render as for a template requiring content lists.
		p := &kv.Preparer{Tokenizer: tk, Template: tmpl, KeepToolsWhenToolChoiceNone: keep, ContentArrays: len(body)%2 == 1}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ids, _, err := p.ChatRequest(ctx, body)
		if err == nil && len(ids) == 0 {
			t.Fatalf("%q: no ids and no error", body)
		}
	})
}

// FuzzCompletionRequest: a completion request's prompt and cache salt are
// read as encoding/json reads the body (nvext.cache_salt, else
// cache_salt; a salt that is not a string refused; a prompt that is not
// one string ErrNotText), and the prompt is encoded as the tokenizer
// encodes it.
func FuzzCompletionRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"once upon a time"}`,
		`{"prompt":"x","cache_salt":"s","nvext":{"cache_salt":"inner"}}`,
		`{"prompt":"x","cache_salt":"s","nvext":{"cache_salt":""}}`,
		`{"prompt":["a","b"]}`, `{"prompt":[1,2,3]}`, `{"prompt":null,"cache_salt":7}`,
		`{"prompt":["a"]}`, `{"prompt":[[1,2]]}`, `{"prompt":[[]]}`, `{"prompt":[null]}`,
		`{"prompt":"\u00e9\ud83d\ude00","nvext":null,"cache_salt":null}`,
	} {
		f.Add([]byte(s))
	}
	p := &kv.Preparer{Tokenizer: qwen3(f).Tokenizer}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 16<<10 {
			return
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) != nil || top == nil {
			return // not an object (null reads as a nil map)
		}
		ids, salt, err := p.CompletionRequest(context.Background(), body)
		var outer, inner string
		saltErr := json.Unmarshal(orNull(top["cache_salt"]), &outer)
		if v := top["nvext"]; saltErr == nil && len(v) > 0 && v[0] == '{' {
			var nvext map[string]json.RawMessage
			if json.Unmarshal(v, &nvext) == nil {
				saltErr = json.Unmarshal(orNull(nvext["cache_salt"]), &inner)
			}
		}
		if saltErr != nil {
			if err == nil {
				t.Fatalf("%q: a salt encoding/json cannot read as a string was taken (%q)", body, salt)
			}
			return
		}
		// A batch of one text or one list of ids is that prompt.
		var batch []json.RawMessage
		if json.Unmarshal(orNull(top["prompt"]), &batch) == nil && len(batch) == 1 {
			var l []uint32
			var s string
			if e := bytes.TrimLeft(batch[0], " \t\r\n"); len(e) > 0 && (e[0] == '[' && json.Unmarshal(e, &l) == nil || e[0] == '"' && json.Unmarshal(e, &s) == nil) {
				top["prompt"] = batch[0]
			}
		}
		var list []uint32
		if v := bytes.TrimLeft(top["prompt"], " \t\r\n"); len(v) > 0 && v[0] == '[' && json.Unmarshal(v, &list) == nil {
			// One list of token ids: the ids as they are.
			if err != nil || !slices.Equal(ids, list) || salt != cmp.Or(inner, outer) {
				t.Fatalf("%q: token ids %v, salt %q (%v)", body, ids, salt, err)
			}
			return
		}
		var text string
		if json.Unmarshal(orNull(top["prompt"]), &text) != nil || top["prompt"] == nil || string(top["prompt"]) == "null" {
			if !errors.Is(err, kv.ErrNotText) {
				t.Fatalf("%q: a prompt that is neither one text nor one list of ids: %v", body, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if want := cmp.Or(inner, outer); salt != want {
			t.Fatalf("%q: salt %q, want %q", body, salt, want)
		}
		want, err := p.Tokenizer.Encode(text, false)
		if err != nil || !slices.Equal(ids, want) {
			t.Fatalf("%q: %d ids, the tokenizer gives %d (%v)", body, len(ids), len(want), err)
		}
	})
}

// orNull is v, or null when v is absent.
func orNull(v json.RawMessage) json.RawMessage {
	if v == nil {
		return json.RawMessage("null")
	}
	return v
}

// FuzzRealTemplates renders fuzzed chat requests with the chat templates
// of real models (testdata/chattemplate/templates, each with its special
// tokens), as the router renders them for KV-aware selection: whatever a
// client sends, a render ends (its fuel and output bounds stop a runaway
// template well within the test's 30 s), and a second render of the same
// request gives the same ids or the same error (nothing of one render
// stays for the next). A template may render some requests (one without
// messages) as nothing: no ids, no error.
func FuzzRealTemplates(f *testing.F) {
	seeds := []string{
		`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"again"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"x":{"type":"string","enum":["a","b"]},"n":{"type":"integer"}},"required":["x"]}}}],"tool_choice":"auto"}`,
		`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"x\":\"a\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"42"}]}`,
		`{"messages":[{"role":"user","content":"think"}],"chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"high"}`,
		`{"messages":[{"role":"assistant","content":"<think>x</think>y","reasoning_content":"r"},{"role":"user","content":""}]}`,
		`{"messages":[]}`,
	}
	root := testutil.RepoRoot(f)
	files, err := filepath.Glob(filepath.Join(root, "testdata/chattemplate/templates/*.jinja"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no templates (%v)", err)
	}
	slices.Sort(files)
	tk := qwen3(f).Tokenizer
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var preparers []*kv.Preparer
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		tmpl, err := chattemplate.Compile(string(src), chattemplate.WithClock(func() time.Time { return fixed }), chattemplate.WithDynamoFrontend())
		if err != nil {
			f.Fatalf("%s: %v", filepath.Base(file), err)
		}
		tokens := map[string]string{}
		if b, err := os.ReadFile(strings.TrimSuffix(file, ".jinja") + ".tokens.json"); err == nil {
			if err := json.Unmarshal(b, &tokens); err != nil {
				f.Fatalf("%s tokens: %v", filepath.Base(file), err)
			}
		}
		preparers = append(preparers, &kv.Preparer{Tokenizer: tk, Template: tmpl, SpecialTokens: tokens, ContentArrays: kv.RequiresContentArrays(tmpl)})
	}
	for i, s := range seeds {
		for j := range preparers {
			if (i+j)%3 == 0 {
				f.Add([]byte(s), uint8(j))
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		if len(body) > 16<<10 {
			return
		}
		p := preparers[int(which)%len(preparers)]
		if !json.Valid(body) {
			// Bytes that are no request are a conversation's texts,
			// NUL-separated, in turn from the user and the assistant.
			var msgs []map[string]string
			for i, text := range strings.Split(string(body), "\x00") {
				msgs = append(msgs, map[string]string{"role": []string{"user", "assistant"}[i%2], "content": text})
			}
			body, _ = json.Marshal(map[string]any{"messages": msgs})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ids, salt, err := p.ChatRequest(ctx, body)
		if ctx.Err() != nil {
			t.Fatalf("%s: %q rendered past 30 s", files[int(which)%len(files)], body)
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel2()
		again, salt2, err2 := p.ChatRequest(ctx2, body)
		if fmt.Sprint(err) != fmt.Sprint(err2) || !slices.Equal(ids, again) || salt != salt2 {
			t.Fatalf("%s: %q rendered twice: %v, %v; then %v, %v", files[int(which)%len(files)], body, len(ids), err, len(again), err2)
		}
	})
}

// TestChatRequestGenerationPromptAndReasoning: the generation prompt
// follows the last message alone, as the frontend decides it (from the
// messages only, its context winning over chat_template_kwargs), whatever
// add_generation_prompt or continue_final_message the request gives; thinking and
// reasoning_effort become the template variables the frontend folds them
// into. The kwargs come under Dynamo's own member name, chat_template_args,
// as under its alias chat_template_kwargs (gpt-oss's reasoning_effort,
// Qwen3's enable_thinking change the prompt's tokens); both at once is a
// request the frontend's decoder refuses (one member given twice), which
// the router does not render either.
func TestChatRequestGenerationPromptAndReasoning(t *testing.T) {
	t.Parallel()
	base := qwen3(t)
	tmpl, err := chattemplate.Compile(`{{ add_generation_prompt }}|{{ thinking }}|{{ thinking_mode }}|{{ enable_thinking }}|{{ reasoning_effort }}`, chattemplate.WithDynamoFrontend())
	if err != nil {
		t.Fatal(err)
	}
	p := &kv.Preparer{Tokenizer: base.Tokenizer, Template: tmpl}
	user := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ body, want string }{
		{`{` + user + `}`, "true||||"},
		{`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hel"}]}`, "false||||"},
		{`{"messages":[{"role":"user","content":"hi"},{"role":"tool","content":"42"}]}`, "true||||"},
		{`{` + user + `,"add_generation_prompt":false,"continue_final_message":true}`, "true||||"},
		{`{` + user + `,"chat_template_kwargs":{"add_generation_prompt":false}}`, "true||||"},
		{`{` + user + `,"thinking":true}`, "true|true|enabled||"},
		{`{` + user + `,"thinking":{"type":"disabled"}}`, "true|false|disabled||"},
		{`{` + user + `,"thinking":{"type":"adaptive"}}`, "true||adaptive||"},
		{`{` + user + `,"thinking":null,"reasoning_effort":"none"}`, "true|||false|none"},
		{`{` + user + `,"reasoning_effort":"high","chat_template_kwargs":{"enable_thinking":false}}`, "true|||false|high"},
		{`{` + user + `,"reasoning_effort":"low","chat_template_kwargs":{"thinking":false}}`, "true|false||true|low"},
		{`{` + user + `,"chat_template_kwargs":{"enable_thinking":false,"reasoning_effort":"high"}}`, "true|||false|high"},
		{`{` + user + `,"chat_template_args":{"enable_thinking":false,"reasoning_effort":"high"}}`, "true|||false|high"},
	} {
		got, _, err := p.ChatRequest(context.Background(), []byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		want, err := p.Text(tc.want, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: rendered ids %v, want the ids of %q", tc.body, got, tc.want)
		}
	}
	both := `{` + user + `,"chat_template_args":{"enable_thinking":false},"chat_template_kwargs":{"enable_thinking":true}}`
	if _, _, err := p.ChatRequest(context.Background(), []byte(both)); err == nil {
		t.Errorf("%s: rendered", both)
	}
}

// FuzzSerdeReads: whatever a tool call's arguments string holds, deciding
// whether serde_json reads it never panics, and never says so of text that
// is not JSON.
func FuzzSerdeReads(f *testing.F) {
	for _, s := range []string{`{"a":[1,"\ud83d\ude00"]}`, `"\ud800"`, `1e400`, `[[[]]]`, `"\\u"`, `-0.0e-0`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if kv.SerdeReads(s) && !json.Valid([]byte(s)) {
			t.Fatalf("%q: not JSON, yet read", s)
		}
	})
}

// compileTemplate compiles a template for a test.
func compileTemplate(t *testing.T, src string) *chattemplate.Template {
	t.Helper()
	tmpl, err := chattemplate.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// TestRequestCacheSalt: the cache salt is nvext.cache_salt, else
// cache_salt, read from members of exactly those names as the frontend
// reads them; a salt that is not a string fails the request.
func TestRequestCacheSalt(t *testing.T) {
	t.Parallel()
	base := qwen3(t)
	p := &kv.Preparer{Tokenizer: base.Tokenizer, Template: compileTemplate(t, `{{ messages[0].content }}`)}
	msgs := `"messages":[{"role":"user","content":"x"}],"prompt":"x"`
	for _, tc := range []struct{ body, want string }{
		{`{` + msgs + `}`, ""},
		{`{` + msgs + `,"cache_salt":"a"}`, "a"},
		{`{` + msgs + `,"cache_salt":"a","nvext":{"cache_salt":"b"}}`, "b"},
		{`{` + msgs + `,"cache_salt":"a","nvext":{"cache_salt":null}}`, "a"},
		{`{` + msgs + `,"Cache_Salt":"a","nvext":{"Cache_salt":"b"}}`, ""},
		{`{` + msgs + `,"cache_salt":"a","cache_salt":"c"}`, "c"},
	} {
		_, chat, err := p.ChatRequest(context.Background(), []byte(tc.body))
		if err != nil || chat != tc.want {
			t.Errorf("chat %s: salt %q (%v), want %q", tc.body, chat, err, tc.want)
		}
		_, completion, err := p.CompletionRequest(context.Background(), []byte(tc.body))
		if err != nil || completion != tc.want {
			t.Errorf("completion %s: salt %q (%v), want %q", tc.body, completion, err, tc.want)
		}
	}
	for _, body := range []string{`{` + msgs + `,"cache_salt":5}`, `{` + msgs + `,"nvext":{"cache_salt":[]}}`, `{` + msgs, `[1]`} {
		if _, _, err := p.ChatRequest(context.Background(), []byte(body)); err == nil {
			t.Errorf("chat %s: no error", body)
		}
		if _, _, err := p.CompletionRequest(context.Background(), []byte(body)); err == nil {
			t.Errorf("completion %s: no error", body)
		}
	}
}

// TestCompletionBatchOfOne: a completion prompt that is a batch of one (a
// list of one list of token ids, or of one text) is read as that one
// prompt, as Dynamo's frontend serves it; a batch of two is no prompt.
func TestCompletionBatchOfOne(t *testing.T) {
	t.Parallel()
	p := qwen3(t)
	ids, _, err := p.CompletionRequest(context.Background(), []byte(`{"model":"m","prompt":[[9707,11,1879]]}`))
	if err != nil || !slices.Equal(ids, []uint32{9707, 11, 1879}) {
		t.Errorf("prompt [[9707,11,1879]]: ids %v, err %v", ids, err)
	}
	want, err := p.Text("Hello, world", false)
	if err != nil {
		t.Fatal(err)
	}
	ids, _, err = p.CompletionRequest(context.Background(), []byte(`{"model":"m","prompt":[ "Hello, world" ]}`))
	if err != nil || !slices.Equal(ids, want) {
		t.Errorf(`prompt ["Hello, world"]: ids %v, err %v, want %v`, ids, err, want)
	}
	if _, _, err := p.CompletionRequest(context.Background(), []byte(`{"model":"m","prompt":["a","b"]}`)); !errors.Is(err, kv.ErrNotText) {
		t.Errorf("a batch of two: %v, want ErrNotText", err)
	}
}
