package tokenize_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/tokenize"
)

// The segment cache changes no id: prompts built from long corpus texts
// around each model's special tokens (a long segment first, then again
// later, for Metaspace's "first" scheme) encode the same with the cache
// cold, warm and off.
func TestSegmentCache(t *testing.T) {
	t.Parallel()
	corpus := loadCorpus(t)
	var long []string
	for _, e := range corpus {
		if len(e.Text) >= 300 {
			long = append(long, e.Text)
		}
	}
	if len(long) < 10 {
		t.Fatalf("only %d long corpus texts", len(long))
	}
	for _, model := range goldenModels {
		t.Run(model, func(t *testing.T) {
			t.Parallel()
			// The cold copy loads first: meanwhile the golden test of the
			// same model, running in parallel, may be loading the shared one.
			cold, err := tokenize.Load(tokenizerFile(t, model))
			if err != nil {
				t.Fatal(err)
			}
			cold.SetSegmentCache(false)
			warm := loadModel(t, model) // shared with the golden tests, cache on
			sep := ""
			for _, s := range []string{"<|im_start|>", "<|begin_of_text|>", "<start_of_turn>", "<|start|>", "<｜begin▁of▁sentence｜>", "</s>", "<|endoftext|>", "<EOT>", "[SEP]"} {
				if _, ok := warm.TokenToID(s); ok {
					sep = s
					break
				}
			}
			if sep == "" {
				t.Fatal("no special token to separate segments")
			}
			for i := 0; i+2 < len(long) && i < 60; i++ {
				a, b := long[i], long[i+1]
				for _, text := range []string{
					a + sep + b + sep + a,
					b + sep + a,
					sep + a + sep + " " + b,
					strings.Repeat(a+sep, 3),
				} {
					// The second pass meets every segment cached by the first
					// (and asks for the special tokens around it).
					for pass := range 2 {
						want, err := cold.Encode(text, pass == 1)
						if err != nil {
							t.Fatal(err)
						}
						got, err := warm.Encode(text, pass == 1)
						if err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(got, want) {
							t.Fatalf("text %d, pass %d: cached encode differs from the cold one at %d", i, pass, firstDiff(got, want))
						}
					}
				}
			}
		})
	}
}
