package tokenize_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/tokenize"
)

// BenchmarkEncode measures encode throughput on one core over the golden
// corpus, per tokenizer (b.SetBytes: MB/s is corpus bytes per second).
func BenchmarkEncode(b *testing.B) {
	corpus := loadCorpus(b)
	size := 0
	for _, c := range corpus {
		size += len(c.Text)
	}
	for _, model := range goldenModels {
		b.Run(model, func(b *testing.B) {
			tk := coldModel(b, model)
			var ids []uint32
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				for _, c := range corpus {
					var err error
					ids, err = tk.EncodeAppend(ids[:0], c.Text, true)
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkHFRustCore runs the Hugging Face tokenizers Rust core (npm
// tokenizers, encodeBatch, TOKENIZERS_PARALLELISM=false) on the golden
// corpus in the same run as this package and reports both MB/s and the
// ratio (ratio > 1: this package is faster). It needs node and the packages
// scripts/tokenizer-ref/generate.sh --install puts in the cache directory's
// tokenizer-ref/ (testutil.CacheDir). Without them it skips, unless
// CONTINUUM_REQUIRE_HF_REF=1 (set by `make bench`, which installs them), when
// it fails.
func BenchmarkHFRustCore(b *testing.B) {
	corpus := loadCorpus(b)
	texts := make([]string, len(corpus))
	for i, c := range corpus {
		texts[i] = c.Text
	}
	compareHF(b, goldenModels, texts)
}

// BenchmarkHFRustCoreChat8k is BenchmarkHFRustCore on the ~8k-token chat
// prompt alone (typical text, none of the corpus's pathological runs).
func BenchmarkHFRustCoreChat8k(b *testing.B) {
	compareHF(b, []string{"qwen3", "llama3"}, []string{chatPrompt8k()})
}

func compareHF(b *testing.B, models, texts []string) {
	root := testutil.RepoRoot(b)
	cache, err := testutil.CacheDir()
	if err != nil {
		b.Fatal(err)
	}
	cache = filepath.Join(cache, "tokenizer-ref")
	if _, err := os.Stat(filepath.Join(cache, "node_modules", "tokenizers")); err != nil {
		missingHFRef(b, "HF reference not installed (run make tokenizer-ref, or scripts/tokenizer-ref/generate.sh --install): %v", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missingHFRef(b, "node not on PATH: %v", err)
	}
	size := 0
	var lines []byte
	for _, t := range texts {
		size += len(t)
		line, err := json.Marshal(corpusEntry{Text: t})
		if err != nil {
			b.Fatal(err)
		}
		lines = append(append(lines, line...), '\n')
	}
	corpusPath := filepath.Join(b.TempDir(), "corpus.jsonl")
	if err := os.WriteFile(corpusPath, lines, 0o600); err != nil {
		b.Fatal(err)
	}
	for _, model := range models {
		b.Run(model, func(b *testing.B) {
			tk := coldModel(b, model)
			file := filepath.Join(b.TempDir(), "tokenizer.json")
			if err := os.WriteFile(file, tokenizerFile(b, model), 0o600); err != nil {
				b.Fatal(err)
			}
			// Ours, timed here so both figures come from the same run
			// (testing.Benchmark cannot run inside a benchmark: it would
			// wait for the benchmark lock this one holds).
			var ids []uint32
			rounds := 0
			start := time.Now()
			for time.Since(start) < 2*time.Second || rounds < 3 {
				for _, t := range texts {
					ids, _ = tk.EncodeAppend(ids[:0], t, true)
				}
				rounds++
			}
			oursMBs := float64(size*rounds) / time.Since(start).Seconds() / 1e6
			for b.Loop() {
				cmd := exec.CommandContext(b.Context(), node, filepath.Join(root, "scripts", "tokenizer-ref", "bench.js"), file, corpusPath, "2")
				cmd.Env = append(os.Environ(), "TOKENIZERS_PARALLELISM=false", "RAYON_NUM_THREADS=1", "TOKENIZER_REF_CACHE="+cache)
				out, err := cmd.Output()
				if err != nil {
					b.Fatalf("node bench.js: %v", err)
				}
				var res struct {
					MBPerS float64 `json:"mb_per_s"`
				}
				if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &res); err != nil || res.MBPerS <= 0 {
					b.Fatalf("node bench.js output %q: %v", out, err)
				}
				b.ReportMetric(res.MBPerS, "hf_MB/s")
				b.ReportMetric(oursMBs, "ours_MB/s")
				b.ReportMetric(oursMBs/res.MBPerS, "ratio")
			}
		})
	}
}

// missingHFRef skips the benchmark for want of the HF reference, or fails it
// under `make bench` (CONTINUUM_REQUIRE_HF_REF=1), which promises the ratio.
func missingHFRef(b *testing.B, format string, args ...any) {
	b.Helper()
	if os.Getenv("CONTINUUM_REQUIRE_HF_REF") == "1" {
		b.Fatalf("CONTINUUM_REQUIRE_HF_REF=1: "+format, args...)
	}
	b.Skipf(format, args...)
}

// chatPrompt8k builds a rendered chat prompt of about 8k tokens: a system
// prompt, tool output with code and JSON, and several turns.
func chatPrompt8k() string {
	var b strings.Builder
	b.WriteString("<|im_start|>system\nYou are a helpful assistant. Answer briefly and cite the code you change.<|im_end|>\n")
	turn := 0
	for b.Len() < 32000 {
		turn++
		fmt.Fprintf(&b, "<|im_start|>user\nTurn %d: the router keeps an index of which worker holds which prefix blocks; "+
			"why does the overlap drop to zero after a tokenizer upgrade? 한국어로도 설명해 주세요.<|im_end|>\n", turn)
		b.WriteString("<|im_start|>assistant\n<think>\nThe block hashes depend on every earlier token id.\n</think>\n\n")
		b.WriteString("```go\nfunc hashBlocks(ids []uint32, size int) []uint64 {\n\tvar out []uint64\n\tfor i := 0; i+size <= len(ids); i += size {\n\t\tout = append(out, xxh3(ids[i:i+size]))\n\t}\n\treturn out\n}\n```\n")
		fmt.Fprintf(&b, "{\"worker_id\": %d, \"overlap_blocks\": %d, \"model\": \"Qwen/Qwen3-8B\"}\n<|im_end|>\n", 1736491+turn, turn*3)
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String()
}

// BenchmarkEncodeChat8k measures one encode of an ~8k-token chat prompt
// (the per-request cost on the kv-aware routing path).
func BenchmarkEncodeChat8k(b *testing.B) {
	prompt := chatPrompt8k()
	for _, model := range []string{"qwen3", "llama3"} {
		b.Run(model, func(b *testing.B) {
			tk := coldModel(b, model)
			ids, err := tk.Encode(prompt, false)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(prompt)))
			b.ReportAllocs()
			for b.Loop() {
				ids, err = tk.EncodeAppend(ids[:0], prompt, false)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(ids)), "tokens")
		})
	}
}

// coldModel loads a golden model with its segment cache off, so throughput
// figures are of encoding, never of cache hits (benchmarks repeat texts).
func coldModel(b *testing.B, model string) *tokenize.Tokenizer {
	b.Helper()
	tk, err := tokenize.Load(tokenizerFile(b, model))
	if err != nil {
		b.Fatal(err)
	}
	tk.SetSegmentCache(false)
	return tk
}
