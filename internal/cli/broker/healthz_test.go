package broker_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli/broker"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestHealthzServedWhileDiscoverySeeds: the deployed broker's liveness and
// readiness probes GET /healthz on --metrics-address every 10 s, failing
// after 3 misses and with no initial delay (scripts/deploy: event-broker),
// while its discovery source may take the whole seed timeout (30 s) for
// its first complete read. /healthz must answer during that
// read, or the kubelet kills a broker whose fleet is slow to list before it
// ever seeds.
func TestHealthzServedWhileDiscoverySeeds(t *testing.T) {
	t.Parallel()
	// An "etcd" that accepts and never answers: the seed waits its timeout.
	silent := testutil.SilentListener(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var parsed *broker.Options
	cmd := broker.NewCmdBroker(factory(), func(_ context.Context, po *broker.Options) error { parsed = po; return nil })
	cmd.SetArgs([]string{"--router", "https://127.0.0.1:1", "--id", "broker-a.dynamo", "--token-file", tokenFile,
		"--source", "etcd", "--etcd-endpoints", "http://" + silent, "--dynamo-namespace", "dynamo",
		"--metrics-address", "127.0.0.1:0", "--timeout", "8s"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	bound := make(chan string, 1)
	parsed.Ready = func(a string) { bound <- a }
	parsed.Logger = factory().Logger
	parsed.Env = os.LookupEnv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- broker.Run(ctx, parsed) }()
	defer func() { cancel(); <-done }()

	select {
	case addr := <-bound:
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("/healthz: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/healthz: %d", resp.StatusCode)
		}
	case err := <-done:
		done <- err
		t.Fatalf("Run returned before serving /healthz: %v", err)
	case <-time.After(3 * time.Second):
		t.Fatal("/healthz not served 3 s into the discovery seed: the probes (10 s period, 3 failures, no initial delay) kill the broker before a 30 s seed completes")
	}
}
