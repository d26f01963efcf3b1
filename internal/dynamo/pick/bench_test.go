package pick_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// BenchmarkPick is one decode+prefill decision with fresh samples for every
// worker, at fleet sizes of 16, 1,024 and 16,384 workers. "one-model" puts
// every worker behind one model (every worker is a candidate); "64-models"
// spreads them over 64 models.
func BenchmarkPick(b *testing.B) {
	for _, n := range []int{16, 1024, 16384} {
		for _, models := range []int{1, 64} {
			if models > n {
				continue
			}
			name := fmt.Sprintf("workers=%d/one-model", n)
			if models > 1 {
				name = fmt.Sprintf("workers=%d/%d-models", n, models)
			}
			b.Run(name, func(b *testing.B) {
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
				p := &pick.LoadBased{Loads: l.store, Ledger: pick.NewLedger(), Now: func() time.Time { return t0 }}
				r := pick.Request{Model: "m0", Namespaces: []string{"dynamo"}, EstPromptTokens: 1000}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := p.Pick(snap, r); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
