package fleet_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// TestReleaseLoggedOncePerInstanceAcrossKeptView: a card's release
// versions are logged at debug once per instance. A reload that changes
// only watch_reconnect_backoff replaces the watcher (a new reducer) but
// keeps the registry's view; the new watcher's first resync reads the same
// instance with the same card, whose release is not logged again.
func TestReleaseLoggedOncePerInstanceAcrossKeptView(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
	view := func(prev *fleet.Snapshot) *fleet.Snapshot {
		r := fleet.NewReducer() // each watcher has a reducer of its own
		r.KeepFirstSeen(prev)   // what discovery.Watcher.Run does with its Predecessor
		r.Put(key(1), endpoint(1), t0)
		r.Put("v1/mdc/dynamo/decode/generate/1", []byte(`{"component":"decode","endpoint":"generate","instance_id":1,"card_json":{"display_name":"m","worker_type":"Decode","dynamo_version":"1.5.0"}}`), t0)
		return r.Build(t0)
	}
	reg.Publish(view(nil))
	reg.Publish(view(reg.Snapshot())) // backoff-only reload: no Reset, the view is kept
	if n := strings.Count(logs.String(), "dynamo worker release"); n != 1 {
		t.Errorf("the release of one instance logged %d times across a backoff-only watcher replacement, want 1:\n%s", n, logs.String())
	}
	// A carried worker the next watcher's first resync does not find is
	// gone: when it comes back, its release is logged again.
	r := fleet.NewReducer()
	r.KeepFirstSeen(reg.Snapshot())
	r.ResyncBegin()
	r.Put(key(2), endpoint(2), t0)
	r.ResyncEnd()
	reg.Publish(r.Build(t0))
	r.Put(key(1), endpoint(1), t0)
	r.Put("v1/mdc/dynamo/decode/generate/1", []byte(`{"component":"decode","endpoint":"generate","instance_id":1,"card_json":{"display_name":"m","worker_type":"Decode","dynamo_version":"1.5.1"}}`), t0)
	reg.Publish(r.Build(t0))
	if n := strings.Count(logs.String(), "dynamo worker release"); n != 2 {
		t.Errorf("the release of an instance that left and came back logged %d times in all, want 2:\n%s", n, logs.String())
	}
}

// TestKeyspaceCapLoggedOncePerKeyspace: at the cap new
// keys are refused, held keys still update, and the refusal is logged once
// per keyspace (instances and model cards each), not once per refused key
// or publish.
func TestKeyspaceCapLoggedOncePerKeyspace(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var observed []string
	reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(&logs, nil)), func(p fleet.Problem) { observed = append(observed, p.Kind) })
	r := fleet.NewReducer()
	card := func(i int) (string, []byte) {
		return fmt.Sprintf("v1/mdc/dynamo/decode/generate/%x", i),
			fmt.Appendf(nil, `{"component":"decode","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m","worker_type":"Decode"}}`, i)
	}
	for i := range fleet.MaxRecordsPerKeyspace + 3 {
		r.Put(key(i), endpoint(i), t0)
		k, v := card(i)
		r.Put(k, v, t0)
	}
	reg.Publish(r.Build(t0))
	for i := fleet.MaxRecordsPerKeyspace + 3; i < fleet.MaxRecordsPerKeyspace+6; i++ { // more refused keys, publish after each
		r.Put(key(i), endpoint(i), t0)
		k, v := card(i)
		r.Put(k, v, t0)
		r.Put(key(0), []byte(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":0,"x":`+fmt.Sprint(i)+`}`), t0) // a heartbeat
		reg.Publish(r.Build(t0))
	}
	out := logs.String()
	if n := strings.Count(out, "kind=over_capacity"); n != 2 {
		t.Errorf("%d over_capacity lines, want 2 (one per keyspace):\n%s", n, out)
	}
	if !strings.Contains(out, "new instances keys refused") || !strings.Contains(out, "level=WARN") {
		t.Errorf("no warning names the instances keyspace:\n%s", out)
	}
	if len(observed) != 2 {
		t.Errorf("observed %v", observed)
	}
}

// TestUnsubscribedTopicSilentlySkipped: an unsupported
// topic (active_sequences_events) is skipped silently: no problem, no log
// line, no count, whatever its transport or value, and it takes no part in
// the duplicate rule.
func TestUnsubscribedTopicSilentlySkipped(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var observed []string
	reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), func(p fleet.Problem) { observed = append(observed, p.Kind) })
	r := fleet.NewReducer()
	r.Put("v1/event_channels/namespace/dynamo/topic/active_sequences_events/1",
		[]byte(`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":"active_sequences_events","instance_id":1,"transport":{"kind":"Nats","config":{}}}`), t0)
	r.Put("v1/event_channels/namespace/dynamo/topic/active_sequences_events/2", []byte(`not json`), t0)
	r.Put("v1/event_channels/namespace/dynamo/topic/active_sequences_events/3",
		[]byte(`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":"active_sequences_events","instance_id":5,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.1:1"}}}`), t0)
	r.Put("v1/event_channels/namespace/dynamo/topic/kv_metrics/5",
		[]byte(`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":"kv_metrics","instance_id":5,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.2:1"}}}`), t0)
	snap := r.Build(t0)
	reg.Publish(snap)
	if len(snap.Problems) != 0 || len(observed) != 0 || logs.Len() != 0 {
		t.Errorf("problems %+v observed %v logs:\n%s", snap.Problems, observed, logs.String())
	}
	if snap.Publishers.Len() != 1 {
		t.Errorf("%d publishers; the kv_metrics channel sharing its id with an ignored topic must stay", snap.Publishers.Len())
	}
}

// TestMixedWarnedAgainAfterResetViewUnmixed: a mixed namespace is warned
// when it becomes mixed, not again while it stays so. After a reload that
// empties the view (a new watcher), a first view showing the pair unmixed
// and a later one mixed again warn again: the pair did not stay mixed.
func TestMixedWarnedAgainAfterResetViewUnmixed(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	reg := fleet.NewRegistry(slog.New(slog.NewTextHandler(&logs, nil)), nil)
	put := func(r *fleet.Reducer, comp, wt string, id int) {
		r.Put(fmt.Sprintf("v1/instances/dynamo/%s/generate/%x", comp, id), fmt.Appendf(nil, `{"component":%q,"endpoint":"generate","instance_id":%d}`, comp, id), t0)
		r.Put(fmt.Sprintf("v1/mdc/dynamo/%s/generate/%x", comp, id), fmt.Appendf(nil, `{"component":%q,"endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m","worker_type":%q}}`, comp, id, wt), t0)
	}
	old := fleet.NewReducer()
	put(old, "prefill", "Prefill", 1)
	put(old, "backend", "Aggregated", 2)
	reg.Publish(old.Build(t0)) // mixed: warned
	reg.Reset()                // the watcher is replaced, the view emptied

	next := fleet.NewReducer()
	put(next, "prefill", "Prefill", 1)
	reg.Publish(next.Build(t0)) // the new view: prefill only, not mixed
	if strings.Count(logs.String(), "serves a model with both") != 1 {
		t.Fatalf("setup:\n%s", logs.String())
	}
	put(next, "backend", "Aggregated", 3)
	reg.Publish(next.Build(t0)) // mixed again
	if n := strings.Count(logs.String(), "serves a model with both"); n != 2 {
		t.Errorf("%d mixed warnings, want 2: the pair was shown unmixed after the reset and became mixed again:\n%s", n, logs.String())
	}
}

// TestDuplicateReportedAgainAfterResetViewClean: a conflict is counted and
// warned when it appears. After a reload that empties the view, a first
// view without the conflict (its records gone) and a later one with the
// same key set conflicting again count and warn again, as without a reset.
func TestDuplicateReportedAgainAfterResetViewClean(t *testing.T) {
	t.Parallel()
	var observed []string
	reg := fleet.NewRegistry(slog.New(slog.DiscardHandler), func(p fleet.Problem) { observed = append(observed, p.Kind) })
	old := fleet.NewReducer()
	old.Put(key(1), endpoint(1), t0)
	old.Put("v1/instances/dynamo/decode/generate/ff", endpoint(1), t0)
	reg.Publish(old.Build(t0))
	reg.Reset()
	next := fleet.NewReducer()
	next.Put(key(1), endpoint(1), t0)
	reg.Publish(next.Build(t0)) // no conflict in the new watcher's view
	next.Put("v1/instances/dynamo/decode/generate/ff", endpoint(1), t0)
	reg.Publish(next.Build(t0)) // the conflict is back
	if len(observed) != 2 {
		t.Errorf("observed %v, want the duplicate counted twice (it left the view between)", observed)
	}
}
