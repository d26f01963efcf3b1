package chattemplate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/testutil"
)

// pyJinjaScript renders a JSON list of {template, vars} with jinja2
// configured as transformers' apply_chat_template configures it and prints
// a JSON list of {text} or {error}. strftime_now reads the same fixed clock
// as the Go tests.
const pyJinjaScript = `
import datetime, json, sys
import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2026, 3, 7, 9, 5, 4)

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def strftime_now(fmt):
    return NOW.strftime(fmt)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
out = []
for case in json.load(sys.stdin):
    try:
        kwargs = {"messages": [], "tools": None, "documents": None, "add_generation_prompt": False}
        kwargs.update(case.get("vars") or {})
        out.append({"text": env.from_string(case["template"]).render(**kwargs)})
    except Exception as e:
        out.append({"error": type(e).__name__ + ": " + str(e)})
json.dump(out, sys.stdout, ensure_ascii=False)
`

// pyCase is one template and its variables (a JSON object, or empty).
type pyCase struct {
	Template string          `json:"template"`
	Vars     json.RawMessage `json:"vars,omitempty"`
}

type pyResult struct {
	Text  *string `json:"text"`
	Error string  `json:"error"`
}

// pyRender renders cases with Python jinja2 (Debian's python3-jinja2); the
// test is skipped when it is missing, except in CI, where .ci/run installs
// it.
func pyRender(t *testing.T, cases []pyCase) []pyResult {
	t.Helper()
	py := testutil.Python
	if err := exec.Command(py, "-c", "import jinja2").Run(); err != nil {
		testutil.SkipOrFailInCI(t, "jinja2 is not installed (apt-get install python3-jinja2): %v", err)
	}
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", pyJinjaScript)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	var res []pyResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if len(res) != len(cases) {
		t.Fatalf("python rendered %d of %d cases", len(res), len(cases))
	}
	return res
}

// inputOf builds the Input of a case's vars as the python side passes them.
func inputOf(t *testing.T, vars json.RawMessage) chattemplate.Input {
	t.Helper()
	in := chattemplate.Input{Extra: map[string]any{}}
	if len(vars) == 0 {
		return in
	}
	v, err := chattemplate.DecodeJSON(vars)
	if err != nil {
		t.Fatal(err)
	}
	d := v.(*chattemplate.Dict)
	for _, k := range d.Keys() {
		val, _ := d.Get(k)
		switch k {
		case "messages":
			in.Messages = val.(*chattemplate.List).Items
		case "tools":
			if l, ok := val.(*chattemplate.List); ok {
				in.Tools = l.Items
			}
		case "add_generation_prompt":
			in.AddGenerationPrompt = val.(bool)
		default:
			in.Extra[k.(string)] = val
		}
	}
	return in
}

// diffPython renders every case in Go and in Python and reports where they
// differ: the text, or one failing while the other renders.
func diffPython(t *testing.T, cases []pyCase) {
	t.Helper()
	want := pyRender(t, cases)
	for i, c := range cases {
		got, err := render(c.Template, inputOf(t, c.Vars))
		w := want[i]
		switch {
		case w.Text == nil && err == nil:
			t.Errorf("%q\n  rendered %q, python failed: %s", c.Template, got, w.Error)
		case w.Text == nil:
			if errors.Is(err, chattemplate.ErrRenderUnavailable) {
				t.Errorf("%q\n  budget error %v, python failed: %s", c.Template, err, w.Error)
			}
			if msg, ok := strings.CutPrefix(w.Error, "TemplateError: "); ok && !strings.HasSuffix(err.Error(), msg) {
				t.Errorf("%q\n  error %v, python raised %q", c.Template, err, msg)
			}
		case err != nil:
			t.Errorf("%q\n  error %v, python rendered %q", c.Template, err, *w.Text)
		case got != *w.Text:
			t.Errorf("%q\n  got  %q\n  want %q", c.Template, got, *w.Text)
		}
	}
}

// TestPythonProbe renders the cases of the JSON file named by
// CHATTEMPLATE_PROBE (a list of {template, vars}) in Go and Python and
// reports the differences; without the variable it is skipped.
func TestPythonProbe(t *testing.T) {
	path := os.Getenv("CHATTEMPLATE_PROBE")
	if path == "" {
		t.Skip("CHATTEMPLATE_PROBE not set")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cases []pyCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	diffPython(t, cases)
}
