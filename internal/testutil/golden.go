package testutil

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/ with the current output")

// Golden compares got with the file at path, or rewrites the file when the
// test runs with -update. A relative path is taken from the working
// directory, which `go test` sets to the package's directory; golden files
// shared by several packages are passed under RepoRoot.
func Golden(tb testing.TB, path string, got []byte) {
	tb.Helper()
	full := path
	if *update {
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(full, got, 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(full)
	if err != nil {
		tb.Fatalf("golden %s: %v (run the test with -update to create it)", path, err)
	}
	if string(want) != string(got) {
		tb.Errorf("output differs from %s (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
