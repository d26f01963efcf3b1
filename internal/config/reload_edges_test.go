package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/config"
)

// TestPoolBackendFlags: a shim pool's replica that is internal: true
// or enabled: false is warned about at its pool path, as a shim.backends
// entry is; a pool holds at most 64 backends.
func TestPoolBackendFlags(t *testing.T) {
	t.Parallel()
	doc := parse(t, `
backends:
  - {name: a, url: "http://a:1", internal: true}
  - {name: b, url: "http://b:1", enabled: false}
disaggregated_serving: {enabled: true}
dynamo:
  enabled: true
  discovery: {etcd: {endpoints: ["e:1"], namespaces: [p, q]}}
  load: {direct_allow_cidrs: ["10.0.0.0/8"]}
  shim:
    pools:
      - {namespace: p, backends: [a]}
      - {namespace: q, backends: [b]}
`)
	if !hasFinding(doc, config.SeverityWarning, "dynamo.shim.pools[0].backends[0]", "internal: true") {
		t.Errorf("no internal warning at the pool: %v", doc.Findings)
	}
	if !hasFinding(doc, config.SeverityWarning, "dynamo.shim.pools[1].backends[0]", "enabled: false") {
		t.Errorf("no enabled: false warning at the pool: %v", doc.Findings)
	}
	if doc.Findings.Errors() != 0 {
		t.Errorf("errors: %v", doc.Findings)
	}
	var b strings.Builder
	b.WriteString("backends:\n")
	for i := range 65 {
		fmt.Fprintf(&b, "  - {name: b%d, url: \"http://b%d:1\"}\n", i, i)
	}
	b.WriteString("dynamo:\n  discovery: {etcd: {namespaces: [p, q]}}\n  shim:\n    pools:\n      - namespace: q\n        backends: [b64]\n      - namespace: p\n        backends: [")
	for i := range 64 {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "b%d", i)
	}
	b.WriteString("]\n")
	if doc := parse(t, b.String()); hasFinding(doc, config.SeverityError, "dynamo.shim.pools[1].backends", "at most 64") {
		t.Errorf("64 backends in a pool refused")
	}
	over := strings.Replace(b.String(), "backends: [b64]", "backends: [b0]", 1)
	over = strings.Replace(over, "[b0, b1,", "[b64, b0, b1,", 1)
	if doc := parse(t, over); !hasFinding(doc, config.SeverityError, "dynamo.shim.pools[1].backends", "at most 64") {
		t.Errorf("65 backends in a pool accepted: %v", doc.Findings)
	}
}

// TestAuthPlaintextWarning: auth over a plaintext connection (no tls
// block, http:// or bare host:port endpoints) is a warning, not an error;
// over https:// or with a tls block there is none.
func TestAuthPlaintextWarning(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		eps, tls string
		warn     bool
	}{
		{`["http://e:2379"]`, "", true},
		{`["e:2379"]`, "", true},
		{`["https://e:2379"]`, "", false},
		{`["e:2379"]`, "tls: {ca_cert: ca.pem}", false},
		{`["https://e:2379"]`, "tls: {ca_cert: ca.pem}", false},
	} {
		y := fmt.Sprintf("dynamo:\n  enabled: true\n  discovery:\n    etcd:\n      endpoints: %s\n      auth: {username: u, password: p}\n", tt.eps)
		if tt.tls != "" {
			y += "      " + tt.tls + "\n"
		}
		doc := parse(t, y)
		if got := hasFinding(doc, config.SeverityWarning, "dynamo.discovery.etcd.auth", "clear text"); got != tt.warn {
			t.Errorf("%s %s: warning=%v, want %v: %v", tt.eps, tt.tls, got, tt.warn, doc.Findings)
		}
		if doc.Findings.Errors() != 0 {
			t.Errorf("%s %s: errors %v", tt.eps, tt.tls, doc.Findings)
		}
	}
}

// TestEndpointsCount: 1..16 endpoints only when dynamo is enabled
// with the etcd source; none is fine otherwise.
func TestEndpointsCount(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		y   string
		err bool
	}{
		{"dynamo: {enabled: true}", true},
		{"dynamo: {enabled: true, discovery: {etcd: {endpoints: []}}}", true},
		{"dynamo: {enabled: false}", false},
		{"dynamo: {enabled: true, discovery: {source: kubernetes, kubernetes: {namespace: d, dynamo_namespace: g}}}", false},
		{"dynamo: {enabled: true, discovery: {etcd: {endpoints: [\"e:1\"]}}}", false},
	} {
		doc := parse(t, tt.y)
		if got := hasFinding(doc, config.SeverityError, "dynamo.discovery.etcd.endpoints", "1 to 16"); got != tt.err {
			t.Errorf("%s: error=%v, want %v", tt.y, got, tt.err)
		}
	}
}

// TestNamespaceDefaultWithList: namespaces may stand beside the
// default namespace (written out, as config show does), not beside another.
func TestNamespaceDefaultWithList(t *testing.T) {
	t.Parallel()
	if doc := parse(t, "dynamo: {discovery: {etcd: {namespace: dynamo, namespaces: [a]}}}"); doc.Findings.Errors() != 0 {
		t.Errorf("default namespace beside namespaces: %v", doc.Findings)
	}
	if doc := parse(t, "dynamo: {discovery: {etcd: {namespace: x, namespaces: [x]}}}"); !hasFinding(doc, config.SeverityError, "dynamo.discovery.etcd.namespace", "exclusive") {
		t.Errorf("a non-default namespace beside namespaces: %v", doc.Findings)
	}
}

// TestDiffReasons: precedence and the remaining connection fields.
func TestDiffReasons(t *testing.T) {
	t.Parallel()
	base := `
dynamo:
  enabled: true
  discovery:
    etcd:
      endpoints: ["https://etcd-0:2379"]
      tls: {ca_cert: ca.pem, server_name: etcd}
      auth: {username: u, password: p}
`
	for _, tt := range []struct {
		name   string
		edit   func(*config.Config)
		reason string
		count  bool
		keep   bool
	}{
		{"server_name", func(c *config.Config) { c.Dynamo.Discovery.Etcd.TLS.ServerName = "other" }, "connection", true, false},
		{"password", func(c *config.Config) { c.Dynamo.Discovery.Etcd.Auth.Password = "q" }, "connection", true, false},
		{"backoff with endpoints", func(c *config.Config) {
			c.Dynamo.Discovery.Etcd.WatchReconnectBackoff.Max = config.Duration(6e10)
			c.Dynamo.Discovery.Etcd.Endpoints = []string{"https://etcd-1:2379"}
		}, "connection", true, false},
		{"backoff with namespace", func(c *config.Config) {
			c.Dynamo.Discovery.Etcd.WatchReconnectBackoff.Initial = config.Duration(1e9)
			c.Dynamo.Discovery.Etcd.Namespace = "other"
		}, "namespace", true, false},
		{"off with endpoints", func(c *config.Config) {
			c.Dynamo.Enabled = false
			c.Dynamo.Discovery.Etcd.Endpoints = []string{"https://etcd-1:2379"}
		}, "enabled", false, false},
		{"backoff with max_staleness", func(c *config.Config) {
			c.Dynamo.Discovery.Etcd.WatchReconnectBackoff.Initial = config.Duration(1e9)
			c.Dynamo.Load.MaxStaleness = config.Duration(1e9)
		}, "backoff", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			oldCfg, newCfg := mutate(t, base, tt.edit)
			w := config.Diff(oldCfg, newCfg).Watcher
			if w == nil {
				t.Fatal("no watcher restart")
			}
			if w.Reason != tt.reason || w.CountRestart != tt.count || w.KeepSnapshot != tt.keep {
				t.Errorf("got %+v, want reason=%s count=%v keep=%v", *w, tt.reason, tt.count, tt.keep)
			}
		})
	}
	// kubernetes_pods: dynamo_namespace (scalar) is reason namespace;
	// model (scalar) is other.
	pods := "dynamo: {enabled: true, discovery: {source: kubernetes_pods, kubernetes: {namespace: d, dynamo_namespace: g, model: m}}}"
	for name, tt := range map[string]struct {
		edit   func(*config.Config)
		reason string
	}{
		"dynamo_namespace": {func(c *config.Config) { c.Dynamo.Discovery.Kubernetes.DynamoNamespace = "h" }, "namespace"},
		"model":            {func(c *config.Config) { c.Dynamo.Discovery.Kubernetes.Model = "m2" }, "other"},
		"source":           {func(c *config.Config) { c.Dynamo.Discovery.Source = "kubernetes" }, "source"},
	} {
		oldCfg, newCfg := mutate(t, pods, tt.edit)
		if w := config.Diff(oldCfg, newCfg).Watcher; w == nil || w.Reason != tt.reason {
			t.Errorf("pods %s: %+v, want %s", name, w, tt.reason)
		}
	}
}

// TestImportKeepsPasswordAcrossEndpoints: an import that leaves
// auth.password (and tls.client_key) masked keeps the running values even
// when it changes the endpoints (the running password then goes to the new
// endpoints, which an operator should know); the change is a connection
// restart.
func TestImportKeepsPasswordAcrossEndpoints(t *testing.T) {
	t.Parallel()
	running := parse(t, `
dynamo:
  enabled: true
  discovery:
    etcd:
      endpoints: ["https://e:1"]
      tls: {ca_cert: ca.pem, client_cert: c.pem, client_key: k.pem}
      auth: {username: u, password: pw}
`).Config
	imported := running.Masked()
	imported.Dynamo.Discovery.Etcd.Endpoints = []string{"https://elsewhere:1"}
	imported.Unmask(running)
	if got := imported.Dynamo.Discovery.Etcd.Auth.Password; got != "pw" {
		t.Errorf("password %q after import", got)
	}
	if got := imported.Dynamo.Discovery.Etcd.TLS.ClientKey; got != "k.pem" {
		t.Errorf("client_key %q after import", got)
	}
	if left := imported.StillMasked(); len(left) != 0 {
		t.Errorf("still masked: %v", left)
	}
	if w := config.Diff(running, imported).Watcher; w == nil || w.Reason != config.ReasonConnection {
		t.Errorf("watcher %+v", w)
	}
}
