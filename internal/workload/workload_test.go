package workload_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/workload"
)

func TestLoadMooncakeLines(t *testing.T) {
	f := filepath.Join(t.TempDir(), "trace.jsonl")
	data := `{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}
{"timestamp": 3000, "input_length": 900, "output_length": 3, "hash_ids": [0, 46]}

{"timestamp": 3001, "input_length": 1, "output_length": 1, "hash_ids": []}
`
	if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.Load(f, 2)
	if err != nil || len(reqs) != 2 || reqs[1].Timestamp != 3000 || len(reqs[0].HashIDs) != 3 {
		t.Fatalf("%+v %v", reqs, err)
	}
	if reqs[0].Seq != 0 || reqs[1].Seq != 1 {
		t.Fatalf("seq %d %d", reqs[0].Seq, reqs[1].Seq)
	}
	if err := os.WriteFile(f, []byte("{nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := workload.Load(f, 0); err == nil {
		t.Fatal("a bad line loaded")
	}
	// The shared Mooncake trace parses whole.
	real := filepath.Join(testutil.RepoRoot(t), "..", "shared", "data", "mooncake", "synthetic_trace.jsonl")
	if _, err := os.Stat(real); err == nil {
		reqs, err := workload.Load(real, 0)
		if err != nil || len(reqs) != 3993 {
			t.Fatalf("%d requests, %v", len(reqs), err)
		}
	}
}

// TestText: a request's prompt is its blocks' texts, cut to leave room for
// a suffix naming the request, InputLength printable bytes in all; equal
// block ids give equal text everywhere, different ones differ.
func TestText(t *testing.T) {
	a := workload.Request{InputLength: 900, HashIDs: []uint64{0, 46}, Seq: 1}
	b := workload.Request{InputLength: 1500, HashIDs: []uint64{0, 46, 47}, Seq: 2}
	ta, tb := workload.Text(a), workload.Text(b)
	if len(ta) != 900 || len(tb) != 1500 {
		t.Fatalf("lengths %d %d", len(ta), len(tb))
	}
	if again := workload.Text(a); again != ta {
		t.Fatal("texts are not deterministic")
	}
	if common := commonPrefix(ta, tb); common < 900-len(" [request 1]") || common >= 900 {
		t.Fatalf("common prefix %d bytes", common)
	}
	if !strings.HasPrefix(ta, workload.BlockText(0)+workload.BlockText(46)[:900-512-len(" [request 1]")]) || !strings.HasSuffix(ta, " [request 1]") {
		t.Fatalf("text %q", ta)
	}
	if workload.BlockText(1) == workload.BlockText(2) || len(workload.BlockText(7)) != workload.TraceBlockTokens {
		t.Fatal("block texts")
	}
	for _, c := range ta + tb {
		if c < ' ' || c > '~' || c == '<' || c == '|' || c == '>' {
			t.Fatalf("character %q", c)
		}
	}
	// Blocks shorter than the input: the suffix fills it.
	if got := workload.Text(workload.Request{InputLength: 40, Seq: 3}); len(got) != 40 || !strings.HasPrefix(got, " [request 3]") {
		t.Fatalf("padded %q", got)
	}
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestTenants: tenants share their prefix blocks; each request has a query
// block of its own; arrivals average the rate.
func TestTenants(t *testing.T) {
	reqs := workload.Tenants(workload.TenantOptions{Tenants: 4, Requests: 2000, PrefixBlocks: 3, QueryTokens: 100, OutputTokens: 8, Rate: 50, Seed: 1})
	byPrefix := map[uint64]int{}
	queries := map[uint64]bool{}
	for i, r := range reqs {
		if len(r.HashIDs) != 4 || r.InputLength != 3*512+100 || r.Seq != i || r.OutputLength != 8 {
			t.Fatalf("request %d: %+v", i, r)
		}
		byPrefix[r.HashIDs[0]]++
		if queries[r.HashIDs[3]] {
			t.Fatalf("query block %d repeats", r.HashIDs[3])
		}
		queries[r.HashIDs[3]] = true
		if i > 0 && r.Timestamp < reqs[i-1].Timestamp {
			t.Fatal("arrivals go back in time")
		}
	}
	if len(byPrefix) != 4 {
		t.Fatalf("prefixes %v", byPrefix)
	}
	if span := reqs[len(reqs)-1].Timestamp; span < 36_000 || span > 44_000 {
		t.Fatalf("2000 arrivals at 50/s over %d ms", span)
	}
}

func TestSynthetic(t *testing.T) {
	reqs := workload.Synthetic(4, 8, 3, 0)
	if len(reqs) != 8 || reqs[0].HashIDs[0] != reqs[4].HashIDs[0] || reqs[0].HashIDs[3] == reqs[4].HashIDs[3] || reqs[0].InputLength != 4*512 {
		t.Fatalf("%+v", reqs)
	}
}
