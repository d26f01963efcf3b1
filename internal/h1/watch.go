package h1

import (
	"sync"
	"time"
)

// watcher starts the watch of every request of a server that has run for
// watchDelay, from one timer and from the requests that arrive. A timer per
// request, started when its body is read and stopped when it ends, would
// move the earliest timer twice per request, and moving it wakes a thread
// (the network poller sleeping until the earliest timer, or one started to
// poll in its place): a switch per request, more than a tenth of a short
// request's CPU. A timer that fires every watchDelay while requests keep
// coming costs less but not nothing: each firing wakes an idle thread, the
// runtime's monitor thread (which sleeps until the earliest timer) and a
// goroutine, about ten context switches and as many system calls, a fifth
// of a switch per request at 500 requests a second.
//
// So the requests themselves look: each request put in line starts the
// watches that are due (the line is oldest first, so that is a look at its
// head). The timer is needed only when no request comes to look: armed
// for watchDelay when a request is put in line while it is not armed (the
// first after a quiet spell), it then fires at most once per tick while
// requests keep coming, and stops after a tick with none. A request is
// watched after watchDelay while others arrive, and after at most
// watchDelay plus a tick otherwise.
type watcher struct {
	mu sync.Mutex
	// head and tail are the requests waiting for their watch, oldest
	// first (conn.wprev and conn.wnext link them).
	head, tail *conn
	timer      *time.Timer
	// armed: the timer is pending. added: a request was put in line
	// since it last fired.
	armed, added bool
	// tick is the least time between two firings while requests arrive
	// (watchTick when zero; tests set their own).
	tick time.Duration
}

// watchTick is how often, at most, the watcher's timer fires while
// requests keep coming (they start the watches that are due themselves).
const watchTick = time.Second

// add puts c, whose request has been read whole, in line for a watch
// watchDelay from now, and starts the watches that are due.
func (w *watcher) add(c *conn) {
	var buf [4]*conn
	w.mu.Lock()
	if c.waiting {
		w.unlink(c)
	}
	now := time.Now()
	due := w.takeDue(buf[:0], now)
	c.armedAt = now // under the lock: the line stays in order
	c.waiting = true
	c.wprev, c.wnext = w.tail, nil
	if w.tail != nil {
		w.tail.wnext = c
	} else {
		w.head = c
	}
	w.tail = c
	w.added = true
	if !w.armed {
		w.armed = true
		if w.timer == nil {
			w.timer = time.AfterFunc(watchDelay, w.fire)
		} else {
			w.timer.Reset(watchDelay)
		}
	}
	w.mu.Unlock()
	for _, d := range due {
		go d.watch()
	}
}

// takeDue takes the requests that have waited watchDelay out of line and
// appends them to due.
func (w *watcher) takeDue(due []*conn, now time.Time) []*conn {
	for c := w.head; c != nil && now.Sub(c.armedAt) >= watchDelay; c = w.head {
		w.unlink(c)
		due = append(due, c)
	}
	return due
}

// remove takes c out of line when its request ended before its watch.
func (w *watcher) remove(c *conn) {
	w.mu.Lock()
	if c.waiting {
		w.unlink(c)
	}
	w.mu.Unlock()
}

func (w *watcher) unlink(c *conn) {
	if c.wprev != nil {
		c.wprev.wnext = c.wnext
	} else {
		w.head = c.wnext
	}
	if c.wnext != nil {
		c.wnext.wprev = c.wprev
	} else {
		w.tail = c.wprev
	}
	c.wprev, c.wnext, c.waiting = nil, nil, false
}

// fire starts the watches that are due, each on a goroutine of its own
// (a watch blocks in a read until its request ends), and arms the timer
// again: for the next request's watch, but no sooner than a tick while
// requests arrive (they look themselves); for a tick when the line is
// empty but requests came since the last firing; not at all after a quiet
// tick.
func (w *watcher) fire() {
	w.mu.Lock()
	now := time.Now()
	due := w.takeDue(nil, now)
	tick := w.tick
	if tick <= 0 {
		tick = watchTick
	}
	switch {
	case w.head != nil:
		next := w.head.armedAt.Add(watchDelay).Sub(now)
		if w.added {
			next = max(next, tick)
		}
		w.timer.Reset(next)
	case w.added:
		w.timer.Reset(tick)
	default:
		w.armed = false
	}
	w.added = false
	w.mu.Unlock()
	for i, c := range due {
		if i == len(due)-1 {
			c.watch()
			break
		}
		go c.watch()
	}
}
