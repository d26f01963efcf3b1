package etcd_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/etcd"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

func endpointValue(id uint64, component string) string {
	return fmt.Sprintf(`{"type":"Endpoint","namespace":"dynamo","component":%q,"endpoint":"generate","instance_id":%d,"transport":{"tcp":"10.0.0.4:31000"}}`, component, id)
}

func instanceKey(ns, component string, id uint64) string {
	return fmt.Sprintf("v1/instances/%s/%s/generate/%x", ns, component, id)
}

type harness struct {
	reg     *fleet.Registry
	metrics *telemetry.DiscoveryMetrics
	done    chan struct{}
}

func run(t *testing.T, src *etcd.Source) *harness {
	t.Helper()
	h := &harness{metrics: telemetry.NewDiscoveryMetrics(nil), done: make(chan struct{})}
	h.reg = fleet.NewRegistry(nil, discovery.ProblemCounter(h.metrics))
	w := &discovery.Watcher{Source: src, Registry: h.reg, Metrics: h.metrics,
		Backoff: discovery.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { defer close(h.done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-h.done })
	return h
}

func (h *harness) workers() map[string]*fleet.Worker {
	out := map[string]*fleet.Worker{}
	for w := range h.reg.Snapshot().Workers.All() {
		out[w.ID.Namespace+"/"+w.InstanceHex()] = w
	}
	return out
}

func put(t *testing.T, c *clientv3.Client, k, v string, opts ...clientv3.OpOption) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, k, v, opts...); err != nil {
		t.Fatal(err)
	}
}

func newSourceErr(cfg config.Etcd) (*etcd.Source, error) {
	return etcd.New(cfg, []string{"dynamo"}, nil)
}

func newSource(t *testing.T, cfg config.Etcd, namespaces ...string) *etcd.Source {
	t.Helper()
	if len(namespaces) == 0 {
		namespaces = []string{"dynamo"}
	}
	s, err := etcd.New(cfg, namespaces, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPutDeleteAndNamespaces(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	put(t, c, instanceKey("prod", "decode", 1), endpointValue(1, "decode"))
	put(t, c, instanceKey("other", "decode", 9), endpointValue(9, "decode"))
	h := run(t, newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}}, "prod", "canary"))
	testutil.Eventually(t, 10*time.Second, "seeded worker", func() bool { return h.workers()["prod/1"] != nil })
	// A Dynamo 1.2 channel key of a namespace named "namespace" lies under
	// prod's scoped prefix; it is not prod's, on the seed or on the watch.
	legacy := `{"type":"EventChannel","namespace":"namespace","component":"prod","topic":"kv_metrics","instance_id":44,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://127.0.0.1:5"}}}`
	put(t, c, "v1/event_channels/namespace/prod/kv_metrics/2c", legacy)
	put(t, c, instanceKey("canary", "prefill", 2), endpointValue(2, "prefill"))
	testutil.Eventually(t, 10*time.Second, "watched put", func() bool { return h.workers()["canary/2"] != nil })
	if snap := h.reg.Snapshot(); snap.Publishers.Len() != 0 || len(snap.Problems) != 0 {
		t.Errorf("another namespace's 1.2 channel was read: %+v %+v", snap.Publishers, snap.Problems)
	}
	if h.workers()["other/9"] != nil {
		t.Error("a namespace that is not watched was read")
	}
	if promtest.ToFloat64(h.metrics.Connected) != 1 {
		t.Error("connected gauge is not 1")
	}
	ctx := context.Background()
	if _, err := c.Delete(ctx, instanceKey("prod", "decode", 1)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "watched delete", func() bool { return h.workers()["prod/1"] == nil })
}

func TestLeaseExpiryRemovesWorker(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	h := run(t, newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}}))
	lease, err := c.Grant(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	put(t, c, instanceKey("dynamo", "decode", 5), endpointValue(5, "decode"), clientv3.WithLease(lease.ID))
	testutil.Eventually(t, 10*time.Second, "leased worker", func() bool { return h.workers()["dynamo/5"] != nil })
	testutil.Eventually(t, 20*time.Second, "lease expiry", func() bool { return h.workers()["dynamo/5"] == nil })
}

// TestCompactionResync: a delete made between the range get and the watch,
// then compacted away, is recovered by the full resync that follows.
func TestCompactionResync(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	put(t, c, instanceKey("dynamo", "decode", 1), endpointValue(1, "decode"))
	put(t, c, instanceKey("dynamo", "decode", 2), endpointValue(2, "decode"))
	src := newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}})
	var once sync.Once
	var passes atomic.Int32
	src.SetAfterSeed(func() {
		passes.Add(1)
		once.Do(func() { deleteThenCompact(t, c, instanceKey("dynamo", "decode", 1)) })
	})
	h := run(t, src)
	testutil.Eventually(t, 15*time.Second, "resynced view", func() bool {
		w := h.workers()
		return passes.Load() >= 2 && w["dynamo/2"] != nil && w["dynamo/1"] == nil
	})
}

// TestServerRestart: a stopped server ends the pass; after it comes back the
// watcher reconnects with backoff, resyncs, and keeps first_seen.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	put(t, c, instanceKey("dynamo", "decode", 1), endpointValue(1, "decode"))
	h := run(t, newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}}))
	testutil.Eventually(t, 10*time.Second, "seeded", func() bool { return h.workers()["dynamo/1"] != nil })
	first := h.workers()["dynamo/1"].FirstSeen
	gen := h.reg.Generation()
	srv.Stop()
	testutil.Eventually(t, 30*time.Second, "disconnect noticed", func() bool { return promtest.ToFloat64(h.metrics.Connected) == 0 })
	srv.Start()
	testutil.Eventually(t, 30*time.Second, "reconnected", func() bool { return promtest.ToFloat64(h.metrics.Connected) == 1 })
	w := h.workers()["dynamo/1"]
	if w == nil || !w.FirstSeen.Equal(first) {
		t.Fatalf("after restart: %+v, first_seen was %v", w, first)
	}
	if h.reg.Generation() != gen {
		t.Errorf("an idempotent resync published generation %d (was %d)", h.reg.Generation(), gen)
	}
}

// TestAuthReadOnlyUser proves the read-only contract with the server's own
// permission checks: a user allowed only to read the three prefixes works.
func TestAuthReadOnlyUser(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	root := srv.Client(t, clientv3.Config{})
	ctx := context.Background()
	put(t, root, instanceKey("dynamo", "decode", 3), endpointValue(3, "decode"))
	steps := []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "dynamo-reader"); return err },
		func() error { _, err := root.UserAdd(ctx, "router", "routerpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "router", "dynamo-reader"); return err },
	}
	for _, p := range []string{"v1/instances/dynamo/", "v1/mdc/dynamo/", "v1/event_channels/namespace/dynamo/"} {
		steps = append(steps, func() error {
			_, err := root.RoleGrantPermission(ctx, "dynamo-reader", p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermRead))
			return err
		})
	}
	steps = append(steps, func() error { _, err := root.AuthEnable(ctx); return err })
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	h := run(t, newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}, Auth: &config.Auth{Username: "router", Password: "routerpw"}}))
	testutil.Eventually(t, 15*time.Second, "worker read by the read-only user", func() bool { return h.workers()["dynamo/3"] != nil })
	admin := srv.Client(t, clientv3.Config{Username: "root", Password: "rootpw"})
	put(t, admin, instanceKey("dynamo", "decode", 4), endpointValue(4, "decode"))
	testutil.Eventually(t, 15*time.Second, "watched put under auth", func() bool { return h.workers()["dynamo/4"] != nil })
	// The same user cannot write: the server enforces what the code promises.
	router := srv.Client(t, clientv3.Config{Username: "router", Password: "routerpw"})
	if _, err := router.Put(ctx, instanceKey("dynamo", "decode", 7), "x"); err == nil {
		t.Error("the read-only role could write")
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	pki := testutil.NewTestPKI(t)
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{TLS: &transport.TLSInfo{
		CertFile: pki.ServerCert, KeyFile: pki.ServerKey, TrustedCAFile: pki.CAFile, ClientCertAuth: true}})
	tlsCfg, err := (&transport.TLSInfo{CertFile: pki.ClientCert, KeyFile: pki.ClientKey, TrustedCAFile: pki.CAFile}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t, clientv3.Config{TLS: tlsCfg})
	put(t, c, instanceKey("dynamo", "decode", 6), endpointValue(6, "decode"))
	h := run(t, newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}, TLS: &config.EtcdTLS{
		CACert: pki.CAFile, ClientCert: pki.ClientCert, ClientKey: pki.ClientKey, ServerName: "localhost"}}))
	testutil.Eventually(t, 15*time.Second, "worker over TLS", func() bool { return h.workers()["dynamo/6"] != nil })
	if _, err := etcd.New(config.Etcd{Endpoints: []string{srv.Endpoint}, TLS: &config.EtcdTLS{CACert: "/nonexistent/ca.pem"}}, []string{"dynamo"}, nil); err == nil {
		t.Error("a missing CA file was accepted")
	}
}

// TestTLSFilesReadEachPass: the client certificate is read when a pass
// connects, not once when the source is built: files renewed in place (a
// Secret rotated by a certificate manager) serve the next pass without a
// restart. Here the source is built over a certificate the server does
// not trust, renewed before the first pass.
func TestTLSFilesReadEachPass(t *testing.T) {
	t.Parallel()
	pki, other := testutil.NewTestPKI(t), testutil.NewTestPKI(t)
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{TLS: &transport.TLSInfo{
		CertFile: pki.ServerCert, KeyFile: pki.ServerKey, TrustedCAFile: pki.CAFile, ClientCertAuth: true}})
	tlsCfg, err := (&transport.TLSInfo{CertFile: pki.ClientCert, KeyFile: pki.ClientKey, TrustedCAFile: pki.CAFile}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	put(t, srv.Client(t, clientv3.Config{TLS: tlsCfg}), instanceKey("dynamo", "decode", 6), endpointValue(6, "decode"))
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	testutil.CopyFile(t, other.ClientCert, certFile)
	testutil.CopyFile(t, other.ClientKey, keyFile)
	src := newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}, TLS: &config.EtcdTLS{
		CACert: pki.CAFile, ClientCert: certFile, ClientKey: keyFile, ServerName: "localhost"}})
	testutil.CopyFile(t, pki.ClientCert, certFile)
	testutil.CopyFile(t, pki.ClientKey, keyFile)
	h := run(t, src)
	testutil.Eventually(t, 15*time.Second, "worker over the renewed certificate", func() bool { return h.workers()["dynamo/6"] != nil })
}

// TestReadOnlyContract: no call in the package's code writes, deletes,
// grants, keeps alive or compacts anything in etcd.
func TestReadOnlyContract(t *testing.T) {
	t.Parallel()
	forbidden := map[string]bool{"Put": true, "Delete": true, "Grant": true, "KeepAlive": true, "KeepAliveOnce": true,
		"Revoke": true, "Txn": true, "Compact": true, "Do": true, "Lease": true, "NewLease": true, "NewKV": true}
	// Receivers that are not etcd's: the reducer sink, and the HTTP client
	// of Diagnose's GET /version (built by http.NewRequestWithContext with
	// http.MethodGet: checked below).
	allowed := map[string]bool{"sink": true, "hc": true}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		n++
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "http" && sel.Sel.Name == "NewRequestWithContext" {
				if m, ok := call.Args[1].(*ast.SelectorExpr); !ok || m.Sel.Name != "MethodGet" {
					t.Errorf("%s: an HTTP request that is not a GET", fset.Position(call.Pos()))
				}
			}
			if forbidden[sel.Sel.Name] {
				if id, ok := sel.X.(*ast.Ident); ok && allowed[id.Name] {
					return true
				}
				t.Errorf("%s: call to %s", fset.Position(call.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
	if n == 0 {
		t.Fatal("no source files read")
	}
}

func TestSeedTimeoutUnreachable(t *testing.T) {
	t.Parallel()
	src := newSource(t, config.Etcd{Endpoints: []string{fmt.Sprintf("127.0.0.1:%d", 1)}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	reg := fleet.NewRegistry(nil, nil)
	w := &discovery.Watcher{Source: src, Registry: reg, Backoff: discovery.Backoff{Initial: time.Second, Max: time.Second}}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if reg.Generation() != 0 {
		t.Error("published without a source")
	}
}

// TestSeedTimeoutSaysWhy: a pass that runs out of its seed timeout says
// why when a probe finds out (here: the endpoint refuses connections), in
// the error the watcher logs and discover prints, rather than the
// timeout alone.
func TestSeedTimeoutSaysWhy(t *testing.T) {
	t.Parallel()
	src := newSource(t, config.Etcd{Endpoints: []string{"http://127.0.0.1:1"}})
	src.SetSeedTimeout(500 * time.Millisecond)
	logs := &testutil.SyncBuffer{}
	ctx, cancel := context.WithCancel(t.Context())
	w := &discovery.Watcher{Source: src, Registry: fleet.NewRegistry(nil, nil), Backoff: discovery.Backoff{Initial: time.Minute, Max: time.Minute},
		Logger: slog.New(slog.NewTextHandler(logs, nil))}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testutil.Eventually(t, 10*time.Second, "the pass's end logged", func() bool { return strings.Contains(logs.String(), "pass ended") })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "deadline exceeded") || !strings.Contains(l, "refused") {
		t.Fatalf("the pass's end, logged: %s", l)
	}
}

// TestPagedSeed: more keys than one range-get page are all read, at one
// revision.
func TestPagedSeed(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	var ops []clientv3.Op
	for i := 1; i <= 600; i++ {
		ops = append(ops, clientv3.OpPut(instanceKey("dynamo", "decode", uint64(i)), endpointValue(uint64(i), "decode")))
		if len(ops) == 100 {
			if _, err := c.Txn(context.Background()).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	h := run(t, newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}}))
	testutil.Eventually(t, 15*time.Second, "600 workers", func() bool { return h.reg.Snapshot().Workers.Len() == 600 })
}

// TestWatchBurstCoalesced: a burst of puts after the initial sync, each
// its own watch event, reaches the view in full through publishes at
// least discovery.PublishDelay apart rather than one per event.
func TestWatchBurstCoalesced(t *testing.T) {
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	h := run(t, newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}}))
	testutil.Eventually(t, 10*time.Second, "the first view", func() bool { return h.reg.Generation() > 0 })
	const n, writers = 400, 8
	before := h.reg.Generation()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for id := w + 1; id <= n; id += writers {
				put(t, c, instanceKey("dynamo", "decode", uint64(id)), endpointValue(uint64(id), "decode"))
			}
		})
	}
	wg.Wait()
	testutil.Eventually(t, 10*time.Second, "every put", func() bool { return h.reg.Snapshot().Workers.Len() == n })
	elapsed := time.Since(start)
	publishes := h.reg.Generation() - before
	if most := uint64(elapsed/discovery.PublishDelay) + 1; publishes > most {
		t.Errorf("%d events in %v published %d times, want at most %d", n, elapsed, publishes, most)
	}
	t.Logf("%d events in %v: %d publishes", n, elapsed, publishes)
}

// TestValueOverReceiveLimit: a value larger than one response may carry
// (the client's receive limit) is refused as oversized by its key, on the
// initial read and when a watch brings one, and every other record is read
// as usual; once the key holds a value of a normal size it is a worker.
func TestValueOverReceiveLimit(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	big := func(id uint64) string {
		v := endpointValue(id, "decode")
		return v + strings.Repeat(" ", 2*limit)
	}
	put(t, c, instanceKey("dynamo", "decode", 1), endpointValue(1, "decode"))
	put(t, c, instanceKey("dynamo", "decode", 5), big(5))
	put(t, c, instanceKey("dynamo", "decode", 9), endpointValue(9, "decode"))
	src := newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}})
	src.SetRecvLimit(limit)
	h := run(t, src)
	oversized := func(keys ...string) bool {
		var got []string
		for _, p := range h.reg.Snapshot().Problems {
			if p.Kind == fleet.ProblemOversized {
				got = append(got, p.Keys...)
			}
		}
		return slices.Equal(got, keys)
	}
	testutil.Eventually(t, 15*time.Second, "the other workers read, the large value refused", func() bool {
		w := h.workers()
		return w["dynamo/1"] != nil && w["dynamo/9"] != nil && w["dynamo/5"] == nil && oversized(instanceKey("dynamo", "decode", 5))
	})
	if got := promtest.ToFloat64(h.metrics.Events.WithLabelValues(fleet.ProblemOversized)); got != 1 {
		t.Errorf("discovery events kind=oversized: %v, want 1", got)
	}
	// A watch event carrying such a value ends the pass; the next pass
	// refuses it by name and reads on.
	put(t, c, instanceKey("dynamo", "decode", 6), big(6))
	put(t, c, instanceKey("dynamo", "decode", 10), endpointValue(10, "decode"))
	testutil.Eventually(t, 15*time.Second, "the watched large value refused", func() bool {
		w := h.workers()
		return w["dynamo/a"] != nil && w["dynamo/1"] != nil && oversized(instanceKey("dynamo", "decode", 5), instanceKey("dynamo", "decode", 6))
	})
	put(t, c, instanceKey("dynamo", "decode", 5), endpointValue(5, "decode"))
	testutil.Eventually(t, 15*time.Second, "the key rewritten small", func() bool {
		return h.workers()["dynamo/5"] != nil && oversized(instanceKey("dynamo", "decode", 6))
	})
}

// TestDiscoveryEventsCounted: continuum_dynamo_discovery_events_total counts
// a conflict or a refused record once when it appears: not again when its
// records are put again unchanged, nor when a reconnect resyncs them; a
// duplicate whose extra record is deleted is resolved, and counted again
// when that record comes back.
func TestDiscoveryEventsCounted(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	dupKey := "v1/instances/dynamo/decode/generate/ff"
	put(t, c, instanceKey("dynamo", "decode", 1), endpointValue(1, "decode"))
	put(t, c, dupKey, endpointValue(1, "decode"))
	put(t, c, instanceKey("dynamo", "decode", 2), `{"type":"Endpoint","component":"decode","endpoint":"generate"}`)
	put(t, c, instanceKey("dynamo", "prefill", 3), endpointValue(3, "prefill"))
	put(t, c, "v1/mdc/dynamo/prefill/generate/3", `{"type":"Model","component":"prefill","endpoint":"generate","instance_id":3,"card_json":{"display_name":"m","worker_type":"Decode"}}`)
	h := run(t, newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}}))
	counts := func() map[string]float64 {
		out := map[string]float64{}
		for _, k := range []string{fleet.ProblemDuplicate, fleet.ProblemMalformed, fleet.ProblemRoleConflict} {
			out[k] = promtest.ToFloat64(h.metrics.Events.WithLabelValues(k))
		}
		return out
	}
	want := map[string]float64{fleet.ProblemDuplicate: 1, fleet.ProblemMalformed: 1, fleet.ProblemRoleConflict: 1}
	check := func(when string) {
		t.Helper()
		if got := counts(); !maps.Equal(got, want) {
			t.Fatalf("%s: events %v, want %v", when, got, want)
		}
	}
	testutil.Eventually(t, 10*time.Second, "seeded", func() bool { return len(h.reg.Snapshot().Problems) == 3 })
	check("seeded")
	if len(h.workers()) != 0 {
		t.Fatalf("workers %v", h.workers())
	}

	// The same records put again, and a new worker to wait for.
	put(t, c, dupKey, endpointValue(1, "decode"))
	put(t, c, instanceKey("dynamo", "decode", 2), `{"type":"Endpoint","component":"decode","endpoint":"generate"}`)
	put(t, c, instanceKey("dynamo", "decode", 4), endpointValue(4, "decode"))
	testutil.Eventually(t, 10*time.Second, "new worker", func() bool { return h.workers()["dynamo/4"] != nil })
	check("records put again")

	srv.Stop()
	testutil.Eventually(t, 30*time.Second, "disconnect noticed", func() bool { return promtest.ToFloat64(h.metrics.Connected) == 0 })
	srv.Start()
	testutil.Eventually(t, 30*time.Second, "reconnected", func() bool { return promtest.ToFloat64(h.metrics.Connected) == 1 })
	check("resynced")

	if _, err := c.Delete(context.Background(), dupKey); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "duplicate resolved", func() bool { return h.workers()["dynamo/1"] != nil })
	put(t, c, dupKey, endpointValue(1, "decode"))
	testutil.Eventually(t, 10*time.Second, "duplicate again", func() bool { return h.workers()["dynamo/1"] == nil })
	want[fleet.ProblemDuplicate] = 2
	check("duplicate again")
}

// deleteThenCompact deletes key, then compacts the store past a later
// write, so that a watch started at the revision before the delete is
// told its start was compacted and never sees the delete.
func deleteThenCompact(t *testing.T, c *clientv3.Client, key string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Delete(ctx, key); err != nil {
		t.Error(err)
	}
	resp, err := c.Put(ctx, "unrelated", "x")
	if err != nil {
		t.Error(err)
		return
	}
	if _, err := c.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Error(err)
	}
}
