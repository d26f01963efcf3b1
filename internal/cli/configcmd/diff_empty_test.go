package configcmd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiffEmptyNewIsRefused: every reload path refuses a NEW that holds no
// configuration (nothing but white space and comments, or a null document):
// the file watcher waits for the write, SIGHUP and PUT /admin/config refuse
// it (routerd/reload.go, config.Empty). config diff "exits 1 when a reload
// would refuse NEW" (README, Validating in CI); it must not report such a
// file as applied, tier by tier, with exit 0.
func TestDiffEmptyNewIsRefused(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldFile := write("old.yaml", "server: {bind_address: \"0.0.0.0:8080\"}\nadmin: {token: \"s3cret\"}\n")
	for name, text := range map[string]string{"empty": "", "comments": "# being rewritten\n", "null": "---\n"} {
		t.Run(name, func(t *testing.T) {
			r := run(t, nil, "config", "diff", oldFile, write(name+".yaml", text))
			if r.code != 1 {
				t.Errorf("exit %d, want 1 (a reload refuses an empty document)\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.errOut)
			}
			r = run(t, nil, "config", "diff", "--format", "json", oldFile, filepath.Join(dir, name+".yaml"))
			if r.code != 1 || !strings.Contains(r.out, `"applied": false`) {
				t.Errorf("json: exit %d, want 1 with \"applied\": false\n%s", r.code, r.out)
			}
		})
	}
}
