package fleet_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// TestRegistryResetForgetsNothingReported: a watcher replaced by a reload
// that empties the view (connection, source, namespace, other) reads the
// same records again; a conflict that never left the store is the same
// key set and is not logged or counted again ("the same
// conflicting key set is logged only once"), and a namespace that stayed
// mixed is not warned about again (no repeat while it stays
// mixed).
func TestRegistryResetForgetsNothingReported(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var observed []string
	reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(&logs, nil)), func(p fleet.Problem) { observed = append(observed, p.Kind) })
	view := func() *fleet.Snapshot {
		r := fleet.NewReducer() // each watcher has a reducer of its own
		r.Put(key(1), endpoint(1), t0)
		r.Put("v1/instances/dynamo/decode/generate/ff", endpoint(1), t0)
		r.Put("v1/instances/dynamo/prefill/generate/2", []byte(`{"component":"prefill","endpoint":"generate","instance_id":2}`), t0)
		r.Put("v1/mdc/dynamo/prefill/generate/2", []byte(`{"component":"prefill","endpoint":"generate","instance_id":2,"card_json":{"display_name":"m","worker_type":"Prefill"}}`), t0)
		r.Put("v1/instances/dynamo/backend/generate/3", []byte(`{"component":"backend","endpoint":"generate","instance_id":3}`), t0)
		r.Put("v1/mdc/dynamo/backend/generate/3", []byte(`{"component":"backend","endpoint":"generate","instance_id":3,"card_json":{"display_name":"m","worker_type":"Aggregated"}}`), t0)
		return r.Build(t0)
	}
	reg.Publish(view())
	reg.Reset() // replaceWatcher: the view is emptied until the new watcher's first resync
	reg.Publish(view())
	if len(observed) != 1 {
		t.Errorf("the same duplicate counted %d times across one watcher replacement: %v", len(observed), observed)
	}
	if n := strings.Count(logs.String(), "kind=duplicate"); n != 1 {
		t.Errorf("%d duplicate warnings, want 1", n)
	}
	if n := strings.Count(logs.String(), "serves a model with both"); n != 1 {
		t.Errorf("%d mixed-namespace warnings for a namespace that stayed mixed, want 1", n)
	}
}
