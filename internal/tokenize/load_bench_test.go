package tokenize_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/tokenize"
)

// BenchmarkLoad measures parsing a tokenizer.json (MB/s of file).
func BenchmarkLoad(b *testing.B) {
	for _, model := range []string{"qwen3", "llama2", "gemma3"} {
		b.Run(model, func(b *testing.B) {
			data := tokenizerFile(b, model)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tokenize.Load(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
