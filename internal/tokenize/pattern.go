package tokenize

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// matcher finds the non-overlapping matches of a pattern, left to right.
type matcher interface {
	each(s string, fn func(start, end int))
	findAll(s string, dst [][2]int) [][2]int
}

// regexTimeout bounds one regex match of the general (backtracking) engine.
// A match past it fails the encode, whose context (the render's budget)
// is looked at only between matches: it is kept well below that budget
// (2 s), and far above what a match of any real tokenizer's pattern takes,
// even on a machine slowed many times over (the race detector, a loaded
// host).
var regexTimeout = time.Second

func compilePattern(p patternJSON) (matcher, error) {
	switch {
	case p.String != nil && p.Regex == nil:
		return literal(*p.String), nil
	case p.Regex != nil && p.String == nil:
		if m := knownScanner(*p.Regex); m != nil {
			return m, nil
		}
		return compileFallback(*p.Regex)
	}
	return nil, fmt.Errorf("pattern needs exactly one of String and Regex")
}

// compileFallback compiles a pattern of the library's regex engine for the
// backtracking one (enginePattern; Multiline: ^ and $ are line anchors
// there).
func compileFallback(p string) (regexMatcher, error) {
	pattern, err := enginePattern(p)
	if err != nil {
		return regexMatcher{}, err
	}
	re, err := regexp2.Compile(pattern, regexp2.Unicode|regexp2.Multiline)
	if err != nil {
		return regexMatcher{}, fmt.Errorf("compile regex %q: %w", p, err)
	}
	re.MatchTimeout = regexTimeout
	return regexMatcher{re}, nil
}

// engineClassExtra holds, per general category the patterns name, the code
// points the library's regex engine puts in it and Go's tables (which the
// backtracking engine uses) do not, as class ranges (\x{..}-\x{..}).
var engineClassExtra = func() map[string]string {
	tables := map[string]*unicode.RangeTable{
		"L": onigExtraL, "Lu": onigExtraLu, "Ll": onigExtraLl, "Lt": onigExtraLt, "Lm": onigExtraLm,
		"Lo": onigExtraLo, "M": onigExtraM, "N": onigExtraN, "Nd": onigExtraNd, "P": onigExtraP, "S": onigExtraS,
	}
	out := make(map[string]string, len(tables))
	for name, t := range tables {
		if r := classRanges(t); r != "" {
			out[name] = r
		}
	}
	return out
}()

// engineWord and engineWordInClass are the regex engine's \w written out,
// outside and inside a bracket class, where it is narrower (no category
// formula gives either, so they replace the backtracking engine's \w
// instead of widening it).
var engineWord, engineWordInClass = classRanges(onigWord), classRanges(onigWordInClass)

// classRanges writes a table as bracket-class ranges.
func classRanges(t *unicode.RangeTable) string {
	var b strings.Builder
	for _, r := range t.R16 {
		fmt.Fprintf(&b, `\x{%x}-\x{%x}`, r.Lo, r.Hi)
	}
	for _, r := range t.R32 {
		fmt.Fprintf(&b, `\x{%x}-\x{%x}`, r.Lo, r.Hi)
	}
	return b.String()
}

// wordBoundary is \b (or, negated, \B) as the library's engine reads it:
// a place between a character of its \w and one not of it (the text's
// ends count as not), where the backtracking engine's own \b would use
// its narrower \w (which lacks ², ½, circled letters and some marks).
// Inside a bracket class \b is a backspace in both engines and is left
// alone.
func wordBoundary(negated bool) string {
	w, notW := "(?<=["+engineWord+"])", "(?<!["+engineWord+"])"
	ahead, notAhead := "(?=["+engineWord+"])", "(?!["+engineWord+"])"
	if negated {
		return "(?:" + w + ahead + "|" + notW + notAhead + ")"
	}
	return "(?:" + w + notAhead + "|" + notW + ahead + ")"
}

// shorthandClass gives what a class shorthand stands for in the library's
// engine, inside a bracket class or not, as bracket-class contents: \w
// written out, \d widened ("" for one left as it is).
func shorthandClass(c byte, inClass bool) string {
	switch c {
	case 'w', 'W':
		if inClass {
			return engineWordInClass
		}
		return engineWord
	case 'd', 'D':
		if extra := engineClassExtra["Nd"]; extra != "" {
			return `\d` + extra
		}
	}
	return ""
}

// optionGroup reports whether a group opening's text after "(?" sets
// inline options ("i)", "m-x:"), rather than opening a non-capturing,
// lookaround, named or atomic group.
func optionGroup(opts string) bool {
	return opts != "" && opts != ":" && (opts[0] == '-' || opts[0] >= 'a' && opts[0] <= 'z')
}

// engineOptions translates inline options of the library's engine
// (Oniguruma, Ruby syntax) for the backtracking one, or refuses what the
// two read differently: Ruby's m is dot-all (the backtracking engine's
// s; its own m, line anchors, is always on here, as ^ and $ are line
// anchors in Ruby syntax); i folds case by Unicode case folding, where
// one letter may match two ("ss" matches ß) and \p{Lu} stays upper case,
// which the backtracking engine does not do: refused where its scope
// holds such letter pairs or case classes; x is the same in both; any
// other letter the library refuses ("undefined group option"), so no
// worker could serve the file.
func engineOptions(pattern, scope, opts string) (string, error) {
	out := make([]byte, 0, len(opts))
	off := false // after '-': the letters turn options off
	for i := 0; i < len(opts); i++ {
		switch c := opts[i]; c {
		case '-':
			off = true
			out = append(out, c)
		case 'x':
			out = append(out, c)
		case 'm':
			out = append(out, 's')
		case 'i':
			if off {
				out = append(out, c)
				continue
			}
			lower := strings.ToLower(scope)
			for _, pair := range []string{`\p{lu}`, `\p{ll}`, `\p{lt}`, "ss", "st", "ff", "fi", "fl", "ſt"} {
				if strings.Contains(lower, pair) {
					return "", unsupported("regex %q: case-insensitive matching over %q, which the library folds otherwise", pattern, pair)
				}
			}
			out = append(out, c)
		default:
			return "", unsupported("regex %q: inline option %q, which the library does not define", pattern, string(c))
		}
	}
	return string(out), nil
}

// optionScope is the text inline options opened just before rest apply
// to: up to the close of the group they are in (of their own group for
// "(?i:", of the enclosing one for "(?i)"), or the pattern's end.
func optionScope(rest string) string {
	depth, inClass := 0, false
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; {
		case c == '\\':
			i++
		case inClass:
			inClass = c != ']'
		case c == '[':
			inClass = true
		case c == '(':
			depth++
		case c == ')':
			if depth == 0 {
				return rest[:i]
			}
			depth--
		}
	}
	return rest
}

// enginePattern rewrites a pattern written for the library's regex engine
// (Oniguruma, Ruby syntax) for the backtracking one, or says why it cannot.
//
// Classes: \p{X} and \P{X} gain what the library's newer Unicode tables
// put in them: a pattern matching letters must take a letter Go's tables
// do not know yet for one (Mistral's Tekken split, say, keeps such a letter
// in the word it ends, where Go's tables alone would cut it off). Inside a
// bracket class \p{X} gains the ranges; outside it becomes a bracket class
// of its own. \d and \w are rewritten alike (the engine's \w, letters,
// marks, most numbers and circled letters, is written out whole; its \s is
// Go's), and so are \b and \B outside a bracket class (wordBoundary).
// A \P{X}, \W or \D inside a bracket class cannot be widened this way and
// is left as it is. A nested bracket (a nested set or a POSIX
// class) and a class intersection (&&) mean something else to the
// backtracking engine, which would read them without complaint: a pattern
// with one is refused.
//
// Quantifiers: X?+, X*+ and X++ are possessive, written as atomic groups;
// an interval followed by + repeats the interval (X{1,3}+ is (X{1,3})+ in
// Ruby syntax, not a possessive interval), and {,m} is {0,m}.
//
// ^ and $ are line anchors in the library's engine; the caller compiles
// with the backtracking engine's Multiline for them.
//
// Inline options: see engineOptions.
func enginePattern(p string) (string, error) {
	b := make([]byte, 0, len(p)+16)
	inClass := false
	atom := -1       // where the last quantifiable atom starts in b; -1: none
	var groups []int // where each open group starts in b
	for i := 0; i < len(p); {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			if !inClass {
				atom = len(b)
			}
			if (p[i+1] == 'p' || p[i+1] == 'P') && i+2 < len(p) && p[i+2] == '{' {
				if end := strings.IndexByte(p[i+3:], '}'); end >= 0 {
					name := p[i+3 : i+3+end]
					if extra, ok := engineClassExtra[name]; ok {
						tok := p[i : i+4+end]
						switch neg := p[i+1] == 'P'; {
						case inClass && !neg:
							b = append(b, tok+extra...)
						case !inClass && !neg:
							b = append(b, "["+tok+extra+"]"...)
						case !inClass && neg:
							b = append(b, `[^\p{`+name+"}"+extra+"]"...)
						default:
							b = append(b, tok...)
						}
						i += 4 + end
						continue
					}
				}
			}
			if !inClass && (p[i+1] == 'b' || p[i+1] == 'B') {
				b = append(b, wordBoundary(p[i+1] == 'B')...)
				i += 2
				continue
			}
			if body := shorthandClass(p[i+1], inClass); body != "" {
				switch neg := p[i+1] == 'W' || p[i+1] == 'D'; {
				case inClass && !neg:
					b = append(b, body...)
				case !inClass && !neg:
					b = append(b, "["+body+"]"...)
				case !inClass && neg:
					b = append(b, "[^"+body+"]"...)
				default:
					b = append(b, p[i:i+2]...)
				}
				i += 2
				continue
			}
			n := 0
			if i+2 < len(p) && p[i+2] == '{' && strings.IndexByte("pPx", p[i+1]) >= 0 {
				// A braced escape (\p{Han}, \x{1F600}) is one atom: its
				// brace is no interval.
				if end := strings.IndexByte(p[i+3:], '}'); end >= 0 {
					n = 3 + end
				}
			}
			if n == 0 {
				_, n = utf8.DecodeRuneInString(p[i+1:])
			}
			b = append(b, p[i:i+1+n]...)
			i += 1 + n
			continue
		case inClass:
			switch {
			case c == '[':
				return "", unsupported("regex %q: a nested bracket or POSIX class", p)
			case c == '&' && i+1 < len(p) && p[i+1] == '&':
				return "", unsupported("regex %q: a class intersection (&&)", p)
			case c == ']':
				inClass = false
			}
		case c == '[':
			atom = len(b)
			inClass = true
			b = append(b, c)
			i++
			if i < len(p) && p[i] == '^' {
				b = append(b, '^')
				i++
			}
			if i < len(p) && p[i] == ']' { // a leading ] is a literal
				b = append(b, ']')
				i++
			}
			continue
		case c == '(':
			groups = append(groups, len(b))
			atom = -1
			// A group's opening ((?:, (?i:, (?=, (?<name>, ...) is copied
			// whole: its ? is no quantifier.
			n := 1
			if i+1 < len(p) && p[i+1] == '?' {
				n = 2
				for i+n < len(p) && p[i+n] != ':' && p[i+n] != ')' && p[i+n] != '=' && p[i+n] != '!' && p[i+n] != '>' {
					n++
				}
				if i+n < len(p) && p[i+n] != ')' {
					n++
				}
				if opts := p[i+2 : i+n]; optionGroup(opts) {
					// "(?i)" applies to the rest of its enclosing group
					// (its own ")" is copied by the loop), "(?i:" to its own.
					rest := p[i+n:]
					if !strings.HasSuffix(opts, ":") {
						rest = strings.TrimPrefix(rest, ")")
					}
					o, err := engineOptions(p, optionScope(rest), strings.TrimSuffix(opts, ":"))
					if err != nil {
						return "", err
					}
					b = append(b, "(?"+o...)
					if strings.HasSuffix(opts, ":") {
						b = append(b, ':')
					}
					i += n
					continue
				}
			}
			b = append(b, p[i:i+n]...)
			i += n
			continue
		case c == ')':
			atom = -1
			if len(groups) > 0 {
				atom = groups[len(groups)-1]
				groups = groups[:len(groups)-1]
			}
		case c == '?' || c == '*' || c == '+':
			if atom >= 0 && i+1 < len(p) && p[i+1] == '+' {
				b = wrap(b, atom, "(?>", string(c)+")")
				atom = -1
				i += 2
				continue
			}
			atom = -1
			b = append(b, c)
			i++
			if i < len(p) && p[i] == '?' { // lazy
				b = append(b, '?')
				i++
			}
			continue
		case c == '{':
			if lo, hi, n, ok := interval(p[i:]); ok && atom >= 0 {
				q := "{" + lo + hi + "}"
				if lo == "" {
					q = "{0" + hi + "}"
				}
				i += n
				if i < len(p) && p[i] == '+' {
					// Repeated, not possessive: X{n,m}+ is (X{n,m})+.
					b = wrap(b, atom, "(?:", q+")")
					continue // atom stays: the + quantifies the group
				}
				b = append(b, q...)
				atom = -1
				if i < len(p) && p[i] == '?' {
					b = append(b, '?')
					i++
				}
				continue
			}
			atom = len(b) // a literal {
		case c == '|' || c == '^' || c == '$':
			atom = -1
		default:
			atom = len(b)
			_, n := utf8.DecodeRuneInString(p[i:])
			b = append(b, p[i:i+n]...)
			i += n
			continue
		}
		b = append(b, c)
		i++
	}
	return string(b), nil
}

// wrap puts b[at:] between open and end.
func wrap(b []byte, at int, open, end string) []byte {
	atom := string(b[at:])
	return append(append(append(b[:at], open...), atom...), end...)
}

// interval reads a bounded repeat at the start of s ({n}, {n,}, {n,m},
// {,m}): its lower bound, the rest up to the closing brace (",m", "," or
// ""), and its length; ok false when s does not start with one (the brace
// is then a literal).
func interval(s string) (lo, hi string, n int, ok bool) {
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return "", "", 0, false
	}
	body := s[1:end]
	lo, rest, comma := strings.Cut(body, ",")
	digits := func(d string) bool {
		for i := 0; i < len(d); i++ {
			if d[i] < '0' || d[i] > '9' {
				return false
			}
		}
		return true
	}
	if !digits(lo) || !digits(rest) || (lo == "" && rest == "") {
		return "", "", 0, false
	}
	if comma {
		hi = "," + rest
	}
	return lo, hi, end + 1, true
}

// literal matches a fixed string; the empty string matches nothing.
type literal string

func (l literal) each(s string, fn func(start, end int)) {
	if l == "" {
		return
	}
	for i := 0; ; {
		j := strings.Index(s[i:], string(l))
		if j < 0 {
			return
		}
		fn(i+j, i+j+len(l))
		i += j + len(l)
	}
}

func (l literal) findAll(s string, dst [][2]int) [][2]int {
	l.each(s, func(a, b int) { dst = append(dst, [2]int{a, b}) })
	return dst
}

// funcMatcher returns the first match at or after i, or (-1, -1).
type funcMatcher func(s string, i int) (int, int)

func (f funcMatcher) each(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		a, b := f(s, i)
		if a < 0 {
			return
		}
		fn(a, b)
		if b == a { // an empty match: move on one character
			_, n := utf8.DecodeRuneInString(s[b:])
			b += max(n, 1)
		}
		i = b
	}
}

func (f funcMatcher) findAll(s string, dst [][2]int) [][2]int {
	f.each(s, func(a, b int) { dst = append(dst, [2]int{a, b}) })
	return dst
}

// regexMatcher is the general fallback for patterns without a scanner.
// A match that runs past regexTimeout fails the encode (never a partial
// split): it panics with an encodeError, which Encode and Load recover.
type regexMatcher struct{ re *regexp2.Regexp }

// encodeError carries an error that ends an encode (or a Load) out of the
// loop that met it: a failed regex match, an unknown character a file's
// missing unk_token should stand for.
type encodeError struct{ err error }

func (r regexMatcher) each(s string, fn func(start, end int)) {
	if s == "" {
		return
	}
	runes := []rune(s)
	// byteAt[k] is the byte offset of rune k.
	byteAt := make([]int, len(runes)+1)
	off := 0
	for k, c := range runes {
		byteAt[k] = off
		off += utf8.RuneLen(c)
	}
	byteAt[len(runes)] = off
	// An empty match right where the previous match ended is not one:
	// Oniguruma's match iterator (the library's engine) skips it, as Go's
	// regexp does; this engine would report it.
	lastEnd := -1
	m, err := r.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if end := m.Index + m.Length; m.Length > 0 || m.Index != lastEnd {
			fn(byteAt[m.Index], byteAt[end])
			lastEnd = end
		}
		m, err = r.re.FindNextMatch(m)
	}
	if err != nil {
		panic(encodeError{fmt.Errorf("tokenize: regex %q: %w", r.re.String(), err)})
	}
}

func (r regexMatcher) findAll(s string, dst [][2]int) [][2]int {
	r.each(s, func(a, b int) { dst = append(dst, [2]int{a, b}) })
	return dst
}
