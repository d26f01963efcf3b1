// Package testutil holds helpers shared by tests. Only tests import it.
package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// AddCorpus seeds f with the corpus kept in testdata/fuzz/<name>/ at the
// repository root: files in Go's "go test fuzz v1" format holding one []byte
// or string value (scripts/fuzz.sh copies newly found inputs there).
func AddCorpus(f *testing.F, name string) {
	f.Helper()
	dir := filepath.Join(RepoRoot(f), "testdata", "fuzz", name)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return
		}
		f.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		v, err := parseCorpusFile(string(data))
		if err != nil {
			f.Fatalf("%s/%s: %v", dir, e.Name(), err)
		}
		f.Add(v)
	}
}

func parseCorpusFile(s string) ([]byte, error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		return nil, strconv.ErrSyntax
	}
	v := lines[1]
	for _, prefix := range []string{"[]byte(", "string("} {
		if inner, ok := strings.CutPrefix(v, prefix); ok {
			q, err := strconv.Unquote(strings.TrimSuffix(inner, ")"))
			return []byte(q), err
		}
	}
	return nil, strconv.ErrSyntax
}
