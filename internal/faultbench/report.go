package faultbench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteTable writes the results as a table, one scenario a row, with the
// failures by cause under it.
func WriteTable(w io.Writer, o Options, results []Result) error {
	o = o.WithDefaults()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "fleet %d prefill + %d decode (etcd, lease TTL %v, 2 frontend replicas) at speed %g; %g req/s, half streamed, max_tokens %d; baseline %v, hold %v\n\n",
		o.Prefill, o.Decode, o.LeaseTTL, o.Speed, o.Rate, o.MaxTokens, o.Baseline, o.Hold)
	fmt.Fprintln(tw, "SCENARIO\tSENT\tFAILED\tIN FLIGHT ON KILLED\tUNEXPECTED\tRE-PINNED\tPINNED AFTER TTL\tDROPPED\tEXCLUDED\tWHOLE AGAIN\tP99 BASE\tP99 FAULT\tOK")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.0f\t%d\t%s\t%s\t%s\t%.0f ms\t%.0f ms\t%s\n", r.Scenario, r.Sent, r.Failed, r.InFlightOnKilled, r.Unexpected,
			r.Repins, r.PinnedAfterExpiry, msOrDash(r.DroppedMS), msOrDash(r.ExcludedMS), recovered(r), r.BaselineP99, r.FaultP99, yes(r.OK))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.OutageMS > 0 {
			fmt.Fprintf(w, "%s: etcd was down %.0f ms; WHOLE AGAIN counts from its return\n", r.Scenario, r.OutageMS)
		}
		if len(r.Causes) == 0 && r.NotSent == 0 {
			continue
		}
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(r.Causes)) {
			parts = append(parts, fmt.Sprintf("%d %s", r.Causes[c], c))
		}
		if r.NotSent > 0 {
			parts = append(parts, fmt.Sprintf("%d not sent (%d requests already open)", r.NotSent, maxInFlight))
		}
		fmt.Fprintf(w, "%s failures: %s\n", r.Scenario, strings.Join(parts, ", "))
	}
	return nil
}

func msOrDash(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f ms", v)
}

func recovered(r Result) string {
	if !r.Recovered {
		return fmt.Sprintf("no (%.0f ms)", r.RecoveredMS)
	}
	return fmt.Sprintf("%.0f ms", r.RecoveredMS)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}
