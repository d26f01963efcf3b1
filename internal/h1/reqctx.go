package h1

import (
	"context"
	"sync"
)

// EndNotifier is offered by the context of a request the lean server
// serves: one function to run when the request's context ends (the
// client left, a write to it failed, or the handler returned). A proxy
// uses it to cut its upstream exchange at once, as it would with
// context.AfterFunc, without the two contexts' worth of allocations and
// locking that costs per request.
type EndNotifier interface {
	// AfterEnd arranges for f to run when the context ends, on the
	// goroutine that ends it, or now when it has ended. It holds one
	// function at a time: false, and f not kept, when one is set.
	AfterEnd(f func()) bool
	// StopAfterEnd forgets the function set (by the one caller whose
	// AfterEnd was accepted); false when it has run or is running.
	StopAfterEnd() bool
}

// reqContext is a request's context: a cancelable context (so that
// context.WithTimeout and friends below it link to it as they do to any)
// and the EndNotifier function.
type reqContext struct {
	context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	ended bool
	hook  func()
}

var _ EndNotifier = (*reqContext)(nil)

func (r *reqContext) init() {
	r.Context, r.cancel = context.WithCancel(context.Background())
}

// end cancels the context and runs the function, if one is set.
func (r *reqContext) end() {
	r.cancel()
	r.mu.Lock()
	f := r.hook
	r.hook, r.ended = nil, true
	r.mu.Unlock()
	if f != nil {
		f()
	}
}

func (r *reqContext) AfterEnd(f func()) bool {
	r.mu.Lock()
	if r.hook != nil {
		r.mu.Unlock()
		return false
	}
	if r.ended {
		r.mu.Unlock()
		f()
		return true
	}
	r.hook = f
	r.mu.Unlock()
	return true
}

func (r *reqContext) StopAfterEnd() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hook == nil {
		return false
	}
	r.hook = nil
	return true
}
