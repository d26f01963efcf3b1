package eventbus

import "crypto/sha256"

// Apply gives a running (or retrying) bus new settings without touching
// anything else, and refuses only settings that are invalid in themselves.
// New TLS files serve the next handshakes. A listener that must start
// again (a new listen address, TLS files that do not load) is restarted by
// Run: the old one closes first, so that a new address may reuse its port,
// and a start that fails is logged and retried every ListenRetry, like the
// first start. Until new TLS files load, no handshake is served: a
// replaced client CA is never trusted again, and no connection is
// verified by files the configuration no longer names. Sessions the new
// credentials no longer allow end: a removed or replaced credential as
// credential_revoked (and is remembered, so that its holder is told so),
// a narrowed allow-list or a changed role as forbidden.
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
	var tlsErr error
	if running && tlsChanged {
		if caChanged {
			gen++
		}
		ts, tlsErr = loadTLS(&s, gen)
	}
	oldCreds, creds := b.creds.Load(), newCredentials(s.Entries)

	b.mu.Lock()
	if caChanged {
		b.caGen++
	}
	switch {
	case ts != nil:
		ts.caGen = b.caGen
		b.tls.Store(ts)
	case tlsChanged:
		// Loaded again by the listener's next start.
		b.tls.Store(nil)
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
	// A running listener restarts for a new address or TLS files that did
	// not load; one that is retrying its start tries again at once.
	kick := old.Listen != s.Listen || tlsErr != nil || !running && tlsChanged
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
