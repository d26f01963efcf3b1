package pick_test

import (
	"fmt"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// wr is a (worker, global dp rank).
type wr struct {
	id   uint64
	rank uint32
}

func (x wr) String() string { return fmt.Sprintf("%d/%d", x.id, x.rank) }

func targetOf(t pick.Target) wr { return wr{t.Worker.ID.InstanceID, t.DPRank} }

// rankedFleet: data-parallel workers whose global ranks start above 0.
//
//	prefill 10: ranks 4, 5      prefill 11: ranks 10, 11, 12
//	decode  20: ranks 7, 8      decode  21: ranks 12, 13, 14, 15
func rankedFleet(t *testing.T) *fleet.Snapshot {
	return snapshot(t,
		w{component: "prefill", workerType: "Prefill", id: 10, dp: 2, start: 4},
		w{component: "prefill", workerType: "Prefill", id: 11, dp: 3, start: 10},
		w{component: "decode", workerType: "Decode", id: 20, dp: 2, start: 7},
		w{component: "decode", workerType: "Decode", id: 21, dp: 4, start: 12})
}

// TestStartRanksLoadBased: the picker costs and pins each worker's global
// ranks (data_parallel_start_rank + i), for decode and prefill.
func TestStartRanksLoadBased(t *testing.T) {
	cases := []struct {
		name            string
		snap            func(*testing.T) *fleet.Snapshot
		decode, prefill map[wr]uint64 // fresh samples: active decode blocks, active prefill tokens
		want            wr
		wantPrefill     *wr
	}{{
		name:        "least loaded at ranks 13 and 11",
		snap:        rankedFleet,
		decode:      map[wr]uint64{{20, 7}: 50, {20, 8}: 40, {21, 12}: 60, {21, 13}: 3, {21, 14}: 70, {21, 15}: 80},
		prefill:     map[wr]uint64{{10, 4}: 900, {10, 5}: 800, {11, 10}: 700, {11, 11}: 20, {11, 12}: 600},
		want:        wr{21, 13},
		wantPrefill: &wr{11, 11},
	}, {
		name:        "least loaded at ranks 8 and 4",
		snap:        rankedFleet,
		decode:      map[wr]uint64{{20, 7}: 50, {20, 8}: 1, {21, 12}: 60, {21, 13}: 30, {21, 14}: 70, {21, 15}: 80},
		prefill:     map[wr]uint64{{10, 4}: 5, {10, 5}: 800, {11, 10}: 700, {11, 11}: 200, {11, 12}: 600},
		want:        wr{20, 8},
		wantPrefill: &wr{10, 4},
	}, {
		name:        "least loaded at the last ranks, 15 and 12",
		snap:        rankedFleet,
		decode:      map[wr]uint64{{20, 7}: 50, {20, 8}: 40, {21, 12}: 60, {21, 13}: 30, {21, 14}: 70, {21, 15}: 2},
		prefill:     map[wr]uint64{{10, 4}: 900, {10, 5}: 800, {11, 10}: 700, {11, 11}: 200, {11, 12}: 9},
		want:        wr{21, 15},
		wantPrefill: &wr{11, 12},
	}, {
		name: "aggregated, ranks 9 to 11",
		snap: func(t *testing.T) *fleet.Snapshot {
			return snapshot(t, w{component: "backend", workerType: "Aggregated", id: 30, dp: 3, start: 9},
				w{component: "backend", workerType: "Aggregated", id: 31, dp: 2, start: 1})
		},
		decode: map[wr]uint64{{30, 9}: 40, {30, 10}: 30, {30, 11}: 4, {31, 1}: 20, {31, 2}: 50},
		want:   wr{30, 11},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := c.snap(t)
			l := newLoads(snap)
			for k, v := range c.decode {
				l.sample(k.id, k.rank, t0, u64(v), nil, nil)
			}
			for k, v := range c.prefill {
				l.sample(k.id, k.rank, t0, nil, u64(v), nil)
			}
			pin := mustPick(t, picker(l, t0), snap, req())
			if got := targetOf(pin.Decode); got != c.want || pin.DecodeReason != pick.ReasonLoad || !pin.Decode.SendRank {
				t.Errorf("decode %v (%s, send rank %v), want %v by load", got, pin.DecodeReason, pin.Decode.SendRank, c.want)
			}
			switch {
			case c.wantPrefill == nil:
				if pin.Prefill != nil || pin.PrefillReason != pick.ReasonNoPrefillPool {
					t.Errorf("prefill %+v (%s), want none", pin.Prefill, pin.PrefillReason)
				}
			case pin.Prefill == nil:
				t.Errorf("no prefill, want %v", *c.wantPrefill)
			default:
				if got := targetOf(*pin.Prefill); got != *c.wantPrefill || pin.PrefillReason != pick.ReasonLoad || !pin.Prefill.SendRank {
					t.Errorf("prefill %v (%s, send rank %v), want %v by load", got, pin.PrefillReason, pin.Prefill.SendRank, *c.wantPrefill)
				}
			}
		})
	}
}

// TestStartRanksRotation: with no fresh sample (LoadBased) and always
// (RoundRobin), picks rotate through every global rank in order: decode
// 20/7, 20/8, 21/12 .. 21/15, prefill 10/4, 10/5, 11/10 .. 11/12.
func TestStartRanksRotation(t *testing.T) {
	decode := []wr{{20, 7}, {20, 8}, {21, 12}, {21, 13}, {21, 14}, {21, 15}}
	prefill := []wr{{10, 4}, {10, 5}, {11, 10}, {11, 11}, {11, 12}}
	snap := rankedFleet(t)
	for _, c := range []struct {
		name string
		p    pick.Picker
	}{{"LoadBased", picker(newLoads(snap), t0)}, {"RoundRobin", &pick.RoundRobin{}}} {
		p := c.p
		t.Run(c.name, func(t *testing.T) {
			for i := range 2 * len(decode) * len(prefill) {
				pin, tk, err := p.Reserve(snap, req(), t0)
				if err != nil {
					t.Fatal(err)
				}
				p.Release(tk)
				if got, want := targetOf(pin.Decode), decode[i%len(decode)]; got != want || !pin.Decode.SendRank {
					t.Fatalf("pick %d: decode %v (send rank %v), want %v", i, got, pin.Decode.SendRank, want)
				}
				if pin.Prefill == nil {
					t.Fatalf("pick %d: no prefill", i)
				}
				if got, want := targetOf(*pin.Prefill), prefill[i%len(prefill)]; got != want || !pin.Prefill.SendRank {
					t.Fatalf("pick %d: prefill %v (send rank %v), want %v", i, got, pin.Prefill.SendRank, want)
				}
			}
		})
	}
}
