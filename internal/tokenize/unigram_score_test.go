package tokenize_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/continuum-router/continuum/internal/tokenize"
)

// The library reads Unigram scores with serde_json's default number parser,
// which is not always correctly rounded, and the best cut of a word is
// decided by exact comparisons of score sums. The expected ids are from the
// Hugging Face tokenizers Rust core, npm `tokenizers` 0.23.2
// (Tokenizer.fromString, encode(text, null, {addSpecialTokens})).

// TestUnigramScoresReadAsTheLibraryGolden: in spm_unigram_cf the cuts
// "▁ 99 55 5 59" and "▁ 99 5 55 59" of "9955559" tie with correctly rounded
// scores (the first found, "5 55", is kept), but with the scores as the
// library reads them "55 5" sums higher.
func TestUnigramScoresReadAsTheLibraryGolden(t *testing.T) {
	t.Parallel()
	tk := loadModel(t, "spm_unigram_cf")
	for _, c := range []struct {
		text    string
		special bool
		want    []uint32
	}{
		{"9955559", false, []uint32{3, 1213, 1239, 3505, 914}},
		{"9955559", true, []uint32{3, 1213, 1239, 3505, 914, 1}},
		{"\u25819955559 x 9955559", false, []uint32{3, 1213, 1239, 3505, 914, 3, 809, 3, 1213, 1239, 3505, 914}},
	} {
		got, err := tk.Encode(c.text, c.special)
		if err != nil {
			t.Fatalf("%q: %v", c.text, err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q (special %v): got %v, want %v (tokenizers 0.23.2)", c.text, c.special, got, c.want)
		}
	}
}

// TestUnigramScoresReadAsTheLibrary: a vocabulary of "ab" scored ab, "a"
// scored a and "b" scored 0 cuts "ab" whole exactly when the library reads
// ab as no lower than a (a tie keeps the cut found first, "ab"). The rows
// pin how the library reads long digit strings, digits past a uint64,
// exponents and numbers near the ends of the float64 range.
func TestUnigramScoresReadAsTheLibrary(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ab, a string
		want  []uint32
	}{
		{"-7.229897022247315", "-7.2298970222473145", []uint32{1}}, // the two read alike
		{"-7.2298970222473145", "-7.229897022247315", []uint32{1}},
		{"-7.2298970222473145", "-7.2298970222473145", []uint32{1}},
		{"-9.008495330810547", "-9.008495330810549", []uint32{1}},
		{"-9.008495330810547", "-9.008495330810547", []uint32{1}},
		{"-12345678901234567890123", "-1.2345678901234568e+22", []uint32{1}},
		{"-12345678901234567890123", "-1.2345678901234566e+22", []uint32{2, 3}},
		{"-1234567890123456789.5", "-1.2345678901234568e+18", []uint32{1}},
		{"-1234567890123456789.5", "-1.2345678901234565e+18", []uint32{2, 3}},
		{"-18446744073709551615.7", "-1.8446744073709552e+19", []uint32{1}},
		{"-18446744073709551615.7", "-1.844674407370955e+19", []uint32{2, 3}},
		{"-18446744073709551616", "-1.8446744073709552e+19", []uint32{1}},
		{"-18446744073709551616", "-1.844674407370955e+19", []uint32{2, 3}},
		{"-184467440737095516159", "-1.844674407370955e+20", []uint32{1}},
		{"-184467440737095516159", "-1.8446744073709548e+20", []uint32{2, 3}},
		{"-1844674407370955161.59", "-1.8446744073709553e+18", []uint32{1}},
		{"-1844674407370955161.59", "-1.844674407370955e+18", []uint32{2, 3}},
		{"-0.000000000000000000000000001234567890123456789", "-1.234567890123457e-27", []uint32{1}},
		{"-0.000000000000000000000000001234567890123456789", "-1.2345678901234567e-27", []uint32{2, 3}},
		{"-123.456e-2", "-1.23456", []uint32{1}},
		{"-123.456e-2", "-1.2345599999999999", []uint32{1}},
		{"-9.999999999999999999999", "-10", []uint32{1}},
		{"-9.999999999999999999999", "-9.999999999999998", []uint32{2, 3}},
		{"-1E2", "-100", []uint32{1}},
		{"-1E2", "-99.99999999999999", []uint32{1}},
		{"-0.1", "-0.1", []uint32{1}},
		{"-0.1", "-0.09999999999999999", []uint32{1}},
		{"-3.3333333333333335", "-3.3333333333333335", []uint32{1}},
		{"-3.3333333333333335", "-3.333333333333333", []uint32{2, 3}},
		{"-2.2250738585072014e-300", "-2.2250738585072014e-300", []uint32{1}},
		{"-2.2250738585072014e-300", "-2.225073858507201e-300", []uint32{2, 3}},
		{"-4.9406564584124654e-310", "-4.94065645841247e-310", []uint32{1}},
		{"-4.9406564584124654e-310", "-4.9406564584124e-310", []uint32{2, 3}},
		{"-1e-330", "-0", []uint32{1}},
		{"-1e-330", "5e-324", []uint32{2, 3}},
		{"-17976931348623157e292", "-1.7976931348623157e+308", []uint32{1}},
		{"-17976931348623157e292", "-1.7976931348623155e+308", []uint32{1}},
		{"-0.30000000000000004", "-0.30000000000000004", []uint32{1}},
		{"-0.30000000000000004", "-0.3", []uint32{2, 3}},
		{"-123456789012345678e-30", "-1.234567890123457e-13", []uint32{1}},
		{"-123456789012345678e-30", "-1.2345678901234566e-13", []uint32{2, 3}},
		{"-6.02214076e23", "-6.02214076e+23", []uint32{1}},
		{"-6.02214076e23", "-6.022140759999999e+23", []uint32{2, 3}},
		{"-1.00000000000000011102230246251565404236316680908203125", "-1.0000000000000002", []uint32{1}},
		{"-1.00000000000000011102230246251565404236316680908203125", "-1", []uint32{2, 3}},
	} {
		cfg := fmt.Sprintf(`{"version":"1.0","added_tokens":[],"normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,"model":{"type":"Unigram","unk_id":0,"vocab":[["<unk>",-1000.0],["ab",%s],["a",%s],["b",0.0]],"byte_fallback":false}}`, c.ab, c.a)
		tk, err := tokenize.Load([]byte(cfg))
		if err != nil {
			t.Fatalf("ab %s, a %s: %v", c.ab, c.a, err)
		}
		got, err := tk.Encode("ab", false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("ab %s, a %s: got %v, want %v (tokenizers 0.23.2)", c.ab, c.a, got, c.want)
		}
	}
}
