package fleetsim_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/tokenize"
)

// byteOf reads a byte-level vocabulary token back to its byte: the
// printable Latin-1 characters stand for themselves, the others follow
// U+0100 in byte order.
func byteOf(t *testing.T, tok string) byte {
	t.Helper()
	rs := []rune(tok)
	if len(rs) != 1 {
		t.Fatalf("token %q is not one character", tok)
	}
	r := rs[0]
	if r < 256 && !mapped(int(r)) {
		return byte(r)
	}
	n := int(r - 256)
	for b := range 256 {
		if mapped(b) {
			if n == 0 {
				return byte(b)
			}
			n--
		}
	}
	t.Fatalf("token %q maps to no byte", tok)
	return 0
}

// mapped: a byte-level vocabulary writes byte b as another character.
func mapped(b int) bool { return b <= ' ' || (b >= 0x7f && b <= 0xa0) || b == 0xad }

// TestDemoTokenizer: the demo tokenizer.json loads, encodes every byte of a
// text as one token whose id is the byte, matches the special tokens whole,
// encodes the same text alike every time, and its tokens read back to the
// text.
func TestDemoTokenizer(t *testing.T) {
	tk, err := tokenize.Load(fleetsim.DemoTokenizerJSON())
	if err != nil {
		t.Fatal(err)
	}
	var ascii []byte
	for b := range 128 {
		ascii = append(ascii, byte(b))
	}
	// Multi-byte characters cover the bytes above 0x7f that valid UTF-8
	// holds (encoding replaces invalid bytes, as Hugging Face's does).
	var multi strings.Builder
	for r := rune(0x80); r < 0x10000; r += 61 {
		if r < 0xd800 || r > 0xdfff {
			multi.WriteRune(r)
		}
	}
	texts := []string{"Hello, world!", "  two  spaces\tand\nlines ", "héllo ünïcode 日本語 🍕", string(ascii), multi.String()}
	for _, text := range texts {
		ids, err := tk.Encode(text, false)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := tk.Encode(text, true) // no post-processor: nothing is added either way
		if len(ids) != len(text) || !equal(ids, again) {
			t.Fatalf("%q: %d ids for %d bytes; again %v", text, len(ids), len(text), again)
		}
		var back []byte
		for i, id := range ids {
			if id != uint32(text[i]) {
				t.Fatalf("%q: byte %d is %#x, token id %d", text, i, text[i], id)
			}
			tok, ok := tk.IDToToken(id)
			if !ok {
				t.Fatalf("no token for id %d", id)
			}
			back = append(back, byteOf(t, tok))
		}
		if !bytes.Equal(back, []byte(text)) {
			t.Fatalf("round trip %q, want %q", back, text)
		}
	}
	ids, err := tk.Encode("<|endoftext|><|im_start|>user\nHi<|im_end|>\n", false)
	if err != nil {
		t.Fatal(err)
	}
	want := []uint32{256, 257, 'u', 's', 'e', 'r', '\n', 'H', 'i', 258, '\n'}
	if !equal(ids, want) {
		t.Fatalf("special tokens: %v, want %v", ids, want)
	}
	// The file is built, not stored: every build and process must build
	// the same bytes, or a fleet-sim that wrote it and a router pinning it
	// would disagree. (A deliberate change to the demo tokenizer changes
	// this checksum with it.)
	const wantSum = "blake3:31487bdd55b9af27e5db8e31bd9baddf687e85ef3c25531b8dbd31a978b3018b"
	if got := artifact.Sum(fleetsim.DemoTokenizerJSON()).String(); got != wantSum {
		t.Fatalf("the demo tokenizer file's checksum is %s, want %s", got, wantSum)
	}
}

func equal(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDemoChatTemplate: the tokenizer config's ChatML template renders the
// turns with the bos token first and opens the assistant's turn when
// asked.
func TestDemoChatTemplate(t *testing.T) {
	tmpl, err := chattemplate.FromTokenizerConfig(fleetsim.DemoTokenizerConfigJSON(), "")
	if err != nil {
		t.Fatal(err)
	}
	in, err := chattemplate.DecodeRequest([]byte(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	in.AddGenerationPrompt = true
	got, err := tmpl.Render(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|endoftext|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("render %q, want %q", got, want)
	}
	if tok := tmpl.SpecialTokens(); tok["bos_token"] != "<|endoftext|>" || tok["eos_token"] != "<|im_end|>" {
		t.Fatalf("special tokens %v", tok)
	}
}

// TestDemoArtifactsWritten: a fleet writes the files into its root, with the
// checksums its cards declare.
func TestDemoArtifactsWritten(t *testing.T) {
	root := t.TempDir()
	sim, err := fleetsim.Start(fleetsim.Options{Root: root, Decode: 1, Speed: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Stop()
	a := sim.Artifacts()
	for _, f := range []fleetsim.ArtifactInfo{a.Tokenizer, a.TokenizerConfig} {
		data, err := os.ReadFile(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(f.Path) != root || artifact.Sum(data) != f.Checksum {
			t.Fatalf("%s: checksum %s, declared %s", f.Path, artifact.Sum(data), f.Checksum)
		}
	}
	if p := a.Pinned(); len(p) != 2 || p[0] != a.Tokenizer.Checksum.String() {
		t.Fatalf("pinned %v", p)
	}
}
