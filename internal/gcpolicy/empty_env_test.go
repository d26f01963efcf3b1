package gcpolicy

import (
	"runtime/debug"
	"testing"
)

// TestApplyEmptyGOGC: an empty GOGC (GOGC= in a manifest or a shell) sets
// nothing: the runtime reads it as unset and runs at 100 (runtime
// readGOGC), as it reads an empty GOMEMLIMIT as no limit. README: "Setting
// GOGC or GOMEMLIMIT yourself overrides either" — an empty variable has
// set neither, so the router's policy (GOGC=400 and the floor) applies.
func TestApplyEmptyGOGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	restore := Apply(func(k string) (string, bool) {
		if k == "GOGC" || k == "GOMEMLIMIT" {
			return "", true
		}
		return "", false
	}, nil)
	defer restore()
	if got := gogc(); got < GCPercent {
		t.Fatalf("GOGC %d with GOGC= (empty) in the environment, want the policy's %d or more", got, GCPercent)
	}
}
