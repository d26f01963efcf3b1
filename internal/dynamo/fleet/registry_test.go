package fleet_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

func TestRegistryWaitSeesPublishedSnapshot(t *testing.T) {
	t.Parallel()
	reg := fleet.NewRegistry(nil, nil)
	if reg.Generation() != 0 || reg.Snapshot().Workers.Len() != 0 {
		t.Fatal("not empty at start")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var last uint64
		for last < 50 {
			g, err := reg.Wait(ctx, last)
			if err != nil {
				errs <- err
				return
			}
			// The snapshot is swapped before its generation is announced.
			if got := reg.Snapshot().Workers.Len(); uint64(got) < g {
				errs <- fmt.Errorf("generation %d announced with %d workers", g, got)
				return
			}
			last = g
		}
	}()
	r := fleet.NewReducer()
	for i := 1; i <= 50; i++ {
		r.Put(key(i), endpoint(i), t0)
		reg.Publish(r.Build(t0))
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := reg.Wait(ctx, reg.Generation()); err == nil {
		t.Error("Wait ignored a cancelled context")
	}
}

func TestRegistryReportsProblemsOnce(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var observed []string
	reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(&logs, nil)), func(p fleet.Problem) { observed = append(observed, p.Kind) })
	r := fleet.NewReducer()
	r.Put(key(1), endpoint(1), t0)
	r.Put("v1/instances/dynamo/decode/generate/ff", endpoint(1), t0)
	reg.Publish(r.Build(t0))
	r.Put(key(2), endpoint(2), t0)
	reg.Publish(r.Build(t0)) // same duplicate: not reported again
	if len(observed) != 1 || observed[0] != fleet.ProblemDuplicate {
		t.Fatalf("observed %v", observed)
	}
	r.Delete("v1/instances/dynamo/decode/generate/ff")
	reg.Publish(r.Build(t0))
	r.Put("v1/instances/dynamo/decode/generate/ff", endpoint(1), t0)
	reg.Publish(r.Build(t0)) // back again: reported again
	if len(observed) != 2 {
		t.Fatalf("observed %v", observed)
	}
	if n := strings.Count(logs.String(), "kind=duplicate"); n != 2 {
		t.Errorf("%d duplicate warnings:\n%s", n, logs.String())
	}
}

// TestRegistryReportsANewReducersProblems: a view from a new reducer (a
// watcher replaced by a reload, publishing over the old one's view) with
// as many problems as the view before it, but others, has them reported.
func TestRegistryReportsANewReducersProblems(t *testing.T) {
	t.Parallel()
	var observed int
	reg := fleet.NewRegistry(slog.New(slog.DiscardHandler), func(fleet.Problem) { observed++ })
	for _, id := range []int{1, 2} {
		r := fleet.NewReducer()
		r.Put(key(id), endpoint(id), t0)
		r.Put("v1/instances/dynamo/decode/generate/0"+strconv.Itoa(id), endpoint(id), t0)
		reg.Publish(r.Build(t0))
		if id == 1 {
			// A namespaces reload publishes the view within the kept
			// namespaces before the next watcher's first.
			reg.Publish(reg.Snapshot().Within([]string{"dynamo"}))
		}
	}
	if observed != 2 {
		t.Errorf("%d conflicts observed, want 2 (one per reducer)", observed)
	}
}

// TestRegistryReportsChangedKeySet: a conflict is reported once per key
// set, and a set that changes is a new conflict, also when the keys it
// shows (at most four) and its count stay the same.
func TestRegistryReportsChangedKeySet(t *testing.T) {
	t.Parallel()
	var observed int
	reg := fleet.NewRegistry(slog.New(slog.DiscardHandler), func(fleet.Problem) { observed++ })
	r := fleet.NewReducer()
	claim := func(suffix string) string { return "v1/instances/dynamo/decode/generate/" + suffix }
	for _, s := range []string{"1", "a", "b", "c", "d"} {
		r.Put(claim(s), endpoint(1), t0)
	}
	reg.Publish(r.Build(t0))
	if observed != 1 {
		t.Fatalf("%d problems observed for one conflict", observed)
	}
	r.Delete(claim("d"))
	r.Put(claim("e"), endpoint(1), t0)
	snap := r.Build(t0)
	if p := snap.Problems; len(p) != 1 || p[0].KeyCount != 5 || len(p[0].Keys) != fleet.MaxProblemKeys {
		t.Fatalf("problems %+v", p)
	}
	reg.Publish(snap)
	if observed != 2 {
		t.Errorf("%d problems observed; the changed key set was not reported", observed)
	}
}

// TestRegistryReportsRecordProblemsOncePerKey: a malformed or unsupported
// record is logged and counted once per key while it lasts, also when its
// key is put again with another bad value (which its reason quotes); gone
// and back, it is reported again.
func TestRegistryReportsRecordProblemsOncePerKey(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var observed []string
	reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(&logs, nil)), func(p fleet.Problem) { observed = append(observed, p.Kind) })
	r := fleet.NewReducer()
	const ch = "v1/event_channels/namespace/dynamo/topic/kv_metrics/1"
	channel := func(transport string) []byte {
		return []byte(`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":"kv_metrics","instance_id":1,"transport":` + transport + `}`)
	}
	steps := []struct {
		key, value string
		want       []string // kinds observed so far
	}{
		{key(1), `{"type":"Endpoint","instance_id":"zz"}`, []string{"malformed"}},
		{key(1), `{"type":"Endpoint","instance_id":"yy"}`, []string{"malformed"}},
		{key(1), `{"type":"Endpoint","instance_id":-1}`, []string{"malformed"}},
		{ch, string(channel(`{"kind":"Nats","config":{}}`)), []string{"malformed", "unsupported"}},
		{ch, string(channel(`{"kind":"ZmqBroker","config":{}}`)), []string{"malformed", "unsupported"}},
		{ch, string(channel(`{"kind":"Zmq","config":{"endpoint":"ipc:///x"}}`)), []string{"malformed", "unsupported"}},
		{key(1), string(endpoint(1)), []string{"malformed", "unsupported"}},
		{key(1), `{"type":"Endpoint","instance_id":"xx"}`, []string{"malformed", "unsupported", "malformed"}},
		{key(2), strings.Repeat(" ", fleet.MaxRecordBytes+1), []string{"malformed", "unsupported", "malformed", "oversized"}},
		{key(2), strings.Repeat(" ", fleet.MaxRecordBytes+2), []string{"malformed", "unsupported", "malformed", "oversized"}},
	}
	for i, step := range steps {
		r.Put(step.key, []byte(step.value), t0)
		reg.Publish(r.Build(t0))
		if !slices.Equal(observed, step.want) {
			t.Fatalf("step %d (%.80q): observed %v, want %v", i, step.value, observed, step.want)
		}
	}
	if n := strings.Count(logs.String(), "dynamo discovery problem"); n != 4 {
		t.Errorf("%d problem warnings, want 4:\n%s", n, logs.String())
	}
}

func TestRegistryMixedNamespaceWarnings(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(&logs, nil)), nil)
	r := fleet.NewReducer()
	id := 1
	for m := range 10 {
		for _, comp := range []string{"prefill", "backend"} {
			r.Put(fmt.Sprintf("v1/instances/dynamo/%s/generate/%x", comp, id), fmt.Appendf(nil, `{"component":%q,"endpoint":"generate","instance_id":%d}`, comp, id), t0)
			wt := map[string]string{"prefill": "Prefill", "backend": "Aggregated"}[comp]
			r.Put(fmt.Sprintf("v1/mdc/dynamo/%s/generate/%x", comp, id), fmt.Appendf(nil, `{"component":%q,"endpoint":"generate","instance_id":%d,"card_json":{"display_name":"model-%d","worker_type":%q}}`, comp, id, m, wt), t0)
			id++
		}
	}
	reg.Publish(r.Build(t0))
	out := logs.String()
	if n := strings.Count(out, "serves a model with both"); n != fleet.MaxMixedWarningsPerPublish {
		t.Errorf("%d mixed warnings, want %d:\n%s", n, fleet.MaxMixedWarningsPerPublish, out)
	}
	if !strings.Contains(out, "more dynamo namespaces became mixed") || !strings.Contains(out, "omitted=2 logged=8") {
		t.Errorf("no summary line:\n%s", out)
	}
	if !strings.Contains(out, "model=model-0 prefill=1 decode=0 aggregated=1") {
		t.Errorf("a warning without its workers by role:\n%s", out)
	}
	logs.Reset()
	reg.Publish(r.Build(t0))
	if strings.Contains(logs.String(), "mixed") {
		t.Errorf("mixed warned again for unchanged pairs:\n%s", logs.String())
	}
}

// TestRegistryLogsReleaseOncePerInstance: a worker's release versions are
// logged once, with the first card that carries them, not again when its
// card changes or a resync puts it again.
func TestRegistryLogsReleaseOncePerInstance(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
	r := fleet.NewReducer()
	card := func(id, blocks int, version string) []byte {
		return fmt.Appendf(nil, `{"component":"decode","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m","worker_type":"Decode","runtime_config":{"total_kv_blocks":%d}%s}}`, id, blocks, version)
	}
	mdc := func(id int) string { return fmt.Sprintf("v1/mdc/dynamo/decode/generate/%x", id) }
	r.Put(key(1), endpoint(1), t0)
	r.Put(mdc(1), card(1, 10, `,"dynamo_version":"1.5.0"`), t0)
	r.Put(key(2), endpoint(2), t0)
	r.Put(mdc(2), card(2, 10, ""), t0) // no release yet
	reg.Publish(r.Build(t0))
	r.Put(mdc(1), card(1, 20, `,"dynamo_version":"1.5.0"`), t0) // a new card, the same instance
	r.Put(mdc(2), card(2, 20, `,"dynamo_version":"1.4.0"`), t0)
	reg.Publish(r.Build(t0))
	r.ResyncBegin()
	r.Put(key(1), endpoint(1), t0)
	r.Put(mdc(1), card(1, 30, `,"dynamo_version":"1.5.0"`), t0)
	r.Put(key(2), endpoint(2), t0)
	r.Put(mdc(2), card(2, 30, `,"dynamo_version":"1.4.0"`), t0)
	r.ResyncEnd()
	reg.Publish(r.Build(t0))
	out := logs.String()
	if n := strings.Count(out, "dynamo worker release"); n != 2 || strings.Count(out, "instance_id=1 ") != 1 || strings.Count(out, "instance_id=2 ") != 1 {
		t.Errorf("%d release lines, want one per instance:\n%s", n, out)
	}
}
