package chattemplate_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/testutil"
)

// fixedNow is the clock scripts/template-ref/render.py gives strftime_now.
var fixedNow = time.Date(2026, 3, 7, 9, 5, 4, 0, time.UTC)

type goldenCase struct {
	name  string
	input chattemplate.Input
}

func loadCases(t testing.TB) []goldenCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "testdata", "chattemplate", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	var out []goldenCase
	for _, r := range raw {
		var head struct {
			Name  string                     `json:"name"`
			Extra map[string]json.RawMessage `json:"extra"`
		}
		if err := json.Unmarshal(r, &head); err != nil {
			t.Fatal(err)
		}
		// The extra kwargs are flattened into the request as a client would
		// send them.
		in, err := chattemplate.DecodeRequest(r)
		if err != nil {
			t.Fatalf("%s: %v", head.Name, err)
		}
		if in.Extra == nil {
			in.Extra = map[string]any{}
		}
		for k, v := range head.Extra {
			dv, err := chattemplate.DecodeJSON(v)
			if err != nil {
				t.Fatal(err)
			}
			in.Extra[k] = dv
		}
		out = append(out, goldenCase{name: head.Name, input: in})
	}
	// The benchmark's ~8k-token request is a case too.
	in, err := chattemplate.DecodeRequest(longRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	return append(out, goldenCase{name: "long_request", input: in})
}

func longRequest(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "testdata", "chattemplate", "long_request.json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func loadTemplate(t testing.TB, name string) *chattemplate.Template {
	t.Helper()
	dir := filepath.Join(testutil.RepoRoot(t), "testdata", "chattemplate", "templates")
	src, err := os.ReadFile(filepath.Join(dir, name+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattemplate.Compile(string(src), chattemplate.WithClock(func() time.Time { return fixedNow }), chattemplate.WithTimeout(0))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tmpl
}

func loadTokens(t testing.TB, name string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "testdata", "chattemplate", "templates", name+".tokens.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		t.Fatal(err)
	}
	var tokens map[string]string
	if err := json.Unmarshal(data, &tokens); err != nil {
		t.Fatal(err)
	}
	return tokens
}

// TestGoldenRenders checks every case against Python jinja2's render (as
// transformers configures it) for each model's template.
func TestGoldenRenders(t *testing.T) {
	t.Parallel()
	root := testutil.RepoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "testdata", "chattemplate", "golden", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files (%v)", err)
	}
	cases := loadCases(t)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			tmpl := loadTemplate(t, name)
			tokens := loadTokens(t, name)
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var golden map[string]struct {
				Text  *string `json:"text"`
				Error string  `json:"error"`
			}
			if err := json.Unmarshal(data, &golden); err != nil {
				t.Fatal(err)
			}
			if len(golden) != len(cases) {
				t.Fatalf("golden has %d cases, cases.json %d: regenerate with scripts/template-ref/update.sh", len(golden), len(cases))
			}
			matched := 0
			for _, c := range cases {
				want, ok := golden[c.name]
				if !ok {
					t.Errorf("%s: no golden render", c.name)
					continue
				}
				in := c.input
				in.SpecialTokens = tokens
				got, err := tmpl.Render(context.Background(), in)
				switch {
				case want.Text == nil && err == nil:
					t.Errorf("%s: rendered, python failed with %s", c.name, want.Error)
				case want.Text == nil:
					// raise_exception must raise the same message.
					if msg, ok := strings.CutPrefix(want.Error, "TemplateError: "); ok &&
						(!errors.Is(err, chattemplate.ErrRaised) || !strings.HasSuffix(err.Error(), msg)) {
						t.Errorf("%s: got %v, python raised %q", c.name, err, msg)
						continue
					}
					matched++
				case err != nil:
					t.Errorf("%s: %v", c.name, err)
				case got != *want.Text:
					t.Errorf("%s: render differs\n--- got\n%q\n--- want\n%q", c.name, got, *want.Text)
				default:
					matched++
				}
			}
			if matched != len(cases) {
				t.Errorf("%d/%d cases match", matched, len(cases))
			}
		})
	}
}

// TestGoldenTemplatesAsDynamoFrontend renders every golden case again as
// Dynamo's frontend does (WithDynamoFrontend): what jinja2 renders must
// render there too, and a template that neither calls tojson nor prints
// anything but strings renders the same text.
func TestGoldenTemplatesAsDynamoFrontend(t *testing.T) {
	t.Parallel()
	root := testutil.RepoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "testdata", "chattemplate", "golden", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files (%v)", err)
	}
	cases := loadCases(t)
	// Where minijinja fails a render jinja2 completes: a schema's
	// spec['items'] that has none is undefined there (jinja2 finds the
	// dict's items method), and an attribute of undefined is an error;
	// val.items() on a schema that has an "items" key calls that value
	// there (jinja2 calls the method), which is not callable.
	minijinjaFails := map[string]string{"features": "has no element 'items'", "gigachat3": "object is not callable"}
	differ, rendered, failed := 0, 0, 0
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		src, err := os.ReadFile(filepath.Join(root, "testdata", "chattemplate", "templates", name+".jinja"))
		if err != nil {
			t.Fatal(err)
		}
		tmpl := loadTemplate(t, name)
		dyn, err := chattemplate.Compile(string(src), chattemplate.WithClock(func() time.Time { return fixedNow }), chattemplate.WithDynamoFrontend(), chattemplate.WithTimeout(0))
		if err != nil {
			t.Fatal(err)
		}
		tokens := loadTokens(t, name)
		for _, c := range cases {
			in := c.input
			in.SpecialTokens = tokens
			want, err := tmpl.Render(context.Background(), in)
			if err != nil {
				continue
			}
			// Real configs name these tokens, which the frontend always
			// passes (none when absent); the files kept here hold only
			// what jinja2's renders need, which an undefined token is not.
			in.SpecialTokens = maps.Clone(tokens)
			if in.SpecialTokens == nil {
				in.SpecialTokens = map[string]string{}
			}
			for _, k := range []string{"bos_token", "eos_token", "unk_token"} {
				if _, ok := in.SpecialTokens[k]; !ok {
					in.SpecialTokens[k] = ""
				}
			}
			got, err := dyn.Render(context.Background(), in)
			if err != nil {
				if want, ok := minijinjaFails[name]; !ok || !strings.Contains(err.Error(), want) {
					t.Errorf("%s/%s: %v", name, c.name, err)
				}
				failed++
				continue
			}
			rendered++
			if got != want {
				differ++
				if name == "llama2" || name == "mistral" || name == "gemma3" {
					t.Errorf("%s/%s: a template without tojson renders differently:\n%q\n%q", name, c.name, got, want)
				}
			}
		}
	}
	t.Logf("%d of %d renders differ from transformers'; %d failed as in minijinja", differ, rendered, failed)
}

func TestFromTokenizerConfig(t *testing.T) {
	t.Parallel()
	root := testutil.RepoRoot(t)
	for _, tc := range []struct {
		model string
		want  map[string]string
	}{
		{"qwen3", map[string]string{"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}},
		{"deepseek_v3", map[string]string{"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>", "pad_token": "<｜end▁of▁sentence｜>"}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(root, "testdata", "chattemplate", tc.model+".tokenizer_config.json"))
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := chattemplate.FromTokenizerConfig(data, "")
			if err != nil {
				t.Fatal(err)
			}
			got := tmpl.SpecialTokens()
			keys := make([]string, 0, len(got))
			for k := range got {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if len(got) != len(tc.want) {
				t.Fatalf("tokens %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			// The config's tokens reach the template without SpecialTokens.
			cases := loadCases(t)
			var golden map[string]struct {
				Text *string `json:"text"`
			}
			gdata, err := os.ReadFile(filepath.Join(root, "testdata", "chattemplate", "golden", tc.model+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(gdata, &golden); err != nil {
				t.Fatal(err)
			}
			for _, c := range cases {
				want := golden[c.name]
				if want.Text == nil {
					continue
				}
				out, err := tmpl.Render(context.Background(), c.input)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if out != *want.Text {
					t.Errorf("%s: differs from golden", c.name)
				}
			}
		})
	}
}
