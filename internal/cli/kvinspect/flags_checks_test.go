package kvinspect_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/cli/kvinspect"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// TestWorkersIntervalNeedsFollow: --interval (how often --follow prints)
// without --follow is refused, as every other flag of kv-inspect workers
// that would do nothing in the mode chosen is.
func TestWorkersIntervalNeedsFollow(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, ConfigPath: func() string { return "" },
		Env: func(string) (string, bool) { return "", false }}
	ran := false
	cmd := kvinspect.NewCmdWorkers(f, func(context.Context, *kvinspect.WorkersOptions) error { ran = true; return nil })
	cmd.SetArgs(strings.Fields("--source file --file-root /tmp/s --interval 2s"))
	cmd.SetOut(ios.Out)
	cmd.SetErr(ios.ErrOut)
	err := cmd.Execute()
	if err == nil || ran {
		t.Errorf("--interval without --follow: err %v, ran %v; want a usage error naming --follow", err, ran)
	}
}

// TestRenderRequiresMessages: render reads JSON lines with "messages"; a
// line without them (a typo such as "mesages", or a tokenize line piped to
// render) is an {"error": ...} line and exit 1, not a render of the empty
// conversation.
func TestRenderRequiresMessages(t *testing.T) {
	tmpl := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(tmpl, []byte("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`{"mesages": [{"role": "user", "content": "Hi"}]}`,
		`{"text": "Hi"}`,
		`{"Messages": [{"role": "user", "content": "Hi"}]}`, // members are read by their exact names
	} {
		code, out, errOut := runLive(t, nil, line+"\n", "kv-inspect", "render", "--template", tmpl)
		if code != cmdutil.ExitFailure || !strings.Contains(out, `"error"`) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want {\"error\": ...} and exit 1", line, code, out, errOut)
		}
	}
}
