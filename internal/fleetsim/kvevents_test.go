package fleetsim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/fleetsim"
)

// kvEvent is a RouterEvent decoded by an independent msgpack library.
type kvEvent struct {
	WorkerID    uint64 `msgpack:"worker_id"`
	StorageTier string `msgpack:"storage_tier"`
	Event       struct {
		EventID uint64 `msgpack:"event_id"`
		DPRank  uint32 `msgpack:"dp_rank"`
	} `msgpack:"event"`
}

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

// TestWorkersPublishKVEvents: a prefill worker that computes new prompt
// blocks publishes a stored event on kv-events with Dynamo's XXH3
// tokens_hash of each 16-token block, the chain starting at the root.
func TestWorkersPublishKVEvents(t *testing.T) {
	root := t.TempDir()
	sim, err := fleetsim.Start(fleetsim.Options{Root: root, Prefill: 1, Decode: 1, Speed: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Stop()
	var prefill, decode fleetsim.WorkerInfo
	for _, w := range sim.Workers() {
		if w.Role == "prefill" {
			prefill = w
		} else {
			decode = w
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial(kvEndpoint(t, root, prefill.KVPublisherID)); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv-events"); err != nil {
		t.Fatal(err)
	}
	fe := httptest.NewServer(sim.Frontend("dynamo"))
	defer fe.Close()

	msgs := make(chan zmq4.Msg, 64)
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	// A SUB joins asynchronously: send requests with fresh blocks until
	// one's events arrive, then check that request's blocks.
	sent := map[uint64][2]uint64{} // first block id → the request's blocks
	next := uint64(1000)
	for {
		blocks := [2]uint64{next, next + 1}
		next += 2
		sent[blocks[0]] = blocks
		body := fmt.Sprintf(`{"model":"Qwen/Qwen3-32B","max_tokens":1,"messages":[{"role":"user","content":"<len:1100> <b:%d> <b:%d>"}]}`, blocks[0], blocks[1])
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fe.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("x-dynamo-worker-instance-id", fmt.Sprint(decode.InstanceID))
		req.Header.Set("x-dynamo-prefill-instance-id", fmt.Sprint(prefill.InstanceID))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request: %d", resp.StatusCode)
		}
		select {
		case m := <-msgs:
			env, rej := wire.DecodeEventMessage(m.Frames, "kv-events", wire.MaxKVEventsPayloadBytes)
			if rej != nil {
				t.Fatal(rej)
			}
			if env.PublisherID != prefill.KVPublisherID {
				t.Fatalf("publisher %x", env.PublisherID)
			}
			checkStored(t, env.Payload, prefill.InstanceID, sent)
			expectCleared(t, sim, prefill.InstanceID, msgs)
			return
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no kv-events within 20 s")
		}
	}
}

func checkStored(t *testing.T, payload []byte, worker uint64, sent map[uint64][2]uint64) {
	t.Helper()
	var ev map[string]any
	if err := msgpack.Unmarshal(payload, &ev); err != nil {
		t.Fatal(err)
	}
	var head kvEvent
	if err := msgpack.Unmarshal(payload, &head); err != nil {
		t.Fatal(err)
	}
	if head.WorkerID != worker || head.StorageTier != "device" || head.Event.DPRank != 0 {
		t.Fatalf("event %+v", head)
	}
	raw, err := msgpack.Marshal(ev["event"].(map[string]any)["data"])
	if err != nil {
		t.Fatal(err)
	}
	var data storedData
	if err := msgpack.Unmarshal(raw, &data); err != nil {
		t.Fatalf("data is not a stored event: %v", ev)
	}
	st := data.Stored
	if st.ParentHash != nil || len(st.Blocks) != 2*fleetsim.TraceBlockTokens/16 {
		t.Fatalf("parent %v, %d blocks", st.ParentHash, len(st.Blocks))
	}
	// Engine hashes span the u64 range, as vLLM's do; the independent
	// decoder and ours read the same values.
	ours, err := wire.DecodeRouterEvents(payload, nil)
	if err != nil || len(ours) != 1 || len(ours[0].Blocks) != len(st.Blocks) {
		t.Fatalf("DecodeRouterEvents: %d events, %v", len(ours), err)
	}
	topBit := 0
	for i, b := range st.Blocks {
		if got := ours[0].Blocks[i]; got.BlockHash != b.BlockHash || got.TokensHash != b.TokensHash {
			t.Fatalf("block %d: %x/%x, msgpack library read %x/%x", i, got.BlockHash, got.TokensHash, b.BlockHash, b.TokensHash)
		}
		if b.BlockHash>>63 == 1 {
			topBit++
		}
	}
	if topBit == 0 || topBit == len(st.Blocks) {
		t.Errorf("%d of %d block hashes have the top bit set", topBit, len(st.Blocks))
	}
	// Which request was this? Its first block's tokens say.
	for first, blocks := range sent {
		var want []uint64
		for _, b := range blocks {
			want = append(want, wire.LocalBlockHashes(fleetsim.TraceBlockTokenIDs(b), 16, wire.XXH3Seed)...)
		}
		if want[0] != st.Blocks[0].TokensHash {
			continue
		}
		for i, b := range st.Blocks {
			if b.TokensHash != want[i] {
				t.Fatalf("block %d of request %d: tokens_hash %x, want %x", i, first, b.TokensHash, want[i])
			}
		}
		return
	}
	t.Fatalf("tokens_hash %x matches no request", st.Blocks[0].TokensHash)
}

// expectCleared: a restarted worker says its cache is empty.
func expectCleared(t *testing.T, sim *fleetsim.Sim, id uint64, msgs <-chan zmq4.Msg) {
	t.Helper()
	for _, f := range []fleetsim.Fault{fleetsim.FaultKill, fleetsim.FaultRestart} {
		if err := sim.Inject(id, f); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-msgs:
			env, rej := wire.DecodeEventMessage(m.Frames, "kv-events", wire.MaxKVEventsPayloadBytes)
			if rej != nil {
				t.Fatal(rej)
			}
			var ev struct {
				Event struct {
					Data any `msgpack:"data"`
				} `msgpack:"event"`
			}
			if err := msgpack.Unmarshal(env.Payload, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Event.Data == "cleared" {
				return
			}
		case <-deadline:
			t.Fatal("no cleared event after a restart")
		}
	}
}
