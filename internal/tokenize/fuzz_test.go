package tokenize_test

import (
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/testutil"
)

// FuzzEncode feeds arbitrary bytes (invalid UTF-8 included) through Encode
// of a byte-level and a SentencePiece-style tokenizer: no panic, every id
// in the vocabulary, and bounded time.
func FuzzEncode(f *testing.F) {
	testutil.AddCorpus(f, "FuzzEncode")
	for _, s := range []string{"", "hello world", "<|im_start|>user\n hi<|im_end|>", "\xff\xfe<s>\xc3", "   \t\r\n  x", "안녕 🍕 ١٢٣"} {
		f.Add([]byte(s))
	}
	byteLevel := loadModel(f, "qwen3")
	sentencePiece := loadModel(f, "llama2")
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		for _, tk := range []interface {
			Encode(string, bool) ([]uint32, error)
			IDToToken(uint32) (string, bool)
		}{byteLevel, sentencePiece} {
			start := time.Now()
			ids, err := tk.Encode(string(data), true)
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("encoding %d bytes took %v", len(data), d)
			}
			if len(ids) > 4*len(data)+2 {
				t.Fatalf("%d ids for %d bytes", len(ids), len(data))
			}
			for _, id := range ids {
				if _, ok := tk.IDToToken(id); !ok {
					t.Fatalf("id %d is not in the vocabulary", id)
				}
			}
		}
	})
}
