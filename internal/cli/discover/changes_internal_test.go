package discover

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// TestWatchPrintsAConflictWhoseKeySetChanged: a conflict whose key set
// changes is a new conflict (logged and counted again) even when the keys
// it names (at most four), its count and its reason stay the same; --watch
// prints it as one too, with the old one cleared.
func TestWatchPrintsAConflictWhoseKeySetChanged(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	key := func(i int) string { return fmt.Sprintf("v1/instances/dynamo/decode/generate/%x", 0x100+i) }
	value := []byte(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":7}`)
	r := fleet.NewReducer()
	for i := range 5 {
		r.Put(key(i), value, now)
	}
	before := r.Build(now)
	r.Delete(key(4))
	r.Put(key(5), value, now) // sorts after the four keys shown
	after := r.Build(now)
	if len(before.Problems) != 1 || len(after.Problems) != 1 {
		t.Fatalf("problems %+v then %+v", before.Problems, after.Problems)
	}
	ios, _, out, _ := iostreams.Test()
	o := &Options{IO: ios, Output: "json", Watch: true}
	if err := o.printChanges(2, before, after); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, `"event":"problem"`) || !strings.Contains(got, `"event":"problem_cleared"`) {
		t.Fatalf("a conflict whose key set changed is not printed:\n%s", got)
	}
}
