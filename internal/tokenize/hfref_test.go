package tokenize_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/continuum-router/continuum/internal/tokenize"
)

// The cases of this file are small tokenizer.json files for behaviours of
// the library that the golden models do not reach. Their expected ids come
// from the Hugging Face tokenizers Rust core, npm `tokenizers` 0.23.2
// (Tokenizer.fromString, encode(text, null, {addSpecialTokens: false})):
// none of the files has a post-processor but spm_first, and addSpecialTokens
// false is what the table holds.

type hfRefText struct {
	text string
	want []uint32
}

type hfRefCase struct {
	name   string
	config string
	want   []hfRefText
}

// spmFirst marks the case built from the spm_unigram golden model with its
// Metaspace prepend_scheme set to "first".
const spmFirst = "spm_first"

func runHFRef(t *testing.T, cases []hfRefCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := []byte(c.config)
			if c.config == spmFirst {
				data = bytes.ReplaceAll(tokenizerFile(t, "spm_unigram"), []byte(`"prepend_scheme": "always"`), []byte(`"prepend_scheme": "first"`))
			}
			tk, err := tokenize.Load(data)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				got, err := tk.Encode(w.text, false)
				if err != nil {
					t.Fatalf("%q: %v", w.text, err)
				}
				if !slices.Equal(got, w.want) {
					t.Errorf("%q: got %v, want %v (tokenizers 0.23.2)", w.text, got, w.want)
				}
			}
		})
	}
}

// TestMetaspaceFirstAfterRemovedStart: Metaspace's "first" scheme prepends
// only to a text whose normalized start still has the original's offset 0;
// a normalizer that removed the first character moves it on.
func TestMetaspaceFirstAfterRemovedStart(t *testing.T) { runHFRef(t, hfRefMetaspace) }

// TestDuplicateAddedTokens: of added tokens with one content, the last
// entry's flags count, with the first entry's id.
func TestDuplicateAddedTokens(t *testing.T) { runHFRef(t, hfRefDup) }

// TestAddedTokenSwallowedByStrip: a match that an earlier match's rstrip
// has already consumed is left with an empty span once its own lstrip is
// clamped to the earlier match's end; the library drops every empty split,
// so that match gives no token.
func TestAddedTokenSwallowedByStrip(t *testing.T) { runHFRef(t, hfRefSwallowed) }

// TestFallbackWordBoundary: \b and \B of a fallback regex use the library
// engine's \w (², ½, circled letters and marks are word characters).
func TestFallbackWordBoundary(t *testing.T) { runHFRef(t, hfRefBoundary) }

var hfRefMetaspace = []hfRefCase{
	{
		name:   "e1", // Strip removes the leading spaces
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":{"type":"Strip","strip_left":true,"strip_right":false},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"▁":0,"h":1,"i":2,"hi":3,"▁hi":4},"merges":["h i","▁ hi"]}}`,
		want: []hfRefText{
			{"  hi", []uint32{3}},
			{"hi", []uint32{4}},
		},
	},
	{
		name:   "ms_strip", // Strip, both sides
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":40,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":{"type":"Strip","strip_left":true,"strip_right":true},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"▁":0,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20,"u":21,"v":22,"w":23,"x":24,"y":25,"z":26,"X":27,"Y":28,"Z":29,"<":30,">":31},"merges":[]}}`,
		want: []hfRefText{
			{"  hi there", []uint32{8, 9, 0, 20, 8, 5, 18, 5}},
			{"\t\nhi", []uint32{8, 9}},
		},
	},
	{
		name:   "ms_stripacc", // NFD + StripAccents removes a leading mark
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":40,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":{"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"StripAccents"}]},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"▁":0,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20,"u":21,"v":22,"w":23,"x":24,"y":25,"z":26,"X":27,"Y":28,"Z":29,"<":30,">":31},"merges":[]}}`,
		want: []hfRefText{
			{"\u0301hi", []uint32{8, 9}},
			{"ÀHi", []uint32{0, 9}},
		},
	},
	{
		name:   "ms_bert", // BertNormalizer clean_text and accents
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":40,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"▁":0,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20,"u":21,"v":22,"w":23,"x":24,"y":25,"z":26,"X":27,"Y":28,"Z":29,"<":30,">":31},"merges":[]}}`,
		want: []hfRefText{
			{"\u0001hi", []uint32{8, 9}},
			{"\u200bhi", []uint32{8, 9}},
			{"\u0301hi", []uint32{8, 9}},
		},
	},
	{
		name:   "ms_nmt", // Nmt removes a control character
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":40,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":{"type":"Nmt"},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"▁":0,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20,"u":21,"v":22,"w":23,"x":24,"y":25,"z":26,"X":27,"Y":28,"Z":29,"<":30,">":31},"merges":[]}}`,
		want: []hfRefText{
			{"\u0001hi", []uint32{8, 9}},
		},
	},
	{
		name:   "ms_repl_empty", // Replace with nothing
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":40,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":{"type":"Replace","pattern":{"String":"a"},"content":""},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"▁":0,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20,"u":21,"v":22,"w":23,"x":24,"y":25,"z":26,"X":27,"Y":28,"Z":29,"<":30,">":31},"merges":[]}}`,
		want: []hfRefText{
			{"ahi", []uint32{8, 9}},
			{"hi", []uint32{0, 8, 9}},
		},
	},
	{
		name:   "ms_repl_multi", // Replace of two characters: the content takes the second's span
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":40,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":{"type":"Replace","pattern":{"String":"ab"},"content":"z"},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"▁":0,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20,"u":21,"v":22,"w":23,"x":24,"y":25,"z":26,"X":27,"Y":28,"Z":29,"<":30,">":31},"merges":[]}}`,
		want: []hfRefText{
			{"abhi", []uint32{26, 8, 9}},
		},
	},
	{
		name:   "ms_strip_seqpre", // Strip, then WhitespaceSplit before Metaspace
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":40,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":{"type":"Strip","strip_left":true,"strip_right":false},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true}]},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"▁":0,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20,"u":21,"v":22,"w":23,"x":24,"y":25,"z":26,"X":27,"Y":28,"Z":29,"<":30,">":31},"merges":[]}}`,
		want: []hfRefText{
			{"  hi there", []uint32{8, 9, 20, 8, 5, 18, 5}},
		},
	},
	{
		name:   "c_prep_strip", // Prepend then Strip: the stripped space had the first character's span
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":" "},{"type":"Strip","strip_left":true,"strip_right":false}]},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"▁":0,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20,"u":21,"v":22,"w":23,"x":24,"y":25,"z":26,"X":27,"Y":28,"Z":29,"<":30,">":31," ":32,"_":33},"merges":[]}}`,
		want: []hfRefText{
			{"hi", []uint32{0, 8, 9}},
			{"ahi", []uint32{0, 1, 8, 9}},
		},
	},
	{
		name:   "c_repl_expand_del", // a -> bc, then b removed: c keeps a's span
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":{"type":"Sequence","normalizers":[{"type":"Replace","pattern":{"String":"a"},"content":"bc"},{"type":"Replace","pattern":{"String":"b"},"content":""}]},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"▁":0,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20,"u":21,"v":22,"w":23,"x":24,"y":25,"z":26,"X":27,"Y":28,"Z":29,"<":30,">":31," ":32,"_":33},"merges":[]}}`,
		want: []hfRefText{
			{"ahi", []uint32{0, 3, 8, 9}},
		},
	},
	{
		name:   "c_nfkc_del", // NFKC expands the ligature, then f removed: i keeps its span
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":{"type":"Sequence","normalizers":[{"type":"NFKC"},{"type":"Replace","pattern":{"String":"f"},"content":""}]},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"▁":0,"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20,"u":21,"v":22,"w":23,"x":24,"y":25,"z":26,"X":27,"Y":28,"Z":29,"<":30,">":31," ":32,"_":33},"merges":[]}}`,
		want: []hfRefText{
			{"ﬁhi", []uint32{0, 9, 8, 9}},
		},
	},
	{
		name:   "spm_first", // Precompiled hands a removed character's span on
		config: spmFirst,
		want: []hfRefText{
			{"\u0001hi", []uint32{3, 1903}},
		},
	},
}

var hfRefDup = []hfRefCase{
	{
		name:   "e5", // the second entry's lstrip
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":5,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":5,"content":"<x>","single_word":false,"lstrip":true,"rstrip":false,"normalized":false,"special":true}],"normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"a":0,"d":1,"o":2,"g":3," ":4},"merges":[]}}`,
		want: []hfRefText{
			{"a  <x>", []uint32{0, 5}},
		},
	},
	{
		name:   "add_dup3", // three entries: the last, plain, wins
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":5,"content":"<x>","single_word":false,"lstrip":true,"rstrip":false,"normalized":false,"special":true},{"id":5,"content":"<x>","single_word":false,"lstrip":false,"rstrip":true,"normalized":false,"special":true},{"id":5,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"a":0,"d":1,"o":2,"g":3," ":4},"merges":[]}}`,
		want: []hfRefText{
			{"a  <x>", []uint32{0, 4, 4, 5}},
			{"a <x>  a", []uint32{0, 4, 5, 4, 4, 0}},
		},
	},
	{
		name:   "add_dup_ids", // the first id, the last flags
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":5,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":6,"content":"<x>","single_word":false,"lstrip":true,"rstrip":false,"normalized":false,"special":true}],"normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"a":0,"d":1,"o":2,"g":3," ":4},"merges":[]}}`,
		want: []hfRefText{
			{"a  <x>", []uint32{0, 5}},
		},
	},
	{
		name:   "d_nl_r", // a later raw entry drops the normalized one
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":20,"content":"<X>","single_word":false,"lstrip":true,"rstrip":false,"normalized":true,"special":true},{"id":20,"content":"<X>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":{"type":"Lowercase"},"pre_tokenizer":null,"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"a":0,"d":1,"o":2,"g":3," ":4,"<":5,"x":6,">":7,"X":8,"y":9,"Y":10},"merges":[]}}`,
		want: []hfRefText{
			{"a <x> a", []uint32{0, 4, 5, 6, 7, 4, 0}},
			{"a <X> a", []uint32{0, 4, 11, 4, 0}},
		},
	},
	{
		name:   "d_r_nl", // a later normalized entry replaces the raw one
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":20,"content":"<X>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":20,"content":"<X>","single_word":false,"lstrip":true,"rstrip":false,"normalized":true,"special":true}],"normalizer":{"type":"Lowercase"},"pre_tokenizer":null,"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"a":0,"d":1,"o":2,"g":3," ":4,"<":5,"x":6,">":7,"X":8,"y":9,"Y":10},"merges":[]}}`,
		want: []hfRefText{
			{"a <X> a", []uint32{0, 11, 4, 0}},
			{"a <x> a", []uint32{0, 11, 4, 0}},
		},
	},
	{
		name:   "d_sw2", // a later single_word entry
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":20,"content":"<X>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":20,"content":"<X>","single_word":true,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":{"type":"Lowercase"},"pre_tokenizer":null,"post_processor":null,"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"a":0,"d":1,"o":2,"g":3," ":4,"<":5,"x":6,">":7,"X":8,"y":9,"Y":10},"merges":[]}}`,
		want: []hfRefText{
			{"a<X>a", []uint32{0, 5, 6, 7, 0}},
		},
	},
}

var hfRefBoundary = []hfRefCase{
	{
		name:   "e3", // \b
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"\\b"},"behavior":"Isolated","invert":false},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","unk_token":"[UNK]","vocab":{"[UNK]":0,"x²":1,"x":2,"²":3," ":4,"y":5}}}`,
		want: []hfRefText{
			{"x² y", []uint32{1, 4, 5}},
		},
	},
	{
		name:   "re_b_iso", // \b
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"\\b"},"behavior":"Isolated","invert":false},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","unk_token":"[UNK]","vocab":{"[UNK]":0,"x²":1,"x":2,"²":3," ":4,"y":5,"a_b":6,"ⓐ":7,"é":8,"e":9,"́":10,"1":11,"-":12,"½":13}}}`,
		want: []hfRefText{
			{"a_b ⓐ é e\u0301 1-½", []uint32{6, 4, 7, 4, 8, 4, 0, 4, 11, 12, 13}},
			{"x²x y½", []uint32{0, 4, 0}},
		},
	},
	{
		name:   "re_B_iso", // \B
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"\\B"},"behavior":"Isolated","invert":false},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","unk_token":"[UNK]","vocab":{"[UNK]":0,"x²":1,"x":2,"²":3," ":4,"y":5,"a_b":6,"ⓐ":7,"é":8,"e":9,"́":10,"1":11,"-":12,"½":13}}}`,
		want: []hfRefText{
			{"x²x y½", []uint32{2, 3, 0, 13}},
			{"x² y", []uint32{2, 0}},
		},
	},
	{
		name:   "re_bB", // x\B|\b²
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"x\\B|\\b²"},"behavior":"Isolated","invert":false},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","unk_token":"[UNK]","vocab":{"[UNK]":0,"x²":1,"x":2,"²":3," ":4,"y":5,"a_b":6,"ⓐ":7,"é":8,"e":9,"́":10,"1":11,"-":12,"½":13}}}`,
		want: []hfRefText{
			{"x² y", []uint32{2, 0}},
		},
	},
	{
		name:   "re_bclass", // [\b] stays a backspace
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"[\\b]|\\s"},"behavior":"Isolated","invert":false},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","unk_token":"[UNK]","vocab":{"[UNK]":0,"x²":1,"x":2,"²":3," ":4,"y":5,"a_b":6,"ⓐ":7,"é":8,"e":9,"́":10,"1":11,"-":12,"½":13}}}`,
		want: []hfRefText{
			{"x² y", []uint32{1, 4, 5}},
		},
	},
}

var hfRefSwallowed = []hfRefCase{
	{
		name:   "ws_lstrip_rstrip", // "\n" with lstrip and rstrip; added tokens take ids after the vocab
		config: `{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":5,"content":"\n","single_word":false,"lstrip":true,"rstrip":true,"normalized":false,"special":false}],"normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","vocab":{"[UNK]":0,"a":1,"b":2},"unk_token":"[UNK]"}}`,
		want: []hfRefText{
			{"a\n\n", []uint32{1, 3}},
			{"\n\n", []uint32{3}},
			{"a\n \nb", []uint32{1, 3, 2}},
			{"a \n\n b", []uint32{1, 3, 2}},
			{"\n\n\n", []uint32{3}},
		},
	},
}
