package chattemplate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/chattemplate"
)

// Every overrun ends in ErrRenderUnavailable, quickly; those of the output
// size limit (the text or a string built on the way) also in
// ErrOutputTooLarge, and only those.
func TestBudgets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		src  string
		opts []chattemplate.Option
		ctx  func(t *testing.T) context.Context
		// tooLarge: the overrun is the output size limit's.
		tooLarge bool
	}{
		{name: "fuel nested loops", src: "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"},
		{name: "fuel small budget", src: "{% for i in range(1000) %}{{ i }}{% endfor %}", opts: []chattemplate.Option{chattemplate.WithFuel(500)}},
		{name: "output size", src: "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", tooLarge: true},
		{name: "output size small limit", src: "{% for m in messages %}{{ m.content }}{% endfor %}", opts: []chattemplate.Option{chattemplate.WithMaxOutput(3)}, tooLarge: true},
		{name: "string doubling", src: "{% set ns = namespace(v='x') %}{% for i in range(64) %}{% set ns.v = ns.v + ns.v %}{% endfor %}{{ ns.v | length }}", tooLarge: true},
		{name: "string repeat", src: "{{ 'x' * 1000000000 }}", tooLarge: true},
		{name: "join doubling", src: "{% set ns = namespace(v=['xxxxxxxx']) %}{% for i in range(64) %}{% set ns.v = ns.v + ns.v %}{% endfor %}{{ ns.v | join }}"},
		{name: "list repeat", src: "{{ ([1] * 100000000) | length }}"},
		{name: "replace growth", src: "{{ ('a' * 1000) | replace('a', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa') | replace('a', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa') }}", tooLarge: true},
		{name: "macro recursion", src: "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"},
		{name: "mutual recursion", src: "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}"},
		{name: "loop recursion", src: "{% for i in [1] recursive %}{{ loop([i]) }}{% endfor %}"},
		{name: "loop recursion fan-out", src: "{% for i in [1, 2, 3, 4] recursive %}{{ loop([i, i, i, i]) }}{% endfor %}"},
		{name: "wall clock", src: "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
			opts: []chattemplate.Option{chattemplate.WithFuel(1 << 60), chattemplate.WithTimeout(20 * time.Millisecond)}},
		{name: "context deadline", src: "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
			opts: []chattemplate.Option{chattemplate.WithFuel(1 << 60), chattemplate.WithTimeout(0)},
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
				t.Cleanup(cancel)
				return ctx
			}},
		{name: "context cancelled", src: "{{ 1 }}",
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				return ctx
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if tc.tooLarge {
				// No wall-clock budget: under -race on a busy machine it
				// may end the render before the output limit the case is
				// about does.
				opts = append([]chattemplate.Option{chattemplate.WithTimeout(0)}, opts...)
			}
			tmpl, err := chattemplate.Compile(tc.src, opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			if tc.ctx != nil {
				ctx = tc.ctx(t)
			}
			start := time.Now()
			out, err := tmpl.Render(ctx, chattemplate.Input{Messages: []any{map[string]any{"role": "user", "content": "hello"}}})
			elapsed := time.Since(start)
			if !errors.Is(err, chattemplate.ErrRenderUnavailable) {
				t.Fatalf("got %q, %v; want ErrRenderUnavailable", truncate(out), err)
			}
			if strings.Contains(err.Error(), "internal error") {
				t.Fatal(err)
			}
			if got := errors.Is(err, chattemplate.ErrOutputTooLarge); got != tc.tooLarge {
				t.Errorf("ErrOutputTooLarge %v, want %v: %v", got, tc.tooLarge, err)
			}
			// Generous for -race on a loaded machine; an unbounded render
			// runs for minutes.
			if elapsed > 3*time.Second {
				t.Errorf("took %v", elapsed)
			}
		})
	}
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// The limits do not get in the way of real work.
func TestBudgetsAllowNormalRenders(t *testing.T) {
	t.Parallel()
	// unique keeps a set of the keys seen, so a long list costs one step
	// an item, as in Python, not one a pair. The steps and the output are
	// what is checked: the wall-clock budget is the machine's (this render
	// took over a second under -race beside the other packages' tests on
	// two cores), so it is set out of the way.
	tmpl, err := chattemplate.Compile("{% for i in range(100000) %}{% if i % 50000 == 0 %}{{ i }},{% endif %}{% endfor %}{{ ('x' * 1000) | length }},{{ ((range(100000) | list) + (range(100000) | list)) | unique | list | length }}",
		chattemplate.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.Render(t.Context(), chattemplate.Input{})
	if err != nil || out != "0,50000,1000,100000" {
		t.Fatalf("%q, %v", out, err)
	}
}

func TestCompileLimits(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		"{{ " + strings.Repeat("(", 10000) + "1" + strings.Repeat(")", 10000) + " }}",
		"{{ " + strings.Repeat("not ", 10000) + "1 }}",
		"{{ " + strings.Repeat("-", 10000) + "1 }}",
		"{{ " + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + " }}",
		strings.Repeat("{% if 1 %}", 10000) + strings.Repeat("{% endif %}", 10000),
		strings.Repeat("x", 2<<20),
		"{{ 1" + strings.Repeat(" - 1", 100000) + " }}",
		"{{ x" + strings.Repeat(".y", 100000) + " }}",
		"{{ x" + strings.Repeat("|trim", 100000) + " }}",
		"{{ 1" + strings.Repeat(" < 1", 100000) + " }}",
		"{{ 1" + strings.Repeat(" and 1", 100000) + " }}",
	} {
		if _, err := chattemplate.Compile(src); err == nil {
			t.Errorf("compiled %.40q...", src)
		}
	}
}

// Values nested deeper than the interpreter walks fail cleanly.
func TestDeepValues(t *testing.T) {
	t.Parallel()
	tmpl, err := chattemplate.Compile("{% set ns = namespace(a=[], b=[]) %}{% for i in range(500) %}{% set ns.a = [ns.a] %}{% set ns.b = [ns.b] %}{% endfor %}{{ ns.a < ns.b }}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(t.Context(), chattemplate.Input{}); err == nil {
		t.Fatalf("got %v", err)
	}
}

func TestDecodeJSONDepth(t *testing.T) {
	t.Parallel()
	if _, err := chattemplate.DecodeJSON([]byte(strings.Repeat("[", 10000) + strings.Repeat("]", 10000))); err == nil {
		t.Fatal("decoded 10000 levels")
	}
	if _, err := chattemplate.DecodeJSON([]byte(`{"a": 1} x`)); err == nil {
		t.Fatal("accepted trailing data")
	}
}

// TestExpandTabsBounded: str.expandtabs cannot grow a string past the
// output limit, whatever the tab size.
func TestExpandTabsBounded(t *testing.T) {
	t.Parallel()
	for _, tpl := range []string{`{{ 'a\tb'.expandtabs(1000000000000) }}`, `{{ ('\t' * 1000).expandtabs(100000) }}`} {
		if _, err := render(tpl, chattemplate.Input{}); !errors.Is(err, chattemplate.ErrRenderUnavailable) {
			t.Errorf("%s: %v, want the output limit", tpl, err)
		}
	}
}
