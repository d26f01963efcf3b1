package fleetsim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/testutil"
)

// post sends a chat completion for model to f with the pin headers given.
func post(f *fleetsim.Frontend, model string, pins map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		strings.NewReader(fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model)))
	for k, v := range pins {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.ServeHTTP(rec, req)
	return rec
}

// TestKVUsedBlocksUseTheCardBlockSize: a 1.4.2-style worker
// (NilSchedulerFields) publishes kv_used_blocks, KV blocks of its card's
// kv_cache_block_size. A prompt being prefilled must count at most
// ceil(tokens / block_size) blocks; the emulator divides by 16 whatever
// the block size, so a 64-token-block fleet reports four times the load.
func TestKVUsedBlocksUseTheCardBlockSize(t *testing.T) {
	root := t.TempDir()
	const blockSize = 64
	s, err := fleetsim.Start(fleetsim.Options{Root: root, Aggregated: 1, NilSchedulerFields: true, BlockSize: blockSize, Speed: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	id := s.Workers()[0].InstanceID
	var endpoint string
	files, _ := filepath.Glob(filepath.Join(root, "v1", "event_channels", "*"))
	for _, f := range files {
		data, _ := os.ReadFile(f)
		var rec struct {
			Topic     string `json:"topic"`
			Transport struct {
				Config struct {
					Endpoint string `json:"endpoint"`
				} `json:"config"`
			} `json:"transport"`
		}
		if json.Unmarshal(data, &rec) == nil && rec.Topic == "kv_metrics" {
			endpoint = rec.Transport.Config.Endpoint
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial(endpoint); err != nil {
		t.Fatal(err)
	}
	_ = sub.SetOption(zmq4.OptionSubscribe, "kv_metrics")
	loads := make(chan uint64, 64)
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			env, rej := wire.DecodeEventMessage(m.Frames, "kv_metrics", wire.MaxLoadPayloadBytes)
			if rej != nil {
				continue
			}
			if l, err := wire.DecodeActiveLoad(env.Payload); err == nil && l.KVUsedBlocks != nil {
				select {
				case loads <- *l.KVUsedBlocks:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	send := func(content string) int {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
			strings.NewReader(fmt.Sprintf(`{"model":"Qwen/Qwen3-32B","max_tokens":1,"messages":[{"role":"user","content":%q}]}`, content)))
		req.Header.Set("x-dynamo-worker-instance-id", fmt.Sprint(id))
		rec := httptest.NewRecorder()
		s.Frontend("dynamo").ServeHTTP(rec, req)
		tokens, _ := strconv.Atoi(rec.Header().Get("x-sim-prompt-tokens"))
		return tokens
	}
	// Requests until a sample arrives: the subscription has reached the
	// publisher (a PUB socket drops what it sends before).
	testutil.Eventually(t, 10*time.Second, "a kv_metrics sample", func() bool {
		send("warm up")
		select {
		case <-loads:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
	for len(loads) > 0 {
		<-loads
	}
	tokens := send(strings.Repeat("lorem ipsum dolor sit amet ", 40))
	limit := uint64((tokens + blockSize - 1) / blockSize)
	seen := false
	// The first sample may be slow on a loaded machine; the ones that
	// follow it are watched for two seconds.
	deadline := time.After(10 * time.Second)
	for {
		select {
		case n := <-loads:
			if !seen {
				seen = true
				deadline = time.After(2 * time.Second)
			}
			if n > limit+1 { // +1: the decode's own block
				t.Fatalf("kv_used_blocks %d for a %d-token prompt in %d-token blocks (at most %d)", n, tokens, blockSize, limit+1)
			}
		case <-deadline:
			if !seen {
				t.Fatal("no kv_used_blocks sample for the prompt")
			}
			return
		}
	}
}

// TestInvalidDynamoHeaderHidesAlias: the newest frontend takes the
// x-dynamo-* header when present and only else its alias, then parses:
// headers.get(X).or_else(|| headers.get(alias)).and_then(parse). A
// present but non-decimal x-dynamo-worker-instance-id is no pin, whatever
// the alias says. The emulator falls through to the alias.
func TestInvalidDynamoHeaderHidesAlias(t *testing.T) {
	f := fleetsim.NewFrontend()
	f.SetWorkers("m", nil, []uint64{2})
	rec := post(f, "m", map[string]string{"x-dynamo-worker-instance-id": "0x2", "x-worker-instance-id": "2"})
	if rec.Code == 200 {
		t.Fatalf("hex x-dynamo-worker-instance-id with a decimal alias was routed: %d %s", rec.Code, strings.TrimSpace(rec.Body.String()))
	}
}

// TestErrorBodyShape: the frontend answers an error before a response
// starts with Dynamo's ErrorMessage, {"message","type","code"} at the top
// level with the status's canonical reason as type ("Model not found"
// without the model's name), as its openai.rs writes it.
func TestErrorBodyShape(t *testing.T) {
	t.Parallel()
	f := fleetsim.NewFrontend()
	f.SetWorkers("m", []uint64{1}, []uint64{2})
	for _, tc := range []struct {
		model   string
		pins    map[string]string
		status  int
		message string
	}{
		{"other", map[string]string{"x-dynamo-worker-instance-id": "2", "x-dynamo-prefill-instance-id": "1"}, 404, "Model not found"},
		{"m", map[string]string{"x-dynamo-worker-instance-id": "9", "x-dynamo-prefill-instance-id": "1"}, 500, fleetsim.UnknownInstance(9)},
	} {
		rec := post(f, tc.model, tc.pins)
		var e struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		}
		if rec.Code != tc.status || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Message != tc.message ||
			e.Type != http.StatusText(tc.status) || e.Code != tc.status {
			t.Errorf("%d %s: want %d {\"message\":%q,\"type\":%q,\"code\":%d}", rec.Code, strings.TrimSpace(rec.Body.String()),
				tc.status, tc.message, http.StatusText(tc.status), tc.status)
		}
	}
}
