package tokenize_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/tokenize"
)

// The small tokenizers of testdata/tokenize/models.json exercise the models
// and normalizers beside BPE and their edge cases; golden/models.jsonl holds
// the HF Rust core's ids for each, or that it refused the file or an encode.

type modelsGolden struct {
	Model      string   `json:"model"`
	LoadError  bool     `json:"load_error"`
	Text       string   `json:"text"`
	IDs        []uint32 `json:"ids"`
	IDsSpecial []uint32 `json:"ids_special"`
}

type smallSpec struct {
	Models []struct {
		Name      string          `json:"name"`
		Tokenizer json.RawMessage `json:"tokenizer"`
	} `json:"models"`
}

func readSmallSpec(tb testing.TB) smallSpec {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(testutil.RepoRoot(tb), "testdata", "tokenize", "models.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var spec smallSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		tb.Fatal(err)
	}
	return spec
}

// smallModel loads one tokenizer of models.json.
func smallModel(tb testing.TB, name string) *tokenize.Tokenizer {
	tb.Helper()
	for _, m := range readSmallSpec(tb).Models {
		if m.Name == name {
			tk, err := tokenize.Load(m.Tokenizer)
			if err != nil {
				tb.Fatal(err)
			}
			return tk
		}
	}
	tb.Fatalf("no small model %q", name)
	return nil
}

func TestSmallModels(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testutil.RepoRoot(t), "testdata", "tokenize")
	spec := readSmallSpec(t)
	golden := map[string][]modelsGolden{}
	for _, g := range readJSONL[modelsGolden](t, filepath.Join(dir, "golden", "models.jsonl")) {
		golden[g.Model] = append(golden[g.Model], g)
	}
	for _, m := range spec.Models {
		gs := golden[m.Name]
		if len(gs) == 0 {
			t.Fatalf("%s: no goldens", m.Name)
		}
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			tk, err := tokenize.Load(m.Tokenizer)
			if gs[0].LoadError {
				if err == nil {
					t.Fatal("loaded a file the library refuses")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gs {
				for _, c := range []struct {
					special bool
					want    []uint32
				}{{false, g.IDs}, {true, g.IDsSpecial}} {
					got, err := tk.Encode(g.Text, c.special)
					switch {
					case c.want == nil && err == nil:
						t.Errorf("%q (special %v): got %v, the library fails the encode", g.Text, c.special, got)
					case c.want != nil && err != nil:
						t.Errorf("%q (special %v): %v; want %v", g.Text, c.special, err, c.want)
					case c.want != nil && !slices.Equal(got, c.want):
						t.Errorf("%q (special %v):\n got %v\nwant %v", g.Text, c.special, got, c.want)
					}
				}
			}
		})
	}
}
