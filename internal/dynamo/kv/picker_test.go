package kv_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

// kvFleet is a snapshot of model "m" workers whose cards declare Qwen3's
// pinned tokenizer and template: prefill ids, decode ids, aggregated ids.
func kvFleet(t testing.TB, prefill, decode, aggregated []uint64) (*fleet.Snapshot, []string) {
	t.Helper()
	var ws []kvWorker
	for _, id := range prefill {
		ws = append(ws, kvWorker{"dynamo", "Prefill", id})
	}
	for _, id := range decode {
		ws = append(ws, kvWorker{"dynamo", "Decode", id})
	}
	for _, id := range aggregated {
		ws = append(ws, kvWorker{"dynamo", "Aggregated", id})
	}
	return kvFleetOf(t, ws)
}

// kvWorker is a worker of kvFleetOf: its namespace, worker_type and id.
type kvWorker struct {
	ns, kind string
	id       uint64
}

// kvFleetOf is kvFleet with each worker's namespace given.
func kvFleetOf(t testing.TB, ws []kvWorker) (*fleet.Snapshot, []string) {
	t.Helper()
	return kvFleetWith(t, ws, "")
}

// kvFleetWith is kvFleetOf with runtime, when not empty, added to every
// card's runtime_config (`"enable_eagle":true`, say).
func kvFleetWith(t testing.TB, ws []kvWorker, runtime string) (*fleet.Snapshot, []string) {
	t.Helper()
	sized := make([]sizedWorker, len(ws))
	for i, w := range ws {
		sized[i] = sizedWorker{w.ns, w.kind, w.id, 16}
	}
	return kvFleetCards(t, "m", sized, runtime)
}

// sizedWorker is a worker of sizedFleet: namespace, worker_type, id and
// kv_cache_block_size.
type sizedWorker struct {
	ns, kind string
	id       uint64
	bs       int
}

// sizedFleet is kvFleetOf with the model named and each worker's block
// size given.
func sizedFleet(t testing.TB, model string, ws []sizedWorker) (*fleet.Snapshot, []string) {
	t.Helper()
	return kvFleetCards(t, model, ws, "")
}

// kvFleetCards builds the test fleets: each worker's endpoint and card,
// serving model with the Qwen3 tokenizer and template pinned, runtime
// added to every card's runtime_config when not empty.
func kvFleetCards(t testing.TB, model string, ws []sizedWorker, runtime string) (*fleet.Snapshot, []string) {
	t.Helper()
	if runtime != "" {
		runtime = "," + runtime
	}
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
	r := fleet.NewReducer()
	t0 := time.Unix(1_800_000_000, 0)
	components := map[string]string{"Prefill": "prefill", "Decode": "decode", "Aggregated": "backend"}
	for _, w := range ws {
		component := components[w.kind]
		r.Put(fmt.Sprintf("v1/instances/%s/%s/generate/%x", w.ns, component, w.id), fmt.Appendf(nil, `{"component":%q,"endpoint":"generate","instance_id":%d}`, component, w.id), t0)
		r.Put(fmt.Sprintf("v1/mdc/%s/%s/generate/%x", w.ns, component, w.id), fmt.Appendf(nil,
			`{"component":%q,"endpoint":"generate","instance_id":%d,"card_json":{"display_name":%q,"worker_type":%q,"kv_cache_block_size":%d,
			"runtime_config":{"total_kv_blocks":10000,"max_num_batched_tokens":8192%s},
			"tokenizer":{"hf_tokenizer_json":{"path":%q,"checksum":%q}},
			"prompt_formatter":{"hf_tokenizer_config_json":{"path":%q,"checksum":%q}}}}`, component, w.id, model, w.kind, w.bs, runtime, tokPath, pins[0], cfgPath, pins[1]), t0)
	}
	return r.Build(t0), pins
}

// idOf is the worker of instance id in snap (the test fleets' ids are
// unique across their namespaces).
func idOf(snap *fleet.Snapshot, id uint64) fleet.WorkerID {
	for w := range snap.Workers.All() {
		if w.ID.InstanceID == id {
			return w.ID
		}
	}
	return fleet.WorkerID{InstanceID: id}
}

// hold makes worker id (rank 0) hold the first n blocks of prompt in ix,
// as a publisher of its namespace would.
func hold(t *testing.T, ix *kv.Index, sub kv.SubscriptionID, id fleet.WorkerID, hashes []uint64, n int) {
	t.Helper()
	w := id.InstanceID
	ev := wire.RouterEvent{WorkerID: w, Kind: wire.KVStored, EventID: 1}
	for i, h := range hashes[:n] {
		ev.Blocks = append(ev.Blocks, wire.StoredBlock{BlockHash: w<<32 | uint64(i), TokensHash: h})
	}
	if out := ix.Apply(sub, load.NS(id.Namespace), &ev); out.Result != kv.ResultAccepted {
		t.Fatalf("stored: %+v", out)
	}
}

// liveKV is the load store, KV index and prompts of a test fleet whose
// every worker is live, its artifacts served by a loader.
func liveKV(t testing.TB, snap *fleet.Snapshot, pins []string) (*load.Store, *kv.Index, *kv.Prompts) {
	t.Helper()
	store := load.NewStore(time.Minute, nil)
	live := map[fleet.WorkerID]load.LiveWorker{}
	for w := range snap.Workers.All() {
		live[w.ID] = load.LiveWorker{}
	}
	store.SetLiveAndRetain(live)
	ix := kv.NewIndex()
	ix.SetLive(live)
	return store, ix, kv.NewPrompts(startLoader(t, pins...))
}

func longChat(words int) string {
	var b strings.Builder
	for i := range words {
		fmt.Fprintf(&b, "word%d ", i%97)
	}
	return fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":"You answer briefly."},{"role":"user","content":%q}]}`, b.String())
}

// TestPickerPrefersTheHolder: the prefill worker holding the prompt's
// prefix gets the request over an idle one; without a holder the choice
// is by load; the selection results are counted.
func TestPickerPrefersTheHolder(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, []uint64{10, 11, 12}, []uint64{20}, nil)
	store := load.NewStore(time.Minute, nil)
	live := map[fleet.WorkerID]load.LiveWorker{}
	for w := range snap.Workers.All() {
		live[w.ID] = load.LiveWorker{DPSize: 1}
	}
	store.SetLiveAndRetain(live)
	ix := kv.NewIndex()
	ix.SetLive(live)
	prompts := kv.NewPrompts(startLoader(t, pins...))
	m := telemetry.NewKVMetrics(nil)
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}, SendTokenData: true}, m, nil, nil)

	body := longChat(400)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	hashes := pr.Hashes[16]
	if len(hashes) < 20 {
		t.Fatalf("only %d blocks", len(hashes))
	}
	hold(t, ix, 1, idOf(snap, 11), hashes, len(hashes)-2)
	hold(t, ix, 2, idOf(snap, 12), hashes, 5)
	req := pick.Request{Model: "m", Namespaces: []string{"dynamo"}, EstPromptTokens: 1, Path: "/v1/chat/completions", Body: []byte(body)}
	for range 3 {
		pin, tk, err := p.Reserve(snap, req, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.Release(tk)
		if pin.Prefill == nil || pin.Prefill.Worker.ID.InstanceID != 11 || pin.PrefillReason != pick.ReasonKVAware {
			t.Fatalf("prefill %+v (%s), want the holder 11", pin.Prefill, pin.PrefillReason)
		}
		if pin.Decode.Worker.ID.InstanceID != 20 || len(pin.TokenIDs) != len(pr.IDs) {
			t.Errorf("decode %d, %d token ids", pin.Decode.Worker.ID.InstanceID, len(pin.TokenIDs))
		}
	}
	if n := promtest.ToFloat64(m.Selections.WithLabelValues(kv.ResultOverlap)); n != 3 {
		t.Errorf("overlap selections %v", n)
	}
	// A prompt nobody holds: no overlap, picked all the same.
	other := []byte(`{"model":"m","messages":[{"role":"user","content":"Something else entirely, and long enough to fill a few blocks of sixteen tokens each, surely."}]}`)
	pin, tk, err := p.Reserve(snap, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: other}, time.Now())
	if err != nil || pin.Prefill == nil {
		t.Fatalf("%+v %v", pin, err)
	}
	p.Release(tk)
	if n := promtest.ToFloat64(m.Selections.WithLabelValues(kv.ResultNoOverlap)); n != 1 {
		t.Errorf("no_overlap selections %v", n)
	}
	// Settings apply at the next request: without token data, no ids.
	p.SetSettings(kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}})
	pin, tk, _ = p.Reserve(snap, req, time.Now())
	p.Release(tk)
	if pin.TokenIDs != nil {
		t.Error("token ids sent with send_token_data off")
	}
}

// TestPickerEagleWorkers: the prompt is hashed for Eagle workers
// (runtime_config.enable_eagle) over windows one token longer than a
// block, as their publishers hash their blocks, so that the holder of the
// prompt's Eagle blocks wins; plain block hashes match nothing there.
func TestPickerEagleWorkers(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleetWith(t, []kvWorker{{"dynamo", "Prefill", 10}, {"dynamo", "Prefill", 11}, {"dynamo", "Decode", 20}}, `"enable_eagle":true`)
	live := map[fleet.WorkerID]load.LiveWorker{}
	for w := range snap.Workers.All() {
		if !w.Eagle {
			t.Fatalf("worker %d: enable_eagle not read", w.ID.InstanceID)
		}
		live[w.ID] = load.LiveWorker{DPSize: 1}
	}
	_, ix, prompts, m, p := newKVRig(t, pins, live)
	body := longChat(400)
	ids := prepared(t, prompts, snap, "/v1/chat/completions", body, 16).IDs
	eagle, plain := wire.EagleBlockHashes(ids, 16, wire.XXH3Seed), wire.LocalBlockHashes(ids, 16, wire.XXH3Seed)
	if len(eagle) < 20 {
		t.Fatalf("only %d blocks", len(eagle))
	}
	hold(t, ix, 1, idOf(snap, 10), plain, len(plain)) // what a plain hashing would have matched
	hold(t, ix, 2, idOf(snap, 11), eagle, len(eagle)-2)
	req := pick.Request{Model: "m", Namespaces: []string{"dynamo"}, EstPromptTokens: 1, Path: "/v1/chat/completions", Body: []byte(body)}
	pin, tk, err := p.Reserve(snap, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.Release(tk)
	if pin.Prefill == nil || pin.Prefill.Worker.ID.InstanceID != 11 || pin.PrefillReason != pick.ReasonKVAware {
		t.Fatalf("prefill %+v (%s), want the Eagle holder 11", pin.Prefill, pin.PrefillReason)
	}
	if n := promtest.ToFloat64(m.Selections.WithLabelValues(kv.ResultOverlap)); n != 1 {
		t.Errorf("overlap selections %v", n)
	}
}

// newKVRig is a KV-aware picker (overlap credit and prefill scale 1) over
// the live workers, with its load store, index, prompts and metrics.
func newKVRig(t *testing.T, pins []string, live map[fleet.WorkerID]load.LiveWorker) (*load.Store, *kv.Index, *kv.Prompts, *telemetry.KVMetrics, *kv.Picker) {
	t.Helper()
	store := load.NewStore(time.Minute, nil)
	store.SetLiveAndRetain(live)
	ix := kv.NewIndex()
	ix.SetLive(live)
	prompts := kv.NewPrompts(startLoader(t, pins...))
	m := telemetry.NewKVMetrics(nil)
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, m, nil, nil)
	return store, ix, prompts, m, p
}

// decodeSampler returns what gives worker id of snap a fresh sample with no
// prefill backlog and decodeBlocks active decode blocks.
func decodeSampler(t *testing.T, store *load.Store, snap *fleet.Snapshot) func(id, decodeBlocks uint64) {
	zero := uint64(0)
	seq := uint64(0)
	return func(id, decodeBlocks uint64) {
		t.Helper()
		l := wire.ActiveLoad{WorkerID: id, ActivePrefillTokens: &zero, ActiveDecodeBlocks: &decodeBlocks}
		seq++
		if res := store.Apply(load.Sample{Load: l, Namespace: load.NS(idOf(snap, id).Namespace), PublisherID: id, Sequence: seq, ReceivedAt: time.Now()}); res != "" {
			t.Fatal(res)
		}
	}
}

// TestPickerPrefillFirstAcrossNamespaces: over two graphs that both pair
// prefill and decode workers, the formula weighs the prefill workers of
// both, and the winner's graph is the pin's, its decode worker chosen
// there by the load rule: graph b's prefill worker holds the prompt, so
// b's pair serves it though a's decode worker is the lighter one (the
// load-only picker's choice). With b's decode worker excluded (a re-pin),
// b cannot take the request and a's pair does, its prefill worker chosen
// by the formula.
func TestPickerPrefillFirstAcrossNamespaces(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleetOf(t, []kvWorker{{"a", "Prefill", 10}, {"a", "Decode", 20}, {"b", "Prefill", 11}, {"b", "Decode", 21}})
	store, ix, prompts, m, p := newKVRig(t, pins, map[fleet.WorkerID]load.LiveWorker{{Namespace: "a", InstanceID: 10}: {DPSize: 1}, {Namespace: "a", InstanceID: 20}: {DPSize: 1},
		{Namespace: "b", InstanceID: 11}: {DPSize: 1}, {Namespace: "b", InstanceID: 21}: {DPSize: 1}})
	sample := decodeSampler(t, store, snap)
	sample(10, 0)
	sample(11, 0)
	sample(20, 10)
	sample(21, 20)
	body := longChat(400)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	hold(t, ix, 1, idOf(snap, 11), pr.Hashes[16], len(pr.Hashes[16])-1)
	req := pick.Request{Model: "m", Namespaces: []string{"a", "b"}, Path: "/v1/chat/completions", Body: []byte(body)}
	lpin, err := pick.NewLoadBased(store).Pick(snap, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if lpin.Decode.Worker.ID.InstanceID != 20 {
		t.Fatalf("the load-only picker chose decode %d; the test wants the lighter 20", lpin.Decode.Worker.ID.InstanceID)
	}
	pin, tk, err := p.Reserve(snap, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.Release(tk)
	if pin.Namespace != "b" || pin.Prefill == nil || pin.Prefill.Worker.ID.InstanceID != 11 || pin.PrefillReason != pick.ReasonKVAware ||
		pin.Decode.Worker.ID.InstanceID != 21 || pin.DecodeReason != pick.ReasonLoad {
		t.Fatalf("pin %s: prefill %+v (%s), decode %d (%s); want b: the holder 11 prefilling, its graph's decode 21 by load",
			pin.Namespace, pin.Prefill, pin.PrefillReason, pin.Decode.Worker.ID.InstanceID, pin.DecodeReason)
	}
	if n := promtest.ToFloat64(m.Selections.WithLabelValues(kv.ResultOverlap)); n != 1 {
		t.Errorf("overlap selections %v", n)
	}
	// b's decode worker excluded (a re-pin): a's pair.
	pin, tk, err = p.Reserve(snap, pick.Request{Model: "m", Namespaces: []string{"a", "b"}, Path: "/v1/chat/completions", Body: []byte(body),
		Exclude: []fleet.WorkerID{{Namespace: "b", InstanceID: 21}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.Release(tk)
	if pin.Namespace != "a" || pin.Decode.Worker.ID.InstanceID != 20 || pin.Prefill == nil || pin.Prefill.Worker.ID.InstanceID != 10 ||
		pin.PrefillReason != pick.ReasonKVAware {
		t.Fatalf("with 21 excluded: pin %s, decode %d, prefill %+v (%s); want a's pair, its prefill by the formula",
			pin.Namespace, pin.Decode.Worker.ID.InstanceID, pin.Prefill, pin.PrefillReason)
	}
	if n := promtest.ToFloat64(m.Selections.WithLabelValues(kv.ResultNoOverlap)); n != 1 {
		t.Errorf("no_overlap selections %v", n)
	}
}

// TestPickerScoresSelfPrefillingDecodeWorkers: decode workers without a
// prefill pool prefill their own requests, so the formula chooses among
// them as among aggregated workers: the one holding the prompt gets it.
func TestPickerScoresSelfPrefillingDecodeWorkers(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, nil, []uint64{20, 21}, nil)
	_, ix, prompts, m, p := newKVRig(t, pins, map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 20}: {DPSize: 1}, {Namespace: "dynamo", InstanceID: 21}: {DPSize: 1}})
	body := longChat(200)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	hold(t, ix, 1, idOf(snap, 21), pr.Hashes[16], 8)
	for range 4 {
		pin, tk, err := p.Reserve(snap, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.Release(tk)
		if pin.Decode.Worker.ID.InstanceID != 21 || pin.DecodeReason != pick.ReasonKVAware || pin.Prefill != nil || pin.PrefillReason != pick.ReasonNoPrefillPool {
			t.Fatalf("decode %d (%s), prefill %v (%s): want the holder 21 prefilling itself", pin.Decode.Worker.ID.InstanceID, pin.DecodeReason, pin.Prefill, pin.PrefillReason)
		}
	}
	if n := promtest.ToFloat64(m.Selections.WithLabelValues(kv.ResultOverlap)); n != 4 {
		t.Errorf("overlap selections %v", n)
	}
}

// TestPickerExcludesAndSkipsBusy: the KV-aware choice keeps to the load
// picker's candidacy: a worker the request excludes (a re-pin) or a busy
// one is not chosen however much of the prompt it holds.
func TestPickerExcludesAndSkipsBusy(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, []uint64{10, 11, 12}, []uint64{20}, nil)
	p, store, ix, prompts, ids := kvPickerOn(t, snap, pins)
	body := longChat(400)
	hashes := prepared(t, prompts, snap, "/v1/chat/completions", body, 16).Hashes[16]
	hold(t, ix, 1, idOf(snap, 11), hashes, len(hashes)-2)
	hold(t, ix, 2, idOf(snap, 12), hashes, 5)
	// Fresh samples; worker 11 has 9500 of its 10000 blocks in use.
	zero := uint64(0)
	for i, id := range []uint64{10, 11, 12, 20} {
		l := wire.ActiveLoad{WorkerID: id, ActivePrefillTokens: &zero, ActiveDecodeBlocks: &zero}
		if id == 11 {
			used := uint64(9500)
			l.KVUsedBlocks = &used
		}
		if res := store.Apply(load.Sample{Load: l, Namespace: load.NS(idOf(snap, id).Namespace), PublisherID: id, Sequence: uint64(i), ReceivedAt: time.Now()}); res != "" {
			t.Fatal(res)
		}
	}
	prefillOf := func(req pick.Request) uint64 { // without recording: each choice sees the same loads
		t.Helper()
		ex, err := p.Explain(snap, req, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return ex.Pin.Prefill.Worker.ID.InstanceID
	}
	req := pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}
	if got := prefillOf(req); got != 11 {
		t.Fatalf("prefill %d, want the holder 11", got)
	}
	excl := req
	excl.Exclude = []fleet.WorkerID{ids[11]}
	if got := prefillOf(excl); got != 12 {
		t.Fatalf("with 11 excluded: prefill %d, want the next holder 12", got)
	}
	busy := req
	busy.Busy = &pick.BusyThreshold{KVBlocks: 0.9, Hysteresis: 0.05}
	if got := prefillOf(busy); got != 12 {
		t.Fatalf("with 11 busy: prefill %d, want the next holder 12", got)
	}
}

// TestPickerAggregatedAndFallback: in an aggregated fleet the decode
// choice follows the overlap; a request that cannot be rendered is picked
// by load and counted.
func TestPickerAggregatedAndFallback(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, nil, nil, []uint64{30, 31})
	store := load.NewStore(time.Minute, nil)
	live := map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 30}: {}, {Namespace: "dynamo", InstanceID: 31}: {}}
	store.SetLiveAndRetain(live)
	ix := kv.NewIndex()
	ix.SetLive(live)
	prompts := kv.NewPrompts(startLoader(t, pins...))
	m := telemetry.NewKVMetrics(nil)
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, m, nil, nil)
	body := longChat(200)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	hold(t, ix, 1, idOf(snap, 31), pr.Hashes[16], 8)
	for range 3 {
		pin, tk, err := p.Reserve(snap, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.Release(tk)
		if pin.Decode.Worker.ID.InstanceID != 31 || pin.DecodeReason != pick.ReasonKVAware || pin.Prefill != nil {
			t.Fatalf("decode %d (%s), prefill %v: want the holder 31", pin.Decode.Worker.ID.InstanceID, pin.DecodeReason, pin.Prefill)
		}
	}
	pin, tk, err := p.Reserve(snap, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(`{"messages":`)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.Release(tk)
	if pin.DecodeReason == pick.ReasonKVAware || promtest.ToFloat64(m.Selections.WithLabelValues(kv.ResultRenderUnavailable)) != 1 {
		t.Errorf("an unreadable body: %s, render_unavailable %v", pin.DecodeReason, promtest.ToFloat64(m.Selections.WithLabelValues(kv.ResultRenderUnavailable)))
	}
}

// TestPickerConditionalLacksTooMuch: conditional disaggregation lets a
// decode worker prefill only what is mostly cached on it: a prompt nobody
// holds, or one whose holder lacks 70 % of it or more, keeps the prefill
// pool.
func TestPickerConditionalLacksTooMuch(t *testing.T) {
	t.Parallel()
	snap, ix, p, m, pr, req := conditionalPicker(t)
	check := func(what string) {
		t.Helper()
		for range 4 {
			pin, tk, err := p.Reserve(snap, req, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			p.Release(tk)
			if pin.Bypass || pin.Prefill == nil {
				t.Fatalf("%s: bypass %v, prefill %v", what, pin.Bypass, pin.Prefill)
			}
		}
	}
	check("nothing cached")
	// 10 of the prompt's blocks: the holder lacks over 70 % of it.
	if len(pr.Hashes[16]) < 40 {
		t.Fatalf("prompt of %d blocks, want 40 or more", len(pr.Hashes[16]))
	}
	hold(t, ix, 1, idOf(snap, 21), pr.Hashes[16], 10)
	check("10 blocks cached")
	if n := promtest.ToFloat64(m.Selections.WithLabelValues(kv.ResultBypass)); n != 0 {
		t.Errorf("bypass counted %v times", n)
	}
}

// TestPickerConditionalDisaggregation: with conditional disaggregation the
// decode worker holding the prefix is chosen and prefills the request
// itself; a busy threshold without a sample to check it against keeps the
// pair.
func TestPickerConditionalDisaggregation(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, []uint64{10, 11}, []uint64{20, 21}, nil)
	store, ix, prompts := liveKV(t, snap, pins)
	m := telemetry.NewKVMetrics(nil)
	terms := kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: terms, Conditional: true}, m, nil, nil)
	body := longChat(300)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	hold(t, ix, 1, idOf(snap, 21), pr.Hashes[16], len(pr.Hashes[16]))
	req := pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}
	pin, tk, err := p.Reserve(snap, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.Release(tk)
	if !pin.Bypass || pin.Prefill != nil || pin.Decode.Worker.ID.InstanceID != 21 || pin.PrefillReason != pick.ReasonConditional {
		t.Fatalf("bypass %v, prefill %v, decode %d (%s)", pin.Bypass, pin.Prefill, pin.Decode.Worker.ID.InstanceID, pin.PrefillReason)
	}
	if promtest.ToFloat64(m.Selections.WithLabelValues(kv.ResultBypass)) != 1 {
		t.Error("bypass not counted")
	}
	busy := 0.5
	p.SetSettings(kv.Settings{Terms: terms, Conditional: true, DecodeBusyThreshold: &busy})
	pin, tk, err = p.Reserve(snap, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.Release(tk)
	if pin.Bypass || pin.Prefill == nil {
		t.Errorf("bypassed without a sample to check the threshold: %+v", pin)
	}

	// A decode worker that went idle publishes 0 once and then nothing:
	// its last sample, stale by now, says it holds no active blocks, so
	// the threshold has something to check and the bypass goes ahead.
	zero, full := uint64(0), uint64(6000)
	long := time.Now().Add(-10 * time.Minute)
	for i, id := range []uint64{20, 21} {
		l := wire.ActiveLoad{WorkerID: id, ActiveDecodeBlocks: &zero, KVUsedBlocks: &zero}
		if res := store.Apply(load.Sample{Load: l, Namespace: load.NS(idOf(snap, id).Namespace), PublisherID: id, Sequence: uint64(i), ReceivedAt: long}); res != "" {
			t.Fatal(res)
		}
	}
	pin, tk, err = p.Reserve(snap, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.Release(tk)
	if !pin.Bypass || pin.Prefill != nil || pin.Decode.Worker.ID.InstanceID != 21 {
		t.Errorf("an idle decode worker (stale sample of 0 blocks) under the threshold: bypass %v, prefill %v, decode %d",
			pin.Bypass, pin.Prefill, pin.Decode.Worker.ID.InstanceID)
	}
	// Fresh and over half its 10000 blocks with this request: refused.
	l := wire.ActiveLoad{WorkerID: 21, ActiveDecodeBlocks: &full, KVUsedBlocks: &full}
	if res := store.Apply(load.Sample{Load: l, Namespace: load.NS("dynamo"), PublisherID: 21, Sequence: 2, ReceivedAt: time.Now()}); res != "" {
		t.Fatal(res)
	}
	l = wire.ActiveLoad{WorkerID: 20, ActiveDecodeBlocks: &full, KVUsedBlocks: &full}
	if res := store.Apply(load.Sample{Load: l, Namespace: load.NS("dynamo"), PublisherID: 20, Sequence: 2, ReceivedAt: time.Now()}); res != "" {
		t.Fatal(res)
	}
	pin, tk, err = p.Reserve(snap, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.Release(tk)
	if pin.Bypass || pin.Prefill == nil {
		t.Errorf("bypassed a decode worker over the threshold: %+v", pin)
	}
}

// TestPickerExplain: Explain says what Reserve would pick, and every
// candidate's overlap and cost, without recording a dispatch.
func TestPickerExplain(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, []uint64{10, 11}, []uint64{20}, nil)
	store := load.NewStore(time.Minute, nil)
	live := map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 10}: {}, {Namespace: "dynamo", InstanceID: 11}: {}, {Namespace: "dynamo", InstanceID: 20}: {}}
	store.SetLiveAndRetain(live)
	ix := kv.NewIndex()
	ix.SetLive(live)
	prompts := kv.NewPrompts(startLoader(t, pins...))
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, nil, nil, nil)
	body := longChat(300)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	hold(t, ix, 1, idOf(snap, 10), pr.Hashes[16], 6)
	ex, err := p.Explain(snap, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if ex.Result != kv.ResultOverlap || ex.Pin.Prefill == nil || ex.Pin.Prefill.Worker.ID.InstanceID != 10 || ex.PromptTokens != len(pr.IDs) {
		t.Fatalf("explanation %+v", ex)
	}
	if len(ex.Candidates) != 2 {
		t.Fatalf("%d candidates", len(ex.Candidates))
	}
	for _, c := range ex.Candidates {
		want := map[uint64]int{10: 6, 11: 0}[c.Worker.ID.InstanceID]
		if c.Phase != pick.PhasePrefill || !c.Competing || c.Cost.Overlap != want || c.State != "quiet" {
			t.Errorf("candidate %d: %+v", c.Worker.ID.InstanceID, c)
		}
	}
}

// TestPickerExplainListsEachCandidateOnce: over two pairing graphs whose
// prefix holder's graph cannot take the request (its decode worker
// excluded), the prefill workers are scored twice, the holder set aside;
// the explanation lists each once.
func TestPickerExplainListsEachCandidateOnce(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleetOf(t, []kvWorker{{"a", "Prefill", 10}, {"a", "Decode", 20}, {"b", "Prefill", 11}, {"b", "Decode", 21}})
	_, ix, prompts, _, p := newKVRig(t, pins, map[fleet.WorkerID]load.LiveWorker{{Namespace: "a", InstanceID: 10}: {}, {Namespace: "a", InstanceID: 20}: {},
		{Namespace: "b", InstanceID: 11}: {}, {Namespace: "b", InstanceID: 21}: {}})
	body := longChat(300)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	hold(t, ix, 1, idOf(snap, 11), pr.Hashes[16], 6)
	ex, err := p.Explain(snap, pick.Request{Model: "m", Namespaces: []string{"a", "b"}, Path: "/v1/chat/completions", Body: []byte(body),
		Exclude: []fleet.WorkerID{{Namespace: "b", InstanceID: 21}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if ex.Pin.Namespace != "a" || ex.Pin.Prefill == nil || ex.Pin.Prefill.Worker.ID.InstanceID != 10 {
		t.Fatalf("pin %+v", ex.Pin)
	}
	seen := map[uint64]int{}
	for _, c := range ex.Candidates {
		seen[c.Worker.ID.InstanceID]++
	}
	if len(ex.Candidates) != 2 || seen[10] != 1 || seen[11] != 1 {
		t.Fatalf("candidates listed %v (%d)", seen, len(ex.Candidates))
	}
}

// TestPickerCountsWhatQuietWorkersWereSent: a quiet worker (idle at its
// last sample, or never heard from) competes with what the router sent it
// since, as the load rule has it, not as empty forever: one that died idle
// would otherwise take every request whose prefix nobody holds.
func TestPickerCountsWhatQuietWorkersWereSent(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, []uint64{10, 11}, []uint64{20}, nil)
	store := load.NewStore(time.Minute, nil)
	live := map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 10}: {DPSize: 1}, {Namespace: "dynamo", InstanceID: 11}: {DPSize: 1}, {Namespace: "dynamo", InstanceID: 20}: {DPSize: 1}}
	store.SetLiveAndRetain(live)
	ix := kv.NewIndex()
	ix.SetLive(live)
	prompts := kv.NewPrompts(startLoader(t, pins...))
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, nil, nil, nil)
	// 10 is fresh with a backlog of 32 tokens; 11 never published (quiet).
	backlog, zero := uint64(32), uint64(0)
	for i, id := range []uint64{10, 20} {
		l := wire.ActiveLoad{WorkerID: id, ActivePrefillTokens: &backlog, ActiveDecodeBlocks: &zero}
		if res := store.Apply(load.Sample{Load: l, Namespace: load.NS(idOf(snap, id).Namespace), PublisherID: id, Sequence: uint64(i), ReceivedAt: time.Now()}); res != "" {
			t.Fatal(res)
		}
	}
	prepared(t, prompts, snap, "/v1/chat/completions", longChat(100), 16) // the artifacts are loaded
	got := map[uint64]int{}
	for i := range 6 {
		// Prompts that share nothing (requests sharing a prefix would
		// rightly gather where it is being computed).
		body := strings.Replace(longChat(100), "You answer briefly.", fmt.Sprintf("Request %d of six, to be answered briefly.", i), 1)
		pin, _, err := p.Reserve(snap, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if pin.PrefillReason != pick.ReasonKVAware {
			t.Fatalf("prefill reason %s", pin.PrefillReason)
		}
		got[pin.Prefill.Worker.ID.InstanceID]++
	}
	if got[11] == 0 || got[10] == 0 {
		t.Fatalf("prefill picks %v: want the quiet worker first, then both as what it was sent counts", got)
	}
}

// TestPickerAggregatedCountsWhatItPrefills: an aggregated worker prefills
// the requests it is sent, so until its next sample the prompt tokens it
// was sent count in its prefill term as they will in that sample, whether
// its last sample is fresh or went stale idle, or it never published one
// (quiet, like an idle worker); a worker just sent a prompt does not look
// as cheap as an idle one for the next.
func TestPickerAggregatedCountsWhatItPrefills(t *testing.T) {
	t.Parallel()
	const never = -1 // 30 and 31 never published
	for _, age := range []time.Duration{time.Millisecond, 10 * time.Minute, never} {
		// 32 is fresh and busy: backlogs compete (with no fresh sample
		// about, none would count), and it is never the cheapest.
		snap, pins := kvFleet(t, nil, nil, []uint64{30, 31, 32})
		store, ix, prompts := liveKV(t, snap, pins)
		p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, nil, nil, nil)
		body := longChat(300)
		pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
		now := time.Now()
		zero := uint64(0)
		busy := uint64(5000)
		for i, id := range []uint64{30, 31, 32} {
			l := wire.ActiveLoad{WorkerID: id, ActiveDecodeBlocks: &zero, ActivePrefillTokens: &zero, KVUsedBlocks: &zero}
			at := now.Add(-age)
			if id == 32 {
				l.ActiveDecodeBlocks, at = &busy, now
			} else if age == never {
				continue
			}
			if res := store.Apply(load.Sample{Load: l, Namespace: load.NS("dynamo"), PublisherID: id, Sequence: uint64(i), ReceivedAt: at}); res != "" {
				t.Fatal(res)
			}
		}
		req := pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}
		pin, _, err := p.Reserve(snap, req, now) // in flight
		if err != nil {
			t.Fatal(err)
		}
		first := pin.Decode.Worker.ID.InstanceID
		ex, err := p.Explain(snap, req, now.Add(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ex.Candidates {
			if c.Worker.ID.InstanceID == 32 {
				continue
			}
			want := float64(len(pr.IDs)) / 16 // this request's own prompt
			if c.Worker.ID.InstanceID == first {
				want *= 2 // and the one in flight
			}
			if math.Abs(c.Cost.RawPrefillBlocks-want) > 0.01 {
				t.Errorf("sample %v old: worker %d (first pick %d): raw prefill blocks %.2f, want %.2f", age, c.Worker.ID.InstanceID, first, c.Cost.RawPrefillBlocks, want)
			}
		}
		if ex.Pin.Decode.Worker.ID.InstanceID == first {
			t.Errorf("sample %v old: the same prompt went to worker %d twice, the other idle", age, first)
		}
	}
}

// TestPickerCountsInFlightPrefixes: where backlogs compete, a request
// sharing its leading blocks with one still in flight goes to the rank
// that request went to (it computes them first), before any kv-event
// says so, while the rank's backlog stays within what the credit is
// worth; released, the request no longer counts. Without fresh samples
// the overlap would decide alone, so requests in flight do not count and
// equal costs take turns.
func TestPickerCountsInFlightPrefixes(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, []uint64{10, 11}, []uint64{20}, nil)
	prompts := kv.NewPrompts(startLoader(t, pins...))
	turn1 := longChat(300)
	turn2 := strings.Replace(turn1, `"}]}`, ` and then some more words"},{"role":"assistant","content":"Sure."},{"role":"user","content":"Go on."}]}`, 1)
	prepared(t, prompts, snap, "/v1/chat/completions", turn1, 16) // the artifacts are loaded
	req := func(body string) pick.Request {
		return pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}
	}
	p, _ := pairPicker(t, prompts, true)
	first, t1, err := p.Reserve(snap, req(turn1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	home := first.Prefill.Worker.ID.InstanceID
	ex, err := p.Explain(snap, req(turn2), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ex.Candidates {
		if c.Phase != pick.PhasePrefill {
			continue
		}
		if id := c.Worker.ID.InstanceID; id == home && (c.Indexed != 0 || c.Cost.Overlap < 10) || id != home && c.Cost.Overlap != 0 {
			t.Errorf("worker %d: indexed %d, overlap %d", id, c.Indexed, c.Cost.Overlap)
		}
	}
	// The rank holds nothing the index knows of yet: no overlap to count.
	if ex.Result != kv.ResultNoOverlap {
		t.Errorf("result %s for a prefix only in flight, want %s", ex.Result, kv.ResultNoOverlap)
	}
	second, t2, err := p.Reserve(snap, req(turn2), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got := second.Prefill.Worker.ID.InstanceID; got != home {
		t.Fatalf("the next turn went to %d while its first turn is in flight on %d", got, home)
	}
	if n, blocks := p.InFlightPrefixes(); n != 2 || blocks == 0 {
		t.Fatalf("in flight: %d requests, %d blocks", n, blocks)
	}
	p.Release(t1)
	p.Release(t2)
	if n, blocks := p.InFlightPrefixes(); n != 0 || blocks != 0 {
		t.Fatalf("released, still in flight: %d requests, %d blocks", n, blocks)
	}

	// Released, the two no longer lend their prefix to the home rank, but
	// their load stays until its next sample: the same prompt goes to the
	// idle rank.
	third, _, _ := p.Reserve(snap, req(turn1), time.Now())
	if third.Prefill.Worker.ID.InstanceID == home {
		t.Fatalf("the third request went to the rank (%d) with two prompts queued and none in flight", home)
	}

	p, _ = pairPicker(t, prompts, false)
	got := map[uint64]int{}
	for range 4 {
		pin, _, err := p.Reserve(snap, req(turn1), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got[pin.Prefill.Worker.ID.InstanceID]++
	}
	if got[10] != 2 || got[11] != 2 {
		t.Fatalf("without fresh samples, identical requests in flight went %v: want them to take turns", got)
	}
}

// TestPickerLedgerCountsWhatTheRankComputes: a request pinned to a rank
// that holds most of its prompt adds to the rank's backlog (until the
// rank's next sample) only the tokens it lacks, as the rank itself will
// publish them.
func TestPickerLedgerCountsWhatTheRankComputes(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, []uint64{10, 11}, []uint64{20}, nil)
	prompts := kv.NewPrompts(startLoader(t, pins...))
	p, ix := pairPicker(t, prompts, true)
	body := longChat(300)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	hashes := pr.Hashes[16]
	hold(t, ix, 1, idOf(snap, 11), hashes, len(hashes)-2)
	req := func(body string) pick.Request {
		return pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}
	}
	pin, _, err := p.Reserve(snap, req(body), time.Now())
	if err != nil || pin.Prefill.Worker.ID.InstanceID != 11 {
		t.Fatalf("pin %+v, %v: want the holder 11", pin.Prefill, err)
	}
	other := strings.Replace(longChat(50), "You answer briefly.", "Something else.", 1)
	ex, err := p.Explain(snap, req(other), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := float64(len(pr.IDs) - (len(hashes)-2)*16)
	found := false
	for _, c := range ex.Candidates {
		if c.Phase != pick.PhasePrefill || c.Worker.ID.InstanceID != 11 {
			continue
		}
		found = true
		if backlog := c.Cost.RawPrefillBlocks*16 - float64(ex.PromptTokens); backlog != want {
			t.Errorf("the holder's backlog %v tokens, want the %v its cache lacked (of %d)", backlog, want, len(pr.IDs))
		}
	}
	if !found {
		t.Errorf("the holder 11 is not among the prefill candidates: %+v", ex.Candidates)
	}
}

// pairPicker is a KV-aware picker (credit 1, scale 1) over the live
// prefill workers 10 and 11 and decode worker 20 of kvFleet, with its
// index; with fresh, each has a sample of empty backlogs.
func pairPicker(t *testing.T, prompts *kv.Prompts, fresh bool) (*kv.Picker, *kv.Index) {
	t.Helper()
	store := load.NewStore(time.Minute, nil)
	live := map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 10}: {DPSize: 1}, {Namespace: "dynamo", InstanceID: 11}: {DPSize: 1}, {Namespace: "dynamo", InstanceID: 20}: {DPSize: 1}}
	store.SetLiveAndRetain(live)
	if fresh {
		zero := uint64(0)
		for i, id := range []uint64{10, 11, 20} {
			l := wire.ActiveLoad{WorkerID: id, ActivePrefillTokens: &zero, ActiveDecodeBlocks: &zero}
			if res := store.Apply(load.Sample{Load: l, Namespace: load.NS("dynamo"), PublisherID: id, Sequence: uint64(i), ReceivedAt: time.Now()}); res != "" {
				t.Fatal(res)
			}
		}
	}
	ix := kv.NewIndex()
	ix.SetLive(live)
	return kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, nil, nil, nil), ix
}

// TestFreshElsewhereStillExcludesTheSilent: when any rank has a fresh
// sample carrying the phase's backlog, the fresh ranks and the quiet ones
// compete and the rest are left out.
// Prefill worker 10 has the only fresh sample but cannot take this request
// (busy, or excluded by a re-pin); 11 went silent with a backlog of 4000
// tokens (stale sample: possibly dead) but holds the prompt's prefix; 12
// never published (quiet). The load rule picks 12; the KV-aware choice
// must not hand the request to the silent 11 because the one fresh rank
// was set aside before the scorer saw the candidates.
func TestFreshElsewhereStillExcludesTheSilent(t *testing.T) {
	snap, pins := kvFleet(t, []uint64{10, 11, 12}, []uint64{20}, nil)
	p, store, ix, prompts, ids := kvPickerOn(t, snap, pins)
	body := longChat(400)
	hashes := prepared(t, prompts, snap, "/v1/chat/completions", body, 16).Hashes[16]
	hold(t, ix, 1, ids[11], hashes, len(hashes))

	zero, backlog, used := uint64(0), uint64(4000), uint64(9500)
	now := time.Now()
	apply := func(id uint64, l wire.ActiveLoad, at time.Time) {
		t.Helper()
		if res := store.Apply(load.Sample{Load: l, Namespace: load.NS(ids[id].Namespace), PublisherID: id, Sequence: 1, ReceivedAt: at}); res != "" {
			t.Fatal(res)
		}
	}
	// 10: fresh, idle prefill, but 9500 of its 10000 blocks in use.
	apply(10, wire.ActiveLoad{WorkerID: 10, ActivePrefillTokens: &zero, ActiveDecodeBlocks: &zero, KVUsedBlocks: &used}, now)
	// 11: last heard from two minutes ago (max_staleness 1 m) with a backlog.
	apply(11, wire.ActiveLoad{WorkerID: 11, ActivePrefillTokens: &backlog, ActiveDecodeBlocks: &zero}, now.Add(-2*time.Minute))
	// 20: the decode worker, fresh and idle.
	apply(20, wire.ActiveLoad{WorkerID: 20, ActivePrefillTokens: &zero, ActiveDecodeBlocks: &zero}, now)

	base := pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}
	busy := base
	busy.Busy = &pick.BusyThreshold{KVBlocks: 0.9, Hysteresis: 0.05}
	excl := base
	excl.Exclude = []fleet.WorkerID{ids[10]}
	for name, req := range map[string]pick.Request{"10 busy": busy, "10 excluded": excl} {
		loadOnly, err := pick.NewLoadBased(store).Pick(snap, req, now)
		if err != nil {
			t.Fatal(err)
		}
		ex, err := p.Explain(snap, req, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := ex.Pin.Prefill.Worker.ID.InstanceID; got == 11 {
			t.Errorf("%s: prefill 11 (silent with a backlog, left out while a fresh rank exists; the load rule picks %d), reason %q",
				name, loadOnly.Prefill.Worker.ID.InstanceID, ex.Pin.PrefillReason)
		}
	}
}

// kvPickerOn is a KV-aware picker (overlap credit and prefill load scale 1)
// over snap's workers, one rank each and all live, with the artifacts pins
// names; with its load store, its index, its prompts and the workers' ids
// by instance id.
func kvPickerOn(t *testing.T, snap *fleet.Snapshot, pins []string) (*kv.Picker, *load.Store, *kv.Index, *kv.Prompts, map[uint64]fleet.WorkerID) {
	t.Helper()
	store := load.NewStore(time.Minute, nil)
	live := map[fleet.WorkerID]load.LiveWorker{}
	ids := map[uint64]fleet.WorkerID{}
	for w := range snap.Workers.All() {
		live[w.ID] = load.LiveWorker{DPSize: 1}
		ids[w.ID.InstanceID] = w.ID
	}
	store.SetLiveAndRetain(live)
	ix := kv.NewIndex()
	ix.SetLive(live)
	prompts := kv.NewPrompts(startLoader(t, pins...))
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, nil, nil, nil)
	return p, store, ix, prompts, ids
}

// TestTokenDataOnlyWhereFrontendsAgree: Dynamo frontend releases differ on
// a chat request's generation prompt (added unless the last message is
// the assistant's, always, only after the user's, or as the request's
// add_generation_prompt and continue_final_message say): with
// send_token_data the rendered ids go as nvext.token_data only where they
// all agree, so that no release runs another prompt than its own; the
// request is still scored on them. A completion's ids always go.
func TestTokenDataOnlyWhereFrontendsAgree(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, []uint64{10}, []uint64{20}, nil)
	store, ix, prompts := liveKV(t, snap, pins)
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}, SendTokenData: true}, nil, nil, nil)
	user := `{"role":"user","content":"Tell me about the blocks a prefill worker holds for this prompt."}`
	prepared(t, prompts, snap, "/v1/chat/completions", `{"model":"m","messages":[`+user+`]}`, 16) // the artifacts loaded
	for _, c := range []struct {
		path, body string
		sent       bool
	}{
		{"/v1/chat/completions", `{"model":"m","messages":[` + user + `]}`, true},
		{"/v1/chat/completions", `{"model":"m","messages":[` + user + `],"add_generation_prompt":true}`, true},
		{"/v1/chat/completions", `{"model":"m","messages":[` + user + `,{"role":"assistant","content":"The blocks"}]}`, false},
		{"/v1/chat/completions", `{"model":"m","messages":[` + user + `],"add_generation_prompt":false}`, false},
		{"/v1/chat/completions", `{"model":"m","messages":[` + user + `],"chat_template_kwargs":{"continue_final_message":true}}`, false},
		{"/v1/chat/completions", `{"model":"m","messages":[` + user + `,{"role":"tool","tool_call_id":"1","content":"42"}]}`, false},
		{"/v1/completions", `{"model":"m","prompt":"Tell me about the blocks a prefill worker holds."}`, true},
	} {
		pin, tk, err := p.Reserve(snap, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: c.path, Body: []byte(c.body)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.Release(tk)
		if sent := pin.TokenIDs != nil; sent != c.sent || pin.PrefillReason != pick.ReasonKVAware {
			t.Errorf("%s: token data sent %v, want %v (reason %s)", c.body, sent, c.sent, pin.PrefillReason)
		}
	}
}

// conditionalPicker is a fleet of prefill workers 10, 11 and decode
// workers 20, 21 under a KV-aware picker with conditional disaggregation
// on, its metrics, and a long chat request with its prompt prepared.
func conditionalPicker(t *testing.T) (*fleet.Snapshot, *kv.Index, *kv.Picker, *telemetry.KVMetrics, *kv.Prompt, pick.Request) {
	t.Helper()
	snap, pins := kvFleet(t, []uint64{10, 11}, []uint64{20, 21}, nil)
	store, ix, prompts := liveKV(t, snap, pins)
	m := telemetry.NewKVMetrics(nil)
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}, Conditional: true}, m, nil, nil)
	body := longChat(300)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	return snap, ix, p, m, pr, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}
}
