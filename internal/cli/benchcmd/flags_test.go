package benchcmd_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// noBinary is started only if validation let a bad flag through.
const noBinary = "/nonexistent/continuum"

// TestBenchLoadRateRefused: a --rate the steady load cannot tick at
// (time.NewTicker(0) or of a negative period: a panic in the load's
// goroutine, after fleet-sim and serve were started, which then outlive
// the bench with its temporary directory) is a usage error, exit 2,
// before anything starts: for --soak as for --faults.
func TestBenchLoadRateRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--soak", "1m", "--rate", "2e9"}, // period 0
		{"--soak", "1m", "--rate", "-5"},  // was read as 20
		{"--faults", "--rate", "1e-10"},   // period overflows to negative
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			code, _, errOut := runBench(ctx, append(args, "--binary", noBinary)...)
			if code != 2 || !strings.Contains(errOut, "--rate") {
				t.Fatalf("exit %d, stderr %q; want exit 2 naming --rate", code, errOut)
			}
		})
	}
}

// TestBenchFaultFlagsRefused: a --faults flag out of its range is a usage
// error (exit 2, naming it) before anything starts, not silently replaced
// by faultbench's default (withDefaults) while the JSON report echoes the
// value given, nor a fleet-sim refusal after the bench started it (exit 1).
func TestBenchFaultFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--faults", "--prefill", "-1"}, "--prefill"},
		{[]string{"--faults", "--decode", "0"}, "--decode"},
		{[]string{"--faults", "--speed", "-2"}, "--speed"},
		{[]string{"--faults", "--max-tokens", "0"}, "--max-tokens"},
		{[]string{"--faults", "--baseline", "0s"}, "--baseline"},
		{[]string{"--faults", "--lease-ttl", "1500ms"}, "--lease-ttl"}, // "whole seconds", says its help
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			code, _, errOut := runBench(ctx, append(tc.args, "--binary", noBinary)...)
			if code != 2 || !strings.Contains(errOut, tc.flag) {
				t.Fatalf("exit %d, stderr %q; want exit 2 naming %s", code, errOut, tc.flag)
			}
		})
	}
}
