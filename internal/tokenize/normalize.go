package tokenize

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a stretch of text before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

// leadNormalizer is a normalizer that tracks where its output starts.
// The library keeps, for every normalized character, the span of the
// original text it came from, and Metaspace's "first" prepend scheme adds
// its replacement only to a piece whose span starts at offset 0 of the
// original text. normalizeLead is normalize that also follows lead, the
// number of characters s starts with whose span starts at 0: it returns
// how many the output starts with. Once that is 0 (a Strip, StripAccents,
// Nmt or clean_text removed the first character, or a Replace replaced
// it) the text starts further on and gets no replacement.
type leadNormalizer interface {
	normalizeLead(s string, lead int) (string, int)
}

// normalizeLead normalizes s with n and follows lead (leadNormalizer).
// A normalizer without its own rule maps each character on its own
// (Unicode forms, Lowercase, ByteLevel, handle_chinese_chars, Prepend,
// which gives what it adds the first character's span): the output's
// first characters are what the first lead characters become.
func normalizeLead(n normalizer, s string, lead int) (string, int) {
	if l, ok := n.(leadNormalizer); ok {
		return l.normalizeLead(s, lead)
	}
	out := n.normalize(s)
	if lead == 0 || out == "" {
		return out, 0
	}
	return out, utf8.RuneCountInString(n.normalize(s[:runesPrefix(s, lead)]))
}

// runesPrefix returns the byte length of s's first n characters (all of s
// when it has fewer).
func runesPrefix(s string, n int) int {
	i := 0
	for ; n > 0 && i < len(s); n-- {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
}

// patternJSON is a Split or Replace pattern: {"String": ...} or {"Regex": ...}.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var ty typed
	if err := json.Unmarshal(raw, &ty); err != nil {
		return nil, fmt.Errorf("tokenize: normalizer: %w", err)
	}
	switch ty.Type {
	case "NFC":
		return unicodeNorm{norm.NFC}, nil
	case "NFD":
		return unicodeNorm{norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{norm.NFKD}, nil
	case "Lowercase":
		return lowercase{}, nil
	case "StripAccents":
		return charMap{drop: hfStripAccents}, nil
	case "Nmt":
		return charMap{to: hfNmt}, nil
	case "ByteLevel":
		return byteLevelNorm{}, nil
	case "Precompiled":
		return parsePrecompiled(raw)
	case "Prepend":
		var p struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: Prepend normalizer: %w", err)
		}
		return prepend{p.Prepend}, nil
	case "Replace":
		var p struct {
			Pattern patternJSON `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: Replace normalizer: %w", err)
		}
		m, err := compilePattern(p.Pattern)
		if err != nil {
			return nil, fmt.Errorf("tokenize: Replace normalizer: %w", err)
		}
		return replace{m: m, content: p.Content}, nil
	case "Strip":
		var p struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: Strip normalizer: %w", err)
		}
		return strip(p), nil
	case "BertNormalizer":
		return parseBertNormalizer(raw)
	case "Sequence":
		var p struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: Sequence normalizer: %w", err)
		}
		var seq sequenceNorm
		for _, r := range p.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		return seq.simplest(), nil
	default:
		return nil, unsupported("normalizer %q", ty.Type)
	}
}

type unicodeNorm struct{ f norm.Form }

func (u unicodeNorm) normalize(s string) string {
	if isASCII(s) || u.f.IsNormalString(s) {
		return s
	}
	// The library's normalization tables are older than Go's: characters
	// they lack are starters without decomposition there, so the text is
	// normalized in the stretches between them, which are kept as they are.
	var b []byte
	start := 0
	for i, r := range s {
		if r < 0x7fd || !unicode.Is(hfNormUnknown, r) {
			continue
		}
		// (not AppendString: it would normalize across the junction)
		b = append(b, u.stretch(s[start:i])...)
		_, n := utf8.DecodeRuneInString(s[i:])
		b = append(b, s[i:i+n]...)
		start = i + n
	}
	if b == nil {
		return u.stretch(s)
	}
	return string(append(b, u.stretch(s[start:])...))
}

// cgj is U+034F COMBINING GRAPHEME JOINER, which no normalization makes of
// other characters.
const cgj = "\u034f"

// stretch normalizes s. The library keeps its output in the Stream-Safe
// Text Format: after 30 non-starters in a row it inserts a U+034F and
// neither reorders nor composes across it. Hugging Face's normalizers
// order and compose a run of any length, so a text where the library
// inserted one (more U+034F out than in) is normalized again by the
// definition itself (full).
func (u unicodeNorm) stretch(s string) string {
	out := u.f.String(s)
	if strings.Contains(out, cgj) && strings.Count(out, cgj) > strings.Count(s, cgj) {
		return u.full(s)
	}
	return out
}

// full normalizes s as Unicode defines it, with no bound on a run of
// non-starters: each character's full decomposition, every run of
// non-starters stably sorted by combining class and, for NFC and NFKC,
// canonical composition. The library supplies each character's
// decomposition and class and whether two characters compose, none of
// which it bounds. It is the path of texts with a run of over 30 marks,
// so it is written for clarity, not speed.
func (u unicodeNorm) full(s string) string {
	decompose, compose := norm.NFD, false
	switch u.f {
	case norm.NFC:
		compose = true
	case norm.NFKC:
		decompose, compose = norm.NFKD, true
	case norm.NFKD:
		decompose = norm.NFKD
	}
	type char struct {
		r   rune
		ccc uint8
	}
	var cs []char
	for _, r := range s {
		for _, d := range decompose.String(string(r)) {
			cs = append(cs, char{d, norm.NFD.PropertiesString(string(d)).CCC()})
		}
	}
	for i := 0; i < len(cs); {
		if cs[i].ccc == 0 {
			i++
			continue
		}
		j := i + 1
		for j < len(cs) && cs[j].ccc != 0 {
			j++
		}
		slices.SortStableFunc(cs[i:j], func(a, b char) int { return cmp.Compare(a.ccc, b.ccc) })
		i = j
	}
	if compose {
		// Canonical composition: a character joins the last starter
		// when nothing between them blocks it (a character of its class
		// or higher, or a starter) and the two have a primary composite.
		// What follows the last starter is its marks in class order, so
		// the last of them is the one that can block.
		out := cs[:0]
		last := -1
		for _, c := range cs {
			if last >= 0 && (len(out)-1 == last || out[len(out)-1].ccc < c.ccc) {
				if p, ok := composite(out[last].r, c.r); ok {
					out[last].r = p
					continue
				}
			}
			if c.ccc == 0 {
				last = len(out)
			}
			out = append(out, c)
		}
		cs = out
	}
	b := make([]byte, 0, len(s))
	for _, c := range cs {
		b = utf8.AppendRune(b, c.r)
	}
	return string(b)
}

// composite is the primary composite of starter a and b, if they have one:
// what NFC makes of the pair when it is one character.
func composite(a, b rune) (rune, bool) {
	var buf [2 * utf8.UTFMax]byte
	pair := utf8.AppendRune(utf8.AppendRune(buf[:0], a), b)
	c := norm.NFC.Bytes(pair)
	r, n := utf8.DecodeRune(c)
	return r, n == len(c) && r != utf8.RuneError
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// lowercase maps each character to its full lowercase mapping, character by
// character (no final-sigma context), as Rust's char::to_lowercase does.
// Rust's tables are newer than Go's: hfLowerDelta (measured from the library)
// holds the mappings Go lacks, and U+0130 is the one character whose mapping
// is two.
type lowercase struct{}

func (lowercase) normalize(s string) string {
	special := false
	for _, r := range s {
		if r < utf8.RuneSelf {
			continue
		}
		if _, ok := hfLowerDelta[r]; ok || r == '\u0130' {
			special = true
			break
		}
	}
	if !special {
		return strings.Map(unicode.ToLower, s)
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s {
		switch to, ok := hfLowerDelta[r]; {
		case ok:
			b.WriteString(to)
		case r == '\u0130':
			b.WriteString("i\u0307")
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// charMap removes the characters of drop, turns those of space into
// spaces and replaces those of to (an empty replacement removes):
// StripAccents drops the combining marks of the library's own tables, Nmt
// blanks or removes control and format characters, BertNormalizer's
// clean_text removes control characters and blanks whitespace (all
// measured from the library into classdelta.go).
type charMap struct {
	drop, space *unicode.RangeTable
	to          map[rune]string
}

func (m charMap) hit(r rune) bool {
	if m.drop != nil && unicode.Is(m.drop, r) || m.space != nil && unicode.Is(m.space, r) {
		return true
	}
	_, ok := m.to[r]
	return ok
}

// normalizeLead counts what the first lead characters become: nothing
// for a removed one, one character for a blanked one, the replacement for
// a replaced one.
func (m charMap) normalizeLead(s string, lead int) (string, int) {
	n := 0
	for _, r := range s[:runesPrefix(s, lead)] {
		switch to, ok := m.to[r]; {
		case m.drop != nil && unicode.Is(m.drop, r):
		case ok:
			n += utf8.RuneCountInString(to)
		default:
			n++
		}
	}
	return m.normalize(s), n
}

func (m charMap) normalize(s string) string {
	i := strings.IndexFunc(s, m.hit)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		if !m.hit(r) {
			b.WriteRune(r)
			continue
		}
		if m.space != nil && unicode.Is(m.space, r) {
			b.WriteByte(' ')
		} else if to, ok := m.to[r]; ok {
			b.WriteString(to)
		}
	}
	return b.String()
}

// byteLevelNorm is the ByteLevel normalizer: the text spelled in the
// byte-level alphabet, which the model then reads as the file spells its
// tokens.
type byteLevelNorm struct{}

func (byteLevelNorm) normalize(s string) string { return toByteLevel(s) }

// mapsToByteLevel reports whether n (or a stage of it) is ByteLevel.
func mapsToByteLevel(n normalizer) bool {
	switch n := n.(type) {
	case byteLevelNorm:
		return true
	case sequenceNorm:
		for _, s := range n {
			if mapsToByteLevel(s) {
				return true
			}
		}
	}
	return false
}

type prepend struct{ s string }

func (p prepend) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.s + s
}

type replace struct {
	m       matcher
	content string
}

func (r replace) normalize(s string) string {
	if lit, ok := r.m.(literal); ok {
		return strings.ReplaceAll(s, string(lit), r.content)
	}
	return r.apply(s, r.m.findAll(s, nil))
}

// apply replaces the matches of s with the content.
func (r replace) apply(s string, matches [][2]int) string {
	if len(matches) == 0 {
		return s
	}
	// An empty match is a place to insert at (a pattern like "^" puts
	// its content in front), so a match ending at 0 still counts.
	var b strings.Builder
	prev := 0
	for _, m := range matches {
		b.WriteString(s[prev:m[0]])
		b.WriteString(r.content)
		prev = m[1]
	}
	b.WriteString(s[prev:])
	return b.String()
}

// normalizeLead follows the first lead characters through the matches.
// The library gives the content of a match the span of the match's last
// character (of the character before an empty match, or a span at 0 for
// an empty match at the start): the content counts when that character is
// one of the first lead ones, and a match reaching past them ends the
// count, as does the first character after them.
func (r replace) normalizeLead(s string, lead int) (string, int) {
	end := runesPrefix(s, lead) // the first lead characters are s[:end]
	// A literal's matches that start within the lead are found in its
	// first end+len bytes, and found there as in the whole text (leftmost
	// first, without overlaps); the rest of the text is replaced without
	// listing its matches.
	lit, isLit := r.m.(literal)
	window := s
	if isLit && end+len(lit) < len(s) {
		window = s[:end+len(lit)]
	}
	matches := r.m.findAll(window, nil)
	n, prev := 0, 0
	for _, m := range matches {
		if m[0] > end {
			break
		}
		n += utf8.RuneCountInString(s[prev:m[0]])
		if m[1] > end {
			prev = end
			break
		}
		n += utf8.RuneCountInString(r.content)
		prev = m[1]
	}
	if prev < end {
		n += utf8.RuneCountInString(s[prev:end])
	}
	if isLit {
		return r.normalize(s), n
	}
	return r.apply(s, matches), n
}

type strip struct{ Left, Right bool }

// normalizeLead takes the leading spaces the left strip removes off lead.
func (p strip) normalizeLead(s string, lead int) (string, int) {
	if p.Left {
		rest := strings.TrimLeftFunc(s, unicode.IsSpace)
		lead -= utf8.RuneCountInString(s[:len(s)-len(rest)])
	}
	return p.normalize(s), max(lead, 0)
}

func (p strip) normalize(s string) string {
	if p.Left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if p.Right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

type sequenceNorm []normalizer

// simplest returns the sequence as the normalizer it amounts to: none for
// an empty one, its only stage for a single one.
func (s sequenceNorm) simplest() normalizer {
	switch len(s) {
	case 0:
		return nil
	case 1:
		return s[0]
	}
	return s
}

func (q sequenceNorm) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// normalizeLead follows lead through the stages.
func (q sequenceNorm) normalizeLead(s string, lead int) (string, int) {
	for _, n := range q {
		s, lead = normalizeLead(n, s, lead)
	}
	return s, lead
}

// parseBertNormalizer reads BertNormalizer, BERT's cleaning as stages:
// clean_text removes control characters (and NUL and U+FFFD) and turns
// whitespace into spaces; handle_chinese_chars puts a space on each side
// of every CJK ideograph; strip_accents (when null, as lowercase) removes
// non-spacing marks after NFD; lowercase lowercases.
func parseBertNormalizer(raw json.RawMessage) (normalizer, error) {
	var p struct {
		CleanText          *bool `json:"clean_text"`
		HandleChineseChars *bool `json:"handle_chinese_chars"`
		StripAccents       *bool `json:"strip_accents"`
		Lowercase          *bool `json:"lowercase"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("tokenize: BertNormalizer: %w", err)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"clean_text", p.CleanText != nil}, {"handle_chinese_chars", p.HandleChineseChars != nil}, {"lowercase", p.Lowercase != nil}} {
		if !f.set {
			return nil, fmt.Errorf("tokenize: BertNormalizer: missing field %q", f.name)
		}
	}
	var seq sequenceNorm
	if *p.CleanText {
		seq = append(seq, charMap{drop: hfBertControl, space: hfBertSpace})
	}
	if *p.HandleChineseChars {
		seq = append(seq, bertChinese{})
	}
	if p.StripAccents != nil && *p.StripAccents || p.StripAccents == nil && *p.Lowercase {
		seq = append(seq, unicodeNorm{norm.NFD}, charMap{drop: hfBertMn})
	}
	if *p.Lowercase {
		seq = append(seq, lowercase{})
	}
	return seq.simplest(), nil
}

// bertChinese is BertNormalizer's handle_chinese_chars: a space on each
// side of every character of the CJK ideograph blocks BERT names.
type bertChinese struct{}

func isBertChinese(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF || r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F || r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B920 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}

func (bertChinese) normalize(s string) string {
	i := strings.IndexFunc(s, isBertChinese)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		if isBertChinese(r) {
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}
