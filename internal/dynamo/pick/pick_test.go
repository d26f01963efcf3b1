package pick_test

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

var t0 = time.Unix(1_800_000_000, 0)

func u64(v uint64) *uint64 { return &v }

// w describes a worker for a test fleet.
type w struct {
	ns, component, workerType, model string
	id                               uint64
	dp                               int // data_parallel_size; 0 = not declared
	start                            int // data_parallel_start_rank; 0 = not declared
	noCapacity                       bool
}

func snapshot(t testing.TB, ws ...w) *fleet.Snapshot {
	t.Helper()
	r := fleet.NewReducer()
	for _, x := range ws {
		ns := x.ns
		if ns == "" {
			ns = "dynamo"
		}
		model := x.model
		if model == "" {
			model = "m"
		}
		r.Put(fmt.Sprintf("v1/instances/%s/%s/generate/%x", ns, x.component, x.id), fmt.Appendf(nil, `{"component":%q,"endpoint":"generate","instance_id":%d}`, x.component, x.id), t0)
		rc := `"total_kv_blocks":1000,"max_num_batched_tokens":8192`
		if x.noCapacity {
			rc = ""
		}
		if x.dp > 0 {
			if rc != "" {
				rc += ","
			}
			rc += fmt.Sprintf(`"data_parallel_size":%d`, x.dp)
		}
		if x.start > 0 {
			if rc != "" {
				rc += ","
			}
			rc += fmt.Sprintf(`"data_parallel_start_rank":%d`, x.start)
		}
		bs := `,"kv_cache_block_size":16`
		if x.noCapacity {
			bs = ""
		}
		r.Put(fmt.Sprintf("v1/mdc/%s/%s/generate/%x", ns, x.component, x.id), fmt.Appendf(nil,
			`{"component":%q,"endpoint":"generate","instance_id":%d,"card_json":{"display_name":%q,"worker_type":%q%s,"runtime_config":{%s}}}`,
			x.component, x.id, model, x.workerType, bs, rc), t0)
	}
	return r.Build(t0)
}

type loads struct {
	store *load.Store
	live  map[fleet.WorkerID]load.LiveWorker
	ids   map[uint64]fleet.WorkerID
}

func newLoads(snap *fleet.Snapshot) *loads {
	l := &loads{store: load.NewStore(3*time.Second, nil), live: map[fleet.WorkerID]load.LiveWorker{}, ids: map[uint64]fleet.WorkerID{}}
	for w := range snap.Workers.All() {
		l.ids[w.ID.InstanceID] = w.ID
		l.live[w.ID] = load.LiveWorker{DPStartRank: w.DPStartRank, DPSize: w.DPSize}
	}
	l.store.SetLiveAndRetain(l.live)
	return l
}

// seq numbers the samples of every test, parallel ones included.
var seq atomic.Uint64

// id is the live worker of instance id (ids are unique across the test
// fleets' namespaces).
func (l *loads) id(worker uint64) fleet.WorkerID {
	if id, ok := l.ids[worker]; ok {
		return id
	}
	return fleet.WorkerID{InstanceID: worker}
}

// sample stores a sample received at 'at', as worker's namespace's
// publisher would.
func (l *loads) sample(worker uint64, rank uint32, at time.Time, decode, prefill, kvUsed *uint64) {
	res := l.store.Apply(load.Sample{Load: wire.ActiveLoad{WorkerID: worker, DPRank: rank, ActiveDecodeBlocks: decode, ActivePrefillTokens: prefill, KVUsedBlocks: kvUsed},
		Namespace: load.NS(l.id(worker).Namespace), PublisherID: worker, Sequence: seq.Add(1), ReceivedAt: at})
	if res != "" {
		panic(res)
	}
}

// clocked is a load-based picker whose picks read the clock Now.
type clocked struct {
	*pick.LoadBased
	Now func() time.Time
}

func (c *clocked) Pick(snap *fleet.Snapshot, r pick.Request) (pick.Pin, error) {
	return c.LoadBased.Pick(snap, r, c.Now())
}

func picker(l *loads, now time.Time) *clocked {
	return &clocked{LoadBased: pick.NewLoadBased(l.store), Now: func() time.Time { return now }}
}

func req(namespaces ...string) pick.Request {
	if len(namespaces) == 0 {
		namespaces = []string{"dynamo"}
	}
	return pick.Request{Model: "m", Namespaces: namespaces, EstPromptTokens: 160}
}

func mustPick(t *testing.T, p *clocked, snap *fleet.Snapshot, r pick.Request) pick.Pin {
	t.Helper()
	pin, err := p.Pick(snap, r)
	if err != nil {
		t.Fatal(err)
	}
	return pin
}

func TestDecodeByLoad(t *testing.T) {
	snap := snapshot(t, w{component: "backend", workerType: "Aggregated", id: 1}, w{component: "backend", workerType: "Aggregated", id: 2})
	l := newLoads(snap)
	now := t0.Add(time.Second)
	l.sample(1, 0, t0, u64(500), nil, nil)
	l.sample(2, 0, t0, u64(100), nil, nil)
	pin := mustPick(t, picker(l, now), snap, req())
	if pin.Decode.Worker.ID.InstanceID != 2 || pin.DecodeReason != pick.ReasonLoad || pin.Prefill != nil {
		t.Fatalf("%+v", pin)
	}
}

func TestKVUsedBlocksWhenDecodeBlocksNil(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
	l := newLoads(snap)
	l.sample(1, 0, t0, nil, nil, u64(10))
	l.sample(2, 0, t0, nil, nil, u64(900))
	if pin := mustPick(t, picker(l, t0), snap, req()); pin.Decode.Worker.ID.InstanceID != 1 || pin.DecodeReason != pick.ReasonLoad {
		t.Fatalf("%+v", pin)
	}
}

func TestTiesRotate(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2}, w{component: "decode", workerType: "Decode", id: 3})
	l := newLoads(snap)
	for _, id := range []uint64{1, 2, 3} {
		l.sample(id, 0, t0, u64(5), nil, nil)
	}
	p := picker(l, t0)
	seen := map[uint64]int{}
	for range 6 {
		seen[mustPick(t, p, snap, req()).Decode.Worker.ID.InstanceID]++
	}
	if seen[1] != 2 || seen[2] != 2 || seen[3] != 2 {
		t.Fatalf("ties not rotated: %v", seen)
	}
}

func TestDataParallelRanks(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1, dp: 4})
	l := newLoads(snap)
	for r, v := range []uint64{40, 30, 5, 50} {
		l.sample(1, uint32(r), t0, u64(v), nil, nil)
	}
	pin := mustPick(t, picker(l, t0), snap, req())
	if pin.Decode.DPRank != 2 || !pin.Decode.SendRank {
		t.Fatalf("%+v", pin.Decode)
	}
	// Without a declared data_parallel_size no rank header is sent.
	snap2 := snapshot(t, w{component: "decode", workerType: "Decode", id: 1})
	if pin := mustPick(t, picker(newLoads(snap2), t0), snap2, req()); pin.Decode.SendRank {
		t.Fatalf("rank header without a declared dp size: %+v", pin.Decode)
	}
}

func TestStaleRoundRobin(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
	l := newLoads(snap)
	l.sample(1, 0, t0, u64(5), nil, nil)
	p := picker(l, t0.Add(time.Minute)) // every sample is stale
	a, b := mustPick(t, p, snap, req()), mustPick(t, p, snap, req())
	if a.DecodeReason != pick.ReasonRoundRobinStale || a.Decode.Worker == b.Decode.Worker {
		t.Fatalf("%+v %+v", a, b)
	}
}

func TestQuietAndSilentWorkers(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2},
		w{component: "decode", workerType: "Decode", id: 3}, w{component: "decode", workerType: "Decode", id: 4})
	l := newLoads(snap)
	now := t0.Add(10 * time.Second)
	l.sample(1, 0, now, u64(300), nil, nil) // fresh, loaded
	l.sample(2, 0, t0, u64(0), nil, nil)    // went idle and silent: quiet, backlog 0
	l.sample(3, 0, t0, u64(1), nil, nil)    // silent with a backlog: no cost
	/* worker 4 never published: quiet */
	p := picker(l, now)
	got := map[uint64]int{}
	for range 4 {
		got[mustPick(t, p, snap, req()).Decode.Worker.ID.InstanceID]++
	}
	if got[2] != 2 || got[4] != 2 || got[1] != 0 || got[3] != 0 {
		t.Fatalf("quiet workers should share the picks: %v", got)
	}
}

func TestMissingCapacityHasNoCost(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1, noCapacity: true}, w{component: "decode", workerType: "Decode", id: 2})
	l := newLoads(snap)
	l.sample(1, 0, t0, u64(0), nil, nil)
	l.sample(2, 0, t0, u64(999), nil, nil)
	if pin := mustPick(t, picker(l, t0), snap, req()); pin.Decode.Worker.ID.InstanceID != 2 {
		t.Fatalf("a worker without capacity was costed: %+v", pin)
	}
}

func TestPrefillDecodePair(t *testing.T) {
	snap := snapshot(t, w{component: "prefill", workerType: "Prefill", id: 10}, w{component: "prefill", workerType: "Prefill", id: 11},
		w{component: "decode", workerType: "Decode", id: 20})
	l := newLoads(snap)
	l.sample(20, 0, t0, u64(1), nil, nil)
	l.sample(10, 0, t0, nil, u64(8000), nil)
	l.sample(11, 0, t0, nil, u64(100), nil)
	pin := mustPick(t, picker(l, t0), snap, req())
	if pin.Decode.Worker.ID.InstanceID != 20 || pin.Prefill == nil || pin.Prefill.Worker.ID.InstanceID != 11 || pin.PrefillReason != pick.ReasonLoad {
		t.Fatalf("%+v", pin)
	}
	// Dynamo 1.4.2 vLLM workers send no active_prefill_tokens: prefill rotates.
	snap2 := snapshot(t, w{component: "prefill", workerType: "Prefill", id: 10}, w{component: "prefill", workerType: "Prefill", id: 11},
		w{component: "decode", workerType: "Decode", id: 20})
	l2 := newLoads(snap2)
	l2.sample(10, 0, t0, nil, nil, u64(5))
	l2.sample(11, 0, t0, nil, nil, u64(5))
	l2.sample(20, 0, t0, nil, nil, u64(5))
	p := picker(l2, t0)
	a, b := mustPick(t, p, snap2, req()), mustPick(t, p, snap2, req())
	if a.PrefillReason != pick.ReasonRoundRobinStale || a.Prefill.Worker == b.Prefill.Worker || a.DecodeReason != pick.ReasonLoad {
		t.Fatalf("%+v / %+v", a, b)
	}
}

func TestMixedNamespace(t *testing.T) {
	// prefill + decode + aggregated: aggregated is no decode candidate.
	snap := snapshot(t, w{component: "prefill", workerType: "Prefill", id: 10}, w{component: "decode", workerType: "Decode", id: 20},
		w{component: "backend", workerType: "Aggregated", id: 30})
	l := newLoads(snap)
	l.sample(20, 0, t0, u64(900), nil, nil)
	l.sample(30, 0, t0, u64(0), nil, nil)
	pin := mustPick(t, picker(l, t0), snap, req())
	if pin.Decode.Worker.ID.InstanceID != 20 || pin.Prefill == nil {
		t.Fatalf("%+v", pin)
	}
	// prefill + aggregated, no decode: aggregated decodes, no prefill id.
	snap2 := snapshot(t, w{component: "prefill", workerType: "Prefill", id: 10}, w{component: "backend", workerType: "Aggregated", id: 30})
	pin2 := mustPick(t, picker(newLoads(snap2), t0), snap2, req())
	if pin2.Decode.Worker.ID.InstanceID != 30 || pin2.Prefill != nil || pin2.PrefillReason != pick.ReasonNoPrefillPool {
		t.Fatalf("%+v", pin2)
	}
}

func TestNamespaces(t *testing.T) {
	snap := snapshot(t,
		w{ns: "prod", component: "prefill", workerType: "Prefill", id: 10}, w{ns: "prod", component: "decode", workerType: "Decode", id: 20},
		w{ns: "canary", component: "prefill", workerType: "Prefill", id: 11}, w{ns: "canary", component: "decode", workerType: "Decode", id: 21})
	l := newLoads(snap)
	l.sample(20, 0, t0, u64(900), nil, nil)
	l.sample(21, 0, t0, u64(10), nil, nil)
	pin := mustPick(t, picker(l, t0), snap, req("prod", "canary"))
	if pin.Namespace != "canary" || pin.Decode.Worker.ID.InstanceID != 21 || pin.Prefill.Worker.ID.InstanceID != 11 {
		t.Fatalf("%+v", pin)
	}
	// Only prod has replicas for this request: canary is not a candidate.
	if pin := mustPick(t, picker(l, t0), snap, req("prod")); pin.Namespace != "prod" || pin.Prefill.Worker.ID.InstanceID != 10 {
		t.Fatalf("%+v", pin)
	}
	if _, err := picker(l, t0).Pick(snap, pick.Request{Model: "other", Namespaces: []string{"prod"}}); !errors.Is(err, pick.ErrNoWorkers) {
		t.Fatalf("err = %v", err)
	}
}

// TestInFlight: dispatched requests count until the next sample.
func TestInFlight(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
	l := newLoads(snap)
	l.sample(1, 0, t0, u64(10), nil, nil)
	l.sample(2, 0, t0, u64(12), nil, nil)
	now := t0.Add(time.Second)
	p := picker(l, now)
	first := mustPick(t, p, snap, req())
	if first.Decode.Worker.ID.InstanceID != 1 {
		t.Fatalf("%+v", first)
	}
	p.Dispatched(first, 160, now) // 10 blocks on worker 1
	if second := mustPick(t, p, snap, req()); second.Decode.Worker.ID.InstanceID != 2 {
		t.Fatalf("the in-flight request was not counted: %+v", second)
	}
	// Worker 1 reports after the dispatch: the ledger entry is answered.
	l.sample(1, 0, now.Add(time.Millisecond), u64(10), nil, nil)
	p.Now = func() time.Time { return now.Add(2 * time.Millisecond) }
	if third := mustPick(t, p, snap, req()); third.Decode.Worker.ID.InstanceID != 1 {
		t.Fatalf("a sample after the dispatch did not clear it: %+v", third)
	}
}

// TestBookTokens: a request picked without a prompt size (by its model
// name alone) is chosen by load as it stands, and booked at BookTokens, so
// that the next pick sees it.
func TestBookTokens(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
	l := newLoads(snap)
	l.sample(1, 0, t0, u64(10), nil, nil)
	l.sample(2, 0, t0, u64(12), nil, nil)
	now := t0.Add(time.Second)
	p := picker(l, now)
	modelOnly := pick.Request{Model: "m", Namespaces: []string{"dynamo"}, BookTokens: 160}
	first, _, err := p.Reserve(snap, modelOnly, now)
	if err != nil || first.Decode.Worker.ID.InstanceID != 1 {
		t.Fatalf("%+v %v", first, err)
	}
	second, _, err := p.Reserve(snap, modelOnly, now)
	if err != nil || second.Decode.Worker.ID.InstanceID != 2 {
		t.Fatalf("the booked request was not counted: %+v %v", second, err)
	}
}

// TestStalled: a worker sent a large request that then reports nothing for
// 5 s is passed over while another has a cost; not when nothing is fresh.
func TestStalled(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
	l := newLoads(snap)
	l.sample(1, 0, t0, u64(0), nil, nil)
	l.sample(2, 0, t0.Add(6*time.Second), u64(400), nil, nil)
	p := picker(l, t0.Add(7*time.Second))
	pin := pick.Pin{Decode: pick.Target{Worker: snap.Workers.Get(fleet.WorkerID{Namespace: "dynamo", InstanceID: 1}), DPRank: 0}}
	ticket := p.Dispatched(pin, 48, t0.Add(time.Second)) // 3 blocks
	if got := mustPick(t, p, snap, req()); got.Decode.Worker.ID.InstanceID != 2 {
		t.Fatalf("a stalled worker was picked: %+v", got)
	}
	p.Release(ticket) // the frontend answered: it was not stalled
	if got := mustPick(t, p, snap, req()); got.Decode.Worker.ID.InstanceID != 1 {
		t.Fatalf("a finished request still stalls the worker: %+v", got)
	}
}

func TestPodsSourceRoundRobin(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1, noCapacity: true}, w{component: "decode", workerType: "Decode", id: 2, noCapacity: true})
	p := picker(newLoads(snap), t0)
	a, b := mustPick(t, p, snap, req()), mustPick(t, p, snap, req())
	if a.Decode.Worker == b.Decode.Worker || a.DecodeReason != pick.ReasonRoundRobinStale {
		t.Fatalf("%+v %+v", a, b)
	}
}

func TestEstimateTokens(t *testing.T) {
	if got := pick.EstimateTokens("hello world, this is a test"); got < 7 || got > 9 {
		t.Errorf("estimate %d", got)
	}
	if pick.EstimateTokens("") != 0 {
		t.Error("empty text")
	}
}

// TestLedgerSweepsDepartedWorkers: entries of workers never picked again
// expire and are swept, so the ledger does not fill up with churn.
func TestLedgerSweepsDepartedWorkers(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
	p := pick.NewLoadBased(newLoads(snap).store)
	ws := slices.Collect(snap.Workers.All())
	p.Dispatched(pick.Pin{Decode: pick.Target{Worker: ws[0]}}, 100, t0)
	later := t0.Add(pick.InFlightWindow + time.Second)
	for range 1024 {
		p.Dispatched(pick.Pin{Decode: pick.Target{Worker: ws[1]}}, 100, later)
	}
	if n := p.LedgerKeys(); n != 1 {
		t.Fatalf("%d keys held, want only the live worker's", n)
	}
}

// TestReserveSeesConcurrentDispatch: Reserve records the pin with the pick,
// so a second request sees the first one's load.
func TestReserveSeesConcurrentDispatch(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
	l := newLoads(snap)
	l.sample(1, 0, t0, u64(10), nil, nil)
	l.sample(2, 0, t0, u64(12), nil, nil)
	p := picker(l, t0)
	a, _, err := p.Reserve(snap, req(), t0.Add(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := p.Reserve(snap, req(), t0.Add(2*time.Millisecond))
	if a.Decode.Worker == b.Decode.Worker {
		t.Fatalf("both reservations went to worker %d", a.Decode.Worker.ID.InstanceID)
	}
}

// TestRestartedWorkerStartsClean: a worker sent many requests that then
// stays silent looks loaded and stalled; once it left the fleet and came
// back, or its publisher's session restarted, what its previous life was
// sent no longer counts: it competes as a quiet worker at once.
func TestRestartedWorkerStartsClean(t *testing.T) {
	for _, tt := range []struct {
		name    string
		restart func(l *loads)
	}{
		{"left and rejoined", func(l *loads) {
			live := map[fleet.WorkerID]load.LiveWorker{l.id(2): l.live[l.id(2)]}
			l.store.SetLiveAndRetain(live)
			l.store.SetLiveAndRetain(l.live)
		}},
		{"publisher replaced", func(l *loads) { l.store.ResetPublisher(1) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
			l := newLoads(snap)
			now := t0.Add(9 * time.Second)
			l.store.SetClock(func() time.Time { return now })
			l.sample(1, 0, t0, u64(0), nil, nil) // idle, then silent
			l.sample(2, 0, now, u64(100), nil, nil)
			p := picker(l, now)
			var one *fleet.Worker
			for wk := range snap.Workers.All() {
				if wk.ID.InstanceID == 1 {
					one = wk
				}
			}
			for i := range 20 {
				p.Dispatched(pick.Pin{Decode: pick.Target{Worker: one}}, 160, t0.Add(time.Second+time.Duration(i)*time.Millisecond))
			}
			if got := mustPick(t, p, snap, req()); got.Decode.Worker.ID.InstanceID != 2 {
				t.Fatalf("before the restart, the worker with 200 blocks in flight was picked: %+v", got)
			}
			now = t0.Add(10 * time.Second)
			tt.restart(l)
			p.Now = func() time.Time { return now.Add(time.Millisecond) }
			if got := mustPick(t, p, snap, req()); got.Decode.Worker.ID.InstanceID != 1 || got.DecodeReason != pick.ReasonLoad {
				t.Fatalf("the restarted worker did not compete as quiet: %+v", got)
			}
		})
	}
}

// TestBusyThreshold: a worker over the busy threshold is passed over even
// when its cost is the lowest, stays busy until it is the hysteresis below
// the threshold, and a request whose every candidate is busy fails with
// ErrAllBusy; with no fresh sample nothing is judged.
func TestBusyThreshold(t *testing.T) {
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
	l := newLoads(snap)
	now := t0.Add(time.Second)
	p := picker(l, now)
	rule := &pick.BusyThreshold{KVBlocks: 0.8, Hysteresis: 0.1}
	busyReq := req()
	busyReq.Busy = rule
	set := func(kvUsed1, kvUsed2 uint64) {
		// The cost reads active_decode_blocks (100 and 300); busyness reads
		// blocks in use, the larger of it and kv_used_blocks.
		l.sample(1, 0, now, u64(100), nil, u64(kvUsed1))
		l.sample(2, 0, now, u64(300), nil, u64(kvUsed2))
	}
	pickOf := func(r pick.Request) (uint64, error) {
		pin, err := p.Pick(snap, r)
		if err != nil {
			return 0, err
		}
		return pin.Decode.Worker.ID.InstanceID, nil
	}
	for _, step := range []struct {
		name           string
		kv1, kv2       uint64
		r              pick.Request
		want           uint64
		wantErr        error
		advanceMinutes int
	}{
		{name: "no threshold: the cheapest", kv1: 900, kv2: 300, r: req(), want: 1},
		{name: "busy: passed over", kv1: 900, kv2: 300, r: busyReq, want: 2},
		{name: "below the threshold, within the hysteresis: still busy", kv1: 750, kv2: 300, r: busyReq, want: 2},
		{name: "the hysteresis below: free", kv1: 650, kv2: 300, r: busyReq, want: 1},
		{name: "between the two, not held: free", kv1: 750, kv2: 300, r: busyReq, want: 1},
		{name: "every candidate busy", kv1: 900, kv2: 950, r: busyReq, wantErr: pick.ErrAllBusy},
		{name: "no fresh sample: nothing judged", kv1: 900, kv2: 950, r: busyReq, advanceMinutes: 1},
	} {
		set(step.kv1, step.kv2)
		if step.advanceMinutes > 0 {
			p.Now = func() time.Time { return now.Add(time.Duration(step.advanceMinutes) * time.Minute) }
		}
		got, err := pickOf(step.r)
		switch {
		case step.wantErr != nil:
			if !errors.Is(err, step.wantErr) {
				t.Fatalf("%s: %d, %v; want %v", step.name, got, err, step.wantErr)
			}
		case err != nil:
			t.Fatalf("%s: %v", step.name, err)
		case step.want != 0 && got != step.want:
			t.Fatalf("%s: picked %d, want %d", step.name, got, step.want)
		}
	}
}

// TestPrefillBlockedNamespaceLeavesTheChoice: two namespaces each with a
// prefill/decode pair, a's decode worker the cheaper. When a's prefill
// worker cannot take the request (busy, or excluded by a re-pin), decode
// is chosen again among the other namespaces and b's pair serves it,
// rather than a 503 while b is idle. With both namespaces' prefill
// workers busy, the answer is busy.
func TestPrefillBlockedNamespaceLeavesTheChoice(t *testing.T) {
	t.Parallel()
	snap := snapshot(t,
		w{ns: "a", component: "prefill", workerType: "Prefill", id: 10}, w{ns: "a", component: "decode", workerType: "Decode", id: 20},
		w{ns: "b", component: "prefill", workerType: "Prefill", id: 11}, w{ns: "b", component: "decode", workerType: "Decode", id: 21})
	fill := func(prefillA, prefillB uint64) *loads {
		l := newLoads(snap)
		l.sample(20, 0, t0, u64(10), u64(0), nil)
		l.sample(21, 0, t0, u64(100), u64(0), nil)
		l.sample(10, 0, t0, u64(0), u64(prefillA), nil)
		l.sample(11, 0, t0, u64(0), u64(prefillB), nil)
		return l
	}
	busy := &pick.BusyThreshold{PrefillTokens: 1.0, Hysteresis: 0.05}
	r := req("a", "b")
	if pin, err := picker(fill(0, 0), t0).Pick(snap, r); err != nil || pin.Namespace != "a" {
		t.Fatalf("both free: %s in %q (%v), want a's pair", pinString(pin), pin.Namespace, err)
	}
	r.Busy = busy
	pin, err := picker(fill(20000, 0), t0).Pick(snap, r) // a's prefill over 1.0 x 8192 tokens
	if err != nil || pin.Namespace != "b" || pin.Decode.Worker.ID.InstanceID != 21 || pin.Prefill == nil || pin.Prefill.Worker.ID.InstanceID != 11 {
		t.Fatalf("a's prefill busy: %s in %q (%v), want b's pair", pinString(pin), pin.Namespace, err)
	}
	if _, err := picker(fill(20000, 20000), t0).Pick(snap, r); !errors.Is(err, pick.ErrAllBusy) {
		t.Fatalf("every prefill worker busy: %v, want all busy", err)
	}
	r.Busy = nil
	for wk := range snap.Workers.All() {
		if wk.ID.InstanceID == 10 {
			r.Exclude = []fleet.WorkerID{wk.ID}
		}
	}
	if pin, err := picker(fill(0, 0), t0).Pick(snap, r); err != nil || pin.Namespace != "b" {
		t.Fatalf("a's prefill excluded: %s in %q (%v), want b's pair", pinString(pin), pin.Namespace, err)
	}
}

// TestBusyFromDispatches: what the router sent since a worker's sample
// counts towards its busyness, so a burst between samples does not pile
// onto one worker; the prefill backlog against max_num_batched_tokens
// makes a prefill worker busy, the blocks in use a decode worker.
func TestBusyFromDispatches(t *testing.T) {
	snap := snapshot(t, w{component: "prefill", workerType: "Prefill", id: 10}, w{component: "prefill", workerType: "Prefill", id: 11},
		w{component: "decode", workerType: "Decode", id: 20}, w{component: "decode", workerType: "Decode", id: 21})
	l := newLoads(snap)
	for _, id := range []uint64{10, 11, 20, 21} {
		l.sample(id, 0, t0, u64(0), u64(0), nil)
	}
	p := picker(l, t0)
	r := req()
	r.EstPromptTokens = 4000 // 250 of 1000 blocks, 4000 of 8192 batched tokens
	r.Busy = &pick.BusyThreshold{KVBlocks: 0.2, PrefillTokens: 0.4, Hysteresis: 0.05}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	seen := map[uint64]bool{}
	for range 2 {
		pin, _, err := p.Reserve(snap, r, at(1))
		if err != nil {
			t.Fatal(err)
		}
		seen[pin.Decode.Worker.ID.InstanceID], seen[pin.Prefill.Worker.ID.InstanceID] = true, true
	}
	if len(seen) != 4 {
		t.Fatalf("two large requests did not spread over both pairs: %v", seen)
	}
	if _, _, err := p.Reserve(snap, r, at(1)); !errors.Is(err, pick.ErrAllBusy) {
		t.Fatalf("a third request found room: %v", err)
	}
	// The decode workers report room again; the prefill workers, silent,
	// still have 4000 tokens each in flight.
	l.sample(20, 0, at(2), u64(10), u64(0), nil)
	l.sample(21, 0, at(2), u64(10), u64(0), nil)
	if _, _, err := p.Reserve(snap, r, at(3)); !errors.Is(err, pick.ErrAllBusy) {
		t.Fatalf("busy prefill workers took more: %v", err)
	}
	l.sample(11, 0, at(4), u64(0), u64(100), nil)
	pin, _, err := p.Reserve(snap, r, at(5))
	if err != nil || pin.Prefill.Worker.ID.InstanceID != 11 {
		t.Fatalf("%+v, %v", pin, err)
	}
}

// TestExclude: a request excludes the workers an earlier attempt failed
// on, in both phases and whatever rule decides; excluding every one is
// ErrNoWorkers.
func TestExclude(t *testing.T) {
	snap := snapshot(t, w{component: "prefill", workerType: "Prefill", id: 10}, w{component: "prefill", workerType: "Prefill", id: 11},
		w{component: "decode", workerType: "Decode", id: 20}, w{component: "decode", workerType: "Decode", id: 21})
	ids := map[uint64]fleet.WorkerID{}
	for wk := range snap.Workers.All() {
		ids[wk.ID.InstanceID] = wk.ID
	}
	l := newLoads(snap)
	l.sample(10, 0, t0, nil, u64(10), nil)
	l.sample(11, 0, t0, nil, u64(900), nil)
	l.sample(20, 0, t0, u64(10), nil, nil)
	l.sample(21, 0, t0, u64(900), nil, nil)
	for _, at := range []time.Duration{time.Second, time.Minute} { // by load, then round-robin (stale)
		p := picker(l, t0.Add(at))
		for range 4 {
			r := req()
			r.Exclude = []fleet.WorkerID{ids[20], ids[10]}
			pin := mustPick(t, p, snap, r)
			if pin.Decode.Worker.ID.InstanceID != 21 || pin.Prefill.Worker.ID.InstanceID != 11 {
				t.Fatalf("at +%v: an excluded worker was picked: %s", at, pinString(pin))
			}
		}
		r := req()
		r.Exclude = []fleet.WorkerID{ids[20], ids[21]}
		if _, err := p.Pick(snap, r); !errors.Is(err, pick.ErrNoWorkers) {
			t.Fatalf("at +%v: every decode worker excluded: %v", at, err)
		}
		if pin := mustPick(t, p, snap, req()); at == time.Second && pin.Decode.Worker.ID.InstanceID != 20 {
			t.Fatalf("the exclusion outlived its request: %s", pinString(pin))
		}
	}
	rr := &pick.RoundRobin{}
	for range 4 {
		r := req()
		r.Exclude = []fleet.WorkerID{ids[20], ids[10]}
		pin, _, err := rr.Reserve(snap, r, t0)
		if err != nil || pin.Decode.Worker.ID.InstanceID != 21 || pin.Prefill.Worker.ID.InstanceID != 11 {
			t.Fatalf("round robin: %s %v", pinString(pin), err)
		}
	}
}

func pinString(p pick.Pin) string {
	s := fmt.Sprintf("decode %d/%d (%s)", p.Decode.Worker.ID.InstanceID, p.Decode.DPRank, p.DecodeReason)
	if p.Prefill != nil {
		s += fmt.Sprintf(" prefill %d/%d (%s)", p.Prefill.Worker.ID.InstanceID, p.Prefill.DPRank, p.PrefillReason)
	}
	return s
}

// TestRotationPerCandidateSet: with no fresh sample to decide, each
// candidate set rotates on its own cursor. Requests for two models
// strictly alternating (a guard model's call before each main call), each
// with two decode workers, or two prefill workers that publish no prefill
// backlog (vLLM's), reach every worker: one cursor per phase shared by
// both models gave each model every other position, always the same
// worker of two. Both pickers, and the load-based one with samples that
// leave prefill undecided.
func TestRotationPerCandidateSet(t *testing.T) {
	t.Parallel()
	decodeFleet := []w{{component: "a", workerType: "Decode", id: 1, model: "ma"}, {component: "a", workerType: "Decode", id: 2, model: "ma"},
		{component: "b", workerType: "Decode", id: 3, model: "mb"}, {component: "b", workerType: "Decode", id: 4, model: "mb"}}
	prefillFleet := []w{{component: "pa", workerType: "Prefill", id: 1, model: "ma"}, {component: "pa", workerType: "Prefill", id: 2, model: "ma"},
		{component: "da", workerType: "Decode", id: 5, model: "ma"},
		{component: "pb", workerType: "Prefill", id: 3, model: "mb"}, {component: "pb", workerType: "Prefill", id: 4, model: "mb"},
		{component: "db", workerType: "Decode", id: 6, model: "mb"}}
	for _, tc := range []struct {
		name    string
		fleet   []w
		prefill bool
		rr      bool
		samples bool
	}{
		{name: "decode, load-based", fleet: decodeFleet},
		{name: "decode, round robin", fleet: decodeFleet, rr: true},
		{name: "prefill, load-based, vLLM samples", fleet: prefillFleet, prefill: true, samples: true},
		{name: "prefill, round robin", fleet: prefillFleet, prefill: true, rr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := snapshot(t, tc.fleet...)
			var p pick.Picker
			if tc.rr {
				p = &pick.RoundRobin{}
			} else {
				l := newLoads(snap)
				if tc.samples {
					for _, x := range tc.fleet {
						l.sample(x.id, 0, t0, nil, nil, u64(5)) // kv_used_blocks only
					}
				}
				p = picker(l, t0)
			}
			got := map[uint64]int{}
			for range 8 {
				for _, m := range []string{"ma", "mb"} {
					r := req()
					r.Model = m
					a, tk, err := p.Reserve(snap, r, t0)
					if err != nil {
						t.Fatal(err)
					}
					p.Release(tk)
					if tc.prefill {
						if a.Prefill == nil {
							t.Fatalf("no prefill worker: %+v", a)
						}
						got[a.Prefill.Worker.ID.InstanceID]++
					} else {
						got[a.Decode.Worker.ID.InstanceID]++
					}
				}
			}
			for id := uint64(1); id <= 4; id++ {
				if got[id] != 4 {
					t.Fatalf("picks per worker %v: want 4 each of workers 1-4", got)
				}
			}
		})
	}
}

// TestStalledWithCostBeforeSilent: a worker possibly stalled is passed
// over only while another worker has a cost. When the only other worker
// went silent with a backlog (no cost), the stalled one, fresh and costed,
// is chosen by its cost (reason load), not rotated with the silent one as
// if no sample were fresh. (max_staleness 10 s lets a sample stay fresh
// past the 5 s a request takes to count as stalled.)
func TestStalledWithCostBeforeSilent(t *testing.T) {
	t.Parallel()
	snap := snapshot(t, w{component: "decode", workerType: "Decode", id: 1}, w{component: "decode", workerType: "Decode", id: 2})
	l := newLoads(snap)
	l.store.SetMaxStaleness(10 * time.Second)
	l.sample(2, 0, t0.Add(-time.Minute), u64(5), nil, nil) // stale with a backlog: silent
	l.sample(1, 0, t0, u64(0), nil, nil)                   // fresh until t0+10s
	p := picker(l, t0.Add(7*time.Second))
	w1 := fleet.WorkerID{Namespace: "dynamo", InstanceID: 1}
	p.Dispatched(pick.Pin{Decode: pick.Target{Worker: snap.Workers.Get(w1)}}, 160, t0.Add(time.Second)) // 10 blocks, 6 s unanswered
	for i := range 4 {
		if a := mustPick(t, p, snap, req()); a.Decode.Worker.ID.InstanceID != 1 || a.DecodeReason != pick.ReasonLoad {
			t.Fatalf("pick %d: worker %d (%s), want worker 1 (load): the silent worker has no cost", i, a.Decode.Worker.ID.InstanceID, a.DecodeReason)
		}
	}
}

// TestBusyPrefillWithoutPrefillBacklog: dynamo.vllm prefill workers
// publish kv_used_blocks but no active_prefill_tokens, so the prefill
// phase has no cost and rotates; a prefill worker whose KV blocks in use
// are over the threshold is still busy (its sample is fresh) and the
// rotation passes it over, and with every one busy the request is busy.
func TestBusyPrefillWithoutPrefillBacklog(t *testing.T) {
	t.Parallel()
	snap := snapshot(t, w{component: "prefill", workerType: "Prefill", id: 10}, w{component: "prefill", workerType: "Prefill", id: 11},
		w{component: "decode", workerType: "Decode", id: 20})
	l := newLoads(snap)
	l.sample(20, 0, t0, nil, nil, u64(10))
	l.sample(10, 0, t0, nil, nil, u64(950)) // over 90 % of 1000 blocks
	l.sample(11, 0, t0, nil, nil, u64(10))
	p := picker(l, t0.Add(time.Second))
	r := req()
	r.Busy = &pick.BusyThreshold{KVBlocks: 0.9, Hysteresis: 0.05}
	for i := range 4 {
		pin, _, err := p.Reserve(snap, r, p.Now())
		if err != nil {
			t.Fatalf("pick %d: %v", i, err)
		}
		if pin.Prefill == nil || pin.Prefill.Worker.ID.InstanceID != 11 {
			t.Fatalf("pick %d: %s, want prefill 11 (10 is over the threshold)", i, pinString(pin))
		}
	}
	l.sample(11, 0, t0.Add(time.Second), nil, nil, u64(990))
	if pin, err := p.Pick(snap, r); !errors.Is(err, pick.ErrAllBusy) {
		t.Fatalf("every prefill worker busy: %s, %v; want all busy", pinString(pin), err)
	}
	// Once no prefill sample is fresh, nothing can be judged: rotation.
	p.Now = func() time.Time { return t0.Add(time.Minute) }
	l.sample(20, 0, t0.Add(time.Minute), nil, nil, u64(10))
	if _, err := p.Pick(snap, r); err != nil {
		t.Fatalf("no fresh prefill sample: %v", err)
	}
}
