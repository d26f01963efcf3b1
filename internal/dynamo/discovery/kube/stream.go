package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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

// listAll lists every page of size page, calling fn for each item, and
// returns the list's resourceVersion. It stops reading after limit items
// (fn is told nothing about the rest) and reports how many were cut.
func listAll[T any](ctx context.Context, list lister[T], selector string, page int64, limit int, fn func(*T)) (rv string, cut bool, err error) {
	opts := metav1.ListOptions{LabelSelector: selector, Limit: page}
	n := 0
	for {
		items, meta, err := list(ctx, opts)
		if err != nil {
			return "", false, err
		}
		if rv == "" {
			rv = meta.ResourceVersion
		}
		for i := range items {
			if n >= limit {
				return rv, true, nil
			}
			fn(&items[i])
			n++
		}
		if meta.Continue == "" {
			return rv, false, nil
		}
		opts.Continue = meta.Continue
	}
}

// openWatch opens a watch from rv that asks the server to end after
// t.WatchTimeout, within the pass's seed deadline.
func openWatch(ctx context.Context, seedDeadline time.Time, w func(context.Context, metav1.ListOptions) (watch.Interface, error), selector, rv string, t Timing) (watch.Interface, error) {
	secs := int64(t.WatchTimeout / time.Second)
	opts := metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv, Watch: true, AllowWatchBookmarks: true, TimeoutSeconds: &secs}
	// The stream lives in a context of its own: the seed deadline cancels it
	// while it opens, Stop cancels it after.
	wctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(time.Until(seedDeadline), cancel)
	wi, err := w(wctx, opts)
	if !timer.Stop() {
		if wi != nil {
			wi.Stop()
		}
		cancel()
		return nil, fmt.Errorf("opening the watch took longer than the %v seed timeout", t.Seed)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return cancelWatch{Interface: wi, cancel: cancel}, nil
}

// cancelWatch ends its context when stopped.
type cancelWatch struct {
	watch.Interface
	cancel context.CancelFunc
}

func (c cancelWatch) Stop() {
	c.Interface.Stop()
	c.cancel()
}

// stream is one open watch with its own idle deadline.
type stream struct {
	name    string
	w       watch.Interface
	idle    time.Duration
	timer   *time.Timer
	start   time.Time
	timeout time.Duration // what the server was asked for
}

func newStream(name string, w watch.Interface, t Timing) *stream {
	return &stream{name: name, w: w, idle: t.IdleDeadline, timer: time.NewTimer(t.IdleDeadline), start: time.Now(), timeout: t.WatchTimeout}
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
// normal end when it ran (nearly) as long as it asked for, else an early
// EOF (a cut connection, a proxy's timeout), which is a failure.
func (s *stream) closed() error {
	if lived := time.Since(s.start); lived < s.timeout*9/10 {
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
