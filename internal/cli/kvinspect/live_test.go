package kvinspect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/cli/kvinspect"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
)

// runLive runs the command tree with env as the environment, bounded.
func runLive(t *testing.T, env map[string]string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	t.Setenv("CONTINUUM_CONFIG", "")
	ios, in, out, errOut := iostreams.Test()
	in.WriteString(stdin)
	f := &cmdutil.Factory{IOStreams: ios, Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	code := cli.Run(ctx, f, append(args, "--log-level", "warn"))
	return code, out.String(), errOut.String()
}

func TestNewCmdWorkersFlags(t *testing.T) {
	tests := []struct {
		args    string
		env     map[string]string
		wantErr string
		check   func(*kvinspect.WorkersOptions) bool
	}{
		{"--source file --file-root /tmp/s", nil, "", func(o *kvinspect.WorkersOptions) bool {
			return o.Duration == kvinspect.DefaultDuration && !o.Follow && !o.DurationSet && o.Output == "table" && o.Discovery.FileRoot == "/tmp/s"
		}},
		{"--etcd-endpoints http://e:2379 --duration 30s -o json", nil, "", func(o *kvinspect.WorkersOptions) bool {
			return o.Duration == 30*time.Second && o.DurationSet && o.Output == "json" && o.Discovery.EtcdEndpoints[0] == "http://e:2379"
		}},
		{"-f --interval 2s", nil, "", func(o *kvinspect.WorkersOptions) bool { return o.Follow && o.Interval == 2*time.Second }},
		{"--router http://r:9090", map[string]string{kvinspect.TokenEnv: "from-env"}, "", func(o *kvinspect.WorkersOptions) bool {
			return o.Router == "http://r:9090" && o.Token == "from-env"
		}},
		{"--router http://r:9090 --token t", map[string]string{kvinspect.TokenEnv: "from-env"}, "", func(o *kvinspect.WorkersOptions) bool {
			return o.Token == "t"
		}},
		{"--router http://r:9090 --source file", nil, "drop --source", nil},
		{"--router http://r:9090 --duration 1s", nil, "drop --duration", nil},
		{"--router=", nil, "needs the router's base URL", nil},
		{"--router r:9090", nil, `--router "r:9090": give an http(s) URL, such as http://r:9090`, nil},
		{"--router unix:///run/router.sock", nil, "give an http(s) URL", nil},
		{"--token t", nil, "--token needs --router", nil},
		{"-o yaml", nil, "is not one of table, json", nil},
		{"--interval 10ms", nil, "at least 100ms", nil},
		{"--duration -1s", nil, "must not be negative", nil},
		{"extra", nil, "unknown command", nil},
	}
	for _, tc := range tests {
		t.Run(tc.args, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			f := &cmdutil.Factory{IOStreams: ios, ConfigPath: func() string { return "" },
				Env: func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }}
			var got *kvinspect.WorkersOptions
			cmd := kvinspect.NewCmdWorkers(f, func(_ context.Context, o *kvinspect.WorkersOptions) error { got = o; return nil })
			cmd.SetArgs(strings.Fields(tc.args))
			cmd.SetOut(ios.Out)
			cmd.SetErr(ios.ErrOut)
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got == nil || !tc.check(got) {
				t.Fatalf("err %v, opts %+v", err, got)
			}
		})
	}
}

func TestNewCmdMatchFlags(t *testing.T) {
	tests := []struct {
		args    string
		tty     bool
		wantErr string
		check   func(*kvinspect.MatchOptions) bool
	}{
		{"--source file --file-root /tmp/s", false, "", func(o *kvinspect.MatchOptions) bool {
			return !o.Completions && o.ArtifactTimeout == kvinspect.DefaultArtifactTimeout && o.Duration == kvinspect.DefaultDuration && o.Output == "table"
		}},
		{"--completions --artifact-timeout 5s --duration 0s -o json", false, "", func(o *kvinspect.MatchOptions) bool {
			return o.Completions && o.ArtifactTimeout == 5*time.Second && o.Duration == 0 && o.Output == "json"
		}},
		{"", true, "pipe the request's JSON body on stdin", nil},
		{"--artifact-timeout -1s", false, "must not be negative", nil},
		{"-o yaml", false, "is not one of table, json", nil},
	}
	for _, tc := range tests {
		t.Run(tc.args, func(t *testing.T) {
			ios, _, _, _ := iostreams.Test()
			ios.SetTTY(tc.tty, false)
			f := &cmdutil.Factory{IOStreams: ios, ConfigPath: func() string { return "" }}
			var got *kvinspect.MatchOptions
			cmd := kvinspect.NewCmdMatch(f, func(_ context.Context, o *kvinspect.MatchOptions) error { got = o; return nil })
			cmd.SetArgs(strings.Fields(tc.args))
			cmd.SetOut(ios.Out)
			cmd.SetErr(ios.ErrOut)
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got == nil || !tc.check(got) {
				t.Fatalf("err %v, opts %+v", err, got)
			}
		})
	}
}

// traffic sends the simulated fleet's frontend requests with fresh prompts,
// pinned to the prefill and decode worker, until ctx ends: each one makes
// the prefill worker store new blocks and publish them.
func traffic(ctx context.Context, t *testing.T, frontend string, prefill, decode uint64) {
	for next := uint64(5000); ctx.Err() == nil; next += 2 {
		// The simulated workers tokenize bytes: a prompt that opens with
		// its own 16 hex digits shares no block with another, so every
		// block it stores descends from one stored by the same request.
		body := fmt.Sprintf(`{"model":"Qwen/Qwen3-32B","max_tokens":1,"messages":[{"role":"user","content":"%016x %s"}]}`,
			next*0x9E3779B97F4A7C15, strings.Repeat("the quarterly report ", 12))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, frontend+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("x-dynamo-worker-instance-id", fmt.Sprint(decode))
		req.Header.Set("x-dynamo-prefill-instance-id", fmt.Sprint(prefill))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		} else if ctx.Err() == nil {
			t.Errorf("request: %v", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestWorkersOverASimulatedFleet: `kv-inspect workers` subscribes to every
// kv-events publisher of a simulated fleet (its workers publish real
// kv-events over ZMQ as they serve requests) and prints, in the admin
// API's shape, the blocks the prefill worker stored with the cursor of its
// publisher, both subscriptions connected, and the events taken; the
// table, followed, prints a view every interval.
func TestWorkersOverASimulatedFleet(t *testing.T) {
	root := t.TempDir()
	sim, err := fleetsim.Start(fleetsim.Options{Root: root, Prefill: 1, Decode: 1, Speed: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Stop()
	var prefill, decode fleetsim.WorkerInfo
	for _, w := range sim.Workers() {
		if w.Role == fleetsim.RolePrefill {
			prefill = w
		} else {
			decode = w
		}
	}
	fe := httptest.NewServer(sim.Frontend("dynamo"))
	defer fe.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { traffic(ctx, t, fe.URL, prefill.InstanceID, decode.InstanceID) })
	defer func() { cancel(); wg.Wait() }()

	code, out, errOut := runLive(t, nil, "", "kv-inspect", "workers", "--source", "file", "--file-root", root, "--duration", "3s", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var v admin.KVResponse
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if !v.Enabled || len(v.Ranks) != 1 {
		t.Fatalf("view %+v", v)
	}
	r := v.Ranks[0]
	if r.WorkerID != fmt.Sprint(prefill.InstanceID) || r.Namespace != "dynamo" || r.DPRank != 0 || r.Blocks == 0 ||
		len(r.Cursors) != 1 || r.Cursors[0].PublisherID != fmt.Sprint(prefill.KVPublisherID) || r.Cursors[0].Gaps != 0 {
		t.Errorf("rank %+v", r)
	}
	if v.Index.Nodes != r.Blocks || v.Index.StoredBlocks < uint64(r.Blocks) || v.Index.Bytes <= 0 {
		t.Errorf("index %+v", v.Index)
	}
	if len(v.Subscriptions) != 2 {
		t.Fatalf("subscriptions %+v", v.Subscriptions)
	}
	for _, s := range v.Subscriptions {
		if s.Family != "kv-events" || s.State != "connected" || s.Transport != "direct" {
			t.Errorf("subscription %+v", s)
		}
	}
	if len(v.Events) == 0 || v.Events[0].Result != kv.ResultAccepted || v.Events[0].Count == 0 {
		t.Errorf("events %+v", v.Events)
	}
	if !strings.Contains(errOut, "following 2 kv-events publishers for 3s") {
		t.Errorf("stderr: %s", errOut)
	}

	code, out, errOut = runLive(t, nil, "", "kv-inspect", "workers", "--source", "file", "--file-root", root,
		"--follow", "--interval", "300ms", "--duration", "2s")
	if code != 0 {
		t.Fatalf("follow: exit %d: %s", code, errOut)
	}
	if n := strings.Count(out, "\n--- "); n < 3 || !strings.Contains(out, "NAMESPACE  INSTANCE") || !strings.Contains(out, wire.FormatID(prefill.InstanceID)) ||
		!strings.Contains(out, "kv-events  "+fmt.Sprint(decode.KVPublisherID)) {
		t.Errorf("follow: %d views:\n%s", n, out)
	}
}

// TestWorkersIdleFleet: an idle fleet's view says why it is empty.
func TestWorkersIdleFleet(t *testing.T) {
	root := t.TempDir()
	sim, err := fleetsim.Start(fleetsim.Options{Root: root, Prefill: 1, Decode: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Stop()
	code, out, errOut := runLive(t, nil, "", "kv-inspect", "workers", "--source", "file", "--file-root", root, "--duration", "200ms")
	if code != 0 || !strings.Contains(out, "idle fleet shows nothing until it serves traffic") || !strings.Contains(out, "index: 0 blocks") {
		t.Errorf("exit %d:\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runLive(t, nil, "", "kv-inspect", "workers", "--source", "file", "--file-root", filepath.Join(root, "absent"),
		"--timeout", "300ms", "--duration", "0s"); code != 1 || !strings.Contains(errOut, "not reachable") {
		t.Errorf("no fleet: exit %d %s", code, errOut)
	}
}

// TestWorkersFromRouter: with --router the router's GET /admin/dynamo/kv is
// printed, with the token from $CONTINUUM_ADMIN_TOKEN; a refused token and
// a router without KV-aware selection exit 1 saying so.
func TestWorkersFromRouter(t *testing.T) {
	view := admin.KVResponse{Enabled: true, Index: admin.KVIndex{Nodes: 3, Ownerships: 4, Ranks: 2, Bytes: 3 << 10, StoredBlocks: 5, Gaps: 1},
		Ranks: []admin.KVRank{{WorkerID: "134140418588928", Namespace: "dynamo", Blocks: 3,
			Cursors: []admin.KVCursor{{PublisherID: "77", EventID: 9, Gaps: 1}, {PublisherID: "78", EventID: 2}}}},
		Subscriptions: []admin.Subscription{{Family: "kv-events", PublisherID: "77", Namespace: "dynamo", Component: "prefill", State: "connected", Transport: "direct"}},
		Events:        []admin.KVCount{{Result: "accepted", Count: 5}, {Result: "gap", Count: 1}},
		Results:       []admin.KVCount{{Result: "overlap", Count: 12}}}
	enabled := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/admin/dynamo/kv" || r.Header.Get("Authorization") != "Bearer sekrit" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		v := view
		v.Enabled = enabled
		_ = json.NewEncoder(w).Encode(v)
	}))
	defer srv.Close()
	env := map[string]string{kvinspect.TokenEnv: "sekrit"}
	code, out, errOut := runLive(t, env, "", "kv-inspect", "workers", "--router", srv.URL+"/")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"index: 3 blocks, 4 ownerships, 2 ranks", "3.0 KiB", "events: 5 accepted, 1 gap", "selections: 12 overlap",
		"dynamo     7a0000000100  134140418588928  0     3       77         9         1", "78         2         0", "kv-events  77"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	code, out, _ = runLive(t, env, "", "kv-inspect", "workers", "--router", srv.URL, "-o", "json")
	var got admin.KVResponse
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Ranks[0].Cursors[1].PublisherID != "78" || got.Results[0].Count != 12 {
		t.Errorf("json: exit %d %s", code, out)
	}
	if code, _, errOut := runLive(t, nil, "", "kv-inspect", "workers", "--router", srv.URL, "--token", "wrong"); code != 1 || !strings.Contains(errOut, "401") {
		t.Errorf("wrong token: exit %d %s", code, errOut)
	}
	// Strings of the answer reach the table with their control characters
	// escaped: an answer cannot drive the terminal or split a row.
	view.Ranks[0].Namespace, view.Subscriptions[0].Component = "dyn\x1b[2Jamo", "pre\r\nfill\u202e"
	code, out, _ = runLive(t, env, "", "kv-inspect", "workers", "--router", srv.URL)
	if code != 0 || strings.ContainsAny(out, "\x1b\r\u202e") || !strings.Contains(out, `dyn\x1b[2Jamo`) || !strings.Contains(out, `pre\x0d\x0afill\u202e`) {
		t.Errorf("escapes: exit %d %q", code, out)
	}
	enabled = false
	if code, _, errOut := runLive(t, env, "", "kv-inspect", "workers", "--router", srv.URL); code != 1 || !strings.Contains(errOut, "dynamo.kv.enabled is false") {
		t.Errorf("kv off: exit %d %s", code, errOut)
	}
}

// kvFleet writes the records of a simulated fleet of model "m" (two
// prefill workers, one decode worker) into a file store root, their cards
// declaring Qwen3's tokenizer and tokenizer config (written beside it);
// endpoints maps a publisher id to the endpoint its record advertises
// (the rest advertise a closed port). It returns the records' snapshot,
// their files and the artifacts' pins.
func kvFleet(t *testing.T, root string, endpoints map[uint64]string) (*fleet.Snapshot, []string, []string) {
	t.Helper()
	dir := t.TempDir()
	tok := testutil.TokenizerJSON(t, "qwen3")
	cfg, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "testdata/chattemplate/qwen3.tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tokPath, cfgPath := filepath.Join(dir, "tokenizer.json"), filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(tokPath, tok, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	pins := []string{artifact.Sum(tok).String(), artifact.Sum(cfg).String()}
	recs, err := fleetsim.Records(fleetsim.Options{Model: "m", Prefill: 2, Decode: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := fleet.NewReducer()
	t0 := time.Now()
	var files []string
	for _, rec := range recs {
		v := rec.Value.(map[string]any)
		switch rec.Bucket {
		case "v1/mdc":
			card := v["card_json"].(map[string]any)
			card["tokenizer"] = map[string]any{"hf_tokenizer_json": map[string]string{"path": tokPath, "checksum": pins[0]}}
			card["prompt_formatter"] = map[string]any{"hf_tokenizer_config_json": map[string]string{"path": cfgPath, "checksum": pins[1]}}
		case "v1/event_channels":
			if ep, ok := endpoints[v["instance_id"].(uint64)]; ok {
				v["transport"].(map[string]any)["config"] = map[string]string{"endpoint": ep}
			}
		}
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(root, rec.Bucket), 0o755); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(root, rec.Bucket, wire.FileStoreName(rec.Key))
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, file)
		r.Put(rec.Bucket+"/"+rec.Key, data, t0)
	}
	return r.Build(t0), files, pins
}

// keepAlive touches files every second until ctx ends, as a worker keeps
// its file store records within their TTL.
func keepAlive(ctx context.Context, files []string) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		now := time.Now()
		for _, f := range files {
			_ = os.Chtimes(f, now, now)
		}
	}
}

// ids returns the instance ids of the plan's workers of a component, and
// their kv_metrics and kv-events publisher ids.
func ids(recs []fleetsim.Record, component string) (workers, loads, events []uint64) {
	for _, rec := range recs {
		v := rec.Value.(map[string]any)
		switch {
		case rec.Bucket == "v1/instances" && v["component"] == component:
			workers = append(workers, v["instance_id"].(uint64))
		case rec.Bucket == "v1/event_channels" && strings.Contains(rec.Key, "/component/"+component+"/"):
			if v["topic"] == "kv_metrics" {
				loads = append(loads, v["instance_id"].(uint64))
			} else {
				events = append(events, v["instance_id"].(uint64))
			}
		}
	}
	return workers, loads, events
}

// resend publishes frames every 10 ms until ctx ends (a subscriber joins
// late and misses what was sent before; later copies are replays).
func resend(ctx context.Context, pub *testutil.GoPublisher, frames [][]byte) {
	for ctx.Err() == nil {
		_ = pub.Send(frames)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestMatchOverALiveFleet: `kv-inspect match` follows a fleet whose cards
// declare pinned artifacts, one prefill worker publishing over ZMQ that it
// holds the first blocks of the request's prompt (hashed here with
// kv.Prompts, as the router hashes it) and the other publishing a fresh,
// idle load; it loads the artifacts, maps the model through
// dynamo.shim.model_map and explains: the holder is chosen for prefill
// with an overlap, and every candidate shows its state and cost terms.
// Without the pins the result is artifact_unpinned, with the declared
// checksums in the reason; a model nobody serves exits 1.
func TestMatchOverALiveFleet(t *testing.T) {
	kvPub, loadPub := testutil.StartGoPublisher(t), testutil.StartGoPublisher(t)
	root := t.TempDir()
	recs, err := fleetsim.Records(fleetsim.Options{Model: "m", Prefill: 2, Decode: 1})
	if err != nil {
		t.Fatal(err)
	}
	prefills, loads, events := ids(recs, "prefill")
	if len(prefills) != 2 {
		t.Fatalf("prefill workers %v", prefills)
	}
	holder, other := prefills[1], prefills[0]
	snap, files, pins := kvFleet(t, root, map[uint64]string{events[1]: kvPub.Endpoint, loads[0]: loadPub.Endpoint})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { keepAlive(ctx, files) })

	body := fmt.Sprintf(`{"model":"qwen","messages":[{"role":"system","content":"You answer briefly."},{"role":"user","content":%q}]}`,
		strings.Repeat("How do radix trees index cached prompt blocks? ", 30))
	prompt := preparedPrompt(t, snap, pins, body)
	hashes := prompt.Hashes[16]
	held := len(hashes) - 3
	ev := storedEvent(holder, hashes[:held])
	zero := uint64(0)
	wg.Go(func() {
		resend(ctx, kvPub, wire.EncodeEventMessage("kv-events", events[1], 0, 0, wire.EncodeRouterEvent(ev)))
	})
	wg.Go(func() {
		publishLoad(ctx, loadPub, loads[0], wire.ActiveLoad{WorkerID: other, ActiveDecodeBlocks: &zero, ActivePrefillTokens: &zero})
	})

	config := func(pinned []string) string {
		path := filepath.Join(t.TempDir(), "continuum.yaml")
		q := make([]string, len(pinned))
		for i, p := range pinned {
			q[i] = fmt.Sprintf("%q", p)
		}
		yaml := fmt.Sprintf(`dynamo:
  enabled: true
  discovery:
    source: file
    file:
      root: %q
      namespace: dynamo
  load:
    direct_allow_cidrs: ["127.0.0.0/8"]
  shim:
    model_map:
      qwen: m
  kv:
    enabled: true
    artifact_cache_dir: %q
    pinned_artifacts: [%s]
`, root, t.TempDir(), strings.Join(q, ", "))
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pinned := config(pins)
	code, out, errOut := runLive(t, nil, body, "kv-inspect", "match", "--config", pinned, "--duration", "3s", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep kvinspect.MatchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if rep.Model != "m" || rep.RequestModel != "qwen" || rep.Path != "/v1/chat/completions" || rep.PromptTokens != len(prompt.IDs) ||
		rep.Result != kv.ResultOverlap || rep.Reason != "" {
		t.Fatalf("report %+v", rep)
	}
	if p := rep.Pin.Prefill; p == nil || p.InstanceID != wire.FormatID(holder) || p.Reason != "kv_aware" || rep.Pin.Namespace != "dynamo" || rep.Pin.Bypass {
		t.Errorf("pin %+v prefill %+v", rep.Pin, rep.Pin.Prefill)
	}
	if len(rep.Candidates) != 2 {
		t.Fatalf("candidates %+v", rep.Candidates)
	}
	for _, c := range rep.Candidates {
		switch c.InstanceID {
		case wire.FormatID(holder):
			if !c.Chosen || c.State != "quiet" || c.OverlapBlocks != held || c.CachedTokens != held*16 || c.Total == nil ||
				c.CreditBlocks != float64(held) || c.Phase != "prefill" || c.Role != "prefill" {
				t.Errorf("holder %+v", c)
			}
		case wire.FormatID(other):
			if c.Chosen || c.State != "fresh" || c.OverlapBlocks != 0 || c.Total == nil || *c.Total <= 0 {
				t.Errorf("other %+v", c)
			}
		default:
			t.Errorf("candidate %+v", c)
		}
	}

	code, out, errOut = runLive(t, nil, body, "kv-inspect", "match", "--config", pinned, "--duration", "3s")
	if code != 0 || !strings.Contains(out, "result: overlap") || !strings.Contains(out, fmt.Sprintf("prompt: %d tokens", len(prompt.IDs))) ||
		!strings.Contains(out, "prefill "+wire.FormatID(holder)+" rank 0 (prefill, kv_aware)") || !strings.Contains(out, "* chosen") {
		t.Errorf("table: exit %d\n%s%s", code, out, errOut)
	}

	code, out, errOut = runLive(t, nil, body, "kv-inspect", "match", "--config", config(nil), "--duration", "0s")
	if code != 0 || !strings.Contains(out, "result: artifact_unpinned") || !strings.Contains(out, pins[0]) || !strings.Contains(out, "pin-artifact") {
		t.Errorf("unpinned: exit %d\n%s%s", code, out, errOut)
	}
	nobody := strings.Replace(body, `"qwen"`, `"absent"`, 1)
	if code, _, errOut := runLive(t, nil, nobody, "kv-inspect", "match", "--config", pinned, "--duration", "0s"); code != 1 || !strings.Contains(errOut, `no worker of model "absent"`) {
		t.Errorf("absent model: exit %d %s", code, errOut)
	}
	if code, _, errOut := runLive(t, nil, `{"messages":[]}`, "kv-inspect", "match", "--config", pinned); code != 2 || !strings.Contains(errOut, `no "model"`) {
		t.Errorf("no model: exit %d %s", code, errOut)
	}
}

func mustChecksums(t *testing.T, pins []string) []artifact.Checksum {
	t.Helper()
	out := make([]artifact.Checksum, len(pins))
	for i, p := range pins {
		c, err := artifact.ParseChecksum(p)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = c
	}
	return out
}

// TestLiveInterrupted: a signal before the fleet was read ends match and a
// one-shot workers with exit 1 and says so; workers --follow ends with 0,
// as every interrupted follow does.
func TestLiveInterrupted(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		args  []string
		stdin string
		code  int
		want  string
	}{
		{[]string{"kv-inspect", "match"}, `{"model": "m", "messages": [{"role": "user", "content": "Hi"}]}`, 1, "error: interrupted before the fleet was read\n"},
		{[]string{"kv-inspect", "workers"}, "", 1, "error: interrupted before the fleet was read\n"},
		{[]string{"kv-inspect", "workers", "--follow"}, "", 0, ""},
	} {
		ios, in, out, errOut := iostreams.Test()
		in.WriteString(tc.stdin)
		f := &cmdutil.Factory{IOStreams: ios, Env: func(string) (string, bool) { return "", false }}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		code := cli.Run(ctx, f, append(tc.args, "--source", "file", "--file-root", missing, "--log-level", "error"))
		cancel()
		if code != tc.code || out.String() != "" || errOut.String() != tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", tc.args, code, out, errOut)
		}
	}
}

// TestMatchWhyEscaped: the reason a match has no prompt may quote what the
// fleet's cards declare (an artifact's path); the table prints it with
// its control characters escaped, the JSON report keeps it as declared.
func TestMatchWhyEscaped(t *testing.T) {
	root := t.TempDir()
	_, files, pins := kvFleet(t, root, nil)
	evil := filepath.Join(t.TempDir(), "missing\x1b]0;owned\x07", "tokenizer.json")
	for _, file := range files {
		if !strings.Contains(file, "v1/mdc") {
			continue
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatal(err)
		}
		v["card_json"].(map[string]any)["tokenizer"].(map[string]any)["hf_tokenizer_json"].(map[string]any)["path"] = evil
		if data, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { keepAlive(ctx, files) })
	path := filepath.Join(t.TempDir(), "continuum.yaml")
	yaml := fmt.Sprintf(`dynamo:
  enabled: true
  discovery:
    source: file
    file:
      root: %q
      namespace: dynamo
  load:
    direct_allow_cidrs: ["127.0.0.0/8"]
  kv:
    enabled: true
    artifact_cache_dir: %q
    pinned_artifacts: [%q, %q]
`, root, t.TempDir(), pins[0], pins[1])
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	code, out, errOut := runLive(t, nil, body, "kv-inspect", "match", "--config", path, "--duration", "0s", "--artifact-timeout", "10s")
	if code != 0 || !strings.Contains(out, "result: tokenizer_unavailable") || !strings.Contains(out, `missing\x1b]0;owned\x07`) ||
		strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("table: exit %d\n%q\n%s", code, out, errOut)
	}
	code, out, errOut = runLive(t, nil, body, "kv-inspect", "match", "--config", path, "--duration", "0s", "--artifact-timeout", "10s", "-o", "json")
	var rep kvinspect.MatchReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || !strings.Contains(rep.Reason, evil) {
		t.Errorf("json: exit %d (%v)\n%s\n%s", code, err, out, errOut)
	}
}

// TestWorkersRouterStatusEscaped: a router answering with a status line
// that carries terminal controls is quoted escaped in the error, exit 1.
func TestWorkersRouterStatusEscaped(t *testing.T) {
	base := testutil.StatusLineServer(t, "500 bad\x1b]0;owned\x07")
	code, _, errOut := runLive(t, nil, "", "kv-inspect", "workers", "--router", base)
	if code != 1 || strings.ContainsAny(errOut, "\x1b\x07") || !strings.Contains(errOut, `500 bad\x1b]0;owned\x07`) {
		t.Errorf("exit %d %q", code, errOut)
	}
}

// preparedPrompt renders, encodes and hashes body (16-token blocks) as the
// router will, with a loader of its own over the pinned artifacts.
func preparedPrompt(t *testing.T, snap *fleet.Snapshot, pins []string, body string) *kv.Prompt {
	t.Helper()
	loader, err := artifact.NewLoader(artifact.LoaderOptions{Policy: artifact.NewPolicy(mustChecksums(t, pins)...), Build: kv.Build})
	if err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithCancel(context.Background())
	var lwg sync.WaitGroup
	lwg.Go(func() { _ = loader.Run(lctx) })
	defer func() { lcancel(); lwg.Wait() }()
	prompts := kv.NewPrompts(loader)
	var prompt *kv.Prompt
	testutil.Eventually(t, 30*time.Second, "the test's prompt", func() bool {
		var result string
		prompt, result = prompts.Prepare(snap, "m", "/v1/chat/completions", []byte(body), []int{16})
		return result == ""
	})
	return prompt
}

// storedEvent is a kv-events message storing hashes (16-token blocks) on
// worker.
func storedEvent(worker uint64, hashes []uint64) wire.RouterEvent {
	ev := wire.RouterEvent{WorkerID: worker, Kind: wire.KVStored, EventID: 1}
	for i, h := range hashes {
		ev.Blocks = append(ev.Blocks, wire.StoredBlock{BlockHash: uint64(1000 + i), TokensHash: h})
	}
	return ev
}

// publishLoad sends l as publisher pid's kv_metrics every 10 ms until ctx
// ends.
func publishLoad(ctx context.Context, pub *testutil.GoPublisher, pid uint64, l wire.ActiveLoad) {
	for seq := uint64(0); ctx.Err() == nil; seq++ {
		_ = pub.Send(wire.EncodeEventMessage("kv_metrics", pid, seq, 0, wire.EncodeActiveLoad(l)))
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}
