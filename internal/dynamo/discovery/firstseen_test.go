package discovery_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// twoPasses seeds worker 1 in each pass (worker 2 only in the second),
// recording worker 1's first_seen after each.
type twoPasses struct {
	n      int
	reg    *fleet.Registry
	seen   []time.Time
	cancel context.CancelFunc
}

func (s *twoPasses) Name() string { return "two" }

func (s *twoPasses) Run(ctx context.Context, sink discovery.Sink) error {
	s.n++
	if s.n > 2 {
		s.cancel()
		return nil
	}
	sink.ResyncBegin()
	sink.Put("v1/instances/dynamo/decode/generate/1", []byte(`{"component":"decode","endpoint":"generate","instance_id":1}`))
	if s.n == 2 {
		sink.Put("v1/instances/dynamo/decode/generate/2", []byte(`{"component":"decode","endpoint":"generate","instance_id":2}`))
	}
	sink.ResyncEnd()
	w := s.reg.Snapshot().Workers.Get(fleet.WorkerID{Namespace: "dynamo", InstanceID: 1})
	s.seen = append(s.seen, w.FirstSeen)
	time.Sleep(5 * time.Second)
	return errors.New("connection closed")
}

// TestFirstSeenAcrossPasses: the reducer lives as long as the watcher, so a worker
// keeps its first_seen across a reconnect's full resync.
func TestFirstSeenAcrossPasses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		reg := fleet.NewRegistry(nil, nil)
		src := &twoPasses{reg: reg, cancel: cancel}
		w := &discovery.Watcher{Source: src, Registry: reg, Backoff: discovery.Backoff{Initial: time.Second, Max: time.Second}}
		if err := w.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if len(src.seen) != 2 || !src.seen[0].Equal(src.seen[1]) {
			t.Errorf("first_seen across passes: %v", src.seen)
		}
	})
}
