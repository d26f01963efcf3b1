package kv_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// TestUnsupportedBlockSizeWorkerStillServed:
// an out-of-range block size is logged and counted; the formula costs
// each candidate rank with its block size bs. A worker whose size cannot
// be hashed holds none of the prompt as far as the router can tell (as a
// worker of a third supported size is costed), but it is still a
// candidate: an idle such worker beside saturated ones gets requests.
func TestUnsupportedBlockSizeWorkerStillServed(t *testing.T) {
	t.Parallel()
	snap, pins := sizedFleet(t, "m", []sizedWorker{
		{"dynamo", "Aggregated", 30, 16},
		{"dynamo", "Aggregated", 31, 16},
		{"dynamo", "Aggregated", 32, 8},
	})
	store, ix, prompts := liveKV(t, snap, pins)
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, nil, nil, nil)
	heavy, zero := uint64(9000), uint64(0)
	for i, id := range []uint64{30, 31, 32} {
		l := wire.ActiveLoad{WorkerID: id, ActiveDecodeBlocks: &heavy, KVUsedBlocks: &heavy, ActivePrefillTokens: &zero}
		if id == 32 {
			l.ActiveDecodeBlocks, l.KVUsedBlocks = &zero, &zero
		}
		if res := store.Apply(load.Sample{Load: l, Namespace: load.NS("dynamo"), PublisherID: id, Sequence: uint64(i), ReceivedAt: time.Now()}); res != "" {
			t.Fatal(res)
		}
	}
	prepared(t, prompts, snap, "/v1/chat/completions", longChat(50), 16)
	got := map[uint64]int{}
	for i := range 4 {
		body := strings.Replace(longChat(50), "You answer briefly.", fmt.Sprintf("Request %d.", i), 1)
		pin, tk, err := p.Reserve(snap, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		p.Release(tk)
		got[pin.Decode.Worker.ID.InstanceID]++
	}
	if got[32] == 0 {
		t.Errorf("picks %v: the idle worker of block size 8 never chosen beside workers at 9000 of 10000 blocks", got)
	}
}
