package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/config"
)

// want is one expected finding, written in a fixture as
//
//	# want: error dynamo.discovery.etcd.endpoints[1] 13 "substring of the message"
type want struct {
	severity, path string
	line           int
	substr         string
}

var (
	wantLine = regexp.MustCompile(`^# want: (error|warning) (\S+) (\d+) "(.*)"$`)
	envLine  = regexp.MustCompile(`^# env: ([A-Za-z_][A-Za-z0-9_]*)=(.*)$`)
)

func readFixture(t *testing.T, path string) (wants []want, env map[string]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env = map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := wantLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[3])
			p := m[2]
			if p == `""` {
				p = ""
			}
			sub, err := strconv.Unquote(`"` + m[4] + `"`)
			if err != nil {
				t.Fatalf("%s: bad want line %q: %v", path, line, err)
			}
			wants = append(wants, want{m[1], p, n, sub})
		} else if strings.HasPrefix(line, "# want:") {
			t.Fatalf("%s: malformed want line %q", path, line)
		}
		if m := envLine.FindStringSubmatch(line); m != nil {
			env[m[1]] = m[2]
		}
	}
	return wants, env
}

func envOf(m map[string]string) config.LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestFixtures loads every file under testdata/config and requires exactly
// the findings its "# want:" lines list: valid/ files have no errors.
func TestFixtures(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../testdata/config/*/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimPrefix(file, "../../testdata/config/"), func(t *testing.T) {
			wants, env := readFixture(t, file)
			doc, err := config.Load(file, config.Options{Env: envOf(env)})
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			valid := filepath.Base(filepath.Dir(file)) == "valid"
			if valid && doc.Findings.Errors() > 0 {
				t.Errorf("a valid fixture has errors")
			}
			if !valid && doc.Findings.Errors()+doc.Findings.Warnings() == 0 {
				t.Errorf("an invalid fixture has no findings")
			}
			matched := make([]bool, len(doc.Findings))
			for _, w := range wants {
				found := false
				for i, f := range doc.Findings {
					if !matched[i] && f.Severity.String() == w.severity && f.Path == w.path && f.Line == w.line && strings.Contains(f.Message, w.substr) {
						matched[i], found = true, true
						break
					}
				}
				if !found {
					t.Errorf("missing: %s %s line %d %q", w.severity, w.path, w.line, w.substr)
				}
			}
			for i, f := range doc.Findings {
				if !matched[i] {
					t.Errorf("unexpected: %s", f)
				}
			}
		})
	}
}

func parse(t *testing.T, yaml string) *config.Document {
	t.Helper()
	doc, err := config.Parse("test.yaml", []byte(yaml), config.Options{Env: envOf(nil)})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return doc
}

func hasFinding(doc *config.Document, sev config.Severity, path, substr string) bool {
	return slices.ContainsFunc(doc.Findings, func(f config.Finding) bool {
		return f.Severity == sev && f.Path == path && strings.Contains(f.Message, substr)
	})
}

func yamlList(prefix string, n int, item func(i int) string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for i := range n {
		b.WriteString(item(i))
	}
	return b.String()
}

// TestCountLimits checks each count bound at its limit and one past it.
func TestCountLimits(t *testing.T) {
	t.Parallel()
	backends := func(n int) string {
		return yamlList("backends:\n", n, func(i int) string {
			return fmt.Sprintf("  - {name: b%d, url: \"http://b%d:8000\"}\n", i, i)
		})
	}
	tests := []struct {
		name, path, substr string
		limit              int
		build              func(n int) string
	}{
		{"etcd endpoints", "dynamo.discovery.etcd.endpoints", "at most 16", config.MaxEtcdEndpoints, func(n int) string {
			return yamlList("dynamo:\n  discovery:\n    etcd:\n      endpoints:\n", n, func(i int) string {
				return fmt.Sprintf("        - \"http://etcd-%d:2379\"\n", i)
			})
		}},
		{"etcd namespaces", "dynamo.discovery.etcd.namespaces", "at most 16", config.MaxDynamoNamespaces, func(n int) string {
			return yamlList("dynamo:\n  discovery:\n    etcd:\n      namespaces:\n", n, func(i int) string {
				return fmt.Sprintf("        - ns%d\n", i)
			})
		}},
		{"kubernetes dynamo_namespaces", "dynamo.discovery.kubernetes.dynamo_namespaces", "at most 16", config.MaxDynamoNamespaces, func(n int) string {
			return yamlList("dynamo:\n  discovery:\n    source: kubernetes\n    kubernetes:\n      namespace: d\n      dynamo_namespaces:\n", n, func(i int) string {
				return fmt.Sprintf("        - ns%d\n", i)
			})
		}},
		{"shim backends", "dynamo.shim.backends", "at most 64", config.MaxShimBackends, func(n int) string {
			return backends(n) + yamlList("dynamo:\n  shim:\n    backends:\n", n, func(i int) string {
				return fmt.Sprintf("      - b%d\n", i)
			})
		}},
		{"model_map", "dynamo.shim.model_map", "at most 1024", config.MaxModelMapEntries, func(n int) string {
			return yamlList("dynamo:\n  shim:\n    model_map:\n", n, func(i int) string {
				return fmt.Sprintf("      m%d: M%d\n", i, i)
			})
		}},
		{"direct_allow_cidrs", "dynamo.load.direct_allow_cidrs", "at most 64", config.MaxDirectAllowCIDRs, func(n int) string {
			return yamlList("dynamo:\n  load:\n    direct_allow_cidrs:\n", n, func(i int) string {
				return fmt.Sprintf("      - \"10.%d.0.0/16\"\n", i)
			})
		}},
		{"kubernetes components", "dynamo.discovery.kubernetes.models", "at most 256", config.MaxKubeComponents, func(n int) string {
			return yamlList("dynamo:\n  discovery:\n    source: kubernetes_pods\n    kubernetes:\n      namespace: d\n      dynamo_namespace: g\n      models:\n", n, func(i int) string {
				return fmt.Sprintf("        - {component: c%d, model: m}\n", i)
			})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if doc := parse(t, tt.build(tt.limit)); hasFinding(doc, config.SeverityError, tt.path, tt.substr) {
				t.Errorf("at the limit (%d): unexpected error", tt.limit)
			}
			if doc := parse(t, tt.build(tt.limit+1)); !hasFinding(doc, config.SeverityError, tt.path, tt.substr) {
				t.Errorf("past the limit (%d): no error %q at %s; got %v", tt.limit+1, tt.substr, tt.path, doc.Findings)
			}
		})
	}
}

func TestStalenessBounds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		value string
		ok    bool
	}{{"100ms", true}, {"99ms", false}, {"5m", true}, {"5m0.001s", false}, {"3s", true}} {
		doc := parse(t, "dynamo:\n  load:\n    max_staleness: \""+tt.value+"\"\n")
		if got := !hasFinding(doc, config.SeverityError, "dynamo.load.max_staleness", "out of range"); got != tt.ok {
			t.Errorf("max_staleness %s: ok=%v, want %v", tt.value, got, tt.ok)
		}
	}
}

func TestEventBusBudget(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		streams int
		budget  int64
		ok      bool
	}{{1024, 64 << 20, true}, {1024, 64<<20 - 1, false}, {1, 64 << 10, true}, {1, 64<<10 - 1, false}} {
		doc := parse(t, fmt.Sprintf("dynamo:\n  event_bus:\n    max_streams_per_session: %d\n    max_session_buffer_bytes: %d\n", tt.streams, tt.budget))
		if got := !hasFinding(doc, config.SeverityError, "dynamo.event_bus.max_session_buffer_bytes", "below"); got != tt.ok {
			t.Errorf("streams %d budget %d: ok=%v, want %v", tt.streams, tt.budget, got, tt.ok)
		}
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c := parse(t, "").Config
	d := c.Dynamo
	checks := []struct {
		name      string
		got, want any
	}{
		{"source", d.Discovery.Source, "etcd"},
		{"namespace", d.Discovery.Etcd.Namespace, "dynamo"},
		{"backoff initial", d.Discovery.Etcd.WatchReconnectBackoff.Initial.String(), "500ms"},
		{"backoff max", d.Discovery.Etcd.WatchReconnectBackoff.Max.String(), "30s"},
		{"k8s backoff max", d.Discovery.Kubernetes.WatchReconnectBackoff.Max.String(), "30s"},
		{"max_staleness", d.Load.MaxStaleness.String(), "3s"},
		{"transport", d.Load.Transport, "direct"},
		{"legacy_pin_headers", d.Shim.LegacyPinHeaders, true},
		{"allow_http_artifacts", d.KV.AllowHTTPArtifacts, true},
		{"allow_hf_artifacts", d.KV.AllowHFArtifacts, false},
		{"overlap_score_credit", d.KV.OverlapScoreCredit, 1.0},
		{"prefill_load_scale", d.KV.PrefillLoadScale, 1.0},
		{"router_temperature", d.KV.RouterTemperature, 0.0},
		{"send_token_data", d.KV.SendTokenData, false},
		{"conditional", d.KV.ConditionalDisaggregation.Enabled, false},
		{"max_sessions", d.EventBus.MaxSessions, 64},
		{"max_streams_per_session", d.EventBus.MaxStreamsPerSession, 1024},
		{"max_session_buffer_bytes", d.EventBus.MaxSessionBufferBytes, int64(67108864)},
		{"heartbeat", d.EventBus.HeartbeatInterval.String(), "10s"},
		{"idle", d.EventBus.IdleTimeout.String(), "30s"},
		{"dynamo enabled", d.Enabled, false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	b := parse(t, "backends: [{name: a, url: \"http://a:1\"}]\n").Config.Backends[0]
	if b.Type != "openai" || b.Role != "unified" || !b.Enabled || b.Timeout.D() <= 0 {
		t.Errorf("backend defaults: %+v", b)
	}
	br := parse(t, "dynamo: {event_bus: {brokers: [{id: a}]}}\n").Config.Dynamo.EventBus.Brokers[0]
	if br.Role != "broker" {
		t.Errorf("broker role default = %q", br.Role)
	}
}

func TestUnreadable(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"a: [", "\t- x", "a: b: c", "{"} {
		if _, err := config.Parse("bad.yaml", []byte(in), config.Options{}); err == nil {
			t.Errorf("%q: parsed without error", in)
		}
	}
	if _, err := config.Load(filepath.Join(t.TempDir(), "missing.yaml"), config.Options{}); err == nil {
		t.Error("missing file: no error")
	}
}

func TestAliasBomb(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("x-0: &m0 {name: a}\n")
	for i := 1; i < 12; i++ {
		fmt.Fprintf(&b, "x-%d: &m%d {<<: [", i, i)
		for j := range 9 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*m%d", i-1)
		}
		b.WriteString("]}\n")
	}
	b.WriteString("backends:\n  - <<: *m11\n")
	_, err := config.Parse("bomb.yaml", []byte(b.String()), config.Options{})
	if err == nil || !strings.Contains(err.Error(), "YAML nodes") {
		t.Fatalf("an alias bomb: err = %v", err)
	}
}

func TestMergeKeysAndScalars(t *testing.T) {
	t.Parallel()
	doc, err := config.Load("../../testdata/config/valid/anchors-override.yaml", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := doc.Config.Backends[0]
	if b.Timeout.String() != "10s" || b.Role != "prefill" || b.Type != "openai" || b.Name != "a" {
		t.Errorf("merge precedence: %+v", b)
	}
	doc, err = config.Load("../../testdata/config/invalid/merge.yaml", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := doc.Config
	if c.Dynamo.EventBus.MaxSessions != 10 {
		t.Errorf("010 read as %d, want decimal 10", c.Dynamo.EventBus.MaxSessions)
	}
	if !c.Backends[2].Enabled || c.Backends[2].URL != "HTTP://c:8000" {
		t.Errorf("True / HTTP:// not accepted: %+v", c.Backends[2])
	}
}

func TestFindingsAreBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100_000)
	var b strings.Builder
	b.WriteString("x-v: &v \"" + long + "\"\nbackends:\n")
	for range 2000 {
		b.WriteString("  - {name: *v, url: *v, role: *v}\n")
	}
	doc := parse(t, b.String())
	if n := len(doc.Findings); n > config.MaxFindings+1 {
		t.Errorf("%d findings, want at most %d", n, config.MaxFindings+1)
	}
	size := 0
	for _, f := range doc.Findings {
		size += len(f.Message) + len(f.Path)
	}
	if size > (config.MaxFindings+1)*2200 {
		t.Errorf("findings hold %d bytes", size)
	}
	if last := doc.Findings[len(doc.Findings)-1]; !strings.Contains(last.Message, "more findings are not shown") {
		t.Errorf("no summary finding: %s", last)
	}
}

func TestLegacyPinHeadersOff(t *testing.T) {
	doc := parse(t, "dynamo:\n  shim:\n    legacy_pin_headers: false\n")
	if doc.Config.Dynamo.Shim.LegacyPinHeaders || doc.Findings.Errors() != 0 {
		t.Errorf("legacy_pin_headers %v, findings %v", doc.Config.Dynamo.Shim.LegacyPinHeaders, doc.Findings)
	}
}

// TestLoadBlocksDefaults: busy_threshold and queue are off unless present;
// present, each starts from its defaults.
func TestLoadBlocksDefaults(t *testing.T) {
	t.Parallel()
	if l := parse(t, "dynamo: {load: {busy_threshold: null}}").Config.Dynamo.Load; l.BusyThreshold != nil || l.Queue != nil {
		t.Fatalf("absent blocks are set: %+v", l)
	}
	doc := parse(t, "dynamo: {load: {busy_threshold: {kv_blocks: 0.9}, queue: {}}}")
	l := doc.Config.Dynamo.Load
	if b := l.BusyThreshold; b == nil || b.KVBlocks == nil || *b.KVBlocks != 0.9 || b.PrefillTokens != nil || b.Hysteresis != config.DefaultBusyHysteresis {
		t.Fatalf("busy threshold %+v", b)
	}
	if q := l.Queue; q == nil || q.Size != config.DefaultQueueSize || q.MaxWait.D() != config.DefaultQueueMaxWait {
		t.Fatalf("queue %+v", q)
	}
	if doc.Findings.Errors() != 0 {
		t.Fatalf("findings %v", doc.Findings)
	}
}

// TestServerLimits: the listener's timeouts, sizes and limits have bounds,
// and server.tls needs both files.
func TestServerLimits(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		yaml, path, substr string
	}{
		{"read_header_timeout: 50ms", "server.read_header_timeout", "out of range"},
		{"read_timeout: 2h", "server.read_timeout", "out of range"},
		{"idle_timeout: 0s", "server.idle_timeout", "out of range"},
		{"write_timeout: 0s", "server.write_timeout", "out of range"},
		{"max_header_bytes: 1024", "server.max_header_bytes", "out of range"},
		{"max_body_bytes: 2147483648", "server.max_body_bytes", "out of range"},
		{"max_connections: 0", "server.max_connections", "out of range"},
		{"max_in_flight: 0", "server.max_in_flight", "at least 1"},
		{"tls: {cert: c.pem}", "server.tls.key", "private key"},
		{"tls: {key: k.pem}", "server.tls.cert", "certificate"},
	} {
		doc := parse(t, "server:\n  "+tt.yaml+"\n")
		if !hasFinding(doc, config.SeverityError, tt.path, tt.substr) {
			t.Errorf("%s: no error %q at %s; got %v", tt.yaml, tt.substr, tt.path, doc.Findings)
		}
	}
	ok := parse(t, "server:\n  read_header_timeout: 5s\n  read_timeout: 30s\n  idle_timeout: 1m\n  max_header_bytes: 65536\n  max_body_bytes: 1048576\n  max_connections: 100\n  max_in_flight: 50\n  tls: {cert: c.pem, key: k.pem}\n")
	if n := ok.Findings.Errors(); n != 0 {
		t.Errorf("valid listener settings: %v", ok.Findings)
	}
	if ok.Config.Masked().Server.TLS.Key != config.Mask {
		t.Error("server.tls.key is not masked")
	}
	warn := parse(t, "server:\n  read_header_timeout: 20s\n  read_timeout: 10s\n")
	if !hasFinding(warn, config.SeverityWarning, "server.read_timeout", "shorter") {
		t.Errorf("read_timeout under read_header_timeout: %v", warn.Findings)
	}
}

// TestEventBusAdvisories: a running bus that nothing uses, a kv_listener
// whose announced backends nothing reads, and a watched namespace no
// broker may declare are warnings.
func TestEventBusAdvisories(t *testing.T) {
	const bus = `dynamo:
  enabled: true
  discovery: {etcd: {endpoints: ["http://e:2379"], namespaces: [a, b]}}
  load: {transport: %s}
  event_bus:
    enabled: true
    tls: {cert: c, key: k}
    brokers:
      - {id: broker-a, token_hash: "sha256:%s", namespaces: [a]}
%s`
	hash := strings.Repeat("0", 64)
	doc := parse(t, fmt.Sprintf(bus, "broker", hash, ""))
	if !hasFinding(doc, config.SeverityWarning, "dynamo.event_bus.brokers", `no broker may declare namespace "b"`) ||
		hasFinding(doc, config.SeverityWarning, "dynamo.event_bus.brokers", `namespace "a"`) {
		t.Errorf("uncovered namespace: %v", doc.Findings)
	}
	doc = parse(t, fmt.Sprintf(bus, "direct", hash, ""))
	if !hasFinding(doc, config.SeverityWarning, "dynamo.event_bus.enabled", "no subscription goes through a broker") {
		t.Errorf("unused bus: %v", doc.Findings)
	}
	doc = parse(t, fmt.Sprintf(bus, "broker", hash, `      - {id: kv-a, role: kv_listener, token_hash: "sha256:`+hash+`", backends: [v]}`+"\n"))
	if !hasFinding(doc, config.SeverityWarning, "dynamo.event_bus.brokers[1]", "stays idle") {
		t.Errorf("idle kv_listener: %v", doc.Findings)
	}
}

// TestExternalEtcdEndpoint: with direct load subscriptions, an etcd
// endpoint that looks outside the cluster is warned about (the router
// then probably cannot reach the workers' pod addresses); in-cluster
// names and private addresses are not, nor is any endpoint under the
// broker transport.
func TestExternalEtcdEndpoint(t *testing.T) {
	t.Parallel()
	const path = "dynamo.discovery.etcd.endpoints[0]"
	for _, tc := range []struct {
		endpoint  string
		transport string
		warn      bool
	}{
		{"http://203.0.113.7:2379", "direct", true},
		{"https://etcd.example.com:2379", "direct", true},
		{"[2001:db8::1]:2379", "direct", true},
		{"http://etcd.example.com:2379", "broker", false},
		{"http://etcd.dynamo.svc:2379", "direct", false},
		{"http://etcd.dynamo.svc.cluster.local:2379", "direct", false},
		{"http://etcd:2379", "direct", false},
		{"http://localhost:2379", "direct", false},
		{"http://10.1.2.3:2379", "direct", false},
		{"http://100.64.0.9:2379", "direct", false},
		{"http://[fd00::1]:2379", "direct", false},
		{"http://etcd.cluster.local:2379", "direct", false},
		{"http://etcd.dynamo:2379", "direct", false},                 // a Service and its namespace
		{"http://etcd-0.etcd-headless.dynamo:2379", "direct", false}, // a pod of a headless Service
		{"http://etcd.corp.internal:2379", "direct", false},
		{"http://etcd.mycompany.io:2379", "direct", true},
		{"http://etcd.example.co.uk:2379", "direct", true},
		// A namespace named like a public top-level domain looks like one;
		// its svc form does not (the warning says so).
		{"http://etcd.prod:2379", "direct", true},
		{"http://etcd.prod.svc:2379", "direct", false},
	} {
		doc := parse(t, fmt.Sprintf(`dynamo:
  enabled: true
  discovery: {etcd: {endpoints: [%q]}}
  load: {transport: %s, direct_allow_cidrs: ["10.0.0.0/8"]}
  event_bus: {enabled: %v}
`, tc.endpoint, tc.transport, tc.transport == "broker"))
		if got := hasFinding(doc, config.SeverityWarning, path, "looks outside the cluster"); got != tc.warn {
			t.Errorf("%s with %s transport: warned %v, want %v; findings %v", tc.endpoint, tc.transport, got, tc.warn, doc.Findings)
		}
		if tc.warn && !hasFinding(doc, config.SeverityWarning, path, "etcd.prod.svc") {
			t.Errorf("%s: the warning does not say how to write an in-cluster name: %v", tc.endpoint, doc.Findings)
		}
	}
}

// TestQuestionableButValid: a repeated etcd endpoint, auth without a
// username and a zero initial backoff are valid configuration, so a CI
// `config validate` passes them, but each gets a warning; negative
// durations and a max below initial stay errors.
func TestQuestionableButValid(t *testing.T) {
	t.Parallel()
	const etcd = "dynamo.discovery.etcd"
	for _, tc := range []struct {
		name, yaml    string
		sev           config.Severity
		path, message string
	}{
		{"duplicate endpoint", `{endpoints: ["a:1", "b:1", "a:1"]}`,
			config.SeverityWarning, etcd + ".endpoints[2]", `endpoint "a:1" is listed twice`},
		{"auth without username", `{endpoints: ["https://a:1"], tls: {ca_cert: "/ca.pem"}, auth: {password: "pw"}}`,
			config.SeverityWarning, etcd + ".auth.username", "auth needs a username"},
		{"zero initial", `{endpoints: ["a:1"], watch_reconnect_backoff: {initial: 0s, max: 1s}}`,
			config.SeverityWarning, etcd + ".watch_reconnect_backoff.initial", "waits at least 1ms"},
		{"zero initial and max", `{endpoints: ["a:1"], watch_reconnect_backoff: {initial: 0s, max: 0s}}`,
			config.SeverityWarning, etcd + ".watch_reconnect_backoff.initial", "waits at least 1ms"},
		{"negative initial", `{endpoints: ["a:1"], watch_reconnect_backoff: {initial: -1s, max: 1s}}`,
			config.SeverityError, etcd + ".watch_reconnect_backoff.initial", "must not be negative"},
		{"max below initial", `{endpoints: ["a:1"], watch_reconnect_backoff: {initial: 2s, max: 1s}}`,
			config.SeverityError, etcd + ".watch_reconnect_backoff.max", "must be at least initial"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := parse(t, `dynamo:
  enabled: true
  discovery: {etcd: `+tc.yaml+`}
  load: {direct_allow_cidrs: ["10.0.0.0/8"]}
`)
			if !hasFinding(doc, tc.sev, tc.path, tc.message) {
				t.Fatalf("no %s at %s saying %q; findings %v", tc.sev, tc.path, tc.message, doc.Findings)
			}
			if tc.sev == config.SeverityWarning && doc.Findings.Errors() > 0 {
				t.Errorf("errors in a valid file: %v", doc.Findings)
			}
		})
	}
}

// TestKubernetesZeroBackoff: the Kubernetes sources' backoff follows the
// same rules as etcd's.
func TestKubernetesZeroBackoff(t *testing.T) {
	t.Parallel()
	doc := parse(t, `dynamo:
  enabled: true
  discovery:
    source: kubernetes
    kubernetes: {namespace: dynamo, dynamo_namespace: dynamo, watch_reconnect_backoff: {initial: 0s, max: 1s}}
  load: {direct_allow_cidrs: ["10.0.0.0/8"]}
`)
	if doc.Findings.Errors() > 0 || !hasFinding(doc, config.SeverityWarning, "dynamo.discovery.kubernetes.watch_reconnect_backoff.initial", "waits at least 1ms") {
		t.Errorf("findings %v", doc.Findings)
	}
}

// TestBrokerIDs: a broker id is compared with a client certificate's DNS
// SAN, so it must be a lowercase DNS name: dot-separated labels of at most
// 63 letters, digits and '-', none empty, none starting or ending with '-'.
func TestBrokerIDs(t *testing.T) {
	t.Parallel()
	const path = "dynamo.event_bus.brokers[0].id"
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"broker-a.dynamo", true},
		{"kv-listener-a", true},
		{"b", true},
		{"0.dynamo.svc", true},
		{strings.Repeat("a", 63) + ".dynamo", true},
		{"a..b", false},
		{".dynamo", false},
		{"broker-a.", false},
		{"a.-b", false},
		{"a-.b", false},
		{"Broker-A", false},
		{"*.dynamo", false},
		{"broker_a", false},
		{strings.Repeat("a", 64) + ".dynamo", false},
		{strings.Repeat("a.", 127) + "a", false}, // 255 bytes
	} {
		t.Run(tc.id, func(t *testing.T) {
			t.Parallel()
			doc := parse(t, fmt.Sprintf("dynamo:\n  event_bus:\n    brokers:\n      - {id: %q, token_hash: \"sha256:%s\", namespaces: [dynamo]}\n", tc.id, strings.Repeat("0", 64)))
			if bad := hasFinding(doc, config.SeverityError, path, "lowercase DNS name"); bad == tc.ok {
				t.Errorf("id %q: refused = %v, want %v (%v)", tc.id, bad, !tc.ok, doc.Findings)
			}
		})
	}
}

// TestUnsetEnvWarns: a ${VAR} whose variable is not set is an error by
// default (serving would use a wrong value); with UnsetEnvWarns it is a
// warning, the value stays at its default, and no rule judges the
// placeholder (no "needs a url" after the url's variable was missing).
// A malformed reference stays an error either way.
func TestUnsetEnvWarns(t *testing.T) {
	t.Parallel()
	const text = `backends:
  - name: fe
    url: "http://${FE_HOST}:8000"
dynamo:
  discovery:
    etcd:
      endpoints: ["http://etcd:2379"]
      auth: {username: router, password: "${ETCD_PASSWORD}"}
  event_bus:
    tls: {key: "${1BAD}"}
`
	strict, err := config.Parse("test.yaml", []byte(text), config.Options{Env: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if !hasFinding(strict, config.SeverityError, "dynamo.discovery.etcd.auth.password", "ETCD_PASSWORD is not set") ||
		!hasFinding(strict, config.SeverityError, "backends[0].url", "FE_HOST is not set") {
		t.Errorf("strict: %v", strict.Findings)
	}
	lenient, err := config.Parse("test.yaml", []byte(text), config.Options{Env: envOf(nil), UnsetEnvWarns: true})
	if err != nil {
		t.Fatal(err)
	}
	if !hasFinding(lenient, config.SeverityWarning, "dynamo.discovery.etcd.auth.password", "ETCD_PASSWORD is not set here") ||
		!hasFinding(lenient, config.SeverityWarning, "backends[0].url", "FE_HOST is not set here") ||
		!hasFinding(lenient, config.SeverityWarning, "dynamo.discovery.etcd.auth", "plaintext") ||
		!hasFinding(lenient, config.SeverityError, "dynamo.event_bus.tls.key", `invalid variable name in the '${...}' at byte 1`) {
		t.Errorf("lenient: %v", lenient.Findings)
	}
	if n := lenient.Findings.Errors(); n != 1 {
		t.Errorf("lenient: %d errors, want only the malformed reference: %v", n, lenient.Findings)
	}
	if p := lenient.Config.Dynamo.Discovery.Etcd.Auth.Password; p != "" {
		t.Errorf("password %q, want the default", p)
	}
	set, err := config.Parse("test.yaml", []byte(text), config.Options{Env: envOf(map[string]string{"FE_HOST": "fe", "ETCD_PASSWORD": "pw"}), UnsetEnvWarns: true})
	if err != nil {
		t.Fatal(err)
	}
	if set.Findings.Warnings() != 1 || set.Config.Backends[0].URL != "http://fe:8000" || set.Config.Dynamo.Discovery.Etcd.Auth.Password != "pw" {
		t.Errorf("set: %v %+v", set.Findings, set.Config.Backends)
	}
}

// TestBusListenCollision: a listen port that collides with
// server.bind_address is refused when the bus is enabled, and when the file
// writes it even with the bus off; the default bus port is judged only
// while the bus runs, written or not.
func TestBusListenCollision(t *testing.T) {
	t.Parallel()
	const path = "dynamo.event_bus.listen"
	for _, tc := range []struct {
		name, yaml string
		refused    bool
	}{
		{"enabled", "server: {bind_address: \"0.0.0.0:7443\"}\ndynamo: {event_bus: {enabled: true, tls: {cert: c, key: k}}}\n", true},
		{"written while off", "server: {bind_address: \"0.0.0.0:9000\"}\ndynamo: {event_bus: {listen: \"0.0.0.0:9000\"}}\n", true},
		{"default while off", "server: {bind_address: \"0.0.0.0:7443\"}\n", false},
		// As config show prints that file: every default written out.
		{"default written while off", "server: {bind_address: \"0.0.0.0:7443\"}\ndynamo: {event_bus: {enabled: false, listen: \"0.0.0.0:7443\"}}\n", false},
		{"other port", "server: {bind_address: \"0.0.0.0:8080\"}\ndynamo: {event_bus: {listen: \"0.0.0.0:7443\"}}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := parse(t, tc.yaml)
			if got := hasFinding(doc, config.SeverityError, path, "collides with server.bind_address"); got != tc.refused {
				t.Errorf("refused = %v, want %v: %v", got, tc.refused, doc.Findings)
			}
		})
	}
}

// TestFileRootFromDynamoEnv: the file source's root defaults to Dynamo's
// DYN_FILE_KV when it is set (where Dynamo's processes keep their store),
// else $TMPDIR/dynamo_store_kv; a root the file writes wins over both.
func TestFileRootFromDynamoEnv(t *testing.T) {
	t.Parallel()
	const src = "dynamo:\n  enabled: true\n  discovery:\n    source: file\n"
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		want       string
	}{
		{"unset", src, nil, filepath.Join(os.TempDir(), "dynamo_store_kv")},
		{"empty", src, map[string]string{"DYN_FILE_KV": ""}, filepath.Join(os.TempDir(), "dynamo_store_kv")},
		{"set", src, map[string]string{"DYN_FILE_KV": "/srv/dyn"}, "/srv/dyn"},
		{"written", src + "    file:\n      root: /data/kv\n", map[string]string{"DYN_FILE_KV": "/srv/dyn"}, "/data/kv"},
	} {
		doc, err := config.Parse("test.yaml", []byte(tc.yaml), config.Options{Env: envOf(tc.env)})
		if err != nil {
			t.Fatal(err)
		}
		if n := doc.Findings.Errors(); n > 0 {
			t.Fatalf("%s: %d errors: %v", tc.name, n, doc.Findings)
		}
		if got := doc.Config.Dynamo.Discovery.File.Root; got != tc.want {
			t.Errorf("%s: root %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := config.DefaultFor(envOf(map[string]string{"DYN_FILE_KV": "/srv/dyn"})).Dynamo.Discovery.File.Root; got != "/srv/dyn" {
		t.Errorf("DefaultFor: root %q", got)
	}
}

// TestMaskIsNoSecret: a file whose secrets read as the mask (saved from
// config show) is refused, each masked secret an error at its key; an
// admin import (MaskedSecrets), whose masked secrets keep running values,
// is not.
func TestMaskIsNoSecret(t *testing.T) {
	t.Parallel()
	const text = `admin:
  token: "********"
backends:
  - name: a
    type: openai
    url: http://a.example:8000
    role: unified
    api_key: "********"
`
	doc := parse(t, text)
	for _, path := range []string{"admin.token", "backends[0].api_key"} {
		if !hasFinding(doc, config.SeverityError, path, "not a secret") {
			t.Errorf("%s: no error for the mask: %v", path, doc.Findings)
		}
	}
	imported, err := config.Parse("admin import", []byte(text), config.Options{Env: envOf(nil), NoEnvRefs: true, MaskedSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := imported.Findings.Errors(); n != 0 {
		t.Errorf("an import's masked secrets: %v", imported.Findings)
	}
}

// TestFindingsQuoteNoSecret: a finding about a malformed value quotes no
// part of it where it may be a secret: a password holding "${" by chance,
// a URL's credentials.
func TestFindingsQuoteNoSecret(t *testing.T) {
	t.Parallel()
	doc := parse(t, `admin:
  token: "wX7!pL2${secretTAIL"
backends:
  - name: a
    type: openai
    url: "htps://user:sk-live-SECRET@api.example.com"
    role: unified
  - name: b
    type: openai
    url: "http://user:sk-live-SECRET@api.example.com:8000/%zz"
    role: unified
`)
	if len(doc.Findings) == 0 {
		t.Fatal("no findings")
	}
	for _, f := range doc.Findings {
		if s := f.String(); strings.Contains(s, "secretTAIL") || strings.Contains(s, "sk-live-SECRET") {
			t.Errorf("a finding quotes a secret: %s", s)
		}
	}
}

// TestFindingsCapKeepsErrors: past MaxFindings a file that breaks no rule
// stays valid (what is left out is warnings, summed up in a warning), and
// an error found after the cap is full of warnings takes a warning's place
// rather than hiding behind them.
func TestFindingsCapKeepsErrors(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("backends:\n")
	for i := range config.MaxFindings + 10 {
		// role: decode is valid and warned about (never routed to).
		fmt.Fprintf(&b, "  - {name: b%d, url: \"http://b%d:8000\", role: decode}\n", i, i)
	}
	warned := parse(t, b.String())
	if n := warned.Findings.Errors(); n != 0 || warned.Findings.Warnings() != config.MaxFindings+1 {
		t.Fatalf("%d errors and %d warnings in a file that breaks no rule; the last: %v",
			n, warned.Findings.Warnings(), warned.Findings[len(warned.Findings)-1])
	}
	if last := warned.Findings[len(warned.Findings)-1]; !strings.Contains(last.Message, "10 more warnings are not shown") {
		t.Errorf("summary %v", last)
	}
	b.WriteString("  - {name: bad, url: \"ftp://x\"}\n")
	failed := parse(t, b.String())
	if !hasFinding(failed, config.SeverityError, fmt.Sprintf("backends[%d].url", config.MaxFindings+10), "") {
		t.Errorf("the error after %d warnings is not shown: %d errors", config.MaxFindings, failed.Findings.Errors())
	}
}

// TestFindingsQuoteNoSecrets: a block that holds a secret written as a
// single value is refused without quoting the value.
func TestFindingsQuoteNoSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, secret string }{
		{"api_keys: [\"sk-live-0123456789abcdef\"]\n", "sk-live-0123456789abcdef"},
		{"dynamo:\n  discovery:\n    etcd:\n      auth: \"router:hunter2-secret\"\n", "hunter2-secret"},
		{"admin: \"admin-token-s3cret\"\n", "admin-token-s3cret"},
	} {
		doc := parse(t, tc.yaml)
		if doc.Findings.Errors() == 0 {
			t.Fatalf("%q: no error", tc.yaml)
		}
		for _, f := range doc.Findings {
			if strings.Contains(f.String(), tc.secret) {
				t.Errorf("the finding quotes the secret: %s", f)
			}
		}
	}
}
