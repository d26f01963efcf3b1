package fleet_test

import (
	"testing"
	"time"

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

// TestNamespaceID: a worker's interned namespace is its ID's, the same
// handle as interning the name again, and names compare by handle; the
// zero NamespaceID is the empty name.
func TestNamespaceID(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	t0 := time.Unix(1_800_000_000, 0)
	for _, ns := range []string{"prod", "canary"} {
		r.Put("v1/instances/"+ns+"/decode/generate/7", []byte(`{"component":"decode","endpoint":"generate","instance_id":7}`), t0)
	}
	snap := r.Build(t0)
	prod := snap.Workers.Get(fleet.WorkerID{Namespace: "prod", InstanceID: 7})
	canary := snap.Workers.Get(fleet.WorkerID{Namespace: "canary", InstanceID: 7})
	if prod == nil || canary == nil {
		t.Fatal("workers missing")
	}
	if prod.NamespaceID() != fleet.InternNamespace("prod") || prod.NamespaceID().String() != "prod" {
		t.Errorf("prod's NamespaceID %v", prod.NamespaceID())
	}
	if prod.NamespaceID() == canary.NamespaceID() {
		t.Error("two namespaces share a NamespaceID")
	}
	built := &fleet.Worker{ID: fleet.WorkerID{Namespace: "canary", InstanceID: 7}}
	if built.NamespaceID() != canary.NamespaceID() {
		t.Error("a worker built outside the reducer has another NamespaceID")
	}
	if fleet.InternNamespace("") != (fleet.NamespaceID{}) || (fleet.NamespaceID{}).String() != "" {
		t.Error("the empty name is not the zero NamespaceID")
	}
}
