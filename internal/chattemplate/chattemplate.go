// Package chattemplate renders Hugging Face chat templates the way
// transformers does: Python Jinja2 semantics in an immutable sandbox with
// trim_blocks, lstrip_blocks, the loop-controls extension, a tojson filter
// that keeps non-ASCII characters and insertion order, raise_exception and
// strftime_now. WithDynamoFrontend renders instead as Dynamo's frontend
// does in minijinja, where tojson and the printing of values differ.
//
// It is a purpose-built interpreter (lexer, parser, evaluator) rather than a
// general Jinja engine: every render is bounded by an instruction budget
// (fuel), an output size limit and a wall-clock budget checked inside the
// evaluator itself, so a render never outlives its budget and needs no
// goroutine. There is no file loader: include, import and extends fail.
//
// Renders are checked byte for byte against Python jinja2 (see
// testdata/chattemplate/README.md). Known differences, none of which real
// chat templates rely on:
//   - integers are 64-bit (overflow is an error, Python has big ints); larger
//     integers in JSON input keep their digits for printing, tojson and
//     comparison, but arithmetic on them is an error;
//   - lazy filters (select, reject, map, selectattr, rejectattr, unique,
//     reverse, items), dict views (.items(), .keys(), .values()) and range()
//     give lists, so printing one shows the list, not Python's generator or
//     range object, and two ranges concatenate;
//   - escape and safe give plain strings (no Markup: concatenation does not
//     escape the other side);
//   - Jinja evaluates all-constant output expressions at compile time with
//     its lenient getitem, so a bad constant slice prints "" there and is an
//     error here;
//   - Unicode properties and case mappings are those of Go's Unicode
//     version, which may be newer or older than the Python's;
//   - not supported, with a clear error: *args/**kwargs in calls, the
//     autoescape tag, the filters wordwrap, urlize and random; the globals
//     lipsum and self are undefined.
//
// Imports: no internal package.
package chattemplate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// Render budgets. A chat template arrives with a model's artifacts and is
// untrusted code: every render is bounded in instructions, output size and
// wall clock, and an overrun is ErrRenderUnavailable.
const (
	// DefaultFuel is the instruction budget of one render.
	DefaultFuel = 5_000_000
	// DefaultMaxOutput bounds the rendered text and every string built on the
	// way.
	DefaultMaxOutput = 1 << 20
	// DefaultTimeout is the wall-clock budget of one render.
	DefaultTimeout = time.Second
)

// ErrRenderUnavailable is wrapped by every budget overrun (fuel, output
// size, wall clock, recursion, cancelled context): the caller falls back
// rather than trusting a partial prompt. An output size overrun also wraps
// ErrOutputTooLarge.
var ErrRenderUnavailable = errors.New("render_unavailable")

// ErrOutputTooLarge is wrapped, beside ErrRenderUnavailable, when the
// rendered text, or a string built on the way to it, would pass the output
// size limit: the prompt is too large to render, which a caller may tell
// from a template that ran out of instructions or time.
var ErrOutputTooLarge = errors.New("output too large")

// ErrRaised is wrapped when the template calls raise_exception.
var ErrRaised = errors.New("template raised an exception")

// Option configures a Template.
type Option func(*Template)

// WithFuel sets the instruction budget of one render.
func WithFuel(n int64) Option { return func(t *Template) { t.fuel = n } }

// WithMaxOutput sets the output size limit in bytes.
func WithMaxOutput(n int) Option { return func(t *Template) { t.maxOutput = n } }

// WithTimeout sets the wall-clock budget of one render (0: none beyond the
// context's deadline).
func WithTimeout(d time.Duration) Option { return func(t *Template) { t.timeout = d } }

// WithClock sets the clock strftime_now reads (tests use a fixed one).
func WithClock(now func() time.Time) Option { return func(t *Template) { t.now = now } }

// WithDynamoFrontend renders as Dynamo's frontend does, whose renders give
// the tokens its workers cache: it runs templates in minijinja, with a
// tojson and a length filter of its own, where transformers runs Python's
// jinja2. With it:
//   - tojson writes serde_json's compact form ("," and ":" without spaces),
//     or its pretty form when the keyword indent is a non-negative integer
//     (or a bool or a float without a fraction, as minijinja converts);
//     floats in serde_json's shortest form (1e-7, 1e16), NaN, infinities
//     and undefined values as null; and <, >, & and the apostrophe as
//     \u003c, \u003e, \u0026 and \u0027. Other keyword arguments
//     (ensure_ascii, separators, sort_keys) are not read, and a positional
//     argument is an error;
//   - values print as minijinja prints them (in output, ~, and the string
//     filters: string, join, trim, upper, replace, ...): none, true and
//     false in lower case, floats with a decimal point and without an
//     exponent (1e20 is 100000000000000000000.0), lists and dicts as
//     [1, "a"] and {"k": none} with their items in Rust's Debug form
//     (strings quoted and escaped, floats below 1e-4 or from 1e16 on in
//     exponent form);
//   - length of anything without a length (none and undefined included)
//     is 0, not an error; count of an undefined value is an error;
//   - only a list is a sequence (not a string or a dict) and a bool is no
//     number, as minijinja's tests say;
//   - bos_token, eos_token and unk_token are always defined (none when the
//     config has no such token) and no other special token is; documents
//     are not passed (unless as an extra variable);
//   - none iterates as an empty sequence (a for loop's else, list, join,
//     sort, map, select, sum, ..., a slice of it; is iterable is true of
//     it; first and last of it are errors, reverse gives it back);
//   - an attribute of a dict is its item, never a method (x.items is the
//     item "items" or undefined; so is x['items']), and strings and lists
//     have no attributes; a method call on a dict calls its item of that
//     name when it has one (an error unless callable), else the Python
//     method (items, keys, get, ...), as minijinja's pycompat does;
//   - string literals take minijinja's escapes: \" \\ \/ \' \b \f \n \r
//     \t, \uXXXX with UTF-16 pairs, \xXX and octal as a byte's value, and
//     any other escape (a backslash before a line break included) kept as
//     written;
//   - the source's {% generation %} and {% endgeneration %}, exactly so
//     written, are deleted before it is compiled, as the frontend does;
//   - line breaks are not normalised: \r and \r\n stay in the output,
//     trim_blocks drops a \r, \n or \r\n after a tag (the raw tag's
//     too), and a trailing \n then \r are dropped from the source;
//   - arithmetic as minijinja's: integer // and % Euclidean (7 // -2 is
//     -3) and an error by zero, float // Euclidean and float % truncated,
//     / by zero inf or NaN, an integer to a negative power an error, and
//     no printf-style % on strings;
//   - round halves away from zero and takes no method; int and float of
//     a string that is no number (Rust's grammar: no spaces, no base
//     prefix) are errors, of none or undefined 0, and take no default;
//     escape writes &quot; &#x27; &#x2f;; title starts a word after white
//     space or punctuation only ("x1y" is "X1y"); isdigit is Rust's
//     is_numeric, and isdigit, isalpha, isalnum, isspace, islower and
//     isupper of "" are true (islower: every character lower-case);
//     splitlines splits at \n only (Rust's lines);
//   - a tuple equals the list of its items; a namespace's tojson is its
//     attributes' object;
//   - values of different kinds order by kind (undefined, none, numbers,
//     strings, sequences, maps: none < 1 is true, 'a' < 1 false) instead
//     of failing, in comparisons and in sort, min, max, dictsort and
//     groupby, and in on a string looks for the text of any needle
//     (undefined's is "", found in every string); a bool is a kind of its
//     own there, before the numbers (false < -2), and no number to abs,
//     round or sum;
//   - a name set in a for loop's iteration stays set in the next ones
//     (minijinja keeps one frame for the whole loop), and a recursive
//     loop(...) sees the names of the iteration that called it;
//   - a set block's or filter block's body assigns in the enclosing scope;
//     odd, even, divisibleby, startingwith and endingwith are false of
//     what they cannot test; the filter split and the tests startingwith
//     and endingwith exist; map and select iterate a false value (an
//     error unless none or undefined), a slice of undefined is [], and
//     str.find and rfind give byte offsets;
//   - a slice with a negative step takes minijinja's bounds: a start
//     before the beginning is the first item and a stop on the first item
//     runs past it (l[2:0:-1] ends with l[0]); with a positive step the
//     bounds are Python's (minijinja clamps them since 2.12);
//   - a built-in filter or test given more positional arguments than it
//     takes is an error ("too many arguments"), as is a keyword argument
//     to one that takes none (upper, first, list, odd, ...);
//   - the attr filter is the [] operator (a dict's key is found); indent
//     drops one trailing newline of its input and of its output, splits at
//     \n alone and indents every line but the empty ones (a line of
//     spaces too).
func WithDynamoFrontend() Option { return func(t *Template) { t.dynamo = true } }

// Template is a compiled chat template; it is immutable and safe for
// concurrent use.
type Template struct {
	src       string
	body      []stmt
	tokens    map[string]string
	fuel      int64
	maxOutput int
	timeout   time.Duration
	now       func() time.Time
	// dynamo: render as Dynamo's frontend does (WithDynamoFrontend).
	dynamo bool
	// sizeHint is the length of the last render, to size the next one's
	// buffer.
	sizeHint atomic.Int64
}

// Compile parses a template source.
func Compile(src string, opts ...Option) (*Template, error) {
	if len(src) > maxTemplateSize {
		return nil, fmt.Errorf("chattemplate: template larger than %d bytes", maxTemplateSize)
	}
	t := &Template{src: src, fuel: DefaultFuel, maxOutput: DefaultMaxOutput, timeout: DefaultTimeout, now: time.Now}
	for _, o := range opts {
		o(t)
	}
	if t.dynamo {
		// Dynamo's frontend deletes vLLM's assistant-tracking tags, in
		// exactly these spellings, before minijinja compiles the source:
		// what stood around them stays (no block for trim_blocks and
		// lstrip_blocks to act on), and other spellings are not removed.
		src = strings.ReplaceAll(strings.ReplaceAll(src, "{% generation %}", ""), "{% endgeneration %}", "")
	}
	toks, err := lex(normalizeSource(src, t.dynamo), t.dynamo)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	if t.body, err = parse(toks, t.dynamo); err != nil {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	if err := checkNames(t.body, t.dynamo); err != nil {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	return t, nil
}

// specialTokenKeys are the tokenizer_config.json keys exposed to templates.
var specialTokenKeys = []string{"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"}

// ErrNoNamedTemplate: the tokenizer config has no chat template of the
// name asked for.
var ErrNoNamedTemplate = errors.New("chattemplate: no chat template named")

// FromTokenizerConfig compiles the chat template of a tokenizer_config.json:
// chat_template as a string, or a list of {name, template} from which name
// is chosen ("default" when name is empty; none of that name is
// ErrNoNamedTemplate). Keys are matched exactly, and every entry of such a
// list needs a string name and template: one without fails the config, as
// transformers (a KeyError) and Dynamo's frontend (a map of strings) fail
// it. The special tokens (strings, or AddedToken objects with a string
// "content") become the template's defaults.
func FromTokenizerConfig(data []byte, name string, opts ...Option) (*Template, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("chattemplate: tokenizer config: %w", err)
	}
	raw, ok := cfg["chat_template"]
	if !ok || string(raw) == "null" {
		return nil, errors.New("chattemplate: tokenizer config has no chat_template")
	}
	var src string
	if err := json.Unmarshal(raw, &src); err != nil {
		// Keys match exactly, as Python's dict and serde's map read them
		// (encoding/json would match a struct's fields in any case).
		var named []map[string]json.RawMessage
		if err := json.Unmarshal(raw, &named); err != nil {
			return nil, errors.New("chattemplate: chat_template is neither a string nor a list of {name, template}")
		}
		want := name
		if want == "" {
			want = "default"
		}
		found := false
		var names []string
		for i, n := range named {
			entry, ok1 := stringValue(n["name"])
			tmpl, ok2 := stringValue(n["template"])
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("chattemplate: chat_template entry %d has no string name and template", i)
			}
			names = append(names, entry)
			if entry == want {
				src, found = tmpl, true
			}
		}
		if !found {
			return nil, fmt.Errorf("%w %q (have %s)", ErrNoNamedTemplate, want, strings.Join(names, ", "))
		}
	} else if name != "" && name != "default" {
		return nil, fmt.Errorf("%w %q (the config has a single one)", ErrNoNamedTemplate, name)
	}
	t, err := Compile(src, opts...)
	if err != nil {
		return nil, err
	}
	t.tokens = map[string]string{}
	for _, k := range specialTokenKeys {
		raw, ok := cfg[k]
		if !ok || string(raw) == "null" {
			continue
		}
		if s, ok := stringValue(raw); ok {
			t.tokens[k] = s
			continue
		}
		// An AddedToken object: its "content", a key matched exactly.
		var at map[string]json.RawMessage
		if json.Unmarshal(raw, &at) != nil {
			continue
		}
		if s, ok := stringValue(at["content"]); ok {
			t.tokens[k] = s
		}
	}
	return t, nil
}

// stringValue reads raw as a JSON string; null, a missing value and any
// other kind are not one.
func stringValue(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// Mentions reports whether the template's source contains s: a renderer
// that adapts its input to what a template expects (as inference servers
// do, by reading the template's text) asks it.
func (t *Template) Mentions(s string) bool { return strings.Contains(t.src, s) }

// SpecialTokens returns the special tokens read from the tokenizer config.
func (t *Template) SpecialTokens() map[string]string {
	out := make(map[string]string, len(t.tokens))
	for k, v := range t.tokens {
		out[k] = v
	}
	return out
}

// Input is what a chat request gives the template.
type Input struct {
	// Messages and Tools hold JSON-like values: *Dict (ordered, from
	// DecodeJSON or DecodeRequest), map[string]any (keys taken in sorted
	// order), []any, string, float64, int, bool, nil.
	Messages []any
	Tools    []any
	// Documents is documents (retrieval-augmented generation); nil is None.
	Documents []any
	// AddGenerationPrompt is add_generation_prompt.
	AddGenerationPrompt bool
	// ContinueFinalMessage cuts the render right after the final message's
	// text, as transformers' continue_final_message does, so the model
	// continues that message; it excludes AddGenerationPrompt.
	ContinueFinalMessage bool
	// Extra holds further template kwargs (enable_thinking, ...); a *Dict
	// value keeps its order.
	Extra map[string]any
	// SpecialTokens override the tokens read from the tokenizer config.
	SpecialTokens map[string]string
	// Bare renders with messages and add_generation_prompt alone, as
	// Dynamo's frontend probes a template (whether it needs content as a
	// list): no special tokens, no tools or documents (undefined, not
	// none), Extra and SpecialTokens unused.
	Bare bool
}

// DecodeRequest reads an OpenAI-style chat request body keeping the key
// order of every object, as tojson needs: messages, tools, documents,
// add_generation_prompt, continue_final_message, and chat_template_kwargs
// or its other name chat_template_args (an object whose entries become
// Extra, as vLLM and Dynamo pass them). Other keys
// (model, temperature, ...) are not template variables and are ignored. An
// absent add_generation_prompt is false: OpenAI-style servers default it to
// true, and the caller sets it as its server does.
func DecodeRequest(data []byte) (Input, error) { return decodeRequest(data, false) }

// DecodeRequestKwargs is DecodeRequest where every other top-level key is a
// template kwarg too (as in the JSON lines of kv-inspect render);
// chat_template_kwargs entries win over them.
func DecodeRequestKwargs(data []byte) (Input, error) { return decodeRequest(data, true) }

func decodeRequest(data []byte, topLevelKwargs bool) (Input, error) {
	v, err := DecodeJSON(data)
	if err != nil {
		return Input{}, fmt.Errorf("chattemplate: request: %w", err)
	}
	d, ok := v.(*Dict)
	if !ok {
		return Input{}, errors.New("chattemplate: request is not a JSON object")
	}
	var in Input
	kwargsSeen := false
	for i, k := range d.keys {
		key := k.(string)
		val := d.vals[i]
		switch key {
		case "messages":
			l, ok := val.(*List)
			if !ok {
				return Input{}, errors.New("chattemplate: request messages is not a list")
			}
			in.Messages = l.Items
		case "tools":
			switch x := val.(type) {
			case nil:
			case *List:
				in.Tools = x.Items
			default:
				return Input{}, errors.New("chattemplate: request tools is not a list")
			}
		case "documents":
			switch x := val.(type) {
			case nil:
			case *List:
				in.Documents = x.Items
			default:
				return Input{}, errors.New("chattemplate: request documents is not a list")
			}
		case "add_generation_prompt", "continue_final_message":
			b, ok := val.(bool)
			if !ok {
				return Input{}, fmt.Errorf("chattemplate: %s is not a boolean", key)
			}
			if key == "add_generation_prompt" {
				in.AddGenerationPrompt = b
			} else {
				in.ContinueFinalMessage = b
			}
		case "chat_template_kwargs", "chat_template_args":
			// Dynamo's frontend names the member chat_template_args and
			// takes chat_template_kwargs (vLLM's name) as an alias of it;
			// a request with both is one its decoder refuses.
			if kwargsSeen {
				return Input{}, errors.New("chattemplate: chat_template_args and chat_template_kwargs are one member, given twice")
			}
			kwargsSeen = true
			kw, ok := val.(*Dict)
			if !ok {
				return Input{}, fmt.Errorf("chattemplate: %s is not an object", key)
			}
			for j, kk := range kw.keys {
				if in.Extra == nil {
					in.Extra = map[string]any{}
				}
				in.Extra[kk.(string)] = kw.vals[j]
			}
		default:
			if !topLevelKwargs {
				continue
			}
			if in.Extra == nil {
				in.Extra = map[string]any{}
			}
			if _, set := in.Extra[key]; !set {
				in.Extra[key] = val
			}
		}
	}
	return in, nil
}

// Render renders the template for in. Budget overruns wrap
// ErrRenderUnavailable; template errors (undefined attribute of an
// undefined value, type errors, raise_exception) are returned as they are.
func (t *Template) Render(ctx context.Context, in Input) (out string, err error) {
	defer func() {
		// A bug in the interpreter must not take the router down with it.
		if p := recover(); p != nil {
			if a, ok := p.(abort); ok {
				out, err = "", a.err
				return
			}
			out, err = "", fmt.Errorf("%w: internal error: %v", ErrRenderUnavailable, p)
		}
	}()
	r := &renderer{ctx: ctx, fuel: t.fuel, maxOutput: t.maxOutput, now: t.now, dynamo: t.dynamo}
	if r.now == nil {
		r.now = time.Now
	}
	if t.timeout > 0 {
		r.deadline = time.Now().Add(t.timeout)
	}
	if dl, ok := ctx.Deadline(); ok && (r.deadline.IsZero() || dl.Before(r.deadline)) {
		r.deadline = dl
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%w: %w", ErrRenderUnavailable, err)
	}
	if in.ContinueFinalMessage && in.AddGenerationPrompt {
		return "", errors.New("chattemplate: continue_final_message and add_generation_prompt exclude each other")
	}
	root := &scope{}
	bare := in.Bare
	if bare {
		in = Input{Messages: in.Messages, AddGenerationPrompt: in.AddGenerationPrompt, ContinueFinalMessage: in.ContinueFinalMessage}
	}
	if !t.dynamo && !bare {
		for _, k := range sortedKeys(t.tokens) {
			root.set(k, t.tokens[k])
		}
		for _, k := range sortedKeys(in.SpecialTokens) {
			root.set(k, in.SpecialTokens[k])
		}
	}
	keys := make([]string, 0, len(in.Extra))
	for k := range in.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := fromGo(in.Extra[k], 0)
		if err != nil {
			return "", fmt.Errorf("chattemplate: %s: %w", k, err)
		}
		root.set(k, v)
	}
	if t.dynamo && !bare {
		// Dynamo's frontend passes bos_token, eos_token and unk_token, none
		// when the config has no such token, and no other special token;
		// they win over extra variables of the same name, as the rest of
		// its context does.
		for _, k := range []string{"bos_token", "eos_token", "unk_token"} {
			var v any
			if tok, ok := in.SpecialTokens[k]; ok {
				v = tok
			} else if tok, ok := t.tokens[k]; ok {
				v = tok
			}
			root.set(k, v)
		}
	}
	msgs, err := fromGo(orEmptyAny(in.Messages), 0)
	if err != nil {
		return "", fmt.Errorf("chattemplate: messages: %w", err)
	}
	root.set("messages", msgs)
	switch {
	case bare:
	case in.Tools != nil:
		tools, err := fromGo(in.Tools, 0)
		if err != nil {
			return "", fmt.Errorf("chattemplate: tools: %w", err)
		}
		root.set("tools", tools)
	default:
		root.set("tools", nil)
	}
	switch {
	case t.dynamo, bare:
		// The frontend's context has no documents; only its
		// chat_template_args may name some.
	case in.Documents != nil:
		docs, err := fromGo(in.Documents, 0)
		if err != nil {
			return "", fmt.Errorf("chattemplate: documents: %w", err)
		}
		root.set("documents", docs)
	default:
		root.set("documents", nil)
	}
	root.set("add_generation_prompt", in.AddGenerationPrompt)
	o := &output{}
	o.b.Grow(int(min(t.sizeHint.Load(), int64(t.maxOutput))))
	r.top = &scope{parent: root}
	if _, err := r.execBody(t.body, r.top, o); err != nil {
		if errors.Is(err, ErrRenderUnavailable) {
			return "", err
		}
		return "", fmt.Errorf("chattemplate: %w", err)
	}
	t.sizeHint.Store(int64(o.b.Len()))
	if in.ContinueFinalMessage {
		return continueFinal(o.b.String(), msgs.(*List))
	}
	return o.b.String(), nil
}

// continueFinal cuts text after the final message's text as transformers'
// continue_final_message does.
func continueFinal(text string, msgs *List) (string, error) {
	if len(msgs.Items) == 0 {
		return "", errors.New("chattemplate: continue_final_message needs a final message")
	}
	last, ok := msgs.Items[len(msgs.Items)-1].(*Dict)
	if !ok {
		return "", errors.New("chattemplate: continue_final_message: the final message is not an object")
	}
	content, _ := last.Get("content")
	var final string
	switch c := content.(type) {
	case string:
		final = c
	case *List:
		found := false
		for i := len(c.Items) - 1; i >= 0 && !found; i-- {
			if block, ok := c.Items[i].(*Dict); ok {
				if t, ok := block.Get("text"); ok {
					final, found = toStr(t), true
				}
			}
		}
		if !found {
			return "", errors.New("chattemplate: continue_final_message is set but the final message has no text to continue")
		}
	default:
		return "", errors.New("chattemplate: continue_final_message: the final message's content is neither text nor a list")
	}
	stripped := pyStrip(final, "", false, true, true)
	loc := strings.LastIndex(text, stripped)
	if loc < 0 {
		return "", errors.New("chattemplate: continue_final_message is set but the final message does not appear in the render")
	}
	lstripped := pyStrip(final, "", false, true, false)
	if end := loc + len(lstripped); end <= len(text) && text[loc:end] == final {
		return text[:end], nil
	}
	return text[:loc+len(stripped)], nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func orEmptyAny(s []any) []any {
	if s == nil {
		return []any{}
	}
	return s
}

// maxRange is the sandbox's range limit (jinja2.sandbox.MAX_RANGE).
const maxRange = 100_000

var globals map[string]any

func init() {
	globals = map[string]any{
		"range":           &builtin{name: "range", fn: builtinRange},
		"namespace":       &builtin{name: "namespace", fn: builtinNamespace},
		"dict":            &builtin{name: "dict", fn: builtinDict},
		"raise_exception": &builtin{name: "raise_exception", fn: builtinRaise},
		"strftime_now":    &builtin{name: "strftime_now", fn: builtinStrftimeNow},
		"cycler":          &builtin{name: "cycler", fn: builtinCycler},
		"joiner":          &builtin{name: "joiner", fn: builtinJoiner},
	}
}

// builtinCycler is Jinja's cycler(*items).
func builtinCycler(_ *renderer, args []any, kw *Dict) (any, error) {
	if kw != nil && kw.Len() > 0 {
		return nil, errors.New("cycler() takes no keyword arguments")
	}
	if len(args) == 0 {
		return nil, errors.New("at least one item has to be provided")
	}
	return &cycler{items: append([]any(nil), args...)}, nil
}

// builtinJoiner is Jinja's joiner(sep=", "): a callable that gives "" the
// first time and sep after.
func builtinJoiner(_ *renderer, args []any, kw *Dict) (any, error) {
	a := argList{pos: args, kw: kw}
	if len(args) > 1 {
		return nil, fmt.Errorf("joiner() takes at most 1 argument (%d given)", len(args))
	}
	var sep any = ", "
	if v, ok := a.get(0, "sep"); ok {
		sep = v
	}
	used := false
	return &builtin{name: "joiner", fn: func(_ *renderer, args []any, kw *Dict) (any, error) {
		if len(args) > 0 || kw != nil && kw.Len() > 0 {
			return nil, errors.New("joiner takes no arguments")
		}
		if !used {
			used = true
			return "", nil
		}
		return sep, nil
	}}, nil
}

func builtinRange(r *renderer, args []any, _ *Dict) (any, error) {
	var nums []int64
	for _, a := range args {
		n, ok := intOf(a)
		if !ok {
			return nil, fmt.Errorf("'%s' object cannot be interpreted as an integer", typeName(a))
		}
		nums = append(nums, n)
	}
	start, stop, step := int64(0), int64(0), int64(1)
	switch len(nums) {
	case 1:
		stop = nums[0]
	case 2:
		start, stop = nums[0], nums[1]
	case 3:
		start, stop, step = nums[0], nums[1], nums[2]
	default:
		return nil, fmt.Errorf("range expected 1 to 3 arguments, got %d", len(nums))
	}
	if step == 0 {
		return nil, errors.New("range() arg 3 must not be zero")
	}
	var n int64
	if step > 0 && start < stop {
		n = (stop - start + step - 1) / step
	} else if step < 0 && start > stop {
		n = (start - stop - step - 1) / -step
	}
	if n > maxRange || n < 0 {
		return nil, fmt.Errorf("range too big: the sandbox blocks ranges larger than %d", maxRange)
	}
	if err := r.step(n); err != nil {
		return nil, err
	}
	out := make([]any, n)
	for i := range out {
		out[i] = start + int64(i)*step
	}
	return &List{Items: out}, nil
}

func builtinNamespace(_ *renderer, args []any, kw *Dict) (any, error) {
	d := &Dict{}
	for _, a := range args {
		src, ok := a.(*Dict)
		if !ok {
			return nil, errors.New("namespace() takes a mapping or keyword arguments")
		}
		for i, k := range src.keys {
			d.Set(k, src.vals[i])
		}
	}
	if kw != nil {
		for i, k := range kw.keys {
			d.Set(k, kw.vals[i])
		}
	}
	return &Namespace{d: d}, nil
}

func builtinDict(_ *renderer, args []any, kw *Dict) (any, error) {
	d := &Dict{}
	for _, a := range args {
		src, ok := a.(*Dict)
		if !ok {
			return nil, errors.New("dict() takes a mapping or keyword arguments")
		}
		for i, k := range src.keys {
			d.Set(k, src.vals[i])
		}
	}
	if kw != nil {
		for i, k := range kw.keys {
			d.Set(k, kw.vals[i])
		}
	}
	return d, nil
}

func builtinRaise(_ *renderer, args []any, _ *Dict) (any, error) {
	msg := ""
	if len(args) > 0 {
		msg = toStr(args[0])
	}
	return nil, fmt.Errorf("%w: %s", ErrRaised, msg)
}

func builtinStrftimeNow(r *renderer, args []any, _ *Dict) (any, error) {
	if len(args) != 1 {
		return nil, errors.New("strftime_now takes one format argument")
	}
	f, ok := args[0].(string)
	if !ok {
		return nil, errors.New("strftime_now format must be a string")
	}
	return strftime(r.now(), f)
}
