package cli_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestDocsUpToDate fails when the committed man pages or completions differ
// from what the command tree generates: run `make completions man`.
func TestDocsUpToDate(t *testing.T) {
	tmp := t.TempDir()
	if err := cli.GenerateDocs(tmp); err != nil {
		t.Fatal(err)
	}
	root := testutil.RepoRoot(t)
	for _, sub := range []string{"man", "completions"} {
		generated := listFiles(t, filepath.Join(tmp, sub))
		committed := listFiles(t, filepath.Join(root, sub))
		for name, want := range generated {
			got, ok := committed[name]
			switch {
			case !ok:
				t.Errorf("%s/%s is missing: run make completions man", sub, name)
			case got != want:
				t.Errorf("%s/%s is stale: run make completions man", sub, name)
			}
		}
		for name := range committed {
			if _, ok := generated[name]; !ok {
				t.Errorf("%s/%s is no longer generated: remove it (make completions man)", sub, name)
			}
		}
	}
}

func listFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(data)
	}
	return out
}
