package testutil

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TokenizerJSON returns the tokenizer.json of a golden model (qwen3, llama3,
// llama2, deepseek_v3, gptoss, gemma3), kept gzip-compressed under
// testdata/tokenize.
func TokenizerJSON(tb testing.TB, model string) []byte {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(RepoRoot(tb), "testdata", "tokenize", model+".tokenizer.json.gz"))
	if err != nil {
		tb.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		tb.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}
