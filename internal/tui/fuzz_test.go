package tui_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/tui"
)

// FuzzSnapshot feeds the model whatever a router might answer: the three
// admin documents (one input, split on NUL) and a metrics text. Nothing may
// panic, in any view, at any size.
func FuzzSnapshot(f *testing.F) {
	good := fixture(t0, 1)
	w, _ := json.Marshal(good.Workers)
	l, _ := json.Marshal(good.Load)
	p, _ := json.Marshal(good.Problems)
	f.Add([]byte(string(w) + "\x00" + string(l) + "\x00" + string(p) + "\x00" +
		"# TYPE continuum_dynamo_selection_total counter\ncontinuum_dynamo_selection_total{reason=\"load\",role=\"decode\"} 3\n"))
	f.Add([]byte(`{"workers":[{"instance_id":"1","dp_start_rank":4294967295,"dp_size":3,"capacity":{"total_kv_blocks":0}}]}` + "\x00" +
		`{"samples":[{"worker_id":"","dp_rank":4294967295,"active_decode_blocks":18446744073709551615,"age_ms":-5,"state":"stale"}]}` + "\x00{}\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		done := make(chan struct{})
		go func() { defer close(done); fuzzSnapshot(t, in) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			panic(fmt.Sprintf("hang on %q", in))
		}
	})
}

func fuzzSnapshot(t *testing.T, in []byte) {
	{
		parts := splitNUL(string(in), 4)
		var s tui.Snapshot
		_ = json.Unmarshal([]byte(parts[0]), &s.Workers)
		_ = json.Unmarshal([]byte(parts[1]), &s.Load)
		_ = json.Unmarshal([]byte(parts[2]), &s.Problems)
		s.Metrics, _ = tui.ParseMetrics([]byte(parts[3]))
		if len(s.Workers.Workers) > 64 {
			s.Workers.Workers = s.Workers.Workers[:64]
		}
		for i := range s.Workers.Workers {
			s.Workers.Workers[i].DPSize %= 8 // rows are bounded by the router's dp cap
		}
		s.At = t0
		for _, size := range [][2]int{{80, 24}, {160, 48}, {20, 5}} {
			m := update(newModel(t, size[0], size[1], nil), tui.SnapshotMsg(&s), tui.SnapshotMsg(&s))
			for _, k := range []string{"", "tab", "tab", "tab", "tab", "enter", "s", "s", "s"} {
				if k != "" {
					m = keys(m, k)
				}
				_ = m.Render()
			}
			// The table goes to a terminal as it is: every line of it
			// printable (fleet strings come from the network).
			var out bytes.Buffer
			_ = m.WriteTable(&out)
			for line := range strings.Lines(out.String()) {
				line = strings.TrimSuffix(line, "\n")
				if iostreams.Printable(line) != line {
					t.Fatalf("the table writes %q", line)
				}
			}
		}
	}
}

func splitNUL(s string, n int) []string {
	out := make([]string, 0, n)
	for len(out) < n-1 {
		i := 0
		for i < len(s) && s[i] != 0 {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			s = s[i+1:]
		} else {
			s = ""
		}
	}
	return append(out, s)
}
