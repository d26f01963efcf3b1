package tui_test

import (
	"fmt"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/tui"
)

// BenchmarkFleetFrame16k draws one frame of the fleet view of 16,384
// workers (four models, two roles) on a 160x48 terminal: the work a poll
// or a key press costs top. Only the rows on screen are formatted.
func BenchmarkFleetFrame16k(b *testing.B) {
	const n = 16384
	workers := make([]admin.Worker, n)
	samples := make([]admin.LoadSample, n)
	for i := range workers {
		role := []string{"prefill", "decode"}[i%2]
		id := fmt.Sprint(7587890000000000000 + i)
		workers[i] = worker("prod", fmt.Sprintf("model-%d", i%4), role, fmt.Sprintf("%x", 0x694d9a8f0e8b0000+i), id, 0, 1)
		samples[i] = admin.LoadSample{WorkerID: id, Namespace: "prod", ActiveDecodeBlocks: u64(uint64(i % 8192)),
			ActivePrefillTokens: u64(uint64(i % 16384)), AgeMs: 100, State: "fresh", Selections: uint64(i)}
	}
	snap := &tui.Snapshot{At: t0, Workers: admin.WorkersResponse{Enabled: true, Connected: true, Source: "etcd",
		Signals: admin.Signals{Load: true, Capacity: true}, Workers: workers}, Load: admin.LoadResponse{MaxStalenessMs: 3000, Samples: samples}}
	m := update(tui.New(tui.Options{Router: "http://router:8080", Interval: time.Second}), tea.WindowSizeMsg{Width: 160, Height: 48}, tui.SnapshotMsg(snap))
	m = keys(m, "G")
	b.ReportAllocs()
	for b.Loop() {
		_ = m.Render()
	}
}
