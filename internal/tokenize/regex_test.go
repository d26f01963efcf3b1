package tokenize

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRegexTimeoutFailsEncode: a fallback regex that backtracks past its
// budget fails the encode with an error; it never yields a partial split.
func TestRegexTimeoutFailsEncode(t *testing.T) {
	saved := regexTimeout
	regexTimeout = 50 * time.Millisecond
	defer func() { regexTimeout = saved }()

	vocab := map[string]uint32{}
	for r, b := range runeToByte {
		vocab[string(r)] = uint32(b)
	}
	model, err := json.Marshal(map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}})
	if err != nil {
		t.Fatal(err)
	}
	file := `{"added_tokens": [], "normalizer": null, "post_processor": null, "model": ` + string(model) + `,
	  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
	    {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": false},
	    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]}}`
	tk, err := Load([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := tk.Encode("aaaa", false); err != nil || len(ids) != 4 {
		t.Fatalf("short text: %v, %v", ids, err)
	}
	_, err = tk.Encode(strings.Repeat("a", 40)+"!", false)
	if err == nil || !strings.Contains(err.Error(), "regex") {
		t.Fatalf("got %v, want a regex timeout error", err)
	}
	// The tokenizer still works after a failed encode.
	if ids, err := tk.Encode("aaaa", false); err != nil || len(ids) != 4 {
		t.Fatalf("after the timeout: %v, %v", ids, err)
	}
	if _, err := tk.Encode(strings.Repeat("a", MaxTextBytes+1), false); !errors.Is(err, ErrPromptTooLarge) {
		t.Fatalf("text over MaxTextBytes: %v", err)
	}
}
