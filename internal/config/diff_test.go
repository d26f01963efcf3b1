package config_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/config"
)

const diffBase = `
backends:
  - {name: fe, url: "http://fe:8000"}
  - {name: fe2, url: "http://fe2:8000"}
disaggregated_serving: {enabled: true}
dynamo:
  enabled: true
  discovery:
    etcd:
      endpoints: ["http://etcd-0:2379"]
      namespaces: [prod, canary]
  load:
    direct_allow_cidrs: ["10.0.0.0/8"]
  shim:
    pools:
      - {namespace: prod, backends: [fe]}
      - {namespace: canary, backends: [fe2]}
`

// busyBase is diffBase with a busy threshold and a queue.
var busyBase = strings.Replace(diffBase, `direct_allow_cidrs: ["10.0.0.0/8"]`, `direct_allow_cidrs: ["10.0.0.0/8"]
    busy_threshold: {kv_blocks: 0.9}
    queue: {size: 8}`, 1)

const podsBase = `
dynamo:
  enabled: true
  discovery:
    source: kubernetes_pods
    kubernetes:
      namespace: dynamo
      dynamo_namespaces: [a, b]
      models:
        - {component: W, model: m1, dynamo_namespace: a}
        - {component: W, model: m2, dynamo_namespace: b}
`

func mutate(t *testing.T, base string, edit func(*config.Config)) (*config.Config, *config.Config) {
	t.Helper()
	oldCfg := parse(t, base).Config
	newCfg := parse(t, base).Config
	edit(newCfg)
	return oldCfg, newCfg
}

// TestDiffTiers: each kind of change takes effect in its tier; a change
// under dynamo.discovery restarts the watcher only when the running source
// reads that field, with the reason, restart count, kept snapshot and
// pruned namespaces a reload acts on (for the etcd and both Kubernetes
// sources).
func TestDiffTiers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		base   string
		edit   func(*config.Config)
		tier   config.Tier // of the first change
		subs   bool
		reason string // "" = no watcher restart
		count  bool
		keep   bool
		prune  []string
	}{
		{"max_staleness is immediate", diffBase, func(c *config.Config) { c.Dynamo.Load.MaxStaleness = config.Duration(5e9) }, config.TierImmediate, false, "", false, false, nil},
		{"shim pools are immediate", diffBase, func(c *config.Config) { c.Dynamo.Shim.Pools[0].Backends = []string{"fe", "fe2"} }, config.TierImmediate, false, "", false, false, nil},
		{"model_map is immediate", diffBase, func(c *config.Config) { c.Dynamo.Shim.ModelMap = map[string]string{"a": "b"} }, config.TierImmediate, false, "", false, false, nil},
		{"busy threshold set is immediate", diffBase, func(c *config.Config) { c.Dynamo.Load.BusyThreshold = &config.BusyThreshold{KVBlocks: ptr(0.9)} }, config.TierImmediate, false, "", false, false, nil},
		{"busy threshold value is immediate", busyBase, func(c *config.Config) { c.Dynamo.Load.BusyThreshold.Hysteresis = 0.1 }, config.TierImmediate, false, "", false, false, nil},
		{"queue is immediate", busyBase, func(c *config.Config) { c.Dynamo.Load.Queue.MaxWait = config.Duration(2e9) }, config.TierImmediate, false, "", false, false, nil},
		{"kv is immediate", diffBase, func(c *config.Config) { c.Dynamo.KV.RouterTemperature = 0.5 }, config.TierImmediate, false, "", false, false, nil},
		{"event bus is immediate", diffBase, func(c *config.Config) { c.Dynamo.EventBus.MaxSessions = 8 }, config.TierImmediate, false, "", false, false, nil},
		{"a disabled event bus's address is immediate", diffBase, func(c *config.Config) { c.Dynamo.EventBus.Listen = "0.0.0.0:7444" }, config.TierImmediate, false, "", false, false, nil},
		{"a running event bus's address rebinds", diffBase + "  event_bus: {enabled: true, tls: {cert: c, key: k}}\n", func(c *config.Config) { c.Dynamo.EventBus.Listen = "0.0.0.0:7444" }, config.TierRebind, false, "", false, false, nil},
		{"transport restarts subscriptions", diffBase, func(c *config.Config) { c.Dynamo.Load.Transport = "broker" }, config.TierSubscriptionRestart, true, "", false, false, nil},
		{"cidrs restart subscriptions", diffBase, func(c *config.Config) { c.Dynamo.Load.DirectAllowCIDRs = nil }, config.TierSubscriptionRestart, true, "", false, false, nil},
		{"disabling", diffBase, func(c *config.Config) { c.Dynamo.Enabled = false }, config.TierWatcherRestart, false, "enabled", false, false, nil},
		{"enabling", "dynamo: {discovery: {etcd: {endpoints: [\"etcd:2379\"]}}}", func(c *config.Config) { c.Dynamo.Enabled = true }, config.TierWatcherRestart, false, "enabled", true, false, nil},
		{"endpoints", diffBase, func(c *config.Config) { c.Dynamo.Discovery.Etcd.Endpoints = []string{"http://etcd-1:2379"} }, config.TierWatcherRestart, false, "connection", true, false, nil},
		{"tls", diffBase, func(c *config.Config) { c.Dynamo.Discovery.Etcd.TLS = &config.EtcdTLS{CACert: "ca.pem"} }, config.TierWatcherRestart, false, "connection", true, false, nil},
		{"auth", diffBase, func(c *config.Config) { c.Dynamo.Discovery.Etcd.Auth = &config.Auth{Username: "u"} }, config.TierWatcherRestart, false, "connection", true, false, nil},
		{"backoff keeps the snapshot", diffBase, func(c *config.Config) { c.Dynamo.Discovery.Etcd.WatchReconnectBackoff.Max = config.Duration(6e10) }, config.TierWatcherRestart, false, "backoff", true, true, nil},
		{"namespace scalar", "dynamo: {enabled: true}", func(c *config.Config) { c.Dynamo.Discovery.Etcd.Namespace = "other" }, config.TierWatcherRestart, false, "namespace", true, false, nil},
		{"namespaces pruned", diffBase, func(c *config.Config) { c.Dynamo.Discovery.Etcd.Namespaces = []string{"prod"} }, config.TierWatcherRestart, false, "namespaces", true, false, []string{"canary"}},
		{"namespaces added", diffBase, func(c *config.Config) { c.Dynamo.Discovery.Etcd.Namespaces = []string{"prod", "canary", "new"} }, config.TierWatcherRestart, false, "namespaces", true, false, nil},
		{"namespaces with endpoints is connection", diffBase, func(c *config.Config) {
			c.Dynamo.Discovery.Etcd.Namespaces = []string{"prod"}
			c.Dynamo.Discovery.Etcd.Endpoints = []string{"http://etcd-9:2379"}
		}, config.TierWatcherRestart, false, "connection", true, false, nil},
		{"source", diffBase, func(c *config.Config) { c.Dynamo.Discovery.Source = "file" }, config.TierWatcherRestart, false, "source", true, false, nil},
		{"inactive source block is inert", diffBase, func(c *config.Config) { c.Dynamo.Discovery.Kubernetes.Namespace = "x" }, config.TierImmediate, false, "", false, false, nil},
		{"discovery while disabled is inert", "dynamo: {enabled: false}", func(c *config.Config) { c.Dynamo.Discovery.Etcd.Endpoints = []string{"etcd:1"} }, config.TierImmediate, false, "", false, false, nil},
		{"kube namespace", podsBase, func(c *config.Config) { c.Dynamo.Discovery.Kubernetes.Namespace = "other" }, config.TierWatcherRestart, false, "namespace", true, false, nil},
		{"kube dynamo_namespace", "dynamo: {enabled: true, discovery: {source: kubernetes, kubernetes: {namespace: d, dynamo_namespace: g}}}", func(c *config.Config) { c.Dynamo.Discovery.Kubernetes.DynamoNamespace = "h" }, config.TierWatcherRestart, false, "namespace", true, false, nil},
		{"pods models", podsBase, func(c *config.Config) { c.Dynamo.Discovery.Kubernetes.Models[0].Model = "m9" }, config.TierWatcherRestart, false, "other", true, false, nil},
		{"pods models reordered", podsBase, func(c *config.Config) {
			m := c.Dynamo.Discovery.Kubernetes.Models
			m[0], m[1] = m[1], m[0]
		}, config.TierImmediate, false, "", false, false, nil},
		{"pods namespaces pruned with models kept", podsBase, func(c *config.Config) {
			c.Dynamo.Discovery.Kubernetes.DynamoNamespaces = []string{"a"}
			c.Dynamo.Discovery.Kubernetes.Models = c.Dynamo.Discovery.Kubernetes.Models[:1]
		}, config.TierWatcherRestart, false, "namespaces", true, false, []string{"b"}},
		{"pods namespaces with kept models changed", podsBase, func(c *config.Config) {
			c.Dynamo.Discovery.Kubernetes.DynamoNamespaces = []string{"a"}
			c.Dynamo.Discovery.Kubernetes.Models = []config.ComponentModel{{Component: "W", Model: "other", DynamoNamespace: "a"}}
		}, config.TierWatcherRestart, false, "other", true, false, nil},
		{"metadata source ignores models", "dynamo: {enabled: true, discovery: {source: kubernetes, kubernetes: {namespace: d, dynamo_namespace: g}}}", func(c *config.Config) { c.Dynamo.Discovery.Kubernetes.Model = "m" }, config.TierImmediate, false, "", false, false, nil},
		{"kube backoff", podsBase, func(c *config.Config) {
			c.Dynamo.Discovery.Kubernetes.WatchReconnectBackoff.Initial = config.Duration(1e9)
		}, config.TierWatcherRestart, false, "backoff", true, true, nil},
		{"server address rebinds", diffBase, func(c *config.Config) { c.Server.BindAddress = "0.0.0.0:9000" }, config.TierRebind, false, "", false, false, nil},
		{"reordered namespaces change nothing", diffBase, func(c *config.Config) { c.Dynamo.Discovery.Etcd.Namespaces = []string{"canary", "prod"} }, config.TierImmediate, false, "", false, false, nil},
		{"transport while disabled is inert", "dynamo: {enabled: false}", func(c *config.Config) { c.Dynamo.Load.Transport = "broker" }, config.TierImmediate, false, "", false, false, nil},
		{"backends are immediate", diffBase, func(c *config.Config) { c.Backends[0].Timeout = config.Duration(1e9) }, config.TierImmediate, false, "", false, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			oldCfg, newCfg := mutate(t, tt.base, tt.edit)
			plan := config.Diff(oldCfg, newCfg)
			if len(plan.Changes) == 0 {
				t.Fatal("no change detected")
			}
			if got := plan.Changes[0].Tier; got != tt.tier {
				t.Errorf("tier = %s, want %s (%+v)", got, tt.tier, plan.Changes)
			}
			if plan.RestartSubscriptions != tt.subs {
				t.Errorf("RestartSubscriptions = %v", plan.RestartSubscriptions)
			}
			w := plan.Watcher
			switch {
			case tt.reason == "" && w != nil:
				t.Fatalf("unexpected watcher restart %+v", *w)
			case tt.reason != "" && w == nil:
				t.Fatalf("no watcher restart, want reason %s", tt.reason)
			case w == nil:
				return
			}
			if w.Reason != tt.reason || w.CountRestart != tt.count || w.KeepSnapshot != tt.keep || !slices.Equal(w.Prune, tt.prune) {
				t.Errorf("watcher = %+v, want reason=%s count=%v keep=%v prune=%v", *w, tt.reason, tt.count, tt.keep, tt.prune)
			}
		})
	}
}

func TestDiffNoChange(t *testing.T) {
	t.Parallel()
	a, b := parse(t, diffBase).Config, parse(t, diffBase).Config
	if plan := config.Diff(a, b); len(plan.Changes) != 0 || plan.Watcher != nil {
		t.Errorf("identical configs differ: %+v", plan)
	}
}

func TestMasked(t *testing.T) {
	t.Parallel()
	doc := parse(t, `
admin: {token: adm}
backends: [{name: a, url: "http://a:1", api_key: sk-1}, {name: b, url: "http://b:1"}]
dynamo:
  discovery:
    etcd:
      endpoints: ["https://e:1"]
      tls: {ca_cert: ca.pem, client_cert: c.pem, client_key: k.pem}
      auth: {username: u, password: pw}
  event_bus: {tls: {cert: bus.crt, key: bus.key}}
`)
	m := doc.Config.Masked()
	checks := []struct{ name, got, want string }{
		{"admin token", m.Admin.Token, config.Mask},
		{"api_key", m.Backends[0].APIKey, config.Mask},
		{"empty api_key stays empty", m.Backends[1].APIKey, ""},
		{"client_key", m.Dynamo.Discovery.Etcd.TLS.ClientKey, config.Mask},
		{"password", m.Dynamo.Discovery.Etcd.Auth.Password, config.Mask},
		{"bus key", m.Dynamo.EventBus.TLS.Key, config.Mask},
		{"ca_cert shown", m.Dynamo.Discovery.Etcd.TLS.CACert, "ca.pem"},
		{"client_cert shown", m.Dynamo.Discovery.Etcd.TLS.ClientCert, "c.pem"},
		{"username shown", m.Dynamo.Discovery.Etcd.Auth.Username, "u"},
		{"original untouched", doc.Config.Dynamo.Discovery.Etcd.Auth.Password, "pw"},
		{"original api_key untouched", doc.Config.Backends[0].APIKey, "sk-1"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
}

// TestUnmask: a configuration read back masked takes the running secrets
// where it still reads the mask: backends by name (reordered or not),
// other secrets by path. A secret that was changed stays changed; a masked
// one with nothing behind it stays the mask.
func TestUnmask(t *testing.T) {
	running := parse(t, `
admin: {token: adm}
backends: [{name: a, url: "http://a:1", api_key: sk-a}, {name: b, url: "http://b:1", api_key: sk-b}]
dynamo:
  discovery:
    etcd:
      endpoints: ["https://e:1"]
      tls: {ca_cert: ca.pem, client_cert: c.pem, client_key: k.pem}
      auth: {username: u, password: pw}
`).Config
	imported := running.Masked()
	imported.Backends = []config.Backend{imported.Backends[1], imported.Backends[0],
		{Name: "new", URL: "http://n:1", APIKey: config.Mask}}
	imported.Dynamo.Discovery.Etcd.Auth.Password = "changed"
	filled := imported.Unmask(running)
	checks := []struct{ name, got, want string }{
		{"admin token", imported.Admin.Token, "adm"},
		{"reordered backend b", imported.Backends[0].APIKey, "sk-b"},
		{"reordered backend a", imported.Backends[1].APIKey, "sk-a"},
		{"new backend keeps the mask", imported.Backends[2].APIKey, config.Mask},
		{"client_key", imported.Dynamo.Discovery.Etcd.TLS.ClientKey, "k.pem"},
		{"changed password", imported.Dynamo.Discovery.Etcd.Auth.Password, "changed"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if want := []string{"admin.token", "backends[0].api_key", "backends[1].api_key", "dynamo.discovery.etcd.tls.client_key"}; !slices.Equal(filled, want) {
		t.Errorf("filled %v, want %v", filled, want)
	}
	if left := imported.StillMasked(); !slices.Equal(left, []string{"backends[2].api_key"}) {
		t.Errorf("still masked %v", left)
	}
	// A backend whose url changed keeps the mask: its running key is
	// never sent to another address by an import that did not give it.
	again := running.Masked()
	again.Backends[0].URL = "http://elsewhere:1"
	again.Unmask(running)
	if again.Backends[0].APIKey != config.Mask || again.Backends[1].APIKey != "sk-b" {
		t.Errorf("a backend moved elsewhere: keys %q, %q", again.Backends[0].APIKey, again.Backends[1].APIKey)
	}
	if left := again.StillMasked(); !slices.Equal(left, []string{"backends[0].api_key"}) {
		t.Errorf("still masked %v", left)
	}
}

func ptr[T any](v T) *T { return &v }
