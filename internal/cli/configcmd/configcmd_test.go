package configcmd_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
)

type result struct {
	code        int
	out, errOut string
}

// run executes the continuum command line from the repository root, with env
// as the whole environment seen by ${VAR}.
func run(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	t.Chdir(testutil.RepoRoot(t))
	ios, _, out, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Build: cmdutil.BuildInfo{Version: "v0.0.0-test", Commit: "abc", GoVersion: "go"},
		Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	code := cli.Run(context.Background(), f, args)
	return result{code, out.String(), errOut.String()}
}

func TestValidate(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	tests := []struct {
		name   string
		args   []string
		code   int
		golden string
		substr string
	}{
		{"valid text", []string{"config", "validate", "testdata/config/valid/etcd.yaml"}, 0, "valid.text", ""},
		{"one rule text", []string{"config", "validate", "testdata/config/invalid/one-rule.yaml"}, 1, "one-rule.text", ""},
		{"one rule json", []string{"config", "validate", "--format", "json", "testdata/config/invalid/one-rule.yaml"}, 1, "one-rule.json", ""},
		{"one rule github", []string{"config", "validate", "--format", "github", "testdata/config/invalid/one-rule.yaml"}, 1, "one-rule.github", ""},
		{"many findings text", []string{"config", "validate", "testdata/config/invalid/event-bus.yaml"}, 1, "event-bus.text", ""},
		{"many findings json", []string{"config", "validate", "--format", "json", "testdata/config/invalid/event-bus.yaml"}, 1, "event-bus.json", ""},
		{"many findings github", []string{"config", "validate", "--format", "github", "testdata/config/invalid/event-bus.yaml"}, 1, "event-bus.github", ""},
		{"warnings pass", []string{"config", "validate", "testdata/config/valid/kubernetes-pods.yaml"}, 0, "", "valid (0 errors, 1 warning)"},
		{"warnings fail strict", []string{"config", "validate", "--strict", "testdata/config/valid/kubernetes-pods.yaml"}, 1, "", "warning: dynamo.discovery.source"},
		{"strict json says invalid", []string{"config", "validate", "--strict", "--format", "json", "testdata/config/valid/kubernetes-pods.yaml"}, 1, "", `"valid": false`},
		{"several files", []string{"config", "validate", "testdata/config/valid/etcd.yaml", "testdata/config/invalid/one-rule.yaml"}, 1, "", "etcd.yaml: valid"},
		{"unreadable wins", []string{"config", "validate", "testdata/config/invalid/one-rule.yaml", "testdata/config/missing.yaml"}, 2, "", "missing.yaml: cannot load"},
		{"not yaml", []string{"config", "validate", "README.md"}, 2, "", "cannot load"},
		{"global --config", []string{"--config", "testdata/config/valid/etcd.yaml", "config", "validate"}, 0, "", "etcd.yaml: valid"},
		{"bad format", []string{"config", "validate", "--format", "xml", "testdata/config/valid/etcd.yaml"}, 2, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, nil, tt.args...)
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tt.code, r.out, r.errOut)
			}
			if tt.golden != "" {
				testutil.Golden(t, filepath.Join(testutil.RepoRoot(t), "testdata/config/golden", tt.golden+".golden"), []byte(r.out))
			}
			if !strings.Contains(r.out+r.errOut, tt.substr) {
				t.Errorf("output lacks %q:\n%s%s", tt.substr, r.out, r.errOut)
			}
		})
	}
}

func TestValidateNoFile(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	r := run(t, nil, "config", "validate")
	if r.code != 2 || !strings.Contains(r.errOut, "no configuration file") {
		t.Fatalf("exit %d, stderr %q", r.code, r.errOut)
	}
}

func TestValidateEnvConfig(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "testdata/config/invalid/one-rule.yaml")
	if r := run(t, nil, "config", "validate"); r.code != 1 || !strings.Contains(r.out, "one-rule.yaml:9:") {
		t.Fatalf("exit %d, stdout %q", r.code, r.out)
	}
}

func TestShow(t *testing.T) {
	t.Setenv("TMPDIR", "/tmp")
	t.Setenv("XDG_CACHE_HOME", "/var/cache")
	t.Setenv("CONTINUUM_CONFIG", "")
	env := map[string]string{"ETCD_PASSWORD": "s3cret"}
	for _, tt := range []struct{ name, out string }{{"yaml", "yaml"}, {"json", "json"}} {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, env, "--config", "testdata/config/valid/etcd-tls.yaml", "config", "show", "-o", tt.out)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.errOut)
			}
			for _, secret := range []string{"s3cret", "client-key.pem", "sk-upstream", "admin-token"} {
				if strings.Contains(r.out, secret) {
					t.Errorf("secret %q shown", secret)
				}
			}
			testutil.Golden(t, filepath.Join(testutil.RepoRoot(t), "testdata/config/golden", "show-etcd-tls."+tt.out+".golden"), []byte(r.out))
		})
	}
	t.Run("defaults", func(t *testing.T) {
		r := run(t, nil, "config", "show")
		if r.code != 0 || !strings.Contains(r.out, "max_staleness: 3s") {
			t.Fatalf("exit %d: %s%s", r.code, r.out, r.errOut)
		}
	})
	t.Run("errors", func(t *testing.T) {
		r := run(t, nil, "--config", "testdata/config/invalid/one-rule.yaml", "config", "show")
		if r.code != 1 || !strings.Contains(r.errOut, "credentials in the URL") || r.out != "" {
			t.Fatalf("exit %d: stdout %q stderr %q", r.code, r.out, r.errOut)
		}
	})
}
