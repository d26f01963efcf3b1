package eventbus

import (
	"crypto/sha256"
	"fmt"
	"net"
)

// Apply gives a running (or retrying) bus new settings without touching
// anything else: a new listen address is bound before anything changes
// (refused, the running listener kept, when it cannot be), new TLS files
// serve the next handshakes, and sessions the new credentials no longer
// allow end: a removed or replaced credential as credential_revoked (and
// is remembered, so that its holder is told so), a narrowed allow-list or
// a changed role as forbidden.
func (b *Bus) Apply(s Settings) error {
	if err := s.check(); err != nil {
		return err
	}
	s = cloneSettings(s)
	old := b.settings.Load()
	b.mu.Lock()
	running, gen := b.running, b.caGen
	b.mu.Unlock()
	tlsChanged := old.CertFile != s.CertFile || old.KeyFile != s.KeyFile || old.ClientCAFile != s.ClientCAFile
	caChanged := old.ClientCAFile != s.ClientCAFile
	var ts *tlsState
	if running && tlsChanged {
		if caChanged {
			gen++
		}
		var err error
		if ts, err = loadTLS(&s, gen); err != nil {
			return fmt.Errorf("dynamo.event_bus.tls: %w; the running listener keeps its certificate", err)
		}
	}
	var ln net.Listener
	if running && old.Listen != s.Listen {
		var err error
		if ln, err = net.Listen("tcp", s.Listen); err != nil {
			return fmt.Errorf("dynamo.event_bus.listen %s: %w; the running listener is kept", s.Listen, err)
		}
	}
	oldCreds, creds := b.creds.Load(), newCredentials(s.Entries)

	b.mu.Lock()
	if caChanged {
		b.caGen++
	}
	if ts != nil {
		ts.caGen = b.caGen
		b.tls.Store(ts)
	}
	b.settings.Store(&s)
	b.creds.Store(creds)
	for _, e := range oldCreds.entries {
		ne := creds.byID[e.id]
		var keys [][sha256.Size]byte
		if ne == nil {
			keys = append(keys, certKey(e.id))
		}
		if e.hasToken && (ne == nil || !ne.hasToken || ne.hash != e.hash) {
			keys = append(keys, e.hash)
		}
		b.revoked.add(keys...)
	}
	for _, e := range creds.entries {
		b.revoked.remove(certKey(e.id))
		if e.hasToken {
			b.revoked.remove(e.hash)
		}
	}
	for _, ss := range b.sessions {
		if code, why := sessionAllowed(ss, creds.byID[ss.entID], caChanged); code != "" {
			b.closeSessionLocked(ss, code, why)
		}
	}
	kick := ln != nil || !running && (old.Listen != s.Listen || tlsChanged)
	if ln != nil {
		if b.nextLn != nil {
			_ = b.nextLn.Close()
		}
		b.nextLn = ln
	}
	b.mu.Unlock()
	if kick {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// sessionAllowed says whether a session may go on under entry ne (nil:
// removed), and if not, the code it ends with; caChanged says that the
// client CA that verified the session's connection is no longer the
// current one. b.mu is held.
func sessionAllowed(s *session, ne *entry, caChanged bool) (code, why string) {
	switch {
	case ne == nil:
		return CodeCredentialRevoked, "this credential was removed from the configuration"
	case s.byToken && (!ne.hasToken || ne.hash != s.tokenHash):
		return CodeCredentialRevoked, "this token was replaced in the configuration"
	case !s.byToken && caChanged:
		return CodeCredentialRevoked, "the client CA that verified this certificate was replaced"
	case ne.role != s.role:
		return CodeForbidden, "this credential's role changed"
	case s.role == RoleBroker && !ne.allowsNamespaces(s.namespaces):
		return CodeForbidden, "a declared namespace left this broker's allow-list"
	case s.role == RoleKVListener && !ne.allowsBackends(s.sources):
		return CodeForbidden, "an announced source left this kv_listener's backends"
	}
	return "", ""
}
