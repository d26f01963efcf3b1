package tokenize_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/tokenize"
)

// goldenModels are the tokenizers whose ids scripts/tokenizer-ref pinned.
var goldenModels = []string{"qwen3", "llama3", "llama2", "deepseek_v3", "gptoss", "gemma3"}

type corpusEntry struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

type goldenEntry struct {
	Name       string   `json:"name"`
	IDs        []uint32 `json:"ids"`
	IDsSpecial []uint32 `json:"ids_special"`
}

func readJSONL[T any](tb testing.TB, path string) []T {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

func loadCorpus(tb testing.TB) []corpusEntry {
	return readJSONL[corpusEntry](tb, filepath.Join(testutil.RepoRoot(tb), "testdata", "tokenize", "corpus.jsonl"))
}

// tokenizerFile returns the decompressed tokenizer.json of a golden model.
func tokenizerFile(tb testing.TB, model string) []byte { return testutil.TokenizerJSON(tb, model) }

var (
	loadedMu sync.Mutex
	loaded   = map[string]*tokenize.Tokenizer{}
)

// loadModel loads a golden model once per test binary.
func loadModel(tb testing.TB, model string) *tokenize.Tokenizer {
	tb.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tk, ok := loaded[model]; ok {
		return tk
	}
	tk, err := tokenize.Load(tokenizerFile(tb, model))
	if err != nil {
		tb.Fatalf("load %s: %v", model, err)
	}
	loaded[model] = tk
	return tk
}

func TestGoldenCorpus(t *testing.T) {
	corpus := loadCorpus(t)
	for _, model := range goldenModels {
		t.Run(model, func(t *testing.T) {
			tk := loadModel(t, model)
			golden := readJSONL[goldenEntry](t, filepath.Join(testutil.RepoRoot(t), "testdata", "tokenize", "golden", model+".jsonl"))
			if len(golden) != len(corpus) {
				t.Fatalf("golden has %d entries, corpus %d: regenerate with scripts/tokenizer-ref/generate.sh", len(golden), len(corpus))
			}
			failed := 0
			for i, c := range corpus {
				g := golden[i]
				if g.Name != c.Name {
					t.Fatalf("golden entry %d is %q, corpus has %q", i, g.Name, c.Name)
				}
				for _, special := range []bool{false, true} {
					want := g.IDs
					if special {
						want = g.IDsSpecial
					}
					got, err := tk.Encode(c.Text, special)
					if err != nil {
						t.Errorf("%s (special=%v): %v", c.Name, special, err)
						continue
					}
					if want == nil {
						want = []uint32{}
					}
					if got == nil {
						got = []uint32{}
					}
					if !slices.Equal(got, want) {
						failed++
						t.Errorf("%s (special=%v): ids differ at %d\n got %v\nwant %v", c.Name, special, firstDiff(got, want), clip(got), clip(want))
					}
				}
			}
			if failed > 0 {
				t.Logf("%d/%d encodings differ", failed, 2*len(corpus))
			}
		})
	}
}

func firstDiff(a, b []uint32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func clip(ids []uint32) []uint32 {
	if len(ids) > 40 {
		return ids[:40]
	}
	return ids
}
