package sources_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/testutil"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/sources"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// TestOpenFileStore: an empty file store is a complete read (generation 1)
// and Close ends the watcher.
func TestOpenFileStore(t *testing.T) {
	t.Parallel()
	d := config.Default().Dynamo.Discovery
	d.Source, d.File.Root = config.SourceFile, t.TempDir()
	fl, err := sources.Open(t.Context(), &d, kube.ClientOptions{}, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	if fl.Source != config.SourceFile || fl.Generation == 0 || fl.Registry.Snapshot().Workers.Len() != 0 {
		t.Errorf("fleet %+v", fl)
	}
}

// TestOpenUnreachable: a source that never completes a read fails after
// the timeout with the reason its last pass ended; an ended context wins.
func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	d := config.Default().Dynamo.Discovery
	d.Source, d.Etcd.Endpoints = config.SourceEtcd, []string{"http://" + addr}
	_, err = sources.Open(t.Context(), &d, kube.ClientOptions{}, nil, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not reachable within 300ms") {
		t.Errorf("err = %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := sources.Open(ctx, &d, kube.ClientOptions{}, nil, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("after cancel: err = %v", err)
	}
}

// TestOpenMisconfigured: a mistake no retry mends (a file store root that
// is a file, a kubeconfig that is not there) is reported at once, as a
// discovery.ConfigError, not after the timeout as an unreachable source.
func TestOpenMisconfigured(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "root")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fileStore := config.Default().Dynamo.Discovery
	fileStore.Source, fileStore.File.Root = config.SourceFile, file
	pods := config.Default().Dynamo.Discovery
	pods.Source = config.SourceKubernetesPods
	for _, tc := range []struct {
		name   string
		d      *config.Discovery
		client kube.ClientOptions
		want   string
	}{
		{"file root a file", &fileStore, kube.ClientOptions{}, "not a directory"},
		{"kubeconfig missing", &pods, kube.ClientOptions{Kubeconfig: filepath.Join(t.TempDir(), "absent")}, "kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A timeout no test waits out: the error must come first.
			_, err := sources.Open(t.Context(), tc.d, tc.client, nil, 10*time.Minute)
			var ce *discovery.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "not reachable within") {
				t.Errorf("err = %v, want a configuration error about %s", err, tc.want)
			}
		})
	}
}

// TestOpenInClusterWithoutToken: a process in a pod (the service's
// variables set) whose service account token is not mounted, and that has
// no kubeconfig either, has a configuration error too, reported at once;
// with a kubeconfig, that serves.
func TestOpenInClusterWithoutToken(t *testing.T) {
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); err == nil {
		t.Skip("this process runs in a pod with a service account token")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	t.Setenv("KUBECONFIG", kubeconfig) // not there yet
	pods := config.Default().Dynamo.Discovery
	pods.Source = config.SourceKubernetesPods
	// Were it taken for an unreachable source, Open would retry for 20 s.
	_, err := sources.Open(t.Context(), &pods, kube.ClientOptions{}, nil, 20*time.Second)
	var ce *discovery.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "in-cluster credentials") || !strings.Contains(err.Error(), "no kubeconfig") {
		t.Errorf("err = %v, want a configuration error about the in-cluster credentials and the kubeconfig", err)
	}

	cfg := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://10.0.0.9:6443\"}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := kube.RESTConfig(kube.ClientOptions{})
	if err != nil || rc.Host != "https://10.0.0.9:6443" {
		t.Errorf("with a kubeconfig: %v, %v; want its cluster", rc, err)
	}
}

// TestBackoffFloorAgrees: the floor the validator's warning promises for a
// zero initial backoff is the one the watcher applies.
func TestBackoffFloorAgrees(t *testing.T) {
	t.Parallel()
	if config.MinBackoffDelay != discovery.MinDelay {
		t.Errorf("config warns of %s, the watcher waits %s", config.MinBackoffDelay, discovery.MinDelay)
	}
}

// TestOpenSilentWithinTimeout: against an etcd endpoint that accepts
// connections and never answers, Open gives up at its timeout, not a
// diagnosis later, and still says what is wrong with the endpoint: a
// command's --timeout bounds the whole wait.
func TestOpenSilentWithinTimeout(t *testing.T) {
	t.Parallel()
	d := config.Default().Dynamo.Discovery
	d.Source, d.Etcd.Endpoints = config.SourceEtcd, []string{"http://" + testutil.SilentListener(t)}
	const timeout = time.Second
	start := time.Now()
	_, err := sources.Open(t.Context(), &d, kube.ClientOptions{}, nil, timeout)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "not reachable within 1s") || !strings.Contains(err.Error(), "accepts connections but gave no answer") {
		t.Errorf("err = %v", err)
	}
	// The slack is the scheduler's, not a diagnosis's (which took two
	// seconds more).
	if took > timeout+500*time.Millisecond {
		t.Errorf("Open took %s with a timeout of %s", took, timeout)
	}
}
