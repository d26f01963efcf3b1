package fleet_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/fleetsim"
)

// view builds the fleet the simulator registers for o and returns its
// workers, publishers and problems as the admin API shows them (times
// left out).
func view(t *testing.T, o fleetsim.Options) (snap *fleet.Snapshot, workers, publishers, problems []any) {
	t.Helper()
	recs, err := fleetsim.Records(o)
	if err != nil {
		t.Fatal(err)
	}
	r := fleet.NewReducer()
	for _, rec := range recs {
		b, err := json.Marshal(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		r.Put(rec.Bucket+"/"+rec.Key, b, t0)
	}
	snap = r.Build(t0)
	w, p, pr := admin.Views(snap)
	return snap, normalise(t, w, true), normalise(t, p, false), normalise(t, pr, false)
}

// TestSimulatorDialects: the records the simulator writes in every card
// dialect make the fleet its default dialect makes: the same workers with
// the same roles, the same publishers, and no problem.
func TestSimulatorDialects(t *testing.T) {
	t.Parallel()
	topology := fleetsim.Options{Namespaces: []string{"prod", "canary"}, Models: []string{"m1", "m2"}, Prefill: 2, Decode: 2, Aggregated: 1, DPSize: 2}
	snap, wantW, wantP, wantPr := view(t, topology)
	roles := map[fleet.Role]int{}
	for w := range snap.Workers.All() {
		roles[w.Role]++
	}
	if want := (map[fleet.Role]int{fleet.RolePrefill: 8, fleet.RoleDecode: 8, fleet.RoleAggregated: 4}); !reflect.DeepEqual(roles, want) || len(wantPr) != 0 {
		t.Fatalf("default dialect: roles %v, want %v; problems %v", roles, want, wantPr)
	}
	for _, dialect := range fleetsim.CardDialects[1:] {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			o := topology
			o.CardDialect = dialect
			got, w, p, pr := view(t, o)
			if !reflect.DeepEqual(w, wantW) {
				t.Errorf("workers:\n got %s\nwant %s", dump(w), dump(wantW))
			}
			if !reflect.DeepEqual(p, wantP) || !reflect.DeepEqual(pr, wantPr) || !reflect.DeepEqual(got.Mixed, snap.Mixed) {
				t.Errorf("publishers %s\nproblems %s\nmixed %v, want %v", dump(p), dump(pr), got.Mixed, snap.Mixed)
			}
		})
	}
}
