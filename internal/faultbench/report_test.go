package faultbench

import (
	"strings"
	"testing"
)

// TestWriteTable: a row per scenario, "-" for figures a scenario has not,
// NO for a scenario that missed a target, and the failures by cause under
// the table.
func TestWriteTable(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	err := WriteTable(&b, Options{}, []Result{
		{Scenario: "decode-killed", Sent: 100, DroppedMS: 7400, ExcludedMS: 26, RecoveredMS: 31, Recovered: true, BaselineP99: 90, FaultP99: 110, OK: true},
		{Scenario: "frontend-killed", Sent: 90, Failed: 3, InFlightOnKilled: 1, Unexpected: 2, DroppedMS: -1, ExcludedMS: -1, RecoveredMS: 12000,
			Causes: map[string]int{"502 upstream_error": 2, "stream cut": 1}},
		{Scenario: "etcd-restarted", DroppedMS: -1, ExcludedMS: -1, OutageMS: 7000, Recovered: true, OK: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	rows := map[string]string{} // scenario → its row's fields, single-spaced
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && rows[f[0]] == "" {
			rows[f[0]] = strings.Join(f, " ") // the row comes before its failures
		}
	}
	for scenario, want := range map[string]string{
		"decode-killed":   "decode-killed 100 0 0 0 0 0 7400 ms 26 ms 31 ms 90 ms 110 ms yes",
		"frontend-killed": "frontend-killed 90 3 1 2 0 0 - - no (12000 ms) 0 ms 0 ms NO",
	} {
		if rows[scenario] != want {
			t.Errorf("row %q, want %q:\n%s", rows[scenario], want, out)
		}
	}
	for _, want := range []string{
		"lease TTL 10s",
		"frontend-killed failures: 2 502 upstream_error, 1 stream cut",
		"etcd-restarted: etcd was down 7000 ms",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}

func TestP99(t *testing.T) {
	t.Parallel()
	v := make([]float64, 200)
	for i := range v {
		v[i] = float64(200 - i)
	}
	if got := p99(v); got != 199 {
		t.Errorf("p99 of 1..200 = %v, want 199", got)
	}
	if got := p99(nil); got != 0 {
		t.Errorf("p99 of nothing = %v", got)
	}
}
