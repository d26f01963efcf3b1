package eventbus

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/telemetry"
)

// timing holds the listener's timeouts; tests shorten them.
type timing struct {
	handshake, hello, auth, idleConn, keepalive, pingTimeout time.Duration
	listenRetry, open, close, lossGrace, stopGrace           time.Duration
	tlsCheck                                                 time.Duration
}

var defaultTiming = timing{
	handshake: HandshakeTimeout, hello: HelloTimeout, auth: AuthTimeout, idleConn: CloseAfterLastRequest,
	keepalive: KeepalivePing, pingTimeout: PingTimeout, listenRetry: ListenRetry, open: OpenTimeout,
	close: CloseTimeout, lossGrace: SessionLossGrace, stopGrace: 5 * time.Second, tlsCheck: TLSFileCheck,
}

// Bus is the router's event bus: the listener that in-cluster clients
// connect to, their sessions, and the API that opens streams through
// them. New builds it; Run serves until its context ends; Apply changes
// its settings while it runs.
type Bus struct {
	logger  *slog.Logger
	metrics *telemetry.EventBusMetrics
	t       timing

	settings atomic.Pointer[Settings]
	creds    atomic.Pointer[credentials]
	tls      atomic.Pointer[tlsState]
	handlers tracker
	// tlsCheckErr is the last failure checkTLSFiles logged (Run's
	// goroutine only).
	tlsCheckErr string

	// mu guards everything below, and every session's and stream's
	// mutable fields.
	mu       sync.Mutex
	sessions map[string]*session // by session id
	byEntry  map[string]*session // by entry id
	preHello map[string]bool     // entries with a hello being read
	revoked  *revokedSet
	conns    map[*busConn]struct{}
	byTLS    map[net.Conn]*busConn
	servers  []*server // every generation's, for shutdown
	current  *server   // the generation new connections go to
	streams  int
	changed  chan struct{} // closed at the next change of the sessions
	running  bool
	addr     net.Addr
	caGen    uint64
	stopped  bool
	// kick asks Run to start the listener again with the settings of now.
	kick chan struct{}
	// quieter is told when a connection's last HTTP/2 stream closed or the
	// connection did (awaitQuiet).
	quieter chan struct{}
}

// tlsState is one generation of the listener's TLS settings; caGen names
// the client CA generation that verifies connections handshaken with it.
type tlsState struct {
	config                    *tls.Config
	caGen                     uint64
	certFile, keyFile, caFile string
	// pair and ca digest the files' contents as loaded, to tell a
	// renewal from an unchanged file.
	pair, ca [sha256.Size]byte
}

// New returns a bus with settings; nothing listens until Run. metrics and
// logger may be nil.
func New(s Settings, metrics *telemetry.EventBusMetrics, logger *slog.Logger) (*Bus, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if metrics == nil {
		metrics = telemetry.NewEventBusMetrics(nil)
	}
	b := &Bus{logger: logger, metrics: metrics, t: defaultTiming,
		sessions: map[string]*session{}, byEntry: map[string]*session{}, preHello: map[string]bool{},
		revoked: newRevokedSet(), conns: map[*busConn]struct{}{}, byTLS: map[net.Conn]*busConn{}, changed: make(chan struct{}), kick: make(chan struct{}, 1), quieter: make(chan struct{}, 1)}
	for _, c := range RefusalCodes {
		metrics.Refusals.WithLabelValues(c)
	}
	s = cloneSettings(s)
	b.settings.Store(&s)
	b.creds.Store(newCredentials(s.Entries))
	return b, nil
}

func cloneSettings(s Settings) Settings {
	s.Entries = append([]Entry(nil), s.Entries...)
	return s
}

// loadTLS reads the listener's certificate and client CA.
func loadTLS(s *Settings, caGen uint64) (*tlsState, error) {
	if s.CertFile == "" || s.KeyFile == "" {
		return nil, errors.New("tls.cert and tls.key are required: the listener is TLS 1.3 only")
	}
	certPEM, err := os.ReadFile(s.CertFile)
	if err != nil {
		return nil, fmt.Errorf("tls.cert: %w", err)
	}
	keyPEM, err := os.ReadFile(s.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls.key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.cert %s, tls.key %s: %w", s.CertFile, s.KeyFile, err)
	}
	st := &tlsState{caGen: caGen, certFile: s.CertFile, keyFile: s.KeyFile, caFile: s.ClientCAFile,
		pair: sha256.Sum256(append(certPEM, keyPEM...))}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, NextProtos: []string{protoH2}}
	if s.ClientCAFile != "" {
		pem, err := os.ReadFile(s.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.client_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.client_ca %s: no PEM certificate", s.ClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.VerifyClientCertIfGiven
		st.ca = sha256.Sum256(pem)
	}
	st.config = cfg
	return st, nil
}

// checkTLSFiles loads the running listener's TLS files again and serves
// them from the next handshake when their contents changed. A renewed
// client CA is another CA: the sessions its predecessor verified end as
// credential_revoked, as when the configuration names another file.
// Files that changed but do not load (a renewal half written) are logged
// and the loaded ones kept; the next check tries again.
func (b *Bus) checkTLSFiles() {
	cur := b.tls.Load()
	s := b.settings.Load()
	if cur == nil || cur.certFile != s.CertFile || cur.keyFile != s.KeyFile || cur.caFile != s.ClientCAFile {
		return // a reload named other files: the listener's restart loads them
	}
	next, err := loadTLS(s, cur.caGen)
	if err != nil {
		// Told once per failure, not at every check while it lasts.
		if err.Error() != b.tlsCheckErr {
			b.tlsCheckErr = err.Error()
			b.logger.Error("event bus TLS files changed and do not load; the loaded ones are served", "cert", s.CertFile, "err", err)
		}
		return
	}
	b.tlsCheckErr = ""
	if next.pair == cur.pair && next.ca == cur.ca {
		return
	}
	caChanged := next.ca != cur.ca
	// Apply stores TLS state under b.mu too, and the listener's start runs
	// on this goroutine: nothing replaces it between the check and the
	// store.
	b.mu.Lock()
	if b.tls.Load() != cur {
		b.mu.Unlock()
		return // Apply replaced them meanwhile
	}
	if caChanged {
		b.caGen++
		next.caGen = b.caGen
	}
	b.tls.Store(next)
	if caChanged {
		creds := b.creds.Load()
		for _, ss := range b.sessions {
			if code, why := sessionAllowed(ss, creds.byID[ss.entID], true); code != "" {
				b.closeSessionLocked(ss, code, why)
			}
		}
	}
	b.mu.Unlock()
	b.logger.Info("event bus TLS files reloaded", "cert", s.CertFile, "client_ca_changed", caChanged)
}

// Run serves the listener until ctx ends, then closes every session and
// connection. A listener that fails to start (its TLS files missing, its
// port in use), at first or after a reload, is logged and retried every
// ListenRetry, or at once when Apply changes its settings; sessions and
// connections already open go on meanwhile. Run returns nil.
func (b *Bus) Run(ctx context.Context) error {
	b.mu.Lock()
	b.stopped = false
	b.mu.Unlock()
	b.handlers.reopen()
	// A request to start again made while nothing ran is served by
	// starting.
	select {
	case <-b.kick:
	default:
	}
	defer b.shutdown()
	for {
		ln, err := b.startListener()
		if err != nil {
			b.setStopped()
			b.logger.Warn("event bus listener failed to start; retrying", "address", b.settings.Load().Listen, "err", err, "retry", b.t.listenRetry)
			if !b.awaitRetry(ctx) {
				return nil
			}
			continue
		}
		b.setRunning(ln.Addr())
		b.logger.Info("event bus listening", "address", ln.Addr().String())
		acceptDone := make(chan error, 1)
		go func() { acceptDone <- b.accept(ctx, ln) }()
		if !b.serveListener(ctx, ln, acceptDone) {
			return nil
		}
	}
}

// serveListener waits while ln serves, checking its TLS files every
// tlsCheck, until ctx ends (false), Apply asks for a restart, or the
// accept loop fails (true: start again).
func (b *Bus) serveListener(ctx context.Context, ln net.Listener, acceptDone chan error) bool {
	check := time.NewTicker(b.t.tlsCheck)
	defer check.Stop()
	for {
		select {
		case <-check.C:
			b.checkTLSFiles()
		case <-ctx.Done():
			_ = ln.Close()
			b.acceptEnded(<-acceptDone)
			return false
		case <-b.kick:
			// A new address, or TLS files that did not load: the old
			// listener closes before the new one starts, which may bind
			// the same port.
			_ = ln.Close()
			b.acceptEnded(<-acceptDone)
			return true
		case err := <-acceptDone:
			_ = ln.Close()
			b.setStopped()
			b.logger.Warn("event bus listener failed; restarting", "err", err)
			return b.awaitRetry(ctx)
		}
	}
}

// awaitRetry waits ListenRetry before the listener's next start, or until
// Apply changes its settings; false when ctx ended.
func (b *Bus) awaitRetry(ctx context.Context) bool {
	t := time.NewTimer(b.t.listenRetry)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-b.kick:
	}
	return true
}

// acceptEnded logs why an accept loop that was asked to stop ended, when
// it was not that request.
func (b *Bus) acceptEnded(err error) {
	if err != nil {
		b.logger.Debug("event bus accept loop ended", "err", err)
	}
}

// startListener loads the configured TLS files (unless loaded already)
// and binds the configured address.
func (b *Bus) startListener() (net.Listener, error) {
	b.mu.Lock()
	gen := b.caGen
	b.mu.Unlock()
	s := b.settings.Load()
	if ts := b.tls.Load(); ts == nil || ts.certFile != s.CertFile || ts.keyFile != s.KeyFile || ts.caFile != s.ClientCAFile {
		st, err := loadTLS(s, gen)
		if err != nil {
			return nil, fmt.Errorf("dynamo.event_bus.tls: %w", err)
		}
		b.tls.Store(st)
	}
	return net.Listen("tcp", s.Listen)
}

func (b *Bus) setRunning(addr net.Addr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running, b.addr = true, addr
}

func (b *Bus) setStopped() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running, b.addr = false, nil
}

// accept admits connections until the listener closes.
func (b *Bus) accept(ctx context.Context, ln net.Listener) error {
	var delay time.Duration
	for {
		raw, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of file descriptors and the like: slow down.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				if !sleepCtx(ctx, delay) {
					return nil
				}
				continue
			}
			return err
		}
		delay = 0
		bc, ok := b.admit(raw)
		if !ok {
			b.refused(CodeConnectionLimit)
			_ = raw.Close()
			continue
		}
		go b.serveConn(ctx, bc)
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// busConn is one accepted TCP connection.
type busConn struct {
	raw       net.Conn
	tls       *tls.Conn
	caGen     uint64
	authed    atomic.Bool
	authTimer *time.Timer
	done      chan struct{}

	// active counts the accepted requests under way on the connection (a
	// session's control channel, a data stream); idle closes it a while
	// after the last of them ended. Refused requests neither start nor
	// stop it: a connection that authenticated once is not held open by
	// requests the listener turns away (net/http's own idle timeout
	// counts every request).
	mu     sync.Mutex
	active int
	idle   *time.Timer

	// streaming: the HTTP/2 server has a stream open on the connection
	// (its ConnState active), the last frame of one not yet written.
	streaming atomic.Bool
}

// accepted counts a request the listener accepted as under way.
func (bc *busConn) accepted() {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	bc.active++
	if bc.idle != nil {
		bc.idle.Stop()
	}
}

// finished ends an accepted request; after the last, the connection
// closes in after unless another is accepted first.
func (bc *busConn) finished(after time.Duration) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	bc.active--
	if bc.active > 0 {
		return
	}
	if bc.idle == nil {
		bc.idle = time.AfterFunc(after, bc.closeIdle)
		return
	}
	bc.idle.Reset(after)
}

func (bc *busConn) closeIdle() {
	bc.mu.Lock()
	idle := bc.active == 0
	bc.mu.Unlock()
	if idle {
		_ = bc.raw.Close()
	}
}

// stopIdle stops the idle timer of a connection that is closing.
func (bc *busConn) stopIdle() {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.idle != nil {
		bc.idle.Stop()
	}
}

// requestEnded ends an accepted request on bc: the connection closes
// CloseAfterLastRequest after its last one, sooner when idle_timeout is
// shorter.
//
// The HTTP/2 server closes such a connection itself at that time, with
// GOAWAY first (RFC 9113 section 9.1: a client then knows that a stream it
// opened meanwhile was not processed, and opens it again elsewhere), unless
// a request it counts and the listener refused came since. This timer,
// which refused requests do not re-arm, closes the connection outright,
// so it fires idleCloseGrace later: it ends only the connections the
// server keeps open, and never races the server's GOAWAY.
func (b *Bus) requestEnded(bc *busConn) {
	bc.finished(min(b.t.idleConn, b.settings.Load().IdleTimeout) + idleCloseGrace)
}

// idleCloseGrace is how much later than the HTTP/2 server's idle close
// the listener's own closes a connection: the server writes its GOAWAY at
// once and closes a second later.
const idleCloseGrace = time.Second

// admit counts a new connection against the limit.
func (b *Bus) admit(raw net.Conn) (*busConn, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped || len(b.conns) >= ConnectionLimit(b.settings.Load().MaxSessions) {
		return nil, false
	}
	bc := &busConn{raw: raw, done: make(chan struct{})}
	b.conns[bc] = struct{}{}
	return bc, true
}

func (b *Bus) releaseConn(bc *busConn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.conns[bc]; !ok {
		return
	}
	delete(b.conns, bc)
	if bc.tls != nil {
		delete(b.byTLS, bc.tls)
	}
	close(bc.done)
	b.quieterNow()
}

// quieterNow tells awaitQuiet that a connection's last stream, or the
// connection, closed; a signal already pending covers this one.
func (b *Bus) quieterNow() {
	select {
	case b.quieter <- struct{}{}:
	default:
	}
}

// refused counts a refusal.
func (b *Bus) refused(code string) { b.metrics.Refusals.WithLabelValues(code).Inc() }

// tlsRecordHandshake is the first byte of every TLS connection.
const tlsRecordHandshake = 0x16

// serveConn checks the first byte, completes the TLS handshake and serves
// HTTP/2 on the connection until it closes.
func (b *Bus) serveConn(ctx context.Context, bc *busConn) {
	// Until the connection is handed to the HTTP/2 server, it is closed
	// and released here; after, when the server is done with it.
	handed := false
	raw := bc.raw
	// The connection has the auth timeout from its acceptance to its first
	// authenticated request, the TLS handshake included, so that a slot is
	// never held longer whatever the handshake takes.
	// counted: a refusal of this connection was counted. The auth timer
	// and the handshake's own timeouts can fire together (both are 10 s
	// by default): the first to claim it counts, once.
	var counted atomic.Bool
	bc.authTimer = time.AfterFunc(b.t.auth, func() {
		if !bc.authed.Load() && counted.CompareAndSwap(false, true) {
			b.refused(CodeAuthTimeout)
			_ = raw.Close()
		}
	})
	defer func() {
		if !handed {
			bc.authTimer.Stop()
			_ = bc.raw.Close()
			b.releaseConn(bc)
		}
	}()
	_ = raw.SetDeadline(time.Now().Add(b.t.handshake))
	var first [1]byte
	if _, err := io.ReadFull(raw, first[:]); err != nil {
		if isTimeout(err) && counted.CompareAndSwap(false, true) {
			b.refused(CodeHandshakeTimeout)
		}
		return
	}
	if first[0] != tlsRecordHandshake {
		b.refused(CodeTLSRequired)
		if first[0] < 0x80 {
			// A plaintext HTTP client is told why, in words it reads.
			_, _ = raw.Write(plainRefusal(CodeTLSRequired, "the event bus listener speaks HTTP/2 over TLS 1.3 only"))
			lingerClose(raw)
		}
		return
	}
	ts := b.tls.Load()
	if ts == nil {
		// A reload named TLS files that have not loaded: the listener is
		// restarting, and nothing is verified by the files it replaced.
		b.refused(CodeHandshakeFailed)
		return
	}
	tc := tls.Server(&prefixConn{Conn: raw, prefix: first[:]}, ts.config)
	hctx, cancel := context.WithTimeout(ctx, b.t.handshake)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		switch {
		case !counted.CompareAndSwap(false, true):
		case isTimeout(err) || errors.Is(err, context.DeadlineExceeded):
			b.refused(CodeHandshakeTimeout)
		default:
			b.refused(CodeHandshakeFailed)
		}
		b.logger.Debug("event bus handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
		return
	}
	_ = raw.SetDeadline(time.Time{})
	if tc.ConnectionState().NegotiatedProtocol != protoH2 {
		b.refused(CodeHandshakeFailed)
		return
	}
	bc.tls, bc.caGen = tc, ts.caGen
	if !b.handOff(ctx, bc) {
		return
	}
	handed = true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// prefixConn replays the bytes read to check a connection's first byte.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// A refused plaintext connection is read for at most plainLinger and
// plainLingerBytes after its answer before it closes.
const (
	plainLinger      = 500 * time.Millisecond
	plainLingerBytes = 64 << 10
)

// lingerClose half-closes a connection that was answered and reads what
// the peer still sends, within plainLinger and plainLingerBytes. Only one
// byte of the plaintext request was read: closing with the rest unread
// makes TCP reset the connection, and a client still sending its request
// gets "connection reset" instead of the answer written for it (some
// stacks discard received data on a reset). The bounds keep a peer from
// holding the connection slot.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(plainLinger))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, plainLingerBytes))
}

// errorBody is the JSON body of a refusal.
func errorBody(code, message string) []byte {
	b, _ := json.Marshal(map[string]map[string]string{"error": {"code": code, "message": message}})
	return b
}

// plainRefusal is an HTTP/1.1 403 answer to a plaintext client.
func plainRefusal(code, message string) []byte {
	body := errorBody(code, message)
	return []byte("HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
}

// refuse answers a request with status and code.
func (b *Bus) refuse(w http.ResponseWriter, status int, code, message string) {
	b.refused(code)
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusUnauthorized {
		// A 401 names the scheme that authenticates (RFC 9110 §11.6.1).
		w.Header().Set("WWW-Authenticate", `Bearer realm="continuum-event-bus"`)
	}
	w.WriteHeader(status)
	_, _ = w.Write(errorBody(code, message))
}

// serveHTTP authenticates a request and serves the control channel or a
// data stream.
func (b *Bus) serveHTTP(w http.ResponseWriter, r *http.Request) {
	bc, _ := r.Context().Value(connKey{}).(*busConn)
	if bc == nil || !b.handlers.enter() {
		return // shutting down: the connection is closing
	}
	defer b.handlers.leave()
	ent, status, code, why := b.authenticate(bc, r)
	if code != "" {
		b.refuse(w, status, code, why)
		return
	}
	version, err := strconv.Atoi(r.Header.Get(HeaderVersion))
	if err != nil || version < 1 {
		b.refuse(w, http.StatusBadRequest, CodeUnsupportedVersion, fmt.Sprintf("send %s: %d", HeaderVersion, ProtocolVersion))
		return
	}
	switch {
	case r.Method != http.MethodPost:
		b.refuse(w, http.StatusNotFound, CodeNotFound, "the event bus takes POST "+PathSession+" and POST "+PathStreams+"{stream_id}")
	case r.URL.Path == PathSession:
		b.serveSession(bc, ent, w, r)
	case strings.HasPrefix(r.URL.Path, PathStreams):
		b.serveStream(bc, ent, version, strings.TrimPrefix(r.URL.Path, PathStreams), w, r)
	default:
		b.refuse(w, http.StatusNotFound, CodeNotFound, "the event bus takes POST "+PathSession+" and POST "+PathStreams+"{stream_id}")
	}
}

// authenticate returns the entry a request authenticates as, or the
// refusal. A bearer token wins over a client certificate; a certificate
// that names another entry than the token is forbidden.
func (b *Bus) authenticate(bc *busConn, r *http.Request) (ent *entry, status int, code, why string) {
	creds := b.creds.Load()
	certEnt, certCode := b.certIdentity(bc, creds)
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			return nil, http.StatusUnauthorized, CodeUnauthenticated, "send Authorization: Bearer <token>"
		}
		sum := sha256Sum(token)
		ent = creds.byToken(sum)
		if ent == nil {
			b.mu.Lock()
			revoked := b.revoked.has(sum)
			b.mu.Unlock()
			if revoked {
				return nil, http.StatusUnauthorized, CodeCredentialRevoked, "this token was removed from the configuration"
			}
			return nil, http.StatusUnauthorized, CodeUnauthenticated, "unknown token"
		}
		if certEnt != nil && certEnt != ent || certEnt == nil && certCode == CodeForbidden {
			// A certificate naming several brokers names at least one
			// other than the token's.
			return nil, http.StatusForbidden, CodeForbidden, "the client certificate names another broker than the token"
		}
		return ent, 0, "", ""
	}
	if certEnt != nil {
		return certEnt, 0, "", ""
	}
	switch certCode {
	case CodeForbidden:
		// A verified certificate that names two configured brokers is a
		// credential the listener knows but will let act as neither: like
		// a token and a certificate naming different brokers, a conflict
		// of identities, which is forbidden with 403, not a missing one.
		return nil, http.StatusForbidden, certCode, "the client certificate names more than one broker"
	case CodeCredentialRevoked:
		return nil, http.StatusUnauthorized, certCode, "this client certificate's identity was removed from the configuration"
	}
	return nil, http.StatusUnauthorized, CodeUnauthenticated, "send Authorization: Bearer <token> or a client certificate"
}

// certIdentity is the entry a verified client certificate names by DNS
// SAN (lowercase, no wildcard), within the CA generation that verified
// the connection. It returns credential_revoked for a certificate whose
// identity was removed or whose CA was replaced, and forbidden (as an
// entry-less code) when it names several entries.
func (b *Bus) certIdentity(bc *busConn, creds *credentials) (*entry, string) {
	if bc.tls == nil {
		return nil, ""
	}
	cs := bc.tls.ConnectionState()
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return nil, ""
	}
	var found *entry
	var names []string
	for _, n := range cs.PeerCertificates[0].DNSNames {
		if n != strings.ToLower(n) || strings.Contains(n, "*") {
			continue
		}
		names = append(names, n)
		if e := creds.byID[n]; e != nil {
			if found != nil && found != e {
				return nil, CodeForbidden
			}
			found = e
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if bc.caGen != b.caGen {
		if found != nil || len(names) > 0 {
			return nil, CodeCredentialRevoked
		}
		return nil, ""
	}
	if found != nil {
		return found, ""
	}
	for _, n := range names {
		if b.revoked.has(certKey(n)) {
			return nil, CodeCredentialRevoked
		}
	}
	return nil, ""
}

// shutdown ends every session and connection, and waits (within
// stopGrace) for their handlers.
func (b *Bus) shutdown() {
	b.mu.Lock()
	b.stopped = true
	for _, s := range b.sessions {
		b.closeSessionLocked(s, CodeShuttingDown, "the router is shutting down")
	}
	conns := make([]*busConn, 0, len(b.conns))
	for bc := range b.conns {
		conns = append(conns, bc)
	}
	b.running, b.addr = false, nil
	servers := b.servers
	b.servers, b.current = nil, nil
	b.mu.Unlock()
	for _, sv := range servers {
		_ = sv.ln.Close()
	}
	// The sessions' handlers say why first, then connections close.
	if !b.handlers.wait(b.t.close) {
		for _, bc := range conns {
			_ = bc.raw.Close()
		}
		if !b.handlers.wait(b.t.stopGrace) {
			b.logger.Warn("event bus handlers did not end within their grace", "grace", b.t.stopGrace)
		}
	}
	// Each HTTP/2 connection left says GOAWAY (NO_ERROR), a graceful
	// close: its client knows that a stream it opens from here on is not
	// served. It goes once the connection's streams have ended on the
	// wire, since the server writes a GOAWAY ahead of frames still queued
	// and some clients (hyper-h2) read nothing more once one came. The
	// server closes each connection after its GOAWAY; one still open after
	// idleCloseGrace closes here.
	grace, endGrace := context.WithTimeout(context.Background(), idleCloseGrace)
	defer endGrace()
	b.awaitQuiet(conns, grace.Done())
	for _, sv := range servers {
		go func() { _ = sv.srv.Shutdown(grace) }()
	}
	for _, bc := range conns {
		select {
		case <-bc.done:
		case <-grace.Done():
		}
	}
	for _, bc := range conns {
		_ = bc.raw.Close()
	}
	t := time.NewTimer(b.t.stopGrace)
	defer t.Stop()
	for _, sv := range servers {
		select {
		case <-sv.done:
		case <-t.C:
			b.logger.Warn("event bus servers did not stop within their grace", "grace", b.t.stopGrace)
			return
		}
	}
	for _, bc := range conns {
		select {
		case <-bc.done:
		case <-t.C:
			b.logger.Warn("event bus connections did not close within their grace", "grace", b.t.stopGrace)
			return
		}
	}
	b.handlers.close()
}

// awaitQuiet waits until no connection of conns has an HTTP/2 stream
// open, or until expired is closed.
func (b *Bus) awaitQuiet(conns []*busConn, expired <-chan struct{}) {
	for {
		quiet := true
		for _, bc := range conns {
			select {
			case <-bc.done:
				continue
			default:
			}
			if bc.streaming.Load() {
				quiet = false
				break
			}
		}
		if quiet {
			return
		}
		select {
		case <-b.quieter:
		case <-expired:
			return
		}
	}
}

// tracker counts running handlers; after close no new one starts.
type tracker struct {
	mu     sync.Mutex
	n      int
	closed bool
	zero   chan struct{}
}

func (t *tracker) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.n == 0 {
		t.zero = make(chan struct{})
	}
	t.n++
	return true
}

func (t *tracker) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 {
		close(t.zero)
	}
}

// wait waits until no handler runs, at most d; false when some still do.
func (t *tracker) wait(d time.Duration) bool {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return true
	}
	zero := t.zero
	t.mu.Unlock()
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-zero:
		return true
	case <-tm.C:
		return false
	}
}

func (t *tracker) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
}

func (t *tracker) reopen() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = false
}

// sleepCtx waits d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
