package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
)

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestReadmeConfigsValidate runs `continuum config validate` on every YAML
// example in the README: each must exit 0.
func TestReadmeConfigsValidate(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := yamlBlock.FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("no yaml examples in the README")
	}
	for i, b := range blocks {
		file := filepath.Join(t.TempDir(), "example.yaml")
		if err := os.WriteFile(file, b[1], 0o600); err != nil {
			t.Fatal(err)
		}
		ios, _, out, errOut := iostreams.Test()
		f := &cmdutil.Factory{IOStreams: ios, Env: func(string) (string, bool) { return "x", true }}
		if code := cli.Run(context.Background(), f, []string{"config", "validate", file}); code != 0 {
			t.Errorf("README example %d: exit %d\n%s%s", i+1, code, out, errOut)
		}
	}
}
