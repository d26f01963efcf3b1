package fleetsim

// This file: the simulated model's tokenizer and chat template. The fleet
// writes them into its root directory at start and every worker's card
// declares them (tokenizer and prompt_formatter slots, with their blake3
// checksums), so a router pinning those checksums renders, encodes and
// hashes prompts exactly as the workers do.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/tokenize"
)

// The artifact files, in the fleet's root directory.
const (
	TokenizerFile       = "tokenizer.json"
	TokenizerConfigFile = "tokenizer_config.json"
)

// The demo tokenizer's special tokens, numbered after the 256 byte tokens.
const (
	TokenEndOfText = "<|endoftext|>"
	TokenIMStart   = "<|im_start|>"
	TokenIMEnd     = "<|im_end|>"
)

// ByteTokens is the demo vocabulary's size without its special tokens: one
// token per byte, token id = byte value.
const ByteTokens = 256

var specialTokens = []string{TokenEndOfText, TokenIMStart, TokenIMEnd}

// demoChatTemplate is a ChatML template: the bos token, then each message
// as <|im_start|>role, a newline, its text and <|im_end|> and a newline;
// with add_generation_prompt, the assistant's turn is opened.
const demoChatTemplate = `{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}` +
	`{% if message['content'] is string %}{{ message['content'] }}{% endif %}{{ '<|im_end|>\n' }}{% endfor %}` +
	`{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// byteLevelAlphabet maps each byte to the character a byte-level BPE
// vocabulary writes it as: the printable Latin-1 bytes (! to ~, ¡ to ¬, ®
// to ÿ) stand for themselves, and the others, in byte order, for the code
// points from U+0100 on.
func byteLevelAlphabet() [256]rune {
	var out [256]rune
	next := rune(256)
	for b := range 256 {
		switch {
		case b >= '!' && b <= '~', b >= 0xa1 && b <= 0xac, b >= 0xae:
			out[b] = rune(b)
		default:
			out[b] = next
			next++
		}
	}
	return out
}

// DemoTokenizerJSON is the demo model's tokenizer.json: a byte-level BPE
// without merges, so that every byte of a text is one token (its value is
// the token id), plus the special tokens, matched whole in the text. The
// bytes are the same in every process.
func DemoTokenizerJSON() []byte { return demoArtifacts().tokenizer }

// DemoTokenizerConfigJSON is the demo model's tokenizer_config.json: a
// ChatML chat template and its bos and eos tokens.
func DemoTokenizerConfigJSON() []byte { return demoArtifacts().config }

type artifactBytes struct {
	tokenizer, config []byte
}

var demoArtifacts = sync.OnceValue(func() artifactBytes {
	alphabet := byteLevelAlphabet()
	vocab := make([]string, 0, ByteTokens)
	for b := range ByteTokens {
		vocab = append(vocab, fmt.Sprintf("%s: %d", mustJSON(string(alphabet[b])), b))
	}
	var added []string
	for i, tok := range specialTokens {
		added = append(added, fmt.Sprintf(`{"id": %d, "content": %s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}`,
			ByteTokens+i, mustJSON(tok)))
	}
	byteLevel := `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}`
	tk := fmt.Sprintf(`{
  "version": "1.0",
  "truncation": null,
  "padding": null,
  "added_tokens": [
    %s
  ],
  "normalizer": null,
  "pre_tokenizer": %s,
  "post_processor": null,
  "decoder": %s,
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
    "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
    "vocab": {%s},
    "merges": []}
}
`, strings.Join(added, ",\n    "), byteLevel, byteLevel, strings.Join(vocab, ", "))
	cfg, _ := json.MarshalIndent(map[string]any{
		"bos_token":                    TokenEndOfText,
		"eos_token":                    TokenIMEnd,
		"pad_token":                    TokenEndOfText,
		"chat_template":                demoChatTemplate,
		"model_max_length":             131072,
		"clean_up_tokenization_spaces": false,
		"tokenizer_class":              "PreTrainedTokenizerFast",
	}, "", "  ")
	return artifactBytes{tokenizer: []byte(tk), config: append(cfg, '\n')}
})

// ArtifactInfo is one artifact file of the fleet: where it is and its
// checksum.
type ArtifactInfo struct {
	Path     string
	Checksum artifact.Checksum
}

// Artifacts are the files every simulated worker's card declares.
type Artifacts struct {
	Tokenizer, TokenizerConfig ArtifactInfo
}

// Pinned are the checksums a router pins to load the artifacts, as
// dynamo.kv.pinned_artifacts writes them.
func (a Artifacts) Pinned() []string {
	return []string{a.Tokenizer.Checksum.String(), a.TokenizerConfig.Checksum.String()}
}

// artifactsIn describes the artifacts of a fleet rooted at root.
func artifactsIn(root string) Artifacts {
	return Artifacts{
		Tokenizer:       ArtifactInfo{Path: filepath.Join(root, TokenizerFile), Checksum: artifact.Sum(DemoTokenizerJSON())},
		TokenizerConfig: ArtifactInfo{Path: filepath.Join(root, TokenizerConfigFile), Checksum: artifact.Sum(DemoTokenizerConfigJSON())},
	}
}

// writeArtifacts writes the artifact files into root.
func writeArtifacts(root string) error {
	if root == "" {
		return errors.New("the fleet has no root directory for its tokenizer files")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	a := artifactsIn(root)
	for _, f := range []struct {
		path string
		data []byte
	}{{a.Tokenizer.Path, DemoTokenizerJSON()}, {a.TokenizerConfig.Path, DemoTokenizerConfigJSON()}} {
		if err := os.WriteFile(f.path, f.data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cardSlots are the card fields that declare the artifacts.
func (a Artifacts) cardSlots() map[string]any {
	file := func(i ArtifactInfo) map[string]any {
		return map[string]any{"path": i.Path, "checksum": i.Checksum.String()}
	}
	return map[string]any{
		"tokenizer":        map[string]any{artifact.FormatHFTokenizerJSON: file(a.Tokenizer)},
		"prompt_formatter": map[string]any{artifact.FormatHFTokenizerConfigJSON: file(a.TokenizerConfig)},
	}
}

// encoder renders and encodes prompts as the workers' frontend does.
type encoder struct {
	tk   *tokenize.Tokenizer
	tmpl *chattemplate.Template
}

// renderTimeout bounds one render of a chat template.
const renderTimeout = 2 * time.Second

var demoEncoder = sync.OnceValues(func() (*encoder, error) {
	tk, err := tokenize.Load(DemoTokenizerJSON())
	if err != nil {
		return nil, fmt.Errorf("demo tokenizer: %w", err)
	}
	tmpl, err := chattemplate.FromTokenizerConfig(DemoTokenizerConfigJSON(), "", chattemplate.WithDynamoFrontend())
	if err != nil {
		return nil, fmt.Errorf("demo chat template: %w", err)
	}
	return &encoder{tk: tk, tmpl: tmpl}, nil
})
