package chattemplate

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// Python's str case methods use Unicode's full case mappings: "ß".upper()
// is "SS", "İ".lower() is "i̇", a capital sigma ending a word lowers to "ς".
// Go's strings.ToUpper and ToLower map one rune to one rune, so these go
// through golang.org/x/text/cases, whose language-neutral mappings are
// Python's. A Caser keeps state, so each call makes its own; ASCII text,
// the common case, takes Go's mapping, which is the same there.

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// pyUpper is Python's str.upper.
func pyUpper(s string) string {
	if isASCII(s) {
		return strings.ToUpper(s)
	}
	return cases.Upper(language.Und).String(s)
}

// pyLower is Python's str.lower.
func pyLower(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	return cases.Lower(language.Und).String(s)
}

// pyCasefold is Python's str.casefold. Unicode folds Cherokee letters to
// their upper-case forms (the older ones); x/text folds them to the lower-
// case ones, which are mapped back here.
func pyCasefold(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	return strings.Map(func(c rune) rune {
		switch {
		case c >= 0xAB70 && c <= 0xABBF:
			return c - 0xAB70 + 0x13A0
		case c >= 0x13F8 && c <= 0x13FD:
			return c - 8
		}
		return c
	}, cases.Fold().String(s))
}

// pyTitleRune is the full title-case mapping of one character ("ß" gives
// "Ss", "ǆ" gives "ǅ").
func pyTitleRune(c rune) string {
	if c < utf8.RuneSelf {
		return strings.ToUpper(string(c))
	}
	return cases.Title(language.Und, cases.NoLower).String(string(c))
}

// pyIsCased is Unicode's Cased property, which Python's title and
// islower/isupper test.
func pyIsCased(c rune) bool {
	return unicode.IsUpper(c) || unicode.IsLower(c) || unicode.IsTitle(c) ||
		unicode.Is(unicode.Other_Lowercase, c) || unicode.Is(unicode.Other_Uppercase, c)
}

func pyIsLowerRune(c rune) bool {
	return unicode.IsLower(c) || unicode.Is(unicode.Other_Lowercase, c)
}

func pyIsUpperRune(c rune) bool {
	return unicode.IsUpper(c) || unicode.Is(unicode.Other_Uppercase, c)
}

// pyCapitalize is Python's str.capitalize: the first character title-cased,
// the rest lower-cased (in the context of the whole string, as a final
// sigma needs).
func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	first, n := utf8.DecodeRuneInString(s)
	if isASCII(s) {
		return strings.ToUpper(s[:n]) + strings.ToLower(s[n:])
	}
	lowered := pyLower(s)
	rest, ok := strings.CutPrefix(lowered, pyLower(s[:n]))
	if !ok {
		rest = pyLower(s[n:])
	}
	return pyTitleRune(first) + rest
}

// pyTitle is Python's str.title: a character after a cased one is
// lower-cased, any other title-cased.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	rs := []rune(s)
	for i, c := range rs {
		switch {
		case !prevCased:
			b.WriteString(pyTitleRune(c))
		case c == 'Σ':
			b.WriteString(lowerSigma(rs, i))
		default:
			b.WriteString(pyLower(string(c)))
		}
		prevCased = pyIsCased(c)
	}
	return b.String()
}

// lowerSigma lowers the capital sigma at rs[i] as Unicode's Final_Sigma
// rule does: "ς" after a cased letter and not before one (case-ignorable
// characters between are skipped), else "σ".
func lowerSigma(rs []rune, i int) string {
	before := false
	for j := i - 1; j >= 0; j-- {
		if !caseIgnorable(rs[j]) {
			before = pyIsCased(rs[j])
			break
		}
	}
	after := false
	for j := i + 1; j < len(rs); j++ {
		if !caseIgnorable(rs[j]) {
			after = pyIsCased(rs[j])
			break
		}
	}
	if before && !after {
		return "ς"
	}
	return "σ"
}

// caseIgnorable approximates Unicode's Case_Ignorable property: marks,
// format characters, modifier letters and symbols, and the word-internal
// punctuation Unicode lists (apostrophes, period, colon, middle dot).
func caseIgnorable(c rune) bool {
	switch c {
	case '\'', '.', ':', '^', '`', 0xB7, 0x2018, 0x2019, 0x2024, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A:
		return true
	}
	return unicode.In(c, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// pySwapcase is Python's str.swapcase.
func pySwapcase(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, c := range rs {
		switch {
		case c == 'Σ':
			b.WriteString(lowerSigma(rs, i))
		case pyIsUpperRune(c):
			b.WriteString(pyLower(string(c)))
		case pyIsLowerRune(c):
			b.WriteString(pyUpper(string(c)))
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}
