package tokenize

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// scanAlphabet mixes the characters the split patterns tell apart: cases
// (Lu, Ll, Lt, Lm, Lo), marks, numbers (Nd, Nl, No), whitespace kinds,
// contractions' letters, punctuation and symbols, CJK in and out of
// DeepSeek's ranges, controls.
var scanAlphabet = []string{
	"a", "b", "s", "t", "r", "e", "v", "m", "l", "d", "S", "T", "R", "E", "L", "D", "X",
	"'", "'", "'s", "'LL", "'re", "’",
	"0", "1", "9", "١", "Ⅻ", "½", "²",
	" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u000b",
	".", ",", "!", "/", "//", "-", "_", "(", "`", "~", "@", "$", "+", "<", "|", "€", "©",
	"\u0301", "\u0308", "ʰ", "ǅ", "가", "中", "龥", "\u9fa6", "ひ", "カ", "ー", "ｶ", "é", "É", "ß", "Σ", "ς",
	"🍕", "👍🏽", "\u200d", "\u0001", "\u007f", "\ufffd",
	"\U00013e97", "\u1c89", "\u1c8a", // letters of a newer Unicode than Go's (Lo, Lu, Ll)
}

func randomScanText(r *rand.Rand) string {
	var b strings.Builder
	for range r.IntN(24) + 1 {
		b.WriteString(scanAlphabet[r.IntN(len(scanAlphabet))])
	}
	return b.String()
}

// TestScannersMatchRegex checks every hand-written scanner against the
// general backtracking engine (with the library's Unicode classes) on random
// text.
func TestScannersMatchRegex(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(8, 17))
	for pattern, scan := range scanners {
		re, err := compileFallback(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for range 3000 {
			s := randomScanText(r)
			got := scan.findAll(s, nil)
			want := re.findAll(s, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("pattern %q on %q:\n got %v\nwant %v", pattern, s, pieces(s, got), pieces(s, want))
			}
		}
	}
}

func pieces(s string, ms [][2]int) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = s[m[0]:m[1]]
	}
	return out
}

// TestMergeScanMatchesHeap checks the short-word merge loop against the
// heap loop on every word of the corpus-like text.
func TestMergeScanMatchesHeap(t *testing.T) {
	t.Parallel()
	vocab := map[string]uint32{}
	next := uint32(0)
	id := func(s string) uint32 {
		if v, ok := vocab[s]; ok {
			return v
		}
		vocab[s] = next
		next++
		return vocab[s]
	}
	m := &bpe{merges: newMergeTable(16)}
	for _, c := range "abcd" {
		id(string(c))
	}
	// Merges chosen so ties and chains occur.
	for rank, mg := range [][2]string{{"a", "a"}, {"a", "b"}, {"b", "a"}, {"aa", "a"}, {"ab", "ab"}, {"c", "d"}, {"aa", "aa"}, {"abab", "cd"}, {"d", "d"}, {"b", "b"}} {
		m.merges.put(pairKey(id(mg[0]), id(mg[1])), mergeRule{rank: uint32(rank), newID: id(mg[0] + mg[1])})
	}
	r := rand.New(rand.NewPCG(1, 2))
	var a, b wordScratch
	for range 5000 {
		n := r.IntN(40) + 1
		a.syms, b.syms = a.syms[:0], b.syms[:0]
		for i := range n {
			s := symbol{id: uint32(r.IntN(4)), prev: int32(i - 1), next: int32(i + 1)}
			if i == n-1 {
				s.next = -1
			}
			a.syms = append(a.syms, s)
			b.syms = append(b.syms, s)
		}
		m.mergeScan(&a)
		m.mergeHeap(&b)
		if ga, gb := alive(a.syms), alive(b.syms); !slices.Equal(ga, gb) {
			t.Fatalf("scan %v, heap %v", ga, gb)
		}
	}
}

func alive(syms []symbol) []uint32 {
	var out []uint32
	for i := int32(0); i >= 0 && int(i) < len(syms); i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

// TestClassesMatchEngine checks the class tests against the classes the HF
// Rust core's regex engine reports for every code point
// (testdata/tokenize/onig-classes.json, measured by
// scripts/tokenizer-ref/unicode-classes.js).
func TestClassesMatchEngine(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "tokenize", "onig-classes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var classes map[string][][2]rune
	if err := json.Unmarshal(data, &classes); err != nil {
		t.Fatal(err)
	}
	member := func(cls string) []bool {
		in := make([]bool, unicode.MaxRune+1)
		for _, r := range classes[cls] {
			for c := r[0]; c <= r[1]; c++ {
				in[c] = true
			}
		}
		return in
	}
	L, N, M, P, S := member("L"), member("N"), member("M"), member("P"), member("S")
	Lu, Ll, Lt, Lm, Lo := member("Lu"), member("Ll"), member("Lt"), member("Lm"), member("Lo")
	for c := rune(0); c <= unicode.MaxRune; c++ {
		if c >= 0xD800 && c <= 0xDFFF {
			continue
		}
		checks := []struct {
			name      string
			got, want bool
		}{
			{"L", isL(c), L[c]},
			{"N", isN(c), N[c]},
			{"M", isM(c), M[c]},
			{"P|S", isPS(c), P[c] || S[c]},
			{"Lu|Lt|Lm|Lo|M", isUpperish(c), Lu[c] || Lt[c] || Lm[c] || Lo[c] || M[c]},
			{"Ll|Lm|Lo|M", isLowerish(c), Ll[c] || Lm[c] || Lo[c] || M[c]},
			{"[^\\s\\p{L}\\p{N}]", isOther(c), !unicode.IsSpace(c) && !L[c] && !N[c]},
		}
		for _, ck := range checks {
			if ck.got != ck.want {
				t.Fatalf("%U in %s: got %v, the engine says %v", c, ck.name, ck.got, ck.want)
			}
		}
	}
}
