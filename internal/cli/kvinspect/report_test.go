package kvinspect_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/cli/kvinspect"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// TestReportChosenIsNamespaceAndID: two graphs each run a prefill worker
// with instance id 7; only the one the pin names, in its namespace, is
// marked chosen.
func TestReportChosenIsNamespaceAndID(t *testing.T) {
	t.Parallel()
	prod := &fleet.Worker{ID: fleet.WorkerID{Namespace: "prod", InstanceID: 7}, Role: fleet.RolePrefill}
	canary := &fleet.Worker{ID: fleet.WorkerID{Namespace: "canary", InstanceID: 7}, Role: fleet.RolePrefill}
	decode := &fleet.Worker{ID: fleet.WorkerID{Namespace: "canary", InstanceID: 9}, Role: fleet.RoleDecode}
	ex := kv.Explanation{
		Pin: pick.Pin{Namespace: "canary", Decode: pick.Target{Worker: decode}, Prefill: &pick.Target{Worker: canary}},
		Candidates: []kv.Explained{
			{Phase: pick.PhasePrefill, Worker: prod, State: "fresh"},
			{Phase: pick.PhasePrefill, Worker: canary, State: "fresh"},
		},
	}
	rep := kvinspect.Report(ex, "m", "m", "/v1/chat/completions", []string{"prod", "canary"})
	if len(rep.Candidates) != 2 {
		t.Fatalf("%d candidates reported, want 2: %+v", len(rep.Candidates), rep.Candidates)
	}
	for _, c := range rep.Candidates {
		if want := c.Namespace == "canary"; c.Chosen != want {
			t.Errorf("%s/%s chosen=%v, want %v", c.Namespace, c.InstanceID, c.Chosen, want)
		}
	}
}
