package routerd_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/kube"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/sources"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/eventbus/agent"
	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/testutil"
)

const busToken = "bus-token-of-broker-a"

// busYAML is configYAML with the broker transport and the event bus on
// loopback (transport and enabled as given).
func busYAML(backend, root string, pki *testutil.TestPKI, transport string, enabled bool, brokers string) string {
	if brokers == "" {
		brokers = fmt.Sprintf(`      - {id: broker-a.dynamo, token_hash: %q, namespaces: [a]}`, eventbus.HashToken(busToken))
	}
	return configYAML(backend, root, fmt.Sprintf(`  load:
    transport: %s
  event_bus:
    enabled: %v
    listen: "127.0.0.1:0"
    tls: {cert: %q, key: %q}
    heartbeat_interval: 1s
    brokers:
%s
`, transport, enabled, pki.ServerCert, pki.ServerKey, brokers))
}

// workersView is GET /admin/dynamo/workers.
func (f *reloadFixture) workersView() admin.WorkersResponse {
	f.t.Helper()
	code, body := f.adminDo(http.MethodGet, "/admin/dynamo/workers", "")
	if code != http.StatusOK {
		f.t.Fatalf("workers: %d %s", code, body)
	}
	var v admin.WorkersResponse
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		f.t.Fatal(err)
	}
	return v
}

// loadView is GET /admin/dynamo/load.
func (f *reloadFixture) loadView() admin.LoadResponse {
	f.t.Helper()
	code, body := f.adminDo(http.MethodGet, "/admin/dynamo/load", "")
	if code != http.StatusOK {
		f.t.Fatalf("load: %d %s", code, body)
	}
	var v admin.LoadResponse
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		f.t.Fatal(err)
	}
	return v
}

// series reads one gauge or counter series by its labels ("" when the
// family has none); ok is false when the series does not exist.
func series(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	for _, mf := range gather(t, reg) {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return value(m), true
		}
	}
	return 0, false
}

func value(m *dto.Metric) float64 {
	if m.GetGauge() != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}

// TestBrokerTransport: the daemon owns the event bus listener; with
// transport: broker its subscriptions wait (pending, uncovered) until a
// broker covers their namespace, then run through it and fill the load
// store; broker_coverage and the broker gauges say so. A reload switches
// the transport to direct without dropping the samples, removes the
// broker's credential (its session ends and it is told
// credential_revoked), and turns the listener off.
func TestBrokerTransport(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	pki := testutil.NewTestPKI(t)
	var pubs []*testutil.GoPublisher
	for i := range 2 {
		pub := testutil.StartGoPublisher(t)
		pubs = append(pubs, pub)
		testutil.WriteFileWorker(t, root, testutil.FileWorker{Namespace: "a", InstanceID: uint64(0x100 + i),
			LoadPublisherID: uint64(0x200 + i), LoadEndpoint: pub.Endpoint})
	}
	f := startReload(t, busYAML("http://127.0.0.1:1", root, pki, "broker", true, ""))
	testutil.Eventually(t, 10*time.Second, "the event bus listening", func() bool { return f.d.BusAddr() != "" })
	if !routerd.CoverageRunning(f.d) {
		t.Error("no broker coverage reporter with transport broker")
	}

	// Pending: nothing covers namespace a.
	testutil.Eventually(t, 10*time.Second, "pending subscriptions", func() bool {
		v := f.workersView()
		if len(v.Subscriptions) != 2 || len(v.BrokerCoverage) != 1 {
			return false
		}
		for _, s := range v.Subscriptions {
			if s.State != "pending" || s.Transport != "broker" {
				return false
			}
		}
		c := v.BrokerCoverage[0]
		return c.Namespace == "a" && !c.Covered && c.PendingSubscriptions == 2 && len(c.Brokers) == 0 && v.Signals.Load
	})
	testutil.Eventually(t, 10*time.Second, "the pending gauge", func() bool {
		v, ok := series(t, f.metrics, "continuum_dynamo_broker_pending_subscriptions", map[string]string{"family": "kv_metrics", "namespace": "a"})
		return ok && v == 2
	})

	// A broker that advertises what discovery advertises.
	fl, err := sources.Open(t.Context(), &config.Discovery{Source: config.SourceFile, File: config.FileStore{Root: root, Namespace: "a"}},
		kube.ClientOptions{}, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	pem, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	advertised := func(tg eventbus.Target) bool {
		return fl.Registry.Snapshot().Advertises(tg.Namespace, tg.Host, tg.Port, tg.Topic)
	}
	c, err := agent.New(agent.Options{Router: "https://" + f.d.BusAddr(), ID: "broker-a.dynamo", Role: eventbus.RoleBroker,
		Token: busToken, RootCAs: roots, Namespaces: []string{"a"}, Opener: &agent.Publishers{Namespaces: []string{"a"}, Advertised: advertised}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = c.Run(ctx) }()
	defer func() { cancel(); <-agentDone }()

	seq := uint64(0)
	publish := func() {
		seq++
		for i, pub := range pubs {
			dec := uint64(10*i + int(seq))
			_ = pub.Send(wire.EncodeEventMessage("kv_metrics", uint64(0x200+i), seq, uint64(time.Now().UnixMilli()),
				wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: uint64(0x100 + i), ActiveDecodeBlocks: &dec})))
		}
	}
	testutil.Eventually(t, 15*time.Second, "fresh load through the broker", func() bool {
		publish()
		v := f.workersView()
		for _, s := range v.Subscriptions {
			if s.State != "connected" || s.Transport != "broker" || s.Broker != "broker-a.dynamo" {
				return false
			}
		}
		fresh := 0
		for _, s := range f.loadView().Samples {
			if s.State == "fresh" {
				fresh++
			}
		}
		return fresh == 2 && len(v.BrokerCoverage) == 1 && v.BrokerCoverage[0].Covered && v.BrokerCoverage[0].PendingSubscriptions == 0
	})
	testutil.Eventually(t, 10*time.Second, "the broker gauges", func() bool {
		relayed, _ := series(t, f.metrics, "continuum_dynamo_broker_subscriptions", map[string]string{"family": "kv_metrics", "broker": "broker-a.dynamo"})
		covering, _ := series(t, f.metrics, "continuum_dynamo_broker_namespace_sessions", map[string]string{"namespace": "a"})
		pending, _ := series(t, f.metrics, "continuum_dynamo_broker_pending_subscriptions", map[string]string{"family": "kv_metrics", "namespace": "a"})
		sessions, _ := series(t, f.metrics, "continuum_dynamo_event_bus_sessions", nil)
		return relayed == 2 && covering == 1 && pending == 0 && sessions == 1
	})
	// Settled, with samples still flowing: the gauges are not counted
	// again until something they count changes (a debounce, not a ticker).
	// Settled: no count for twice the debounce.
	last, quiet := routerd.CoverageCounts(f.d), time.Now()
	testutil.Eventually(t, 10*time.Second, "the coverage counts settled", func() bool {
		publish()
		if n := routerd.CoverageCounts(f.d); n != last {
			last, quiet = n, time.Now()
		}
		return time.Since(quiet) > 2*routerd.CoverageDebounce
	})
	before := routerd.CoverageCounts(f.d)
	for range 20 {
		publish()
		time.Sleep(50 * time.Millisecond)
	}
	if n := routerd.CoverageCounts(f.d) - before; n != 0 {
		t.Errorf("the coverage gauges counted %d times in a second of steady load, want 0", n)
	}

	// The transport switches live; the samples stay.
	f.write(busYAML("http://127.0.0.1:1", root, pki, "direct", true, ""))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied {
		t.Fatalf("reload %+v", r)
	}
	if n := len(f.loadView().Samples); n != 2 {
		t.Errorf("%d samples after the switch, want 2 kept", n)
	}
	testutil.Eventually(t, 15*time.Second, "direct subscriptions", func() bool {
		publish()
		subs := f.workersView().Subscriptions
		if len(subs) != 2 {
			return false
		}
		for _, s := range subs {
			if s.State != "connected" || s.Transport != "direct" || s.Broker != "" {
				return false
			}
		}
		return true
	})
	if v := f.workersView(); v.BrokerCoverage != nil {
		t.Errorf("broker_coverage with transport direct: %+v", v.BrokerCoverage)
	}
	// Nothing to report with transport direct: no reporter runs.
	if routerd.CoverageRunning(f.d) {
		t.Error("the broker coverage reporter runs with transport direct")
	}
	testutil.Eventually(t, 10*time.Second, "broker gauges gone", func() bool {
		_, ok := series(t, f.metrics, "continuum_dynamo_broker_subscriptions", map[string]string{"family": "kv_metrics", "broker": "broker-a.dynamo"})
		return !ok
	})

	// The broker's credential removed: its session ends, and its holder is
	// told credential_revoked when it comes back.
	other := fmt.Sprintf(`      - {id: broker-b.dynamo, token_hash: %q, namespaces: [a]}`, eventbus.HashToken("another"))
	f.write(busYAML("http://127.0.0.1:1", root, pki, "direct", true, other))
	if r := f.waitReload(2); r.Result != admin.ReloadApplied {
		t.Fatalf("reload %+v", r)
	}
	testutil.Eventually(t, 15*time.Second, "credential_revoked", func() bool {
		v, _ := series(t, f.metrics, "continuum_dynamo_event_bus_refusals_total", map[string]string{"code": "credential_revoked"})
		return v > 0 && f.d.BusAddr() != ""
	})

	// An address in use (here the server's own, which the configuration
	// cannot know it binds) is applied: the listener closes, logs that it
	// failed to start and retries.
	f.write(strings.Replace(busYAML("http://127.0.0.1:1", root, pki, "direct", true, other), `listen: "127.0.0.1:0"`, fmt.Sprintf("listen: %q", f.d.Addr()), 1))
	if r := f.waitReload(3); r.Result != admin.ReloadApplied {
		t.Fatalf("an address in use: %+v", r)
	}
	testutil.Eventually(t, 10*time.Second, "the listener retrying", func() bool { return f.d.BusAddr() == "" })
	if !routerd.BusRunning(f.d) {
		t.Fatal("the listener gave up on an address in use instead of retrying")
	}

	// Off.
	f.write(busYAML("http://127.0.0.1:1", root, pki, "direct", false, other))
	if r := f.waitReload(4); r.Result != admin.ReloadApplied {
		t.Fatalf("reload %+v", r)
	}
	// Not listening already (the address is in use): what must stop is
	// the listener's retrying, within the reload's stop grace.
	if routerd.BusRunning(f.d) {
		t.Error("the listener still retries after the bus was turned off")
	}
	if strings.Contains(f.logs.String(), "did not stop within its grace") {
		t.Error("the retrying listener outlived its stop grace")
	}
	if f.d.BusAddr() != "" {
		t.Error("the listener listens after the bus was turned off")
	}
}

// TestBusTurnedOffWithoutTLS: a reload that turns the event bus off needs
// nothing a listener needs (enabled: false with no tls block, the default
// listen address): it is applied and the listener closes. Turning the bus
// on again starts it with the settings of that reload.
func TestBusTurnedOffWithoutTLS(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	pki := testutil.NewTestPKI(t)
	f := startReload(t, busYAML("http://127.0.0.1:1", root, pki, "direct", true, ""))
	testutil.Eventually(t, 10*time.Second, "the event bus listening", func() bool { return f.d.BusAddr() != "" })
	addr := f.d.BusAddr()

	f.write(configYAML("http://127.0.0.1:1", root, "  event_bus:\n    enabled: false\n"))
	if r := f.waitReload(1); r.Result != admin.ReloadApplied {
		t.Fatalf("turning the bus off: %+v", r)
	}
	testutil.Eventually(t, 10*time.Second, "the listener closed", func() bool {
		if f.d.BusAddr() != "" {
			return false
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	})

	f.write(busYAML("http://127.0.0.1:1", root, pki, "direct", true, ""))
	if r := f.waitReload(2); r.Result != admin.ReloadApplied {
		t.Fatalf("turning the bus on again: %+v", r)
	}
	testutil.Eventually(t, 10*time.Second, "the event bus listening again", func() bool { return f.d.BusAddr() != "" })
}

// TestBusBoundsAgree: the configuration judges the event bus's settings
// by bounds it holds apart from the event bus (which it does not import);
// they must be the same, or config validate would pass a listener the
// event bus refuses, or a welcome its own clients refuse.
func TestBusBoundsAgree(t *testing.T) {
	t.Parallel()
	if config.MaxStreamsPerSession != eventbus.StreamsPerSessionLimit || config.MaxBusInterval != eventbus.MaxWelcomeInterval ||
		config.MinStreamBudgetBytes != eventbus.MinSessionBudgetPerStream {
		t.Errorf("config %d / %v / %d, eventbus %d / %v / %d", config.MaxStreamsPerSession, config.MaxBusInterval, config.MinStreamBudgetBytes,
			eventbus.StreamsPerSessionLimit, eventbus.MaxWelcomeInterval, eventbus.MinSessionBudgetPerStream)
	}
}
