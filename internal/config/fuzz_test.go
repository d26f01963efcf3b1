package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/continuum-router/continuum/internal/config"
)

// FuzzParse feeds arbitrary bytes through load and validation: no panic, and
// a document or an error, never both missing.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../../testdata/config/*/*.yaml")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("dynamo: {shim: {model_map: {a: b}}}"))
	f.Add([]byte("x-a: &a {b: *a}"))
	env := func(k string) (string, bool) { return "v" + k, len(k)%2 == 0 }
	// The variables the defaults read: all an admin import may read.
	defaults := map[string]bool{}
	config.DefaultFor(func(k string) (string, bool) { defaults[k] = true; return "", false })
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := config.Parse("fuzz.yaml", data, config.Options{Env: env})
		if err == nil && doc == nil {
			t.Fatal("no document and no error")
		}
		if err == nil {
			_ = doc.Config.Masked()
			_ = config.Diff(config.Default(), doc.Config)
		}
		// A document from the network reads nothing of the environment
		// but what the defaults read, whatever it references.
		_, _ = config.Parse("import", data, config.Options{NoEnvRefs: true, Env: func(k string) (string, bool) {
			if !defaults[k] {
				t.Fatalf("an import read the variable %q", k)
			}
			return env(k)
		}})
	})
}
