package fleetsim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/testutil"
)

// storedData is a stored event's data, read by an independent msgpack
// library.
type storedData struct {
	Stored struct {
		ParentHash *uint64 `msgpack:"parent_hash"`
		Blocks     []struct {
			BlockHash  uint64 `msgpack:"block_hash"`
			TokensHash uint64 `msgpack:"tokens_hash"`
		} `msgpack:"blocks"`
	} `msgpack:"stored"`
}

// kvEndpoint reads a worker's kv-events EventChannel record from the file
// store, as discovery would.
func kvEndpoint(t *testing.T, root string, publisherID uint64) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "v1", "event_channels", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var rec struct {
			Topic      string `json:"topic"`
			InstanceID uint64 `json:"instance_id"`
			Transport  struct {
				Config struct {
					Endpoint string `json:"endpoint"`
				} `json:"config"`
			} `json:"transport"`
		}
		if json.Unmarshal(data, &rec) == nil && rec.Topic == "kv-events" && rec.InstanceID == publisherID {
			return rec.Transport.Config.Endpoint
		}
	}
	t.Fatalf("no kv-events record for publisher %x in %s", publisherID, root)
	return ""
}

// kvFeed is a kv-events subscription of one worker, decoded.
type kvFeed struct {
	t      *testing.T
	events chan wire.RouterEvent
}

// subscribe dials a worker's kv-events publisher; each payload is checked
// against an independent msgpack decoder.
func subscribe(ctx context.Context, t *testing.T, endpoint string, publisherID uint64) *kvFeed {
	t.Helper()
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { _ = sub.Close() })
	if err := sub.Dial(endpoint); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv-events"); err != nil {
		t.Fatal(err)
	}
	f := &kvFeed{t: t, events: make(chan wire.RouterEvent, 4096)}
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			env, rej := wire.DecodeEventMessage(m.Frames, "kv-events", wire.MaxKVEventsPayloadBytes)
			if rej != nil || env.PublisherID != publisherID {
				t.Errorf("message refused (%v) or from publisher %x", rej, env.PublisherID)
				return
			}
			evs, err := wire.DecodeRouterEvents(env.Payload, nil)
			if err != nil {
				t.Errorf("DecodeRouterEvents: %v", err)
				return
			}
			crossCheck(t, env.Payload, evs)
			for _, ev := range evs {
				f.events <- ev
			}
		}
	}()
	return f
}

// crossCheck: the msgpack library reads a stored event's hashes as
// DecodeRouterEvents does, and its storage tier as device.
func crossCheck(t *testing.T, payload []byte, evs []wire.RouterEvent) {
	var head struct {
		StorageTier string         `msgpack:"storage_tier"`
		Event       map[string]any `msgpack:"event"`
	}
	if err := msgpack.Unmarshal(payload, &head); err != nil || len(evs) != 1 || head.StorageTier != "device" {
		t.Errorf("payload: %v, %d events, tier %q", err, len(evs), head.StorageTier)
		return
	}
	if evs[0].Kind != wire.KVStored {
		return
	}
	raw, _ := msgpack.Marshal(head.Event["data"])
	var data storedData
	if err := msgpack.Unmarshal(raw, &data); err != nil || len(data.Stored.Blocks) != len(evs[0].Blocks) {
		t.Errorf("stored data: %v", err)
		return
	}
	for i, b := range data.Stored.Blocks {
		if got := evs[0].Blocks[i]; got.BlockHash != b.BlockHash || got.TokensHash != b.TokensHash {
			t.Errorf("block %d: %x/%x, msgpack library read %x/%x", i, got.BlockHash, got.TokensHash, b.BlockHash, b.TokensHash)
		}
	}
}

// next returns the next event, failing after a while.
func (f *kvFeed) next(within time.Duration) (wire.RouterEvent, bool) {
	select {
	case ev := <-f.events:
		return ev, true
	case <-time.After(within):
		return wire.RouterEvent{}, false
	}
}

// routerView is what the router computes for the fleet a set of options
// registers: its snapshot, and its prompt pipeline over the pinned demo
// artifacts.
func routerView(t *testing.T, o fleetsim.Options, pins []string) (*fleet.Snapshot, *kv.Prompts) {
	t.Helper()
	recs, err := fleetsim.Records(o)
	if err != nil {
		t.Fatal(err)
	}
	r := fleet.NewReducer()
	t0 := time.Now()
	for _, rec := range recs {
		b, err := json.Marshal(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		r.Put(rec.Bucket+"/"+rec.Key, b, t0)
	}
	pol, err := artifact.PolicyFor(artifact.Settings{Pinned: pins}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := artifact.NewLoader(artifact.LoaderOptions{Policy: pol, Build: kv.Build})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r.Build(t0), kv.NewPrompts(l)
}

// routerHashes is the router's tokens_hash of each complete block of a
// request, once the artifacts are loaded.
func routerHashes(t *testing.T, p *kv.Prompts, snap *fleet.Snapshot, path, body string) []uint64 {
	t.Helper()
	var pr *kv.Prompt
	testutil.Eventually(t, 30*time.Second, "the router's prompt", func() bool {
		var result string
		pr, result = p.Prepare(snap, "Qwen/Qwen3-32B", path, []byte(body), []int{16})
		if result != "" && result != kv.ResultTokenizerUnavailable {
			t.Fatalf("prepare: %s", result)
		}
		return pr != nil
	})
	return pr.Hashes[16]
}

// text is n printable bytes that start with seed's words.
func text(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s %d; ", seed, i)
	}
	return b.String()[:n]
}

// TestKVEventsMatchTheRouter: a prefill worker's kv-events are what the
// router computes for the same request: the stored blocks carry the
// router's tokens_hash of each 16-token block of the prompt rendered with
// the cards' chat template and encoded with their tokenizer, chained by
// engine hashes from the root (a prompt sharing a prefix continues the
// chain of the blocks it found); evictions are removed events, leaves
// first; event ids count up by one. Applied to the router's index, the
// events give, for every request, the cached prefix the worker itself
// reports.
func TestKVEventsMatchTheRouter(t *testing.T) {
	root := t.TempDir()
	o := fleetsim.Options{Root: root, Prefill: 1, Decode: 1, Speed: 1000, TotalKVBlocks: 80}
	sim, err := fleetsim.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Stop()
	snap, prompts := routerView(t, o, sim.Artifacts().Pinned())
	var prefill, decode fleetsim.WorkerInfo
	for _, w := range sim.Workers() {
		if w.Role == "prefill" {
			prefill = w
		} else {
			decode = w
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	feed := subscribe(ctx, t, kvEndpoint(t, root, prefill.KVPublisherID), prefill.KVPublisherID)
	h := sim.Handler("dynamo")
	pins := map[string]string{"x-dynamo-worker-instance-id": strconv.FormatUint(decode.InstanceID, 10),
		"x-dynamo-prefill-instance-id": strconv.FormatUint(prefill.InstanceID, 10)}
	send := func(path, body string) int {
		rec := do(t, h, http.MethodPost, path, body, pins)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
		cached, _ := strconv.Atoi(rec.Header().Get("x-sim-cached-tokens"))
		if us, err := strconv.Atoi(rec.Header().Get("x-sim-ttft-us")); err != nil || us <= 0 {
			t.Fatalf("x-sim-ttft-us %q", rec.Header().Get("x-sim-ttft-us"))
		}
		return cached
	}
	chat := func(content string) string {
		return fmt.Sprintf(`{"model":"Qwen/Qwen3-32B","max_tokens":1,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":%q}]}`, content)
	}

	// A SUB joins asynchronously: send fresh prompts until events come,
	// then restart the worker, so that the events from its cleared caches
	// on are all seen.
	for i := 0; ; i++ {
		send("/v1/chat/completions", chat(text(fmt.Sprintf("warm-up %d", i), 100)))
		if _, ok := feed.next(100 * time.Millisecond); ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no kv-events")
		}
	}
	for _, f := range []fleetsim.Fault{fleetsim.FaultKill, fleetsim.FaultRestart} {
		if err := sim.Inject(prefill.InstanceID, f); err != nil {
			t.Fatal(err)
		}
	}
	for {
		ev, ok := feed.next(10 * time.Second)
		if !ok {
			t.Fatal("no cleared event after a restart")
		}
		if ev.Kind == wire.KVCleared {
			break
		}
	}

	type request struct{ path, body string }
	shared := text("shared document", 300)
	reqs := []request{
		{"/v1/chat/completions", chat(shared + text(" first question", 100))},
		{"/v1/chat/completions", chat(shared + text(" second question", 140))},
		{"/v1/completions", fmt.Sprintf(`{"model":"Qwen/Qwen3-32B","max_tokens":1,"prompt":%q}`, text("a raw completion prompt", 200))},
		{"/v1/chat/completions", fmt.Sprintf(`{"model":"Qwen/Qwen3-32B","max_tokens":1,"nvext":{"cache_salt":"tenant-9"},"messages":[{"role":"user","content":[{"type":"text","text":%q},{"type":"text","text":"and more"}]}]}`, text("salted parts", 250))},
		{"/v1/chat/completions", chat(text("an unrelated prompt that evicts", 500))},
		{"/v1/chat/completions", chat(shared + text(" third question", 60))},
	}
	hashes := make([][]uint64, len(reqs))
	cached := make([]int, len(reqs))
	for i, r := range reqs {
		hashes[i] = routerHashes(t, prompts, snap, r.path, r.body)
		cached[i] = send(r.path, r.body)
	}
	// A last prompt of its own marks the end: the events come in order
	// (an update's evictions before its stores), so once its last block
	// is stored every earlier event is in; a pause between events would
	// prove nothing on a loaded machine.
	last := chat(text("the closing prompt, unlike any other", 200))
	lastHashes := routerHashes(t, prompts, snap, "/v1/chat/completions", last)
	send("/v1/chat/completions", last)
	var events []wire.RouterEvent
	for done := false; !done; {
		ev, ok := feed.next(20 * time.Second)
		if !ok {
			t.Fatal("the closing prompt's blocks were never stored")
		}
		events = append(events, ev)
		for _, b := range ev.Blocks {
			done = done || (ev.Kind == wire.KVStored && b.TokensHash == lastHashes[len(lastHashes)-1])
		}
	}

	// The first request's blocks are stored from the root with the
	// router's hashes; the second continues the chain where the shared
	// prefix ends.
	if len(events) < 3 || events[0].Kind != wire.KVStored || events[0].ParentHash != nil {
		t.Fatalf("first events %+v", events[:min(len(events), 3)])
	}
	first := events[0].Blocks
	if len(first) != len(hashes[0]) {
		t.Fatalf("first request: %d blocks stored, the router hashes %d", len(first), len(hashes[0]))
	}
	for i, b := range first {
		if b.TokensHash != hashes[0][i] {
			t.Fatalf("first request, block %d: tokens_hash %x, the router's %x", i, b.TokensHash, hashes[0][i])
		}
	}
	common := 0
	for common < len(hashes[1]) && hashes[1][common] == hashes[0][common] {
		common++
	}
	second := events[1]
	if common < 10 || second.Kind != wire.KVStored || second.ParentHash == nil || *second.ParentHash != first[common-1].BlockHash ||
		second.Blocks[0].TokensHash != hashes[1][common] || len(second.Blocks) != len(hashes[1])-common || cached[1] != common*16 {
		t.Fatalf("second request: %d shared blocks, cached %d tokens; event %+v", common, cached[1], second)
	}

	// The index fed these events agrees with the worker on every prompt.
	ix := kv.NewIndex()
	ix.SetLive(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: prefill.InstanceID}: {DPSize: 1}})
	nextID := map[uint32]uint64{}
	removed, top, engine := 0, 0, 0
	for i := range events {
		ev := &events[i]
		if want, seen := nextID[ev.DPRank]; seen && ev.EventID != want {
			t.Fatalf("event %d has id %d, want %d", i, ev.EventID, want)
		}
		nextID[ev.DPRank] = ev.EventID + 1
		if out := ix.Apply(1, load.NS("dynamo"), ev); out.Result != kv.ResultAccepted || out.Gap {
			t.Fatalf("event %d (%s): %+v", i, ev.Kind, out)
		}
		removed += len(ev.Removed)
		for _, b := range ev.Blocks {
			engine++
			top += int(b.BlockHash >> 63)
		}
	}
	if removed == 0 {
		t.Fatal("the 80-block cache evicted nothing")
	}
	if top == 0 || top == engine {
		t.Errorf("%d of %d engine hashes have the top bit set", top, engine)
	}
	for i, r := range reqs {
		_, _, views := sim.Probe(r.path, []byte(r.body), []uint64{prefill.InstanceID})
		matches := ix.FindMatches(hashes[i], nil)
		held := 0
		if len(matches) > 0 {
			held = matches[0].Blocks
		}
		if len(views) != 1 || views[0].CachedBlocks != held {
			t.Errorf("request %d: the index matches %d blocks, the worker holds %+v", i, held, views)
		}
	}
	// Eviction took leaves first: the last request still found most of
	// the shared prefix.
	if cached[5] == 0 || cached[5] > cached[1] {
		t.Errorf("the last request found %d tokens cached, the second %d", cached[5], cached[1])
	}
}
