package fleet_test

import (
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// FuzzReducerRecords: whatever key and value the fleet writes under the
// watched prefixes, beside a well-formed worker of another namespace, the
// reducer builds a snapshot (no panic): a record it cannot use is a
// problem of its own and the well-formed worker stays.
func FuzzReducerRecords(f *testing.F) {
	f.Add("v1/instances/dynamo/\u023aprefill/generate/1", `{"type":"Endpoint","component":"\u023aprefill","endpoint":"generate","instance_id":1}`)
	f.Add("v1/mdc/dynamo/VllmPrefillWorker/generate/1", `{"type":"Model","component":"VllmPrefillWorker","endpoint":"generate","instance_id":1,"card_json":{"display_name":"m","worker_type":"Prefill"}}`)
	f.Add("v1/event_channels/namespace/dynamo/topic/kv_metrics/7", `{"transport":{"zmq":{"endpoint":"tcp://10.0.0.1:5557"}}}`)
	f.Add("v1/instances/dynamo/x/generate/zz", `{bad`)
	f.Fuzz(func(t *testing.T, key, value string) {
		r := fleet.NewReducer()
		const good = "v1/instances/ok/backend/generate/a"
		r.Put(good, []byte(`{"type":"Endpoint","component":"backend","endpoint":"generate","instance_id":10}`), t0)
		if strings.Contains(key, "/ok/") {
			return // a claimant of the same identity or a conflicting card may reject it, as it should
		}
		r.Put(key, []byte(value), t0)
		snap := r.Build(t0)
		found := false
		for w := range snap.Workers.All() {
			if w.ID.Namespace == "ok" && w.ID.InstanceID == 10 {
				found = true
			}
		}
		if !found {
			t.Fatalf("the well-formed worker is gone after %q = %q: problems %+v", key, value, snap.Problems)
		}
	})
}
