package kvinspect_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
)

func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	ios, in, out, errOut := iostreams.Test()
	in.WriteString(stdin)
	f := &cmdutil.Factory{IOStreams: ios, Env: func(string) (string, bool) { return "", false }}
	code := cli.Run(context.Background(), f, args)
	return code, out.String(), errOut.String()
}

// tokenizerFile gunzips the committed Qwen3 tokenizer.json into a temp file.
func tokenizerFile(t *testing.T, name string) string {
	t.Helper()
	data := testutil.TokenizerJSON(t, name)
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func lines(t *testing.T, s string) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// The tokenize subcommand gives the golden ids of the HF reference for the
// whole corpus, with and without special tokens.
func TestTokenizeMatchesGoldens(t *testing.T) {
	t.Parallel()
	root := testutil.RepoRoot(t)
	tok := tokenizerFile(t, "llama3")
	corpus, err := os.ReadFile(filepath.Join(root, "testdata/tokenize/corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(filepath.Join(root, "testdata/tokenize/golden/llama3.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var want []struct {
		IDs        []uint32 `json:"ids"`
		IDsSpecial []uint32 `json:"ids_special"`
	}
	for _, l := range strings.Split(strings.TrimSpace(string(golden)), "\n") {
		var g struct {
			IDs        []uint32 `json:"ids"`
			IDsSpecial []uint32 `json:"ids_special"`
		}
		if err := json.Unmarshal([]byte(l), &g); err != nil {
			t.Fatal(err)
		}
		want = append(want, g)
	}
	for _, special := range []bool{false, true} {
		args := []string{"kv-inspect", "tokenize", "--tokenizer", tok}
		if special {
			args = append(args, "--add-special-tokens")
		}
		code, out, errOut := run(t, string(corpus), args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		got := lines(t, out)
		if len(got) != len(want) {
			t.Fatalf("%d output lines for %d goldens", len(got), len(want))
		}
		for i, g := range got {
			var ids []uint32
			if err := json.Unmarshal(g["ids"], &ids); err != nil {
				t.Fatalf("line %d: %v", i, err)
			}
			w := want[i].IDs
			if special {
				w = want[i].IDsSpecial
			}
			if !slices.Equal(ids, w) {
				t.Fatalf("special=%v line %d: ids differ from the reference", special, i+1)
			}
		}
	}
}

func TestTokenizeTextAndErrors(t *testing.T) {
	t.Parallel()
	tok := tokenizerFile(t, "qwen3")
	code, out, _ := run(t, "", "kv-inspect", "tokenize", "--tokenizer", tok, "--text", "Hello, world")
	if code != 0 || !strings.Contains(out, "9707") || !strings.Contains(out, `"Hello"`) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	code, out, errOut := run(t, "{\"text\": \"a\"}\nnot json\n{\"nope\": 1}\n\n{\"text\": \"\"}\n", "kv-inspect", "tokenize", "--tokenizer", tok)
	got := lines(t, out)
	if code != 1 || len(got) != 4 || got[1]["error"] == nil || got[2]["error"] == nil || string(got[3]["ids"]) != "[]" {
		t.Fatalf("exit %d, lines %v, stderr %s", code, out, errOut)
	}
	if code, _, errOut := run(t, "", "kv-inspect", "tokenize", "--tokenizer", "/nonexistent.json"); code != 2 || !strings.Contains(errOut, "nonexistent") {
		t.Fatalf("missing file: exit %d %s", code, errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte(`{"model": {"type": "BacktrackingBpe", "vocab": {}}}`), 0o600)
	if code, _, errOut := run(t, "", "kv-inspect", "tokenize", "--tokenizer", bad, "--text", "x"); code != 2 || errOut == "" {
		t.Fatalf("unsupported tokenizer: exit %d %s", code, errOut)
	}
}

// The render subcommand gives the Python jinja2 reference's renders of
// Qwen3's template (and its errors) for every conversation case.
func TestRenderMatchesGoldens(t *testing.T) {
	t.Parallel()
	root := testutil.RepoRoot(t)
	var cases []map[string]json.RawMessage
	b, _ := os.ReadFile(filepath.Join(root, "testdata/chattemplate/cases.json"))
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	var golden map[string]struct {
		Text  *string `json:"text"`
		Error *string `json:"error"`
	}
	b, _ = os.ReadFile(filepath.Join(root, "testdata/chattemplate/golden/qwen3.json"))
	if err := json.Unmarshal(b, &golden); err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	var names []string
	for _, c := range cases {
		var name string
		_ = json.Unmarshal(c["name"], &name)
		line := map[string]json.RawMessage{}
		for k, v := range c {
			switch k {
			case "name":
			case "extra":
				var extra map[string]json.RawMessage
				_ = json.Unmarshal(v, &extra)
				for ek, ev := range extra {
					line[ek] = ev
				}
			default:
				line[k] = v
			}
		}
		enc, _ := json.Marshal(line)
		in.Write(enc)
		in.WriteByte('\n')
		names = append(names, name)
	}
	_, out, _ := run(t, in.String(), "kv-inspect", "render", "--tokenizer-config", filepath.Join(root, "testdata/chattemplate/qwen3.tokenizer_config.json"))
	got := lines(t, out)
	if len(got) != len(names) {
		t.Fatalf("%d lines for %d cases", len(got), len(names))
	}
	checked := 0
	for i, g := range got {
		w, ok := golden[names[i]]
		if !ok {
			continue
		}
		checked++
		var text string
		switch {
		case w.Text != nil:
			if err := json.Unmarshal(g["text"], &text); err != nil || text != *w.Text {
				t.Errorf("%s: render differs from the reference (%s)", names[i], g["error"])
			}
		case w.Error != nil && g["error"] == nil:
			t.Errorf("%s: the reference fails, the render did not", names[i])
		}
	}
	if checked < 20 {
		t.Fatalf("only %d cases checked", checked)
	}
	if code, _, _ := run(t, "", "kv-inspect", "render"); code != 2 {
		t.Fatalf("no template: exit %d", code)
	}
}

// render --dynamo writes tojson as Dynamo's frontend does (minijinja's
// compact, HTML-safe JSON); without it, as transformers does.
func TestRenderDynamo(t *testing.T) {
	t.Parallel()
	tmpl := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(tmpl, []byte(`{{ tools | tojson }}`), 0o600); err != nil {
		t.Fatal(err)
	}
	in := `{"messages": [], "tools": [{"type": "function", "function": {"name": "f", "description": "<&>"}}]}` + "\n"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `[{"type": "function", "function": {"name": "f", "description": "<&>"}}]`},
		{[]string{"--dynamo"}, `[{"type":"function","function":{"name":"f","description":"\u003c\u0026\u003e"}}]`},
	} {
		code, out, errOut := run(t, in, append([]string{"kv-inspect", "render", "--template", tmpl}, tc.args...)...)
		got := lines(t, out)
		var text string
		if code != 0 || len(got) != 1 || json.Unmarshal(got[0]["text"], &text) != nil || text != tc.want {
			t.Errorf("%v: exit %d, %s %s; want text %s", tc.args, code, out, errOut, tc.want)
		}
	}
}

// The hash subcommand: the block hashes are wire.LocalBlockHashes of the ids
// under the LoRA and salt seed, for text and for chat requests.
func TestHash(t *testing.T) {
	t.Parallel()
	root := testutil.RepoRoot(t)
	tok := tokenizerFile(t, "qwen3")
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)
	in, _ := json.Marshal(map[string]string{"text": text})
	chat := `{"messages": [{"role": "user", "content": "` + text + `"}], "add_generation_prompt": true}`
	code, out, errOut := run(t, string(in)+"\n"+chat+"\n", "kv-inspect", "hash", "--tokenizer", tok, "--block-size", "16",
		"--lora", "adapter-a", "--salt", "tenant-a", "--tokenizer-config", filepath.Join(root, "testdata/chattemplate/qwen3.tokenizer_config.json"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	got := lines(t, out)
	if len(got) != 2 {
		t.Fatalf("lines: %s", out)
	}
	for i, g := range got {
		var ids []uint32
		var hashes []uint64
		if json.Unmarshal(g["ids"], &ids) != nil || json.Unmarshal(g["block_hashes"], &hashes) != nil {
			t.Fatalf("line %d: %s", i, out)
		}
		if want := wire.LocalBlockHashes(ids, 16, wire.BlockHashSeed("adapter-a", "tenant-a")); len(hashes) != len(ids)/16 || !slices.Equal(hashes, want) {
			t.Fatalf("line %d: %d hashes for %d ids", i, len(hashes), len(ids))
		}
	}
	var chatIDs []uint32
	_ = json.Unmarshal(got[1]["ids"], &chatIDs)
	if chatIDs[0] != 151644 { // <|im_start|>: the template's, not an added token
		t.Fatalf("chat ids start with %d", chatIDs[0])
	}
	code, out, _ = run(t, "", "kv-inspect", "hash", "--tokenizer", tok, "--block-size", "16", "--text", text)
	if code != 0 || !strings.Contains(out, "complete blocks of 16") || !strings.Contains(out, "TOKENS_HASH") {
		t.Fatalf("text table: exit %d\n%s", code, out)
	}
	if code, _, errOut := run(t, "", "kv-inspect", "hash", "--tokenizer", tok, "--block-size", "8", "--text", "x"); code != 2 || !strings.Contains(errOut, "16..65536") {
		t.Fatalf("block size 8: exit %d %s", code, errOut)
	}
	code, out, _ = run(t, chat+"\n", "kv-inspect", "hash", "--tokenizer", tok, "--block-size", "16")
	if code != 1 || !strings.Contains(out, "chat template") {
		t.Fatalf("chat without a template: exit %d %s", code, out)
	}
}

// TestTemplateNameNeedsTokenizerConfig: --template-name picks one of a
// tokenizer_config.json's named templates; with a .jinja file, or with no
// template at all, it would be ignored and the render or hash would not be
// the template asked for, so it is refused as a usage error.
func TestTemplateNameNeedsTokenizerConfig(t *testing.T) {
	t.Parallel()
	tok := tokenizerFile(t, "qwen3")
	jinja := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(jinja, []byte("{% for m in messages %}{{ m.content }}{% endfor %}"), 0o600); err != nil {
		t.Fatal(err)
	}
	req := `{"messages": [{"role": "user", "content": "Hi"}]}` + "\n"
	for _, args := range [][]string{
		{"kv-inspect", "render", "--template", jinja, "--template-name", "tool_use"},
		{"kv-inspect", "hash", "--tokenizer", tok, "--block-size", "16", "--template", jinja, "--template-name", "tool_use"},
		{"kv-inspect", "hash", "--tokenizer", tok, "--block-size", "16", "--template-name", "tool_use", "--text", "Hi"},
	} {
		code, _, errOut := run(t, req, args...)
		if code != cmdutil.ExitUsage || !strings.Contains(errOut, "--template-name") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming --template-name", args[1:], code, errOut)
		}
	}
}
