package chattemplate_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestFeatures renders one small template per Jinja feature and compares
// with Python jinja2 (testdata/chattemplate/features_table.json, written by
// scripts/template-ref/render.py): the text, or that both fail.
func TestFeatures(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testutil.RepoRoot(t), "testdata", "chattemplate")
	data, err := os.ReadFile(filepath.Join(dir, "features.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name     string          `json:"name"`
		Template string          `json:"template"`
		Vars     json.RawMessage `json:"vars"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	gdata, err := os.ReadFile(filepath.Join(dir, "features_table.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden map[string]struct {
		Text  *string `json:"text"`
		Error string  `json:"error"`
	}
	if err := json.Unmarshal(gdata, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden) != len(cases) {
		t.Fatalf("%d goldens for %d cases: regenerate with scripts/template-ref/update.sh", len(golden), len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			want, ok := golden[c.Name]
			if !ok {
				t.Fatal("no golden")
			}
			in := chattemplate.Input{Extra: map[string]any{}}
			if len(c.Vars) > 0 {
				v, err := chattemplate.DecodeJSON(c.Vars)
				if err != nil {
					t.Fatal(err)
				}
				d := v.(*chattemplate.Dict)
				for _, k := range d.Keys() {
					val, _ := d.Get(k)
					if k == "messages" {
						in.Messages = val.(*chattemplate.List).Items
						continue
					}
					in.Extra[k.(string)] = val
				}
			}
			got, err := render(c.Template, in)
			switch {
			case want.Text == nil && err == nil:
				t.Errorf("rendered %q, python failed: %s", got, want.Error)
			case want.Text == nil:
				if errors.Is(err, chattemplate.ErrRenderUnavailable) {
					t.Errorf("python failed (%s), got a budget error: %v", want.Error, err)
				}
				if msg, ok := strings.CutPrefix(want.Error, "TemplateError: "); ok && !strings.HasSuffix(err.Error(), msg) {
					t.Errorf("got %v, python raised %q", err, msg)
				}
			case err != nil:
				t.Errorf("error %v, python rendered %q", err, *want.Text)
			case got != *want.Text:
				t.Errorf("got  %q\nwant %q", got, *want.Text)
			}
		})
	}
}

func render(src string, in chattemplate.Input) (string, error) {
	tmpl, err := chattemplate.Compile(src, chattemplate.WithClock(func() time.Time { return fixedNow }))
	if err != nil {
		return "", err
	}
	return tmpl.Render(context.Background(), in)
}
