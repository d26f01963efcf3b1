package h1

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
)

func TestReqContextAfterEnd(t *testing.T) {
	t.Parallel()
	var r reqContext
	r.init()
	ran := 0
	f := func() { ran++ }
	if !r.AfterEnd(f) || r.AfterEnd(f) {
		t.Fatal("AfterEnd: want the first set, the second refused")
	}
	if !r.StopAfterEnd() || r.StopAfterEnd() {
		t.Fatal("StopAfterEnd: want true once, then false")
	}
	// A context below it ends with it, as below any cancelable context.
	child, cancel := context.WithCancel(&r)
	defer cancel()
	if !r.AfterEnd(f) {
		t.Fatal("AfterEnd after a stop refused")
	}
	r.end()
	if stopped := r.StopAfterEnd(); ran != 1 || stopped {
		t.Fatalf("end: ran %d times, StopAfterEnd after it %v", ran, stopped)
	}
	if !errors.Is(r.Err(), context.Canceled) || !errors.Is(child.Err(), context.Canceled) {
		t.Fatalf("after end: Err %v, child's %v", r.Err(), child.Err())
	}
	// Set after the end, the function runs at once.
	if !r.AfterEnd(f) || ran != 2 {
		t.Fatalf("AfterEnd after the end: ran %d times", ran)
	}
	r.end() // a second end runs nothing again
	if ran != 2 {
		t.Fatalf("a second end ran the function (%d)", ran)
	}
}

// TestReqContextEndRaces runs end against AfterEnd and StopAfterEnd on
// other goroutines: the function runs exactly when StopAfterEnd says it
// could not stop it, and once.
func TestReqContextEndRaces(t *testing.T) {
	t.Parallel()
	rounds := 20000
	if testing.Short() {
		rounds = 2000
	}
	for i := range rounds {
		var r reqContext
		r.init()
		var ran atomic.Int32
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			r.end()
		}()
		if !r.AfterEnd(func() { ran.Add(1) }) {
			t.Fatalf("round %d: AfterEnd refused with no function set", i)
		}
		if i%3 == 0 {
			runtime.Gosched()
		}
		stopped := r.StopAfterEnd()
		<-ended
		if n := ran.Load(); stopped && n != 0 || !stopped && n != 1 {
			t.Fatalf("round %d: stopped %v, the function ran %d times", i, stopped, n)
		}
		if r.Err() == nil {
			t.Fatalf("round %d: the context did not end", i)
		}
	}
}
