package router

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/telemetry"
)

// queuePoll is how often the request at the head of a line tries again
// while nothing wakes it: workers publish their load when it changes, so
// room that a sample shows is taken within this long.
const queuePoll = 20 * time.Millisecond

// busyQueue holds requests that found every candidate worker busy
// (dynamo.load.queue), in one line per model and set of candidate
// replicas (exchange.queueLine) so that requests whose workers are all
// busy never hold up others'. Only the request at the head of a line
// tries for a worker, so each line is served in arrival order; it tries
// when a pinned dispatch ends, when the request before it leaves, and
// every queuePoll. The lines hold at most the configured size in all, each
// request at most its max wait: nothing waits unbounded.
type busyQueue struct {
	mu    sync.Mutex
	lines map[string][]*waiter
	// n counts the waiters of every line (read without the lock by
	// notify's fast path).
	n atomic.Int64
	m *telemetry.RouterMetrics
}

type waiter struct {
	// kick, of capacity one, wakes the waiter to try (or check whether it
	// is at the head).
	kick chan struct{}
}

func newBusyQueue(m *telemetry.RouterMetrics) *busyQueue {
	return &busyQueue{lines: map[string][]*waiter{}, m: m}
}

// waiting reports whether requests of line are waiting: a new one joins
// the line behind them rather than taking room they wait for.
func (q *busyQueue) waiting(line string) bool {
	if q.n.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.lines[line]) > 0
}

// wait joins the line named name, unless size requests already wait, and
// returns how the wait ended: telemetry.QueueDispatched when try reported done
// (it is called only at the head of the line, never concurrently for one
// line), telemetry.QueueTimeout after maxWait, telemetry.QueueCancelled
// when ctx ends, or telemetry.BusyQueueFull when it could not join.
func (q *busyQueue) wait(ctx context.Context, name string, size int, maxWait time.Duration, try func() bool) string {
	w := &waiter{kick: make(chan struct{}, 1)}
	q.mu.Lock()
	if q.n.Load() >= int64(size) {
		q.mu.Unlock()
		return telemetry.BusyQueueFull
	}
	q.lines[name] = append(q.lines[name], w)
	q.m.QueueDepth.Set(float64(q.n.Add(1)))
	q.mu.Unlock()
	defer q.leave(name, w)

	deadline := time.NewTimer(maxWait)
	defer deadline.Stop()
	poll := time.NewTimer(queuePoll)
	defer poll.Stop()
	for {
		var pollC <-chan time.Time
		if q.head(name, w) {
			if try() {
				return telemetry.QueueDispatched
			}
			poll.Reset(queuePoll)
			pollC = poll.C
		}
		select {
		case <-ctx.Done():
			return telemetry.QueueCancelled
		case <-deadline.C:
			return telemetry.QueueTimeout
		case <-w.kick:
		case <-pollC:
		}
	}
}

func (q *busyQueue) head(name string, w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	line := q.lines[name]
	return len(line) > 0 && line[0] == w
}

// leave takes w out of the line named name; the request behind it, now at
// the head, tries at once.
func (q *busyQueue) leave(name string, w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	line := q.lines[name]
	for i, x := range line {
		if x != w {
			continue
		}
		line = append(line[:i], line[i+1:]...)
		q.m.QueueDepth.Set(float64(q.n.Add(-1)))
		if len(line) == 0 {
			delete(q.lines, name)
			return
		}
		q.lines[name] = line
		if i == 0 {
			kick(line[0])
		}
		return
	}
}

// notify wakes the head of every line: a pinned dispatch ended, so a
// worker may have room.
func (q *busyQueue) notify() {
	if q.n.Load() == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, line := range q.lines {
		kick(line[0])
	}
}

func kick(w *waiter) {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}
