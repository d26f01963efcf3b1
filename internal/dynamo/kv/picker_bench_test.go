package kv_test

import (
	"slices"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// BenchmarkPickKV compares, at 1,024 workers of one model (512 prefill and
// 512 decode, every rank with a fresh sample), the load-only pick with the
// KV-aware one: "choice" is the cost formula over every prefill candidate
// with the prompt already hashed (what KV adds to a pick), "request" the
// whole Reserve of a short chat request, rendering and hashing included.
func BenchmarkPickKV(b *testing.B) {
	const n = 512
	var prefill, decode []uint64
	for i := range uint64(n) {
		prefill, decode = append(prefill, 0x1000+i), append(decode, 0x2000+i)
	}
	snap, pins := kvFleet(b, prefill, decode, nil)
	store := load.NewStore(time.Hour, nil)
	live := map[fleet.WorkerID]load.LiveWorker{}
	for w := range snap.Workers.All() {
		live[w.ID] = load.LiveWorker{}
	}
	store.SetLiveAndRetain(live)
	now := time.Now()
	for i, w := range slices.Collect(snap.Workers.All()) {
		v := uint64(i % 50)
		store.Apply(load.Sample{Load: wire.ActiveLoad{WorkerID: w.ID.InstanceID, ActiveDecodeBlocks: &v, ActivePrefillTokens: &v},
			Namespace: load.NS("dynamo"), PublisherID: w.ID.InstanceID, Sequence: 1, ReceivedAt: now})
	}
	ix := kv.NewIndex()
	ix.SetLive(live)
	prompts := kv.NewPrompts(startLoader(b, pins...))
	body := longChat(200)
	var pr *kv.Prompt
	for deadline := time.Now().Add(30 * time.Second); pr == nil && time.Now().Before(deadline); {
		pr, _ = prompts.Prepare(snap, "m", "/v1/chat/completions", []byte(body), []int{16})
		time.Sleep(10 * time.Millisecond)
	}
	if pr == nil {
		b.Fatal("artifacts not loaded")
	}
	for i := range 8 { // eight holders of leading blocks
		ev := wire.RouterEvent{WorkerID: prefill[i*60], Kind: wire.KVStored, EventID: 1}
		for j, h := range pr.Hashes[16][:4+i] {
			ev.Blocks = append(ev.Blocks, wire.StoredBlock{BlockHash: uint64(i<<32 | j), TokensHash: h})
		}
		ix.Apply(kv.SubscriptionID(i), load.NS("dynamo"), &ev)
	}
	req := pick.Request{Model: "m", Namespaces: []string{"dynamo"}, EstPromptTokens: len(pr.IDs), Path: "/v1/chat/completions", Body: []byte(body)}
	b.Run("load-only", func(b *testing.B) {
		p := pick.NewLoadBased(store)
		for b.Loop() {
			_, t, err := p.Reserve(snap, req, now)
			if err != nil {
				b.Fatal(err)
			}
			p.Release(t)
		}
	})
	b.Run("choice", func(b *testing.B) {
		p := pick.NewLoadBased(store)
		for b.Loop() {
			ch := kv.NewChoiceForBench(kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}, len(pr.IDs), ix, pr)
			_, t, err := p.ReserveScored(snap, req, now, ch)
			if err != nil {
				b.Fatal(err)
			}
			p.Release(t)
		}
	})
	b.Run("request", func(b *testing.B) {
		p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, nil, nil, nil)
		for b.Loop() {
			_, t, err := p.Reserve(snap, req, now)
			if err != nil {
				b.Fatal(err)
			}
			p.Release(t)
		}
	})
}
