package chattemplate_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/testutil"
)

// FuzzRender compiles random templates and renders them over a small chat:
// no panic (the interpreter's own recover would report "internal error"),
// and no render outlives its budget.
func FuzzRender(f *testing.F) {
	for _, s := range []string{
		"{% for m in messages %}{{ m.role }}: {{ m.content | trim }}\n{% endfor %}",
		"{%- set ns = namespace(x=0) %}{% for i in range(10) %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}",
		"{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ n }}{% endif %}{% endmacro %}{{ f(5) }}",
		"{{ tools | tojson(indent=2) }}{{ messages[::-1] | map(attribute='role') | join(',') }}",
		"{% if messages[0].content is string %}{{ messages[0].content.split()[0] | upper }}{% endif %}",
		"{{ raise_exception('x') }}{# c #}{% raw %}{{{% endraw %}",
		"{{ '%s-%d' % ('a', 1) }}{{ strftime_now('%Y') }}{{ 'a' * 3 }}{{ [1, 2][5:0:-1] }}",
	} {
		f.Add([]byte(s))
	}
	// The real templates seed the corpus with what matters.
	files, err := filepath.Glob(filepath.Join(testutil.RepoRoot(f), "testdata", "chattemplate", "templates", "*.jinja"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	in := chattemplate.Input{
		Messages: []any{
			map[string]any{"role": "system", "content": "sys"},
			map[string]any{"role": "user", "content": "hello  world", "name": "u"},
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"function": map[string]any{"name": "f", "arguments": map[string]any{"a": 1}}}}},
		},
		Tools:               []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}},
		AddGenerationPrompt: true,
		Extra:               map[string]any{"enable_thinking": false},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		opts := []chattemplate.Option{chattemplate.WithFuel(200_000), chattemplate.WithMaxOutput(64 << 10), chattemplate.WithTimeout(200 * time.Millisecond),
			chattemplate.WithClock(func() time.Time { return fixedNow })}
		if len(data)%2 == 1 { // half the inputs with the router's tojson
			opts = append(opts, chattemplate.WithDynamoFrontend())
		}
		tmpl, err := chattemplate.Compile(string(data), opts...)
		if err != nil {
			return
		}
		start := time.Now()
		out, err := tmpl.Render(context.Background(), in)
		if err != nil && errors.Is(err, chattemplate.ErrRenderUnavailable) && strings.Contains(err.Error(), "internal error") {
			t.Fatal(err)
		}
		if err == nil && len(out) > 64<<10 {
			t.Fatalf("%d bytes rendered past the 64 KiB bound", len(out))
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("render took %v", d)
		}
	})
}

// refTokenizerConfig reads a tokenizer config as Python's json module and
// transformers read it (exact keys, a list of {name, template} picked by
// name), decoding to plain values: the chat template's source and the
// special tokens, or ok false where loading fails.
func refTokenizerConfig(data []byte, name string) (src string, tokens map[string]string, ok bool) {
	// Numbers as json.Number: a number past float64's range is still a
	// valid config (only its template and tokens are read).
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var cfg map[string]any
	if dec.Decode(&cfg) != nil || cfg == nil {
		return "", nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", nil, false
	}
	switch v := cfg["chat_template"].(type) {
	case string:
		if name != "" && name != "default" {
			return "", nil, false
		}
		src = v
	case []any:
		want, found := cmp.Or(name, "default"), false
		for _, e := range v {
			m, _ := e.(map[string]any)
			n, ok1 := m["name"].(string)
			tmpl, ok2 := m["template"].(string)
			if !ok1 || !ok2 {
				return "", nil, false
			}
			if n == want {
				src, found = tmpl, true
			}
		}
		if !found {
			return "", nil, false
		}
	default:
		return "", nil, false
	}
	tokens = map[string]string{}
	for _, k := range []string{"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"} {
		switch v := cfg[k].(type) {
		case string:
			tokens[k] = v
		case map[string]any:
			if c, ok := v["content"].(string); ok {
				tokens[k] = c
			}
		}
	}
	return src, tokens, true
}

// FuzzTokenizerConfig: a tokenizer config loads as the reference reads it:
// it fails where the reference finds no template of the name asked for
// (or the template does not compile), and otherwise has the reference's
// special tokens and renders a chat as the reference's template given
// those tokens does.
func FuzzTokenizerConfig(f *testing.F) {
	f.Add([]byte(`{"chat_template":"{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}","bos_token":"<s>","eos_token":{"content":"</s>","lstrip":false}}`), "")
	f.Add([]byte(`{"chat_template":[{"name":"default","template":"D{{ unk_token }}"},{"name":"tool_use","template":"T"}],"unk_token":{"Content":"x"}}`), "tool_use")
	f.Add([]byte(`{"chat_template":[{"NAME":"default","template":"D"}]}`), "")
	f.Add([]byte(`{"chat_template":[{"name":"default","template":null}],"pad_token":{"content":null}}`), "default")
	f.Add([]byte(`{"chat_template":"x","chat_template":[{"name":"default","template":"y"}],"sep_token":"a","sep_token":"b"}`), "")
	f.Add([]byte(`{"chat_template":null}`), "")
	f.Add([]byte(`{"chat_template":"x","model_max_length":1e400}`), "")
	f.Add([]byte(`{"chat_template":"{% if %}"}`), "")
	chat := chattemplate.Input{
		Messages:            []any{map[string]any{"role": "user", "content": "hi"}},
		AddGenerationPrompt: true,
	}
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		// Fuel bounds the work; no wall-clock timeout, which could end one
		// render of the two compared and not the other.
		opts := []chattemplate.Option{chattemplate.WithFuel(100_000), chattemplate.WithMaxOutput(16 << 10),
			chattemplate.WithClock(func() time.Time { return fixedNow })}
		tmpl, err := chattemplate.FromTokenizerConfig(data, name, opts...)
		src, tokens, ok := refTokenizerConfig(data, name)
		if !ok {
			if err == nil {
				t.Fatalf("loaded a config the reference refuses")
			}
			return
		}
		ref, rerr := chattemplate.Compile(src, opts...)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("load error %v, the reference template's %v", err, rerr)
		}
		if err != nil {
			return
		}
		if got := tmpl.SpecialTokens(); !maps.Equal(got, tokens) {
			t.Fatalf("special tokens %q, want %q", got, tokens)
		}
		out, err := tmpl.Render(context.Background(), chat)
		in := chat
		in.SpecialTokens = tokens
		want, werr := ref.Render(context.Background(), in)
		if out != want || (err == nil) != (werr == nil) {
			t.Fatalf("rendered %q (%v), the reference %q (%v)", out, err, want, werr)
		}
	})
}
