package tokenize

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestScriptTable checks every code point's class against the measurement
// the table was generated from (testdata/tokenize/hf-scripts.json), through
// scriptClass and its ASCII shortcut.
func TestScriptTable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(tokenizeTestdata(t), "hf-scripts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sc struct {
		Ranges [][3]int32 `json:"ranges"`
	}
	if err := json.Unmarshal(raw, &sc); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range sc.Ranges {
		for c := r[0]; c <= r[1]; c++ {
			got, n := scriptClass(string(c))
			if int32(got) != r[2] || n != utf8.RuneLen(c) {
				t.Fatalf("%U: class %d (%d bytes), the library's %d", c, got, n, r[2])
			}
			checked++
		}
	}
	if checked != 0x110000-0x800 {
		t.Fatalf("the measurement covers %d code points", checked)
	}
}

// TestUnicodeScriptsCorpus compares the UnicodeScripts pre-tokenizer's
// pieces of every corpus text with the HF Rust core's
// (golden/unicode_scripts.jsonl, written by
// scripts/tokenizer-ref/unicode-scripts.js; offsets in code points).
func TestUnicodeScriptsCorpus(t *testing.T) {
	t.Parallel()
	dir := tokenizeTestdata(t)
	texts := map[string]string{}
	readLines(t, filepath.Join(dir, "corpus.jsonl"), func(line []byte) {
		var c struct{ Name, Text string }
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		texts[c.Name] = c.Text
	})
	n := 0
	readLines(t, filepath.Join(dir, "golden", "unicode_scripts.jsonl"), func(line []byte) {
		var g struct {
			Name   string
			Pieces [][2]int
		}
		if err := json.Unmarshal(line, &g); err != nil {
			t.Fatal(err)
		}
		text, ok := texts[g.Name]
		if !ok {
			t.Fatalf("golden text %q is not in the corpus", g.Name)
		}
		n++
		var stop stopper
		pieces := unicodeScripts{}.split(nil, piece{s: text, first: true}, &stop)
		// Code-point offsets of the pieces: each is a substring of text
		// after the one before it, past nothing but dropped Any characters.
		var got [][2]int
		pos := 0
		for _, p := range pieces {
			i := strings.Index(text[pos:], p.s)
			if p.s == "" || i < 0 {
				t.Fatalf("%s: piece %q is not in the text after byte %d", g.Name, p.s, pos)
			}
			start := pos + i
			pos = start + len(p.s)
			from := utf8.RuneCountInString(text[:start])
			got = append(got, [2]int{from, from + utf8.RuneCountInString(p.s)})
			if p.first != (start == 0) {
				t.Errorf("%s: piece at %d has first=%v", g.Name, start, p.first)
			}
		}
		if len(got) != len(g.Pieces) {
			t.Errorf("%s: %d pieces %v, the library's %d %v", g.Name, len(got), got, len(g.Pieces), g.Pieces)
			return
		}
		for i := range got {
			if got[i] != g.Pieces[i] {
				t.Errorf("%s: piece %d is %v, the library's %v", g.Name, i, got[i], g.Pieces[i])
				return
			}
		}
	})
	if n != len(texts) {
		t.Fatalf("%d golden entries for %d corpus texts: regenerate with scripts/tokenizer-ref/generate.sh", n, len(texts))
	}
}

// readLines calls fn with each line of a JSON-lines file.
func readLines(t *testing.T, path string, fn func([]byte)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		fn(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
