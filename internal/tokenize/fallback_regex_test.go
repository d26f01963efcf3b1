package tokenize_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/tokenize"
)

// fallbackRegexConfig is a small BPE tokenizer whose only pre-tokenizer is a
// Split (Isolated) with the given pattern, which no hand-written scanner
// knows, so it runs on the backtracking fallback engine.
func fallbackRegexConfig(pattern string) string {
	return `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"` + pattern + `"},"behavior":"Isolated","invert":false},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"a":0,"b":1,"\n":2,"s":3,"\u00df":4,"x":5,"a\n":6,"a\nb":7,"x\u00df":8,"x\u00dfx":9},"merges":[["a","\n"],["a\n","b"],["x","\u00df"],["x\u00df","x"]]}}`
}

// TestFallbackRegexInlineOptions: the library's engine is Oniguruma with
// Ruby syntax, where the inline option (?m) is dot-all (. matches "\n"):
// the fallback engine gives the library's ids for it. Expected ids: npm
// tokenizers 0.23.2, encode(text, null, {addSpecialTokens: false}).
func TestFallbackRegexInlineOptions(t *testing.T) {
	runHFRef(t, []hfRefCase{
		{name: "m_is_dotall", config: fallbackRegexConfig(`(?m).+`), want: []hfRefText{{"a\nb", []uint32{7}}}},
	})
}

// TestFallbackRegexRefusesOptions: what the fallback engine would read
// otherwise than the library is refused (the file does not load, so no
// encoding is silently wrong): (?s), (?u) and (?d) are no group options in
// Ruby syntax (the library refuses the file: "undefined group option"),
// and under (?i) the library folds case by Unicode case folding, where
// \p{Lu} stays upper case and "ss" matches ß. The case-insensitive
// contraction group of the byte-level patterns, beside \p{L} outside it,
// still loads, as does a case-sensitive "ss".
func TestFallbackRegexRefusesOptions(t *testing.T) {
	t.Parallel()
	for _, pattern := range []string{`(?s).+`, `(?u)a`, `(?d)a`, `(?i)\\p{Lu}+`, `(?i:ss)`, `x(?i)(?:a|st)`} {
		if _, err := tokenize.Load([]byte(fallbackRegexConfig(pattern))); err == nil {
			t.Errorf("%s: loaded", pattern)
		}
	}
	for _, pattern := range []string{`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}]?\\p{L}+|ss`, `(?-i:ss)`, `(?x) a b`} {
		if _, err := tokenize.Load([]byte(fallbackRegexConfig(pattern))); err != nil {
			t.Errorf("%s: %v", pattern, err)
		}
	}
}

// TestEncodeContextFallbackRegexDeadline: an encode under a context that
// ends (the render's 2 s budget) ends soon after it, even inside one match
// of the fallback engine, which looks at the context only between matches:
// a match is bounded well below the budget (it was bounded by 2 s, the
// whole budget again).
func TestEncodeContextFallbackRegexDeadline(t *testing.T) {
	tk, err := tokenize.Load([]byte(fallbackRegexConfig(`(a|aa)+b|a`)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = tk.EncodeContext(ctx, nil, strings.Repeat("a", 60), false)
	if took := time.Since(start); took > 1900*time.Millisecond { // the match timeout is 1 s; it was 2 s
		t.Fatalf("EncodeContext with a 50ms deadline returned after %v (err %v)", took, err)
	}
}
