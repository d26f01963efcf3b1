package router

import (
	"slices"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// TestPools: the router's shim plan gives the replicas a request may use
// per namespace, in discovery order, without the ones its key may not use
// or whose breaker is open; a namespace left without replicas is no
// candidate.
func TestPools(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	for _, n := range []string{"a1", "a2", "a3", "b1", "c1"} {
		cfg.Backends = append(cfg.Backends, config.Backend{Name: n, Type: "openai", URL: "http://127.0.0.1:1", Role: config.RoleUnified, Enabled: true})
	}
	cfg.Dynamo.Enabled, cfg.DisaggregatedServing.Enabled = true, true
	cfg.Dynamo.Discovery.Etcd.Namespaces = []string{"prod", "canary", "dev"}
	cfg.Dynamo.Shim.Pools = []config.ShimPool{
		{Namespace: "canary", Backends: []string{"b1"}},
		{Namespace: "prod", Backends: []string{"a1", "a2", "missing"}},
		{Namespace: "prod", Backends: []string{"a3"}},
		{Namespace: "dev", Backends: []string{"c1"}},
		{Namespace: "elsewhere", Backends: []string{"c1"}},
	}
	now := time.Unix(1_800_000_000, 0)
	s := New(Options{Config: cfg, Registry: fleet.NewRegistry(nil, nil), Now: func() time.Time { return now }})
	names := func(bs []*Backend) []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.Name())
		}
		return out
	}
	check := func(policy *keyPolicy, want map[string][]string, order []string) {
		t.Helper()
		got := s.dispatch.Plan().Candidates(func(b *Backend) bool { return policy.allows(b.Name()) && b.Available(now) })
		if !slices.Equal(got.Namespaces, order) {
			t.Fatalf("namespaces %v, want %v", got.Namespaces, order)
		}
		for ns, w := range want {
			if g := names(got.Of(ns)); !slices.Equal(g, w) {
				t.Fatalf("%s: %v, want %v", ns, g, w)
			}
		}
	}
	check(nil, map[string][]string{"prod": {"a1", "a2", "a3"}, "canary": {"b1"}, "dev": {"c1"}}, []string{"prod", "canary", "dev"})
	// a2's breaker opens; the key may not use c1.
	s.backends.get("a2").openUntil.Store(now.Add(time.Minute).UnixNano())
	policy := &keyPolicy{allowed: map[string]bool{"a1": true, "a2": true, "a3": true, "b1": true}}
	check(policy, map[string][]string{"prod": {"a1", "a3"}, "canary": {"b1"}, "dev": nil}, []string{"prod", "canary"})
	// The plan is shared: the next request sees every replica again.
	s.backends.get("a2").openUntil.Store(0)
	check(nil, map[string][]string{"prod": {"a1", "a2", "a3"}}, []string{"prod", "canary", "dev"})
}
