package config_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/config"
)

// TestDiffReorderedSetsChangeNothing: etcd endpoints and direct_allow_cidrs
// are sets (the etcd client balances over its endpoints; a CIDR list is
// a union): listed in another order they are the same connection and the
// same policy, so a reload neither replaces the watcher (emptying the
// fleet view, reason connection) nor restarts every load and kv-events
// subscription, as reordered namespaces and kubernetes.models do not.
func TestDiffReorderedSetsChangeNothing(t *testing.T) {
	t.Parallel()
	base := `
dynamo:
  enabled: true
  discovery:
    etcd:
      endpoints: ["http://etcd-0:2379", "http://etcd-1:2379"]
  load:
    direct_allow_cidrs: ["10.0.0.0/8", "192.168.0.0/16"]
`
	for name, edit := range map[string]func(*config.Config){
		"endpoints reordered": func(c *config.Config) {
			e := c.Dynamo.Discovery.Etcd.Endpoints
			e[0], e[1] = e[1], e[0]
		},
		"endpoint's scheme left out": func(c *config.Config) {
			c.Dynamo.Discovery.Etcd.Endpoints[1] = "etcd-1:2379"
		},
		"cidrs reordered": func(c *config.Config) {
			l := c.Dynamo.Load.DirectAllowCIDRs
			l[0], l[1] = l[1], l[0]
		},
	} {
		t.Run(name, func(t *testing.T) {
			oldCfg, newCfg := mutate(t, base, edit)
			plan := config.Diff(oldCfg, newCfg)
			if plan.Watcher != nil {
				t.Errorf("watcher replaced, reason %q (the registry is emptied)", plan.Watcher.Reason)
			}
			if plan.RestartSubscriptions {
				t.Error("every load and kv-events subscription restarted")
			}
			for _, ch := range plan.Changes {
				if ch.Tier != config.TierImmediate {
					t.Errorf("%s: tier %s, want immediate (as reordered namespaces)", ch.Path, ch.Tier)
				}
			}
		})
	}
}
