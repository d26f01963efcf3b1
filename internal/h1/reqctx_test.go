package h1

import (
	"context"
	"errors"
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
