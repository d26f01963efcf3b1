// Package gcpolicy sets the garbage collector of a serving process.
//
// Imports: no internal package.
package gcpolicy

import (
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The router's live heap is small (a fleet snapshot, the load store, the
// in-flight requests) while it allocates steadily per request, so with Go's
// default GOGC=100 the collector runs many times a second, and requests
// that meet a cycle wait for it: on two cores, that is most of the router's
// p99 added latency (see the router's BenchmarkOverhead). The router therefore collects
// less often, and bounds memory by a soft limit instead.
const (
	// GCPercent is the router's GOGC when the environment sets none.
	GCPercent = 400
	// memoryLimitShare of the container's memory limit becomes the soft
	// memory limit when GOMEMLIMIT is not set, so the collector runs as
	// often as it must near the limit.
	memoryLimitShare = 0.8
)

// Apply sets the router process's collector: GOGC=GCPercent unless GOGC is
// set, and a soft memory limit of 80% of the cgroup's memory limit unless
// GOMEMLIMIT is set; env reads the environment (os.LookupEnv). It returns
// a function that restores the previous settings.
func Apply(env func(name string) (string, bool), logger *slog.Logger) (restore func()) {
	prevPercent, prevLimit := -2, int64(-1)
	gogc, set := env("GOGC")
	if !set {
		prevPercent = debug.SetGCPercent(GCPercent)
		gogc = strconv.Itoa(GCPercent)
	}
	if _, set := env("GOMEMLIMIT"); !set {
		if limit, ok := cgroupMemoryLimit(); ok {
			prevLimit = debug.SetMemoryLimit(int64(float64(limit) * memoryLimitShare))
		}
	}
	if logger != nil {
		// SetMemoryLimit with a negative value only reads the limit.
		logger.Debug("garbage collector", "gogc", gogc, "memory_limit_bytes", debug.SetMemoryLimit(-1))
	}
	return func() {
		if prevPercent != -2 {
			debug.SetGCPercent(prevPercent)
		}
		if prevLimit >= 0 {
			debug.SetMemoryLimit(prevLimit)
		}
	}
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
