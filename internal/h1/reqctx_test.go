package h1

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestReqContextAfterEnd(t *testing.T) {
	t.Parallel()
	var r reqContext
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

// TestReqContextDerived: contexts derived from a request's context, and
// context.AfterFunc on it, end with it, whether they were made before or
// after it ended, and a stopped AfterFunc does not run.
func TestReqContextDerived(t *testing.T) {
	t.Parallel()
	var r reqContext
	if r.Err() != nil {
		t.Fatal("a new context has ended")
	}
	timeout, cancelTimeout := context.WithTimeout(&r, time.Hour)
	defer cancelTimeout()
	cancelled, cancel := context.WithCancel(&r)
	cancel() // deregisters from r
	ran := make(chan string, 4)
	context.AfterFunc(&r, func() { ran <- "after" })
	stop := context.AfterFunc(&r, func() { ran <- "stopped" })
	if !stop() {
		t.Fatal("stop of a waiting AfterFunc: false")
	}
	done := r.Done()
	select {
	case <-done:
		t.Fatal("Done closed before the end")
	default:
	}
	r.end()
	<-done
	if !errors.Is(timeout.Err(), context.Canceled) || !errors.Is(context.Cause(timeout), context.Canceled) {
		t.Fatalf("derived context after the end: Err %v, Cause %v", timeout.Err(), context.Cause(timeout))
	}
	if !errors.Is(cancelled.Err(), context.Canceled) {
		t.Fatalf("cancelled child: %v", cancelled.Err())
	}
	if got := <-ran; got != "after" {
		t.Fatalf("AfterFunc ran %q", got)
	}
	// Made after the end: ended at once.
	late, cancelLate := context.WithCancel(&r)
	defer cancelLate()
	if late.Err() == nil {
		t.Fatal("a context derived after the end has not ended")
	}
	select {
	case <-r.Done():
	default:
		t.Fatal("Done asked for after the end is not closed")
	}
	context.AfterFunc(&r, func() { ran <- "late" })
	select {
	case got := <-ran:
		if got != "late" {
			t.Fatalf("late AfterFunc: %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an AfterFunc set after the end did not run")
	}
	select {
	case got := <-ran:
		t.Fatalf("%q ran as well", got)
	default:
	}
}

// TestCut: a request's context reads as cut by its server once its
// connection is marked so, through contexts derived from it too; a context
// of another kind, when its cause is ErrCut.
func TestCut(t *testing.T) {
	t.Parallel()
	var mark atomic.Bool
	r := &reqContext{cut: &mark}
	derived, cancel := context.WithTimeout(r, time.Hour)
	defer cancel()
	if Cut(r) || Cut(derived) {
		t.Fatal("cut before the mark")
	}
	mark.Store(true)
	r.end()
	if !Cut(r) || !Cut(derived) {
		t.Error("not cut after the mark")
	}
	if Cut(&reqContext{}) {
		t.Error("a request without a connection's mark read as cut")
	}
	base, cut := context.WithCancelCause(context.Background())
	child, stop := context.WithCancel(base)
	defer stop()
	cut(ErrCut)
	if !Cut(child) {
		t.Error("a context whose cause is ErrCut not read as cut")
	}
	other, end := context.WithCancel(context.Background())
	end()
	if Cut(other) {
		t.Error("a context a client's leaving ended read as cut")
	}
}
