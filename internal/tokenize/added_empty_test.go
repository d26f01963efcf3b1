package tokenize_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/tokenize"
)

// TestAddedTokenNormalizedToEmpty: a normalized added token whose content
// the normalizer turns into "" stays a pattern of the library's matcher,
// where the empty pattern matches at every byte: each segment is cut into
// single bytes ("abc" is [a b c], not [abc]) and a multi-byte character
// panics the library. Such a file is refused as unsupported (the test also
// takes the library's ids, were it encoded; tokenizers 0.23.2).
func TestAddedTokenNormalizedToEmpty(t *testing.T) {
	const config = `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":5,"content":"q","single_word":false,"lstrip":false,"rstrip":false,"normalized":true,"special":false}],"normalizer":{"type":"Replace","pattern":{"String":"q"},"content":""},"pre_tokenizer":null,"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"a":0,"b":1,"c":2,"ab":3,"abc":4},"merges":["a b","ab c"]}}`
	tk, err := tokenize.Load([]byte(config))
	if err != nil {
		if !strings.Contains(err.Error(), "unsupported") {
			t.Fatalf("load: %v (want an unsupported-feature error, or the library's ids)", err)
		}
		return
	}
	for _, w := range []hfRefText{{"abc", []uint32{0, 1, 2}}, {"aqbc", []uint32{0, 1, 2}}, {"q", nil}} {
		got, err := tk.Encode(w.text, false)
		if err != nil {
			t.Fatalf("%q: %v", w.text, err)
		}
		if !slices.Equal(got, w.want) {
			t.Errorf("%q: got %v, want %v (tokenizers 0.23.2)", w.text, got, w.want)
		}
	}
}
