package tokenize_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/tokenize"
)

// The rule table: each variant of testdata/tokenize/variants.json turns one
// normalizer, pre-tokenizer, post-processor or added-token rule on over a
// base tokenizer; golden/variants.jsonl holds the HF Rust core's ids for
// every text under every variant.

type variantSpec struct {
	Texts    []string `json:"texts"`
	Variants []struct {
		Name      string                     `json:"name"`
		Base      string                     `json:"base"`
		TrimVocab uint32                     `json:"trim_vocab"`
		Set       map[string]json.RawMessage `json:"set"`
		AddTokens []struct {
			Content    string `json:"content"`
			SingleWord bool   `json:"single_word"`
			LStrip     bool   `json:"lstrip"`
			RStrip     bool   `json:"rstrip"`
			Normalized bool   `json:"normalized"`
			Special    bool   `json:"special"`
		} `json:"add_tokens"`
	} `json:"variants"`
}

type variantGolden struct {
	Variant    string   `json:"variant"`
	Text       string   `json:"text"`
	IDs        []uint32 `json:"ids"`
	IDsSpecial []uint32 `json:"ids_special"`
}

// applyVariant mirrors applyVariant in scripts/tokenizer-ref/variants.js.
func applyVariant(t *testing.T, base map[string]json.RawMessage, set map[string]json.RawMessage, add []map[string]any) []byte {
	t.Helper()
	doc := maps.Clone(base)
	for k, v := range set {
		doc[k] = v
	}
	var model struct {
		Vocab map[string]uint32 `json:"vocab"`
	}
	if err := json.Unmarshal(doc["model"], &model); err != nil {
		t.Fatal(err)
	}
	var added []map[string]any
	if err := json.Unmarshal(doc["added_tokens"], &added); err != nil {
		t.Fatal(err)
	}
	next := float64(len(model.Vocab))
	for _, a := range added {
		next = max(next, a["id"].(float64)+1)
	}
	for _, a := range add {
		if id, ok := model.Vocab[a["content"].(string)]; ok {
			a["id"] = id // a token the vocab holds keeps the vocab's id, as the library assigns it
		} else {
			a["id"] = next
			next++
		}
		added = append(added, a)
	}
	raw, err := json.Marshal(added)
	if err != nil {
		t.Fatal(err)
	}
	doc["added_tokens"] = raw
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// trimModel keeps the vocab's ids below trim and the merges within them.
func trimModel(t *testing.T, raw json.RawMessage, trim uint32) json.RawMessage {
	t.Helper()
	var model map[string]json.RawMessage
	if err := json.Unmarshal(raw, &model); err != nil {
		t.Fatal(err)
	}
	var vocab map[string]uint32
	var merges []json.RawMessage
	if err := json.Unmarshal(model["vocab"], &vocab); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(model["merges"], &merges); err != nil {
		t.Fatal(err)
	}
	for tok, id := range vocab {
		if id >= trim {
			delete(vocab, tok)
		}
	}
	kept := merges[:0]
	for _, m := range merges {
		var pair []string
		if err := json.Unmarshal(m, &pair); err != nil {
			var line string
			if err := json.Unmarshal(m, &line); err != nil {
				t.Fatal(err)
			}
			pair = strings.SplitN(line, " ", 2)
		}
		_, okA := vocab[pair[0]]
		_, okB := vocab[pair[1]]
		_, okAB := vocab[pair[0]+pair[1]]
		if okA && okB && okAB {
			kept = append(kept, m)
		}
	}
	var err error
	if model["vocab"], err = json.Marshal(vocab); err != nil {
		t.Fatal(err)
	}
	if model["merges"], err = json.Marshal(kept); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(model)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestVariants(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testutil.RepoRoot(t), "testdata", "tokenize")
	data, err := os.ReadFile(filepath.Join(dir, "variants.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec variantSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	golden := readJSONL[variantGolden](t, filepath.Join(dir, "golden", "variants.jsonl"))
	if len(golden) != len(spec.Variants)*len(spec.Texts) {
		t.Fatalf("golden has %d entries, want %d: regenerate with scripts/tokenizer-ref/generate.sh", len(golden), len(spec.Variants)*len(spec.Texts))
	}
	// The base documents, by base and trim, each built once by the first
	// subtest that needs it; the map itself is filled before the subtests
	// run, and a built document is only read (applyVariant clones it).
	type lazyBase struct {
		once sync.Once
		doc  map[string]json.RawMessage
	}
	bases := map[string]*lazyBase{}
	baseKey := func(base string, trim uint32) string { return fmt.Sprintf("%s/%d", base, trim) }
	for _, v := range spec.Variants {
		if key := baseKey(v.Base, v.TrimVocab); bases[key] == nil {
			bases[key] = &lazyBase{}
		}
	}
	for vi, v := range spec.Variants {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			key := baseKey(v.Base, v.TrimVocab)
			base := bases[key]
			base.once.Do(func() {
				var doc map[string]json.RawMessage
				if err := json.Unmarshal(tokenizerFile(t, v.Base), &doc); err != nil {
					t.Fatal(err)
				}
				if v.TrimVocab > 0 {
					doc["model"] = trimModel(t, doc["model"], v.TrimVocab)
				}
				base.doc = doc // left nil when a Fatal above ends the subtest
			})
			if base.doc == nil {
				t.Fatalf("base %s failed to build (see the subtest that built it)", key)
			}
			var add []map[string]any
			for _, a := range v.AddTokens {
				add = append(add, map[string]any{
					"content": a.Content, "single_word": a.SingleWord, "lstrip": a.LStrip,
					"rstrip": a.RStrip, "normalized": a.Normalized, "special": a.Special,
				})
			}
			tk, err := tokenize.Load(applyVariant(t, base.doc, v.Set, add))
			if err != nil {
				t.Fatal(err)
			}
			for ti, text := range spec.Texts {
				g := golden[vi*len(spec.Texts)+ti]
				if g.Variant != v.Name || g.Text != text {
					t.Fatalf("golden entry %d is %s/%q, want %s/%q", vi*len(spec.Texts)+ti, g.Variant, g.Text, v.Name, text)
				}
				for _, special := range []bool{false, true} {
					want := g.IDs
					if special {
						want = g.IDsSpecial
					}
					got, err := tk.Encode(text, special)
					if err != nil {
						t.Errorf("%q: %v", text, err)
						continue
					}
					if len(got) == 0 && len(want) == 0 {
						continue
					}
					if !slices.Equal(got, want) {
						t.Errorf("%q (special=%v):\n got %v\nwant %v", text, special, got, want)
					}
				}
			}
		})
	}
}
