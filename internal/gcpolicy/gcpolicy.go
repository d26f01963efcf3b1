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
	// environment sets no GOGC. A router alone allocates a few KiB per
	// request (about 3 KiB for a buffered completion): at 2,000 requests a
	// second a cycle every five seconds or so, over a heap that stays
	// warm. (256 MiB, one cycle every twenty seconds, cost the serving
	// process 4-32 % more CPU per request and a higher p99 behind a real
	// socket than 32 MiB or no floor.)
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
	// An empty variable sets nothing: the runtime reads an empty GOGC as
	// 100 and an empty GOMEMLIMIT as no limit, as it reads them unset.
	setIn := func(name string) (string, bool) {
		v, ok := env(name)
		return v, ok && v != ""
	}
	if _, set := setIn("GOMEMLIMIT"); !set {
		if limit, ok := cgroupMemoryLimit(); ok {
			prevLimit = debug.SetMemoryLimit(int64(float64(limit) * memoryLimitShare))
		}
	}
	// SetMemoryLimit with a negative value only reads the limit.
	limit := debug.SetMemoryLimit(-1)
	gogc, set := setIn("GOGC")
	var f *floor
	if !set {
		prevPercent = debug.SetGCPercent(GCPercent)
		gogc = strconv.Itoa(GCPercent)
		goal := floorFor(limit)
		warmHeap(goal)
		f = startFloor(goal)
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
// the heap in use up to goal (free pages the heap holds already are taken
// first), with the collector off meanwhile, then collects it, so that its
// pages are free heap memory, there to be reused. Without it the heap
// grows into its goal a span at a time, and each new page of it is a page
// fault taken while serving a request: about one every second request at
// 500 requests a second, for minutes. A first touch of memory costs
// several microseconds under a hypervisor (4-15 us measured on the
// virtual machines the benchmarks run on, against well under one on bare
// metal), more than a request's own work. Run before the floor takes
// over, so that the one collection here is the only one.
//
// The pages stay while the router is busy: the collector's scavenger
// keeps the heap a tenth above what the last cycle found in use (scaled
// to the new goal), and a cycle that starts at the floor finds about the
// floor in use. A cycle that finds much less (the forced one every two
// minutes of an idle router) lets the scavenger give the rest back, and
// the heap grows into its floor again with the traffic that follows.
func warmHeap(goal uint64) {
	inUse := heapBytes(heapObjects, heapUnused)
	if inUse >= goal {
		return
	}
	prev := debug.SetGCPercent(-1)
	page := os.Getpagesize()
	b := make([]byte, goal-inUse)
	for i := 0; i < len(b); i += page {
		b[i] = 1
	}
	runtime.KeepAlive(b) // b is garbage from here on
	debug.SetGCPercent(prev)
	runtime.GC()
}

// floorFor is the heap floor under a memory limit (as
// debug.SetMemoryLimit reports it): MinHeapGoal, or floorShare of a limit
// that makes that less.
func floorFor(limit int64) uint64 {
	goal := uint64(MinHeapGoal)
	if limit > 0 && limit < 1<<62 {
		goal = min(goal, uint64(float64(limit)*floorShare))
	}
	return goal
}

// The runtime's heap memory classes: bytes of live and dead objects, of
// spans' unused space, and of free pages not released to the system.
const (
	heapObjects = "/memory/classes/heap/objects:bytes"
	heapUnused  = "/memory/classes/heap/unused:bytes"
	heapFree    = "/memory/classes/heap/free:bytes"
)

// heapBytes is the sum of the named memory classes.
func heapBytes(names ...string) uint64 {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	var sum uint64
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			sum += v.Value.Uint64()
		}
	}
	return sum
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
