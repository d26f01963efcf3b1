// Package tokenize encodes text to token ids exactly as the Hugging Face
// tokenizers library does for a tokenizer.json file: the BPE tokenizers
// inference fleets mostly serve, byte-level (Qwen2/2.5/3, Llama 3.x,
// DeepSeek V3, GPT-OSS) and SentencePiece-style with byte fallback (Llama 2,
// Mistral, Gemma), and the Unigram (T5, XLM-R), WordPiece (BERT) and
// WordLevel models.
//
// The pipeline is the library's: added tokens are split out of the raw text
// (non-normalized ones) and out of the normalized text (normalized ones),
// leftmost-longest, with single_word, lstrip and rstrip; the rest is
// normalized (NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Nmt, ByteLevel,
// BertNormalizer, Precompiled, Prepend, Replace, Strip, Sequence),
// pre-tokenized (Split with its behaviours and invert, ByteLevel, Digits,
// Metaspace, Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer,
// CharDelimiterSplit, FixedLength, UnicodeScripts, Sequence; splitting
// stages after ByteLevel see its alphabet) and run through the model (BPE
// with byte fallback, unk and fuse_unk, ignore_merges,
// continuing_subword_prefix and end_of_word_suffix; Unigram's best-scoring
// path with fused unknowns and byte fallback; WordPiece's greedy longest
// pieces; WordLevel); a
// post-processor (TemplateProcessing, ByteLevel, Bert/Roberta, Sequence) adds
// its special tokens when asked to; a file's truncation and padding apply to
// every encoding, as in the library. A file without a model type is read as
// the library reads such older files. A tokenizer.json using anything else
// fails to load with an error naming the feature, so an encoding is never
// silently wrong.
//
// The split patterns of the common tokenizers (cl100k/Llama 3, Qwen, o200k/
// GPT-OSS, Mistral's Tekken, DeepSeek V3, GPT-2) run on hand-written
// scanners; other patterns on a backtracking engine
// (github.com/dlclark/regexp2) with the library's Unicode classes, whose
// matches are bounded in time (a timeout fails the encode).
//
// Text that is not valid UTF-8 is encoded as if each invalid byte were
// U+FFFD, the way encoding/json decodes it.
//
// The goldens under testdata/tokenize pin the ids against the library's Rust
// core (scripts/tokenizer-ref).
//
// Imports: no internal package.
package tokenize

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// MaxTokens is the most tokens one Encode may produce; a longer encoding is
// ErrPromptTooLarge.
const MaxTokens = 1 << 20

// MaxTextBytes bounds the text one Encode accepts: longer text is
// ErrPromptTooLarge without being encoded, which bounds the memory an encode
// takes. (Rendered prompts are at most 1 MiB; a text of 1,048,576 tokens is
// rarely a quarter of this.)
const MaxTextBytes = 16 << 20

// maxPooledPieces is the largest scratch a pooled encode state keeps.
const maxPooledPieces = 1 << 14

// ErrPromptTooLarge is returned when an encoding would exceed MaxTokens; its
// code is prompt_too_large.
var ErrPromptTooLarge = errors.New("prompt_too_large: encoding exceeds 1048576 tokens")

// Tokenizer is a loaded tokenizer.json. It is safe for concurrent use.
type Tokenizer struct {
	added      *addedVocab
	normalizer normalizer // nil: none
	pre        []preTokenizer
	// firstOnly: a Metaspace stage prepends its replacement only to the
	// piece at the start of the text, so whether a normalizer removed the
	// text's first character matters (normalizeLead).
	firstOnly bool
	model     model
	post      postProcessor // nil: none
	trunc     *truncation   // nil: none
	pad       *padding      // nil: none
	idToToken map[uint32]string
	states    sync.Pool
	// segs caches the ids of long segments between added tokens; nil
	// disables it (benchmarks of cold encoding).
	segs *segCache
}

// state is the scratch space of one Encode, pooled.
type state struct {
	segs []segment
	a, b []piece
	word wordScratch
	stop stopper
	// units, when non-nil, receives the end (in dst) of every added token
	// and every model word of the encode, for truncateWords.
	units *[]unit
}

// unit is one added token or one word the model encoded, ending at end in
// the encoding.
type unit struct {
	end   int
	model bool
}

// stopper lets a long encode observe the end of its context. Encoding is
// linear in the text, but the text may be 16 MiB and a caller holding a
// render permit must get it back by its deadline, so every loop that runs
// once per unit of work (a piece split off, a word encoded, a merge made)
// calls tick; every stopEvery ticks it looks at the Done channel, and once
// that is closed it panics with stopped, which EncodeContext recovers. The
// passes between ticks (added-token split, normalizer, a word's initial
// symbols) are single linear scans. The zero stopper, and a nil one,
// never stop.
type stopper struct {
	done <-chan struct{}
	n    uint32
}

// stopEvery is how many ticks pass between looks at the Done channel: a
// look is a few nanoseconds, a tick's work a few tens, so the overrun past
// a deadline is microseconds.
const stopEvery = 1024

// stopped is the panic value of a stopper whose context ended.
type stopped struct{}

func (s *stopper) tick() {
	if s == nil {
		return
	}
	s.n++
	if s.n%stopEvery != 0 || s.done == nil {
		return
	}
	select {
	case <-s.done:
		panic(stopped{})
	default:
	}
}

// segment is a stretch of the input between added tokens, or an added token.
type segment struct {
	text  string
	id    uint32 // the added token's id when isTok
	isTok bool
	first bool // starts at offset 0 of the original text
}

// piece is a pre-token: text the model encodes on its own.
type piece struct {
	s     string
	first bool
}

// Encode returns the token ids of text; with addSpecialTokens the
// post-processor's special tokens (a BOS, say) are added as the library adds
// them. Special-token strings inside text are always recognised.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) ([]uint32, error) {
	return t.EncodeAppend(nil, text, addSpecialTokens)
}

// EncodeAppend is Encode appending to dst; with a dst of enough capacity it
// does not allocate for text the tokenizer has seen before.
func (t *Tokenizer) EncodeAppend(dst []uint32, text string, addSpecialTokens bool) ([]uint32, error) {
	return t.encode(context.Background(), dst, text, addSpecialTokens)
}

// EncodeContext is EncodeAppend bounded by ctx: once ctx is done the encode
// stops within microseconds and returns dst unchanged and an error wrapping
// ctx.Err(). Checking the size bounds first, it still returns
// ErrPromptTooLarge for an over-long text whatever the context.
func (t *Tokenizer) EncodeContext(ctx context.Context, dst []uint32, text string, addSpecialTokens bool) ([]uint32, error) {
	return t.encode(ctx, dst, text, addSpecialTokens)
}

func (t *Tokenizer) encode(ctx context.Context, dst []uint32, text string, addSpecialTokens bool) (out []uint32, err error) {
	if len(text) > MaxTextBytes {
		return dst, ErrPromptTooLarge
	}
	if err := ctx.Err(); err != nil {
		return dst, fmt.Errorf("tokenize: %w", err)
	}
	if !utf8.ValidString(text) {
		text = sanitizeUTF8(text)
	}
	st, _ := t.states.Get().(*state)
	if st == nil {
		st = &state{}
	}
	st.stop = stopper{done: ctx.Done()}
	st.word.stop = &st.stop
	base := len(dst)
	defer func() {
		if r := recover(); r != nil {
			switch x := r.(type) {
			case encodeError:
				out, err = dst[:base], x.err
			case stopped:
				out, err = dst[:base], fmt.Errorf("tokenize: %w", ctx.Err())
			default:
				panic(r)
			}
			st = &state{} // abandon the scratch of the failed encode
		}
		st.stop = stopper{}
		if cap(st.a) <= maxPooledPieces && cap(st.b) <= maxPooledPieces && cap(st.segs) <= maxPooledPieces && st.word.small() {
			t.states.Put(st)
		}
	}()
	added := 0
	if addSpecialTokens && t.post != nil {
		dst = t.post.prefix(dst)
		added = t.post.added()
	}
	seq := len(dst)
	var units []unit
	byWords := t.trunc != nil && !t.trunc.onlySecond && added > 0 && t.trunc.maxLen < added
	if byWords {
		st.units = &units
	}
	dst, err = t.encodeText(st, dst, text, base)
	st.units = nil
	if err != nil {
		return dst[:base], err
	}
	// The library truncates the sequence before the post-processor adds
	// its tokens, and pads the result.
	switch {
	case byWords:
		dst = t.trunc.truncateWords(dst, seq, units)
	case t.trunc != nil:
		if dst, err = t.trunc.apply(dst, seq, added); err != nil {
			return dst[:base], err
		}
	}
	if addSpecialTokens && t.post != nil {
		dst = t.post.suffix(dst)
	}
	if t.pad != nil {
		if dst, err = t.pad.apply(dst, base); err != nil {
			return dst[:base], err
		}
	}
	if len(dst)-base > MaxTokens {
		return dst[:base], ErrPromptTooLarge
	}
	return dst, nil
}

func (t *Tokenizer) encodeText(st *state, dst []uint32, text string, base int) ([]uint32, error) {
	st.segs = t.added.split(st.segs[:0], text, true, true)
	for i := 0; i < len(st.segs); i++ {
		st.stop.tick()
		seg := st.segs[i]
		if seg.isTok {
			dst = append(dst, seg.id)
			st.addUnit(len(dst), false)
			continue
		}
		cacheable := t.segs != nil && st.units == nil && len(seg.text) >= segCacheMinBytes
		if cacheable {
			if ids, ok := t.segs.get(seg.text, seg.first); ok {
				dst = append(dst, ids...)
				if len(dst)-base > MaxTokens {
					return dst, ErrPromptTooLarge
				}
				continue
			}
		}
		segStart := len(dst)
		norm, first := seg.text, seg.first
		switch {
		case t.normalizer == nil:
		case first && t.firstOnly:
			// A normalizer that removed the text's first character
			// leaves it starting past offset 0 (see normalizeLead).
			var lead int
			norm, lead = normalizeLead(t.normalizer, norm, 1)
			first = lead > 0
		default:
			norm = t.normalizer.normalize(norm)
		}
		if norm == "" {
			continue
		}
		start := len(st.segs)
		st.segs = t.added.split(st.segs, norm, false, first)
		// st.segs may have been reallocated; index instead of ranging.
		for i := start; i < len(st.segs); i++ {
			st.stop.tick()
			sub := st.segs[i]
			if sub.isTok {
				dst = append(dst, sub.id)
				st.addUnit(len(dst), false)
				continue
			}
			var err error
			dst, err = t.encodeNormalized(st, dst, sub.text, sub.first, base)
			if err != nil {
				return dst, err
			}
		}
		st.segs = st.segs[:start]
		if cacheable {
			t.segs.put(seg.text, seg.first, dst[segStart:])
		}
	}
	return dst, nil
}

func (t *Tokenizer) encodeNormalized(st *state, dst []uint32, s string, first bool, base int) ([]uint32, error) {
	st.a = append(st.a[:0], piece{s: s, first: first})
	for _, p := range t.pre {
		st.b = st.b[:0]
		for _, in := range st.a {
			st.b = p.split(st.b, in, &st.stop)
		}
		st.a, st.b = st.b, st.a
	}
	for _, w := range st.a {
		if w.s == "" {
			continue
		}
		st.stop.tick()
		dst = t.model.encodeWord(dst, w.s, &st.word)
		st.addUnit(len(dst), true)
		if len(dst)-base > MaxTokens {
			return dst, ErrPromptTooLarge
		}
	}
	return dst, nil
}

func (st *state) addUnit(end int, model bool) {
	if st.units != nil {
		*st.units = append(*st.units, unit{end: end, model: model})
	}
}

// IDToToken returns the vocabulary string of id (as the file spells it, so
// byte-level tokens are in the byte-level alphabet).
func (t *Tokenizer) IDToToken(id uint32) (string, bool) {
	s, ok := t.idToToken[id]
	return s, ok
}

// TokenToID returns the id of a vocabulary or added-token string.
func (t *Tokenizer) TokenToID(tok string) (uint32, bool) {
	if id, ok := t.added.byContent[tok]; ok {
		return id, true
	}
	return t.model.tokenID(tok)
}

// sanitizeUTF8 replaces each invalid byte with U+FFFD, as encoding/json and
// a Go range loop read it.
func sanitizeUTF8(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// unsupported names a tokenizer.json feature this package does not implement.
func unsupported(what string, args ...any) error {
	return fmt.Errorf("tokenize: unsupported tokenizer.json feature: "+what, args...)
}
