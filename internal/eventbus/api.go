package eventbus

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/continuum-router/continuum/internal/zmtp"
)

// busError is an API error; a lost one wraps zmtp.ErrCarrierLost, so that
// a subscription tries the next session at once instead of backing off.
type busError struct {
	msg  string
	lost bool
}

func (e *busError) Error() string { return e.msg }

func (e *busError) Unwrap() error {
	if e.lost {
		return zmtp.ErrCarrierLost
	}
	return nil
}

// Errors of the API. Check them with errors.Is.
var (
	// ErrNoSession: no session covers the namespace (or announces the
	// backend).
	ErrNoSession error = &busError{"no event bus session covers the target", true}
	// ErrTooManyStreams: every covering session is at its stream limit.
	ErrTooManyStreams error = &busError{msg: "every covering event bus session is at its stream limit"}
	// ErrOpenTimeout: the client did not open the data stream within
	// OpenTimeout.
	ErrOpenTimeout error = &busError{msg: "the event bus stream did not open in time"}
	// ErrSessionClosed: the session ended (or drained) before or while the
	// stream was open.
	ErrSessionClosed error = &busError{"the event bus session ended", true}
	// ErrBusy: the session's control channel is full.
	ErrBusy error = &busError{msg: "the event bus session's control channel is full"}
	// ErrInvalidTarget: the target is not one a stream can be opened to.
	ErrInvalidTarget error = &busError{msg: "invalid event bus target"}
)

// RefusedError is a stream the client refused or ended, with its code
// (target_not_advertised, connect_failed, ...). A draining client's
// refusal is a lost carrier; a stream the publisher closed before its data
// stream was taken here is a protocol error.
type RefusedError struct{ Code string }

func (e *RefusedError) Error() string { return "event bus stream refused: " + e.Code }

// Unwrap makes a draining refusal a lost carrier, and publisher_closed a
// protocol error: the client reached the publisher and relayed until it
// closed, and the end came on the control channel before the data stream
// arrived (two streams of the session, in no set order). No greeting was
// read, so it is what a direct connection the publisher closes before its
// greeting reads as.
func (e *RefusedError) Unwrap() error {
	switch e.Code {
	case CodeDraining:
		return zmtp.ErrCarrierLost
	case CodePublisherClosed:
		return zmtp.ErrProtocol
	}
	return nil
}

// Weight is the rendezvous weight of a target on the session of
// clientID: the top 64 bits of SHA-256 over the key's length (8 bytes,
// big-endian), the key, and the client id. The key is the namespace,
// host, decimal port and topic joined by NUL bytes (none of them holds
// one). The covering session with the highest weight gets the stream, so
// that every router places a publisher on the same broker and adding a
// broker moves only the streams it now wins.
func Weight(t Target, clientID string) uint64 {
	key := t.Namespace + "\x00" + t.Host + "\x00" + strconv.Itoa(t.Port) + "\x00" + t.Topic
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(key)))
	h.Write(n[:])
	h.Write([]byte(key))
	h.Write([]byte(clientID))
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}

// OpenStream opens a stream to a publisher through the highest-weight
// broker session that declared its namespace, is not draining and is
// under its stream limit, and waits up to OpenTimeout for its data
// stream. Closing the stream sends unsubscribe.
func (b *Bus) OpenStream(ctx context.Context, t Target) (*Stream, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidTarget, err)
	}
	b.mu.Lock()
	var best *session
	var bestW uint64
	covered := false
	for _, s := range b.sessions {
		if s.role != RoleBroker || s.draining || !slices.Contains(s.namespaces, t.Namespace) {
			continue
		}
		covered = true
		if len(s.streams) >= s.limits.MaxStreams {
			continue
		}
		if w := Weight(t, s.entID); best == nil || w > bestW || w == bestW && s.entID < best.entID {
			best, bestW = s, w
		}
	}
	if best == nil {
		b.mu.Unlock()
		if covered {
			return nil, ErrTooManyStreams
		}
		return nil, ErrNoSession
	}
	tc := t
	st, err := b.commandLocked(best, &Message{Type: TypeSubscribe, Target: &tc})
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return b.await(ctx, st)
}

// OpenAnnouncedStream opens the SSE stream of an announced backend
// through the kv_listener session announcing it with the fewest streams,
// resuming after lastEventID when set.
func (b *Bus) OpenAnnouncedStream(ctx context.Context, backend string, lastEventID *uint64) (*Stream, error) {
	if err := checkName("backend", backend); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidTarget, err)
	}
	b.mu.Lock()
	var best *session
	covered := false
	for _, s := range b.sessions {
		if s.role != RoleKVListener || s.draining || !slices.Contains(s.sources, backend) {
			continue
		}
		covered = true
		if len(s.streams) >= s.limits.MaxStreams {
			continue
		}
		if best == nil || len(s.streams) < len(best.streams) || len(s.streams) == len(best.streams) && s.entID < best.entID {
			best = s
		}
	}
	if best == nil {
		b.mu.Unlock()
		if covered {
			return nil, ErrTooManyStreams
		}
		return nil, ErrNoSession
	}
	at := &AnnouncedTarget{Backend: backend}
	if lastEventID != nil {
		id := *lastEventID
		at.LastEventID = &id
	}
	st, err := b.commandLocked(best, &Message{Type: TypeSubscribe, Announced: at})
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return b.await(ctx, st)
}

// commandLocked registers a stream on s and queues its subscribe. b.mu
// is held.
func (b *Bus) commandLocked(s *session, m *Message) (*stream, error) {
	st := &stream{id: newID(), sess: s, ready: make(chan *Stream, 1), ended: make(chan struct{})}
	m.StreamID = st.id
	if !s.send(m) {
		return nil, ErrBusy
	}
	s.streams[st.id] = st
	return st, nil
}

// await waits for a commanded stream's data stream.
func (b *Bus) await(ctx context.Context, st *stream) (*Stream, error) {
	t := time.NewTimer(b.t.open)
	defer t.Stop()
	select {
	case c := <-st.ready:
		return c, nil
	case <-st.ended:
		select {
		case c := <-st.ready:
			_ = c.Close()
		default:
		}
		b.mu.Lock()
		code, lost := st.endCode, st.lost
		b.mu.Unlock()
		switch {
		case code == CodeDraining:
			return nil, &RefusedError{Code: code}
		case lost:
			return nil, ErrSessionClosed
		}
		return nil, &RefusedError{Code: code}
	case <-ctx.Done():
		b.abandon(st)
		return nil, context.Cause(ctx)
	case <-t.C:
		b.abandon(st)
		return nil, ErrOpenTimeout
	}
}

// abandon gives up on a stream that has not opened: the client is told to
// unsubscribe, and a data stream that arrived meanwhile is closed.
func (b *Bus) abandon(st *stream) {
	b.mu.Lock()
	if st.state == statePending {
		b.mu.Unlock()
		b.release(st, true)
		return
	}
	opened := st.state == stateOpen || len(st.ready) > 0
	b.mu.Unlock()
	if opened {
		_ = (<-st.ready).Close()
	}
}

// SessionCount is the number of sessions past their welcome.
func (b *Bus) SessionCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sessions)
}

// CoveredNamespaces lists the namespaces some non-draining broker session
// declared, sorted.
func (b *Bus) CoveredNamespaces() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, s := range b.sessions {
		if s.role == RoleBroker && !s.draining {
			out = append(out, s.namespaces...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Covers reports whether a non-draining broker session declared ns.
func (b *Bus) Covers(ns string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.sessions {
		if s.role == RoleBroker && !s.draining && slices.Contains(s.namespaces, ns) {
			return true
		}
	}
	return false
}

// NamespaceCoverage is how one namespace is covered.
type NamespaceCoverage struct {
	Namespace string
	// Brokers are the ids of the non-draining broker sessions that
	// declared it, sorted.
	Brokers []string
}

// Coverage reports, for each namespace, the brokers covering it.
func (b *Bus) Coverage(namespaces []string) []NamespaceCoverage {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]NamespaceCoverage, 0, len(namespaces))
	for _, ns := range namespaces {
		c := NamespaceCoverage{Namespace: ns, Brokers: []string{}}
		for _, s := range b.sessions {
			if s.role == RoleBroker && !s.draining && slices.Contains(s.namespaces, ns) {
				c.Brokers = append(c.Brokers, s.entID)
			}
		}
		slices.Sort(c.Brokers)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b NamespaceCoverage) int { return cmp.Compare(a.Namespace, b.Namespace) })
	return out
}

// LocalAddr is the listener's address, nil while it is not listening.
func (b *Bus) LocalAddr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addr
}

// Running reports whether the listener is listening.
func (b *Bus) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.running
}

// Changed returns a channel closed at the next change of the sessions (one
// opened, closed or draining): a watch that needs no polling.
func (b *Bus) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}
