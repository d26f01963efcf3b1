package gcpolicy

import (
	"runtime/debug"
	"testing"
)

func TestApply(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	limit := debug.SetMemoryLimit(-1)

	restore := Apply(func(k string) (string, bool) { return "", false }, nil)
	if got := debug.SetGCPercent(GCPercent); got != GCPercent {
		t.Fatalf("GOGC %d, want %d", got, GCPercent)
	}
	if l, ok := cgroupMemoryLimit(); ok {
		if got := debug.SetMemoryLimit(-1); got != int64(float64(l)*memoryLimitShare) {
			t.Errorf("memory limit %d with a cgroup limit of %d", got, l)
		}
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("restored GOGC %d, want 100", got)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Fatalf("restored memory limit %d, want %d", got, limit)
	}

	// Set in the environment: left alone.
	restore = Apply(func(k string) (string, bool) { return "50", true }, nil)
	defer restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC changed to %d although the environment sets it", got)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Fatalf("memory limit changed although GOMEMLIMIT is set")
	}
}
