// Package gcpolicy sets the garbage collector of a serving process.
//
// Imports: no internal package.
package gcpolicy

import (
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The router's live heap is small (a fleet snapshot, the load store, the
// in-flight requests) while it allocates steadily per request. With Go's
// default GOGC=100 the collector then runs many times a second, and the
// requests that meet a cycle wait for it (assists, the write barrier, the
// two short pauses, and a core given to marking). A cycle costs about the
// same whatever the heap has grown to, since its work is the live heap, so
// the router lets the heap grow further between cycles: GOGC=GCPercent,
// and a floor under the heap goal (MinHeapGoal, at most a quarter of the
// memory limit) while the live heap is small. The floor is kept small on
// purpose: every byte of heap between cycles is memory the allocator walks
// through cold, and a heap of hundreds of MiB made each request touch fresh
// pages (page faults, cache and TLB misses, and on virtual machines the
// host's own faults), which cost the serving process more CPU and tail
// latency than the cycles it saved. Memory stays bounded by a soft limit.
const (
	// GCPercent is the router's GOGC when the environment sets none.
	GCPercent = 400
	// MinHeapGoal is the least heap size at which a cycle starts, when the
	// environment sets no GOGC. A router alone allocates about 7 KiB per
	// request: at 2,000 requests a second a cycle every two seconds or so,
	// over a heap that stays warm. (256 MiB, one cycle every twenty
	// seconds, cost the serving process 4-32 % more CPU per request and a
	// higher p99 behind a real socket than 32 MiB or no floor.)
	MinHeapGoal = 32 << 20
	// memoryLimitShare of the container's memory limit becomes the soft
	// memory limit when GOMEMLIMIT is not set, so the collector runs as
	// often as it must near the limit.
	memoryLimitShare = 0.8
	// floorShare of the memory limit, when one is set, bounds the floor.
	floorShare = 0.25
	// runtimeHeapMinimum is the Go runtime's least heap goal at GOGC=100;
	// it scales with GOGC, so a GOGC above goal/runtimeHeapMinimum*100
	// would put the goal past the floor whatever the live heap.
	runtimeHeapMinimum = 4 << 20
)

// Apply sets the router process's collector: unless GOGC is set,
// GOGC=GCPercent with a heap goal of at least MinHeapGoal (a quarter of the
// memory limit when that is less), the heap made resident up to that goal
// at once (warmHeap); a soft memory limit of 80% of the
// cgroup's memory limit unless GOMEMLIMIT is set. env reads the
// environment (os.LookupEnv). It returns a function that restores the
// previous settings.
func Apply(env func(name string) (string, bool), logger *slog.Logger) (restore func()) {
	prevPercent, prevLimit := -2, int64(-1)
	if _, set := env("GOMEMLIMIT"); !set {
		if limit, ok := cgroupMemoryLimit(); ok {
			prevLimit = debug.SetMemoryLimit(int64(float64(limit) * memoryLimitShare))
		}
	}
	// SetMemoryLimit with a negative value only reads the limit.
	limit := debug.SetMemoryLimit(-1)
	gogc, set := env("GOGC")
	var f *floor
	if !set {
		prevPercent = debug.SetGCPercent(GCPercent)
		gogc = strconv.Itoa(GCPercent)
		goal := uint64(MinHeapGoal)
		if limit > 0 && limit < 1<<62 {
			goal = min(goal, uint64(float64(limit)*floorShare))
		}
		f = startFloor(goal)
		warmHeap(goal)
	}
	if logger != nil {
		logger.Debug("garbage collector", "gogc", gogc, "min_heap_goal_bytes", f.goalBytes(), "memory_limit_bytes", limit)
	}
	return func() {
		f.stop()
		if prevPercent != -2 {
			debug.SetGCPercent(prevPercent)
		}
		if prevLimit >= 0 {
			debug.SetMemoryLimit(prevLimit)
		}
	}
}

// warmHeap makes the heap the floor lets grow resident before the first
// request: it writes one byte in each page of an allocation that brings
// the heap's resident memory up to goal, drops it and collects it, so
// that its pages are free heap memory, there to be reused. Without it the
// heap grows into its goal a span at a time, and each new page of it is
// a page fault taken while serving a request: at 1,000 requests a second
// and about 3 KiB allocated per request, a fault for every second request
// or so for the first ten seconds, and at lower rates for minutes. A page
// fault costs 11-15 us on the virtual machines the benchmarks run on (far
// above the microsecond or so on bare metal), several times a request's
// own work. The collector keeps the pages: its scavenger returns free
// heap memory to the system only beyond a tenth above the heap goal (or
// near the memory limit), and the heap goal is the floor.
func warmHeap(goal uint64) {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(s)
	var resident uint64
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			resident += v.Value.Uint64()
		}
	}
	if resident >= goal {
		return
	}
	page := os.Getpagesize()
	b := make([]byte, goal-resident)
	for i := 0; i < len(b); i += page {
		b[i] = 1
	}
	runtime.KeepAlive(b) // b is garbage from here on
	runtime.GC()
}

// floor keeps the heap goal at or above goal: after each collection (a
// finalizer on an object made unreachable for the purpose runs once the
// cycle that found it is over), it sets GOGC so that the live heap times
// (1 + GOGC/100) reaches goal, never below GCPercent.
type floor struct {
	goal    uint64
	stopped atomic.Bool
	mu      sync.Mutex // serialises adjust with stop
	percent int
	sample  []metrics.Sample
}

type sentinel struct{ _ [16]byte }

func startFloor(goal uint64) *floor {
	f := &floor{goal: goal, percent: GCPercent, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	f.adjust()
	f.arm()
	return f
}

func (f *floor) goalBytes() uint64 {
	if f == nil {
		return 0
	}
	return f.goal
}

func (f *floor) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		if f.stopped.Load() {
			return
		}
		f.adjust()
		f.arm()
	})
}

// adjust sets GOGC for the live heap the last cycle found.
func (f *floor) adjust() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped.Load() {
		return
	}
	metrics.Read(f.sample)
	if f.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	live := f.sample[0].Value.Uint64()
	want := PercentFor(live, f.goal)
	// Only a change of a tenth or more: SetGCPercent recomputes the
	// collector's pacing.
	if diff := want - f.percent; diff*10 > f.percent || -diff*10 > f.percent {
		f.percent = want
		debug.SetGCPercent(want)
	}
}

// PercentFor is the GOGC that starts a cycle when a heap of live bytes
// has grown to goal, never below GCPercent. The runtime's own minimum goal
// (4 MiB at GOGC=100, scaled by GOGC) bounds it for a live heap under
// 4 MiB, so that the goal is goal then too.
func PercentFor(live, goal uint64) int {
	if live >= goal {
		return GCPercent
	}
	p := goal * 100 / runtimeHeapMinimum
	if live > 0 {
		p = min(p, (goal-live)*100/live)
	}
	return int(max(p, GCPercent))
}

func (f *floor) stop() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.stopped.Store(true)
	f.mu.Unlock()
}

// cgroupMemoryLimit reads the container's memory limit (cgroup v2, then v1).
func cgroupMemoryLimit() (int64, bool) {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false // v1 reports "unlimited" as a huge number
		}
		return n, true
	}
	return 0, false
}
