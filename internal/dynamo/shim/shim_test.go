package shim_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

var t0 = time.Unix(1_800_000_000, 0)

func worker(ns string, id uint64, role fleet.Role, start, size uint32, declared bool) *fleet.Worker {
	return &fleet.Worker{ID: fleet.WorkerID{Namespace: ns, InstanceID: id}, Role: role, Model: "m",
		DPStartRank: start, DPSize: size, DPDeclared: declared}
}

// TestPinHeaders: ids and ranks in decimal (never hex, whatever their
// size), the rank headers exactly when the card declares data parallelism
// (rank 0 included), the prefill headers exactly when there is a prefill
// pin.
func TestPinHeaders(t *testing.T) {
	t.Parallel()
	big := uint64(0x1234_5678_9abc) // hex and decimal differ in every digit
	cases := []struct {
		name string
		pin  pick.Pin
		want map[string]string
	}{
		{"aggregated, no dp", pick.Pin{Decode: pick.Target{Worker: worker("a", big, fleet.RoleAggregated, 0, 0, false)}},
			map[string]string{shim.HeaderWorkerInstanceID: "20015998343868"}},
		{"decode rank 0 declared", pick.Pin{Decode: pick.Target{Worker: worker("a", 7, fleet.RoleDecode, 0, 2, true), DPRank: 0, SendRank: true}},
			map[string]string{shim.HeaderWorkerInstanceID: "7", shim.HeaderDPRank: "0"}},
		{"ranks above 9", pick.Pin{
			Decode:  pick.Target{Worker: worker("a", 21, fleet.RoleDecode, 12, 4, true), DPRank: 15, SendRank: true},
			Prefill: &pick.Target{Worker: worker("a", 11, fleet.RolePrefill, 10, 3, true), DPRank: 11, SendRank: true}},
			map[string]string{shim.HeaderWorkerInstanceID: "21", shim.HeaderDPRank: "15",
				shim.HeaderPrefillInstanceID: "11", shim.HeaderPrefillDPRank: "11"}},
		{"prefill without dp", pick.Pin{
			Decode:  pick.Target{Worker: worker("a", 26, fleet.RoleDecode, 0, 0, false)},
			Prefill: &pick.Target{Worker: worker("a", 10, fleet.RolePrefill, 0, 0, false)}},
			map[string]string{shim.HeaderWorkerInstanceID: "26", shim.HeaderPrefillInstanceID: "10"}},
	}
	legacyName := map[string]string{shim.HeaderWorkerInstanceID: shim.LegacyHeaderWorkerInstanceID,
		shim.HeaderPrefillInstanceID: shim.LegacyHeaderPrefillInstanceID, shim.HeaderDPRank: shim.LegacyHeaderDPRank,
		shim.HeaderPrefillDPRank: shim.LegacyHeaderPrefillDPRank}
	for _, c := range cases {
		h := shim.PinHeaders(c.pin, false)
		if len(h) != len(c.want) {
			t.Errorf("%s: %d headers %v, want %v", c.name, len(h), h, c.want)
		}
		for k, v := range c.want {
			if got := h.Values(k); len(got) != 1 || got[0] != v {
				t.Errorf("%s: %s = %q, want %q", c.name, k, got, v)
			}
		}
		// With legacy names, each pin goes under both, with the same value;
		// x-data-parallel-rank is never sent.
		h = shim.PinHeaders(c.pin, true)
		if len(h) != 2*len(c.want) || h.Get(shim.LegacyHeaderDataParallelRank) != "" {
			t.Errorf("%s, legacy: %d headers %v", c.name, len(h), h)
		}
		for k, v := range c.want {
			if got, lgot := h.Values(k), h.Values(legacyName[k]); len(got) != 1 || got[0] != v || len(lgot) != 1 || lgot[0] != v {
				t.Errorf("%s, legacy: %s = %q, %s = %q, want %q", c.name, k, got, legacyName[k], lgot, v)
			}
		}
	}
}

func TestIsPinHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"x-dynamo-worker-instance-id": true, "X-Dynamo-Dp-Rank": true, "X-DYNAMO-ANYTHING": true, "x-dynamo-": true,
		"x-worker-instance-id": true, "X-Prefill-Instance-Id": true, "x-dp-rank": true, "X-Data-Parallel-Rank": true, "x-prefill-dp-rank": true,
		"x-dynamo": false, "x-backend": false, "": false, "content-type": false, "x-worker-instance": false, "x-dp-ranks": false, "x-request-id": false,
	} {
		if shim.IsPinHeader(name) != want {
			t.Errorf("IsPinHeader(%q) = %v", name, !want)
		}
	}
}

type replica string

func plan(fallback bool) *shim.Plan[replica] {
	return shim.NewPlan(shim.Config[replica]{
		Enabled: true,
		Pools: []shim.Pool[replica]{
			{Namespace: "prod", Replicas: []replica{"p1", "p2"}},
			{Namespace: "canary", Replicas: []replica{"c1"}},
			{Namespace: "dev"},
		},
		ModelMap:          map[string]string{"qwen": "Qwen/Qwen3-32B"},
		FallbackToUnified: fallback,
	})
}

// TestCandidates: namespaces in configured order with their usable
// replicas; a namespace without one is no candidate.
func TestCandidates(t *testing.T) {
	t.Parallel()
	p := plan(false)
	all := p.Candidates(func(replica) bool { return true })
	if !slices.Equal(all.Namespaces, []string{"prod", "canary"}) || !slices.Equal(all.Of("prod"), []replica{"p1", "p2"}) || all.Of("dev") != nil {
		t.Errorf("all usable: %+v", all)
	}
	some := p.Candidates(func(r replica) bool { return r != "p1" && r != "c1" })
	if !slices.Equal(some.Namespaces, []string{"prod"}) || !slices.Equal(some.Of("prod"), []replica{"p2"}) {
		t.Errorf("p1 and c1 unusable: %+v", some)
	}
	if none := p.Candidates(func(replica) bool { return false }); len(none.Namespaces) != 0 {
		t.Errorf("none usable: %+v", none)
	}
	if !p.IsReplica("c1") || p.IsReplica("plain") {
		t.Error("IsReplica")
	}
	if p.Model("qwen") != "Qwen/Qwen3-32B" || p.Model("other") != "other" {
		t.Error("model map")
	}
	off := shim.NewPlan(shim.Config[replica]{Pools: []shim.Pool[replica]{{Namespace: "prod", Replicas: []replica{"p1"}}}})
	if off.Enabled() || off.IsReplica("p1") {
		t.Error("a disabled plan pins nothing and claims no replica")
	}
}

// TestVerdicts: what follows each outcome of a pinned dispatch, and what
// it counts.
func TestVerdicts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fallback bool
		o        shim.Outcome
		want     shim.Verdict
	}{
		{false, shim.Relayed, shim.Verdict{Action: shim.Finished, CountPath: true}},
		{true, shim.ClientGone, shim.Verdict{Action: shim.Finished, CountPath: true}},
		{true, shim.PrefillRefused, shim.Verdict{Action: shim.RefusePrefill, CountPath: true, ErrorPhase: shim.PhaseOrchestration}},
		{false, shim.Failed, shim.Verdict{Action: shim.FailDecode, CountPath: true, ErrorPhase: shim.PhaseDecode}},
		{true, shim.Failed, shim.Verdict{Action: shim.FallBack, ErrorPhase: shim.PhaseDecode}},
		// A stream under way is never fallen back from nor pinned again.
		{true, shim.Cut, shim.Verdict{Action: shim.Abort, CountPath: true, ErrorPhase: shim.PhaseDecode}},
		{true, shim.Told, shim.Verdict{Action: shim.Finished, CountPath: true, ErrorPhase: shim.PhaseDecode}},
		{false, shim.Told, shim.Verdict{Action: shim.Finished, CountPath: true, ErrorPhase: shim.PhaseDecode}},
	}
	for _, c := range cases {
		if got := plan(c.fallback).Verdict(c.o); got != c.want {
			t.Errorf("fallback %v, outcome %d: %+v, want %+v", c.fallback, c.o, got, c.want)
		}
	}
}

// TestFailure: which frontend answers are failures to fall back from.
func TestFailure(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status int
		stream bool
		want   bool
	}{
		{200, false, false}, {204, false, false}, {400, false, true}, {404, false, true}, {500, false, true},
		{200, true, false}, {400, true, false}, {404, true, false}, {408, true, true}, {429, true, true}, {500, true, true}, {503, true, true},
	} {
		if got := shim.Failure(c.status, c.stream); got != c.want {
			t.Errorf("Failure(%d, stream %v) = %v", c.status, c.stream, got)
		}
	}
	// The refusal is an error answer whose message is the refusal; a
	// generic 500 that quotes it as its cause is a failed dispatch.
	const refusal = "Prefill worker ID required in Direct routing mode but none found in request."
	for _, c := range []struct {
		status int
		body   string
		want   bool
	}{
		{400, `{"error":"` + refusal + `"}`, true},
		{503, `{"message":"Failed to generate completions: ` + refusal + `","type":"Service Unavailable","code":503}`, true},
		{500, `{"error":{"message":"` + refusal + `","type":"Internal Server Error","code":500}}`, true},
		{500, `{"message":" ` + refusal + `","code":500}`, true},
		{500, `{"error":"` + refusal + `"}`, true},
		{500, refusal, true},
		{500, `{"error":"Failed to generate completions: ` + refusal + `"}`, false},
		{500, `{"message":"Failed to generate completions: ` + refusal + `","type":"Internal Server Error","code":500}`, false},
		{500, `Failed to generate completions: ` + refusal, false},
		{500, `boom`, false},
		{200, `{"error":"` + refusal + `"}`, false},
	} {
		if got := shim.IsPrefillRefusal(c.status, []byte(c.body)); got != c.want {
			t.Errorf("IsPrefillRefusal(%d, %s) = %v", c.status, c.body, got)
		}
	}
}

// countingPicker pins the first decode candidate and counts reservations
// and releases.
type countingPicker struct {
	reserved, released int
	lastReq            pick.Request
}

func (p *countingPicker) Reserve(snap *fleet.Snapshot, req pick.Request, _ time.Time) (pick.Pin, pick.Ticket, error) {
	p.lastReq = req
	for _, ns := range req.Namespaces {
		for w := range snap.Workers.All() {
			if w.ID.Namespace == ns && w.Model == req.Model {
				p.reserved++
				return pick.Pin{Namespace: ns, Decode: pick.Target{Worker: w}}, pick.Ticket{}, nil
			}
		}
	}
	return pick.Pin{}, pick.Ticket{}, pick.ErrNoWorkers
}

func (p *countingPicker) Release(pick.Ticket) { p.released++ }

// TestDispatcherPin: the pin goes through the current picker with the
// mapped model and the candidate namespaces, names the pinned namespace's
// usable replicas, and is released once; a swapped picker serves the next
// request.
func TestDispatcherPin(t *testing.T) {
	t.Parallel()
	w := worker("canary", 5, fleet.RoleAggregated, 0, 0, false)
	w.Model = "Qwen/Qwen3-32B"
	snap := fleet.NewSnapshot([]*fleet.Worker{w}, nil)
	first := &countingPicker{}
	d := shim.NewDispatcher(first, plan(false))
	req := shim.Request[replica]{Model: "qwen", PromptTokens: 40, Usable: func(r replica) bool { return r != "p2" }}
	got, ok := d.Pin(snap, req, t0)
	if !ok {
		t.Fatal("not pinned")
	}
	if got.Path != shim.PathAggregated || !slices.Equal(got.Replicas, []replica{"c1"}) || got.Header.Get(shim.HeaderWorkerInstanceID) != "5" {
		t.Errorf("dispatch %+v", got)
	}
	if first.lastReq.Model != "Qwen/Qwen3-32B" || !slices.Equal(first.lastReq.Namespaces, []string{"prod", "canary"}) || first.lastReq.EstPromptTokens != 40 {
		t.Errorf("picker saw %+v", first.lastReq)
	}
	got.Done()
	if first.released != 1 {
		t.Errorf("released %d times", first.released)
	}

	second := &countingPicker{}
	d.SetPicker(second)
	if _, ok := d.Pin(snap, req, t0); !ok || second.reserved != 1 || first.reserved != 1 {
		t.Errorf("the swapped picker was not used: first %d, second %d", first.reserved, second.reserved)
	}
	// No worker of the model, no usable replica, or pinning off: plain.
	if _, ok := d.Pin(snap, shim.Request[replica]{Model: "other", Usable: req.Usable}, t0); ok {
		t.Error("pinned a model no worker serves")
	}
	if _, ok := d.Pin(snap, shim.Request[replica]{Model: "qwen", Usable: func(replica) bool { return false }}, t0); ok {
		t.Error("pinned with no usable replica")
	}
	d.SetPlan(shim.NewPlan(shim.Config[replica]{}))
	if _, ok := d.Pin(snap, req, t0); ok {
		t.Error("pinned with pinning off")
	}
}

// TestDispatcherReserve: Reserve tells why a request is not pinned: every
// candidate busy under the plan's busy threshold (pick.ErrAllBusy), or the
// plain way (ErrNotPinned), which includes a request that excludes every
// worker; the request's exclusions reach the picker.
func TestDispatcherReserve(t *testing.T) {
	t.Parallel()
	total, batched, bs := uint64(1000), uint64(8192), uint32(16)
	mk := func(id uint64) *fleet.Worker {
		w := worker("prod", id, fleet.RoleAggregated, 0, 1, false)
		w.Model, w.BlockSize = "Qwen/Qwen3-32B", &bs
		w.Capacity = fleet.Capacity{TotalKVBlocks: &total, MaxNumBatchedTokens: &batched}
		return w
	}
	w1, w2 := mk(1), mk(2)
	snap := fleet.NewSnapshot([]*fleet.Worker{w1, w2}, nil)
	store := load.NewStore(time.Minute, nil)
	store.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "prod", InstanceID: 1}: {DPSize: 1}, {Namespace: "prod", InstanceID: 2}: {DPSize: 1}})
	setLoad := func(id, blocks uint64, seq uint64) {
		if res := store.Apply(load.Sample{Load: wire.ActiveLoad{WorkerID: id, ActiveDecodeBlocks: &blocks}, Namespace: load.NS("prod"), PublisherID: id, Sequence: seq, ReceivedAt: time.Now()}); res != "" {
			t.Fatal(res)
		}
	}
	setLoad(1, 950, 1)
	setLoad(2, 900, 1)
	cfg := shim.Config[replica]{Enabled: true, Pools: []shim.Pool[replica]{{Namespace: "prod", Replicas: []replica{"p1"}}},
		ModelMap: map[string]string{"qwen": "Qwen/Qwen3-32B"}}
	d := shim.NewDispatcher(pick.NewLoadBased(store), shim.NewPlan(cfg))
	req := shim.Request[replica]{Model: "qwen", PromptTokens: 16, Usable: func(replica) bool { return true }}
	pinned := func(r shim.Request[replica]) uint64 {
		t.Helper()
		dp, err := d.Reserve(snap, r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		dp.Done()
		return dp.Pin.Decode.Worker.ID.InstanceID
	}
	if got := pinned(req); got != 2 {
		t.Fatalf("without a busy threshold: pinned %d, want the less loaded 2", got)
	}
	cfg.Busy = &pick.BusyThreshold{KVBlocks: 0.85}
	d.SetPlan(shim.NewPlan(cfg))
	if dp, err := d.Reserve(snap, req, time.Now()); !errors.Is(err, pick.ErrAllBusy) || dp != nil {
		t.Fatalf("every worker busy: %v", err)
	}
	if _, ok := d.Pin(snap, req, time.Now()); ok {
		t.Fatal("Pin pinned a request whose every worker is busy")
	}
	setLoad(1, 100, 2)
	if got := pinned(req); got != 1 {
		t.Fatalf("worker 1 has room again: pinned %d", got)
	}
	excl := req
	excl.Exclude = []fleet.WorkerID{w1.ID}
	setLoad(2, 10, 2)
	if got := pinned(excl); got != 2 {
		t.Fatalf("excluding 1: pinned %d", got)
	}
	excl.Exclude = append(excl.Exclude, w2.ID)
	if _, err := d.Reserve(snap, excl, time.Now()); !errors.Is(err, shim.ErrNotPinned) {
		t.Fatalf("every worker excluded: %v", err)
	}
}

// TestRepin: 5xx answers before a response call for a re-pin, classified
// by what they say; 4xx answers and the frontend's refusal of the pins
// themselves do not. The failure is blamed on the pinned worker the answer
// names, else on every pinned worker; the limit is the decode worker's
// card's migration_limit.
func TestRepin(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status int
		body   string
		want   string
	}{
		{500, `{"error":{"message":"instance_id=7465 not found for endpoint dynamo/decode/generate"}}`, shim.RepinInstanceNotFound},
		{500, `Worker instance 12 Not Found`, shim.RepinInstanceNotFound},
		{503, `{"error":"Cannot connect to the engine: Connection refused (os error 111)"}`, shim.RepinEngineUnreachable},
		{500, `stream disconnected: no responders`, shim.RepinEngineUnreachable},
		{502, `{"error":"EngineShutdown"}`, shim.RepinEngineUnreachable},
		{500, `Failed to generate completions`, shim.RepinStatus5xx},
		// Envoy in front of a frontend that is down: the replica's fault.
		{503, `upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: delayed connect error: 111 Connection refused`, shim.RepinStatus5xx},
		{503, `no healthy upstream`, shim.RepinStatus5xx},
		{504, ``, shim.RepinStatus5xx},
		{500, `{"error":{"message":"Prefill worker ID required in Direct routing mode but none found"}}`, ""},
		{500, `{"error":"Failed to generate completions: Prefill worker ID required in Direct routing mode but none found"}`, ""},
		{404, `{"error":"Model not found: m"}`, ""},
		{429, `too many requests`, ""},
		{400, `instance not found`, ""},
		{200, ``, ""},
	} {
		if got := shim.Repin(tt.status, []byte(tt.body)); got != tt.want {
			t.Errorf("%d %q: %q, want %q", tt.status, tt.body, got, tt.want)
		}
	}

	d, p := worker("a", 7465, fleet.RoleDecode, 0, 1, false), worker("a", 746, fleet.RolePrefill, 0, 1, false)
	d.MigrationLimit = 3
	pair := pick.Pin{Decode: pick.Target{Worker: d}, Prefill: &pick.Target{Worker: p}}
	for body, want := range map[string][]fleet.WorkerID{
		"instance_id=7465 not found":             {d.ID},
		"instance_id=746 not found":              {p.ID},
		"instance_id=74650 not found":            {d.ID, p.ID}, // neither, as a whole number
		"Failed to generate completions":         {d.ID, p.ID},
		"instances 7465 and 746 are both broken": {d.ID, p.ID},
	} {
		got, named := shim.FailedWorkers(pair, []byte(body))
		if !slices.Equal(got, want) || named != (len(want) == 1) {
			t.Errorf("%q: blamed %v (named %v), want %v", body, got, named, want)
		}
	}
	if got, named := shim.FailedWorkers(pick.Pin{Decode: pick.Target{Worker: d}}, nil); !slices.Equal(got, []fleet.WorkerID{d.ID}) || !named {
		t.Errorf("aggregated: blamed %v (named %v)", got, named)
	}
	for reason, want := range map[string]bool{shim.RepinInstanceNotFound: true, shim.RepinEngineUnreachable: true, shim.RepinStatus5xx: false, "": false} {
		if shim.WorkerFault(reason) != want {
			t.Errorf("WorkerFault(%q) = %v", reason, !want)
		}
	}
	if shim.RepinLimit(pair) != 3 || shim.RepinLimit(pick.Pin{Decode: pick.Target{Worker: p}}) != 0 {
		t.Error("the limit is the decode worker's migration_limit, 0 when its card has none")
	}
}
