package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// preTokenizer splits a piece into smaller pieces, appending them to dst;
// it ticks stop once per piece it cuts.
type preTokenizer interface {
	split(dst []piece, in piece, stop *stopper) []piece
}

// parsePreTokenizer returns the stages of the pre-tokenizer (a Sequence is
// flattened) and whether one stage is ByteLevel, in which case the model
// works on raw bytes rather than the byte-level alphabet.
//
// The library runs the stages after a ByteLevel one on the byte-level
// alphabet (Falcon's digit splits follow it): such a stage sees a byte of a
// multi-byte character as a character of its own ("²" for the byte 0xB2), so
// it may cut a character apart. Those stages run here on the alphabet too
// (byteLevelMapped). Only splitting stages may follow; a Metaspace or a
// second ByteLevel after one would hand the model characters outside the
// alphabet, and is refused.
func parsePreTokenizer(raw json.RawMessage) ([]preTokenizer, bool, error) {
	if isNull(raw) {
		return nil, false, nil
	}
	stages, err := parsePreStages(raw)
	if err != nil {
		return nil, false, err
	}
	at := -1
	for i, s := range stages {
		switch st := s.(type) {
		case byteLevelPre:
			if at >= 0 {
				return nil, false, unsupported("two ByteLevel pre-tokenizers")
			}
			at = i
		case splitPre, unicodeScripts:
			if at >= 0 {
				stages[i] = byteLevelMapped{st}
			}
		case metaspacePre:
			if at >= 0 {
				return nil, false, unsupported("Metaspace pre-tokenizer after ByteLevel")
			}
		case fixedLength:
			// After ByteLevel each character of the alphabet is a byte.
			st.bytes = at >= 0
			stages[i] = st
		}
	}
	if at < 0 {
		return stages, false, nil
	}
	// A ByteLevel stage without its own regex and without a prefix space
	// does nothing but map bytes, which the byte-level model does itself.
	if bl := stages[at].(byteLevelPre); bl.m == nil && !bl.addPrefixSpace {
		stages = append(stages[:at], stages[at+1:]...)
	}
	return stages, true, nil
}

// byteLevelMapped runs a splitting stage that follows ByteLevel on the
// byte-level alphabet, as the library does, and hands the parts back as raw
// bytes (a part may end inside a UTF-8 sequence; the byte-level model takes
// bytes).
type byteLevelMapped struct{ inner preTokenizer }

func (p byteLevelMapped) split(dst []piece, in piece, stop *stopper) []piece {
	n := len(dst)
	dst = p.inner.split(dst, piece{s: toByteLevel(in.s), first: in.first}, stop)
	for i := n; i < len(dst); i++ {
		raw, ok := fromByteLevel(dst[i].s)
		if !ok { // parts of an alphabet string are in the alphabet
			panic("tokenize: byte-level part outside the alphabet")
		}
		dst[i].s = raw
	}
	return dst
}

func parsePreStages(raw json.RawMessage) ([]preTokenizer, error) {
	var ty typed
	if err := json.Unmarshal(raw, &ty); err != nil {
		return nil, fmt.Errorf("tokenize: pre_tokenizer: %w", err)
	}
	switch ty.Type {
	case "Sequence":
		var p struct {
			Pretokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: Sequence pre-tokenizer: %w", err)
		}
		var out []preTokenizer
		for _, r := range p.Pretokenizers {
			if isNull(r) {
				continue
			}
			s, err := parsePreStages(r)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	case "Split":
		var p struct {
			Pattern  patternJSON `json:"pattern"`
			Behavior string      `json:"behavior"`
			Invert   bool        `json:"invert"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: Split pre-tokenizer: %w", err)
		}
		m, err := compilePattern(p.Pattern)
		if err != nil {
			return nil, fmt.Errorf("tokenize: Split pre-tokenizer: %w", err)
		}
		b, err := parseBehavior(p.Behavior)
		if err != nil {
			return nil, err
		}
		return []preTokenizer{splitPre{m: m, behavior: b, invert: p.Invert}}, nil
	case "ByteLevel":
		var p struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: ByteLevel pre-tokenizer: %w", err)
		}
		bl := byteLevelPre{addPrefixSpace: p.AddPrefixSpace}
		if p.UseRegex == nil || *p.UseRegex {
			bl.m = knownScanner(gpt2Pattern)
		}
		return []preTokenizer{bl}, nil
	case "Digits":
		var p struct {
			IndividualDigits bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: Digits pre-tokenizer: %w", err)
		}
		b := contiguous
		if p.IndividualDigits {
			b = isolated
		}
		return []preTokenizer{splitPre{m: funcMatcher(digitRun(p.IndividualDigits)), behavior: b}}, nil
	case "Metaspace":
		var p struct {
			Replacement    string  `json:"replacement"`
			PrependScheme  *string `json:"prepend_scheme"`
			AddPrefixSpace *bool   `json:"add_prefix_space"`
			Split          *bool   `json:"split"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: Metaspace pre-tokenizer: %w", err)
		}
		if utf8.RuneCountInString(p.Replacement) != 1 {
			return nil, fmt.Errorf("tokenize: Metaspace replacement %q is not one character", p.Replacement)
		}
		m := metaspacePre{repl: p.Replacement, scheme: "always", doSplit: p.Split == nil || *p.Split}
		if p.PrependScheme != nil {
			m.scheme = *p.PrependScheme
		}
		// The older add_prefix_space may only agree with the scheme, which
		// is "always" when absent: false beside anything but "never" is a
		// file the library refuses, so it cannot say what the ids are.
		if p.AddPrefixSpace != nil && !*p.AddPrefixSpace && m.scheme != "never" {
			return nil, fmt.Errorf("tokenize: Metaspace add_prefix_space false does not match prepend_scheme %q", m.scheme)
		}
		switch m.scheme {
		case "always", "never", "first":
		default:
			return nil, unsupported("Metaspace prepend_scheme %q", m.scheme)
		}
		return []preTokenizer{m}, nil
	case "Punctuation":
		var p struct {
			Behavior *string `json:"behavior"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: Punctuation pre-tokenizer: %w", err)
		}
		b := isolated // the library's default
		if p.Behavior != nil {
			var err error
			if b, err = parseBehavior(*p.Behavior); err != nil {
				return nil, err
			}
		}
		return []preTokenizer{splitPre{m: funcMatcher(punctChar), behavior: b}}, nil
	case "Whitespace":
		// \w+|[^\w\s]+, the rest removed.
		return []preTokenizer{splitPre{m: funcMatcher(wordOrSymbolRun), behavior: removed, invert: true}}, nil
	case "BertPreTokenizer":
		// Whitespace removed, then each punctuation character on its own.
		return []preTokenizer{
			splitPre{m: funcMatcher(spaceRun), behavior: removed},
			splitPre{m: funcMatcher(punctChar), behavior: isolated},
		}, nil
	case "WhitespaceSplit":
		return []preTokenizer{splitPre{m: funcMatcher(spaceRun), behavior: removed}}, nil
	case "FixedLength":
		p := struct {
			Length *int64 `json:"length"`
		}{}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: FixedLength pre-tokenizer: %w", err)
		}
		n := int64(5) // the library's default
		if p.Length != nil {
			n = *p.Length
		}
		if n <= 0 {
			return nil, fmt.Errorf("tokenize: FixedLength pre-tokenizer length %d is not positive", n)
		}
		return []preTokenizer{fixedLength{n: int(min(n, MaxTextBytes))}}, nil
	case "UnicodeScripts":
		return []preTokenizer{unicodeScripts{}}, nil
	case "CharDelimiterSplit":
		var p struct {
			Delimiter string `json:"delimiter"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("tokenize: CharDelimiterSplit pre-tokenizer: %w", err)
		}
		if utf8.RuneCountInString(p.Delimiter) != 1 {
			return nil, fmt.Errorf("tokenize: CharDelimiterSplit delimiter %q is not one character", p.Delimiter)
		}
		return []preTokenizer{splitPre{m: literal(p.Delimiter), behavior: removed}}, nil
	default:
		return nil, unsupported("pre-tokenizer %q", ty.Type)
	}
}

// behavior is the library's SplitDelimiterBehavior.
type behavior int

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

func parseBehavior(s string) (behavior, error) {
	switch s {
	case "Removed":
		return removed, nil
	case "Isolated":
		return isolated, nil
	case "MergedWithPrevious":
		return mergedWithPrevious, nil
	case "MergedWithNext":
		return mergedWithNext, nil
	case "Contiguous":
		return contiguous, nil
	}
	return 0, unsupported("split behavior %q", s)
}

// splitPre is the Split pre-tokenizer (and Digits, WhitespaceSplit,
// CharDelimiterSplit, which are Splits with fixed patterns).
type splitPre struct {
	m        matcher
	behavior behavior
	invert   bool
}

func (p splitPre) split(dst []piece, in piece, stop *stopper) []piece {
	return splitBy(dst, in, p.m, p.behavior, p.invert, stop)
}

// splitBy cuts in at the matches of m and joins the parts by behaviour, as
// NormalizedString::split does; empty parts are dropped.
func splitBy(dst []piece, in piece, m matcher, b behavior, invert bool, stop *stopper) []piece {
	s := in.s
	if s == "" {
		return dst
	}
	if fm, ok := m.(funcMatcher); ok && b == isolated && !invert {
		return splitIsolated(dst, in, fm, stop)
	}
	if lit, ok := m.(literal); ok && !invert && !strings.Contains(s, string(lit)) {
		return append(dst, in) // no match: one part, kept whole by every behaviour
	}
	return splitGeneral(dst, in, m, b, invert, stop)
}

// splitGeneral is splitBy's general case (apart, so the closures' captures
// do not cost the fast paths an allocation).
func splitGeneral(dst []piece, in piece, m matcher, b behavior, invert bool, stop *stopper) []piece {
	s := in.s
	emit := func(start, end int) {
		if start < end {
			dst = append(dst, piece{s: s[start:end], first: in.first && start == 0})
		}
	}
	if b == isolated {
		prev := 0
		m.each(s, func(start, end int) {
			stop.tick()
			emit(prev, start)
			emit(start, end)
			prev = end
		})
		emit(prev, len(s))
		return dst
	}
	type part struct {
		start, end int
		match      bool
	}
	var parts []part
	prev := 0
	m.each(s, func(start, end int) {
		stop.tick()
		if prev != start {
			parts = append(parts, part{prev, start, invert})
		}
		parts = append(parts, part{start, end, !invert})
		prev = end
	})
	if prev != len(s) {
		parts = append(parts, part{prev, len(s), invert})
	}
	switch b {
	case removed:
		for _, p := range parts {
			if !p.match {
				emit(p.start, p.end)
			}
		}
	case mergedWithPrevious:
		var out []part
		prevMatch := false
		for _, p := range parts {
			if p.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = p.end
			} else {
				out = append(out, part{p.start, p.end, false})
			}
			prevMatch = p.match
		}
		for _, p := range out {
			emit(p.start, p.end)
		}
	case mergedWithNext:
		var out []part
		prevMatch := false
		for i := len(parts) - 1; i >= 0; i-- {
			p := parts[i]
			if p.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = p.start
			} else {
				out = append(out, part{p.start, p.end, false})
			}
			prevMatch = p.match
		}
		for i := len(out) - 1; i >= 0; i-- {
			emit(out[i].start, out[i].end)
		}
	case contiguous:
		var out []part
		prevMatch := false
		for i, p := range parts {
			if i > 0 && p.match == prevMatch {
				out[len(out)-1].end = p.end
			} else {
				out = append(out, part{p.start, p.end, false})
			}
			prevMatch = p.match
		}
		for _, p := range out {
			emit(p.start, p.end)
		}
	case isolated:
		// handled above
	}
	return dst
}

// splitIsolated is splitBy for Isolated with a scanner, the common case,
// without closures.
func splitIsolated(dst []piece, in piece, f funcMatcher, stop *stopper) []piece {
	s := in.s
	prev := 0
	for i := 0; i < len(s); {
		stop.tick()
		a, b := f(s, i)
		if a < 0 {
			break
		}
		if prev < a {
			dst = append(dst, piece{s: s[prev:a], first: in.first && prev == 0})
		}
		if a < b {
			dst = append(dst, piece{s: s[a:b], first: in.first && a == 0})
		}
		prev = b
		if b == a { // an empty match cuts here; the search moves on one character
			_, n := utf8.DecodeRuneInString(s[b:])
			b += max(n, 1)
		}
		i = b
	}
	if prev < len(s) {
		dst = append(dst, piece{s: s[prev:], first: in.first && prev == 0})
	}
	return dst
}

// byteLevelPre is the ByteLevel pre-tokenizer; the byte mapping itself is
// done by the model, which keys its vocabulary by raw bytes.
type byteLevelPre struct {
	m              matcher // the GPT-2 split when use_regex; nil otherwise
	addPrefixSpace bool
}

func (p byteLevelPre) split(dst []piece, in piece, stop *stopper) []piece {
	if p.addPrefixSpace && !strings.HasPrefix(in.s, " ") {
		in.s = " " + in.s
	}
	if p.m == nil {
		if in.s != "" {
			dst = append(dst, in)
		}
		return dst
	}
	return splitBy(dst, in, p.m, isolated, false, stop)
}

// metaspacePre is the Metaspace pre-tokenizer.
type metaspacePre struct {
	repl    string
	scheme  string
	doSplit bool
}

func (p metaspacePre) split(dst []piece, in piece, stop *stopper) []piece {
	s := strings.ReplaceAll(in.s, " ", p.repl)
	switch p.scheme {
	case "always":
		if !strings.HasPrefix(s, p.repl) {
			s = p.repl + s
		}
	case "first":
		if !strings.HasPrefix(s, p.repl) && in.first {
			s = p.repl + s
		}
	}
	out := piece{s: s, first: in.first}
	if !p.doSplit {
		if s != "" {
			dst = append(dst, out)
		}
		return dst
	}
	return splitBy(dst, out, literal(p.repl), mergedWithNext, false, stop)
}

// digitRun matches runs of numeric characters (or single ones), as Rust's
// char::is_numeric has them (hfNumeric, measured: its Unicode is newer than
// the regex engine's \p{N}).
func digitRun(individual bool) func(s string, i int) (int, int) {
	return func(s string, i int) (int, int) {
		for i < len(s) {
			r, n := utf8.DecodeRuneInString(s[i:])
			if !isNumeric(r) {
				i += n
				continue
			}
			start := i
			i += n
			if individual {
				return start, i
			}
			for i < len(s) {
				r, n := utf8.DecodeRuneInString(s[i:])
				if !isNumeric(r) {
					break
				}
				i += n
			}
			return start, i
		}
		return -1, -1
	}
}

// punctChar matches one punctuation character as the Punctuation
// pre-tokenizer sees one: ASCII punctuation (symbols included) and the
// general category P of the library's own tables (hfPunctuation, measured).
// Each character is a match of its own; the Contiguous behaviour joins
// neighbours.
func punctChar(s string, i int) (int, int) {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unicode.Is(hfPunctuation, r) {
			return i, i + n
		}
		i += n
	}
	return -1, -1
}

// wordOrSymbolRun matches \w+|[^\w\s]+ as the library's Whitespace
// pre-tokenizer does (its \w, the regex crate's and not the Split regex
// engine's, is hfWord, measured; its \s is Go's).
func wordOrSymbolRun(s string, i int) (int, int) {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			i += n
			continue
		}
		start, word := i, unicode.Is(hfWord, r)
		i += n
		for i < len(s) {
			r, n := utf8.DecodeRuneInString(s[i:])
			if unicode.IsSpace(r) || unicode.Is(hfWord, r) != word {
				break
			}
			i += n
		}
		return start, i
	}
	return -1, -1
}

func isNumeric(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.Is(hfNumeric, r)
}

// spaceRun matches runs of whitespace.
func spaceRun(s string, i int) (int, int) {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			i += n
			continue
		}
		start := i
		i += n
		for i < len(s) {
			r, n := utf8.DecodeRuneInString(s[i:])
			if !unicode.IsSpace(r) {
				break
			}
			i += n
		}
		return start, i
	}
	return -1, -1
}

// fixedLength is the FixedLength pre-tokenizer: pieces of n characters
// (the last may be shorter); after ByteLevel, of n bytes, as the library
// counts the byte-level alphabet's characters.
type fixedLength struct {
	n     int
	bytes bool
}

func (f fixedLength) split(dst []piece, in piece, stop *stopper) []piece {
	s := in.s
	for start := 0; start < len(s); {
		stop.tick()
		end := start
		if f.bytes {
			end = min(start+f.n, len(s))
		} else {
			for k := 0; k < f.n && end < len(s); k++ {
				_, size := utf8.DecodeRuneInString(s[end:])
				end += size
			}
		}
		dst = append(dst, piece{s: s[start:end], first: in.first && start == 0})
		start = end
	}
	return dst
}

// unicodeScripts is the UnicodeScripts pre-tokenizer: a piece starts at
// each character whose script differs from that of the last character
// before it that is not of the Any class. The classes are the library's own
// (hfScripts): an older Unicode than Go's, with Hiragana, Katakana and the
// prolonged sound mark U+30FC counted as Han, and the space and unassigned
// code points as Any. An Any character starts no piece and stays with the
// piece before it; those before the first other character are dropped, as
// the library drops them, so a piece of Any characters only vanishes.
type unicodeScripts struct{}

func (unicodeScripts) split(dst []piece, in piece, stop *stopper) []piece {
	s := in.s
	start := -1
	var last uint8 // the class of the last character not of class Any
	for i := 0; i < len(s); {
		c, n := scriptClass(s[i:])
		if c != 0 && c != last {
			if start >= 0 {
				stop.tick()
				dst = append(dst, piece{s: s[start:i], first: in.first && start == 0})
			}
			start, last = i, c
		}
		i += n
	}
	if start >= 0 {
		stop.tick()
		dst = append(dst, piece{s: s[start:], first: in.first && start == 0})
	}
	return dst
}

// scriptRange is one range of hfScripts: from first to the next range's
// first code point, of script class class (0: Any).
type scriptRange struct {
	first rune
	class uint8
}

// asciiScripts is hfScripts for the ASCII characters.
var asciiScripts = func() (t [utf8.RuneSelf]uint8) {
	for c := range t {
		t[c] = lookupScript(rune(c))
	}
	return t
}()

// scriptClass returns the script class of the first character of s (valid
// UTF-8) and its length.
func scriptClass(s string) (uint8, int) {
	if s[0] < utf8.RuneSelf {
		return asciiScripts[s[0]], 1
	}
	r, n := utf8.DecodeRuneInString(s)
	return lookupScript(r), n
}

// lookupScript finds r's range in hfScripts.
func lookupScript(r rune) uint8 {
	lo, hi := 0, len(hfScripts) // hfScripts[lo].first <= r < hfScripts[hi].first
	for hi-lo > 1 {
		m := int(uint(lo+hi) >> 1)
		if hfScripts[m].first <= r {
			lo = m
		} else {
			hi = m
		}
	}
	return hfScripts[lo].class
}
