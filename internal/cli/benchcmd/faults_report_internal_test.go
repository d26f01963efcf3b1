package benchcmd

import (
	"testing"

	"github.com/continuum-router/continuum/internal/faultbench"
)

// TestFaultsReportStatesTheFleet: `bench --faults -o json` states the
// settings the run used, as the table does: with no --prefill or --decode,
// the fault fleet's 2 prefill and 4 decode workers, not the zero that
// stands for them before the run's defaults.
func TestFaultsReportStatesTheFleet(t *testing.T) {
	t.Parallel()
	o := &Options{Rate: faultbench.DefaultRate, Baseline: faultbench.DefaultBaseline, Hold: faultbench.DefaultHold,
		LeaseTTL: faultbench.DefaultLeaseTTL, MaxTokens: faultbench.DefaultMaxTokens, Prefill: defaultPrefill, Decode: defaultDecode}
	rep := faultsReport(o.faultOptions("continuum"), nil)
	fleet := rep["fleet"].(map[string]any)
	if fleet["prefill"] != 2 || fleet["decode"] != 4 || rep["speed"] != float64(faultbench.DefaultSpeed) {
		t.Fatalf("report %v, want a fleet of 2 prefill and 4 decode workers at speed %v", rep, faultbench.DefaultSpeed)
	}
	o.prefillSet, o.Prefill = true, 3
	if got := faultsReport(o.faultOptions("continuum"), nil)["fleet"].(map[string]any)["prefill"]; got != 3 {
		t.Fatalf("--prefill 3 reported as %v", got)
	}
}
