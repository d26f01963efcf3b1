package artifact_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// blake3Vectors are from the BLAKE3 team's test_vectors.json: the input is
// input_len bytes, byte i being i % 251; the hash is the first 32 bytes of
// the extended output (what b3sum prints).
var blake3Vectors = []struct {
	n    int
	want string
}{
	{0, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"},
	{1, "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213"},
	{64, "4eed7141ea4a5cd4b788606bd23f46e212af9cacebacdc7d1f4c6dc7f2511b98"},
	{1023, "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11"},
	{1024, "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7"},
	{8193, "bab6c09cb8ce8cf459261398d2e7aef35700bf488116ceb94a36d0f5f1b7bc3b"},
	{102400, "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085"},
}

func vectorInput(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

func TestChecksumMatchesBlake3Vectors(t *testing.T) {
	for _, v := range blake3Vectors {
		in := vectorInput(v.n)
		if got := artifact.Sum(in).Hex(); got != v.want {
			t.Errorf("Sum(%d bytes) = %s, want %s", v.n, got, v.want)
		}
		c, n, err := artifact.SumReader(bytes.NewReader(in))
		if err != nil || n != int64(v.n) || c.String() != "blake3:"+v.want {
			t.Errorf("SumReader(%d bytes) = %s %d %v", v.n, c, n, err)
		}
		back, err := artifact.ParseChecksum("blake3:" + strings.ToUpper(v.want))
		if err != nil || back.Hex() != v.want {
			t.Errorf("ParseChecksum upper-case round trip: %s %v", back, err)
		}
	}
}

func TestParseChecksumRejects(t *testing.T) {
	for _, s := range []string{"", "blake3:", "blake3:abc", "sha256:" + strings.Repeat("a", 64), strings.Repeat("a", 64),
		"blake3:" + strings.Repeat("g", 64), "blake3:" + strings.Repeat("a", 65)} {
		if _, err := artifact.ParseChecksum(s); err == nil {
			t.Errorf("ParseChecksum(%q) accepted", s)
		}
	}
}

const sumA = "blake3:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func cf(path string) string {
	return fmt.Sprintf(`{"path":%q,"checksum":%q}`, path, sumA)
}

func TestParseSlot(t *testing.T) {
	tests := []struct {
		name    string
		slot    artifact.Slot
		raw     string
		format  string
		kind    artifact.Kind
		custom  bool
		size    int64
		wantErr error
	}{
		{"tokenizer json", artifact.SlotTokenizer, `{"hf_tokenizer_json":` + cf("/models/q/tokenizer.json") + `}`, artifact.FormatHFTokenizerJSON, artifact.KindPath, false, -1, nil},
		{"tiktoken", artifact.SlotTokenizer, `{"tik_token_model":` + cf("https://w:8000/tok.model") + `}`, artifact.FormatTikTokenModel, artifact.KindHTTPS, false, -1, nil},
		{"size and unknown fields", artifact.SlotTokenizer, `{"hf_tokenizer_json":{"path":"file:///m/tokenizer.json","checksum":"` + sumA + `","size":123,"etag":"x"}}`, artifact.FormatHFTokenizerJSON, artifact.KindFile, false, 123, nil},
		{"tokenizer config", artifact.SlotPromptFormatter, `{"hf_tokenizer_config_json":` + cf("http://10.0.0.4:9000/tokenizer_config.json") + `}`, artifact.FormatHFTokenizerConfigJSON, artifact.KindHTTP, false, -1, nil},
		{"jinja", artifact.SlotChatTemplateFile, `{"hf_chat_template":{"is_custom":true,"file":` + cf("hf://Qwen/Qwen3-0.6B/chat_template.jinja") + `}}`, artifact.FormatHFChatTemplate, artifact.KindHF, true, -1, nil},
		{"jinja alias", artifact.SlotChatTemplateFile, `{"hf_chat_template_jinja":{"is_custom":false,"file":` + cf("/t.jinja") + `}}`, artifact.FormatHFChatTemplate, artifact.KindPath, false, -1, nil},
		{"template json", artifact.SlotPromptFormatter, `{"hf_chat_template_json":{"is_custom":false,"file":` + cf("/chat_template.json") + `}}`, artifact.FormatHFChatTemplateJSON, artifact.KindPath, false, -1, nil},
		{"unknown variant", artifact.SlotTokenizer, `{"sentencepiece_model":` + cf("/t.model") + `}`, "sentencepiece_model", "", false, -1, artifact.ErrUnsupported},
		{"template variant in tokenizer slot", artifact.SlotTokenizer, `{"hf_tokenizer_config_json":` + cf("/t.json") + `}`, "hf_tokenizer_config_json", "", false, -1, artifact.ErrUnsupported},
		{"nats url", artifact.SlotTokenizer, `{"hf_tokenizer_json":` + cf("nats://dynamo/mdc/tokenizer.json") + `}`, artifact.FormatHFTokenizerJSON, artifact.KindOther, false, -1, artifact.ErrUnsupported},
		{"remote file url", artifact.SlotTokenizer, `{"hf_tokenizer_json":` + cf("file://host/t.json") + `}`, artifact.FormatHFTokenizerJSON, artifact.KindFile, false, -1, artifact.ErrUnsupported},
		{"hf dataset", artifact.SlotTokenizer, `{"hf_tokenizer_json":` + cf("hf://datasets/o/r/t.json") + `}`, artifact.FormatHFTokenizerJSON, artifact.KindHF, false, -1, artifact.ErrUnsupported},
		{"sha256", artifact.SlotTokenizer, `{"hf_tokenizer_json":{"path":"/t","checksum":"sha256:` + strings.Repeat("a", 64) + `"}}`, artifact.FormatHFTokenizerJSON, "", false, -1, artifact.ErrUnsupported},
		{"string", artifact.SlotTokenizer, `"/t.json"`, "", "", false, -1, artifact.ErrMalformed},
		{"null", artifact.SlotTokenizer, `null`, "", "", false, -1, artifact.ErrMalformed},
		{"two variants", artifact.SlotTokenizer, `{"hf_tokenizer_json":` + cf("/a") + `,"tik_token_model":` + cf("/b") + `}`, "", "", false, -1, artifact.ErrMalformed},
		{"no checksum", artifact.SlotTokenizer, `{"hf_tokenizer_json":{"path":"/t"}}`, artifact.FormatHFTokenizerJSON, "", false, -1, artifact.ErrMalformed},
		{"empty path", artifact.SlotTokenizer, `{"hf_tokenizer_json":{"path":"","checksum":"` + sumA + `"}}`, artifact.FormatHFTokenizerJSON, "", false, -1, artifact.ErrMalformed},
		{"negative size", artifact.SlotTokenizer, `{"hf_tokenizer_json":{"path":"/t","checksum":"` + sumA + `","size":-1}}`, artifact.FormatHFTokenizerJSON, "", false, -1, artifact.ErrMalformed},
		{"template without file", artifact.SlotChatTemplateFile, `{"hf_chat_template":{"is_custom":true}}`, artifact.FormatHFChatTemplate, "", true, -1, artifact.ErrMalformed},
		{"http without host", artifact.SlotTokenizer, `{"hf_tokenizer_json":` + cf("http:///t.json") + `}`, artifact.FormatHFTokenizerJSON, artifact.KindHTTP, false, -1, artifact.ErrMalformed},
		{"oversized", artifact.SlotTokenizer, `{"hf_tokenizer_json":{"path":"/` + strings.Repeat("x", artifact.MaxSlotBytes) + `","checksum":"` + sumA + `"}}`, "", "", false, -1, artifact.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref, err := artifact.ParseSlot(tc.slot, []byte(tc.raw))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if ref.Format != tc.format || ref.Slot != tc.slot || ref.Size != tc.size {
				t.Errorf("ref = %+v", ref)
			}
			if tc.kind != "" && ref.Kind != tc.kind {
				t.Errorf("kind = %s, want %s", ref.Kind, tc.kind)
			}
			if tc.wantErr == nil && (ref.Checksum.String() != sumA || ref.Custom != tc.custom) {
				t.Errorf("ref = %+v", ref)
			}
		})
	}
}

func TestParseHF(t *testing.T) {
	tests := []struct {
		in, url string
	}{
		{"hf://Qwen/Qwen3-0.6B/tokenizer.json", "https://hub.example/Qwen/Qwen3-0.6B/resolve/main/tokenizer.json"},
		{"hf://meta-llama/Llama-3.1-8B@a1b2c3/original/tokenizer.model", "https://hub.example/meta-llama/Llama-3.1-8B/resolve/a1b2c3/original/tokenizer.model"},
		{"hf://o/r@refs%2Fpr%2F1/t.json", "https://hub.example/o/r/resolve/refs%2Fpr%2F1/t.json"},
		{"hf://o/r/dir name/t.json", "https://hub.example/o/r/resolve/main/dir%20name/t.json"},
		{"hf://gpt2/tokenizer.json", "https://hub.example/gpt2/resolve/main/tokenizer.json"},
		{"hf://gpt2@v1/tokenizer.json", "https://hub.example/gpt2/resolve/v1/tokenizer.json"},
		// The file path is a URL path, as the revision is: an escape names
		// the byte it encodes and is sent once encoded, not escaped again.
		{"hf://o/r/dir%20name/t.json", "https://hub.example/o/r/resolve/main/dir%20name/t.json"},
		{"hf://o/r/100%25.json", "https://hub.example/o/r/resolve/main/100%25.json"},
		// A lone '%' is no escape: the character itself.
		{"hf://o/r/100%.json", "https://hub.example/o/r/resolve/main/100%25.json"},
	}
	for _, tc := range tests {
		r, err := artifact.ParseHF(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if got := r.ResolveURL("https://hub.example/"); got != tc.url {
			t.Errorf("%s: %s, want %s", tc.in, got, tc.url)
		}
	}
	for _, bad := range []string{"hf://o", "hf://o/", "hf:///t", "hf://@v/t", "hf://o/r/../x", "hf://o/r/%2e%2e/x", "hf://o/r/a%2Fb", "hf:///r/t", "hf://o/r@/t", "hf://spaces/o/r/t", "hf://o/r/a?b", "https://o/r/t"} {
		if _, err := artifact.ParseHF(bad); err == nil {
			t.Errorf("ParseHF(%q) accepted", bad)
		}
	}
}

// TestCardSlots reads the slots of a Model record as the wire codec keeps
// them.
func TestCardSlots(t *testing.T) {
	rec := `{"type":"Model","namespace":"dynamo","component":"backend","endpoint":"generate","instance_id":7,
	  "card_json":{"display_name":"Qwen/Qwen3-0.6B",
	    "tokenizer":{"hf_tokenizer_json":` + cf("/m/tokenizer.json") + `},
	    "prompt_formatter":{"hf_tokenizer_config_json":` + cf("/m/tokenizer_config.json") + `},
	    "chat_template_file":{"mystery":{}}}}`
	m, err := wire.ParseModel([]byte(rec))
	if err != nil {
		t.Fatal(err)
	}
	got := artifact.CardSlots("", m.Card.Tokenizer, m.Card.PromptFormatter, m.Card.ChatTemplateFile)
	if len(got) != 3 {
		t.Fatalf("slots %+v", got)
	}
	if got[0].Err != nil || got[0].Slot != artifact.SlotTokenizer || got[0].Name() != "tokenizer.json" {
		t.Errorf("tokenizer %+v", got[0])
	}
	if got[1].Err != nil || got[1].Format != artifact.FormatHFTokenizerConfigJSON {
		t.Errorf("prompt_formatter %+v", got[1])
	}
	if !errors.Is(got[2].Err, artifact.ErrUnsupported) || got[2].Slot != artifact.SlotChatTemplateFile {
		t.Errorf("chat_template_file %+v", got[2])
	}
	// A local file's name is literal: its fallback names the same file
	// on the Hub, a '%' included.
	odd := artifact.CardSlots("o/r", []byte(`{"hf_tokenizer_json":`+cf("/m/a b%41.json")+`}`), nil, nil)
	if hr, err := artifact.ParseHF(odd[0].HFFallback); err != nil || hr.Path != "a b%41.json" {
		t.Errorf("fallback %q: %+v %v", odd[0].HFFallback, hr, err)
	}
	if n := len(artifact.CardSlots("", nil, nil, []byte("null"))); n != 0 {
		t.Errorf("empty card has %d slots", n)
	}
	// The slot bound is the one the discovery reducer applies.
	if artifact.MaxSlotBytes != wire.MaxArtifactSlotBytes {
		t.Errorf("MaxSlotBytes %d, the reducer's %d", artifact.MaxSlotBytes, wire.MaxArtifactSlotBytes)
	}
}

// FuzzParseSlot: any slot JSON parses or fails with one of the package's
// errors, without panicking; a parsed ref is consistent.
func FuzzParseSlot(f *testing.F) {
	f.Add([]byte(`{"hf_tokenizer_json":` + cf("/m/tokenizer.json") + `}`))
	f.Add([]byte(`{"hf_chat_template":{"is_custom":true,"file":` + cf("hf://o/r@v/t.jinja") + `}}`))
	f.Add([]byte(`{"hf_tokenizer_config_json":` + cf("https://h/x?y") + `}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, slot := range artifact.Slots {
			ref, err := artifact.ParseSlot(slot, raw)
			if err != nil {
				if !errors.Is(err, artifact.ErrMalformed) && !errors.Is(err, artifact.ErrUnsupported) {
					t.Fatalf("%s: unexpected error class: %v", slot, err)
				}
				continue
			}
			if ref.Location == "" || ref.Format == "" || ref.Kind == "" || ref.Kind == artifact.KindOther {
				t.Fatalf("%s: inconsistent ref %+v", slot, ref)
			}
			if ref.Kind == artifact.KindHF {
				if _, err := artifact.ParseHF(ref.Location); err != nil {
					t.Fatalf("hf ref does not reparse: %v", err)
				}
			}
			_ = ref.Name()
		}
	})
}
