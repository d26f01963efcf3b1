package kv

import (
	"runtime"
	"testing"
)

// TestRenderPermitsPerUsableCore: render permits are one per core the
// router may use (GOMAXPROCS, which follows a container's CPU limit), from
// 4 to 32, not one per CPU of the node. GOMAXPROCS is set here to a count
// other than the machine's CPUs. Not parallel: it changes GOMAXPROCS.
func TestRenderPermitsPerUsableCore(t *testing.T) {
	usable := 16
	if runtime.NumCPU() >= 6 {
		usable = 5
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(usable))
	if got, want := cap(NewPrompts(nil).permits), min(max(usable, MinRenderPermits), MaxRenderPermits); got != want {
		t.Errorf("%d render permits with %d usable cores of %d, want %d", got, usable, runtime.NumCPU(), want)
	}
}
