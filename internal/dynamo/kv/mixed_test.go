package kv_test

import (
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// TestPickerScoresAcrossMixedNamespaces: graph a pairs prefill 10 with
// decode 20, graph b serves the model with aggregated 30. The workers that
// would prefill the request (10, and 30 for itself) compete on the
// formula, and the winner's graph is the pin's: the holder of the prompt
// gets it whichever graph it is in, though the load rule alone (decode
// first) would send it to the other graph's lighter decode candidate.
func TestPickerScoresAcrossMixedNamespaces(t *testing.T) {
	t.Parallel()
	u := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name string
		// holder holds the whole prompt; samples are (worker, active
		// prefill tokens, active decode blocks, kv used blocks).
		holder  uint64
		samples [][4]*uint64
		want    uint64 // the worker that prefills: 10 (with decode 20) or 30
		// busy sets a busy threshold of half the KV blocks.
		busy bool
	}{
		{name: "aggregated holder, lighter paired decode", holder: 30,
			samples: [][4]*uint64{{u(10), u(0), u(0)}, {u(20), u(0), u(0)}, {u(30), u(0), u(5)}}, want: 30},
		{name: "prefill holder, lighter aggregated", holder: 10,
			samples: [][4]*uint64{{u(10), u(0), u(0)}, {u(20), u(0), u(50)}, {u(30), u(0), u(0)}}, want: 10},
		// vLLM workers publish kv_used_blocks alone: no candidate has a
		// prefill backlog, so all compete on overlap and size.
		{name: "vllm samples, prefill holder", holder: 10,
			samples: [][4]*uint64{{u(10), nil, nil, u(0)}, {u(20), nil, nil, u(50)}, {u(30), nil, nil, u(0)}}, want: 10},
		// The aggregated holder over the busy threshold by its decode
		// signal is passed over, though no worker has a prefill backlog
		// (the prefill worker is then alone in the running: its reason is
		// round_robin_stale).
		{name: "vllm samples, busy aggregated holder", holder: 30, busy: true,
			samples: [][4]*uint64{{u(10), nil, nil, u(0)}, {u(20), nil, nil, u(0)}, {u(30), nil, nil, u(9000)}}, want: 10},
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
			for it := range 3 {
				pin, tk, err := p.Reserve(snap, req, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				p.Release(tk)
				switch tc.want {
				case 30:
					if pin.Namespace != "b" || pin.Decode.Worker.ID.InstanceID != 30 || pin.Prefill != nil ||
						pin.DecodeReason != pick.ReasonKVAware || pin.PrefillReason != pick.ReasonNoPrefillPool {
						t.Fatalf("%d pin %s: decode %d (%s), prefill %+v (%s); want b's 30 prefilling itself", it, pin.Namespace,
							pin.Decode.Worker.ID.InstanceID, pin.DecodeReason, pin.Prefill, pin.PrefillReason)
					}
				default:
					if pin.Namespace != "a" || pin.Prefill == nil || pin.Prefill.Worker.ID.InstanceID != 10 || (pin.PrefillReason != pick.ReasonKVAware && !tc.busy) ||
						pin.Decode.Worker.ID.InstanceID != 20 {
						t.Fatalf("%d pin %s: decode %d (%s), prefill %+v (%s); want a's pair 10/20", it, pin.Namespace,
							pin.Decode.Worker.ID.InstanceID, pin.DecodeReason, pin.Prefill, pin.PrefillReason)
					}
				}
			}
		})
	}
}
