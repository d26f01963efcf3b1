package fleet_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// TestDuplicateAcrossIDSpellings: a numeric and a hex-string instance_id are one identity, so
// two generate records claiming it (one per spelling) are a duplicate.
func TestDuplicateAcrossIDSpellings(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	r.Put("v1/instances/dynamo/decode/generate/ff", []byte(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":255}`), t0)
	r.Put("v1/instances/dynamo/decode/generate/other", []byte(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":"ff"}`), t0)
	snap := r.Build(t0)
	if snap.Workers.Len() != 0 {
		t.Errorf("workers %+v: both claimants must be rejected", workers(snap))
	}
	if len(snap.Problems) != 1 || snap.Problems[0].Kind != fleet.ProblemDuplicate || snap.Problems[0].KeyCount != 2 {
		t.Errorf("problems %+v", snap.Problems)
	}
}

// TestDuplicateLogFields: a conflict is counted once, and logged once at warn with
// the record kind, the identity, the count and at most 4 keys.
func TestDuplicateLogFields(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var observed []string
	reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(&logs, nil)), func(p fleet.Problem) { observed = append(observed, p.Kind) })
	r := fleet.NewReducer()
	for i := 0; i < 5; i++ {
		r.Put(fmt.Sprintf("v1/instances/dynamo/decode/generate/%x", 0x100+i), endpoint(7), t0)
	}
	reg.Publish(r.Build(t0))
	r.Put(key(8), endpoint(8), t0)
	reg.Publish(r.Build(t0))
	if len(observed) != 1 || observed[0] != fleet.ProblemDuplicate {
		t.Fatalf("observed %v", observed)
	}
	out := logs.String()
	if strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "count=5") || !strings.Contains(out, "generate endpoint") || !strings.Contains(out, "instance 7") {
		t.Errorf("log:\n%s", out)
	}
	if n := strings.Count(out, "v1/instances/dynamo/decode/generate/"); n != 4 {
		t.Errorf("%d keys logged, want 4:\n%s", n, out)
	}
}

// TestSizeBoundsInclusive: a card over MAX_RETAINED_CARD_BYTES loses its opaque JSON;
// one of exactly that size keeps it. A record over
// MAX_RECORD_BYTES is refused; one of exactly that size is not.
func TestSizeBoundsInclusive(t *testing.T) {
	t.Parallel()
	cardOf := func(n int) string {
		head := `{"display_name":"m","worker_type":"Decode","padding":"`
		tail := `"}`
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	for _, c := range []struct {
		size int
		kept bool
	}{{fleet.MaxRetainedCardBytes, true}, {fleet.MaxRetainedCardBytes + 1, false}} {
		r := fleet.NewReducer()
		r.Put(key(2), endpoint(2), t0)
		r.Put("v1/mdc/dynamo/decode/generate/2", []byte(`{"type":"Model","component":"decode","endpoint":"generate","instance_id":2,"card_json":`+cardOf(c.size)+`}`), t0)
		snap := r.Build(t0)
		ws := workers(snap)
		if len(ws) != 1 || ws[0].Card == nil || (ws[0].Card.Raw != nil) != c.kept || ws[0].Model != "m" {
			t.Errorf("card of %d bytes: kept=%v want %v", c.size, len(ws) == 1 && ws[0].Card != nil && ws[0].Card.Raw != nil, c.kept)
		}
	}
	r := fleet.NewReducer()
	v := endpoint(3)
	v = append(v, bytes.Repeat([]byte(" "), fleet.MaxRecordBytes-len(v))...)
	r.Put(key(3), v, t0)
	if snap := r.Build(t0); snap.Workers.Len() != 1 || len(snap.Problems) != 0 {
		t.Errorf("record of exactly %d bytes: %d workers, problems %+v", fleet.MaxRecordBytes, snap.Workers.Len(), snap.Problems)
	}
}

// TestKeyspaceCapIsPerKeyspace: the key cap is per keyspace: instances at the cap do not
// stop model cards; held keys still update; new keys are refused, with one
// over_capacity problem for the keyspace.
func TestKeyspaceCapIsPerKeyspace(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	for i := 1; i <= fleet.MaxRecordsPerKeyspace; i++ {
		r.Put(key(i), endpoint(i), t0)
	}
	r.Put(key(fleet.MaxRecordsPerKeyspace+1), endpoint(fleet.MaxRecordsPerKeyspace+1), t0)
	r.Put(key(fleet.MaxRecordsPerKeyspace+2), endpoint(fleet.MaxRecordsPerKeyspace+2), t0)
	r.Put("v1/mdc/dynamo/decode/generate/1", []byte(`{"type":"Model","component":"decode","endpoint":"generate","instance_id":1,"card_json":{"display_name":"m","worker_type":"Decode"}}`), t0)
	// A heartbeat of a held key: a new value is applied.
	r.Put(key(2), []byte(`{"type":"Endpoint","component":"prefill","endpoint":"generate","instance_id":2}`), t0)
	snap := r.Build(t0)
	if snap.Workers.Len() != fleet.MaxRecordsPerKeyspace {
		t.Errorf("%d workers", snap.Workers.Len())
	}
	if w := snap.Workers.Get(fleet.WorkerID{Namespace: "dynamo", InstanceID: 1}); w == nil || w.Model != "m" {
		t.Errorf("model card refused though its keyspace is not full: %+v", w)
	}
	if w := snap.Workers.Get(fleet.WorkerID{Namespace: "dynamo", InstanceID: 2}); w == nil || w.Role != fleet.RolePrefill {
		t.Errorf("held key not updated at the cap: %+v", w)
	}
	n := 0
	for _, p := range snap.Problems {
		if p.Kind == fleet.ProblemOverCapacity {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d over_capacity problems, want 1: %+v", n, snap.Problems)
	}
}

// TestRoleConflictComesAndGoes: a worker without a card follows its component; a card
// claiming another role then excludes it; the card's removal restores it.
func TestRoleConflictComesAndGoes(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	r.Put("v1/instances/dynamo/prefill/generate/5", []byte(`{"type":"Endpoint","component":"prefill","endpoint":"generate","instance_id":5}`), t0)
	if w := workers(r.Build(t0)); len(w) != 1 || w[0].Role != fleet.RolePrefill {
		t.Fatalf("no card: %+v", w)
	}
	r.Put("v1/mdc/dynamo/prefill/generate/5", []byte(`{"type":"Model","component":"prefill","endpoint":"generate","instance_id":5,"card_json":{"display_name":"m","worker_type":"Decode"}}`), t0)
	snap := r.Build(t0)
	if snap.Workers.Len() != 0 || len(snap.Problems) != 1 || snap.Problems[0].Kind != fleet.ProblemRoleConflict ||
		!strings.Contains(snap.Problems[0].Reason, "prefill") || !strings.Contains(snap.Problems[0].Reason, "decode") {
		t.Fatalf("conflict: workers %+v problems %+v", workers(snap), snap.Problems)
	}
	r.Delete("v1/mdc/dynamo/prefill/generate/5")
	if w := workers(r.Build(t0)); len(w) != 1 || w[0].Role != fleet.RolePrefill {
		t.Fatalf("card gone: %+v", w)
	}
}

// TestReleaseKeys: release version strings under any of the four keys are
// logged at debug once per instance.
func TestReleaseKeys(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"dynamo_version", "runtime_version", "version", "release"} {
		var logs bytes.Buffer
		reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
		r := fleet.NewReducer()
		r.Put(key(1), endpoint(1), t0)
		r.Put("v1/mdc/dynamo/decode/generate/1", fmt.Appendf(nil, `{"component":"decode","endpoint":"generate","instance_id":1,"card_json":{"display_name":"m","worker_type":"Decode",%q:"9.9"}}`, k), t0)
		reg.Publish(r.Build(t0))
		if !strings.Contains(logs.String(), "dynamo worker release") || !strings.Contains(logs.String(), "9.9") || !strings.Contains(logs.String(), "level=DEBUG") {
			t.Errorf("%s: %s", k, logs.String())
		}
	}
}

// TestPartialCardFailures: a card whose typed fields fail to deserialise still makes
// a worker, with the raw card kept.
func TestPartialCardFailures(t *testing.T) {
	t.Parallel()
	for _, card := range []string{
		`{"display_name":"m","worker_type":"Decode","runtime_config":"bad"}`,
		`{"display_name":"m","worker_type":"Decode","runtime_config":{"total_kv_blocks":"x","max_num_seqs":-1}}`,
		`{"display_name":"m","worker_type":"Decode","kv_cache_block_size":-1}`,
		`{"display_name":"m","worker_type":"Decode","kv_cache_block_size":1.5}`,
		`{"display_name":"m","worker_type":7}`,
		`{"display_name":"m","worker_type":"Decode","model_type":{"x":1}}`,
		`{"display_name":"m","worker_type":"Decode","runtime_config":{"data_parallel_size":"two"}}`,
		`{"display_name":"m","worker_type":"Decode","runtime_config":{"disaggregated_endpoint":{"bootstrap_host":"h","bootstrap_port":1}}}`,
		`{"display_name":"m","worker_type":"Decode","lora":null,"model_input":5,"needs":"x","extra_files":{}}`,
	} {
		r := fleet.NewReducer()
		r.Put(key(2), endpoint(2), t0)
		r.Put("v1/mdc/dynamo/decode/generate/2", []byte(`{"type":"Model","component":"decode","endpoint":"generate","instance_id":2,"card_json":`+card+`}`), t0)
		snap := r.Build(t0)
		ws := workers(snap)
		if len(ws) != 1 || ws[0].Card == nil || ws[0].Card.Raw == nil || ws[0].Model != "m" || ws[0].Role != fleet.RoleDecode {
			var w any
			if len(ws) == 1 {
				w = *ws[0]
			}
			t.Errorf("card %s: worker %+v problems %+v", card, w, snap.Problems)
		}
	}
}
