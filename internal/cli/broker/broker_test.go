package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli/broker"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/testutil/kubefake"
	"github.com/continuum-router/continuum/internal/zmtp"
)

func factory() *cmdutil.Factory {
	ios, _, _, _ := iostreams.Test()
	return &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv, ConfigPath: func() string { return "" },
		Logger: func() (*slog.Logger, error) { return slog.New(slog.DiscardHandler), nil }}
}

// TestNewCmdBroker: flags only.
func TestNewCmdBroker(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args    string
		wantErr string
		check   func(*broker.Options) bool
	}{
		{args: "--router https://r:7443 --id b.dynamo --token-file tok --dynamo-namespace a --dynamo-namespace b --source file --file-root /x --metrics-address 127.0.0.1:0 --drain-grace 3s",
			check: func(o *broker.Options) bool {
				return o.Bus.Router == "https://r:7443" && o.Bus.ID == "b.dynamo" && o.Bus.TokenFile == "tok" &&
					strings.Join(o.Discovery.DynamoNamespaces, ",") == "a,b" && o.Discovery.FileRoot == "/x" &&
					o.Bus.MetricsAddress == "127.0.0.1:0" && o.Bus.DrainGrace == 3*time.Second
			}},
		{args: "--router https://r:7443 --id b --cert c.pem --key k.pem --ca-file ca.pem --dynamo-namespace a",
			check: func(o *broker.Options) bool {
				return o.Bus.CertFile == "c.pem" && o.Bus.KeyFile == "k.pem" && o.Bus.CAFile == "ca.pem" && o.Bus.MetricsAddress == ":9091"
			}},
		{args: "--router https://r:7443 --id b --dynamo-namespace a", wantErr: "no credential"},
		{args: "--router https://r:7443 --id b --cert c.pem --dynamo-namespace a", wantErr: "--cert and --key go together"},
		{args: "--router https://r:7443 --id b --token-file t", wantErr: "--dynamo-namespace"},
		{args: "--id b --token-file t --dynamo-namespace a", wantErr: "router"},
	}
	for _, c := range cases {
		var got *broker.Options
		cmd := broker.NewCmdBroker(factory(), func(_ context.Context, o *broker.Options) error { got = o; return nil })
		args := strings.Fields(c.args)
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: err = %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || got == nil || !c.check(got) {
			t.Errorf("%s: err %v, options %+v", c.args, err, got)
		}
	}
}

// TestRun: the broker follows a file store fleet, opens a session with a
// real listener, relays the advertised publisher, refuses another target
// (target_not_advertised), serves its metrics, and drains when its
// context ends.
func TestRun(t *testing.T) {
	t.Parallel()
	pki := testutil.NewTestPKI(t)
	bus := testutil.StartBus(t, pki, eventbus.Entry{ID: "broker-a.dynamo", Role: eventbus.RoleBroker, TokenHash: eventbus.HashToken("tok"), Namespaces: []string{"dynamo"}})

	root := t.TempDir()
	pub := testutil.StartGoPublisher(t)
	testutil.WriteFileWorker(t, root, testutil.FileWorker{InstanceID: 0x10, LoadPublisherID: 0x11, LoadEndpoint: pub.Endpoint})
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsAddr := make(chan string, 1)
	o := &broker.Options{IO: factory().IOStreams, Env: os.LookupEnv, Logger: factory().Logger, Timeout: 10 * time.Second,
		Bus: cmdutil.BusClientFlags{Router: "https://" + bus.LocalAddr().String(), ID: "broker-a.dynamo", TokenFile: tokenFile,
			CAFile: pki.CAFile, MetricsAddress: "127.0.0.1:0", DrainGrace: 5 * time.Second},
		Ready: func(a string) { metricsAddr <- a }}
	// The discovery flags as the command parses them: --dynamo-namespace
	// declares the namespaces whatever the source.
	var parsed *broker.Options
	cmd := broker.NewCmdBroker(factory(), func(_ context.Context, po *broker.Options) error { parsed = po; return nil })
	cmd.SetArgs([]string{"--router", o.Bus.Router, "--id", o.Bus.ID, "--token-file", tokenFile,
		"--source", "file", "--file-root", root, "--dynamo-namespace", "dynamo"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	o.Discovery = parsed.Discovery
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- broker.Run(ctx, o) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	testutil.Eventually(t, 15*time.Second, "the broker's session", func() bool { return bus.Covers("dynamo") })

	host, port, _ := zmtp.SplitTCPEndpoint(pub.Endpoint)
	p, _ := strconv.Atoi(port)
	var re *eventbus.RefusedError
	if _, err := bus.OpenStream(t.Context(), eventbus.Target{Namespace: "dynamo", Host: host, Port: p + 1, Topic: "kv_metrics"}); !errors.As(err, &re) || re.Code != eventbus.CodeTargetNotAdvertised {
		t.Errorf("unadvertised port: %v", err)
	}
	if _, err := bus.OpenStream(t.Context(), eventbus.Target{Namespace: "dynamo", Host: host, Port: p, Topic: "kv-events"}); !errors.As(err, &re) || re.Code != eventbus.CodeTargetNotAdvertised {
		t.Errorf("unadvertised topic: %v", err)
	}
	s, err := bus.OpenStream(t.Context(), eventbus.Target{Namespace: "dynamo", Host: host, Port: p, Topic: "kv_metrics"})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer scancel()
	if _, err := zmtp.Subscribe(sctx, s, []byte("kv_metrics"), zmtp.LimitsKVMetrics); err != nil {
		t.Fatalf("ZMTP over the broker: %v", err)
	}
	_ = s.Close()

	addr := <-metricsAddr
	testutil.Eventually(t, 10*time.Second, "the broker's metrics", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m := string(body)
		return strings.Contains(m, "continuum_broker_session_connected 1") && strings.Contains(m, "continuum_broker_advertised_publishers 1") &&
			strings.Contains(m, `continuum_broker_streams_total{result="target_not_advertised"} 2`) &&
			strings.Contains(m, `continuum_broker_streams_total{result="opened"} 1`)
	})

	cancel()
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the broker did not drain")
	}
	// The router learns of the session's end from its control stream,
	// which may reach it just after Run returned.
	testutil.Eventually(t, 5*time.Second, "a stopped broker's namespace uncovered", func() bool { return !bus.Covers("dynamo") })
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("metrics still served after Run returned")
	}
}

// TestRunKubernetes: a broker following the fleet through the Kubernetes
// metadata source (DynamoWorkerMetadata and EndpointSlices, served by a
// fake API server over real HTTP) relays a publisher its metadata
// advertises, refuses a target no metadata advertises
// (target_not_advertised), and refuses the publisher too once its
// DynamoWorkerMetadata is deleted.
func TestRunKubernetes(t *testing.T) {
	t.Parallel()
	const ns, podNS, prefill = "dynamo-qwen3", "dynamo", "vllm-disagg-vllmprefillworker-7c9d6f5b8-k2x4p"
	pki := testutil.NewTestPKI(t)
	bus := testutil.StartBus(t, pki, eventbus.Entry{ID: "broker-a.dynamo", Role: eventbus.RoleBroker, TokenHash: eventbus.HashToken("tok"), Namespaces: []string{ns}})

	// The fleet fixture, with the prefill worker's kv_metrics publisher
	// moved to a real one on loopback.
	pub := testutil.StartGoPublisher(t)
	fake := kubefake.Start(t)
	var dwms, slices []kubefake.Object
	for name, v := range map[string]*[]kubefake.Object{"dynamoworkermetadatas.json": &dwms, "endpointslices.json": &slices} {
		data, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "testdata/kube/fleet", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatal(err)
		}
	}
	moved := false
	for _, d := range dwms {
		if d["metadata"].(kubefake.Object)["name"] == prefill {
			for _, ch := range d["spec"].(kubefake.Object)["data"].(kubefake.Object)["event_channels"].(kubefake.Object) {
				ch.(kubefake.Object)["transport"].(kubefake.Object)["config"].(kubefake.Object)["endpoint"] = pub.Endpoint
				moved = true
			}
		}
		fake.Apply(kubefake.DWMs, d)
	}
	for _, s := range slices {
		fake.Apply(kubefake.EndpointSlices, s)
	}
	if !moved {
		t.Fatal("the fixture has no prefill publisher")
	}

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := &broker.Options{IO: factory().IOStreams, Env: os.LookupEnv, Logger: factory().Logger, Timeout: 10 * time.Second,
		Bus: cmdutil.BusClientFlags{Router: "https://" + bus.LocalAddr().String(), ID: "broker-a.dynamo", TokenFile: tokenFile,
			CAFile: pki.CAFile, MetricsAddress: "127.0.0.1:0", DrainGrace: 5 * time.Second}}
	o.Discovery.Source, o.Discovery.Kubeconfig, o.Discovery.KubeNamespace = "kubernetes", fake.WriteKubeconfig(t), podNS
	o.Discovery.DynamoNamespaces = []string{ns}
	o.Discovery.SetChanged(true, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- broker.Run(ctx, o) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, 15*time.Second, "the broker's session", func() bool { return bus.Covers(ns) })

	host, port, _ := zmtp.SplitTCPEndpoint(pub.Endpoint)
	p, _ := strconv.Atoi(port)
	advertised := eventbus.Target{Namespace: ns, Host: host, Port: p, Topic: "kv_metrics"}
	s, err := bus.OpenStream(t.Context(), advertised)
	if err != nil {
		t.Fatalf("the advertised publisher: %v", err)
	}
	sctx, scancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer scancel()
	if _, err := zmtp.Subscribe(sctx, s, []byte("kv_metrics"), zmtp.LimitsKVMetrics); err != nil {
		t.Fatalf("ZMTP over the broker: %v", err)
	}
	_ = s.Close()

	var re *eventbus.RefusedError
	for _, tg := range []eventbus.Target{
		{Namespace: ns, Host: host, Port: p, Topic: "kv-events"},
		{Namespace: ns, Host: "10.42.1.18", Port: 20080, Topic: "kv_metrics"},
	} {
		if _, err := bus.OpenStream(t.Context(), tg); !errors.As(err, &re) || re.Code != eventbus.CodeTargetNotAdvertised {
			t.Errorf("%+v, in no DynamoWorkerMetadata: %v", tg, err)
		}
	}

	fake.Delete(kubefake.DWMs, podNS, prefill)
	testutil.Eventually(t, 15*time.Second, "the deleted worker's publisher refused", func() bool {
		s, err := bus.OpenStream(t.Context(), advertised)
		if err == nil {
			_ = s.Close()
			return false
		}
		return errors.As(err, &re) && re.Code == eventbus.CodeTargetNotAdvertised
	})
}
