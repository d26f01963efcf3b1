package chattemplate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/continuum-router/continuum/internal/chattemplate"
)

func TestFromTokenizerConfigForms(t *testing.T) {
	t.Parallel()
	named := `{"chat_template": [{"name": "default", "template": "D{{ bos_token }}"}, {"name": "tool_use", "template": "T{{ eos_token }}"}],
		"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>", "unk_token": null}`
	for _, tc := range []struct {
		name, config, tmplName, want, err string
	}{
		{name: "string", config: `{"chat_template": "S{{ eos_token }}", "eos_token": "<e>"}`, want: "S<e>"},
		{name: "named default", config: named, want: "D<s>"},
		{name: "named explicit default", config: named, tmplName: "default", want: "D<s>"},
		{name: "named other", config: named, tmplName: "tool_use", want: "T</s>"},
		{name: "named missing", config: named, tmplName: "rag", err: `no chat template named "rag"`},
		{name: "single but named asked", config: `{"chat_template": "x"}`, tmplName: "tool_use", err: "single one"},
		{name: "no template", config: `{"eos_token": "x"}`, err: "no chat_template"},
		{name: "null template", config: `{"chat_template": null}`, err: "no chat_template"},
		{name: "bad template type", config: `{"chat_template": 5}`, err: "neither a string nor a list"},
		{name: "bad json", config: `{`, err: "tokenizer config"},
		{name: "bad template", config: `{"chat_template": "{% if %}"}`, err: "chattemplate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := chattemplate.FromTokenizerConfig([]byte(tc.config), tc.tmplName)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			out, err := tmpl.Render(t.Context(), chattemplate.Input{})
			if err != nil || out != tc.want {
				t.Fatalf("%q, %v; want %q", out, err, tc.want)
			}
		})
	}
}

func TestSpecialTokensOverride(t *testing.T) {
	t.Parallel()
	tmpl, err := chattemplate.FromTokenizerConfig([]byte(`{"chat_template": "{{ bos_token }}|{{ eos_token }}", "bos_token": "<s>", "eos_token": "</s>"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.Render(t.Context(), chattemplate.Input{SpecialTokens: map[string]string{"eos_token": "<|end|>"}})
	if err != nil || out != "<s>|<|end|>" {
		t.Fatalf("%q, %v", out, err)
	}
}

func TestDecodeRequest(t *testing.T) {
	t.Parallel()
	in, err := chattemplate.DecodeRequest([]byte(`{"model": "m", "messages": [{"role": "user", "content": "hi", "b": 1, "a": 2}],
		"tools": null, "add_generation_prompt": true, "chat_template_kwargs": {"enable_thinking": false}, "enable_thinking": true}`))
	if err != nil {
		t.Fatal(err)
	}
	if !in.AddGenerationPrompt || len(in.Messages) != 1 || in.Tools != nil {
		t.Fatalf("%+v", in)
	}
	if in.Extra["enable_thinking"] != false || len(in.Extra) != 1 {
		t.Fatalf("extra %v: want only chat_template_kwargs", in.Extra)
	}
	kw, err := chattemplate.DecodeRequestKwargs([]byte(`{"messages": [], "model": "m", "enable_thinking": true, "chat_template_kwargs": {"enable_thinking": false}}`))
	if err != nil {
		t.Fatal(err)
	}
	if kw.Extra["enable_thinking"] != false || kw.Extra["model"] != "m" {
		t.Fatalf("extra %v: want top-level kwargs, chat_template_kwargs winning", kw.Extra)
	}
	tmpl, err := chattemplate.Compile("{{ messages[0] | tojson }} {{ messages[0].keys() | list }} {{ enable_thinking }} {{ tools }}")
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.Render(t.Context(), in)
	want := `{"role": "user", "content": "hi", "b": 1, "a": 2} ['role', 'content', 'b', 'a'] False None`
	if err != nil || out != want {
		t.Fatalf("%q, %v; want %q", out, err, want)
	}
	for _, bad := range []string{`[]`, `{"messages": {}}`, `{"tools": 1}`, `{"add_generation_prompt": "yes"}`, `{"chat_template_kwargs": []}`, `{"messages": [}`} {
		if _, err := chattemplate.DecodeRequest([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// TestDynamoFrontendToJSON: tojson as minijinja writes it, which is how Dynamo's
// frontend renders the prompts its workers cache: compact, pretty only for
// a keyword integer indent, HTML-safe, serde_json's floats, null for NaN
// and undefined, other arguments not read; the same template without the
// option keeps transformers' json.dumps.
func TestDynamoFrontendToJSON(t *testing.T) {
	t.Parallel()
	in, err := chattemplate.DecodeRequestKwargs([]byte(`{"messages": [], "x": {"b": [1, 2.0, 1e-6, "<a href='x'>&amp;</a> é\n"], "a": {}, "c": [], "d": null, "e": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	checkModes(t, in, []modeCase{
		{"{{ x | tojson }}",
			`{"b":[1,2.0,1e-6,"\u003ca href=\u0027x\u0027\u003e\u0026amp;\u003c/a\u003e é\n"],"a":{},"c":[],"d":null,"e":true}`,
			`{"b": [1, 2.0, 1e-06, "<a href='x'>&amp;</a> é\n"], "a": {}, "c": [], "d": null, "e": true}`},
		{"{{ x.b[:2] | tojson(indent=2) }}", "[\n  1,\n  2.0\n]", "[\n  1,\n  2.0\n]"},
		{"{{ x.a | tojson(indent=2) }}{{ x.c | tojson(indent=2) }}", "{}[]", "{}[]"},
		{"{{ {'k': x.e} | tojson(indent=1) }}", "{\n \"k\": true\n}", "{\n \"k\": true\n}"},
		{"{{ x.b[:2] | tojson(indent='  ') }}", "[1,2.0]", "[\n  1,\n  2.0\n]"},
		{"{{ x.b[:2] | tojson(separators=(';', '=')) }}", "[1,2.0]", "[1;2.0]"},
		{"{{ {'z': 1, 'a': 2} | tojson(sort_keys=true) }}", `{"z":1,"a":2}`, `{"a": 2, "z": 1}`},
		{"{{ nothing | tojson }}", "null", ""},
		{"{{ x.a | tojson(2) }}", "", "{}"},
		{"{{ [1] | tojson(indent=true) }}", "[\n 1\n]", "[\n 1\n]"},
		{"{{ {1.5: 1, 2: 2} | tojson }}", `{"1.5":1,"2":2}`, `{"1.5": 1, "2": 2}`},
	})
}

// TestDynamoFrontendPrinting: values print as minijinja prints them, and
// length of none is 0 (Dynamo's frontend's own filter), against Python's
// str and jinja2's TypeError without the option.
func TestDynamoFrontendPrinting(t *testing.T) {
	t.Parallel()
	in, err := chattemplate.DecodeRequestKwargs([]byte(`{"messages": [], "tools": null, "x": {"s": "a\"b\n", "n": null, "t": true, "f": 1.0, "g": 1e20, "h": 2.5e-7, "l": [1, "x", null, false]}}`))
	if err != nil {
		t.Fatal(err)
	}
	in.SpecialTokens = map[string]string{"eos_token": "</s>", "pad_token": "<pad>"}
	// Extra variables of a context's names: the frontend's context wins
	// over all of them, transformers' special tokens do not.
	in.Extra["eos_token"], in.Extra["add_generation_prompt"] = "<extra>", true
	checkModes(t, in, []modeCase{
		{"{{ x.n }}|{{ x.t }}|{{ false }}|{{ x.f }}|{{ x.g }}|{{ x.h }}", "none|true|false|1.0|100000000000000000000.0|0.00000025", "None|True|False|1.0|1e+20|2.5e-07"},
		{"{{ x.l }}", `[1, "x", none, false]`, `[1, 'x', None, False]`},
		{"{{ x }}", `{"s": "a\"b\n", "n": none, "t": true, "f": 1.0, "g": 1e20, "h": 2.5e-7, "l": [1, "x", none, false]}`,
			`{'s': 'a"b\n', 'n': None, 't': True, 'f': 1.0, 'g': 1e+20, 'h': 2.5e-07, 'l': [1, 'x', None, False]}`},
		{"{{ x.t | string }}{{ 'a' ~ x.n ~ x.t }}{{ x.l | join('/') }}", "trueanonetrue1/x/none/false", "TrueaNoneTrue1/x/None/False"},
		{"{{ x.s }}", "a\"b\n", "a\"b\n"},
		{"{{ tools | length }}{{ nothing | length }}{{ 5 | length }}", "000", ""},
		{"{{ tools | count }}", "", ""},
		{"{{ nothing | count }}", "", "0"},
		{"{{ x.n | trim }}|{{ x.t | upper }}|{{ [1, 2] | join(x.n) }}|{{ x.n | replace('n', 'N') }}", "none|TRUE|1none2|NoNe", "None|TRUE|1None2|NoNe"},
		{"{{ ['e\u0301', '\u00a0', '\u200b', '\ufe0f', 'ok', '\x01'] }}", `["e\u{301}", "\u{a0}", "\u{200b}", "\u{fe0f}", "ok", "\u{1}"]`, "['e\u0301', '\\xa0', '\\u200b', '\ufe0f', 'ok', '\\x01']"},
		{"{{ [0.0001, 0.00001, 1e15, 1e16, -2.5e-5] }}", "[0.0001, 1e-5, 1000000000000000.0, 1e16, -2.5e-5]", "[0.0001, 1e-05, 1000000000000000.0, 1e+16, -2.5e-05]"},
		{"{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}", "none|</s>|false", "|<extra>|True"},
		{"{{ documents is defined }}", "false", "True"},
		{"{{ 'ab' is sequence }}{{ x is sequence }}{{ x.l is sequence }}{{ x.t is number }}{{ 1 is number }}", "falsefalsetruefalsetrue", "TrueTrueTrueTrueTrue"},
		{"{{ eos_token }}|{{ add_generation_prompt }}", "</s>|false", "<extra>|False"},
	})
}

// TestDynamoFrontendMinijinjaSemantics: where minijinja (and Dynamo's
// frontend around it) parts from jinja2: none iterates as an empty
// sequence; an attribute of a map is its item and never a method, and a
// method call on a map calls its item of that name first; strings take
// minijinja's escapes; vLLM's generation tags are deleted from the source
// as they are written; \r stays in the text, and trim_blocks drops a \r\n
// after a tag. The outputs were checked against minijinja (but
// for the escapes, which changed in its 2.18, read from its source).
func TestDynamoFrontendMinijinjaSemantics(t *testing.T) {
	t.Parallel()
	in, err := chattemplate.DecodeRequestKwargs([]byte(`{"messages": [], "tools": null,
		"x": {"n": null, "d": {"a": 1}, "p": {"items": {"type": "string"}}, "s": "ab"}}`))
	if err != nil {
		t.Fatal(err)
	}
	checkModes(t, in, []modeCase{
		{"{% for t in tools %}x{% else %}e{% endfor %}", "e", ""},
		{"{{ tools | list }}|{{ tools | join(',') }}|{{ tools | sort }}|{{ tools | sum }}|{{ tools | map('upper') | list }}", "[]||[]|0|[]", ""},
		{"{{ tools | reverse }}", "none", ""},
		{"{{ tools | first }}", "", ""},
		{"{{ x.n is iterable }}", "true", "False"},
		{"{{ tools is iterable }}|{{ tools[1:] }}", "true|[]", ""},
		{"{{ x.d.items is defined }}|{{ x.d['items'] is defined }}|{{ x.s.upper is defined }}", "false|false|false", "True|True|True"},
		{"{{ x.p.items.type ~ '!' }}", "string!", "!"},
		{"{% for k, v in x.p.items() %}{{ k }}{% endfor %}", "", "items"},
		{"{% for k, v in x.d.items() %}{{ k }}{% endfor %}|{{ x.d.get('a') }}|{{ x.s.upper() }}", "a|1|AB", "a|1|AB"},
		{"{{ 'a\\\nb' }}|{{ 'x\\/y\\q' }}", "a\\\nb|x/y\\q", "ab|x\\/y\\q"},
		{"{{ '\\x41\\101\\u00e9' }}", "AA\u00e9", "AA\u00e9"},
		{"<a>\n  {% generation %}\nX\n  {% endgeneration %}\n</a>", "<a>\n  \nX\n  \n</a>", "<a>\nX\n</a>"},
		{"a\r\nb{% if true %}\r\nc{% endif %}\r\nd\r\n", "a\r\nbcd", "a\nbcd"},
		{"x\r\n  {% if true %}\r\n  y\r\n  {% endif %}\r\nz", "x\r\n  y\r\nz", "x\n  y\nz"},
		{"{% raw %}\r\nR{% endraw %}\r\nS{# c #}\r\nq", "RSq", "\nRSq"},
		{"{{ [1, 2] == (1, 2) }} {{ [1, (2, 3)] == [1, [2, 3]] }} {{ [1, 2] in [(1, 2)] }}", "true true true", "False False False"},
		{"{{ 'a\\rb\\nc\\r\\nd\\n'.splitlines() }} {{ 'a\\r'.splitlines() }}", `["a\rb", "c", "d"] ["a\r"]`, "['a', 'b', 'c', 'd'] ['a']"},
		{"{% set ns = namespace(a=1, b=[1]) %}{{ ns|tojson }}", `{"a":1,"b":[1]}`, ""},
		{"{{ x.n < 1 }} {{ 'a' < 1 }} {{ 1 < 'a' }} {{ [] < {} }} {{ nothing < x.n }} {{ [1, 2] < [1, 3] }} {{ true < 1.5 }}", "true false true true true true true", ""},
		{"{{ nothing in 'abc' }} {{ 1 in 'a1' }} {{ x.n in [x.n] }}", "true true true", ""},
		{"{{ [3, 'a', x.n, 1]|sort }} {{ [3, 'a', x.n, 1]|min }} {{ [[2], 'a', 1]|sort(reverse=true) }}", `[none, 1, 3, "a"] none [[2], "a", 1]`, ""},
		{"{{ 7 // -2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ -7.5 % 2 }} {{ 7.5 // -2 }} {{ 7 / 2 }}", "-3 1 2 -1.5 -3.0 3.5", "-4 -2 2 0.5 -4.0 3.5"},
		{"{{ 1 / 0 }} {{ 7.0 // 0 }}", "inf inf", ""},
		{"{{ 7 // 0 }}", "", ""},
		{"{{ 2 ** -1 }}", "", "0.5"},
		{"{{ '%s' % 1 }}", "", "1"},
		{"{{ 2.5|round }} {{ 2.55|round(1) }} {{ -0.5|round }} {{ 3|round }}", "3.0 2.6 -1.0 3", "2.0 2.5 -0.0 3"},
		{"{{ 2.5|round(0, 'floor') }}", "", "2.0"},
		{"{{ '1.9'|int }} {{ '+5'|int }} {{ none|int }} {{ nothing|int }} {{ '.5'|float }} {{ 'inf'|float }}", "1 5 0 0 0.5 inf", ""},
		{"{{ 'x'|int }}", "", "0"},
		{"{{ ' 2 '|float }}", "", "2.0"},
		{"{{ ''.isdigit() }} {{ 'Ⅻ'.isdigit() }} {{ 'a1'.islower() }} {{ ''.isupper() }}", "true true false true", "False False True False"},
		{"{{ 'a/b<c>\"d\\'e&'|escape }}", "a&#x2f;b&lt;c&gt;&quot;d&#x27;e&amp;", "a/b&lt;c&gt;&#34;d&#39;e&amp;"},
		{"{{ 'hello2world it\\'s'|title }} {{ 'hello2world'.title() }} {{ 'a-b_c d.e'|title }}", "Hello2world It'S Hello2world A-B_C D.E", "Hello2world It's Hello2World A-B_c D.e"},
	})
}

// modeCase is a template and what it renders as Dynamo's frontend does
// and as transformers does ("" for an error).
type modeCase struct{ src, dynamo, transformers string }

// checkModes renders each case in both modes.
func checkModes(t *testing.T, in chattemplate.Input, cases []modeCase) {
	t.Helper()
	for _, tc := range cases {
		for _, dynamo := range []bool{true, false} {
			var opts []chattemplate.Option
			want := tc.transformers
			if dynamo {
				opts, want = append(opts, chattemplate.WithDynamoFrontend()), tc.dynamo
			}
			tmpl, err := chattemplate.Compile(tc.src, opts...)
			if err != nil {
				t.Fatal(err)
			}
			out, err := tmpl.Render(t.Context(), in)
			if want == "" {
				if err == nil {
					t.Errorf("%s (dynamo %v): %q, want an error", tc.src, dynamo, out)
				}
				continue
			}
			if err != nil || out != want {
				t.Errorf("%s (dynamo %v): %q, %v; want %q", tc.src, dynamo, out, err, want)
			}
		}
	}
}

func TestGoValuesAsInput(t *testing.T) {
	t.Parallel()
	tmpl, err := chattemplate.Compile("{% for m in messages %}{{ m | tojson }}{% endfor %}|{{ n + 1 }}|{{ f }}|{{ l | join(',') }}")
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.Render(t.Context(), chattemplate.Input{
		Messages: []any{map[string]any{"role": "user", "content": "x", "extra": []any{1, 2.5, nil, true}}},
		Extra:    map[string]any{"n": 41, "f": float32(0.5), "l": []string{"a", "b"}},
	})
	want := `{"content": "x", "extra": [1, 2.5, null, true], "role": "user"}|42|0.5|a,b`
	if err != nil || out != want {
		t.Fatalf("%q, %v; want %q", out, err, want)
	}
	if _, err := tmpl.Render(t.Context(), chattemplate.Input{Extra: map[string]any{"x": struct{}{}}}); err == nil {
		t.Fatal("accepted a struct")
	}
}

func TestRaiseException(t *testing.T) {
	t.Parallel()
	tmpl, err := chattemplate.Compile("{{ raise_exception('no ' ~ 'system role') }}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(t.Context(), chattemplate.Input{})
	if !errors.Is(err, chattemplate.ErrRaised) || !strings.HasSuffix(err.Error(), "no system role") || errors.Is(err, chattemplate.ErrRenderUnavailable) {
		t.Fatalf("%v", err)
	}
}

// One Template serves concurrent renders (run with -race).
func TestConcurrentRenders(t *testing.T) {
	t.Parallel()
	tmpl := loadTemplate(t, "features")
	cases := loadCases(t)
	want := make([]string, len(cases))
	for i, c := range cases {
		want[i], _ = tmpl.Render(context.Background(), c.input)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i, c := range cases {
				got, _ := tmpl.Render(context.Background(), c.input)
				if got != want[i] {
					t.Errorf("%s: concurrent render differs", c.name)
				}
			}
		})
	}
	wg.Wait()
}

// TestDynamoFrontendMinijinjaDifferential: differences a differential
// search against minijinja (minijinja-js 2.11.0, a build of the Rust
// crate) found; each expected output is minijinja-js's ("" for an error).
func TestDynamoFrontendMinijinjaDifferential(t *testing.T) {
	t.Parallel()
	in, err := chattemplate.DecodeRequestKwargs([]byte(`{"messages": [], "x": {"d": {"a": 1}, "n": null}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ src, want string }{
		// A set block's or a filter block's body has no scope of its own.
		{"{% set b %}{% set q = 1 %}{% endset %}{{ q }}", "1"},
		{"{% filter upper %}{% set q = 1 %}{% endfilter %}{{ q }}", "1"},
		// A bool orders as a kind of its own, before the numbers.
		{"{{ false < -2 }}|{{ true > 0.5 }}|{{ [true, 2, false, -1]|sort }}|{{ [0.5, true]|min }}", "true|false|[false, true, -1, 2]|true"},
		// A list or a map is looked up among a map's keys, not refused.
		{"{{ {} in x.d }}|{{ [1] in x.d }}", "false|false"},
		// odd, even and divisibleby are false of what is no number.
		{"{{ x.d is odd }}|{{ x.n is even }}|{{ nothing is divisibleby(3) }}|{{ 'a' is divisibleby(3) }}|{{ true is odd }}", "false|false|false|false|true"},
		{"{{ 5|indent(2) }}|{{ none|indent(2) }}", "5|none"},
		{"{{ true|abs }}", ""},
		{"{{ true|round }}", ""},
		{"{{ [false]|sum }}", ""},
		{"{{ nothing|first }}", ""},
		{"{{ nothing|last }}", ""},
		// minijinja's own filter split and tests startingwith, endingwith.
		{"{{ 'a,b'|split(',')|list }}|{{ ' a  b '|split|list }}|{{ 'a b c'|split(none, 1)|list }}", `["a", "b"]|["a", "b"]|["a", "b c"]`},
		{"{{ 5|split }}", ""},
		{"{{ 'abc' is startingwith('a') }}|{{ 'abc' is endingwith('bc') }}|{{ 5 is startingwith('a') }}", "true|true|false"},
		// The lower and upper tests: every character of that case, of a
		// string only.
		{"{{ '' is lower }}|{{ 'a1' is lower }}|{{ 'A1' is upper }}", "true|false|false"},
		{"{{ x.d is lower }}", ""},
		{"{{ 'x' * -1 }}", ""},
		// unique keeps unhashable items and tells true from 1.
		{"{{ [x.d, x.d]|unique|list|length }}|{{ [[1], [1], 2]|unique|list }}|{{ [1, true, 1.0]|unique|list }}", "1|[[1], 2]|[1, true]"},
		// Slicing undefined gives an empty list; a step of 0 always fails.
		{"{{ ([]|min)[1:] }}|{{ nothing[::-1] }}", "[]|[]"},
		{"{{ none[::0] }}", ""},
		// map and select iterate a false value (Jinja takes it as empty).
		{"{{ false|map('string')|list }}", ""},
		{"{{ 0|select|list }}", ""},
		// find and rfind give byte offsets (Rust's str::find).
		{"{{ 'ß straße'.rfind('a') }}|{{ '😀a'.find('a') }}|{{ 'abc'.find('z') }}", "6|4|-1"},
	} {
		tmpl, err := chattemplate.Compile(tc.src, chattemplate.WithDynamoFrontend())
		if err != nil {
			if tc.want != "" {
				t.Errorf("%s: %v", tc.src, err)
			}
			continue
		}
		out, err := tmpl.Render(t.Context(), in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s: %q, want an error", tc.src, out)
			}
			continue
		}
		if err != nil || out != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.src, out, err, tc.want)
		}
	}
}
