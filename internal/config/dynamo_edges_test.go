package config_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/config"
)

// TestDynamoValidationEdges: validation rules, edge by edge.
func TestDynamoValidationEdges(t *testing.T) {
	t.Parallel()
	base := "backends:\n  - {name: fe, url: \"http://fe:8000\"}\n  - {name: fe2, url: \"http://fe2:8000\"}\ndisaggregated_serving: {enabled: true}\n"
	for _, c := range []struct {
		name, yaml string
		sev        config.Severity
		path, sub  string
		want       bool
	}{
		{"ipv6 host:port", "dynamo:\n  enabled: true\n  discovery:\n    etcd:\n      endpoints: [\"[::1]:2379\"]\n", config.SeverityError, "dynamo.discovery.etcd.endpoints[0]", "", false},
		{"ipv6 url", "dynamo:\n  enabled: true\n  discovery:\n    etcd:\n      endpoints: [\"http://[::1]:2379\"]\n", config.SeverityError, "dynamo.discovery.etcd.endpoints[0]", "", false},
		{"17 endpoints off", "dynamo:\n  enabled: true\n  discovery:\n    source: file\n    file: {root: /x}\n", config.SeverityError, "dynamo.discovery.etcd.endpoints", "", false},
		{"explicit default namespace with namespaces", "dynamo:\n  discovery:\n    etcd:\n      namespace: dynamo\n      namespaces: [a]\n", config.SeverityError, "dynamo.discovery.etcd.namespace", "", false},
		{"unicode space in namespace", "dynamo:\n  discovery:\n    etcd:\n      namespace: \"a\u00a0b\"\n", config.SeverityError, "dynamo.discovery.etcd.namespace", "white space", true},
		{"two namespaces with backends", base + "dynamo:\n  discovery:\n    etcd:\n      namespaces: [a, b]\n  shim:\n    backends: [fe]\n", config.SeverityError, "dynamo.shim.backends", "shim.pools", true},
		{"backend twice in one pool", base + "dynamo:\n  discovery:\n    etcd:\n      namespaces: [a, b]\n  shim:\n    pools:\n      - {namespace: a, backends: [fe, fe]}\n      - {namespace: b, backends: [fe2]}\n", config.SeverityError, "dynamo.shim.pools[0].backends[1]", "twice", true},
		{"one backend in two pools", base + "dynamo:\n  discovery:\n    etcd:\n      namespaces: [a, b]\n  shim:\n    pools:\n      - {namespace: a, backends: [fe]}\n      - {namespace: b, backends: [fe]}\n", config.SeverityError, "dynamo.shim.pools[1].backends[0]", "one pool", true},
		{"auth over host:port", "dynamo:\n  discovery:\n    etcd:\n      endpoints: [\"etcd:2379\"]\n      auth: {username: u, password: p}\n", config.SeverityWarning, "dynamo.discovery.etcd.auth", "clear text", true},
		{"auth over https", "dynamo:\n  discovery:\n    etcd:\n      endpoints: [\"https://etcd:2379\"]\n      auth: {username: u, password: p}\n", config.SeverityWarning, "dynamo.discovery.etcd.auth", "clear text", false},
		{"backoff max equal initial", "dynamo:\n  discovery:\n    etcd:\n      watch_reconnect_backoff: {initial: 1s, max: 1s}\n", config.SeverityError, "dynamo.discovery.etcd.watch_reconnect_backoff.max", "", false},
		{"cidr without prefix", "dynamo:\n  load:\n    direct_allow_cidrs: [\"10.0.0.1\"]\n", config.SeverityError, "dynamo.load.direct_allow_cidrs[0]", "CIDR", true},
		{"ipv6 cidr", "dynamo:\n  load:\n    direct_allow_cidrs: [\"fd00::/8\"]\n", config.SeverityError, "dynamo.load.direct_allow_cidrs[0]", "", false},
		{"blank model_map value", "dynamo:\n  shim:\n    model_map: {a: \"  \"}\n", config.SeverityError, "dynamo.shim.model_map.a", "must not be empty", true},
		{"pools with dynamo off", base + "dynamo:\n  shim:\n    pools:\n      - {namespace: dynamo, backends: [fe]}\n", config.SeverityWarning, "dynamo.shim", "dynamo.enabled is false", true},
	} {
		doc := parse(t, c.yaml)
		got := false
		for _, f := range doc.Findings {
			if f.Severity == c.sev && f.Path == c.path && (c.sub == "" || contains(f.Message, c.sub)) {
				got = true
			}
		}
		if got != c.want {
			t.Errorf("%s: finding %v at %s (%q) = %v, want %v; findings %v", c.name, c.sev, c.path, c.sub, got, c.want, doc.Findings)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
