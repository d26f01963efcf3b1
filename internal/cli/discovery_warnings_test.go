package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiscoveryWarningsAsJSON: under --log-format json every line a command
// writes to stderr is a JSON line (a Kubernetes log pipeline reads them), the
// warnings about discovery settings of the commands that take discovery
// flags (broker, the in-cluster Deployment, and discover) included.
func TestDiscoveryWarningsAsJSON(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("HOME", t.TempDir())
	t.Setenv("ETCD_PASSWORD", "x")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		// An in-cluster broker reading etcd over http:// with a user.
		{"--log-format", "json", "broker", "--router", "https://127.0.0.1:1", "--id", "b1", "--token-file", tokenFile,
			"--etcd-endpoints", "http://127.0.0.1:1", "--etcd-username", "u", "--dynamo-namespace", "x", "--timeout", "1s", "--metrics-address", ""},
		{"--log-format", "json", "discover", "--source", "kubernetes_pods", "--kube-namespace", "d", "--dynamo-namespace", "x", "--model", "m", "--timeout", "2s"},
	} {
		code, _, errOut := runCLIWithEnv(args...)
		if code == 0 {
			t.Fatalf("%v: exit 0", args)
		}
		for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
			var v map[string]any
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Errorf("%s: stderr line is not JSON under --log-format json: %q", args[2], line)
			}
		}
	}
}
