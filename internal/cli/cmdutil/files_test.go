package cmdutil_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
)

// TestWriteFileAtomic: the file is replaced, not rewritten in place: a
// reader that opened the previous file reads it whole, the new one has
// its content and mode, and no temporary file is left beside it.
func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "continuum.yaml")
	old := strings.Repeat("old: 1\n", 1000)
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	reader, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Close() }()
	if err := cmdutil.WriteFileAtomic(path, []byte("new: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(reader); err != nil || string(got) != old {
		t.Errorf("a reader of the previous file read %d bytes (%v), want it whole (%d)", len(got), err, len(old))
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new: 2\n" {
		t.Fatalf("new file %q, %v", got, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %v", entries)
	}
}

// TestWriteFileAtomicFails: a write that cannot be completed leaves no
// temporary file and names the file asked for.
func TestWriteFileAtomicFails(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "taken")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := cmdutil.WriteFileAtomic(target, []byte("a"), 0o600)
	if err == nil || !strings.Contains(err.Error(), target) || strings.Contains(err.Error(), ".tmp-") {
		t.Errorf("error %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %v", entries)
	}
	missing := filepath.Join(dir, "no", "such", "dir", "c.yaml")
	if err := cmdutil.WriteFileAtomic(missing, []byte("a"), 0o600); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("error %v", err)
	}
}

// TestWriteFileAtomicThroughLink: a path that is a symbolic link (a
// configuration kept in another directory and linked where it is read)
// stays a link; the file it leads to gets the data.
func TestWriteFileAtomicThroughLink(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "real", "continuum.yaml")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("old: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "continuum.yaml")
	if err := os.Symlink(filepath.Join("real", "continuum.yaml"), link); err != nil {
		t.Fatal(err)
	}
	if err := cmdutil.WriteFileAtomic(link, []byte("new: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v, %v", fi.Mode(), err)
	}
	if got, err := os.ReadFile(file); err != nil || string(got) != "new: 2\n" {
		t.Errorf("the linked file holds %q, %v", got, err)
	}
}
