package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/continuum-router/continuum/internal/dynamo/discovery"
)

// Watch lifetimes. A pass lists, then watches from the list's
// resourceVersion until the watch ends; the next pass lists again.
const (
	// WatchTimeout is what a watch asks the server for: end after 290 s.
	WatchTimeout = 290 * time.Second
	// IdleDeadline ends a watch stream that delivered nothing (no event, no
	// bookmark) for this long: a half-open connection must not stay
	// "connected".
	IdleDeadline = 320 * time.Second
)

// Timing holds the lifetimes a source runs under; tests shorten them.
type Timing struct {
	Seed, WatchTimeout, IdleDeadline time.Duration
}

// DefaultTiming is what the sources run under outside tests.
var DefaultTiming = Timing{Seed: discovery.SeedTimeout, WatchTimeout: WatchTimeout, IdleDeadline: IdleDeadline}

// ResetAfter is the session length after which the reconnect backoff
// returns to its initial delay: min(max, 290 s), so the normal end of a
// watch never grows it.
func ResetAfter(max time.Duration) time.Duration { return min(max, WatchTimeout) }

// connect builds a pass's clients: its REST configuration and typed
// clientset.
func connect(o ClientOptions) (*rest.Config, *kubernetes.Clientset, error) {
	rc, err := RESTConfig(o)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return rc, cs, nil
}

// lister lists one page.
type lister[T any] func(ctx context.Context, opts metav1.ListOptions) (items []T, meta metav1.ListMeta, err error)

// seedCalls bounds a source's requests of the seed phase by the pass's
// deadline even where a request does not heed its context: client-go runs
// a kubeconfig exec credential plugin with no context and under its
// authenticator's lock, so a plugin that never answers (one waiting for a
// browser login, say) would hold a list or a watch open, and with it the
// pass, past the seed timeout. A request still running at the deadline is
// left to finish on its own goroutine, which discards what it gets; the
// next pass waits, within its own deadline, for that request to return
// before it sends another, so a source has at most one such request
// outstanding. Passes run one at a time.
type seedCalls struct {
	// abandoned is closed when the request a pass gave up on returns; nil
	// when there is none.
	abandoned chan struct{}
}

// call runs f and returns its result, or an error as soon as ctx (the
// pass's seed context) ends while f still runs; f then finishes on its own
// and discard, when set, gets what it returned without an error.
func call[T any](ctx context.Context, c *seedCalls, seed time.Duration, f func() (T, error), discard func(T)) (T, error) {
	var zero T
	if c.abandoned != nil {
		select {
		case <-c.abandoned:
			c.abandoned = nil
		case <-ctx.Done():
			return zero, fmt.Errorf("a request given up on at an earlier pass's %v seed timeout has not returned (a kubeconfig exec credential plugin that does not answer?): %w", seed, ctx.Err())
		}
	}
	type result struct {
		v   T
		err error
	}
	got, giveUp, done := make(chan result), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		v, err := f()
		select {
		case got <- result{v, err}:
		case <-giveUp:
			if err == nil && discard != nil {
				discard(v)
			}
		}
	}()
	select {
	case r := <-got:
		return r.v, r.err
	case <-ctx.Done():
		close(giveUp)
		c.abandoned = done
		return zero, fmt.Errorf("no answer within the %v seed timeout (a kubeconfig exec credential plugin that does not answer?): %w", seed, ctx.Err())
	}
}

// listAll lists every page of size page, calling fn for each item, and
// returns the list's resourceVersion. It stops reading after limit items
// (fn is told nothing about the rest) and reports how many were cut. Each
// page is a request of the seed phase, bounded by ctx through c.
func listAll[T any](ctx context.Context, c *seedCalls, seed time.Duration, list lister[T], selector string, page int64, limit int, fn func(*T)) (rv string, cut bool, err error) {
	opts := metav1.ListOptions{LabelSelector: selector, Limit: page}
	n := 0
	type pageOf struct {
		items []T
		meta  metav1.ListMeta
	}
	for {
		p, err := call(ctx, c, seed, func() (pageOf, error) {
			items, meta, err := list(ctx, opts)
			return pageOf{items, meta}, err
		}, nil)
		if err != nil {
			return "", false, err
		}
		if rv == "" {
			rv = p.meta.ResourceVersion
		}
		for i := range p.items {
			if n >= limit {
				return rv, true, nil
			}
			fn(&p.items[i])
			n++
		}
		if p.meta.Continue == "" {
			return rv, false, nil
		}
		opts.Continue = p.meta.Continue
	}
}

// watchEnd records how a watch's response ended: the first error a read of
// its body returned (io.EOF when the server ended the response cleanly), or
// the decode error that ended the stream, which wins over a clean end read
// ahead of it. A watch's result channel closes the same way for the
// server's end and a cut connection (client-go reports neither an
// unexpected EOF nor a reset connection), so this is how a stream tells
// them apart.
type watchEnd struct {
	mu  sync.Mutex
	err error
}

func (e *watchEnd) set(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err == nil || errors.Is(e.err, io.EOF) && !errors.Is(err, io.EOF) {
		e.err = err
	}
}

func (e *watchEnd) get() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

type watchEndKey struct{}

// watchEndOf is the watchEnd a watch request's context carries, or nil.
func watchEndOf(ctx context.Context) *watchEnd {
	e, _ := ctx.Value(watchEndKey{}).(*watchEnd)
	return e
}

// trackWatchEnds wraps the body of every response to a request whose
// context carries a watchEnd, so that how the body ended is recorded there.
func trackWatchEnds(rt http.RoundTripper) http.RoundTripper { return endTracker{rt} }

type endTracker struct{ rt http.RoundTripper }

func (t endTracker) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if end := watchEndOf(req.Context()); err == nil && end != nil {
		resp.Body = &endBody{ReadCloser: resp.Body, end: end}
	}
	return resp, err
}

// WrappedRoundTripper lets client-go see through the wrapper.
func (t endTracker) WrappedRoundTripper() http.RoundTripper { return t.rt }

type endBody struct {
	io.ReadCloser
	end *watchEnd
}

func (b *endBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.end.set(err)
	}
	return n, err
}

// maxListBytes bounds an answer of the API server other than a watch (a
// list page): what a source may hold in all, and one resource more (the
// DWM list reads its pages within the same bound).
const maxListBytes = MaxRecordBytes + maxWatchEventBytes

// answerBounds are the bounds boundBodies reads answers within (tests
// make them small).
var answerBounds = struct{ list, event int }{maxListBytes, maxWatchEventBytes}

// boundBodies caps what one answer of the API server may make the client
// hold: client-go reads a list page whole, and frames each watch event
// whole before decoding it, so a page or an event of any size (from a
// misbehaving server, or whatever answers at its address) would be held
// in memory. A watch's events, one a line, are capped at
// maxWatchEventBytes each (as the DWM watch reads them), any other answer
// at maxListBytes in all; past the cap the read fails, and with it the
// request.
func boundBodies(rt http.RoundTripper) http.RoundTripper { return bodyBound{rt} }

type bodyBound struct{ rt http.RoundTripper }

func (t bodyBound) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err == nil {
		b := &boundedBody{ReadCloser: resp.Body, limit: answerBounds.list}
		if req.URL.Query().Get("watch") == "true" {
			b.perLine, b.limit = true, answerBounds.event
		}
		resp.Body = b
	}
	return resp, err
}

// WrappedRoundTripper lets client-go see through the wrapper.
func (t bodyBound) WrappedRoundTripper() http.RoundTripper { return t.rt }

// boundedBody fails a read once more than limit bytes were read in all,
// or, perLine, since the last newline.
type boundedBody struct {
	io.ReadCloser
	perLine  bool
	n, limit int
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.n >= b.limit {
		if b.perLine {
			return 0, fmt.Errorf("a watch event of the API server larger than %d bytes", b.limit)
		}
		return 0, fmt.Errorf("an answer of the API server larger than %d bytes", b.limit)
	}
	p = p[:min(len(p), b.limit-b.n)]
	n, err := b.ReadCloser.Read(p)
	if b.perLine {
		if i := bytes.LastIndexByte(p[:n], '\n'); i >= 0 {
			b.n = n - 1 - i
			return n, err
		}
	}
	b.n += n
	return n, err
}

// openWatch opens a watch from rv that asks the server to end after
// t.WatchTimeout, within the pass's seed context seedCtx; the stream then
// lives as long as ctx, until stopped.
func openWatch(ctx, seedCtx context.Context, c *seedCalls, w func(context.Context, metav1.ListOptions) (watch.Interface, error), selector, rv string, t Timing) (cancelWatch, error) {
	secs := int64(t.WatchTimeout / time.Second)
	opts := metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv, Watch: true, AllowWatchBookmarks: true, TimeoutSeconds: &secs}
	// The stream lives in a context of its own: the seed context's end
	// cancels it while it opens, Stop cancels it after. The context also
	// carries where the response's end is recorded.
	end := &watchEnd{}
	wctx, cancel := context.WithCancel(context.WithValue(ctx, watchEndKey{}, end))
	stopCancel := context.AfterFunc(seedCtx, cancel)
	wi, err := call(seedCtx, c, t.Seed, func() (watch.Interface, error) { return w(wctx, opts) }, func(wi watch.Interface) { wi.Stop() })
	if !stopCancel() {
		if err == nil {
			wi.Stop()
		}
		cancel()
		return cancelWatch{}, fmt.Errorf("opening the watch took longer than the %v seed timeout", t.Seed)
	}
	if err != nil {
		cancel()
		return cancelWatch{}, err
	}
	return cancelWatch{Interface: wi, cancel: cancel, end: end}, nil
}

// cancelWatch ends its context when stopped.
type cancelWatch struct {
	watch.Interface
	cancel context.CancelFunc
	end    *watchEnd
}

func (c cancelWatch) Stop() {
	c.Interface.Stop()
	c.cancel()
}

// stream is one open watch with its own idle deadline.
type stream struct {
	name    string
	w       watch.Interface
	end     *watchEnd
	idle    time.Duration
	timer   *time.Timer
	start   time.Time
	timeout time.Duration // what the server was asked for
}

func newStream(name string, w cancelWatch, t Timing) *stream {
	return &stream{name: name, w: w, end: w.end, idle: t.IdleDeadline, timer: time.NewTimer(t.IdleDeadline), start: time.Now(), timeout: t.WatchTimeout}
}

func (s *stream) stop() {
	s.w.Stop()
	s.timer.Stop()
}

// receive takes one value off the result channel: the event's type and
// object to apply, nothing (a bookmark: the idle deadline restarts), or the
// error that ends the pass (the channel closed, or an ERROR event).
func (s *stream) receive(ev watch.Event, ok bool) (watch.EventType, runtime.Object, error) {
	if !ok {
		return "", nil, s.closed()
	}
	s.timer.Reset(s.idle)
	switch ev.Type {
	case watch.Error:
		return "", nil, errorEvent(s.name, ev)
	case watch.Bookmark:
		return "", nil, nil
	}
	return ev.Type, ev.Object, nil
}

// closed is why a stream whose result channel closed ended: the server's
// normal end when the response ended cleanly after (nearly) as long as it
// asked for; else a failure: a transport error (a cut connection, an
// unexpected EOF, an undecodable event) whenever it came, or an early EOF
// (a proxy's timeout).
func (s *stream) closed() error {
	lived := time.Since(s.start)
	if err := s.end.get(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s watch: broken after %v: %w", s.name, lived.Round(time.Millisecond), err)
	}
	if lived < s.timeout*9/10 {
		return fmt.Errorf("%s watch: ended early, after %v of %v", s.name, lived.Round(time.Millisecond), s.timeout)
	}
	return fmt.Errorf("%s watch: %w", s.name, discovery.ErrWatchExpired)
}

func (s *stream) idleErr() error {
	return fmt.Errorf("%s watch: nothing arrived for %v (half-open connection?)", s.name, s.idle)
}

func errorEvent(name string, ev watch.Event) error {
	err := apierrors.FromObject(ev.Object)
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code == http.StatusGone {
		return fmt.Errorf("%s watch: 410 Gone (%s); re-listing", name, st.Status().Message)
	}
	return fmt.Errorf("%s watch: %w", name, err)
}
