package kv_test

import (
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// TestPickerDecodeFirstAcrossMixedNamespaces: graph a pairs prefill 10
// with decode 20, graph b serves the model with aggregated 30. Prefill
// workers serve the model, so the decode worker is chosen by the load rule
// over both graphs (a's decode worker and b's aggregated one) whoever holds
// the prompt, the same choice the load-only picker makes; a decode worker
// has its graph's prefill worker chosen by the formula, an aggregated one
// is pinned alone.
func TestPickerDecodeFirstAcrossMixedNamespaces(t *testing.T) {
	t.Parallel()
	u := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name string
		// holder holds the whole prompt; samples are (worker, active
		// prefill tokens, active decode blocks, kv used blocks).
		holder  uint64
		samples [][4]*uint64
		want    uint64 // the decode pin: 20 (with prefill 10) or 30 alone
		// busy sets a busy threshold of half the KV blocks.
		busy bool
	}{
		{name: "aggregated holder, lighter paired decode", holder: 30,
			samples: [][4]*uint64{{u(10), u(0), u(0)}, {u(20), u(0), u(0)}, {u(30), u(0), u(5)}}, want: 20},
		{name: "prefill holder, lighter aggregated", holder: 10,
			samples: [][4]*uint64{{u(10), u(0), u(0)}, {u(20), u(0), u(50)}, {u(30), u(0), u(0)}}, want: 30},
		// vLLM workers publish kv_used_blocks alone: the load rule reads
		// it as the decode backlog.
		{name: "vllm samples, prefill holder, lighter aggregated", holder: 10,
			samples: [][4]*uint64{{u(10), nil, nil, u(0)}, {u(20), nil, nil, u(50)}, {u(30), nil, nil, u(0)}}, want: 30},
		// The aggregated holder over the busy threshold is passed over.
		{name: "vllm samples, busy aggregated holder", holder: 30, busy: true,
			samples: [][4]*uint64{{u(10), nil, nil, u(0)}, {u(20), nil, nil, u(0)}, {u(30), nil, nil, u(9000)}}, want: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			snap, pins := kvFleetOf(t, []kvWorker{{"a", "Prefill", 10}, {"a", "Decode", 20}, {"b", "Aggregated", 30}})
			store, ix, prompts, _, p := newKVRig(t, pins, map[fleet.WorkerID]load.LiveWorker{{Namespace: "a", InstanceID: 10}: {DPSize: 1},
				{Namespace: "a", InstanceID: 20}: {DPSize: 1}, {Namespace: "b", InstanceID: 30}: {DPSize: 1}})
			for i, s := range tc.samples {
				l := wire.ActiveLoad{WorkerID: *s[0], ActivePrefillTokens: s[1], ActiveDecodeBlocks: s[2], KVUsedBlocks: s[3]}
				if res := store.Apply(load.Sample{Load: l, Namespace: load.NS(idOf(snap, *s[0]).Namespace), PublisherID: *s[0], Sequence: uint64(i + 1), ReceivedAt: time.Now()}); res != "" {
					t.Fatal(res)
				}
			}
			body := longChat(400)
			pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
			hold(t, ix, 1, idOf(snap, tc.holder), pr.Hashes[16], len(pr.Hashes[16]))
			req := pick.Request{Model: "m", Namespaces: []string{"a", "b"}, Path: "/v1/chat/completions", Body: []byte(body)}
			if tc.busy {
				req.Busy = &pick.BusyThreshold{KVBlocks: 0.5}
			}
			// One pick each, compared: a pick charges its worker for the
			// request (dispatched, not yet in a sample), and each picker
			// keeps its own dispatches, so later picks part.
			pin, tk, err := p.Reserve(snap, req, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			p.Release(tk)
			lpin, ltk, err := pick.NewLoadBased(store).Reserve(snap, req, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			_ = ltk
			if pin.Decode.Worker.ID != lpin.Decode.Worker.ID {
				t.Fatalf("decode %v; the load-only picker's is %v", pin.Decode.Worker.ID, lpin.Decode.Worker.ID)
			}
			if pin.DecodeReason != pick.ReasonLoad {
				t.Fatalf("decode reason %s", pin.DecodeReason)
			}
			switch tc.want {
			case 30:
				if pin.Namespace != "b" || pin.Decode.Worker.ID.InstanceID != 30 || pin.Prefill != nil || pin.PrefillReason != pick.ReasonNoPrefillPool {
					t.Fatalf("pin %s: decode %d (%s), prefill %+v (%s); want b's 30 alone", pin.Namespace,
						pin.Decode.Worker.ID.InstanceID, pin.DecodeReason, pin.Prefill, pin.PrefillReason)
				}
			default:
				if pin.Namespace != "a" || pin.Prefill == nil || pin.Prefill.Worker.ID.InstanceID != 10 || pin.Decode.Worker.ID.InstanceID != 20 {
					t.Fatalf("pin %s: decode %d (%s), prefill %+v (%s); want a's pair 10/20", pin.Namespace,
						pin.Decode.Worker.ID.InstanceID, pin.DecodeReason, pin.Prefill, pin.PrefillReason)
				}
			}
		})
	}
}

// TestPickerPrefillFirstBesideAnAggregatedGraph: graphs a and b pair
// prefill and decode workers, graph c serves the model with one aggregated
// worker. The load rule chooses decode over all three first; when it
// lands in a pairing graph (c's worker is the busiest here), the prefill
// workers of a and b are weighed together and the winner's graph is the
// pin's: b's prefill worker holds the prompt, so b's pair serves it though
// a's decode worker is the lighter. When c's worker is the lightest, it
// takes the request alone, as the load rule says.
func TestPickerPrefillFirstBesideAnAggregatedGraph(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		aggBlocks  uint64
		wantNS     string
		wantDecode uint64
	}{
		{"aggregated busiest", 5000, "b", 21},
		{"aggregated lightest", 1, "c", 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			snap, pins := kvFleetOf(t, []kvWorker{{"a", "Prefill", 10}, {"a", "Decode", 20}, {"b", "Prefill", 11}, {"b", "Decode", 21}, {"c", "Aggregated", 30}})
			live := map[fleet.WorkerID]load.LiveWorker{}
			for w := range snap.Workers.All() {
				live[w.ID] = load.LiveWorker{DPSize: 1}
			}
			store, ix, prompts, _, p := newKVRig(t, pins, live)
			sample := decodeSampler(t, store, snap)
			sample(10, 0)
			sample(11, 0)
			sample(20, 10)
			sample(21, 20)
			sample(30, tc.aggBlocks)
			body := longChat(400)
			pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
			hold(t, ix, 1, idOf(snap, 11), pr.Hashes[16], len(pr.Hashes[16])-1)
			req := pick.Request{Model: "m", Namespaces: []string{"a", "b", "c"}, Path: "/v1/chat/completions", Body: []byte(body)}
			pin, tk, err := p.Reserve(snap, req, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			p.Release(tk)
			if pin.Namespace != tc.wantNS || pin.Decode.Worker.ID.InstanceID != tc.wantDecode {
				t.Fatalf("pin %s, decode %d; want %s, decode %d", pin.Namespace, pin.Decode.Worker.ID.InstanceID, tc.wantNS, tc.wantDecode)
			}
			if tc.wantNS == "b" && (pin.Prefill == nil || pin.Prefill.Worker.ID.InstanceID != 11 || pin.PrefillReason != pick.ReasonKVAware) {
				t.Fatalf("prefill %+v (%s); want the holder 11 by the formula", pin.Prefill, pin.PrefillReason)
			}
			if tc.wantNS == "c" && pin.Prefill != nil {
				t.Fatalf("an aggregated pin has prefill %+v", pin.Prefill)
			}
		})
	}
}
