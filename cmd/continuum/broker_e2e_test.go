package main_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/workload"
)

// Process-level tests of the event bus: routers (`serve`), brokers
// (`broker`) and a simulated fleet (`fleet-sim`) as child processes, over
// real TLS, HTTP/2 and ZMQ publishers (go-zeromq and libzmq).

// Broker credentials of the bus tests.
const (
	brokerA = "broker-a.dynamo"
	brokerB = "broker-b.dynamo"
)

var (
	busRe       = regexp.MustCompile(`"msg":"event bus listening","address":"([^"]+)"`)
	brokerUpRe  = regexp.MustCompile(`"msg":"broker started".*"metrics":"([^"]+)"`)
	fileStoreRe = regexp.MustCompile(`file store: (\S+)`)
	prefillRe   = regexp.MustCompile(`prefill\s+instance (\d+)`)
)

// busFixture is the listener's PKI and the brokers' token files.
type busFixture struct {
	pki    *testutil.TestPKI
	tokens map[string]string // broker id → token file
	dir    string
}

func newBusFixture(t *testing.T) *busFixture {
	t.Helper()
	fx := &busFixture{pki: testutil.NewTestPKI(t), tokens: map[string]string{}, dir: t.TempDir()}
	for _, id := range []string{brokerA, brokerB} {
		file := filepath.Join(fx.dir, id+".token")
		if err := os.WriteFile(file, []byte("token-of-"+id+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fx.tokens[id] = file
	}
	return fx
}

// busSection is the event_bus block (under dynamo:) allowing both brokers
// in namespace dynamo.
func (fx *busFixture) busSection() string {
	return fmt.Sprintf(`  event_bus:
    enabled: true
    listen: "127.0.0.1:0"
    tls: {cert: %q, key: %q}
    heartbeat_interval: 1s
    brokers:
      - {id: %s, token_hash: %q, namespaces: [dynamo]}
      - {id: %s, token_hash: %q, namespaces: [dynamo]}
`, fx.pki.ServerCert, fx.pki.ServerKey, brokerA, eventbus.HashToken("token-of-"+brokerA), brokerB, eventbus.HashToken("token-of-"+brokerB))
}

// serveConfig starts `serve` on a configuration text and returns its base
// URL and, when it runs the event bus, the bus address.
func serveConfig(t *testing.T, text string) (router, bus string, p *proc) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "continuum.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	p = start(t, "serve", "--config", file, "--log-format", "json", "--shutdown-grace", "2s")
	testutil.Eventually(t, 30*time.Second, "serve ready", func() bool { return servingRe.MatchString(p.errOut()) })
	router = "http://" + servingRe.FindStringSubmatch(p.errOut())[1]
	if strings.Contains(text, "event_bus:") {
		testutil.Eventually(t, 30*time.Second, "the event bus listening", func() bool { return busRe.MatchString(p.errOut()) })
		bus = busRe.FindStringSubmatch(p.errOut())[1]
	}
	return router, bus, p
}

// startBroker starts `broker` as id against the bus, reading the fleet
// from the file store at root, and returns it with its metrics URL.
func startBroker(t *testing.T, fx *busFixture, bus, id, root string) (*proc, string) {
	t.Helper()
	return startBrokerAt(t, fx, bus, id, root, "127.0.0.1:0")
}

// startBrokerAt is startBroker with its metrics served on metricsAddr.
func startBrokerAt(t *testing.T, fx *busFixture, bus, id, root, metricsAddr string) (*proc, string) {
	t.Helper()
	p := start(t, "broker", "--router", "https://"+bus, "--id", id, "--token-file", fx.tokens[id], "--ca-file", fx.pki.CAFile,
		"--source", "file", "--file-root", root, "--dynamo-namespace", "dynamo", "--metrics-address", metricsAddr,
		"--drain-grace", "3s", "--log-format", "json")
	testutil.Eventually(t, 30*time.Second, "broker started", func() bool { return brokerUpRe.MatchString(p.errOut()) })
	return p, "http://" + brokerUpRe.FindStringSubmatch(p.errOut())[1]
}

// brokered is a simulated fleet of one prefill and two decode workers, a
// router with transport: broker, and broker A relaying all six of its
// subscriptions.
type brokered struct {
	fx               *busFixture
	router, bus      string
	root             string // the fleet's file store
	srv, broker      *proc
	brokerMetricsURL string
}

// startBrokered starts a brokered fleet, broker A's metrics served on
// metricsAddr, and waits until every subscription goes through it.
func startBrokered(t *testing.T, metricsAddr string) *brokered {
	t.Helper()
	b := &brokered{fx: newBusFixture(t)}
	_, brokerCfg, root, _ := simConfigs(t, b.fx, "--prefill", "1", "--decode", "2")
	b.root = root
	b.router, b.bus, b.srv = serveConfig(t, brokerCfg)
	b.broker, b.brokerMetricsURL = startBrokerAt(t, b.fx, b.bus, brokerA, root, metricsAddr)
	testutil.Eventually(t, 30*time.Second, "every subscription through broker A", func() bool {
		return connectedThrough(workers(t, b.router), 6, "broker", brokerA)
	})
	return b
}

// connectedThrough reports whether every subscription of the view (at
// least n) is connected with transport, through broker when set.
func connectedThrough(v admin.WorkersResponse, n int, transport, broker string) bool {
	if len(v.Subscriptions) < n {
		return false
	}
	for _, s := range v.Subscriptions {
		if s.State != "connected" || s.Transport != transport || s.Broker != broker {
			return false
		}
	}
	return true
}

// loadValues are a load view's samples without their ages, states and
// selection counts: what the store holds.
func loadValues(t *testing.T, router string) map[string]string {
	t.Helper()
	var v admin.LoadResponse
	getJSON(t, router+"/admin/dynamo/load", &v)
	out := map[string]string{}
	for _, s := range v.Samples {
		out[fmt.Sprintf("%s/%d", s.WorkerID, s.DPRank)] = fmt.Sprintf("%v %v %v", deref(s.ActiveDecodeBlocks), deref(s.ActivePrefillTokens), deref(s.KVUsedBlocks))
	}
	return out
}

// freshSamples counts a load view's fresh samples.
func freshSamples(t *testing.T, router string) int {
	t.Helper()
	var v admin.LoadResponse
	getJSON(t, router+"/admin/dynamo/load", &v)
	n := 0
	for _, s := range v.Samples {
		if s.State == "fresh" {
			n++
		}
	}
	return n
}

func deref(p *uint64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// kvState is a KV view's index: its size, and each rank's blocks and
// cursors.
func kvState(t *testing.T, router string) string {
	t.Helper()
	var v admin.KVResponse
	getJSON(t, router+"/admin/dynamo/kv", &v)
	var b strings.Builder
	fmt.Fprintf(&b, "nodes=%d ownerships=%d ranks=%d\n", v.Index.Nodes, v.Index.Ownerships, v.Index.Ranks)
	ranks := v.Ranks
	slices.SortFunc(ranks, func(a, b admin.KVRank) int { return strings.Compare(a.WorkerID, b.WorkerID) })
	for _, r := range ranks {
		fmt.Fprintf(&b, "%s/%d blocks=%d", r.WorkerID, r.DPRank, r.Blocks)
		for _, c := range r.Cursors {
			fmt.Fprintf(&b, " cursor=%s:%d:%d", c.PublisherID, c.EventID, c.Gaps)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// simConfigs starts fleet-sim (file store) and returns its router
// configuration with KV-aware selection on, for transport direct and for
// transport broker over fx's event bus, the file store root, and the
// fleet-sim process.
func simConfigs(t *testing.T, fx *busFixture, args ...string) (direct, broker, root string, sim *proc) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "sim.yaml")
	sim = start(t, append([]string{"fleet-sim", "--speed", "8", "--router-bind", "127.0.0.1:0", "--write-config", cfg}, args...)...)
	testutil.Eventually(t, 30*time.Second, "fleet-sim ready", func() bool { return strings.Contains(sim.out(), "router configuration:") })
	root = fileStoreRe.FindStringSubmatch(sim.out())[1]
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const load = "  load:\n    max_staleness: \"3s\"\n    direct_allow_cidrs: [\"127.0.0.0/8\"]\n"
	if !strings.Contains(string(data), load) {
		t.Fatalf("no load section in\n%s", data)
	}
	direct = string(data)
	if !strings.Contains(direct, "  kv:\n    enabled: true\n") {
		t.Fatalf("KV-aware selection is not on in\n%s", data)
	}
	broker = strings.Replace(direct, load, "  load:\n    max_staleness: \"3s\"\n    transport: broker\n", 1) + fx.busSection()
	return direct, broker, root, sim
}

// shapedChat sends a chat request whose prompt is the text of the given
// workload blocks (512 bytes each, the same for the same id), so that
// requests sharing leading ids share a prompt prefix and its prefill
// worker publishes KV events for what it has not cached; it returns the
// status.
func shapedChat(t *testing.T, router string, blocks ...int) int {
	t.Helper()
	var b strings.Builder
	for _, id := range blocks {
		b.WriteString(workload.BlockText(uint64(id)))
	}
	req, _ := http.NewRequest(http.MethodPost, router+"/v1/chat/completions", strings.NewReader(
		fmt.Sprintf(`{"model":"Qwen/Qwen3-32B","max_tokens":2,"messages":[{"role":"user","content":%q}]}`, b.String())))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestBrokerTransportParity: a router with transport: broker, fed through
// a `continuum broker` process, shows the same fresh load for every worker
// and the same KV index as a router with transport: direct beside it, and
// neither sees an event-id gap.
func TestBrokerTransportParity(t *testing.T) {
	fx := newBusFixture(t)
	directCfg, brokerCfg, root, sim := simConfigs(t, fx, "--prefill", "1", "--decode", "2")
	direct, _, _ := serveConfig(t, directCfg)
	viaBroker, bus, _ := serveConfig(t, brokerCfg)
	brk, brokerMetrics := startBroker(t, fx, bus, brokerA, root)

	testutil.Eventually(t, 30*time.Second, "every subscription through the broker", func() bool {
		return connectedThrough(workers(t, viaBroker), 6, "broker", brokerA) && connectedThrough(workers(t, direct), 6, "direct", "")
	})
	if cov := workers(t, viaBroker).BrokerCoverage; len(cov) != 1 || !cov[0].Covered || cov[0].Brokers[0] != brokerA {
		t.Errorf("broker_coverage %+v", cov)
	}

	// A subscription is connected once its subscribe frame is written, not
	// once the publisher has taken it, and a PUB socket drops what it
	// publishes before then: a router could miss the first kv-events
	// through no fault of its transport, and its index would lack their
	// blocks for good. So the routers start from a kv-events message both
	// took: a restarted worker publishes a cleared event for its rank.
	// Once both routers hold the same cursor for the prefill rank, and no
	// blocks, both subscriptions have reached its publisher, and what
	// either misses from here on was lost on its way.
	frontend := frontendRe.FindStringSubmatch(sim.out())[1]
	prefill := prefillRe.FindStringSubmatch(sim.out())[1]
	testutil.Eventually(t, 30*time.Second, "both routers taking the prefill worker's kv-events", func() bool {
		inject(t, frontend, prefill, "kill")
		inject(t, frontend, prefill, "restart")
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			dk, bk := kvState(t, direct), kvState(t, viaBroker)
			if dk == bk && strings.HasPrefix(dk, "nodes=0 ") && strings.Contains(dk, "\n"+prefill+"/0 blocks=0 cursor=") {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	})

	// Traffic through the direct router moves every worker's load; both
	// routers read the same publishers.
	var dv, bv map[string]string
	n := 0
	loadDeadline := time.Now().Add(60 * time.Second)
	for same := false; !same; {
		if time.Now().After(loadDeadline) {
			t.Fatalf("no time with the same fresh load for every worker within 60s:\ndirect: %v (%d fresh)\nthrough the broker: %v (%d fresh)\nsubscriptions through the broker: %+v",
				dv, freshSamples(t, direct), bv, freshSamples(t, viaBroker), workers(t, viaBroker).Subscriptions)
		}
		n++
		if code := shapedChat(t, direct, 1, 2, 100+n); code != 200 {
			t.Logf("request %d: status %d", n, code)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		deadline := time.Now().Add(time.Second)
		for !same && time.Now().Before(deadline) {
			dv, bv = loadValues(t, direct), loadValues(t, viaBroker)
			same = len(dv) == 3 && fmt.Sprint(dv) == fmt.Sprint(bv) && freshSamples(t, direct) == 3 && freshSamples(t, viaBroker) == 3
			if !same {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	// The KV indexes: the same blocks, and each cursor at the same event
	// with the same gaps (none). A kv-events message the broker path lost
	// shows here as a gap, and as a rank rebuilt from less.
	var dk, bk string
	deadline := time.Now().Add(30 * time.Second)
	for {
		dk, bk = kvState(t, direct), kvState(t, viaBroker)
		if dk == bk && !strings.HasPrefix(dk, "nodes=0 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("KV indexes differ:\ndirect:\n%s\nthrough the broker:\n%s", dk, bk)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, r := range []string{direct, viaBroker} {
		if v := metric(t, r, `continuum_dynamo_kv_events_total{result="gap"}`); v != 0 {
			t.Errorf("%s: %v kv-events gaps", r, v)
		}
	}
	if v := metric(t, viaBroker, "continuum_dynamo_event_bus_sessions"); v != 1 {
		t.Errorf("event bus sessions %v", v)
	}
	if v := metric(t, viaBroker, `continuum_dynamo_broker_subscriptions{broker="broker-a.dynamo",family="kv_metrics"}`); v != 3 {
		t.Errorf("broker subscriptions %v", v)
	}
	if v := metric(t, brokerMetrics, "continuum_broker_streams"); v != 6 {
		t.Errorf("the broker relays %v streams, want 6", v)
	}
	if v := metric(t, brokerMetrics, `continuum_broker_relayed_bytes_total{direction="to_router"}`); v == 0 {
		t.Error("the broker relayed nothing")
	}

	// SIGTERM: the broker drains (the router moves its streams away at
	// once) and exits cleanly well within its grace.
	if err := brk.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-brk.done:
		if brk.err != nil {
			t.Errorf("the broker exited with %v", brk.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the broker did not exit after SIGTERM")
	}
	if !strings.Contains(brk.errOut(), `"msg":"draining: the router moves the streams away"`) {
		t.Error("the broker did not drain")
	}
	testutil.Eventually(t, 10*time.Second, "pending after the drain", func() bool {
		v := workers(t, viaBroker)
		for _, s := range v.Subscriptions {
			if s.State != "pending" {
				return false
			}
		}
		return len(v.Subscriptions) == 6 && len(v.BrokerCoverage) == 1 && !v.BrokerCoverage[0].Covered
	})
}

// TestBrokerSIGKILL: a broker killed with SIGKILL leaves every
// subscription pending and selection round-robin over stale load; a new
// broker process restores them (the same subscriptions, reconnected, not
// restarted), selection follows load again, and the kv-events missed
// meanwhile show as a gap that the index rebuilds from.
func TestBrokerSIGKILL(t *testing.T) {
	b := startBrokered(t, "127.0.0.1:0")
	fx, router, bus, root, srv, first := b.fx, b.router, b.bus, b.root, b.srv, b.broker
	testutil.Eventually(t, 30*time.Second, "KV blocks indexed", func() bool {
		return shapedChat(t, router, 1, 2, 3) == 200 && !strings.HasPrefix(kvState(t, router), "nodes=0 ")
	})

	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	testutil.Eventually(t, 10*time.Second, "every subscription pending", func() bool {
		v := workers(t, router)
		for _, s := range v.Subscriptions {
			if s.State != "pending" {
				return false
			}
		}
		return len(v.Subscriptions) == 6 && len(v.BrokerCoverage) == 1 && !v.BrokerCoverage[0].Covered
	})
	t.Logf("pending %v after the kill", time.Since(killed).Round(time.Millisecond))
	stale := `continuum_dynamo_selection_total{reason="round_robin_stale",role="decode"}`
	before := metric(t, router, stale)
	// Requests go on (round robin), and the prefill worker's KV events for
	// them are missed.
	testutil.Eventually(t, 30*time.Second, "round_robin_stale selections", func() bool {
		_ = shapedChat(t, router, 1, 2, 4)
		return metric(t, router, stale) > before
	})
	gaps := metric(t, router, `continuum_dynamo_kv_events_total{result="gap"}`)

	_, _ = startBroker(t, fx, bus, brokerB, root)
	testutil.Eventually(t, 30*time.Second, "every subscription through broker B", func() bool {
		return connectedThrough(workers(t, router), 6, "broker", brokerB)
	})
	if strings.Contains(srv.errOut(), "subscriptions restarting") {
		t.Error("the subscriptions were restarted rather than reconnected")
	}
	loadPicks := `continuum_dynamo_selection_total{reason="load",role="decode"}`
	before = metric(t, router, loadPicks)
	testutil.Eventually(t, 30*time.Second, "load-based selection and the gap", func() bool {
		_ = shapedChat(t, router, 1, 2, 5)
		return metric(t, router, loadPicks) > before && metric(t, router, `continuum_dynamo_kv_events_total{result="gap"}`) > gaps
	})
	// Prompts the worker has not cached yet are stored from their root,
	// and indexed again.
	fresh := 1000
	testutil.Eventually(t, 30*time.Second, "the index rebuilt", func() bool {
		fresh += 2
		_ = shapedChat(t, router, fresh, fresh+1)
		return !strings.HasPrefix(kvState(t, router), "nodes=0 ")
	})
}

// scriptConfig is a router configuration over the file store at root with
// KV events on; bus, when set, is its event bus block.
func scriptConfig(root, transport, bus string) string {
	return fmt.Sprintf(`server:
  bind_address: "127.0.0.1:0"
admin:
  token: "demo"
backends:
  - name: plain
    url: "http://127.0.0.1:1"
dynamo:
  enabled: true
  discovery:
    source: file
    file:
      root: %q
      namespace: dynamo
  load:
    transport: %s
    direct_allow_cidrs: ["127.0.0.0/8"]
  kv:
    enabled: true
%s`, root, transport, bus)
}

func loadMsg(pid, seq, worker, decode uint64) [][]byte {
	return wire.EncodeEventMessage("kv_metrics", pid, seq, uint64(time.Now().UnixMilli()),
		wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: worker, ActiveDecodeBlocks: &decode}))
}

func kvMsg(pid uint64, ev wire.RouterEvent) [][]byte {
	return wire.EncodeEventMessage("kv-events", pid, ev.EventID, uint64(time.Now().UnixMilli()), wire.EncodeRouterEvent(ev))
}

func stored(worker, id uint64, parent *uint64, hashes ...uint64) wire.RouterEvent {
	ev := wire.RouterEvent{WorkerID: worker, EventID: id, Kind: wire.KVStored, ParentHash: parent}
	for _, h := range hashes {
		ev.Blocks = append(ev.Blocks, wire.StoredBlock{BlockHash: h, TokensHash: h ^ 0xabcdef})
	}
	return ev
}

func u64p(v uint64) *uint64 { return &v }

// TestBrokerScriptedParity: the same scripted load and kv-events streams
// (late sequences, a foreign publisher id, a publisher re-registered with
// a new id, an event-id gap, removals), from go-zeromq and libzmq
// publishers, give identical load stores and KV indexes through the
// broker and directly. A publisher the broker's discovery does not
// advertise is refused with target_not_advertised while the advertised
// ones connect.
func TestBrokerScriptedParity(t *testing.T) {
	testutil.RequireLibzmq(t)
	fx := newBusFixture(t)
	routerRoot, brokerRoot := t.TempDir(), t.TempDir()
	const (
		workerA, loadA, kvA, loadA2 = 0xa1, 0xa11, 0xa12, 0xa13
		workerL, loadL              = 0xb1, 0xb11
		workerX, loadX              = 0xc1, 0xc11
	)
	pa, pk, px := testutil.StartGoPublisher(t), testutil.StartGoPublisher(t), testutil.StartGoPublisher(t)
	var lmsgs [][][]byte
	for seq := uint64(1); seq <= 40; seq++ {
		lmsgs = append(lmsgs, loadMsg(loadL, seq, workerL, seq))
	}
	lmsgs = append(lmsgs, loadMsg(loadL, 42, workerL, 42), loadMsg(loadL, 41, workerL, 41), loadMsg(loadL, 43, workerL, 43))
	pl := testutil.StartLibzmqPublisher(t, lmsgs, 50*time.Millisecond)

	workerAt := func(id uint64) testutil.FileWorker {
		return testutil.FileWorker{InstanceID: workerA, LoadPublisherID: id, LoadEndpoint: pa.Endpoint, KVPublisherID: kvA, KVEndpoint: pk.Endpoint}
	}
	recA := testutil.WriteFileWorker(t, routerRoot, workerAt(loadA))
	testutil.WriteFileWorker(t, brokerRoot, workerAt(loadA))
	wl := testutil.FileWorker{InstanceID: workerL, LoadPublisherID: loadL, LoadEndpoint: pl.Endpoint}
	recL := testutil.WriteFileWorker(t, routerRoot, wl)
	testutil.WriteFileWorker(t, brokerRoot, wl)
	// X is in the routers' fleet only: the broker's discovery does not
	// advertise it.
	testutil.WriteFileWorker(t, routerRoot, testutil.FileWorker{InstanceID: workerX, LoadPublisherID: loadX, LoadEndpoint: px.Endpoint})

	testutil.KeepFileRecordsAlive(t, routerRoot)
	testutil.KeepFileRecordsAlive(t, brokerRoot)
	direct, _, _ := serveConfig(t, scriptConfig(routerRoot, "direct", ""))
	viaBroker, bus, _ := serveConfig(t, scriptConfig(routerRoot, "broker", fx.busSection()))
	_, brokerMetrics := startBroker(t, fx, bus, brokerA, brokerRoot)

	testutil.Eventually(t, 30*time.Second, "subscriptions up; X refused", func() bool {
		if !connectedThrough(workers(t, direct), 4, "direct", "") {
			return false
		}
		up := 0
		for _, s := range workers(t, viaBroker).Subscriptions {
			if s.PublisherID == fmt.Sprint(loadX) {
				if s.State == "connected" {
					t.Fatalf("the unadvertised publisher connected through the broker: %+v", s)
				}
				continue
			}
			if s.State == "connected" && s.Broker == brokerA {
				up++
			}
		}
		return up == 3 && metric(t, brokerMetrics, `continuum_broker_streams_total{result="target_not_advertised"}`) > 0
	})

	// Warm up until both routers read A's publishers.
	seq, eid := uint64(0), uint64(0)
	key := fmt.Sprintf("%d/0", workerA)
	testutil.Eventually(t, 30*time.Second, "both routers reading A", func() bool {
		seq++
		eid++
		_ = pa.Send(loadMsg(loadA, seq, workerA, seq))
		_ = pk.Send(kvMsg(kvA, stored(workerA, eid, nil, 0x100)))
		d, b := loadValues(t, direct), loadValues(t, viaBroker)
		return d[key] != "" && b[key] != "" && strings.Contains(kvState(t, direct), "blocks=1") && strings.Contains(kvState(t, viaBroker), "blocks=1")
	})
	pl.Go()

	// The script.
	for _, m := range [][][]byte{
		loadMsg(loadA, seq+1, workerA, 11),
		loadMsg(loadA, seq+3, workerA, 13),
		loadMsg(loadA, seq+2, workerA, 12),  // late
		loadMsg(0xdead, seq+4, workerA, 99), // another publisher's id
		loadMsg(loadA, seq+5, workerA, 15),
	} {
		if err := pa.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	for _, ev := range []wire.RouterEvent{
		stored(workerA, eid+1, nil, 0x201, 0x202),
		stored(workerA, eid+2, u64p(0x202), 0x203),
		{WorkerID: workerA, EventID: eid + 3, Kind: wire.KVRemoved, Removed: []uint64{0x203}},
		stored(workerA, eid+6, u64p(0x202), 0x204), // events eid+4, eid+5 never come: a gap
		stored(workerA, eid+7, nil, 0x301),
		stored(workerA, eid+8, u64p(0x301), 0x302),
	} {
		if err := pk.Send(kvMsg(kvA, ev)); err != nil {
			t.Fatal(err)
		}
	}
	last := fmt.Sprintf("cursor=%d:%d:1\n", kvA, eid+8)
	same := func(what string, done func(load map[string]string, kv string) bool) {
		t.Helper()
		var dl, bl map[string]string
		var dk, bk string
		deadline := time.Now().Add(30 * time.Second)
		for {
			dl, bl, dk, bk = loadValues(t, direct), loadValues(t, viaBroker), kvState(t, direct), kvState(t, viaBroker)
			if done(dl, dk) && done(bl, bk) && fmt.Sprint(dl) == fmt.Sprint(bl) && dk == bk {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the routers differ or are not done\ndirect: %v\n%s\nthrough the broker: %v\n%s", what, dl, dk, bl, bk)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	same("the script", func(load map[string]string, kv string) bool {
		return strings.HasPrefix(load[key], "15 ") && strings.HasPrefix(load[fmt.Sprintf("%d/0", workerL)], "43 ") &&
			strings.Contains(kv, last)
	})
	for _, r := range []string{direct, viaBroker} {
		if metric(t, r, `continuum_dynamo_load_events_total{result="identity_mismatch"}`) != 1 {
			t.Errorf("%s: identity_mismatch not counted once", r)
		}
	}

	// A re-registers its load publisher under a new id on the same socket.
	testutil.RemoveFileRecords(t, routerRoot, recA[2:3])
	testutil.WriteFileWorker(t, routerRoot, workerAt(loadA2))
	testutil.Eventually(t, 30*time.Second, "the new publisher id read through the broker", func() bool {
		_ = pa.Send(loadMsg(loadA2, 1, workerA, 77))
		return strings.HasPrefix(loadValues(t, direct)[key], "77 ") && strings.HasPrefix(loadValues(t, viaBroker)[key], "77 ")
	})
	// The broker's discovery does not know the new id yet: it relays
	// what it advertises, the (namespace, host, port, topic), not ids.

	// L leaves the fleet.
	testutil.RemoveFileRecords(t, routerRoot, recL)
	same("after the removal", func(load map[string]string, _ string) bool {
		_, hasL := load[fmt.Sprintf("%d/0", workerL)]
		return !hasL && strings.HasPrefix(load[key], "77 ")
	})
	for _, s := range workers(t, viaBroker).Subscriptions {
		if s.PublisherID == fmt.Sprint(loadX) && s.State == "connected" {
			t.Errorf("the unadvertised publisher connected: %+v", s)
		}
	}
}
