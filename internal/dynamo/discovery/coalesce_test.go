package discovery_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// passes is a source whose passes are the given functions, in order; after
// the last it cancels the watcher.
type passes struct {
	runs   []func(ctx context.Context, s discovery.Sink) error
	n      int
	cancel context.CancelFunc
}

func (p *passes) Name() string { return "passes" }

func (p *passes) Run(ctx context.Context, s discovery.Sink) error {
	if p.n == len(p.runs) {
		p.cancel()
		return nil
	}
	p.n++
	return p.runs[p.n-1](ctx, s)
}

func putWorker(s discovery.Sink, id int) {
	s.Put(fmt.Sprintf("v1/instances/dynamo/decode/generate/%x", id), fmt.Appendf(nil, `{"component":"decode","endpoint":"generate","instance_id":%d}`, id))
}

// published is one generation as a follower of the registry saw it.
type published struct {
	at   time.Time
	gen  uint64
	snap *fleet.Snapshot
}

// follow records the generations the registry publishes, at the (bubble)
// time each is published, until ctx ends. Of generations published at one
// instant it may see only the last.
func follow(ctx context.Context, reg *fleet.Registry) <-chan []published {
	out := make(chan []published, 1)
	sub := reg.Subscribe()
	go func() {
		var seen []published
		for {
			g, err := sub.Next(ctx)
			if err != nil {
				out <- seen
				return
			}
			seen = append(seen, published{time.Now(), g, reg.Snapshot()})
		}
	}()
	return out
}

// runPasses runs a watcher over the passes in a bubble and returns what
// the registry published, and its last generation.
func runPasses(t *testing.T, backoff time.Duration, runs ...func(ctx context.Context, s discovery.Sink) error) ([]published, uint64) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reg := fleet.NewRegistry(nil, nil)
	fctx, stopFollowing := context.WithCancel(t.Context())
	seen := follow(fctx, reg)
	w := &discovery.Watcher{Source: &passes{runs: runs, cancel: cancel}, Registry: reg,
		Backoff: discovery.Backoff{Initial: backoff, Max: backoff}}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	synctest.Wait() // the follower has seen the last generation
	stopFollowing()
	return <-seen, reg.Generation()
}

// generation is what one generation should be: when it is published (from
// the start of the test) and its workers' instance ids.
type generation struct {
	at      time.Duration
	workers []uint64
}

// checkGenerations: the registry published exactly the wanted generations,
// and each one the follower saw is as wanted.
func checkGenerations(t *testing.T, start time.Time, seen []published, last uint64, want []generation) {
	t.Helper()
	if last != uint64(len(want)) {
		t.Errorf("%d generations, want %d", last, len(want))
	}
	if len(seen) == 0 || seen[len(seen)-1].gen != last {
		t.Fatalf("the last generation was not seen")
	}
	for _, p := range seen {
		var ids []uint64
		for w := range p.snap.Workers.All() {
			ids = append(ids, w.ID.InstanceID)
		}
		if p.gen > uint64(len(want)) {
			t.Errorf("generation %d at +%v with workers %v, not wanted", p.gen, p.at.Sub(start), ids)
			continue
		}
		w := want[p.gen-1]
		if at := p.at.Sub(start); at != w.at || !slices.Equal(ids, w.workers) {
			t.Errorf("generation %d at +%v with workers %v, want +%v with %v", p.gen, at, ids, w.at, w.workers)
		}
	}
}

func ids(from, to uint64) []uint64 {
	var out []uint64
	for id := from; id <= to; id++ {
		out = append(out, id)
	}
	return out
}

func seed(s discovery.Sink, ids ...int) {
	s.ResyncBegin()
	for _, id := range ids {
		putWorker(s, id)
	}
	s.ResyncEnd()
}

// TestBurstIsOnePublish: the first full resync is published at once; a
// burst of events right after it becomes one publish, PublishDelay after
// the resync's, holding every event; an event after a quiet spell is
// published at once.
func TestBurstIsOnePublish(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		seen, last := runPasses(t, time.Second, func(ctx context.Context, s discovery.Sink) error {
			seed(s, 1)
			for id := 2; id <= 1000; id++ {
				putWorker(s, id)
				s.Flush()
			}
			time.Sleep(time.Second)
			putWorker(s, 1001)
			s.Flush()
			time.Sleep(time.Minute) // the session stays up
			return nil
		})
		checkGenerations(t, start, seen, last, []generation{{0, ids(1, 1)}, {discovery.PublishDelay, ids(1, 1000)}, {time.Second, ids(1, 1001)}})
	})
}

// TestStreamDelayIsBounded: events arriving every millisecond for 200 ms
// are each published within PublishDelay, in at most one publish per
// PublishDelay.
func TestStreamDelayIsBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const events = 200
		var sent []time.Time
		seen, last := runPasses(t, time.Second, func(ctx context.Context, s discovery.Sink) error {
			seed(s)
			for id := 1; id <= events; id++ {
				time.Sleep(time.Millisecond)
				putWorker(s, id)
				sent = append(sent, time.Now())
				s.Flush()
			}
			time.Sleep(time.Minute) // the session stays up
			return nil
		})
		if most := uint64(2 + events*time.Millisecond/discovery.PublishDelay); last > most {
			t.Errorf("%d generations for %d events, want at most %d", last, events, most)
		}
		for i, at := range sent {
			id := fleet.WorkerID{Namespace: "dynamo", InstanceID: uint64(i + 1)}
			j := 0
			for j < len(seen) && seen[j].snap.Workers.Get(id) == nil {
				j++
			}
			if j == len(seen) {
				t.Fatalf("worker %d was never published", i+1)
			}
			if d := seen[j].at.Sub(at); d > discovery.PublishDelay {
				t.Errorf("worker %d published %v after its event, want at most %v", i+1, d, discovery.PublishDelay)
			}
		}
	})
}

// TestPassEndPublishesWaitingChanges: changes waiting for the timer when
// a pass fails are published when it ends, not after the reconnect
// backoff; the same when the watcher is stopped.
func TestPassEndPublishesWaitingChanges(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		seen, last := runPasses(t, time.Second, func(ctx context.Context, s discovery.Sink) error {
			seed(s, 1)
			putWorker(s, 2)
			s.Flush()
			return errors.New("stream ended")
		}, func(ctx context.Context, s discovery.Sink) error {
			seed(s, 1, 2)
			putWorker(s, 3)
			s.Flush()
			return nil // as when the watcher is stopped
		})
		checkGenerations(t, start, seen, last, []generation{{0, ids(1, 1)}, {0, ids(1, 2)}, {time.Second, ids(1, 3)}})
	})
}

// TestResyncPublishedAtOnce: a later pass's resync is never published in
// part (a Flush during it publishes nothing, however long since the last
// publish), and its end publishes the resynced view at once, however
// recent the last publish.
func TestResyncPublishedAtOnce(t *testing.T) {
	t.Parallel()
	for _, pause := range []time.Duration{0, 2 * discovery.PublishDelay} {
		t.Run(fmt.Sprint(pause), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				seen, last := runPasses(t, time.Millisecond, func(ctx context.Context, s discovery.Sink) error {
					seed(s, 1, 2)
					putWorker(s, 3)
					s.Flush()
					return errors.New("stream ended") // the pass's end publishes worker 3
				}, func(ctx context.Context, s discovery.Sink) error {
					s.ResyncBegin()
					putWorker(s, 2)
					putWorker(s, 5)
					time.Sleep(pause)
					s.Flush()
					time.Sleep(2 * time.Millisecond)
					putWorker(s, 4)
					s.ResyncEnd()
					time.Sleep(time.Minute)
					return nil
				})
				checkGenerations(t, start, seen, last, []generation{{0, ids(1, 2)}, {0, ids(1, 3)},
					{time.Millisecond + pause + 2*time.Millisecond, []uint64{2, 4, 5}}})
			})
		})
	}
}
