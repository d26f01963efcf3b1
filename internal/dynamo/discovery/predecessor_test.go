package discovery_test

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// oneRead is a source that reads one worker and then watches until its
// context ends.
type oneRead struct{}

func (oneRead) Name() string { return "one-read" }

func (oneRead) Run(ctx context.Context, sink discovery.Sink) error {
	sink.ResyncBegin()
	sink.Put("v1/instances/dynamo/decode/generate/1", []byte(`{"component":"decode","endpoint":"generate","instance_id":1}`))
	sink.ResyncEnd()
	<-ctx.Done()
	return nil
}

// TestPredecessorNotPinned: the view a watcher takes over (a reload that
// prunes namespaces or changes only the backoff) serves only its first
// resync's first_seen; once that resync is published, the old fleet view
// (every worker and card of it) is not kept alive by the running watcher
// for the rest of its life.
func TestPredecessorNotPinned(t *testing.T) {
	t.Parallel()
	reg := fleet.NewRegistry(nil, nil)
	// The test keeps only a weak reference to the old view.
	w, ref := func() (*discovery.Watcher, weak.Pointer[fleet.Snapshot]) {
		prev := fleet.NewSnapshot([]*fleet.Worker{{ID: fleet.WorkerID{Namespace: "dynamo", InstanceID: 1}, Model: "m", FirstSeen: time.Unix(1, 0)}}, nil)
		return &discovery.Watcher{Source: oneRead{}, Registry: reg, Backoff: discovery.Backoff{Initial: time.Millisecond, Max: time.Millisecond}, Predecessor: prev},
			weak.Make(prev)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-w.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("no first resync")
	}
	if got := reg.Snapshot().Workers.Get(fleet.WorkerID{Namespace: "dynamo", InstanceID: 1}); got == nil || !got.FirstSeen.Equal(time.Unix(1, 0)) {
		t.Fatalf("first_seen not carried over: %+v", got)
	}
	for range 5 {
		runtime.GC()
	}
	if ref.Value() != nil {
		t.Error("the replaced fleet view is still reachable from the running watcher after its first resync")
	}
	runtime.KeepAlive(w)
}
