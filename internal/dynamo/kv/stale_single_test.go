package kv_test

import (
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// TestStaleSingleCandidateIsKVAware: without fresh prefill backlogs every
// rank competes on the overlap and the request's size, and
// round_robin_stale is a choice between equal costs only: a lone prefill
// candidate holding the prompt is the formula's choice (kv_aware).
func TestStaleSingleCandidateIsKVAware(t *testing.T) {
	t.Parallel()
	snap, pins := kvFleet(t, []uint64{10}, []uint64{20}, nil)
	store, ix, prompts := liveKV(t, snap, pins)
	p := kv.NewPicker(pick.NewLoadBased(store), ix, prompts, kv.Settings{Terms: kv.Terms{OverlapScoreCredit: 1, PrefillLoadScale: 1}}, nil, nil, nil)
	body := longChat(200)
	pr := prepared(t, prompts, snap, "/v1/chat/completions", body, 16)
	hold(t, ix, 1, idOf(snap, 10), pr.Hashes[16], 8)
	pin, tk, err := p.Reserve(snap, pick.Request{Model: "m", Namespaces: []string{"dynamo"}, Path: "/v1/chat/completions", Body: []byte(body)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.Release(tk)
	if pin.Prefill == nil || pin.PrefillReason != pick.ReasonKVAware {
		t.Errorf("lone prefill candidate, no fresh backlog, holding 8 blocks: reason %q, want kv_aware (no tie)", pin.PrefillReason)
	}
}
