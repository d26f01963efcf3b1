package router

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/telemetry"
)

// TestBusyQueueLines: each model's line is served in arrival order, only
// its head trying; a line whose workers stay busy does not hold up
// another model's; the total is bounded; waits end at max_wait or when
// the context does; the head retries on a notify and every queuePoll.
func TestBusyQueueLines(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		m := telemetry.NewRouterMetrics(nil)
		q := newBusyQueue(m)
		var mu sync.Mutex
		room := map[string]int{} // free slots per model
		var served []string
		tries := map[string]int{}
		waitFor := func(name, model string, ctx context.Context, maxWait time.Duration, result *string) {
			*result = q.wait(ctx, model, 4, maxWait, func() bool {
				mu.Lock()
				defer mu.Unlock()
				tries[name]++
				if room[model] == 0 {
					return false
				}
				room[model]--
				served = append(served, name)
				return true
			})
		}
		results := make([]string, 6)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		start := func(i int, name, model string, ctx context.Context, maxWait time.Duration) {
			wg.Add(1)
			go func() { defer wg.Done(); waitFor(name, model, ctx, maxWait, &results[i]) }()
			synctest.Wait() // it has joined its line (and tried once if at the head)
		}
		start(0, "a1", "A", ctx, time.Minute)
		start(1, "a2", "A", ctx, time.Minute)
		start(2, "a3", "A", ctx, 100*time.Millisecond)
		start(3, "b1", "B", ctx, time.Minute)
		if !q.waiting("A") || !q.waiting("B") || q.waiting("C") || promtest.ToFloat64(m.QueueDepth) != 4 {
			t.Fatal("the lines are not as joined")
		}
		// The queue holds 4: a fifth is refused at once.
		if got := q.wait(ctx, "C", 4, time.Minute, func() bool { return true }); got != telemetry.BusyQueueFull {
			t.Fatalf("a fifth waiter: %s", got)
		}

		// B has room: its head takes it without waiting for A's line.
		mu.Lock()
		room["B"] = 1
		mu.Unlock()
		q.notify()
		synctest.Wait()
		if !slices.Equal(served, []string{"b1"}) {
			t.Fatalf("served %v", served)
		}
		// Only A's head has tried, once when it joined and at each poll.
		time.Sleep(10 * queuePoll)
		synctest.Wait()
		mu.Lock()
		if tries["a2"] != 0 || tries["a3"] != 0 || tries["a1"] < 10 {
			t.Fatalf("tries %v: only the head of a line tries, at every poll", tries)
		}
		mu.Unlock()
		// a3 waits past its max_wait; then two slots for A serve a1, a2
		// in order.
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if results[2] != telemetry.QueueTimeout {
			t.Fatalf("a3: %q", results[2])
		}
		mu.Lock()
		room["A"] = 2
		mu.Unlock()
		time.Sleep(queuePoll)
		synctest.Wait()
		if !slices.Equal(served, []string{"b1", "a1", "a2"}) {
			t.Fatalf("served %v", served)
		}
		// A waiter whose context ends leaves.
		cctx, ccancel := context.WithCancel(ctx)
		start(4, "a4", "A", cctx, time.Minute)
		ccancel()
		wg.Wait()
		if results[4] != telemetry.QueueCancelled || q.waiting("A") || promtest.ToFloat64(m.QueueDepth) != 0 || q.n.Load() != 0 {
			t.Fatalf("a4 %q; lines %v", results[4], q.lines)
		}
		for i, want := range []string{telemetry.QueueDispatched, telemetry.QueueDispatched, telemetry.QueueTimeout, telemetry.QueueDispatched} {
			if results[i] != want {
				t.Fatalf("results %v", results[:4])
			}
		}
	})
}
