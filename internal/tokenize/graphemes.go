package tokenize

import (
	"unicode"
	"unicode/utf8"

	"github.com/rivo/uniseg"
)

// The Precompiled normalizer splits text into the library's grapheme
// clusters, those of the unicode-segmentation crate 1.13.3 (Unicode 17.0.0).
// uniseg follows Unicode 15.0.0; clusterEnd corrects its clusters where the
// rules have changed since:
//   - marks added in 16.0 and 17.0 join the character before them
//     (hfLateExtend);
//   - prepended signs added since 15.0 join what follows (hfLatePrepend), and
//     U+11A3A, a prepended sign until 15.1, no longer does (hfNotPrepend);
//   - GB9c (15.1, extended to more scripts in 17.0): a consonant, a linker (a
//     virama) with the extending marks around it, and the next consonant are
//     one cluster (incbLinker, incbNotExtend, incbConsonant).
// The tables are measured from the library through its Precompiled
// normalizer (scripts/tokenizer-ref/graphemes.js into hf-graphemes.json), and
// graphemes_test.go checks them against the measurement. Consonants are
// measured in the BMP only: a supplementary one with a mark is a cluster of
// 6 bytes or more, which the normalizer treats a character at a time, as it
// treats separate clusters, so only a BMP consonant after it could tell.

// clusterEnd returns the length of the library's cluster that starts s,
// given n, the length of uniseg's (longer or, after U+11A3A, shorter).
func clusterEnd(s string, n int) int {
	if r, size := utf8.DecodeRuneInString(s); n > size && unicode.Is(hfNotPrepend, r) {
		// The cluster is the letter and its marks.
		n = size
		for n < len(s) {
			r, size = utf8.DecodeRuneInString(s[n:])
			if !isMark(r, size) && !unicode.Is(hfLateExtend, r) {
				break
			}
			n += size
		}
	}
	n = lateExtend(s, n)
	for n < len(s) {
		// GB9b: a prepended sign joins what follows unless that is a
		// control character.
		last, _ := utf8.DecodeLastRuneInString(s[:n])
		if r, size := utf8.DecodeRuneInString(s[n:]); unicode.Is(hfLatePrepend, last) && joinsMark(r, size) {
			next, _, _, _ := uniseg.FirstGraphemeClusterInString(s[n:], -1)
			n = lateExtend(s, n+len(next))
			continue
		}
		break
	}
	for n < len(s) {
		r, _ := utf8.DecodeRuneInString(s[n:])
		if !unicode.Is(incbConsonant, r) || !endsInConjunct(s[:n]) {
			break
		}
		next, _, _, _ := uniseg.FirstGraphemeClusterInString(s[n:], -1)
		n = lateExtend(s, n+len(next))
	}
	return n
}

// endsInConjunct reports whether a cluster ends as GB9c wants before a
// consonant: a consonant, then extending marks and linkers, a linker among
// them.
func endsInConjunct(c string) bool {
	linked := false
	for len(c) > 0 {
		r, size := utf8.DecodeLastRuneInString(c)
		switch {
		case unicode.Is(incbLinker, r):
			linked = true
		case unicode.Is(incbConsonant, r):
			return linked
		case (isMark(r, size) || unicode.Is(hfLateExtend, r)) && !unicode.Is(incbNotExtend, r):
		default:
			return false
		}
		c = c[:len(c)-size]
	}
	return false
}

// lateExtend returns the length of the cluster that starts s and that
// uniseg ends at n, once extended by the marks it does not know to be marks
// (hfLateExtend) and any marks after them. A cluster that ends in a control
// character takes none.
func lateExtend(s string, n int) int {
	if n >= len(s) || s[n] < 0xE0 { // every hfLateExtend rune has 3 or 4 bytes
		return n
	}
	r, size := utf8.DecodeRuneInString(s[n:])
	if !unicode.Is(hfLateExtend, r) {
		return n
	}
	last, lastSize := utf8.DecodeLastRuneInString(s[:n])
	if !joinsMark(last, lastSize) {
		return n
	}
	n += size
	for n < len(s) {
		r, size = utf8.DecodeRuneInString(s[n:])
		if !unicode.Is(hfLateExtend, r) && !isMark(r, size) {
			break
		}
		n += size
	}
	return n
}

// joinsMark reports whether uniseg puts a combining mark (U+0301) in the
// cluster of r: not after a control character, CR or LF.
func joinsMark(r rune, size int) bool {
	var buf [utf8.UTFMax + 2]byte
	b := utf8.AppendRune(buf[:0], r)
	b = append(b, "\u0301"...)
	cluster, _, _, _ := uniseg.FirstGraphemeCluster(b, -1)
	return len(cluster) > size
}

// isMark reports whether uniseg joins r to a letter before it: an extending
// character, a spacing mark or a zero-width joiner.
func isMark(r rune, size int) bool {
	var buf [utf8.UTFMax + 1]byte
	b := append(buf[:0], 'a')
	b = utf8.AppendRune(b, r)
	cluster, _, _, _ := uniseg.FirstGraphemeCluster(b, -1)
	return len(cluster) == 1+size
}

// isPrepend reports whether uniseg joins r to what follows it.
func isPrepend(r rune, size int) bool {
	var buf [utf8.UTFMax + 1]byte
	b := utf8.AppendRune(buf[:0], r)
	b = append(b, 'a')
	cluster, _, _, _ := uniseg.FirstGraphemeCluster(b, -1)
	return len(cluster) > size
}

// hfLatePrepend are the prepended signs the library knows and uniseg does
// not: those of Unicode 16.0 and 17.0.
var hfLatePrepend = &unicode.RangeTable{
	R32: []unicode.Range32{{0x113d1, 0x113d1, 1}},
}

// hfNotPrepend are the characters uniseg takes for prepended signs and the
// library does not (Unicode 15.1 made U+11A3A a letter).
var hfNotPrepend = &unicode.RangeTable{
	R32: []unicode.Range32{{0x11a3a, 0x11a3a, 1}},
}

// hfLateExtend are the characters the library joins to the character
// before them and uniseg does not: the marks of Unicode 16.0 and 17.0.
var hfLateExtend = &unicode.RangeTable{
	R16: []unicode.Range16{
		{0x0897, 0x0897, 1}, {0x1acf, 0x1add, 1}, {0x1ae0, 0x1aeb, 1},
	},
	R32: []unicode.Range32{
		{0x10d69, 0x10d6d, 1}, {0x10efa, 0x10efc, 1}, {0x113b8, 0x113c0, 1}, {0x113c2, 0x113c2, 1},
		{0x113c5, 0x113c5, 1}, {0x113c7, 0x113ca, 1}, {0x113cc, 0x113d0, 1}, {0x113d2, 0x113d2, 1},
		{0x113e1, 0x113e2, 1}, {0x11b60, 0x11b67, 1}, {0x11f5a, 0x11f5a, 1}, {0x1611e, 0x1612f, 1},
		{0x1e5ee, 0x1e5ef, 1}, {0x1e6e3, 0x1e6e3, 1}, {0x1e6e6, 0x1e6e6, 1}, {0x1e6ee, 0x1e6ef, 1},
		{0x1e6f5, 0x1e6f5, 1},
	},
}

// incbLinker are the linkers of GB9c (Indic_Conjunct_Break=Linker).
var incbLinker = &unicode.RangeTable{
	R16: []unicode.Range16{
		{0x094d, 0x094d, 1}, {0x09cd, 0x09cd, 1}, {0x0acd, 0x0acd, 1}, {0x0b4d, 0x0b4d, 1},
		{0x0c4d, 0x0c4d, 1}, {0x0d4d, 0x0d4d, 1}, {0x1039, 0x1039, 1}, {0x17d2, 0x17d2, 1},
		{0x1a60, 0x1a60, 1}, {0x1b44, 0x1b44, 1}, {0x1bab, 0x1bab, 1}, {0xa9c0, 0xa9c0, 1},
		{0xaaf6, 0xaaf6, 1},
	},
	R32: []unicode.Range32{
		{0x10a3f, 0x10a3f, 1}, {0x11133, 0x11133, 1}, {0x113d0, 0x113d0, 1}, {0x1193e, 0x1193e, 1},
		{0x11a47, 0x11a47, 1}, {0x11a99, 0x11a99, 1}, {0x11f42, 0x11f42, 1},
	},
}

// incbNotExtend are the marks (to uniseg or hfLateExtend) that end a
// conjunct: the spacing marks and ZWNJ, which are not
// Indic_Conjunct_Break=Extend.
var incbNotExtend = &unicode.RangeTable{
	R16: []unicode.Range16{
		{0x0903, 0x0903, 1}, {0x093b, 0x093b, 1}, {0x093e, 0x0940, 1}, {0x0949, 0x094c, 1},
		{0x094e, 0x094f, 1}, {0x0982, 0x0983, 1}, {0x09bf, 0x09c0, 1}, {0x09c7, 0x09c8, 1},
		{0x09cb, 0x09cc, 1}, {0x0a03, 0x0a03, 1}, {0x0a3e, 0x0a40, 1}, {0x0a83, 0x0a83, 1},
		{0x0abe, 0x0ac0, 1}, {0x0ac9, 0x0ac9, 1}, {0x0acb, 0x0acc, 1}, {0x0b02, 0x0b03, 1},
		{0x0b40, 0x0b40, 1}, {0x0b47, 0x0b48, 1}, {0x0b4b, 0x0b4c, 1}, {0x0bbf, 0x0bbf, 1},
		{0x0bc1, 0x0bc2, 1}, {0x0bc6, 0x0bc8, 1}, {0x0bca, 0x0bcc, 1}, {0x0c01, 0x0c03, 1},
		{0x0c41, 0x0c44, 1}, {0x0c82, 0x0c83, 1}, {0x0cbe, 0x0cbe, 1}, {0x0cc1, 0x0cc1, 1},
		{0x0cc3, 0x0cc4, 1}, {0x0cf3, 0x0cf3, 1}, {0x0d02, 0x0d03, 1}, {0x0d3f, 0x0d40, 1},
		{0x0d46, 0x0d48, 1}, {0x0d4a, 0x0d4c, 1}, {0x0d82, 0x0d83, 1}, {0x0dd0, 0x0dd1, 1},
		{0x0dd8, 0x0dde, 1}, {0x0df2, 0x0df3, 1}, {0x0e33, 0x0e33, 1}, {0x0eb3, 0x0eb3, 1},
		{0x0f3e, 0x0f3f, 1}, {0x0f7f, 0x0f7f, 1}, {0x1031, 0x1031, 1}, {0x103b, 0x103c, 1},
		{0x1056, 0x1057, 1}, {0x1084, 0x1084, 1}, {0x17b6, 0x17b6, 1}, {0x17be, 0x17c5, 1},
		{0x17c7, 0x17c8, 1}, {0x1923, 0x1926, 1}, {0x1929, 0x192b, 1}, {0x1930, 0x1931, 1},
		{0x1933, 0x1938, 1}, {0x1a19, 0x1a1a, 1}, {0x1a55, 0x1a55, 1}, {0x1a57, 0x1a57, 1},
		{0x1a6d, 0x1a72, 1}, {0x1b04, 0x1b04, 1}, {0x1b3e, 0x1b41, 1}, {0x1b82, 0x1b82, 1},
		{0x1ba1, 0x1ba1, 1}, {0x1ba6, 0x1ba7, 1}, {0x1be7, 0x1be7, 1}, {0x1bea, 0x1bec, 1},
		{0x1bee, 0x1bee, 1}, {0x1c24, 0x1c2b, 1}, {0x1c34, 0x1c35, 1}, {0x1ce1, 0x1ce1, 1},
		{0x1cf7, 0x1cf7, 1}, {0x200c, 0x200c, 1}, {0xa823, 0xa824, 1}, {0xa827, 0xa827, 1},
		{0xa880, 0xa881, 1}, {0xa8b4, 0xa8c3, 1}, {0xa952, 0xa952, 1}, {0xa983, 0xa983, 1},
		{0xa9b4, 0xa9b5, 1}, {0xa9ba, 0xa9bb, 1}, {0xa9be, 0xa9bf, 1}, {0xaa2f, 0xaa30, 1},
		{0xaa33, 0xaa34, 1}, {0xaa4d, 0xaa4d, 1}, {0xaaeb, 0xaaeb, 1}, {0xaaee, 0xaaef, 1},
		{0xaaf5, 0xaaf5, 1}, {0xabe3, 0xabe4, 1}, {0xabe6, 0xabe7, 1}, {0xabe9, 0xabea, 1},
		{0xabec, 0xabec, 1},
	},
	R32: []unicode.Range32{
		{0x11000, 0x11000, 1}, {0x11002, 0x11002, 1}, {0x11082, 0x11082, 1}, {0x110b0, 0x110b2, 1},
		{0x110b7, 0x110b8, 1}, {0x1112c, 0x1112c, 1}, {0x11145, 0x11146, 1}, {0x11182, 0x11182, 1},
		{0x111b3, 0x111b5, 1}, {0x111bf, 0x111bf, 1}, {0x111ce, 0x111ce, 1}, {0x1122c, 0x1122e, 1},
		{0x11232, 0x11233, 1}, {0x112e0, 0x112e2, 1}, {0x11302, 0x11303, 1}, {0x1133f, 0x1133f, 1},
		{0x11341, 0x11344, 1}, {0x11347, 0x11348, 1}, {0x1134b, 0x1134c, 1}, {0x11362, 0x11363, 1},
		{0x113b9, 0x113ba, 1}, {0x113ca, 0x113ca, 1}, {0x113cc, 0x113cd, 1}, {0x11435, 0x11437, 1},
		{0x11440, 0x11441, 1}, {0x11445, 0x11445, 1}, {0x114b1, 0x114b2, 1}, {0x114b9, 0x114b9, 1},
		{0x114bb, 0x114bc, 1}, {0x114be, 0x114be, 1}, {0x114c1, 0x114c1, 1}, {0x115b0, 0x115b1, 1},
		{0x115b8, 0x115bb, 1}, {0x115be, 0x115be, 1}, {0x11630, 0x11632, 1}, {0x1163b, 0x1163c, 1},
		{0x1163e, 0x1163e, 1}, {0x116ac, 0x116ac, 1}, {0x116ae, 0x116af, 1}, {0x1171e, 0x1171e, 1},
		{0x11726, 0x11726, 1}, {0x1182c, 0x1182e, 1}, {0x11838, 0x11838, 1}, {0x11931, 0x11935, 1},
		{0x11937, 0x11938, 1}, {0x11940, 0x11940, 1}, {0x11942, 0x11942, 1}, {0x119d1, 0x119d3, 1},
		{0x119dc, 0x119df, 1}, {0x119e4, 0x119e4, 1}, {0x11a39, 0x11a39, 1}, {0x11a57, 0x11a58, 1},
		{0x11a97, 0x11a97, 1}, {0x11b61, 0x11b61, 1}, {0x11b65, 0x11b65, 1}, {0x11b67, 0x11b67, 1},
		{0x11c2f, 0x11c2f, 1}, {0x11c3e, 0x11c3e, 1}, {0x11ca9, 0x11ca9, 1}, {0x11cb1, 0x11cb1, 1},
		{0x11cb4, 0x11cb4, 1}, {0x11d8a, 0x11d8e, 1}, {0x11d93, 0x11d94, 1}, {0x11d96, 0x11d96, 1},
		{0x11ef5, 0x11ef6, 1}, {0x11f03, 0x11f03, 1}, {0x11f34, 0x11f35, 1}, {0x11f3e, 0x11f3f, 1},
		{0x1612a, 0x1612c, 1}, {0x16f51, 0x16f87, 1},
	},
}

// incbConsonant are the consonants of GB9c (Indic_Conjunct_Break=Consonant)
// in the BMP.
var incbConsonant = &unicode.RangeTable{
	R16: []unicode.Range16{
		{0x0915, 0x0939, 1}, {0x0958, 0x095f, 1}, {0x0978, 0x097f, 1}, {0x0995, 0x09a8, 1},
		{0x09aa, 0x09b0, 1}, {0x09b2, 0x09b2, 1}, {0x09b6, 0x09b9, 1}, {0x09dc, 0x09dd, 1},
		{0x09df, 0x09df, 1}, {0x09f0, 0x09f1, 1}, {0x0a95, 0x0aa8, 1}, {0x0aaa, 0x0ab0, 1},
		{0x0ab2, 0x0ab3, 1}, {0x0ab5, 0x0ab9, 1}, {0x0af9, 0x0af9, 1}, {0x0b15, 0x0b28, 1},
		{0x0b2a, 0x0b30, 1}, {0x0b32, 0x0b33, 1}, {0x0b35, 0x0b39, 1}, {0x0b5c, 0x0b5d, 1},
		{0x0b5f, 0x0b5f, 1}, {0x0b71, 0x0b71, 1}, {0x0c15, 0x0c28, 1}, {0x0c2a, 0x0c39, 1},
		{0x0c58, 0x0c5a, 1}, {0x0d15, 0x0d3a, 1}, {0x1000, 0x102a, 1}, {0x103f, 0x103f, 1},
		{0x1050, 0x1055, 1}, {0x105a, 0x105d, 1}, {0x1061, 0x1061, 1}, {0x1065, 0x1066, 1},
		{0x106e, 0x1070, 1}, {0x1075, 0x1081, 1}, {0x108e, 0x108e, 1}, {0x1780, 0x17b3, 1},
		{0x1a20, 0x1a54, 1}, {0x1b0b, 0x1b0c, 1}, {0x1b13, 0x1b33, 1}, {0x1b45, 0x1b4c, 1},
		{0x1b83, 0x1ba0, 1}, {0x1bae, 0x1baf, 1}, {0x1bbb, 0x1bbd, 1}, {0xa989, 0xa98b, 1},
		{0xa98f, 0xa9b2, 1}, {0xa9e0, 0xa9e4, 1}, {0xa9e7, 0xa9ef, 1}, {0xa9fa, 0xa9fe, 1},
		{0xaa60, 0xaa6f, 1}, {0xaa71, 0xaa73, 1}, {0xaa7a, 0xaa7a, 1}, {0xaa7e, 0xaa7f, 1},
		{0xaae0, 0xaaea, 1}, {0xabc0, 0xabda, 1},
	},
}
