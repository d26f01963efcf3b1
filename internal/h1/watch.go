package h1

import (
	"sync"
	"time"
)

// watcher starts the watch of every request of a server that has run for
// watchDelay, from one timer. A timer per request, started when its body
// is read and stopped when it ends, would move the earliest timer twice per
// request, and moving it wakes a thread (the network poller sleeping
// until the earliest timer, or one started to poll in its place): a
// switch per request, more than a tenth of a short request's CPU. The one
// timer is armed for the oldest watched request and moves only when it
// fires (at most once per watchDelay) or when a request is watched while
// no other is.
type watcher struct {
	mu sync.Mutex
	// head and tail are the requests waiting for their watch, oldest
	// first (conn.wprev and conn.wnext link them).
	head, tail *conn
	timer      *time.Timer
	armed      bool
}

// add puts c, whose request has been read whole, in line for a watch
// watchDelay from now.
func (w *watcher) add(c *conn) {
	w.mu.Lock()
	if c.waiting {
		w.unlink(c)
	}
	c.armedAt = time.Now() // under the lock: the line stays in order
	c.waiting = true
	c.wprev, c.wnext = w.tail, nil
	if w.tail != nil {
		w.tail.wnext = c
	} else {
		w.head = c
	}
	w.tail = c
	if !w.armed {
		w.armed = true
		if w.timer == nil {
			w.timer = time.AfterFunc(watchDelay, w.fire)
		} else {
			w.timer.Reset(watchDelay)
		}
	}
	w.mu.Unlock()
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
// for the next one.
func (w *watcher) fire() {
	var due []*conn
	w.mu.Lock()
	now := time.Now()
	for c := w.head; c != nil && now.Sub(c.armedAt) >= watchDelay; c = w.head {
		w.unlink(c)
		due = append(due, c)
	}
	if w.head != nil {
		w.timer.Reset(w.head.armedAt.Add(watchDelay).Sub(now))
	} else {
		w.armed = false
	}
	w.mu.Unlock()
	for i, c := range due {
		if i == len(due)-1 {
			c.watch()
			break
		}
		go c.watch()
	}
}
