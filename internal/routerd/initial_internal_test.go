package routerd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
)

// TestInitialCheckKeepsAnImport: the file's first check after its watch
// is set up applies only an edit made since the start; a document PUT as
// soon as the router was ready is not undone by the unchanged file.
func TestInitialCheckKeepsAnImport(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "continuum.yaml")
	text := "server: {bind_address: \"127.0.0.1:0\"}\nbackends:\n  - {name: from-file, url: \"http://127.0.0.1:1\"}\n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	doc, err := config.Load(file, config.Options{})
	if err != nil || doc.Findings.Errors() > 0 {
		t.Fatal(err, doc.Findings)
	}
	d, err := New(doc.Config, Deps{Reload: Reload{File: file}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	imported := "server: {bind_address: \"127.0.0.1:0\"}\nbackends:\n  - {name: imported, url: \"http://127.0.0.1:2\"}\n"
	if r := d.importConfig([]byte(imported)); r.Result != admin.ReloadApplied {
		t.Fatalf("import: %+v", r)
	}
	d.reloadFile(TriggerFile, nil, true)
	if bs := d.cfg.Load().Backends; len(bs) != 1 || bs[0].Name != "imported" {
		t.Fatalf("after the first check of an unchanged file: backends %+v", bs)
	}
	// An edit made since the start is applied by that check.
	if err := os.WriteFile(file, []byte(text+"  - {name: edited, url: \"http://127.0.0.1:3\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.reloadFile(TriggerFile, nil, true)
	if bs := d.cfg.Load().Backends; len(bs) != 2 || bs[1].Name != "edited" {
		t.Fatalf("after the first check of an edited file: backends %+v", bs)
	}
}
