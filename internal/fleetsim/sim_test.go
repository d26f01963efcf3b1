package fleetsim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
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
	if k := doc.Config.Dynamo.KV; !k.Enabled || !slices.Equal(k.PinnedArtifacts, d.Sim.Artifacts().Pinned()) {
		t.Fatalf("kv %+v", k)
	}
	// Without KV-aware routing the configuration says nothing of kv.
	plain, err := fleetsim.StartDemo(fleetsim.Options{Decode: 1, NoKV: true}, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	doc, err = config.Parse("demo", []byte(plain.Config), config.Options{})
	if err != nil || doc.Findings.Errors() > 0 || doc.Config.Dynamo.KV.Enabled {
		t.Fatalf("%v %v\n%s", err, doc.Findings, plain.Config)
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

// TestCardDialects: each dialect writes a worker's role as that Dynamo
// revision did, in the card the fleet registers; an unknown dialect is
// refused before anything starts.
func TestCardDialects(t *testing.T) {
	want := map[string][3]string{ // prefill, decode, aggregated
		fleetsim.DialectEnum:      {`"worker_type":"Prefill"`, `"worker_type":"Decode"`, `"worker_type":"Aggregated"`},
		fleetsim.DialectBitflags:  {`"worker_type":"Prefill"`, `"worker_type":"Decode"`, `"worker_type":"Prefill | Decode"`},
		fleetsim.DialectLowercase: {`"worker_type":"prefill"`, `"worker_type":"decode"`, `"worker_type":"aggregated"`},
		fleetsim.DialectLegacy: {`"model_input":"Tokens","model_type":"Prefill"`, `"model_input":"Tokens","model_type":"Chat | Completions"`,
			`"model_input":"Tokens","model_type":"Chat | Completions"`},
	}
	for _, dialect := range fleetsim.CardDialects {
		recs, err := fleetsim.Records(fleetsim.Options{Prefill: 1, Decode: 1, Aggregated: 1, CardDialect: dialect})
		if err != nil {
			t.Fatal(err)
		}
		var cards []string
		for _, r := range recs {
			if r.Bucket != "v1/mdc" {
				continue
			}
			b, _ := json.Marshal(r.Value.(map[string]any)["card_json"])
			cards = append(cards, string(b))
		}
		if len(cards) != 3 {
			t.Fatalf("%s: %d cards", dialect, len(cards))
		}
		for i, card := range cards {
			if !strings.Contains(card, want[dialect][i]) || (dialect == fleetsim.DialectLegacy) == strings.Contains(card, "worker_type") {
				t.Errorf("%s: card %d %s, want %s", dialect, i, card, want[dialect][i])
			}
		}
	}
	if _, err := fleetsim.Start(fleetsim.Options{Decode: 1, CardDialect: "Bitflags"}); err == nil || !strings.Contains(err.Error(), "card dialect") {
		t.Fatalf("unknown dialect: %v", err)
	}
}

// TestCardMigrationLimit: every card declares the fleet's migration_limit,
// and none does by default (Dynamo's default is 0).
func TestCardMigrationLimit(t *testing.T) {
	t.Parallel()
	for limit, want := range map[int]string{0: "", 3: `"migration_limit":3`} {
		recs, err := fleetsim.Records(fleetsim.Options{Prefill: 1, Decode: 2, MigrationLimit: limit})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Bucket != "v1/mdc" {
				continue
			}
			b, _ := json.Marshal(r.Value.(map[string]any)["card_json"])
			if has := strings.Contains(string(b), "migration_limit"); has != (want != "") || !strings.Contains(string(b), want) {
				t.Errorf("limit %d: card %s", limit, b)
			}
		}
	}
}
