package chattemplate_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestRandomCases replays random expressions and whitespace-control layouts
// rendered by Python jinja2 (scripts/template-ref/random_cases.py).
func TestRandomCases(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "testdata", "chattemplate", "random_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Template string  `json:"template"`
		Text     *string `json:"text"`
		Error    string  `json:"error"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	vars, err := chattemplate.DecodeJSON([]byte(`{"s": "Hi, there", "l": [3, 1, 2], "d": {"k": "v", "n": null}, "n": null}`))
	if err != nil {
		t.Fatal(err)
	}
	extra := map[string]any{}
	d := vars.(*chattemplate.Dict)
	for _, k := range d.Keys() {
		extra[k.(string)], _ = d.Get(k)
	}
	failed := 0
	for _, c := range cases {
		got, err := render(c.Template, chattemplate.Input{Extra: extra})
		switch {
		case c.Text == nil && err == nil:
			t.Errorf("%s\n  rendered %q, python failed: %s", c.Template, got, c.Error)
		case c.Text == nil:
			if errors.Is(err, chattemplate.ErrRenderUnavailable) {
				t.Errorf("%s\n  budget error %v, python failed: %s", c.Template, err, c.Error)
			}
			continue
		case err != nil:
			t.Errorf("%s\n  error %v, python rendered %q", c.Template, err, *c.Text)
		case got != *c.Text:
			t.Errorf("%s\n  got  %q\n  want %q", c.Template, got, *c.Text)
		default:
			continue
		}
		if failed++; failed > 20 {
			t.Fatal("too many differences")
		}
	}
}
