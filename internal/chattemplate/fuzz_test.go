package chattemplate_test

import (
	"context"
	"errors"
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
