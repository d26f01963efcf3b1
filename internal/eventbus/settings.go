package eventbus

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Timings and bounds of the listener. Each bounds a peer that does not do
// its part, so that no connection, session or stream is held forever.
const (
	// HandshakeTimeout bounds the first byte and the TLS handshake.
	HandshakeTimeout = 10 * time.Second
	// KeepalivePing is how long a connection may be silent before the
	// listener sends an HTTP/2 PING (a dead peer is found by its missing
	// answer).
	KeepalivePing = 20 * time.Second
	// PingTimeout bounds the answer to a PING.
	PingTimeout = 15 * time.Second
	// HelloTimeout bounds the hello after a control channel opens.
	HelloTimeout = 10 * time.Second
	// AuthTimeout is how long an accepted connection may go without an
	// authenticated 2xx request (answering PINGs does not count): a
	// connection slot is not held by a peer that never authenticates.
	AuthTimeout = 10 * time.Second
	// CloseAfterLastRequest closes a connection this long after its last
	// request ended.
	CloseAfterLastRequest = 30 * time.Second
	// ListenRetry is the delay between attempts to start a listener that
	// failed to (TLS files missing, the port in use).
	ListenRetry = 30 * time.Second
	// TLSFileCheck is how often a running listener reads its TLS files
	// again: a certificate renewed in place (a Kubernetes Secret updated
	// by a certificate manager) is served from the next handshake.
	TLSFileCheck = 30 * time.Second
	// RevokedMemory is how many removed credentials are remembered, so
	// that their holders are told credential_revoked, not unauthenticated.
	RevokedMemory = 256
	// MinConnections is the floor of the TCP connection limit, which is
	// otherwise 4 × max_sessions.
	MinConnections = 16
	// OpenTimeout bounds opening a stream: the subscribe command, the
	// client dialling its target, and its data stream arriving.
	OpenTimeout = 30 * time.Second
	// CloseTimeout bounds closing a stream.
	CloseTimeout = 1 * time.Second
	// SessionLossGrace is how long a failed stream waits to learn whether
	// its session ended (a lost carrier) rather than the stream alone.
	SessionLossGrace = 500 * time.Millisecond
	// MinStreamBuffer and MaxStreamBuffer clamp the per-stream,
	// per-direction byte budget.
	MinStreamBuffer = 16 << 10
	MaxStreamBuffer = 1 << 20
	// MinSessionBudgetPerStream is the share of max_session_buffer_bytes
	// each allowed stream must have at least: a budget below
	// max_streams_per_session × 64 KiB is refused.
	MinSessionBudgetPerStream = 64 << 10
	// StreamsPerSessionLimit is the most streams a session may be allowed:
	// a client sizes its queues by the welcome's max_streams, so a welcome
	// past it is refused, and so is a listener configured past it.
	StreamsPerSessionLimit = 1 << 16
	// MaxWelcomeInterval bounds the heartbeat interval and idle timeout a
	// welcome may carry (far past any configuration; a client would
	// otherwise take a number of milliseconds no duration holds).
	MaxWelcomeInterval = 24 * time.Hour
	// maxFrameBytes is the largest HTTP/2 frame read: one frame is the
	// "current receive frame" of the budget, so it stays at the protocol
	// minimum.
	maxFrameBytes = 16 << 10
	// budgetAreas are the four areas of a stream the budget pays for: the
	// receive window, the frame being read, the outbound pipe and the
	// HTTP/2 send buffer.
	budgetAreas = 4
)

// Settings are the listener's configuration, as plain values.
type Settings struct {
	// Listen is host:port of the dedicated listener.
	Listen string
	// CertFile and KeyFile are the listener's certificate; ClientCAFile,
	// when set, verifies client certificates.
	CertFile, KeyFile, ClientCAFile string
	// Entries are the credentials allowed to open sessions.
	Entries               []Entry
	MaxSessions           int
	MaxStreamsPerSession  int
	MaxSessionBufferBytes int64
	HeartbeatInterval     time.Duration
	IdleTimeout           time.Duration
}

// Entry is one credential: a broker (namespaces it may declare; none
// listed allows any) or a kv_listener (the backends it may announce).
type Entry struct {
	ID   string
	Role string
	// TokenHash is "sha256:<64 lowercase hex>" of the bearer token, or ""
	// when the entry authenticates by client certificate only.
	TokenHash  string
	Namespaces []string
	Backends   []string
}

// StreamBudget is the byte budget of one stream in one direction:
// max_session_buffer_bytes shared by the four areas of every allowed
// stream, clamped to 16 KiB..1 MiB.
func StreamBudget(maxSessionBufferBytes int64, maxStreams int) int {
	if maxStreams < 1 {
		return MinStreamBuffer
	}
	b := maxSessionBufferBytes / (budgetAreas * int64(maxStreams))
	return int(min(max(b, MinStreamBuffer), MaxStreamBuffer))
}

// ConnectionLimit is the TCP connection limit for max_sessions.
func ConnectionLimit(maxSessions int) int { return max(4*maxSessions, MinConnections) }

// check validates settings the way the configuration does.
func (s *Settings) check() error {
	var errs []error
	if s.MaxSessions < 1 {
		errs = append(errs, errors.New("max_sessions must be at least 1"))
	}
	if s.MaxStreamsPerSession < 1 || s.MaxStreamsPerSession > StreamsPerSessionLimit {
		errs = append(errs, fmt.Errorf("max_streams_per_session must be from 1 to %d", StreamsPerSessionLimit))
	} else if need := int64(s.MaxStreamsPerSession) * MinSessionBudgetPerStream; s.MaxSessionBufferBytes < need {
		errs = append(errs, fmt.Errorf("max_session_buffer_bytes %d is below max_streams_per_session × 64 KiB = %d", s.MaxSessionBufferBytes, need))
	}
	// The welcome carries both in whole milliseconds, and clients refuse
	// a zero.
	if s.HeartbeatInterval < time.Millisecond || s.IdleTimeout < time.Millisecond || s.HeartbeatInterval > MaxWelcomeInterval || s.IdleTimeout > MaxWelcomeInterval {
		errs = append(errs, fmt.Errorf("heartbeat_interval and idle_timeout must be from 1ms to %v", MaxWelcomeInterval))
	} else if s.HeartbeatInterval >= s.IdleTimeout {
		// Each side judges the other idle after idle_timeout without a
		// line: heartbeats no more frequent end every session as idle.
		errs = append(errs, fmt.Errorf("heartbeat_interval %v must be shorter than idle_timeout %v", s.HeartbeatInterval, s.IdleTimeout))
	}
	ids := map[string]bool{}
	for _, e := range s.Entries {
		if ids[e.ID] {
			errs = append(errs, fmt.Errorf("broker id %q is used twice", e.ID))
		}
		ids[e.ID] = true
		if _, err := parseTokenHash(e.TokenHash); err != nil {
			errs = append(errs, fmt.Errorf("broker %q: %w", e.ID, err))
		}
		if e.Role != RoleBroker && e.Role != RoleKVListener {
			errs = append(errs, fmt.Errorf("broker %q: role %q is not broker or kv_listener", e.ID, e.Role))
		}
	}
	return errors.Join(errs...)
}

// parseTokenHash reads "sha256:<64 lowercase hex>"; "" is no token.
func parseTokenHash(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != 2*sha256.Size || strings.ToLower(h) != h {
		return nil, errors.New(`token_hash is not "sha256:<64 lowercase hex>"`)
	}
	return hex.DecodeString(h)
}

// HashToken returns the token_hash of a bearer token, the form the
// configuration holds (never the token itself).
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// entry is a credential as the listener checks it.
type entry struct {
	id, role   string
	hash       [sha256.Size]byte
	hasToken   bool
	namespaces []string
	backends   []string
}

// credentials are one generation of the allowed entries.
type credentials struct {
	entries []*entry
	byID    map[string]*entry
}

func newCredentials(list []Entry) *credentials {
	c := &credentials{byID: make(map[string]*entry, len(list))}
	for _, e := range list {
		en := &entry{id: e.ID, role: e.Role, namespaces: slices.Clone(e.Namespaces), backends: slices.Clone(e.Backends)}
		if h, err := parseTokenHash(e.TokenHash); err == nil && h != nil {
			copy(en.hash[:], h)
			en.hasToken = true
		}
		c.entries = append(c.entries, en)
		c.byID[en.id] = en
	}
	return c
}

// byToken returns the entry whose token hashes to sum, comparing with
// every entry in constant time: how long it takes says nothing of which
// entry, if any, matched.
func (c *credentials) byToken(sum [sha256.Size]byte) *entry {
	var found *entry
	for _, e := range c.entries {
		eq := subtle.ConstantTimeCompare(sum[:], e.hash[:])
		if eq == 1 && e.hasToken && found == nil {
			found = e
		}
	}
	return found
}

// allowsNamespaces reports whether a broker entry may declare every one of
// namespaces (an empty allow-list allows any).
func (e *entry) allowsNamespaces(namespaces []string) bool {
	if len(e.namespaces) == 0 {
		return true
	}
	for _, ns := range namespaces {
		if !slices.Contains(e.namespaces, ns) {
			return false
		}
	}
	return true
}

// allowsBackends reports whether a kv_listener entry may announce every
// one of sources.
func (e *entry) allowsBackends(sources []string) bool {
	for _, s := range sources {
		if !slices.Contains(e.backends, s) {
			return false
		}
	}
	return true
}

// checkHello returns "" when a hello may open a session for e, or the
// refusal code.
func (e *entry) checkHello(m *Message) (code, why string) {
	switch {
	case m.Role != e.role:
		return CodeForbidden, fmt.Sprintf("this credential's role is %s", e.role)
	case m.ClientID != e.id:
		return CodeForbidden, "client_id does not name this credential"
	case !slices.Contains(m.Versions, ProtocolVersion):
		return CodeUnsupportedVersion, fmt.Sprintf("this listener speaks protocol version %d", ProtocolVersion)
	}
	if e.role == RoleBroker {
		switch {
		case len(m.Sources) > 0:
			return CodeForbidden, "a broker announces no sources"
		case !e.allowsNamespaces(m.DynamoNamespaces):
			return CodeForbidden, "a declared namespace is not in this broker's allow-list"
		}
		return "", ""
	}
	switch {
	case len(m.DynamoNamespaces) > 0:
		return CodeForbidden, "a kv_listener declares no dynamo_namespaces"
	case len(m.Sources) == 0:
		return CodeForbidden, "a kv_listener announces at least one source"
	case !e.allowsBackends(m.Sources):
		return CodeForbidden, "an announced source is not in this kv_listener's backends"
	}
	return "", ""
}

// revokedSet remembers the last RevokedMemory removed credentials by
// their keys (a token's hash, a certificate identity's, or both for one
// entry): a credential is one slot whatever its keys, and a key that is
// revoked again moves to the newest slot.
type revokedSet struct {
	keys map[[sha256.Size]byte]uint64 // key → the sequence number of its slot
	ring []revokedSlot
	seq  uint64 // the next slot's sequence number
}

type revokedSlot struct {
	seq  uint64
	keys [][sha256.Size]byte
}

func newRevokedSet() *revokedSet {
	return &revokedSet{keys: map[[sha256.Size]byte]uint64{}, ring: make([]revokedSlot, RevokedMemory)}
}

// add remembers one removed credential's keys, forgetting the oldest
// credential when RevokedMemory are remembered.
func (r *revokedSet) add(keys ...[sha256.Size]byte) {
	if len(keys) == 0 {
		return
	}
	slot := &r.ring[r.seq%RevokedMemory]
	for _, k := range slot.keys {
		if seq, ok := r.keys[k]; ok && seq == slot.seq {
			delete(r.keys, k)
		}
	}
	*slot = revokedSlot{seq: r.seq, keys: keys}
	for _, k := range keys {
		r.keys[k] = r.seq
	}
	r.seq++
}

// remove forgets a key (its credential is configured again); its slot is
// reused in turn.
func (r *revokedSet) remove(k [sha256.Size]byte) { delete(r.keys, k) }

func (r *revokedSet) has(k [sha256.Size]byte) bool {
	_, ok := r.keys[k]
	return ok
}

// certKey is the revocation key of a certificate identity.
func certKey(id string) [sha256.Size]byte { return sha256.Sum256([]byte("cert\x00" + id)) }

func sha256Sum(s string) [sha256.Size]byte { return sha256.Sum256([]byte(s)) }
