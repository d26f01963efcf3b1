package fleetsim_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/fleetsim"
)

// TestDemoTopologyConfigValidates: a fleet over two namespaces and two
// models, with aggregated workers and data-parallel ranks, comes with a
// router configuration that passes every validation rule.
func TestDemoTopologyConfigValidates(t *testing.T) {
	d, err := fleetsim.StartDemo(fleetsim.Options{Namespaces: []string{"prod", "canary"}, Models: []string{"m1", "m2"},
		Prefill: 1, Decode: 1, Aggregated: 1, DPSize: 2}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	doc, err := config.Parse("demo", []byte(d.Config), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if doc.Findings.Errors() > 0 {
		t.Fatalf("%v\n%s", doc.Findings, d.Config)
	}
	if n := len(d.Sim.Workers()); n != 2*2*3 {
		t.Fatalf("%d workers", n)
	}
	if len(d.FrontendURLs) != 2 || len(doc.Config.Dynamo.Shim.Pools) != 2 {
		t.Fatalf("frontends %v, pools %v", d.FrontendURLs, doc.Config.Dynamo.Shim.Pools)
	}
}

// TestFrontendWithdrawsModel: Dynamo 1.5 withdraws a model when its last
// prefill worker leaves while decode workers remain.
func TestFrontendWithdrawsModel(t *testing.T) {
	f := fleetsim.NewFrontend()
	f.SetWorkers("m", []uint64{1}, []uint64{2})
	f.SetWorkers("m", nil, []uint64{2})
	f.SetWorkers("agg", nil, []uint64{3}) // never disaggregated: served
	if got := served(t, f); got != "agg" {
		t.Fatalf("served models %q", got)
	}
}
