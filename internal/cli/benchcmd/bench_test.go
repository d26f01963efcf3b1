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

// TestBenchSynthetic runs a small comparison of the four modes end to end:
// every request answered, and the workers' cache hits reported.
func TestBenchSynthetic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four routers over simulated fleets")
	}
	ios, _, out, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := cli.Run(ctx, f, []string{"bench", "--workload", "synthetic", "--requests", "24", "--tenants", "3", "--prefix-blocks", "2",
		"--query-tokens", "64", "--rate", "100", "--prefill", "2", "--decode", "1", "--speed", "50", "--max-output", "4", "-o", "json"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		Requests int               `json:"requests"`
		Results  []workload.Report `json:"results"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	var modes []string
	for _, r := range rep.Results {
		modes = append(modes, r.Mode)
		if r.Requests != 24 || r.Errors != 0 || r.PromptTokens < 24*1024 || r.HitRate <= 0 || r.TTFTp50 <= 0 || r.WorkerTTFTp50 <= 0 {
			t.Errorf("%s: %+v", r.Mode, r)
		}
	}
	if strings.Join(modes, ",") != "round-robin,load,kv,oracle" {
		t.Errorf("modes %v", modes)
	}
	// The table names every mode too.
	ios, _, out, errOut = iostreams.Test()
	f = &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
	if code := cli.Run(ctx, f, []string{"bench", "--requests", "4", "--tenants", "2", "--prefix-blocks", "1", "--query-tokens", "16",
		"--rate", "100", "--prefill", "1", "--decode", "1", "--speed", "50", "--max-output", "2", "--modes", "kv,oracle"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"TIME TO FIRST TOKEN", "WORKER TTFT", "HIT RATE", "\nkv ", "\noracle "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// BenchmarkRoutingMooncake replays the first 300 requests of the Mooncake
// conversation trace (8x denser than recorded) over a simulated fleet
// (2M tokens of cache a prefill worker) with each routing mode and reports
// TTFT and the prefix-cache hit rate.
func BenchmarkRoutingMooncake(b *testing.B) {
	trace := filepath.Join(testutil.RepoRoot(b), "..", "shared", "data", "mooncake", "conversation_trace.jsonl")
	if _, err := os.Stat(trace); err != nil {
		b.Skipf("no Mooncake trace at %s", trace)
	}
	for b.Loop() {
		ios, _, out, errOut := iostreams.Test()
		o := &benchcmd.Options{IO: ios, Env: os.LookupEnv, Workload: trace, Requests: 300, TimeScale: 8, MaxOutput: 64,
			Modes: benchcmd.Modes, Prefill: 4, Decode: 2, Speed: 10, KVBlocks: 131072, Tenants: 1, Output: "json"}
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
