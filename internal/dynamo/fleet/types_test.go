package fleet_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// TestPublisherSubject: the dotted subject goes as deep as the channel's
// scope, each part escaped as a key segment.
func TestPublisherSubject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    fleet.Publisher
		want string
	}{
		{fleet.Publisher{Namespace: "dynamo", Component: "decode", Endpoint: "generate", Scope: wire.ScopeEndpoint, Topic: "kv_metrics"},
			"namespace.dynamo.component.decode.endpoint.generate.kv_metrics"},
		{fleet.Publisher{Namespace: "dynamo", Component: "decode", Scope: wire.ScopeComponent, Topic: "kv-events"},
			"namespace.dynamo.component.decode.kv-events"},
		{fleet.Publisher{Namespace: "dynamo", Component: "decode", Scope: wire.ScopeNamespace, Topic: "kv_metrics"},
			"namespace.dynamo.kv_metrics"},
		{fleet.Publisher{Namespace: "ns.one", Component: "backend", Topic: "kv_events"}, // legacy: no scope kind
			"namespace.ns%2Eone.component.backend.kv_events"},
	} {
		if got := tc.p.Subject(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.p, got, tc.want)
		}
	}
}
