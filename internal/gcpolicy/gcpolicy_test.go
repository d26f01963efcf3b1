package gcpolicy

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// gogc reads the collector's GOGC without changing it.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

func TestApply(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	limit := debug.SetMemoryLimit(-1)

	restore := Apply(func(k string) (string, bool) { return "", false }, nil)
	if got := gogc(); got < GCPercent {
		t.Fatalf("GOGC %d, want at least %d", got, GCPercent)
	}
	// The heap up to the floor is resident (objects, or free pages the
	// allocator reuses without a page fault), not released. The floor is
	// MinHeapGoal, or a quarter of a memory limit below four times that.
	floor := floorFor(debug.SetMemoryLimit(-1))
	if r := heapBytes(heapObjects, heapUnused, heapFree); r < floor*9/10 {
		t.Errorf("resident heap %d KiB after Apply, want about the floor's %d KiB", r>>10, floor>>10)
	}
	if l, ok := cgroupMemoryLimit(); ok {
		if got := debug.SetMemoryLimit(-1); got != int64(float64(l)*memoryLimitShare) {
			t.Errorf("memory limit %d with a cgroup limit of %d", got, l)
		}
	}
	// This test's live heap is a few MiB, far under the floor: after a
	// cycle GOGC is raised so that the heap goal reaches it (unless a
	// memory limit makes the floor one GCPercent reaches by itself).
	if floor*100/runtimeHeapMinimum > GCPercent {
		runtime.GC()
		deadline := time.Now().Add(5 * time.Second)
		for gogc() <= GCPercent {
			if time.Now().After(deadline) {
				t.Fatalf("GOGC still %d after a collection with a small live heap", gogc())
			}
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		// ... and the goal is the floor, not beyond (the runtime's own
		// minimum goal scales with GOGC too).
		goal := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
		metrics.Read(goal)
		if g := goal[0].Value.Uint64(); g > floor*11/10 {
			t.Errorf("heap goal %d MiB with a floor of %d MiB", g>>20, floor>>20)
		}
	}
	restore()
	if got := gogc(); got != 100 {
		t.Fatalf("restored GOGC %d, want 100", got)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Fatalf("restored memory limit %d, want %d", got, limit)
	}

	// Set in the environment: left alone.
	restore = Apply(func(k string) (string, bool) { return "50", true }, nil)
	defer restore()
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC changed to %d although the environment sets it", got)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Fatalf("memory limit changed although GOMEMLIMIT is set")
	}
}

func TestPercentFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		live, goal uint64
		want       int
	}{
		{0, 256 << 20, 6400},             // the runtime's 4 MiB minimum × 64 = 256 MiB
		{0, 32 << 20, 800},               // × 8 = 32 MiB
		{4 << 20, 32 << 20, 700},         // 4 MiB live: 32 = 4 × (1 + 7)
		{8 << 20, 256 << 20, 3100},       // 8 MiB live: 256 = 8 × (1 + 31)
		{64 << 20, 256 << 20, GCPercent}, // 64 × 4 = 256: GCPercent reaches it
		{300 << 20, 256 << 20, GCPercent},
		{1 << 10, 256 << 20, 6400},     // not 25,500,000: the runtime's minimum would be 1 TiB
		{1 << 20, 16 << 20, GCPercent}, // a small floor: GCPercent reaches it already
	} {
		if got := PercentFor(c.live, c.goal); got != c.want {
			t.Errorf("PercentFor(%d, %d) = %d, want %d", c.live, c.goal, got, c.want)
		}
	}
}

// TestFloorStops: once stopped, the floor's next turn (a finalizer that
// was already armed) leaves GOGC alone.
func TestFloorStops(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	f := startFloor(MinHeapGoal)
	if got := gogc(); got <= GCPercent {
		t.Fatalf("GOGC %d with a small live heap under the floor", got)
	}
	f.stop()
	debug.SetGCPercent(100)
	f.adjust()
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC %d after the stopped floor's turn, want 100", got)
	}
}
