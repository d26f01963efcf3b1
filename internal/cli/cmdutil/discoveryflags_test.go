package cmdutil_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/config"
)

// resolve parses args as a discovery command's flags and resolves them
// over configFile with env.
func resolve(t *testing.T, configFile string, env map[string]string, args ...string) (user, password string, err error) {
	t.Helper()
	cfg, err := resolveConfig(t, configFile, env, args...)
	if err != nil {
		return "", "", err
	}
	if a := cfg.Dynamo.Discovery.Etcd.Auth; a != nil {
		return a.Username, a.Password, nil
	}
	return "", "", nil
}

// resolveConfig parses args as a discovery command's flags and resolves
// them over configFile with env.
func resolveConfig(t *testing.T, configFile string, env map[string]string, args ...string) (*config.Config, error) {
	t.Helper()
	var o cmdutil.DiscoveryFlags
	cmd := &cobra.Command{Use: "discover"}
	o.Register(cmd)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	o.Capture(cmd.Flags())
	return o.Resolve(configFile, func(name string) (string, bool) { v, ok := env[name]; return v, ok })
}

// TestPasswordEnv: --etcd-password-env is the password of the user given
// beside it or in --config; alone, or naming an unset variable, it is a
// usage error instead of an empty password.
func TestPasswordEnv(t *testing.T) {
	t.Parallel()
	endpoints := "--etcd-endpoints=https://etcd:2379"
	env := map[string]string{"ETCD_PASSWORD": "default", "PW": "secret"}
	check := func(name, wantUser, wantPassword string, user, password string, err error) {
		t.Helper()
		if err != nil || user != wantUser || password != wantPassword {
			t.Errorf("%s: user %q password %q, %v", name, user, password, err)
		}
	}
	refused := func(name, want string, err error) {
		t.Helper()
		var fe *cmdutil.FlagError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a usage error saying %q", name, err, want)
		}
	}
	u, p, err := resolve(t, "", env, endpoints, "--etcd-username=reader")
	check("the default variable", "reader", "default", u, p, err)
	u, p, err = resolve(t, "", env, endpoints, "--etcd-username=reader", "--etcd-password-env=PW")
	check("a named variable", "reader", "secret", u, p, err)
	_, _, err = resolve(t, "", env, endpoints, "--etcd-password-env=PW")
	refused("no user", "--etcd-username", err)
	_, _, err = resolve(t, "", env, endpoints, "--etcd-username=reader", "--etcd-password-env=NOPE")
	refused("an unset variable", "NOPE is not set", err)
	_, _, err = resolve(t, "", map[string]string{}, endpoints, "--etcd-username=reader")
	refused("the default variable unset", "ETCD_PASSWORD, which holds the password, is not set", err)

	file := filepath.Join(t.TempDir(), "continuum.yaml")
	doc := "dynamo:\n  discovery:\n    etcd:\n      endpoints: [\"https://etcd:2379\"]\n      auth: {username: fromfile, password: inline}\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	u, p, err = resolve(t, file, env)
	check("the file's user and password", "fromfile", "inline", u, p, err)
	u, p, err = resolve(t, file, env, "--etcd-password-env=PW")
	check("the file's user, the variable's password", "fromfile", "secret", u, p, err)
}

// TestModelFlagsExclusive: --model and --models together are a usage
// error, as model and models together are in a file, not one of them
// silently dropped.
func TestModelFlagsExclusive(t *testing.T) {
	t.Parallel()
	_, err := resolveConfig(t, "", nil, "--source=kubernetes_pods", "--dynamo-namespace=dynamo", "--model=m", "--models=decode=m2")
	var fe *cmdutil.FlagError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "mutually exclusive") {
		t.Fatalf("--model with --models: %v, want a usage error", err)
	}
}

// TestTLSFlagsOverFile: a TLS flag overrides its own field of the file's
// tls block, and the others stay the file's.
func TestTLSFlagsOverFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "continuum.yaml")
	doc := "dynamo:\n  discovery:\n    etcd:\n      endpoints: [\"https://etcd:2379\"]\n      tls: {ca_cert: /etc/etcd/ca.pem, client_cert: /etc/etcd/c.pem, client_key: /etc/etcd/k.pem}\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := resolveConfig(t, file, nil, "--etcd-server-name=etcd.internal", "--etcd-ca-cert=/tmp/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Dynamo.Discovery.Etcd.TLS
	if got == nil || got.ServerName != "etcd.internal" || got.CACert != "/tmp/ca.pem" || got.ClientCert != "/etc/etcd/c.pem" || got.ClientKey != "/etc/etcd/k.pem" {
		t.Fatalf("tls: %+v", got)
	}
}

// TestFlagsForAnotherSource: a flag of one source given for another is a
// usage error naming both, not ignored (the fleet read would be another
// than the one asked for).
func TestFlagsForAnotherSource(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "continuum.yaml")
	if err := os.WriteFile(file, []byte("dynamo:\n  discovery:\n    source: file\n    file: {root: /tmp}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file string
		args []string
		want string // "" when accepted
	}{
		{"", []string{"--source=etcd", "--etcd-endpoints=http://e:2379", "--dynamo-namespace=dn"}, "--dynamo-namespace applies to source kubernetes or kubernetes_pods; --source is etcd; the Dynamo namespace in etcd or a file store is --namespace"},
		{"", []string{"--source=kubernetes", "--namespace=x"}, "--namespace applies to source etcd or file; --source is kubernetes; a Kubernetes fleet's Dynamo namespace is --dynamo-namespace"},
		{"", []string{"--source=kubernetes", "--dynamo-namespace=dn", "--model=m"}, "--model applies to source kubernetes_pods"},
		{"", []string{"--etcd-endpoints=http://e:2379", "--file-root=/tmp"}, "--file-root applies to source file; the source (from --config, else the default) is etcd"},
		{file, []string{"--etcd-endpoints=http://e:2379"}, "--etcd-endpoints applies to source etcd; the source (from --config, else the default) is file"},
		{file, []string{"--namespace=a", "--file-root=/var"}, ""},
		{"", []string{"--source=kubernetes_pods", "--dynamo-namespace=dn", "--kube-namespace=k", "--model=m", "--kubeconfig=/nonexistent"}, ""},
		{"", []string{"--source=etcd", "--etcd-endpoints=https://e:2379", "--namespace=a", "--etcd-server-name=e"}, ""},
	} {
		_, err := resolveConfig(t, c.file, nil, c.args...)
		var fe *cmdutil.FlagError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (!errors.As(err, &fe) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want a usage error saying %q", c.args, err, c.want)
		}
	}
}
