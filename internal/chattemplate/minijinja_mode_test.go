package chattemplate_test

import (
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/chattemplate"
)

// renderDynamo renders src as Dynamo's frontend does, over vars (a JSON
// object of template kwargs).
func renderDynamo(t *testing.T, src, vars string) (string, error) {
	t.Helper()
	in, err := chattemplate.DecodeRequestKwargs([]byte(vars))
	if err != nil {
		t.Fatal(err)
	}
	tm, err := chattemplate.Compile(src, chattemplate.WithDynamoFrontend())
	if err != nil {
		return "", err
	}
	return tm.Render(t.Context(), in)
}

// TestDynamoSliceOutOfRange: with a positive step minijinja clamps a
// negative bound that runs past the beginning to 0, as Python does, since
// 2.12 (Dynamo's frontend builds 2.24; minijinja-js 2.11.0 and earlier
// crates skip everything for such a start and take everything for such a
// stop): "last N turns" as messages[-4:] keeps a shorter conversation
// whole. Expected outputs are Python's slices, which minijinja's source
// from 2.12 on computes.
func TestDynamoSliceOutOfRange(t *testing.T) {
	t.Parallel()
	vars := `{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "l": [1, 2, 3]}`
	for _, tc := range []struct{ src, want string }{
		{`{{ 'abc'[-5:] }}|{{ 'abc'[-5:2] }}`, "abc|ab"},
		{`{{ l[-4:] }}|{{ l[-5:-1] }}|{{ l[:-10] }}|{{ l[-2:] }}|{{ l[1:-1] }}|{{ l[5:] }}|{{ l[1:10] }}`, "[1, 2, 3]|[1, 2]|[]|[2, 3]|[2]|[]|[2, 3]"},
		// A template that keeps the last four turns renders all of a
		// two-turn conversation.
		{`{% for m in messages[-4:] %}<{{ m.role }}>{{ m.content }}{% endfor %}`, "<user>hi<assistant>yo"},
	} {
		expectDynamo(t, tc.src, vars, tc.want)
	}
}

// TestDynamoSliceNegativeStep: with a negative step minijinja takes a
// start before the beginning as the first item and a stop that falls on
// the first item as running past it, so both keep l[0] where Python
// drops it (l[3:0:-1] is [3, 2, 1, 0], not [3, 2, 1]). Expected outputs
// are minijinja-js 2.11.0's (its negative-step bounds are unchanged in
// later minijinja sources).
func TestDynamoSliceNegativeStep(t *testing.T) {
	t.Parallel()
	vars := `{"messages": [], "l": [0, 1, 2, 3, 4], "s": "abcde"}`
	for _, tc := range []struct{ src, want string }{
		{`{{ l[::-1] }}|{{ l[::-2] }}|{{ s[::-1] }}|{{ l[1::-1] }}|{{ l[:1:-1] }}`, "[4, 3, 2, 1, 0]|[4, 2, 0]|edcba|[1, 0]|[4, 3, 2]"},
		{`{{ l[3:0:-1] }}|{{ l[:0:-1] }}|{{ l[:-5:-1] }}|{{ l[10:0:-2] }}|{{ s[3:0:-1] }}`, "[3, 2, 1, 0]|[4, 3, 2, 1, 0]|[4, 3, 2, 1, 0]|[4, 2, 0]|dcba"},
		{`{{ l[-10::-1] }}|{{ l[-6:-10:-1] }}|{{ l[0:0:-1] }}|{{ l[1:1:-1] }}|{{ s[-10::-1] }}`, "[0]|[0]|[0]|[]|a"},
		{`{% for m in l[2:0:-1] %}{{ m }}{% endfor %}`, "210"},
	} {
		expectDynamo(t, tc.src, vars, tc.want)
	}
}

// TestDynamoNoContribGlobals: cycler and joiner are minijinja-contrib's
// globals, which Dynamo's frontend does not register (it adds only
// contrib's Python methods), so a template sees them undefined; range,
// dict and namespace are minijinja's own.
func TestDynamoNoContribGlobals(t *testing.T) {
	t.Parallel()
	src := `{{ cycler is defined }}|{{ joiner is defined }}|{{ range is defined }}|{{ dict is defined }}|{{ namespace is defined }}`
	out, err := renderDynamo(t, src, `{"messages": []}`)
	if want := "false|false|true|true|true"; err != nil || out != want {
		t.Errorf("%q, %v; want %q", out, err, want)
	}
	if _, err := renderDynamo(t, `{% set j = joiner() %}{{ j() }}`, `{"messages": []}`); err == nil {
		t.Error("joiner() rendered; want an error, as calling undefined is in minijinja")
	}
}

// TestDynamoRawPlus: minijinja takes "{% raw +%}" (Jinja's raw rule does
// not), the "+" keeping the line break trim_blocks would drop. Expected
// outputs are minijinja-js 2.11.0's.
func TestDynamoRawPlus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{"a\n{% raw +%}\n{{ x }}\n{% endraw %}\nb", "a\n\n{{ x }}\nb"},
		{"a\n  {%+ raw +%}\n{{ x }}{%+ endraw +%}\nb", "a\n  \n{{ x }}\nb"},
		{"{% raw -%}\n {{ x }}{% endraw +%}\nb", "{{ x }}\nb"},
	} {
		expectDynamo(t, tc.src, `{"messages": []}`, tc.want)
	}
}

// TestDynamoAttrFilterIsItem: minijinja's attr filter is its [] operator,
// so a dict's key is found, where jinja2's getattr reads no keys.
func TestDynamoAttrFilterIsItem(t *testing.T) {
	t.Parallel()
	vars := `{"messages": [{"role": "tool", "content": "ok"}]}`
	out, err := renderDynamo(t, `{{ messages|last|attr('role') }}|{{ {'k': 'v'}|attr('k') }}`, vars)
	if want := "tool|v"; err != nil || out != want {
		t.Errorf("%q, %v; want %q (minijinja)", out, err, want)
	}
}

// TestDynamoIndentAsMinijinja: minijinja's indent drops one trailing
// newline (\n, then \r) of its input, splits at \n only and indents every
// non-empty line (a line of spaces too).
func TestDynamoIndentAsMinijinja(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{"[{{ 'a\\nb\\n'|indent(2) }}]", "[a\n  b]"},
		{"[{{ 'a\\r\\nb\\r\\n'|indent(2) }}]", "[a\r\n  b]"},
		{"[{{ 'a\\n  \\nb'|indent(2) }}]", "[a\n    \n  b]"},
	} {
		out, err := renderDynamo(t, tc.src, `{"messages": []}`)
		if err != nil || out != tc.want {
			t.Errorf("%s: %q, %v; want %q (minijinja)", tc.src, out, err, tc.want)
		}
	}
}

// TestDynamoBoolFilter: minijinja has a bool filter (the value's truth),
// which Jinja lacks: a template using it compiles and renders in the
// Dynamo mode.
func TestDynamoBoolFilter(t *testing.T) {
	t.Parallel()
	out, err := renderDynamo(t, `{{ 1|bool }}|{{ ''|bool }}|{{ 'false'|bool }}|{{ n|bool }}`, `{"n": null}`)
	if err != nil || out != "true|false|true|false" {
		t.Fatalf("got %q, %v; want %q", out, err, "true|false|true|false")
	}
}

// TestDynamoFilterSetIsMinijinjas: Dynamo's frontend renders with
// minijinja's built-in filters and tests (2.24; minijinja-contrib adds
// only its Python methods there): the filters Jinja has and minijinja
// lacks fail when applied, minijinja's own (lines, chain, zip, the int
// test) work, and "is filter" and "is test" answer for minijinja's set.
func TestDynamoFilterSetIsMinijinjas(t *testing.T) {
	t.Parallel()
	vars := `{"messages": [], "tools": []}`
	for _, src := range []string{
		`{{ 'a b'|center(9) }}`, `{{ 'a b'|wordcount }}`, `{{ 'abcdef'|truncate(3) }}`, `{{ 100|filesizeformat }}`,
		`{{ '<b>x</b>'|striptags }}`, `{{ {'a': 1}|xmlattr }}`, `{{ 'x'|forceescape }}`, `{{ 'a b'|wordwrap(1) }}`,
		`{{ [1]|random }}`, `{{ 'x'|urlize }}`, `{{ none is callable }}`,
	} {
		if out, err := renderDynamo(t, src, vars); err == nil {
			t.Errorf("%s: rendered %q; minijinja has no such filter or test", src, out)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{`{% for l in 'a\r\nb\n\nc\n'|lines %}<{{ l }}>{% endfor %}|{{ 'x\r'|lines|length }}|{{ ''|lines|length }}`, "<a><b><><c>|1|0"},
		{`{% for x in [1, 2]|chain([3], (4,)) %}{{ x }}{% endfor %}|{{ ([1]|chain([2]))[1] }}|{{ [1]|chain('ab')|list|length }}`, "1234|2|3"},
		{`{% set d = {'a': 1}|chain({'b': 2, 'a': 3}) %}{{ d.a }}{{ d['b'] }}`, "32"},
		{`{% for a, b in [1, 2, 3]|zip('xy') %}{{ a }}{{ b }};{% endfor %}|{{ [1, 2]|zip([3, 4], [5])|list|length }}`, "1x;2y;|1"},
		{`{{ 1 is int }}{{ 'zip' is filter }}{{ 'truncate' is filter }}{{ 'int' is test }}{{ 'callable' is test }}`, "truetruefalsetruefalse"},
		{`{{ 'x' is safe }}|{{ 'safe' is test }}`, "false|true"},
	} {
		out, err := renderDynamo(t, tc.src, vars)
		if err != nil || out != tc.want {
			t.Errorf("%s: %q, %v; want %q (minijinja)", tc.src, out, err, tc.want)
		}
	}
}

// TestDynamoNamesLookedUpWhenApplied: minijinja compiles a template
// whatever filters and tests it names and fails only where one it lacks is
// applied, so a template naming one on a path a request does not take
// renders that request (Jinja refuses it at compile time).
func TestDynamoNamesLookedUpWhenApplied(t *testing.T) {
	t.Parallel()
	src := `{% for t in tools %}{{ t|frobnicate }}{% if t is shiny %}!{% endif %}{% endfor %}ok`
	if out, err := renderDynamo(t, src, `{"messages": [], "tools": []}`); err != nil || out != "ok" {
		t.Errorf("no tools: %q, %v; want ok", out, err)
	}
	if _, err := renderDynamo(t, src, `{"messages": [], "tools": [1]}`); err == nil || !strings.Contains(err.Error(), "frobnicate") {
		t.Errorf("a tool: %v; want the unknown filter named", err)
	}
	if _, err := chattemplate.Compile(src); err == nil {
		t.Error("Jinja mode compiled a template naming an unknown filter")
	}
}

// TestLoadTagsFailWhereTheyRun: templates have no loader, so include,
// import, from and extends fail where they run, not where they are written
// (Jinja and minijinja both parse them): a template naming one on a path a
// request does not take renders. An include told to ignore a missing
// template renders nothing in minijinja, which finds none without a
// loader; Jinja fails it (its error is not a missing template).
func TestLoadTagsFailWhereTheyRun(t *testing.T) {
	t.Parallel()
	for _, tag := range []string{
		`{% include 'tools.jinja' %}`,
		`{% include ['a.jinja', 'b.jinja'] without context %}`,
		`{% import 'macros.jinja' as m with context %}`,
		`{% from 'macros.jinja' import a as b, c %}`,
		`{% from 'macros.jinja' import a with context %}`,
		`{% extends 'base.jinja' %}`,
	} {
		src := `{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}` + tag + `{% endif %}`
		for _, dynamo := range []bool{false, true} {
			var opts []chattemplate.Option
			if dynamo {
				opts = append(opts, chattemplate.WithDynamoFrontend())
			}
			tm, err := chattemplate.Compile(src, opts...)
			if err != nil {
				t.Errorf("%s (dynamo %v): compile: %v", tag, dynamo, err)
				continue
			}
			in, err := chattemplate.DecodeRequestKwargs([]byte(`{"messages": [{"role": "user", "content": "hi"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			if out, err := tm.Render(t.Context(), in); err != nil || out != "hi" {
				t.Errorf("%s (dynamo %v), no tools: %q, %v; want hi", tag, dynamo, out, err)
			}
			in, err = chattemplate.DecodeRequestKwargs([]byte(`{"messages": [], "tools": [1]}`))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tm.Render(t.Context(), in); err == nil || !strings.Contains(err.Error(), "no loader") {
				t.Errorf("%s (dynamo %v), a tool: %v; want the load refused", tag, dynamo, err)
			}
		}
	}
	src := `a{% include 'x.jinja' ignore missing %}b`
	if out, err := renderDynamo(t, src, `{"messages": []}`); err != nil || out != "ab" {
		t.Errorf("ignore missing, Dynamo mode: %q, %v; want ab", out, err)
	}
	if out, err := render(src, chattemplate.Input{}); err == nil {
		t.Errorf("ignore missing, Jinja mode: %q; want the load refused", out)
	}
	for _, bad := range []string{`{% include %}`, `{% import 'm' %}`, `{% from 'm' %}`, `{% include 'x' ignore %}`, `{% import 'm' as m with %}`} {
		if _, err := chattemplate.Compile(bad); err == nil {
			t.Errorf("%s compiled", bad)
		}
	}
}

// TestDynamoPycompatSplitlinesAndJoin: minijinja's pycompat keeps each
// line's end with splitlines(true) (a \r\n whole), and its str.join writes
// items that are not strings as they print, where Python refuses them.
func TestDynamoPycompatSplitlinesAndJoin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{`{{ 'a\nb\r\nc'.splitlines(true) }}`, `["a\n", "b\r\n", "c"]`},
		{`{{ 'a\nb\n'.splitlines(true)|join('|') }}`, "a\n|b\n"},
		{`{{ 'a\nb\r\nc'.splitlines() }}`, `["a", "b", "c"]`},
		{`{{ '|'.join([1, none, true, 'a']) }}`, "1|none|true|a"},
	} {
		if out, err := renderDynamo(t, tc.src, `{}`); err != nil || out != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.src, out, err, tc.want)
		}
	}
	if _, err := render(`{{ '|'.join([1, 'a']) }}`, chattemplate.Input{}); err == nil {
		t.Error("Jinja mode joined an int (Python refuses it)")
	}
}

// TestDynamoNamespaceIsSortedMap: minijinja's namespace object keeps its
// attributes in a BTreeMap (minijinja/src/value/namespace_object.rs) and
// is a map to the engine, so tojson writes its attributes in key order and
// printing it prints that map ({"a": "x", "b": 1}), not Python's
// <Namespace ...> repr. Expected outputs are minijinja-js 2.11.0's.
func TestDynamoNamespaceIsSortedMap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{"{% set ns = namespace(b=1, a='x') %}{% set ns.c = 3 %}{{ ns|tojson }}", `{"a":"x","b":1,"c":3}`},
		{"{% set ns = namespace(b=1, a='x') %}{{ ns }}|{{ [ns] }}|{{ ns|string }}", `{"a": "x", "b": 1}|[{"a": "x", "b": 1}]|{"a": "x", "b": 1}`},
	} {
		out, err := renderDynamo(t, tc.src, `{"messages": []}`)
		if err != nil || out != tc.want {
			t.Errorf("%s: %q, %v; want %q (minijinja)", tc.src, out, err, tc.want)
		}
	}
}

// TestDynamoMacroDefaultsRightToLeft: minijinja binds a macro's parameters
// from the last to the first (compile_macro_expression in
// minijinja/src/compiler/codegen.rs iterates macro_decl.args.iter().rev()),
// so a default sees the parameters after it and not those before it,
// where Jinja evaluates defaults left to right. Expected outputs are
// minijinja-js 2.11.0's.
func TestDynamoMacroDefaultsRightToLeft(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want, vars string }{
		{"{% macro m(a, b=a) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}", "[1|][1|2]", `{"messages": []}`},
		{"{% macro m(a=b, b=2) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m() }}", "[2|2]", `{"messages": []}`},
		{"{% macro m(x, indent=x|length) %}{{ indent }}{% endmacro %}{{ m('abc') }}", "0", `{"messages": []}`},
		{"{% set x = 5 %}{% macro m(a, b=x) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}", "[1|5]", `{"messages": []}`},
		// An unbound parameter reads as the render's variable of its name,
		// not as one the template set.
		{"{% set a = 7 %}{% macro m(a, b=a) %}[{{ a }}|{{ b }}]{% endmacro %}{{ m(1) }}", "[1|9]", `{"messages": [], "a": 9}`},
	} {
		out, err := renderDynamo(t, tc.src, tc.vars)
		if err != nil || out != tc.want {
			t.Errorf("%s: %q, %v; want %q (minijinja)", tc.src, out, err, tc.want)
		}
	}
}

// TestDynamoUnaryOperators: minijinja's parser has one unary arithmetic
// operator, "-" (parse_unary_only in minijinja/src/compiler/parser.rs),
// and it binds to the primary before any postfix: -x.y is (-x).y, an
// error for a map, where Jinja reads -(x.y); a unary "+" is a syntax
// error. Expected outputs are minijinja-js 2.11.0's ("" for an error).
func TestDynamoUnaryOperators(t *testing.T) {
	t.Parallel()
	vars := `{"messages": [], "x": {"y": 1}, "l": [1, 2], "n": 3}`
	for _, tc := range []struct{ src, want string }{
		{"{{ -x.y }}", ""},
		{"{{ -l[0] }}", ""},
		{"{{ +1 }}", ""},
		{"{{ -n }}|{{ - -n }}|{{ -1|abs }}|{{ -l|length if false else 'k' }}|{{ n is divisibleby -3 }}|{{ l[-1] }}", "-3|3|1|k|true|2"},
	} {
		expectDynamo(t, tc.src, vars, tc.want)
	}
}

// TestDynamoMacroNoVarargs: minijinja's macros have no varargs or kwargs;
// a call with more positional arguments than parameters or an unknown
// keyword fails ("too many arguments"), and the names are ordinary
// variables in the body. Expected outputs are minijinja-js 2.11.0's (""
// for an error).
func TestDynamoMacroNoVarargs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{"{% macro m() %}{{ varargs }}{% endmacro %}{{ m(1) }}", ""},
		{"{% macro m() %}{{ kwargs }}{% endmacro %}{{ m(a=1) }}", ""},
		{"{% macro m(a) %}[{{ varargs }}|{{ kwargs }}|{{ a }}]{% endmacro %}{{ m(1) }}", "[||1]"},
	} {
		expectDynamo(t, tc.src, `{"messages": []}`, tc.want)
	}
}

// expectDynamo renders src over vars in the Dynamo mode and wants out, or
// an error when want is "" (minijinja refuses it).
func expectDynamo(t *testing.T, src, vars, want string) {
	t.Helper()
	out, err := renderDynamo(t, src, vars)
	if want == "" {
		if err == nil {
			t.Errorf("%s: %q; want an error (minijinja)", src, out)
		}
		return
	}
	if err != nil || out != want {
		t.Errorf("%s: %q, %v; want %q (minijinja)", src, out, err, want)
	}
}

// TestDynamoTupleConcat: minijinja has no tuple type (a tuple literal is a
// list), so + joins a list and a tuple where Python refuses to. Expected
// outputs are minijinja-js 2.11.0's.
func TestDynamoTupleConcat(t *testing.T) {
	t.Parallel()
	expectDynamo(t, `{{ [[1], [2]] + ([3],) }}|{{ (1, 2) + [3] }}|{{ (1,) + (2,) }}|{{ ([1] + (2,))|length }}`,
		`{"messages": []}`, `[[1], [2], [3]]|[1, 2, 3]|[1, 2]|2`)
}

// TestDynamoTooManyArguments: minijinja's filters and tests are functions
// of fixed arity, so an argument beyond their parameters fails the render
// ("too many arguments"), and a filter without parameters takes no
// keyword argument either; Continuum must refuse these templates as the
// frontend does. Expected outputs are minijinja-js 2.11.0's ("" for an
// error).
func TestDynamoTooManyArguments(t *testing.T) {
	t.Parallel()
	vars := `{"l": [3, 1, 2], "s": "Hi", "d": {"a": 1}}`
	for _, tc := range []struct{ src, want string }{
		{`{{ s|upper(1) }}`, ""},
		{`{{ s|lower(x=1) }}`, ""},
		{`{{ s|title(1) }}`, ""},
		{`{{ l|first(1) }}`, ""},
		{`{{ l|list(1) }}`, ""},
		{`{{ l|reverse(1) }}`, ""},
		{`{{ d|items(1) }}`, ""},
		{`{{ 1|abs(1) }}`, ""},
		{`{{ s|escape(1) }}`, ""},
		{`{{ l|pprint('odd') }}`, ""},
		{`{{ s|trim(' ', 2) }}`, ""},
		{`{{ d|attr('a', 1) }}`, ""},
		{`{{ s|default('y', true, 1) }}`, ""},
		{`{{ l|batch(1, 2, 3) }}`, ""},
		{`{{ l|slice(2, 0, 1) }}`, ""},
		{`{{ s|split(' ', 1, 2)|list }}`, ""},
		{`{{ l|join(1, 2, 3) }}`, ""},
		{`{{ l|map('string', 1)|list }}`, ""},
		{`{{ 3 is odd(1) }}`, ""},
		{`{{ 3 is defined(1) }}`, ""},
		{`{{ 1 is divisibleby(2, 3) }}`, ""},
		{`{{ 1 is eq(1, 2) }}`, ""},
		{`{{ 'a' is startingwith('a', 1) }}`, ""},
		{`{{ s|upper }}|{{ l|first }}|{{ s|trim('H') }}|{{ d|attr('a') }}|{{ n|default('y', true) }}|{{ l|batch(2, 0)|list }}|{{ l|join('-') }}|{{ l|map('string')|join }}|{{ 3 is odd }}|{{ 4 is divisibleby(2) }}`,
			"HI|3|i|1|y|[[3, 1], [2, 0]]|3-1-2|312|true|true"},
	} {
		expectDynamo(t, tc.src, vars, tc.want)
	}
}

// TestDynamoItemsOfUndefined: minijinja's items filter takes a mapping
// only, so items of a missing attribute fails the render where Jinja2
// iterates no pairs. Expected outputs are minijinja-js 2.11.0's ("" for
// an error); minijinja's items refuses any value that is not a map through
// 2.24.
func TestDynamoItemsOfUndefined(t *testing.T) {
	t.Parallel()
	vars := `{"t": {"parameters": {"properties": {"a": 1}}}}`
	for _, tc := range []struct{ src, want string }{
		{`{% for k, v in t.parameters.properties|items %}{{ k }}={{ v }}{% endfor %}`, "a=1"},
		{`{% for k, v in t.parameters.missing|items %}{{ k }}{% endfor %}ok`, ""},
		{`{{ undef|items }}`, ""},
	} {
		expectDynamo(t, tc.src, vars, tc.want)
	}
}

// TestDynamoLinesOfNonString: minijinja's lines filter takes a string
// only, as its split does: a number, none or an undefined value fails the
// render instead of being printed and split. Expected outputs are
// minijinja-js 2.11.0's ("" for an error).
func TestDynamoLinesOfNonString(t *testing.T) {
	t.Parallel()
	vars := `{"n": null, "s": "a\nb"}`
	for _, tc := range []struct{ src, want string }{
		{`{{ 5|lines }}`, ""},
		{`{{ n|lines }}`, ""},
		{`{{ undef|lines }}`, ""},
		{`{{ [1]|lines }}`, ""},
		{`{{ s|lines }}`, `["a", "b"]`},
	} {
		expectDynamo(t, tc.src, vars, tc.want)
	}
}

// TestDynamoReverseOfUndefined: minijinja's reverse gives an undefined
// value back unchanged (as it does none), so it prints as nothing and is
// not defined; Jinja2's gives an empty list. Expected outputs are
// minijinja-js 2.11.0's; minijinja's Value::reverse keeps undefined and
// none unchanged through 2.24.
func TestDynamoReverseOfUndefined(t *testing.T) {
	t.Parallel()
	expectDynamo(t, `[{{ undef|reverse }}]|{{ (undef|reverse) is defined }}|{% for x in undef|reverse %}x{% endfor %}|{{ [1, 2]|reverse }}`,
		`{"messages": []}`, `[]|false||[2, 1]`)
}

// TestDynamoPlusVariableEnd: minijinja's lexer ends a variable tag at
// "+}}" as at "}}" (a + before any tag's end is a whitespace marker, and a
// variable tag's end trims nothing), where Jinja2 reads the + as an
// operator and fails. Expected outputs are minijinja-js 2.11.0's; the
// lexer is unchanged there through 2.24.
func TestDynamoPlusVariableEnd(t *testing.T) {
	t.Parallel()
	vars := `{"x": "X"}`
	for _, tc := range []struct{ src, want string }{
		{"a  {{ x +}}  b", "a  X  b"},
		{"a\n  {{+ x +}}\n  b", "a\n  X\n  b"},
		{"{{ x +}}\n{{- x -}}\n", "XX"},
	} {
		expectDynamo(t, tc.src, vars, tc.want)
	}
}

// TestDynamoLoopFrameKept: minijinja runs every iteration of a for loop
// in one frame and does not empty it, so a name set in one iteration is
// still set in the next (Jinja2 starts each iteration afresh), and a
// recursive loop(...) pushes its frame over the current iteration's.
// Expected outputs are minijinja-js 2.11.0's; the VM's loop frame is kept
// across iterations through 2.24.
func TestDynamoLoopFrameKept(t *testing.T) {
	t.Parallel()
	vars := `{"l": [3, 1, 2]}`
	for _, tc := range []struct{ src, want string }{
		{`{% for i in l %}[{{ y }}]{% set y = i %}{% endfor %}`, "[][3][1]"},
		{`{% for i in l %}[{{ y }}]{% set y %}{{ i }}{% endset %}{% endfor %}`, "[][3][1]"},
		{`{% for i in l %}[{{ y is defined }}]{% if true %}{% set y = i %}{% endif %}{% endfor %}`, "[false][true][true]"},
		{`{% for i in l %}{% for j in [1, 2] %}[{{ z }}]{% set z = i ~ j %}{% endfor %}{% endfor %}`, "[][31][][11][][21]"},
		{`{% set y = 'top' %}{% for i in l %}[{{ y }}]{% set y = i %}{% endfor %}{{ y }}`, "[top][3][1]top"},
		{`{% for x in [[1, [2, 3]]] recursive %}[{{ w }}]{% set w = x %}{% if x is sequence %}{{ loop(x) }}{% endif %}{% endfor %}`,
			"[][[1, [2, 3]]][1][[2, 3]][2]"},
	} {
		expectDynamo(t, tc.src, vars, tc.want)
	}
}

// TestDynamoMacroDefaultForUndefined: minijinja evaluates a macro
// parameter's default whenever the parameter's value is undefined, so an
// argument that is an undefined variable (by position or keyword) takes
// the default, where Jinja2 binds the undefined value. Expected outputs
// are minijinja-js 2.11.0's; minijinja's macro prologue tests each value
// with IsUndefined through 2.24.
func TestDynamoMacroDefaultForUndefined(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, want string }{
		{`{% macro m(a=0, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(nope) }}|{{ m(nope, nada) }}|{{ m(b=nada) }}|{{ m(none) }}|{{ m(1, 2) }}`,
			"<0B>|<0B>|<0B>|<noneB>|<12>"},
		{`{% macro render(m, tools=none) %}{{ tools is none }}{% endmacro %}{{ render(1, tools) }}`, "true"},
		{`{% macro m(a) %}{{ a is defined }}{% endmacro %}{{ m(nope) }}`, "false"},
	} {
		expectDynamo(t, tc.src, `{"messages": []}`, tc.want)
	}
}

// TestDynamoLoopFilterFirst: minijinja filters a for loop's items (its
// if clause) in a loop of its own before the body first runs, so the
// condition does not see what the body changes (Jinja2 filters lazily,
// between iterations), and a recursive loop(...) iterates its items
// unfiltered. Expected outputs are minijinja-js 2.11.0's; the compiler
// builds the filtered list first through 2.24.
func TestDynamoLoopFilterFirst(t *testing.T) {
	t.Parallel()
	vars := `{"l": [3, 1, 2]}`
	for _, tc := range []struct{ src, want string }{
		{`{% set ns = namespace(c=0) %}{% for x in l if ns.c < 1 %}{% set ns.c = ns.c + 1 %}{{ x }}{% endfor %}`, "312"},
		{`{% for x in [[1, 0], 0, 2] if x recursive %}{% if x is sequence %}[{{ loop(x) }}]{% else %}{{ x }}{% endif %}{% endfor %}`, "[10]2"},
		{`{% for x in l if x > 1 %}{{ loop.index }}/{{ loop.length }}{% endfor %}`, "1/22/2"},
	} {
		expectDynamo(t, tc.src, vars, tc.want)
	}
}
