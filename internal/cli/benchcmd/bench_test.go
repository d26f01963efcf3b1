package benchcmd_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/benchcmd"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/workload"
)

// TestBenchSynthetic runs a small comparison end to end.
func TestBenchSynthetic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two routers over simulated fleets")
	}
	ios, _, out, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := cli.Run(ctx, f, []string{"bench", "--workload", "synthetic", "--requests", "24", "--tenants", "4", "--speed", "50", "--max-output", "4", "-o", "json"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{`"mode": "round-robin"`, `"mode": "load"`, `"prefix_hit_rate"`, `"errors": 0`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %s:\n%s", want, out)
		}
	}
}

// BenchmarkRoutingMooncake replays the first 300 requests of the Mooncake
// conversation trace (8x denser than recorded) over a simulated fleet with
// each routing mode and reports TTFT and the prefix-cache hit rate.
func BenchmarkRoutingMooncake(b *testing.B) {
	trace := filepath.Join(testutil.RepoRoot(b), "..", "shared", "data", "mooncake", "conversation_trace.jsonl")
	if _, err := os.Stat(trace); err != nil {
		b.Skipf("no Mooncake trace at %s", trace)
	}
	for b.Loop() {
		ios, _, out, errOut := iostreams.Test()
		o := &benchcmd.Options{IO: ios, Env: os.LookupEnv, Workload: trace, Requests: 300, TimeScale: 8, MaxOutput: 64,
			Modes: []string{"round-robin", "load"}, Prefill: 2, Decode: 4, Speed: 10, Output: "json"}
		if err := benchcmd.Run(context.Background(), o); err != nil {
			b.Fatalf("%v %s", err, errOut)
		}
		var rep struct {
			Results []workload.Report `json:"results"`
		}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			b.Fatal(err)
		}
		for _, r := range rep.Results {
			name := strings.ReplaceAll(r.Mode, "-", "")
			b.ReportMetric(r.TTFTp50, name+"-ttft-p50-ms")
			b.ReportMetric(r.TTFTp99, name+"-ttft-p99-ms")
			b.ReportMetric(100*r.HitRate, name+"-hit-%")
		}
	}
}

// TestBenchFaultFlags: --faults and --soak refuse what they cannot run
// before starting anything.
func TestBenchFaultFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown scenario", []string{"--faults", "--scenarios", "decode-killed,meteor"}, `scenario "meteor" is not one of decode-killed`},
		{"no rate", []string{"--faults", "--rate", "0"}, "--rate must be above 0"},
		{"soak and faults", []string{"--faults", "--soak", "1m"}, "--soak and --faults are separate runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ios, _, _, errOut := iostreams.Test()
			f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
			code := cli.Run(t.Context(), f, append([]string{"bench"}, tc.args...))
			if code == 0 || !strings.Contains(errOut.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q, want an error saying %q", code, errOut, tc.want)
			}
		})
	}
}
