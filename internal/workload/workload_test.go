package workload_test

import (
	"os"
	"path/filepath"
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
	if got := workload.Prompt(reqs[1]); got != "<len:900> <b:0> <b:46>" {
		t.Fatalf("prompt %q", got)
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

func TestSynthetic(t *testing.T) {
	reqs := workload.Synthetic(4, 8, 3, 0)
	if len(reqs) != 8 || reqs[0].HashIDs[0] != reqs[4].HashIDs[0] || reqs[0].HashIDs[3] == reqs[4].HashIDs[3] || reqs[0].InputLength != 4*512 {
		t.Fatalf("%+v", reqs)
	}
}
