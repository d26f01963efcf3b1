package pick_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// benchFleet is n workers (a quarter of them prefill) over the given number
// of models, each with a fresh sample.
func benchFleet(b *testing.B, n, models int) (*fleet.Snapshot, *loads) {
	var ws []w
	for i := range n {
		kind, comp := "Decode", "decode"
		if (i/models)%4 == 0 {
			kind, comp = "Prefill", "prefill"
		}
		ws = append(ws, w{component: comp, workerType: kind, id: uint64(i + 1), model: fmt.Sprintf("m%d", i%models)})
	}
	snap := snapshot(b, ws...)
	l := newLoads(snap)
	for i := range n {
		l.sample(uint64(i+1), 0, t0, u64(uint64(i%97)), u64(uint64(i%89)), nil)
	}
	return snap, l
}

func fleetName(n, models int) string {
	if models > 1 {
		return fmt.Sprintf("workers=%d/%d-models", n, models)
	}
	return fmt.Sprintf("workers=%d/one-model", n)
}

// BenchmarkPick is one decode+prefill decision with fresh samples for every
// worker, at fleet sizes of 16, 1,024 and 16,384 workers. "one-model" puts
// every worker behind one model (every worker is a candidate); "64-models"
// spreads them over 64 models. "scan" is the same-run baseline: the
// straightforward picker that costs every candidate on every pick (the
// differential test's oracle); "indexed" is LoadBased.
func BenchmarkPick(b *testing.B) {
	for _, n := range []int{16, 1024, 16384} {
		for _, models := range []int{1, 64} {
			if models > n {
				continue
			}
			snap, l := benchFleet(b, n, models)
			r := pick.Request{Model: "m0", Namespaces: []string{"dynamo"}, EstPromptTokens: 1000}
			pickers := []struct {
				name string
				p    interface {
					Pick(*fleet.Snapshot, pick.Request, time.Time) (pick.Pin, error)
				}
			}{
				{"scan", pick.NewScanOracle(l.store)},
				{"indexed", pick.NewLoadBased(l.store)},
			}
			for _, p := range pickers {
				b.Run(fleetName(n, models)+"/"+p.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, err := p.p.Pick(snap, r, t0); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkReserveWhileSamplesArrive is the serving loop: per decision
// one new load sample arrives (rotating over the whole fleet), the clock
// moves 100 µs, and the pick is recorded in the ledger, so every decision
// first brings the changed candidates up to date. With 64 models the
// requests rotate over the models too, so each model's index catches up on
// the samples of 64 decisions (most of them other models' workers).
func BenchmarkReserveWhileSamplesArrive(b *testing.B) {
	for _, n := range []int{16, 1024, 16384} {
		for _, models := range []int{1, 64} {
			if models > n {
				continue
			}
			b.Run(fleetName(n, models), func(b *testing.B) {
				snap, l := benchFleet(b, n, models)
				p := pick.NewLoadBased(l.store)
				reqs := make([]pick.Request, models)
				for m := range reqs {
					reqs[m] = pick.Request{Model: fmt.Sprintf("m%d", m), Namespaces: []string{"dynamo"}, EstPromptTokens: 1000}
				}
				now := t0
				i, seq := 0, uint64(1<<40)
				ns := load.NS("dynamo") // a subscription's reader holds its namespace interned
				b.ReportAllocs()
				for b.Loop() {
					now = now.Add(100 * time.Microsecond)
					id := uint64(i%n + 1)
					seq++
					v := uint64(i % 97)
					l.store.Apply(load.Sample{Load: wire.ActiveLoad{WorkerID: id, ActiveDecodeBlocks: &v, ActivePrefillTokens: &v},
						Namespace: ns, PublisherID: id, Sequence: seq, ReceivedAt: now})
					_, t, err := p.Reserve(snap, reqs[i%models], now)
					if err != nil {
						b.Fatal(err)
					}
					p.Release(t)
					i++
				}
			})
		}
	}
}
