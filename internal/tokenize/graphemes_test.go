package tokenize

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unicode"
	"unicode/utf8"
)

// hfGraphemes is testdata/tokenize/hf-graphemes.json
// (scripts/tokenizer-ref/graphemes.js): candidates for the library's
// cluster rules, measured through its Precompiled normalizer, and probe
// texts with what it made of them.
type hfGraphemes struct {
	Joins     [][2]rune   `json:"joins"`
	Prepend   [][2]rune   `json:"prepend"`
	Linker    [][2]rune   `json:"linker"`
	Extend    [][2]rune   `json:"extend"`
	Consonant [][2]rune   `json:"consonant"`
	Probes    [][2]string `json:"probes"`
}

func readHFGraphemes(t *testing.T) hfGraphemes {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(tokenizeTestdata(t), "hf-graphemes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g hfGraphemes
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGraphemeTables checks the cluster tables against the measurement,
// filtered by uniseg's own rules: hfLateExtend are the characters the
// library joins to "A" and uniseg does not; hfLatePrepend the signs it
// joins to what follows and uniseg does not, hfNotPrepend the reverse;
// incbLinker the linkers among
// the joining characters; incbNotExtend the joining characters that do not
// continue a conjunct; incbConsonant the consonant candidates that neither
// join what is before them nor break as controls do.
func TestGraphemeTables(t *testing.T) {
	g := readHFGraphemes(t)
	in := func(rs [][2]rune) func(rune) bool {
		return func(r rune) bool {
			for _, x := range rs {
				if x[0] <= r && r <= x[1] {
					return true
				}
			}
			return false
		}
	}
	joins, prepend, linker, extend, consonant := in(g.Joins), in(g.Prepend), in(g.Linker), in(g.Extend), in(g.Consonant)
	for _, tc := range []struct {
		name  string
		table *unicode.RangeTable
		want  func(r rune, size int) bool
	}{
		{"hfLateExtend", hfLateExtend, func(r rune, size int) bool { return joins(r) && !isMark(r, size) }},
		{"hfLatePrepend", hfLatePrepend, func(r rune, size int) bool { return prepend(r) && !isPrepend(r, size) }},
		{"hfNotPrepend", hfNotPrepend, func(r rune, size int) bool { return isPrepend(r, size) && !prepend(r) }},
		// uniseg's marks are all the library's: no table.
		{"marks", &unicode.RangeTable{}, func(r rune, size int) bool { return isMark(r, size) && !joins(r) }},
		{"incbLinker", incbLinker, func(r rune, _ int) bool { return joins(r) && linker(r) }},
		{"incbNotExtend", incbNotExtend, func(r rune, _ int) bool { return joins(r) && !extend(r) }},
		{"incbConsonant", incbConsonant, func(r rune, size int) bool {
			return consonant(r) && !joins(r) && joinsMark(r, size)
		}},
	} {
		var diff []string
		for r := rune(0); r <= utf8.MaxRune; r++ {
			if !utf8.ValidRune(r) {
				continue
			}

			if want := tc.want(r, utf8.RuneLen(r)); want != unicode.Is(tc.table, r) {
				diff = append(diff, fmt.Sprintf("%U (want %v)", r, want))
			}
		}
		if len(diff) > 0 {
			t.Errorf("%s differs from hf-graphemes.json at %d code points: %v", tc.name, len(diff), diff[:min(len(diff), 40)])
		}
	}
}

// TestGraphemeProbes compares the Precompiled normalizer with the library's
// on the probe texts of the measurement (conjuncts with every candidate
// linker, extending mark and consonant, with the nmt_nfkc charsmap).
func TestGraphemeProbes(t *testing.T) {
	g := readHFGraphemes(t)
	p := spmCharsmap(t, "spm_unigram.tokenizer.json.gz")
	fails := 0
	for _, pr := range g.Probes {
		if got := p.normalize(pr[0]); got != pr[1] && fails < 20 {
			fails++
			t.Errorf("%+q: got %+q, want %+q", pr[0], got, pr[1])
		}
	}
}
