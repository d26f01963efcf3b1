package h1

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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

// reqContext is a request's context: it ends (context.Canceled) when the
// request does, and holds the EndNotifier function. It is a context of its
// own rather than a context.WithCancel so that a request that derives no
// context from it allocates nothing for it: its Done channel is made only
// when asked for. Contexts derived from it (context.WithTimeout and the
// like, context.AfterFunc) link to it through its AfterFunc method, which
// the context package uses for any parent that has one, as directly as
// they link to a cancelCtx and with no goroutine.
type reqContext struct {
	ended atomic.Bool // read without the lock by Err
	// cut is the connection's mark that the server closed it at the end
	// of its shutdown grace (Close), set for the request it was serving.
	cut *atomic.Bool

	mu     sync.Mutex
	done   chan struct{} // made by the first Done; closed by end
	hook   func()
	afters []*afterFunc
}

// afterFunc is one function of AfterFunc, by pointer so that its stop
// finds it.
type afterFunc struct{ f func() }

var _ EndNotifier = (*reqContext)(nil)

// closedDone is the Done channel of a context asked for it after it ended.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (r *reqContext) Deadline() (time.Time, bool) { return time.Time{}, false }

func (r *reqContext) Done() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		if r.ended.Load() {
			return closedDone
		}
		r.done = make(chan struct{})
	}
	return r.done
}

// ErrCut is the cause a server gives the contexts of the requests it
// cuts at the end of its shutdown grace (the lean server's Cut reports
// those; a net/http server's requests carry it when their base context is
// cancelled with it).
var ErrCut = errors.New("the server cut the request at the end of its shutdown grace")

// Cut reports whether a request's context ended because its server cut it
// at the end of a shutdown's grace, rather than because its client left:
// the lean server's requests that its Close ended, or a context whose
// cause is ErrCut.
func Cut(ctx context.Context) bool {
	if r, ok := ctx.Value(reqContextKey{}).(*reqContext); ok {
		return r.cut != nil && r.cut.Load()
	}
	return errors.Is(context.Cause(ctx), ErrCut)
}

func (r *reqContext) Err() error {
	if r.ended.Load() {
		return context.Canceled
	}
	return nil
}

// reqContextKey finds a request's reqContext from a context derived from
// it (Cut).
type reqContextKey struct{}

// Value holds only the context itself, under reqContextKey: the lean
// server puts no other values in a request's context.
func (r *reqContext) Value(key any) any {
	if key == (reqContextKey{}) {
		return r
	}
	return nil
}

// AfterFunc runs f when the context ends, on the goroutine that ends it,
// or now when it has ended; stop forgets f, false when f has run or is
// running. (The context package calls it with the function that ends a
// derived context.)
func (r *reqContext) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	r.mu.Lock()
	if r.ended.Load() {
		r.mu.Unlock()
		f()
		return func() bool { return false }
	}
	r.afters = append(r.afters, a)
	r.mu.Unlock()
	return func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		i := slices.Index(r.afters, a)
		if i < 0 {
			return false
		}
		r.afters = slices.Delete(r.afters, i, i+1)
		return true
	}
}

// end ends the context and runs its functions: the EndNotifier's first,
// then AfterFunc's in the order they were set. A second end does nothing.
func (r *reqContext) end() {
	r.mu.Lock()
	if r.ended.Load() {
		r.mu.Unlock()
		return
	}
	r.ended.Store(true)
	if r.done != nil {
		close(r.done)
	}
	f, afters := r.hook, r.afters
	r.hook, r.afters = nil, nil
	r.mu.Unlock()
	if f != nil {
		f()
	}
	for _, a := range afters {
		a.f()
	}
}

func (r *reqContext) AfterEnd(f func()) bool {
	r.mu.Lock()
	if r.hook != nil {
		r.mu.Unlock()
		return false
	}
	if r.ended.Load() {
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
