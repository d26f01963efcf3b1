package router_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// TestAdminLoadRanksBounded: GET /admin/dynamo/load (polled every
// second by continuum top) lists no more (worker, rank) rows than the load
// store can hold (65536): fleet-written cards each declaring 1024 ranks
// must not make the router build a response as large as they like (16384
// such workers would be 16.7 M rows, gigabytes per poll). The picker
// already caps its candidates at load.MaxStoreKeys.
func TestAdminLoadRanksBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	const workers = 70 // 70 × 1024 = 71,680 ranks, past 65,536
	for i := range workers {
		worker(h.reducer, "dynamo", "decode", "Decode", uint64(1000+i), wire.MaxDataParallelSize)
	}
	h.reg.Publish(h.reducer.Build(t0.Add(time.Second)))
	l, body := adminLoad(t, h)
	if len(l.Samples) != load.MaxStoreKeys || l.OmittedRanks != int64(workers*wire.MaxDataParallelSize+3-load.MaxStoreKeys) {
		t.Fatalf("/admin/dynamo/load lists %d rank rows (%d bytes) and omits %d, want the %d the load store can hold and the rest counted",
			len(l.Samples), len(body), l.OmittedRanks, load.MaxStoreKeys)
	}
}

// TestAdminLoadStateIsThePhaseBacklog: the design calls a worker
// without a fresh sample quiet when its last sample's backlog is 0, and
// only one silent "with a backlog" is left out; the picker reads the
// backlog of the worker's phase (prefill: active_prefill_tokens; decode:
// active_decode_blocks, else kv_used_blocks). A prefill worker last seen
// with no prefill tokens queued (but KV blocks held for a transfer) is
// picked as quiet, yet the admin API (and top's STATE column) calls it
// stale.
func TestAdminLoadStateIsThePhaseBacklog(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.store.SetLiveAndRetain(load.LiveOf(h.reg.Snapshot()))
	zero, held := uint64(0), uint64(5)
	smp := load.Sample{Load: wire.ActiveLoad{WorkerID: 10, ActivePrefillTokens: &zero, ActiveDecodeBlocks: &held},
		Namespace: load.NS("dynamo"), PublisherID: 1, Sequence: 1, ReceivedAt: time.Now().Add(-10 * time.Second)}
	if r := h.store.Apply(smp); r != "" {
		t.Fatal(r)
	}
	l, body := adminLoad(t, h)
	found := false
	for _, s := range l.Samples {
		if s.WorkerID == "10" {
			found = true
			if s.State != "quiet" {
				t.Fatalf("prefill worker 10, last seen with 0 prefill tokens 10 s ago: state %q, want quiet (%s)", s.State, body)
			}
		}
	}
	if !found {
		t.Fatalf("worker 10 not listed: %s", body)
	}
}

// adminLoad reads GET /admin/dynamo/load, and its body as text.
func adminLoad(t *testing.T, h *harness) (admin.LoadResponse, string) {
	t.Helper()
	status, body := adminGet(t, h, "/admin/dynamo/load", "Bearer admin-secret")
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	var l admin.LoadResponse
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatal(err)
	}
	return l, body
}
