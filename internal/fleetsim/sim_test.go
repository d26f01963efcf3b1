package fleetsim_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestFrontendReadsLegacyPins: like the newest Dynamo frontends, the
// emulator reads a pin's legacy name when its x-dynamo-* form is absent, and
// the x-dynamo-* form when both are sent.
func TestFrontendReadsLegacyPins(t *testing.T) {
	t.Parallel()
	f := fleetsim.NewFrontend()
	f.SetWorkers("m", []uint64{1}, []uint64{2, 3})
	srv := httptest.NewServer(f)
	defer srv.Close()
	send := func(hdr map[string]string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if status := send(map[string]string{"x-worker-instance-id": "2", "x-prefill-instance-id": "1", "x-data-parallel-rank": "4"}); status != 200 {
		t.Fatalf("legacy pins: %d", status)
	}
	if status := send(map[string]string{"x-dynamo-worker-instance-id": "3", "x-worker-instance-id": "2", "x-dynamo-prefill-instance-id": "1", "x-dp-rank": "5"}); status != 200 {
		t.Fatalf("both spellings: %d", status)
	}
	reqs := f.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if r := reqs[0]; r.Worker == nil || *r.Worker != 2 || r.Prefill == nil || *r.Prefill != 1 || r.DPRank == nil || *r.DPRank != 4 {
		t.Errorf("legacy pins read as %v %v %v", r.Worker, r.Prefill, r.DPRank)
	}
	if r := reqs[1]; r.Worker == nil || *r.Worker != 3 || r.DPRank == nil || *r.DPRank != 5 {
		t.Errorf("x-dynamo-* must win: %v %v", r.Worker, r.DPRank)
	}
}
