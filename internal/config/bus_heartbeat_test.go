package config_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/config"
)

// TestBusHeartbeatWithinIdleTimeout: a heartbeat_interval at or past
// idle_timeout ends every session as idle_timeout (each side judges the
// other idle before its next heartbeat): refused.
func TestBusHeartbeatWithinIdleTimeout(t *testing.T) {
	t.Parallel()
	for _, y := range []string{
		"dynamo:\n  event_bus:\n    heartbeat_interval: 60s\n    idle_timeout: 30s\n",
		"dynamo:\n  event_bus:\n    heartbeat_interval: 30s\n    idle_timeout: 30s\n",
	} {
		doc := parse(t, y)
		found := false
		for _, f := range doc.Findings {
			if f.Severity == config.SeverityError && (f.Path == "dynamo.event_bus.heartbeat_interval" || f.Path == "dynamo.event_bus.idle_timeout") {
				found = true
			}
		}
		if !found {
			t.Errorf("%q: no error; findings %v", y, doc.Findings)
		}
	}
}
