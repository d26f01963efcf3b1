// Package testutil holds helpers shared by tests. Only tests import it.
//
// Imports: anything; only tests import it.
package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// RepoRoot returns the repository root: the nearest directory above the
// working directory that holds go.mod.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// ReplaceFile replaces path's content the way editors and ConfigMap
// volumes do: a new file written beside it and renamed over it, so that a
// watcher never reads it half-written.
func ReplaceFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
