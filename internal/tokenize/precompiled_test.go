package tokenize

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/continuum-router/continuum/internal/testutil"
)

// precompiledGolden is a testdata/tokenize/precompiled-<name>.json: what the
// library's Precompiled normalizer makes of text with one file's charsmap
// (scripts/tokenizer-ref/spm-golden.js).
type precompiledGolden struct {
	Source string          `json:"source"`
	Corpus [][2]string     `json:"corpus"`
	Single []cpResult      `json:"single"`
	After  []contextResult `json:"after"`
	Before []contextResult `json:"before"`
}

type cpResult struct {
	CP  rune
	Out string
}

func (c *cpResult) UnmarshalJSON(b []byte) error {
	return json.Unmarshal(b, &[]any{&c.CP, &c.Out})
}

type contextResult struct {
	Context string
	CP      rune
	Out     string
}

func (c *contextResult) UnmarshalJSON(b []byte) error {
	return json.Unmarshal(b, &[]any{&c.Context, &c.CP, &c.Out})
}

func tokenizeTestdata(t *testing.T) string {
	t.Helper()
	return filepath.Join(testutil.RepoRoot(t), "testdata", "tokenize")
}

// spmCharsmap loads the Precompiled stage of a SentencePiece test file's
// normalizer (a Sequence whose first stage it is).
func spmCharsmap(t *testing.T, file string) *precompiled {
	t.Helper()
	f, err := os.Open(filepath.Join(tokenizeTestdata(t), file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Normalizer struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		} `json:"normalizer"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	n, err := parseNormalizer(doc.Normalizer.Normalizers[0])
	if err != nil {
		t.Fatal(err)
	}
	p, ok := n.(*precompiled)
	if !ok {
		t.Fatalf("%s: the first normalizer is %T", file, n)
	}
	return p
}

// TestPrecompiledMatchesCore compares the Precompiled normalizer with the
// library's over the corpus and every code point (alone, after a mapped
// character, before a letter), with the charsmaps of SentencePiece models
// trained here (nmt_nfkc, nfkc_cf).
func TestPrecompiledMatchesCore(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(tokenizeTestdata(t), "precompiled-*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no precompiled goldens (%v)", err)
	}
	var corpus []struct {
		Name string `json:"name"`
		Text string `json:"text"`
	}
	data, err := os.ReadFile(filepath.Join(tokenizeTestdata(t), "corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(data) {
		var c struct {
			Name string `json:"name"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		corpus = append(corpus, c)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var g precompiledGolden
			if err := json.Unmarshal(raw, &g); err != nil {
				t.Fatal(err)
			}
			p := spmCharsmap(t, g.Source)
			fails := 0
			check := func(what, in, want string) {
				t.Helper()
				if got := p.normalize(in); got != want && fails < 20 {
					fails++
					t.Errorf("%s: %+q: got %+q, want %+q", what, in, got, want)
				}
			}

			changed := make(map[string]string, len(g.Corpus))
			for _, c := range g.Corpus {
				changed[c[0]] = c[1]
			}
			for _, c := range corpus {
				want, ok := changed[c.Name]
				if !ok {
					want = c.Text
				}
				check("corpus "+c.Name, c.Text, want)
			}

			single := make(map[rune]string, len(g.Single))
			for _, s := range g.Single {
				single[s.CP] = s.Out
			}
			alone := func(r rune) string {
				if s, ok := single[r]; ok {
					return s
				}
				return string(r)
			}
			after := make(map[string]map[rune]string)
			for _, a := range g.After {
				if after[a.Context] == nil {
					after[a.Context] = map[rune]string{}
				}
				after[a.Context][a.CP] = a.Out
			}
			before := make(map[string]map[rune]string)
			for _, b := range g.Before {
				if before[b.Context] == nil {
					before[b.Context] = map[rune]string{}
				}
				before[b.Context][b.CP] = b.Out
			}
			// The contexts are the script's: after "²" and "A", before "a".
			prefixes, suffixes := []string{"\u00b2", "A"}, []string{"a"}
			for r := rune(0); r <= utf8.MaxRune; r++ {
				if !utf8.ValidRune(r) {
					continue
				}
				s := string(r)
				check("single", s, alone(r))
				for _, x := range prefixes {
					want, ok := after[x][r]
					if !ok {
						want = alone([]rune(x)[0]) + alone(r)
					}
					check("after", x+s, want)
				}
				for _, x := range suffixes {
					want, ok := before[x][r]
					if !ok {
						want = alone(r) + alone([]rune(x)[0])
					}
					check("before", s+x, want)
				}
			}
		})
	}
}

// charsmapJSON is a Precompiled normalizer's JSON with the given
// precompiled_charsmap value (raw JSON).
func charsmapJSON(v string) json.RawMessage {
	if v == "" {
		return json.RawMessage(`{"type": "Precompiled"}`)
	}
	return json.RawMessage(`{"type": "Precompiled", "precompiled_charsmap": ` + v + `}`)
}

// TestPrecompiledLoad: the charsmaps the library loads and refuses
// (measured with the npm binding).
func TestPrecompiledLoad(t *testing.T) {
	for _, tc := range []struct {
		charsmap string
		ok       bool
	}{
		{"", false},     // missing
		{`null`, false}, // null
		{`""`, false},   // no trie size
		{`"AAAA"`, false},
		{`"AAAAAA=="`, true}, // an empty trie
		{`"AAAAAA="`, true},  // padding is optional, and may stop short
		{`"AAAAAA"`, true},
		{`"AAAAAA==="`, false},
		{`"AAAAAAA"`, true},
		{`"AAAAAAA="`, true},
		{`"AAAAAAA=="`, false},
		{`"AAAAAAAA"`, true},
		{`"AAAAAAAA="`, false},
		{`"AAAAA"`, false},
		{`"AAAAA="`, false},
		{`"AAAA=AAA"`, false},
		{`"AAAAAA=A"`, false},
		{`"AAAAAB=="`, false},  // unused bits set
		{`"AAAA AA=="`, false}, // a space
		{`"AAAA\nAAA="`, false},
		{`"AAAA\u0041A=="`, false}, // an escape, even of a base64 letter
		{`"BAAAAAAAAAA="`, true},   // one unit
		{`"CAAAAAAAAAA="`, false},  // two units, one there
		{`"AAAAAP8="`, false},      // strings not UTF-8
		{`"BgAAAAAAAABh"`, true},   // a size of 6: one unit, and 2 bytes go to the strings
		{`4`, false},
	} {
		_, err := parseNormalizer(charsmapJSON(tc.charsmap))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.charsmap, err, tc.ok)
		}
	}
}

// trieBlob builds a charsmap with one key, a single byte, whose leaf holds
// value; root is the root unit.
func trieBlob(root uint32, key byte, value uint32, strs string) []byte {
	trie := make([]uint32, 512)
	trie[0] = root
	// root's offset is 256 (root = 256<<10); the key's unit sits at
	// 256^key with offset 1, its leaf at 256^key^1.
	pos := 256 ^ uint32(key)
	trie[pos] = 1<<10 | 1<<8 | uint32(key)
	trie[pos^1] = 1<<31 | value
	b := binary.LittleEndian.AppendUint32(nil, uint32(4*len(trie)))
	for _, u := range trie {
		b = binary.LittleEndian.AppendUint32(b, u)
	}
	return append(b, strs...)
}

// TestPrecompiledRules checks the cluster rules on a one-key charsmap, and
// what is done where the library would panic.
func TestPrecompiledRules(t *testing.T) {
	const root = 256 << 10
	for _, tc := range []struct {
		name string
		blob []byte
		in   string
		want string
	}{
		{"replaced", trieBlob(root, 'a', 0, "b\x00"), "xay", "xby"},
		{"a mark goes with a cluster under 6 bytes", trieBlob(root, 'a', 0, "b\x00"), "xa\u0301y", "xby"},
		{"a cluster of 6 bytes or more goes a character at a time", trieBlob(root, 'a', 0, "b\x00"),
			"a\u0301\u0301\u0301", "b\u0301\u0301\u0301"},
		{"CR LF is one cluster", trieBlob(root, '\r', 0, " \x00"), "x\r\ny\rz", "x y z"},
		{"removed", trieBlob(root, 'a', 2, "b\x00"), "aba", "b"},
		{"the last string needs no NUL", trieBlob(root, 'a', 1, "xyz"), "a", "yz"},
		{"a NUL ends the key", trieBlob(root, 0, 0, "b\x00"), "\x00", "\x00"},
		// Where the library panics:
		{"empty trie", func() []byte { return []byte{0, 0, 0, 0} }(), "abc", "abc"},
		{"value past the strings", trieBlob(root, 'a', 3, "b\x00"), "xay", "xay"},
		{"value inside a character", trieBlob(root, 'a', 1, "é\x00"), "xay", "xay"},
		{"root offset past the trie", trieBlob(1<<20<<10, 'a', 0, "b\x00"), "xay", "xay"},
		{"child offset past the trie", func() []byte {
			b := trieBlob(root, 'a', 0, "b\x00")
			binary.LittleEndian.PutUint32(b[4+4*(256^'a'):], 1<<21<<10|1<<8|'a')
			return b
		}(), "xay", "xay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newPrecompiled(tc.blob)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.normalize(tc.in); got != tc.want {
				t.Errorf("%+q: got %+q, want %+q", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzPrecompiled loads arbitrary charsmap bytes and normalizes arbitrary
// text: an error or a normalizer, never a panic; valid text stays valid.
func FuzzPrecompiled(f *testing.F) {
	f.Add(trieBlob(256<<10, 'a', 0, "b\x00"), "xa\u0301y\r\n")
	f.Add(trieBlob(256<<10, 'a', 9, "é\x00"), "a")
	f.Add([]byte{0, 0, 0, 0}, "abc")
	f.Add([]byte{4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, "\x00a")
	f.Fuzz(func(t *testing.T, blob []byte, text string) {
		_, _ = decodeCharsmap(json.RawMessage(text))
		p, err := newPrecompiled(blob)
		if err != nil {
			return
		}
		out := p.normalize(text)
		if utf8.ValidString(text) && !utf8.ValidString(out) {
			t.Fatalf("%+q became invalid UTF-8 %+q", text, out)
		}
	})
}
