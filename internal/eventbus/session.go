package eventbus

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"
)

// session is one client's control channel, past its welcome.
type session struct {
	bus        *Bus
	id         string
	role       string
	namespaces []string
	sources    []string
	limits     Limits
	heartbeat  time.Duration
	idle       time.Duration
	// byToken: authenticated by a bearer token (tokenHash), else by its
	// client certificate under the connection's CA generation.
	byToken   bool
	tokenHash [32]byte
	bc        *busConn
	out       chan []byte // control lines to send, bounded
	done      chan struct{}
	lastSeen  atomic.Int64 // unix nanoseconds of the last line received
	// ignored counts the lines read ignored, and ignoredLogged is when
	// they were last logged (the reader's alone: ignore).
	ignored       int
	ignoredLogged time.Time

	// Guarded by bus.mu.
	entID    string
	closed   bool
	code     string
	why      string
	draining bool
	streams  map[string]*stream
}

// newID returns 32 lowercase hex characters of randomness.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// enterPreHello admits one hello at a time per credential, so that one
// client cannot take every session slot with handshakes it never ends.
func (b *Bus) enterPreHello(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.preHello[id] {
		return false
	}
	b.preHello[id] = true
	return true
}

func (b *Bus) leavePreHello(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.preHello, id)
}

// serveSession is POST /bus/v1/session: hello, welcome, then commands and
// reports until the session ends.
func (b *Bus) serveSession(bc *busConn, ent *entry, w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	if !b.enterPreHello(ent.id) {
		b.refuse(w, http.StatusTooManyRequests, CodeTooManySessions, "a session of this credential is already being opened")
		return
	}
	lr := NewLineReader(r.Body, MaxLineBytes)
	hello, status, code, why := b.readHello(rc, lr)
	if code == "" {
		if code, why = ent.checkHello(&hello); code != "" {
			status = http.StatusForbidden
			if code == CodeUnsupportedVersion {
				status = http.StatusBadRequest
			}
		}
	}
	var s *session
	if code == "" {
		s, status, code, why = b.register(bc, ent, &hello, r.Header.Get("Authorization"))
	}
	b.leavePreHello(ent.id)
	if code != "" {
		b.refuse(w, status, code, why)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	welcome := &Message{Type: TypeWelcome, SessionID: s.id, Version: ProtocolVersion, Limits: &s.limits}
	_, err := w.Write(Encode(welcome))
	if err == nil {
		err = rc.Flush()
	}
	if err != nil {
		b.closeSession(s, "", "")
		return
	}
	bc.authed.Store(true)
	bc.accepted()
	defer b.requestEnded(bc)
	b.logger.Info("event bus session opened", "broker", ent.id, "role", s.role, "session", s.id,
		"namespaces", s.namespaces, "sources", s.sources)
	s.serve(rc, w, r, lr)
}

// readHello reads the hello line within the hello timeout.
func (b *Bus) readHello(rc *http.ResponseController, lr *LineReader) (m Message, status int, code, why string) {
	_ = rc.SetReadDeadline(time.Now().Add(b.t.hello))
	line, err := lr.Next()
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return m, http.StatusRequestTimeout, CodeHelloTimeout, "no hello within the hello timeout"
		}
		if errors.Is(err, ErrLineTooLong) {
			// The channel is still open: saying it ended would send the
			// client's operator after the wrong fault.
			return m, http.StatusBadRequest, CodeInvalidHello, fmt.Sprintf("the hello line is longer than %d bytes", MaxLineBytes)
		}
		return m, http.StatusBadRequest, CodeInvalidHello, "the control channel ended before a hello line"
	}
	_ = rc.SetReadDeadline(time.Time{})
	m, err = Decode(line)
	if err != nil {
		return m, http.StatusBadRequest, CodeInvalidHello, err.Error()
	}
	if m.Type != TypeHello {
		return m, http.StatusBadRequest, CodeInvalidHello, "the first line is not a hello"
	}
	return m, 0, "", ""
}

// register adds a session for ent; an older session of the same entry is
// superseded. It refuses when max_sessions are open, and a session the
// credentials of now no longer allow (see below), with the refusal's
// status.
func (b *Bus) register(bc *busConn, ent *entry, hello *Message, auth string) (*session, int, string, string) {
	st := b.settings.Load()
	s := &session{bus: b, id: "sess-" + newID(), role: hello.Role, entID: ent.id, bc: bc,
		namespaces: slices.Clone(hello.DynamoNamespaces), sources: slices.Clone(hello.Sources),
		heartbeat: st.HeartbeatInterval, idle: st.IdleTimeout,
		limits: Limits{MaxStreams: st.MaxStreamsPerSession, StreamBufferBytes: StreamBudget(st.MaxSessionBufferBytes, st.MaxStreamsPerSession),
			HeartbeatIntervalMs: st.HeartbeatInterval.Milliseconds(), IdleTimeoutMs: st.IdleTimeout.Milliseconds()},
		// Every stream's subscribe and unsubscribe fit, and heartbeats.
		out:  make(chan []byte, 2*st.MaxStreamsPerSession+16),
		done: make(chan struct{}), streams: map[string]*stream{}}
	if auth != "" {
		s.byToken, s.tokenHash = true, ent.hash
	}
	s.lastSeen.Store(time.Now().UnixNano())
	b.mu.Lock()
	defer b.mu.Unlock()
	// ent was read when the request arrived; a reload may have landed
	// while the hello was awaited. Apply changes the credentials and the CA
	// generation under b.mu and judges the sessions registered by then, so
	// the session is judged here against the credentials of now exactly
	// as Apply judges one: whichever comes first, no session outlives the
	// reload that removed, replaced, re-roled or narrowed its credential.
	if code, why := sessionAllowed(s, b.creds.Load().byID[ent.id], bc.caGen != b.caGen); code != "" {
		status := http.StatusForbidden
		if code == CodeCredentialRevoked {
			status = http.StatusUnauthorized
		}
		return nil, status, code, why
	}
	old := b.byEntry[ent.id]
	// max_sessions as of now: Apply stores settings under b.mu.
	if old == nil && len(b.sessions) >= b.settings.Load().MaxSessions {
		return nil, http.StatusTooManyRequests, CodeTooManySessions, "the router holds max_sessions sessions"
	}
	if b.stopped {
		return nil, http.StatusTooManyRequests, CodeTooManySessions, "the router is shutting down"
	}
	if old != nil {
		b.closeSessionLocked(old, CodeSessionSuperseded, "a newer session of this credential replaced it")
	}
	b.sessions[s.id] = s
	b.byEntry[ent.id] = s
	b.metrics.Sessions.Set(float64(len(b.sessions)))
	b.notifyLocked()
	return s, 0, "", ""
}

// serve writes commands and heartbeats and reads the client's reports
// until the session ends; then it says why (when the router ended it) and
// returns, which ends the control channel.
func (s *session) serve(rc *http.ResponseController, w http.ResponseWriter, r *http.Request, lr *LineReader) {
	b := s.bus
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		s.read(lr)
	}()
	hb := time.NewTicker(s.heartbeat)
	defer hb.Stop()
	// The idle timer is due idle_timeout after the last line received;
	// lines only move lastSeen, and the timer, when it fires early, is
	// armed again for the rest.
	idle := time.NewTimer(s.idle)
	defer idle.Stop()
	var seq uint64
loop:
	for {
		var line []byte
		select {
		case line = <-s.out:
		case now := <-idle.C:
			if left := time.Unix(0, s.lastSeen.Load()).Add(s.idle).Sub(now); left > 0 {
				idle.Reset(left)
				continue
			}
			b.closeSession(s, CodeIdleTimeout, "nothing received within idle_timeout")
			continue
		case <-hb.C:
			seq++
			line = Encode(&Message{Type: TypeHeartbeat, Seq: seq})
		case <-s.done:
			b.mu.Lock()
			code, why := s.code, s.why
			b.mu.Unlock()
			if code != "" {
				_ = rc.SetWriteDeadline(time.Now().Add(b.t.close))
				_, _ = w.Write(Encode(&Message{Type: TypeError, Code: code, Detail: why}))
				_ = rc.Flush()
			}
			break loop
		case <-r.Context().Done():
			b.closeSession(s, "", "")
			break loop
		}
		_ = rc.SetWriteDeadline(time.Now().Add(s.idle))
		_, err := w.Write(line)
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			b.closeSession(s, "", "")
			break loop
		}
	}
	// Ending the body ends the reader.
	_ = rc.SetReadDeadline(time.Unix(1, 0))
	<-readerDone
}

// read handles the client's lines until the control channel ends.
func (s *session) read(lr *LineReader) {
	b := s.bus
	for {
		line, err := lr.Next()
		if err != nil {
			b.closeSession(s, "", "")
			return
		}
		s.lastSeen.Store(time.Now().UnixNano())
		m, err := Decode(line)
		if err != nil {
			s.ignore("event bus session sent an invalid line; ignored", "err", err)
			continue
		}
		switch m.Type {
		case TypeHeartbeat:
			s.send(&Message{Type: TypeHeartbeatAck, Seq: m.Seq})
		case TypeHeartbeatAck:
		case TypeStreamClosed:
			b.streamClosedByClient(s, m.StreamID, m.Code)
		case TypeDraining:
			b.sessionDraining(s)
		default:
			s.ignore("event bus session sent an unexpected message; ignored", "type", m.Type)
		}
	}
}

// ignoredLogEvery spaces the warnings about a session's ignored lines.
const ignoredLogEvery = time.Minute

// ignore warns of a line the session sent that is ignored: the first,
// then at most one every ignoredLogEvery with how many there were in all,
// so that a client sending nothing else cannot flood the log. It runs on
// the session's reader alone.
func (s *session) ignore(msg string, args ...any) {
	s.ignored++
	now := time.Now()
	if s.ignored > 1 && now.Sub(s.ignoredLogged) < ignoredLogEvery {
		return
	}
	s.ignoredLogged = now
	s.bus.logger.Warn(msg, append(args, "session", s.id, "ignored_lines", s.ignored)...)
}

// send queues a line without waiting; false when the queue is full.
func (s *session) send(m *Message) bool {
	select {
	case s.out <- Encode(m):
		return true
	default:
		return false
	}
}

// closeSession ends a session; code, when set, is what the client is told.
func (b *Bus) closeSession(s *session, code, why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeSessionLocked(s, code, why)
}

// closeSessionLocked ends a session and every stream on it (their
// carrier is lost). b.mu is held.
func (b *Bus) closeSessionLocked(s *session, code, why string) {
	if s.closed {
		return
	}
	s.closed, s.code, s.why = true, code, why
	delete(b.sessions, s.id)
	if b.byEntry[s.entID] == s {
		delete(b.byEntry, s.entID)
	}
	for _, st := range s.streams {
		b.forgetLocked(st)
		st.endLocked("", true)
	}
	b.metrics.Sessions.Set(float64(len(b.sessions)))
	close(s.done)
	b.notifyLocked()
	b.logger.Info("event bus session closed", "broker", s.entID, "session", s.id, "code", code)
}

// sessionDraining stops placing streams on a session and ends its
// streams, so that their subscriptions move to another session now.
func (b *Bus) sessionDraining(s *session) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.closed || s.draining {
		return
	}
	s.draining = true
	for _, st := range s.streams {
		b.forgetLocked(st)
		st.endLocked(CodeDraining, true)
	}
	b.notifyLocked()
	b.logger.Info("event bus session draining", "broker", s.entID, "session", s.id)
}

// notifyLocked wakes the watchers of the sessions. b.mu is held.
func (b *Bus) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}
