package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

// kvRouter is a router with the KV-aware picker over prefill workers 10,
// 11, 12 and decode worker 20 of model "m", whose cards declare Qwen3's
// pinned tokenizer and chat template, and count_tokens on the same
// prompts.
type kvRouter struct {
	router  *servedRouter
	fe      *fleetsim.Frontend
	prompts *kv.Prompts
	index   *kv.Index
	metrics *telemetry.KVMetrics
	reg     *fleet.Registry
	picker  *kv.Picker
	rm      *telemetry.RouterMetrics
}

func newKVRouter(t *testing.T, edit func(*config.Config)) *kvRouter {
	t.Helper()
	dir := t.TempDir()
	tok := testutil.TokenizerJSON(t, "qwen3")
	tcfg, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "testdata/chattemplate/qwen3.tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tokPath, cfgPath := filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(tokPath, tok, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, tcfg, 0o644); err != nil {
		t.Fatal(err)
	}
	pins := []string{artifact.Sum(tok).String(), artifact.Sum(tcfg).String()}
	red := fleet.NewReducer()
	put := func(component, wt string, id uint64) {
		red.Put(fmt.Sprintf("v1/instances/dynamo/%s/generate/%x", component, id), fmt.Appendf(nil, `{"component":%q,"endpoint":"generate","instance_id":%d}`, component, id), t0)
		red.Put(fmt.Sprintf("v1/mdc/dynamo/%s/generate/%x", component, id), fmt.Appendf(nil,
			`{"component":%q,"endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m","worker_type":%q,"kv_cache_block_size":16,
			"runtime_config":{"total_kv_blocks":10000,"max_num_batched_tokens":8192},
			"tokenizer":{"hf_tokenizer_json":{"path":%q,"checksum":%q}},
			"prompt_formatter":{"hf_tokenizer_config_json":{"path":%q,"checksum":%q}}}}`, component, id, wt, tokPath, pins[0], cfgPath, pins[1]), t0)
	}
	for _, id := range []uint64{10, 11, 12} {
		put("prefill", "Prefill", id)
	}
	put("decode", "Decode", 20)
	k := &kvRouter{fe: fleetsim.NewFrontend(), reg: fleet.NewRegistry(nil, nil), index: kv.NewIndex(), metrics: telemetry.NewKVMetrics(nil)}
	k.reg.Publish(red.Build(t0))
	live := map[fleet.WorkerID]load.LiveWorker{}
	for w := range k.reg.Snapshot().Workers.All() {
		live[w.ID] = load.LiveWorker{DPSize: 1}
	}
	store := load.NewStore(time.Minute, nil)
	store.SetLiveAndRetain(live)
	k.index.SetLive(live)

	pol, err := artifact.PolicyFor(artifact.Settings{Pinned: pins}, nil)
	if err != nil {
		t.Fatal(err)
	}
	loader, err := artifact.NewLoader(artifact.LoaderOptions{Policy: pol, Build: kv.Build})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = loader.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	k.prompts = kv.NewPrompts(loader)
	picker := kv.NewPicker(pick.NewLoadBased(store), k.index, k.prompts,
		kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}, SendTokenData: true}, k.metrics, nil, nil)

	k.picker = picker
	k.fe.SetWorkers("m", []uint64{10, 11, 12}, []uint64{20})
	feSrv := httptest.NewServer(k.fe)
	t.Cleanup(feSrv.Close)
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "fe", Type: "openai", URL: feSrv.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
	cfg.DisaggregatedServing.Enabled = true
	cfg.Dynamo.Enabled = true
	cfg.Dynamo.Shim.Backends = []string{"fe"}
	if edit != nil {
		edit(cfg)
	}
	k.rm = telemetry.NewRouterMetrics(nil)
	srv := router.New(router.Options{Config: cfg, Registry: k.reg, Store: store, Picker: picker, Metrics: k.rm,
		CountTokens: func(model string, body []byte) (int, string) { return k.prompts.Count(k.reg.Snapshot(), model, body) }})
	srv.SetReady(true)
	k.router = serveRouter(t, srv.Handler())
	return k
}

// prompt waits for the model's artifacts and returns the chat body's
// prompt, with its block hashes.
func (k *kvRouter) prompt(t *testing.T, body string) *kv.Prompt {
	t.Helper()
	var pr *kv.Prompt
	var result string
	testutil.Eventually(t, 30*time.Second, "artifacts loaded", func() bool {
		pr, result = k.prompts.Prepare(k.reg.Snapshot(), "m", "/v1/chat/completions", []byte(body), []int{16})
		return result != kv.ResultTokenizerUnavailable
	})
	if result != "" {
		t.Fatalf("prepare: %s", result)
	}
	return pr
}

// hold makes worker w hold the first n blocks.
func (k *kvRouter) hold(t *testing.T, w uint64, hashes []uint64, n int) {
	t.Helper()
	ev := wire.RouterEvent{WorkerID: w, Kind: wire.KVStored, EventID: 1}
	for i, h := range hashes[:n] {
		ev.Blocks = append(ev.Blocks, wire.StoredBlock{BlockHash: w<<32 | uint64(i), TokensHash: h})
	}
	if out := k.index.Apply(kv.SubscriptionID(w), load.NS("dynamo"), &ev); out.Result != kv.ResultAccepted {
		t.Fatalf("stored: %+v", out)
	}
}

func tokenData(t *testing.T, body []byte) []uint32 {
	t.Helper()
	var q struct {
		Nvext struct {
			TokenData []uint32 `json:"token_data"`
		} `json:"nvext"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		t.Fatal(err)
	}
	return q.Nvext.TokenData
}

// TestKVAwareConvertedPrompts: with KV-aware routing, Messages and
// Responses requests are scored on their converted prompt exactly as the
// equivalent chat request is: the same prefill worker (the one holding
// the prompt's blocks) and the same token data; count_tokens counts that
// prompt. A native Responses passthrough is picked by load alone, without
// token data.
func TestKVAwareConvertedPrompts(t *testing.T) {
	t.Parallel()
	k := newKVRouter(t, nil)
	system := "You answer questions about Dynamo fleets briefly and precisely."
	user := strings.Repeat("Which prefill worker holds the longest prefix of this prompt, and why does it matter? ", 12)
	sj, _ := json.Marshal(system)
	uj, _ := json.Marshal(user)
	chatBody := fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":%s},{"role":"user","content":%s}],"max_tokens":16}`, sj, uj)
	pr := k.prompt(t, chatBody)
	hashes := pr.Hashes[16]
	if len(hashes) < 10 {
		t.Fatalf("only %d blocks", len(hashes))
	}
	k.hold(t, 11, hashes, len(hashes)-1)
	k.hold(t, 12, hashes, 2)

	for _, req := range []struct{ path, body string }{
		{"/v1/chat/completions", chatBody},
		{"/v1/messages", fmt.Sprintf(`{"model":"m","max_tokens":16,"system":%s,"messages":[{"role":"user","content":[{"type":"text","text":%s}]}]}`, sj, uj)},
		{"/anthropic/v1/messages", fmt.Sprintf(`{"model":"m","max_tokens":16,"stream":true,"system":[{"type":"text","text":%s}],"messages":[{"role":"user","content":%s}]}`, sj, uj)},
		{"/v1/responses", fmt.Sprintf(`{"model":"m","max_output_tokens":16,"instructions":%s,"input":%s}`, sj, uj)},
		{"/v1/responses", fmt.Sprintf(`{"model":"m","max_output_tokens":16,"stream":true,"input":[{"role":"developer","content":%s},{"role":"user","content":[{"type":"input_text","text":%s}]}]}`, sj, uj)},
	} {
		resp, err := k.router.Client().Post(k.router.URL+req.path, "application/json", strings.NewReader(req.body))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", req.path, resp.StatusCode)
		}
	}
	reqs := k.fe.Requests()
	if len(reqs) != 5 {
		t.Fatalf("%d requests", len(reqs))
	}
	for i, r := range reqs {
		if r.Prefill == nil || *r.Prefill != 11 {
			t.Errorf("request %d: prefill %v, want the holder 11", i, r.DynamoHeaders)
		}
		if ids := tokenData(t, r.Body); !slices.Equal(ids, pr.IDs) {
			t.Errorf("request %d: %d token ids, want the converted prompt's %d", i, len(ids), len(pr.IDs))
		}
	}
	if n := promtest.ToFloat64(k.metrics.Selections.WithLabelValues(kv.ResultOverlap)); n != 5 {
		t.Errorf("overlap selections %v, want 5", n)
	}

	// count_tokens: the same prompt's size.
	resp, err := k.router.Client().Post(k.router.URL+"/v1/messages/count_tokens", "application/json",
		strings.NewReader(fmt.Sprintf(`{"model":"m","system":%s,"messages":[{"role":"user","content":%s}]}`, sj, uj)))
	if err != nil {
		t.Fatal(err)
	}
	var counted struct {
		InputTokens int `json:"input_tokens"`
	}
	err = json.NewDecoder(resp.Body).Decode(&counted)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || counted.InputTokens != len(pr.IDs) {
		t.Fatalf("count_tokens: %d %+v %v, want %d", resp.StatusCode, counted, err, len(pr.IDs))
	}

	// A native passthrough renders nothing: picked by load, no token data,
	// no KV selection counted.
	nb := newNativeBackend(t)
	kn := newKVRouter(t, func(c *config.Config) {
		c.Backends[0].URL = nb.srv.URL
		c.Backends[0].ResponsesAPI = config.ResponsesAPINative
	})
	resp, err = kn.router.Client().Post(kn.router.URL+"/v1/responses", "application/json",
		strings.NewReader(fmt.Sprintf(`{"model":"m","instructions":%s,"input":%s}`, sj, uj)))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("native: %d", resp.StatusCode)
	}
	nb.mu.Lock()
	sent, hdr := nb.body[0], nb.seen[0].Header
	nb.mu.Unlock()
	if strings.Contains(string(sent), "token_data") || hdr.Get("x-dynamo-worker-instance-id") != "20" || hdr.Get("x-dynamo-prefill-instance-id") == "" {
		t.Errorf("native: %s %v", sent, hdr)
	}
	for _, result := range kv.SelectionResults {
		if n := promtest.ToFloat64(kn.metrics.Selections.WithLabelValues(result)); n != 0 {
			t.Errorf("native: %s counted %v", result, n)
		}
	}
}
