package tokenize_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/tokenize"
)

// goldenModels are the tokenizers whose ids scripts/tokenizer-ref pinned,
// the largest first: the parallel subtests over them start in this order,
// so the longest do not run last on their own.
var goldenModels = []string{"gemma3", "gptoss", "gpt4o", "qwen3", "llama3", "deepseek_v3", "gpt35turbo", "claude", "llama2", "bert", "minilm", "spm_unigram", "spm_unigram_bf", "spm_unigram_cf"}

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

// loadedModel is one golden model, loaded once per test binary.
type loadedModel struct {
	once sync.Once
	tk   *tokenize.Tokenizer
	err  error
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*loadedModel{}
)

// loadModel loads a golden model once per test binary. Parallel tests that
// ask for the same model wait for one load; different models load at once.
func loadModel(tb testing.TB, model string) *tokenize.Tokenizer {
	tb.Helper()
	loadedMu.Lock()
	m := loaded[model]
	if m == nil {
		m = &loadedModel{}
		loaded[model] = m
	}
	loadedMu.Unlock()
	m.once.Do(func() {
		m.err = errors.New("reading the file failed in the test that started the load")
		data := tokenizerFile(tb, model) // a Fatal here leaves m.err as set above
		m.tk, m.err = tokenize.Load(data)
	})
	if m.err != nil {
		tb.Fatalf("load %s: %v", model, m.err)
	}
	return m.tk
}

func TestGoldenCorpus(t *testing.T) {
	t.Parallel()
	corpus := loadCorpus(t)
	for _, model := range goldenModels {
		t.Run(model, func(t *testing.T) {
			t.Parallel()
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
