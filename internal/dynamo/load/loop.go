package load

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/zmtp"
)

// Timings of one subscription. A publisher that is down is retried with a
// full-jitter exponential backoff, so that a fleet restarting at once does
// not have every router reconnect in step.
const (
	// ConnectTimeout bounds resolving, dialling and the ZMTP handshake.
	ConnectTimeout = 10 * time.Second
	// ReconnectInitial and ReconnectMax bound the backoff between attempts.
	ReconnectInitial = 500 * time.Millisecond
	ReconnectMax     = 30 * time.Second
	// ResetAfter is how long a session must last for the backoff to return
	// to ReconnectInitial; a publisher that accepts and drops connections
	// keeps backing off.
	ResetAfter = 30 * time.Second
	// PendingWakeJitter spreads the subscriptions a new route wakes (a
	// broker session that now covers their namespace) over this long, so
	// that they do not all open their streams in the same instant.
	PendingWakeJitter = 500 * time.Millisecond
)

// Subscription states. A subscription is in exactly one of them at a time.
const (
	// StatePending: admitted, its loop not started yet, or waiting for a
	// route to its publisher (no broker session covers its namespace).
	StatePending = "pending"
	// StateConnecting: dialling and handshaking.
	StateConnecting = "connecting"
	// StateConnected: a session is up and messages are read.
	StateConnected = "connected"
	// StateBackoff: the last attempt or session failed; waiting to retry.
	StateBackoff = "backoff"
)

// Handler consumes what one subscription receives. Its methods run on the
// subscription's goroutine, one at a time.
type Handler interface {
	// Connected starts a session: whatever came before may have been missed.
	Connected()
	// Message is one message's frames, valid only during the call.
	Message(frames [][]byte, now time.Time)
	// Oversized: a message over the limits was skipped; the session goes on.
	Oversized()
	// Ended: an attempt or a session ended with err (never on cancellation).
	Ended(err error)
}

// OverLimitHandler is a Handler that judges a message over the limits
// itself, from what of it the limits kept, rather than counting it as
// Oversized: the limits bound memory, while why a message is refused (a
// frame too many, a frame too long) is the handler's to say.
type OverLimitHandler interface {
	Handler
	// OverLimit is a message cut to the limits: the frames kept, valid
	// only during the call, and what was cut.
	OverLimit(frames [][]byte, over *zmtp.OverLimitError, now time.Time)
}

// overLimit hands a message cut to the limits to h, as OverLimit when h
// judges such messages itself, as Oversized otherwise.
func overLimit(h Handler, frames [][]byte, over *zmtp.OverLimitError, now time.Time) {
	if o, ok := h.(OverLimitHandler); ok {
		o.OverLimit(frames, over, now)
		return
	}
	h.Oversized()
}

// Loop is one subscription to one publisher: dial, handshake, read until
// the session fails, back off, again, until it is stopped. It is the
// only subscription loop: the supervisor and both forms of tail-load run it.
//
// An established session is read on a fresh goroutine, and the goroutine
// that dialled ends: resolving, dialling and handshaking need a deep stack,
// a goroutine's stack stays grown until collections shrink it (and they
// halve it only while less than a quarter is used), and an idle
// subscription should hold only the small stack of a blocked read. The
// goroutines of one loop never overlap, so the Handler still sees one
// call at a time.
type Loop struct {
	Endpoint string
	Topic    string
	// Namespace is the Dynamo namespace advertising the publisher (a
	// broker connector routes by it).
	Namespace string
	Limits    zmtp.Limits
	Connector zmtp.Connector
	Handler   Handler
	// State, when set, is told every state the loop enters.
	State func(state string)
	// Carrier, when set, is told the carrier of each session before it is
	// reported connected: the broker id relaying it, "" when direct.
	Carrier func(id string)

	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc // the stretch without a session, nil in one
	zs      *zmtp.Sub          // the session, nil without one
}

// Run subscribes until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	done := make(chan struct{})
	l.Start(ctx, func() { close(done) })
	<-done
}

// Start runs the loop on its own goroutines until ctx ends or Stop is
// called, then calls done.
func (l *Loop) Start(ctx context.Context, done func()) {
	unbind := context.AfterFunc(ctx, l.Stop)
	l.start(func() {
		unbind()
		done()
	})
}

// start runs the loop until Stop, then calls done. A connected loop holds
// no context of its own: Stop closes its session directly, which keeps an
// idle subscription to its connection, its buffers and one goroutine.
func (l *Loop) start(done func()) {
	ctx, ok := l.detach()
	if !ok {
		done()
		return
	}
	go l.connect(ctx, ReconnectInitial, done)
}

// Stop ends the loop: the session's connection is closed, or the attempt
// or backoff under way abandoned. The loop calls its done once it is out.
func (l *Loop) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.stopped = true
	if l.cancel != nil {
		l.cancel()
	}
	if l.zs != nil {
		_ = l.zs.Close()
	}
}

// detach begins a stretch without a session (backoff, waiting for a route,
// connecting) under a context Stop cancels; false when the loop stopped.
func (l *Loop) detach() (context.Context, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.zs = nil
	if l.stopped {
		return nil, false
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	return ctx, true
}

// attach ends the stretch without a session and makes zs the session Stop
// closes; false when the loop stopped meanwhile.
func (l *Loop) attach(zs *zmtp.Sub) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancel()
	l.cancel = nil
	if l.stopped {
		return false
	}
	l.zs = zs
	return true
}

// connect dials until a session is up, backing off between attempts, and
// hands the session to a fresh goroutine. ctx is the stretch's, from
// detach.
func (l *Loop) connect(ctx context.Context, backoff time.Duration, done func()) {
	for {
		if !l.awaitRoute(ctx) {
			done()
			return
		}
		l.state(StateConnecting)
		zs, carrier, err := l.dial(ctx)
		if err == nil {
			if !l.attach(zs) {
				_ = zs.Close()
				done()
				return
			}
			// Everything but the reads happens here, before the handover.
			l.Handler.Connected()
			if l.Carrier != nil {
				l.Carrier(carrier)
			}
			l.state(StateConnected)
			s := &session{l: l, zs: zs, backoff: backoff, done: done, started: time.Now()}
			go s.run()
			return
		}
		if backoff, err = l.failed(ctx, err, backoff); err != nil {
			done()
			return
		}
	}
}

// session is one established session, read on its own goroutine.
type session struct {
	l       *Loop
	zs      *zmtp.Sub
	backoff time.Duration
	done    func()
	started time.Time
}

// run is a session goroutine's top frame, and where a quiet subscription
// waits: in Wake, with nothing else on the stack. A goroutine's stack
// grows to what handling messages takes and does not shrink back to the
// smallest size (the runtime keeps a stack unless a quarter of it would do
// with room to spare), so a session that goes quiet waits on a fresh
// goroutine: an idle subscription holds the smallest stack there is.
func (s *session) run() {
	err := s.zs.Wake()
	for err == nil {
		// Both waits happen here, in this shallow frame: what a
		// goroutine's stack holds while it waits is what the runtime
		// starts new goroutines with.
		if err = s.zs.Wait(); err == nil {
			err = s.one()
		}
	}
	if errors.Is(err, zmtp.ErrQuiet) {
		go s.run()
		return
	}
	s.end(err)
}

// one hands the next message to the handler; a message over the limits is
// reported and the session goes on.
func (s *session) one() error {
	frames, err := s.zs.Next()
	var over *zmtp.OverLimitError
	switch {
	case err == nil:
		s.l.Handler.Message(frames, time.Now())
	case errors.As(err, &over): // every ErrOversized is one
		overLimit(s.l.Handler, frames, over, time.Now())
	default:
		return err
	}
	return nil
}

// end closes the session and goes back to dialling on this goroutine.
func (s *session) end(err error) {
	_ = s.zs.Close()
	ctx, ok := s.l.detach()
	if !ok {
		s.done()
		return
	}
	backoff := s.backoff
	if time.Since(s.started) >= ResetAfter {
		backoff = ReconnectInitial
	}
	if backoff, err = s.l.failed(ctx, err, backoff); err != nil {
		s.done()
		return
	}
	s.l.connect(ctx, backoff, s.done)
}

// failed reports an ended attempt or session and waits a full-jitter delay
// of at most backoff; it returns the next backoff, or ctx's error when the
// loop is to end. A lost carrier is not the publisher's failure: the next
// attempt, through another carrier, waits at most ReconnectInitial and the
// backoff does not grow.
func (l *Loop) failed(ctx context.Context, err error, backoff time.Duration) (time.Duration, error) {
	if ctx.Err() != nil {
		return backoff, ctx.Err()
	}
	l.Handler.Ended(err)
	l.state(StateBackoff)
	next, wait := min(backoff*2, ReconnectMax), backoff
	if errors.Is(err, zmtp.ErrCarrierLost) {
		next, wait = backoff, ReconnectInitial
	}
	if !sleep(ctx, time.Duration(rand.Int64N(int64(wait)+1))) {
		return backoff, ctx.Err()
	}
	return next, nil
}

// awaitRoute waits, in state pending, while a gated connector has no route
// to the publisher; woken, it waits a random part of PendingWakeJitter. It
// returns false when ctx ended.
func (l *Loop) awaitRoute(ctx context.Context) bool {
	g, ok := l.Connector.(zmtp.Gated)
	if !ok {
		return true
	}
	waited := false
	for {
		wait := g.Ready(l.target())
		if wait == nil {
			break
		}
		if !waited {
			l.state(StatePending)
			waited = true
		}
		select {
		case <-ctx.Done():
			return false
		case <-wait:
		}
	}
	if waited {
		return sleep(ctx, time.Duration(rand.Int64N(int64(PendingWakeJitter)+1)))
	}
	return true
}

func (l *Loop) target() zmtp.Target {
	return zmtp.Target{Endpoint: l.Endpoint, Namespace: l.Namespace, Topic: l.Topic}
}

func (l *Loop) state(s string) {
	if l.State != nil {
		l.State(s)
	}
}

// dial connects and subscribes under ConnectTimeout, and names the
// session's carrier. A gated connector opens its relay under its own
// OpenTimeout, and the handshake then has ConnectTimeout of its own.
func (l *Loop) dial(ctx context.Context) (*zmtp.Sub, string, error) {
	open, gated := ConnectTimeout, false
	if g, ok := l.Connector.(zmtp.Gated); ok {
		open, gated = g.OpenTimeout(), true
	}
	octx, cancel := context.WithTimeout(ctx, open)
	defer cancel()
	conn, err := l.Connector.Connect(octx, l.target())
	if err != nil {
		return nil, "", err
	}
	hctx := octx
	if gated {
		var hcancel context.CancelFunc
		hctx, hcancel = context.WithTimeout(ctx, ConnectTimeout)
		defer hcancel()
	}
	zs, err := zmtp.Subscribe(hctx, conn, []byte(l.Topic), l.Limits)
	if err != nil {
		_ = conn.Close()
		return nil, "", err
	}
	carrier := ""
	if c, ok := conn.(zmtp.Carried); ok {
		carrier = c.Carrier()
	}
	return zs, carrier, nil
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
