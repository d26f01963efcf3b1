package tokenize

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRegexTimeoutFailsEncode: a fallback regex that backtracks past its
// budget fails the encode with an error; it never yields a partial split.
func TestRegexTimeoutFailsEncode(t *testing.T) {
	saved := regexTimeout
	regexTimeout = 50 * time.Millisecond
	defer func() { regexTimeout = saved }()

	vocab := map[string]uint32{}
	for r, b := range runeToByte {
		vocab[string(r)] = uint32(b)
	}
	model, err := json.Marshal(map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}})
	if err != nil {
		t.Fatal(err)
	}
	file := `{"added_tokens": [], "normalizer": null, "post_processor": null, "model": ` + string(model) + `,
	  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
	    {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": false},
	    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}}`
	tk, err := Load([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := tk.Encode("aaaa", false); err != nil || len(ids) != 4 {
		t.Fatalf("short text: %v, %v", ids, err)
	}
	_, err = tk.Encode(strings.Repeat("a", 40)+"!", false)
	if err == nil || !strings.Contains(err.Error(), "regex") {
		t.Fatalf("got %v, want a regex timeout error", err)
	}
	// The tokenizer still works after a failed encode.
	if ids, err := tk.Encode("aaaa", false); err != nil || len(ids) != 4 {
		t.Fatalf("after the timeout: %v, %v", ids, err)
	}
	if _, err := tk.Encode(strings.Repeat("a", MaxTextBytes+1), false); !errors.Is(err, ErrPromptTooLarge) {
		t.Fatalf("text over MaxTextBytes: %v", err)
	}
}

// TestFallbackClassesFollowEngine: a pattern without a scanner still puts a
// letter of a newer Unicode than Go's (U+13E97, Unicode 16) in \p{L} and
// \p{Lo}, inside and outside bracket classes and negated, as the library's
// regex engine does.
func TestFallbackClassesFollowEngine(t *testing.T) {
	const newLetter = "\U00013e97"
	for _, tc := range []struct {
		pattern, text string
		want          []string
	}{
		{`\p{L}+`, "a" + newLetter + "b.", []string{"a" + newLetter + "b"}},
		{`\P{L}+`, "a" + newLetter + "b.", []string{"."}},
		{`[^\r\n\p{L}\p{N}]+`, newLetter + ".", []string{"."}},
		{`[\p{Lu}\p{Lo}]+`, "x" + newLetter + "Y", []string{newLetter + "Y"}},
		{`\p{Lo}|\.`, newLetter + ".", []string{newLetter, "."}},
		// The engine's \w takes spacing marks, ² and circled letters, and
		// not ৴ (a number the backtracking engine's \w leaves out too).
		{`\w+`, "a\u0903²Ⓐ" + newLetter + "৴b", []string{"a\u0903²Ⓐ" + newLetter, "b"}},
		{`\W+`, "a²৴.b", []string{"৴."}},
		{`[\w.]+`, "x²Ⓐ.y ৴", []string{"x", "Ⓐ.y"}}, // ² is not \w inside a bracket class
		{`\w+|[^\w\s]+`, "x².y", []string{"x²", ".", "y"}},
		{`[^\w\s]+`, "x².y", []string{"²."}},
		{`\d+`, "1\U00010d40\U00010d412", []string{"1\U00010d40\U00010d412"}},
	} {
		m, err := compilePattern(patternJSON{Regex: &tc.pattern})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		m.each(tc.text, func(a, b int) { got = append(got, tc.text[a:b]) })
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%s on %q: got %q, want %q", tc.pattern, tc.text, got, tc.want)
		}
	}
	// A nested bracket, a POSIX class or an intersection would be read
	// without complaint and otherwise: refused.
	for _, p := range []string{`[a[b]]\p{L}`, `[[:alpha:]]+`, `[\p{L}&&[^a-z]]`, `[a-z&&b]`} {
		if got, err := enginePattern(p); err == nil {
			t.Errorf("%s rewritten as %s, want it refused", p, got)
		}
	}
}

// TestEnginePatternQuantifiers: Ruby-syntax quantifiers the backtracking
// engine lacks or reads otherwise, written as it reads them. What each
// stands for was measured with the Hugging Face Rust core (a Split of
// that pattern): a*+ab|. cuts "aab" into a, a, b (possessive); \d{2}+|.
// cuts "12345" into 1234, 5 (a repeated interval).
func TestEnginePatternQuantifiers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ pattern, want string }{
		{`a?+b`, `(?>a?)b`},
		{`a*+ab|.`, `(?>a*)ab|.`},
		{`\s++$`, `(?>\s+)$`},
		{`[\r\n]*+x`, `(?>[\r\n]*)x`},
		{`(?:ab)*+c`, `(?>(?:ab)*)c`},
		{`(?i:x|y)++`, `(?>(?i:x|y)+)`},
		{`\d{2}+|.`, `(?:[\d` + engineClassExtra["Nd"] + `]{2})+|.`},
		{`x{1,3}+`, `(?:x{1,3})+`},
		{`x{1,3}++`, `(?>(?:x{1,3})+)`},
		{`x{,2}y{3,}z{4}?`, `x{0,2}y{3,}z{4}?`},
		{`a+?b*?c??`, `a+?b*?c??`},
		{`(?<=a)(?!b)(?<n>c)+`, `(?<=a)(?!b)(?<n>c)+`},
		{`{x}{,}é?+`, `{x}{,}(?>é?)`},
		{`\p{Han}++\x{1F600}{2}+`, `(?>\p{Han}+)(?:\x{1F600}{2})+`},
	} {
		got, err := enginePattern(tc.pattern)
		if err != nil || got != tc.want {
			t.Errorf("%s: %s, %v; want %s", tc.pattern, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		pattern, text string
		want          []string
	}{
		{`a*+ab|.`, "aab", []string{"a", "a", "b"}},
		{`\d{2}+|.`, "12345", []string{"1234", "5"}},
		{`^\s+|\s+$|\S+|\s+`, "  a \n b  \nc", []string{"  ", "a", " ", "\n ", "b", "  ", "\n", "c"}},
	} {
		m, err := compilePattern(patternJSON{Regex: &tc.pattern})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		m.each(tc.text, func(a, b int) { got = append(got, tc.text[a:b]) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s on %q: %q, want %q", tc.pattern, tc.text, got, tc.want)
		}
	}
}
