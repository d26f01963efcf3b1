package configcmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
		{"questionable but valid", []string{"config", "validate", "testdata/config/valid/etcd-design-warnings.yaml"}, 0, "", "valid (0 errors, 3 warnings)"},
		{"warnings fail strict", []string{"config", "validate", "--strict", "testdata/config/valid/kubernetes-pods.yaml"}, 1, "", "warning: dynamo.discovery.source"},
		{"strict text says invalid", []string{"config", "validate", "--strict", "testdata/config/valid/kubernetes-pods.yaml"}, 1, "", "invalid under --strict (0 errors,"},
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

// TestValidateUnsetEnv: validate judges the file, not this machine's
// environment: the design's auth block, its password a ${VAR} not set
// here, passes with a warning beside the plaintext-auth one; config show,
// which prints the values serve would use, still refuses it.
func TestValidateUnsetEnv(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	file := filepath.Join(t.TempDir(), "auth.yaml")
	text := `dynamo:
  enabled: true
  discovery:
    etcd:
      endpoints: ["http://etcd-0.dynamo.svc:2379"]
      auth:
        username: "router"
        password: "${ETCD_PASSWORD}"
  load:
    direct_allow_cidrs: ["10.0.0.0/8"]
`
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, nil, "config", "validate", file)
	if r.code != 0 || !strings.Contains(r.out, "warning: dynamo.discovery.etcd.auth.password: environment variable ETCD_PASSWORD is not set here") ||
		!strings.Contains(r.out, "warning: dynamo.discovery.etcd.auth: auth over a plaintext connection") || !strings.Contains(r.out, "valid (0 errors, 2 warnings)") {
		t.Errorf("validate: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if r := run(t, map[string]string{"ETCD_PASSWORD": "pw"}, "config", "validate", file); r.code != 0 || !strings.Contains(r.out, "valid (0 errors, 1 warning)") {
		t.Errorf("validate with the variable set: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if r := run(t, nil, "config", "show", file); r.code != 1 || !strings.Contains(r.errOut, "ETCD_PASSWORD is not set") {
		t.Errorf("show: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
}

// TestValidateManyWarnings: a file with more warnings than are shown (CI
// validating with 520 unset variables) breaks no rule: valid, exit 0.
func TestValidateManyWarnings(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	var b strings.Builder
	b.WriteString("backends:\n")
	for i := range 520 {
		fmt.Fprintf(&b, "  - {name: b%d, url: \"http://b%d:8000\", api_key: \"${B%d_KEY}\"}\n", i, i, i)
	}
	file := filepath.Join(t.TempDir(), "many.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run(t, nil, "config", "validate", file); r.code != 0 || !strings.Contains(r.out, "20 more warnings are not shown") ||
		!strings.Contains(r.out, "valid (0 errors, 501 warnings)") {
		lines := strings.Split(strings.TrimSpace(r.out), "\n")
		t.Errorf("exit %d; last lines:\n%s%s", r.code, strings.Join(lines[max(0, len(lines)-2):], "\n"), r.errOut)
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
	// FILE names the file as for config validate, before --config.
	t.Run("file argument", func(t *testing.T) {
		r := run(t, env, "--config", "testdata/config/invalid/one-rule.yaml", "config", "show", "-o", "json", "testdata/config/valid/etcd-tls.yaml")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.errOut)
		}
		testutil.Golden(t, filepath.Join(testutil.RepoRoot(t), "testdata/config/golden", "show-etcd-tls.json.golden"), []byte(r.out))
		if r := run(t, nil, "config", "show", "a.yaml", "b.yaml"); r.code != 2 {
			t.Errorf("two files: exit %d, want 2", r.code)
		}
	})
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

// TestDiff: config diff groups the changed keys by reload tier, says what a
// watcher replacement does to the fleet view, never prints a value, and
// exits 1 when a reload would refuse NEW.
func TestDiff(t *testing.T) {
	dir := t.TempDir()
	old := `server: {bind_address: "0.0.0.0:8080"}
admin: {token: "old-admin-secret"}
backends:
  - {name: fe, url: "http://fe:8000", api_key: "old-backend-secret"}
  - {name: fe-canary, url: "http://fe-canary:8000"}
disaggregated_serving: {enabled: true}
dynamo:
  enabled: true
  discovery:
    etcd:
      endpoints: ["http://etcd:2379"]
      namespaces: ["prod", "canary"]
      auth: {username: u, password: "old-etcd-secret"}
  load: {max_staleness: 3s, direct_allow_cidrs: ["10.0.0.0/8"]}
  shim:
    pools:
      - {namespace: prod, backends: [fe]}
      - {namespace: canary, backends: [fe-canary]}
`
	next := strings.NewReplacer(`"0.0.0.0:8080"`, `"0.0.0.0:9090"`, "old-admin-secret", "new-admin-secret",
		"old-backend-secret", "new-backend-secret", "old-etcd-secret", "new-etcd-secret", "max_staleness: 3s", "max_staleness: 5s",
		`["10.0.0.0/8"]`, `["10.0.0.0/8", "172.16.0.0/12"]`, `namespaces: ["prod", "canary"]`, `namespaces: ["prod"]`,
		"      - {namespace: canary, backends: [fe-canary]}\n", "").Replace(old)
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldFile, newFile := write("old.yaml", old), write("new.yaml", next)

	r := run(t, nil, "config", "diff", oldFile, newFile)
	if r.code != 0 {
		t.Fatalf("exit %d: %s %s", r.code, r.out, r.errOut)
	}
	want := `immediate:
  admin.token
  backends
  dynamo.load.max_staleness
  dynamo.shim.pools
subscription_restart:
  dynamo.load.direct_allow_cidrs
watcher_restart (reason connection: the fleet view is emptied until the new watcher's first resync):
  dynamo.discovery.etcd.namespaces
  dynamo.discovery.etcd.auth.password
rebind:
  server.bind_address
`
	if r.out != want {
		t.Errorf("text:\n%s\nwant:\n%s", r.out, want)
	}
	for _, secret := range []string{"old-admin-secret", "new-admin-secret", "backend-secret", "etcd-secret"} {
		if strings.Contains(r.out+r.errOut, secret) {
			t.Errorf("a secret is printed: %s", secret)
		}
	}

	// Namespaces alone: pruned.
	pruned := strings.NewReplacer(`namespaces: ["prod", "canary"]`, `namespaces: ["prod"]`,
		"      - {namespace: canary, backends: [fe-canary]}\n", "").Replace(old)
	r = run(t, nil, "config", "diff", "--format", "json", oldFile, write("pruned.yaml", pruned))
	var got struct {
		Applied bool
		Tiers   []struct {
			Tier string
			Keys []string
		}
		Watcher struct {
			Reason string
			Prunes []string
		}
	}
	if err := json.Unmarshal([]byte(r.out), &got); err != nil || r.code != 0 {
		t.Fatalf("json: %d %v %s", r.code, err, r.out)
	}
	if !got.Applied || got.Watcher.Reason != "namespaces" || len(got.Watcher.Prunes) != 1 || got.Watcher.Prunes[0] != "canary" {
		t.Errorf("pruning: %s", r.out)
	}

	// Same file: nothing to do.
	if r := run(t, nil, "config", "diff", oldFile, oldFile); r.code != 0 || !strings.Contains(r.out, "No changes") {
		t.Errorf("same file: %d %s", r.code, r.out)
	}
	// A NEW with errors would be refused.
	bad := write("bad.yaml", strings.Replace(old, "max_staleness: 3s", "max_staleness: 1ms", 1))
	if r := run(t, nil, "config", "diff", oldFile, bad); r.code != 1 || !strings.Contains(r.out, "A reload would refuse NEW") || !strings.Contains(r.out, "max_staleness") {
		t.Errorf("invalid NEW: %d %s %s", r.code, r.out, r.errOut)
	}
	if r := run(t, nil, "config", "diff", oldFile, filepath.Join(dir, "missing.yaml")); r.code != 2 {
		t.Errorf("missing NEW: %d", r.code)
	}
}

// TestShowValidates: what config show prints of a valid file (secrets
// masked, every default written out) is itself a valid file but for its
// masked secrets, which a file may not hold (an import of the admin API's
// export fills them from the running configuration): a server on the
// event bus's default port with the bus off among them.
func TestShowValidates(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	files, err := filepath.Glob(filepath.Join(testutil.RepoRoot(t), "testdata/config/valid/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no valid configurations: %v", err)
	}
	dir := t.TempDir()
	busPort := filepath.Join(dir, "bus-port.yaml")
	if err := os.WriteFile(busPort, []byte("server: {bind_address: \"0.0.0.0:7443\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ETCD_PASSWORD": "s3cret"}
	for _, file := range append(files, busPort) {
		r := run(t, env, "config", "show", file)
		if r.code != 0 {
			t.Errorf("%s: show: exit %d: %s", filepath.Base(file), r.code, r.errOut)
			continue
		}
		shown := filepath.Join(dir, "shown-"+filepath.Base(file))
		if err := os.WriteFile(shown, []byte(r.out), 0o600); err != nil {
			t.Fatal(err)
		}
		r = run(t, env, "config", "validate", shown)
		for _, line := range strings.Split(r.out+r.errOut, "\n") {
			if strings.Contains(line, ": error: ") && !strings.Contains(line, "is how secrets are shown") {
				t.Errorf("%s: the shown file does not validate: exit %d\n%s%s", filepath.Base(file), r.code, r.out, r.errOut)
				break
			}
		}
	}
}

// A path that is no regular file is refused with its path named once, and
// a FIFO's open does not wait for a writer (which would hold the command
// past any signal).
func TestValidateNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "config.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan result, 1)
	go func() { done <- run(t, nil, "config", "validate", fifo) }()
	select {
	case r := <-done:
		if r.code != 2 || !strings.Contains(r.out, "not a regular file") {
			t.Errorf("FIFO: exit %d, stdout %q", r.code, r.out)
		}
	case <-time.After(10 * time.Second):
		// Unblock the open so that the goroutine ends.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			_ = f.Close()
		}
		t.Fatal("validating a FIFO waited for a writer")
	}
	r := run(t, nil, "config", "validate", dir)
	if r.code != 2 || strings.Count(r.out, dir) != 1 || !strings.Contains(r.out, "is a directory") {
		t.Errorf("directory: exit %d, stdout %q", r.code, r.out)
	}
}
