package discover_test

import (
	"os"
	"testing"
)

// TestMain empties, once before any test runs, the variables the commands
// read from the process environment: a configuration file named by
// CONTINUUM_CONFIG, and the in-cluster Kubernetes service (never in-cluster
// here). The tests run in parallel, which t.Setenv forbids.
func TestMain(m *testing.M) {
	for _, k := range []string{"CONTINUUM_CONFIG", "KUBERNETES_SERVICE_HOST"} {
		if err := os.Setenv(k, ""); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
