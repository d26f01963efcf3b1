package tokenize

import (
	"math/rand/v2"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// TestNormalizeLongMarkRuns: a run of more than 30 combining marks is
// ordered and composed whole, as Hugging Face's normalizers do, not cut
// by the U+034F the Stream-Safe Text Format inserts. The expected texts
// are CPython's unicodedata.normalize (Unicode 14), which bounds no run.
func TestNormalizeLongMarkRuns(t *testing.T) {
	t.Parallel()
	r := strings.Repeat
	for _, tc := range []struct{ in, nfc, nfd, nfkc, nfkd string }{
		{in: "a" + r("\u0301", 31), nfc: "\u00e1" + r("\u0301", 30), nfd: "a" + r("\u0301", 31)},
		// The cedilla (class 202) sorts before the acutes (230) from the
		// end of the run, and composes first.
		{in: "c" + r("\u0301", 35) + "\u0327", nfc: "\u1e09" + r("\u0301", 34), nfd: "c\u0327" + r("\u0301", 35)},
		{in: "e" + r("\u0301\u0323\u0302\u0328", 10) + "x",
			nfc: "\u0119" + r("\u0328", 9) + r("\u0323", 10) + r("\u0301\u0302", 10) + "x",
			nfd: "e" + r("\u0328", 10) + r("\u0323", 10) + r("\u0301\u0302", 10) + "x"},
		// Jamo compose across nothing: the final consonant after the
		// marks stays apart.
		{in: "\u1100\u1161" + r("\u0301", 31) + "\u11a8", nfc: "\uac00" + r("\u0301", 31) + "\u11a8", nfd: "\u1100\u1161" + r("\u0301", 31) + "\u11a8"},
		{in: "\ufb01" + r("\u0301", 32) + "\u2460\u0323", nfc: "\ufb01" + r("\u0301", 32) + "\u2460\u0323", nfd: "\ufb01" + r("\u0301", 32) + "\u2460\u0323",
			nfkc: "f\u00ed" + r("\u0301", 31) + "1\u0323", nfkd: "fi" + r("\u0301", 32) + "1\u0323"},
		// A U+034F in the text is kept where it is.
		{in: "o\u034f" + r("\u0308", 40) + "\u0304\u0327", nfc: "o\u034f\u0327" + r("\u0308", 40) + "\u0304", nfd: "o\u034f\u0327" + r("\u0308", 40) + "\u0304"},
	} {
		if tc.nfkc == "" {
			tc.nfkc, tc.nfkd = tc.nfc, tc.nfd
		}
		for _, f := range []struct {
			name string
			form norm.Form
			want string
		}{{"NFC", norm.NFC, tc.nfc}, {"NFD", norm.NFD, tc.nfd}, {"NFKC", norm.NFKC, tc.nfkc}, {"NFKD", norm.NFKD, tc.nfkd}} {
			if got := (unicodeNorm{f.form}).normalize(tc.in); got != f.want {
				t.Errorf("%s(%+q)\n = %+q\nwant %+q", f.name, tc.in, got, f.want)
			}
		}
	}
}

// TestNormalizeFullAgreesWithLibrary: the unbounded normalization gives
// what the library gives wherever the library's bound is not reached, on
// texts mixing starters, marks of several classes, jamo, compatibility
// characters, singletons and composition exclusions.
func TestNormalizeFullAgreesWithLibrary(t *testing.T) {
	t.Parallel()
	pool := []rune("aeoucnAIOKSZ\u00e1\u00e7\u1e09\u0119" + // starters, composites
		"\u0300\u0301\u0302\u0308\u0323\u0327\u0328\u0345\u05b0\u0591\u093c\u094d\u0f71\u0f72\u0f74\u302a\u3099" + // marks
		"\u1100\u1161\u11a8\uac00\uac01" + // jamo and syllables
		"\u0958\u212b\u2126\u0344\u0f73\u1fee" + // exclusions, singletons, non-starter decompositions
		"\ufb01\u2460\u00bd\u3300\uff76\uff9e\u1e9b\u01c4" + // compatibility
		"\u0b47\u0b3e\u0b57\u09c7\u09be\u0cc6\u0cc2\u0cd5\u034f")
	rng := rand.New(rand.NewPCG(1, 2))
	forms := []norm.Form{norm.NFC, norm.NFD, norm.NFKC, norm.NFKD}
	for range 20000 {
		rs := make([]rune, 1+rng.IntN(12))
		for i := range rs {
			rs[i] = pool[rng.IntN(len(pool))]
		}
		s := string(rs)
		for _, f := range forms {
			if got, want := (unicodeNorm{f}).full(s), f.String(s); got != want {
				t.Fatalf("form %v of %+q: %+q, the library %+q", f, s, got, want)
			}
		}
	}
}

// TestReplaceEmptyMatches: an empty match is a place where Replace
// inserts its content, the first position included ("^" puts it in
// front of the text), and an empty match right after another match is
// no match, as in the library's regex engine.
func TestReplaceEmptyMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ pattern, content, in, want string }{
		{`^`, "X", "ab", "Xab"},
		{`^`, "X", "a\nb", "Xa\nXb"},
		{`\A\s*`, "\u2581", "hi", "\u2581hi"},
		{` *`, "_", "a  b", "_a_b_"},
		{`a*`, "-", "ab", "-b-"},
		{`x`, "-", "ab", "ab"},
	} {
		re := tc.pattern
		m, err := compilePattern(patternJSON{Regex: &re})
		if err != nil {
			t.Fatal(err)
		}
		if got := (replace{m: m, content: tc.content}).normalize(tc.in); got != tc.want {
			t.Errorf("Replace(%q, %q) on %q = %q, want %q", tc.pattern, tc.content, tc.in, got, tc.want)
		}
	}
}
