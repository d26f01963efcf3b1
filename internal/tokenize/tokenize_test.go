package tokenize_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/tokenize"
)

// tiny is a small byte-level tokenizer built by hand: the 256 byte tokens
// (ids 0..255 in byte order) and merges "a"+"b" -> 256, "ab"+"c" -> 257.
func tiny(t testing.TB, override map[string]string) []byte {
	t.Helper()
	vocab := make([]string, 0, 260)
	for b := 0; b < 256; b++ {
		vocab = append(vocab, fmt.Sprintf("%q: %d", byteLevelChar(byte(b)), b))
	}
	vocab = append(vocab, `"ab": 256`, `"abc": 257`)
	parts := map[string]string{
		"added_tokens":   `[{"id": 258, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}]`,
		"normalizer":     `null`,
		"pre_tokenizer":  `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}`,
		"post_processor": `{"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|end|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": [258], "tokens": ["<|end|>"]}}}`,
		"decoder":        `null`,
		"truncation":     `null`,
		"padding":        `null`,
		"model":          `{"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false, "byte_fallback": false, "vocab": {` + strings.Join(vocab, ", ") + `}, "merges": ["a b", "ab c"]}`,
	}
	for k, v := range override {
		parts[k] = v
	}
	var b strings.Builder
	b.WriteString("{")
	first := true
	for _, k := range []string{"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder", "model"} {
		v, ok := parts[k]
		if !ok {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		fmt.Fprintf(&b, "%q: %s", k, v)
	}
	b.WriteString("}")
	return []byte(b.String())
}

func byteLevelChar(b byte) string {
	n := 0
	for c := 0; c < 256; c++ {
		printable := c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE && c <= 0xFF
		if c == int(b) {
			if printable {
				return string(rune(c))
			}
			return string(rune(256 + n))
		}
		if !printable {
			n++
		}
	}
	panic("unreachable")
}

func TestTinyTokenizer(t *testing.T) {
	t.Parallel()
	tk, err := tokenize.Load(tiny(t, nil))
	noErr(t, err)
	tests := []struct {
		name    string
		text    string
		special bool
		want    []uint32
	}{
		{"merges", "abc", false, []uint32{257}},
		{"partial merge", "abd", false, []uint32{256, 'd'}},
		{"split before merge", "a bc", false, []uint32{'a', ' ', 'b', 'c'}},
		{"template adds the special token", "abc", true, []uint32{258, 257}},
		{"special token inside text", "ab<|end|>c", false, []uint32{256, 258, 'c'}},
		{"empty", "", false, nil},
		{"empty with special", "", true, []uint32{258}},
		{"invalid utf-8 is U+FFFD", "a\xffb", false, []uint32{'a', 0xEF, 0xBF, 0xBD, 'b'}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tk.Encode(tt.text, tt.special)
			noErr(t, err)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
	if tok, ok := tk.IDToToken(257); !ok || tok != "abc" {
		t.Errorf("IDToToken(257) = %q, %v", tok, ok)
	}
	if tok, ok := tk.IDToToken(258); !ok || tok != "<|end|>" {
		t.Errorf("IDToToken(258) = %q, %v", tok, ok)
	}
	if tok, ok := tk.IDToToken(100000); ok {
		t.Errorf("IDToToken(100000) = %q, true", tok)
	}
	if id, ok := tk.TokenToID("<|end|>"); !ok || id != 258 {
		t.Errorf("TokenToID = %d, %v", id, ok)
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func errContains(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

func TestLoadRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		override map[string]string
		want     string
	}{
		{"unknown model", map[string]string{"model": `{"type": "BacktrackingBpe", "vocab": {}}`}, `unsupported tokenizer.json feature: model "BacktrackingBpe"`},
		{"unigram unk_id outside the vocab", map[string]string{"model": `{"type": "Unigram", "unk_id": 1, "vocab": [["a", 0]]}`}, `unk_id 1 is not in the vocabulary`},
		{"unigram unk_id in an empty vocab", map[string]string{"model": `{"type": "Unigram", "unk_id": 0, "vocab": []}`}, `vocabulary is empty`},
		{"unigram score", map[string]string{"model": `{"type": "Unigram", "unk_id": 0, "vocab": [["a", "x"]]}`}, `Unigram vocab`},
		{"wordpiece without unk_token", map[string]string{"model": `{"type": "WordPiece", "vocab": {}}`}, `WordPiece model: missing field "unk_token"`},
		{"wordpiece without max_input_chars_per_word", map[string]string{"model": `{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "vocab": {}}`}, `missing field "max_input_chars_per_word"`},
		{"wordlevel without vocab", map[string]string{"model": `{"type": "WordLevel", "unk_token": "[UNK]"}`}, `WordLevel model: missing field "vocab"`},
		{"precompiled normalizer without a charsmap", map[string]string{"normalizer": `{"type": "Precompiled", "precompiled_charsmap": ""}`}, `Precompiled normalizer: cannot parse precompiled_charsmap`},
		{"bert normalizer in a sequence", map[string]string{"normalizer": `{"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "BertNormalizer"}]}`}, `BertNormalizer: missing field "clean_text"`},
		{"unknown pre-tokenizer", map[string]string{"pre_tokenizer": `{"type": "Jieba"}`}, `pre-tokenizer "Jieba"`},
		{"fixed length zero", map[string]string{"pre_tokenizer": `{"type": "FixedLength", "length": 0}`}, `length 0 is not positive`},
		{"metaspace after bytelevel", map[string]string{"pre_tokenizer": `{"type": "Sequence", "pretokenizers": [{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}, {"type": "Metaspace", "replacement": "▁"}]}`}, `Metaspace pre-tokenizer after ByteLevel`},
		{"bytelevel normalizer and pre-tokenizer", map[string]string{"normalizer": `{"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "ByteLevel"}]}`}, `ByteLevel normalizer with a ByteLevel pre-tokenizer`},
		{"two bytelevels", map[string]string{"pre_tokenizer": `{"type": "Sequence", "pretokenizers": [{"type": "ByteLevel", "use_regex": false}, {"type": "Digits"}, {"type": "ByteLevel"}]}`}, `two ByteLevel pre-tokenizers`},
		{"punctuation behaviour", map[string]string{"pre_tokenizer": `{"type": "Punctuation", "behavior": "Sideways"}`}, `split behavior "Sideways"`},
		{"split behaviour", map[string]string{"pre_tokenizer": `{"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways", "invert": false}`}, `split behavior "Sideways"`},
		{"post-processor", map[string]string{"post_processor": `{"type": "Whatever"}`}, `post-processor "Whatever"`},
		{"prefix with byte-level", map[string]string{"model": `{"type": "BPE", "continuing_subword_prefix": "##", "vocab": {"a": 0}, "merges": []}`}, `continuing_subword_prefix or end_of_word_suffix with a ByteLevel pre-tokenizer`},
		{"merge shorter than the prefix", map[string]string{"pre_tokenizer": `null`, "model": `{"type": "BPE", "continuing_subword_prefix": "##", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}`}, `shorter than the continuing_subword_prefix`},
		{"dropout", map[string]string{"model": `{"type": "BPE", "dropout": 0.1, "vocab": {"a": 0}, "merges": []}`}, `BPE dropout`},
		{"truncation without strategy", map[string]string{"truncation": `{"max_length": 512}`}, `truncation lacks strategy`},
		{"truncation without stride", map[string]string{"truncation": `{"max_length": 512, "strategy": "LongestFirst"}`}, `truncation lacks stride`},
		{"truncation strategy", map[string]string{"truncation": `{"max_length": 512, "strategy": "Middle", "stride": 0}`}, `truncation strategy "Middle"`},
		{"truncation direction", map[string]string{"truncation": `{"max_length": 512, "strategy": "OnlyFirst", "stride": 0, "direction": "Up"}`}, `truncation direction "Up"`},
		{"padding without direction", map[string]string{"padding": `{"strategy": "BatchLongest"}`}, `padding lacks direction`},
		{"padding without pad_token", map[string]string{"padding": `{"strategy": "BatchLongest", "direction": "Right", "pad_id": 0, "pad_type_id": 0}`}, `padding lacks pad_token`},
		{"padding strategy", map[string]string{"padding": `{"strategy": {"Fixed": -1}, "direction": "Right", "pad_id": 0, "pad_type_id": 0, "pad_token": "x"}`}, `padding strategy`},
		{"metaspace scheme", map[string]string{"pre_tokenizer": `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes"}`}, `prepend_scheme "sometimes"`},
		{"metaspace add_prefix_space against the default scheme", map[string]string{"pre_tokenizer": `{"type": "Metaspace", "replacement": "▁", "add_prefix_space": false}`}, `add_prefix_space false does not match prepend_scheme "always"`},
		{"metaspace add_prefix_space against first", map[string]string{"pre_tokenizer": `{"type": "Metaspace", "replacement": "▁", "add_prefix_space": false, "prepend_scheme": "first"}`}, `does not match prepend_scheme "first"`},
		{"bad regex", map[string]string{"pre_tokenizer": `{"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated", "invert": false}`}, `compile regex`},
		{"merge outside the vocab", map[string]string{"pre_tokenizer": `null`, "model": `{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]}`}, `not in the vocab`},
		{"added token without normalized", map[string]string{"added_tokens": `[{"id": 258, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false, "special": true}]`}, `added token "<|end|>" lacks "normalized"`},
		{"added token without id", map[string]string{"added_tokens": `[{"content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}]`}, `lacks "id"`},
		{"not json", map[string]string{"model": `{`}, `parse tokenizer.json`},
		{"merge of three", map[string]string{"pre_tokenizer": `null`, "model": `{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b a"]}`}, `not two tokens separated by one space`},
		{"merge without a space", map[string]string{"pre_tokenizer": `null`, "model": `{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["ab"]}`}, `not two tokens separated by one space`},
		{"merge pair of one", map[string]string{"pre_tokenizer": `null`, "model": `{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a"]]}`}, `BPE merges`},
		{"merge pair of three", map[string]string{"pre_tokenizer": `null`, "model": `{"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b", "a"]]}`}, `is not a pair`},
		{"negative id", map[string]string{"pre_tokenizer": `null`, "model": `{"type": "BPE", "vocab": {"a": -1}, "merges": []}`}, `BPE vocab`},
		{"id too large", map[string]string{"pre_tokenizer": `null`, "model": `{"type": "BPE", "vocab": {"a": 99999999}, "merges": []}`}, `more than`},
		{"empty vocab", map[string]string{"pre_tokenizer": `null`, "model": `{"type": "BPE", "vocab": {}, "merges": []}`}, `empty vocab`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tokenize.Load(tiny(t, tt.override))
			errContains(t, err, tt.want)
		})
	}
	t.Run("too large", func(t *testing.T) {
		_, err := tokenize.Load(make([]byte, tokenize.MaxFileSize+1))
		errContains(t, err, "more than")
	})
}

// TestUnkMissingFromVocab: a file whose unk_token the vocab lacks loads, as
// the library loads it; only a character that needs the unknown token fails
// the encode.
func TestUnkMissingFromVocab(t *testing.T) {
	t.Parallel()
	tk, err := tokenize.Load(tiny(t, map[string]string{"pre_tokenizer": `null`, "post_processor": `null`,
		"model": `{"type": "BPE", "unk_token": "<unk>", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}`}))
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := tk.Encode("abab", false); err != nil || !slices.Equal(ids, []uint32{2, 2}) {
		t.Fatalf("abab: %v, %v", ids, err)
	}
	_, err = tk.Encode("abz", false)
	errContains(t, err, `needs the unk_token "<unk>", which is not in the vocab`)
	if ids, err := tk.Encode("ba", false); err != nil || !slices.Equal(ids, []uint32{1, 0}) {
		t.Fatalf("ba after a failed encode: %v, %v", ids, err)
	}
}

func TestPromptTooLarge(t *testing.T) {
	t.Parallel()
	tk, err := tokenize.Load(tiny(t, nil))
	noErr(t, err)
	// Each "x " is two tokens ("x", " ") under the GPT-2 split without merges.
	ok := strings.Repeat("x", tokenize.MaxTokens)
	ids, err := tk.Encode(ok, false)
	noErr(t, err)
	if len(ids) != tokenize.MaxTokens {
		t.Fatalf("%d tokens, want %d", len(ids), tokenize.MaxTokens)
	}
	if _, err = tk.Encode(ok, true); !errors.Is(err, tokenize.ErrPromptTooLarge) { // the template's token makes one too many
		t.Fatalf("got %v, want ErrPromptTooLarge", err)
	}
	if _, err = tk.Encode(strings.Repeat("x ", tokenize.MaxTokens/2+1), false); !errors.Is(err, tokenize.ErrPromptTooLarge) {
		t.Fatalf("got %v, want ErrPromptTooLarge", err)
	}
	if !strings.HasPrefix(tokenize.ErrPromptTooLarge.Error(), "prompt_too_large") {
		t.Fatal("ErrPromptTooLarge does not start with its code")
	}
	// EncodeAppend leaves dst as it was on error.
	dst := []uint32{7}
	dst, err = tk.EncodeAppend(dst, strings.Repeat("x ", tokenize.MaxTokens), false)
	if !errors.Is(err, tokenize.ErrPromptTooLarge) || !slices.Equal(dst, []uint32{7}) {
		t.Fatalf("got %v, %v; want ErrPromptTooLarge and dst unchanged", dst, err)
	}
}

// TestConcurrentEncode encodes the corpus from several goroutines on one
// Tokenizer (run with -race) and checks every result against a serial one.
func TestConcurrentEncode(t *testing.T) {
	t.Parallel()
	tk := loadModel(t, "qwen3")
	corpus := loadCorpus(t)
	want := make([][]uint32, len(corpus))
	for i, c := range corpus {
		ids, err := tk.Encode(c.Text, true)
		noErr(t, err)
		want[i] = ids
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range corpus {
				i := (k + g*17) % len(corpus)
				ids, err := tk.Encode(corpus[i].Text, true)
				if err != nil {
					errs <- fmt.Errorf("goroutine %d, %s: %w", g, corpus[i].Name, err)
					return
				}
				if !slices.Equal(ids, want[i]) {
					errs <- fmt.Errorf("goroutine %d, %s: ids differ from the serial encoding", g, corpus[i].Name)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestEncodeContextStops: an encode observes its context's end wherever its
// time goes (splitting millions of pieces, merging one word of megabytes,
// encoding millions of words) and gives back dst as it was; without a
// deadline the same texts take seconds and end as ErrPromptTooLarge. It
// runs alone, not in parallel with the package's other tests: it measures
// wall time, which their CPU and collections would set under -race on a
// small machine.
func TestEncodeContextStops(t *testing.T) {
	tk := loadModel(t, "qwen3")
	for _, tc := range []struct {
		name, unit string
		size       int
	}{
		// Unbounded, these take from half a second to two (without
		// -race); a word's symbols are allocated at once, 20 bytes a byte.
		{"one long word", "xq", 2 << 20},
		{"digits split one by one", "1", 12 << 20},
		{"many short words", "a ", 12 << 20},
	} {
		// One at a time, for the same reason: each allocates tens of
		// megabytes.
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Repeat(tc.unit, tc.size/len(tc.unit))
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			dst, err := tk.EncodeContext(ctx, []uint32{7}, text, false)
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) || !slices.Equal(dst, []uint32{7}) {
				t.Fatalf("got %d ids, %v; want dst unchanged and the deadline", len(dst), err)
			}
			// Generous for -race on a loaded machine: the linear passes
			// before the first look at the deadline run over the whole
			// text.
			if took > 2500*time.Millisecond {
				t.Errorf("stopped after %v", took)
			}
		})
	}
	t.Run("ended context", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := tk.EncodeContext(ctx, nil, "hello", false); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		// Size bounds come first.
		if _, err := tk.EncodeContext(ctx, nil, strings.Repeat("a", tokenize.MaxTextBytes+1), false); !errors.Is(err, tokenize.ErrPromptTooLarge) {
			t.Fatalf("got %v, want ErrPromptTooLarge", err)
		}
	})
	t.Run("same ids in time", func(t *testing.T) {
		t.Parallel()
		text := strings.Repeat("The quick brown fox jumps over the lazy dog 12345. ", 2000)
		want, err := tk.Encode(text, true)
		noErr(t, err)
		got, err := tk.EncodeContext(t.Context(), nil, text, true)
		noErr(t, err)
		if !slices.Equal(got, want) {
			t.Fatal("EncodeContext and Encode differ")
		}
	})
}

// TestTruncationOnlySecond: a file truncating only the second sequence
// fails a single sequence that needs cutting, as the library does, and
// leaves one that fits alone.
func TestTruncationOnlySecond(t *testing.T) {
	t.Parallel()
	tk, err := tokenize.Load(tiny(t, map[string]string{"truncation": `{"max_length": 3, "strategy": "OnlySecond", "stride": 0}`}))
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := tk.Encode("abc", true); err != nil || !slices.Equal(ids, []uint32{258, 257}) {
		t.Fatalf("abc: %v, %v", ids, err)
	}
	_, err = tk.Encode("abc abc abc", false)
	errContains(t, err, "second sequence not provided")
}

// TestMergesVersionLine: a legacy merges list that kept merges.txt's
// "#version" header loads, the header skipped and the merges after it
// ranked from the first, as the library reads it.
func TestMergesVersionLine(t *testing.T) {
	t.Parallel()
	tk, err := tokenize.Load(tiny(t, map[string]string{"pre_tokenizer": `null`, "post_processor": `null`,
		"model": `{"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4}, "merges": ["#version: 0.2", "b c", "a b"]}`}))
	if err != nil {
		t.Fatal(err)
	}
	// "b c" ranks before "a b": abc is a + bc.
	if ids, err := tk.Encode("abc", false); err != nil || !slices.Equal(ids, []uint32{0, 4}) {
		t.Fatalf("abc: %v, %v", ids, err)
	}
}

// TestTruncationBelowSpecialTokens: with max_length below the number of
// special tokens the post-processor adds, the library keeps whole
// pre-tokenized words (and the added tokens between them) from the kept end
// until the model's tokens reach max_length; OnlySecond cuts nothing. The
// expected ids come from the Hugging Face tokenizers Rust core, npm
// `tokenizers` 0.23.2 (encode(text, null, {addSpecialTokens: true})).
func TestTruncationBelowSpecialTokens(t *testing.T) {
	t.Parallel()
	const config = `{"version":"1.0","truncation":{"direction":%q,"max_length":%d,"strategy":%q,"stride":0},"padding":null,` +
		`"added_tokens":[{"id":5,"content":"[SEP]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],` +
		`"normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},` +
		`"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}}],"pair":[{"Sequence":{"id":"A","type_id":0}}],` +
		`"special_tokens":{"[CLS]":{"id":"[CLS]","ids":[4],"tokens":["[CLS]"]},"[SEP]":{"id":"[SEP]","ids":[5],"tokens":["[SEP]"]}}},` +
		`"decoder":null,"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{"a":0,"b":1,"c":2,"d":3,"[CLS]":4,"[SEP]":5},"merges":[]}}`
	for _, c := range []struct {
		dir, strategy string
		maxLen        int
		text          string
		want          []uint32
	}{
		{"Right", "LongestFirst", 1, "a b c", []uint32{4, 0, 5}},
		{"Right", "LongestFirst", 1, "abc d", []uint32{4, 0, 1, 2, 5}},
		{"Right", "LongestFirst", 0, "ab cd", []uint32{4, 0, 1, 5}},
		{"Right", "OnlyFirst", 1, "[SEP]a b", []uint32{4, 5, 0, 5}},
		{"Right", "LongestFirst", 1, "a[SEP] b c", []uint32{4, 0, 5}},
		{"Left", "LongestFirst", 1, "a b c", []uint32{4, 2, 5}},
		{"Left", "OnlyFirst", 0, "a bcd", []uint32{4, 1, 2, 3, 5}},
		{"Left", "LongestFirst", 1, "[SEP]a b", []uint32{4, 1, 5}},
		{"Left", "LongestFirst", 1, "a b[SEP]", []uint32{4, 1, 5, 5}},
		{"Left", "LongestFirst", 1, "abc[SEP]", []uint32{4, 0, 1, 2, 5, 5}},
		{"Right", "OnlySecond", 1, "a", []uint32{4, 0, 5}},
		{"Right", "OnlySecond", 0, "a b c", []uint32{4, 0, 1, 2, 5}},
	} {
		tk, err := tokenize.Load([]byte(fmt.Sprintf(config, c.dir, c.maxLen, c.strategy)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := tk.Encode(c.text, true)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s %s max %d %q: got %v, %v; want %v (tokenizers 0.23.2)", c.dir, c.strategy, c.maxLen, c.text, got, err, c.want)
		}
	}
}
