package tokenize

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// matcher finds the non-overlapping matches of a pattern, left to right.
type matcher interface {
	each(s string, fn func(start, end int))
	findAll(s string, dst [][2]int) [][2]int
}

// regexTimeout bounds one regex match of the general (backtracking) engine.
var regexTimeout = 2 * time.Second

func compilePattern(p patternJSON) (matcher, error) {
	switch {
	case p.String != nil && p.Regex == nil:
		return literal(*p.String), nil
	case p.Regex != nil && p.String == nil:
		if m := knownScanner(*p.Regex); m != nil {
			return m, nil
		}
		re, err := regexp2.Compile(*p.Regex, regexp2.Unicode)
		if err != nil {
			return nil, fmt.Errorf("compile regex %q: %w", *p.Regex, err)
		}
		re.MatchTimeout = regexTimeout
		return regexMatcher{re}, nil
	}
	return nil, fmt.Errorf("pattern needs exactly one of String and Regex")
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
// split): it panics with a regexError, which Encode and Load recover.
type regexMatcher struct{ re *regexp2.Regexp }

// regexError carries a failed regex match out of a matcher.
type regexError struct{ err error }

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
	m, err := r.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		fn(byteAt[m.Index], byteAt[m.Index+m.Length])
		m, err = r.re.FindNextMatch(m)
	}
	if err != nil {
		panic(regexError{fmt.Errorf("tokenize: regex %q: %w", r.re.String(), err)})
	}
}

func (r regexMatcher) findAll(s string, dst [][2]int) [][2]int {
	r.each(s, func(a, b int) { dst = append(dst, [2]int{a, b}) })
	return dst
}
