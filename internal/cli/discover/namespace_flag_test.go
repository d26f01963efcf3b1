package discover_test

import (
	"context"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
)

// TestNamespaceFlagErrorNamesTheSource: a mistake in --namespace (a
// namespace given twice) is refused once, naming the flag, under the
// source read (the file store here), not also under etcd's settings.
func TestNamespaceFlagErrorNamesTheSource(t *testing.T) {
	root := t.TempDir()
	code, out, errOut := runCLI(t, context.Background(), "discover", "--source", "file", "--file-root", root, "--namespace", "a", "--namespace", "a")
	if code != cmdutil.ExitUsage || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	first := strings.SplitN(errOut, "\n", 2)[0]
	if strings.Contains(errOut, "etcd") {
		t.Errorf("source file, but the error speaks of etcd:\n%s", errOut)
	}
	if strings.Count(errOut, "listed twice") != 1 {
		t.Errorf("one duplicate reported %d times:\n%s", strings.Count(errOut, "listed twice"), errOut)
	}
	if !strings.Contains(first, "--namespace") {
		t.Errorf("the error line does not name the --namespace flag: %q", first)
	}
}
