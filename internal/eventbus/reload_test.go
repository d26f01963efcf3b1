package eventbus_test

import (
	"bytes"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestListenerRetriesStart: a listener whose TLS files are missing logs
// that it failed to start and retries; a reload with the files starts it
// at once.
func TestListenerRetriesStart(t *testing.T) {
	t.Parallel()
	pki := testutil.NewTestPKI(t)
	s := baseSettings(pki)
	s.CertFile = filepath.Join(t.TempDir(), "missing.pem")
	logs := &testutil.SyncBuffer{}
	b, err := eventbus.New(s, nil, newLogger(logs))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, b)
	defer stop()
	testutil.Eventually(t, 10*time.Second, "the failure logged", func() bool {
		return strings.Contains(logs.String(), "event bus listener failed to start; retrying")
	})
	if b.Running() || b.LocalAddr() != nil {
		t.Fatal("running without a certificate")
	}
	s.CertFile = pki.ServerCert
	if err := b.Apply(s); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the listener started", b.Running)
}

// TestListenerRebinds: a reload that changes listen closes the listener
// and starts it on the new address, which may be the old port on another
// host part. An address in use is not a refused reload: the listener
// logs that it failed to start, is not running, and retries every
// ListenRetry until the address is free.
func TestListenerRebinds(t *testing.T) {
	t.Parallel()
	tb := startBus(t, func(_ *eventbus.Settings, to *eventbus.Timeouts) { to.ListenRetry = 200 * time.Millisecond })
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := tb.settings
	s.Listen = busy.Addr().String()
	if err := tb.Apply(s); err != nil {
		t.Fatalf("a busy address refused the reload: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "the failed start logged", func() bool {
		return strings.Contains(tb.logs.String(), "event bus listener failed to start; retrying") && !tb.Running() && tb.LocalAddr() == nil
	})
	if c, err := net.DialTimeout("tcp", tb.addr, time.Second); err == nil {
		_ = c.Close()
		t.Errorf("the old address %s still served", tb.addr)
	}
	_ = busy.Close()
	testutil.Eventually(t, 10*time.Second, "the freed address served", func() bool {
		a := tb.LocalAddr()
		return a != nil && a.String() == s.Listen
	})
	tb.addr = s.Listen
	rs := openSession(t, tb.dial(t, nil), tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	if rs.resp.StatusCode != 200 {
		t.Errorf("on the new address: %d", rs.resp.StatusCode)
	}

	// The same port on every address: free only once the listener on
	// 127.0.0.1 is closed.
	_, port, _ := net.SplitHostPort(s.Listen)
	s.Listen = net.JoinHostPort("0.0.0.0", port)
	if err := tb.Apply(s); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the listener on 0.0.0.0", func() bool {
		a, ok := tb.LocalAddr().(*net.TCPAddr)
		return ok && a.IP.IsUnspecified() && strconv.Itoa(a.Port) == port
	})
	rs = openSession(t, tb.dial(t, nil), tokenB, hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil))
	if rs.resp.StatusCode != 200 {
		t.Errorf("on 0.0.0.0:%s: %d", port, rs.resp.StatusCode)
	}
}

// TestReloadTLSNotLoaded: a reload whose TLS files do not load is applied:
// the listener stops (no handshake is served with the files it replaced,
// a replaced client CA verifies nothing more), logs that it failed to
// start and retries; sessions the reload allows go on. Files that load
// start it again.
func TestReloadTLSNotLoaded(t *testing.T) {
	t.Parallel()
	tb := startBus(t, func(_ *eventbus.Settings, to *eventbus.Timeouts) { to.ListenRetry = 200 * time.Millisecond })
	byCert := openSession(t, tb.dial(t, tb.clientCert(t, brokerA)), "", hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	byToken := openSession(t, tb.dial(t, nil), tokenB, hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil))
	if byCert.resp.StatusCode != 200 || byToken.resp.StatusCode != 200 {
		t.Fatalf("sessions refused: %d, %d", byCert.resp.StatusCode, byToken.resp.StatusCode)
	}
	s := tb.settings
	s.ClientCAFile = filepath.Join(t.TempDir(), "missing-ca.pem")
	if err := tb.Apply(s); err != nil {
		t.Fatalf("missing TLS files refused the reload: %v", err)
	}
	if m := byCert.next(t); m.Type != eventbus.TypeError || m.Code != eventbus.CodeCredentialRevoked {
		t.Errorf("the session verified by the replaced CA told %+v, want credential_revoked", m)
	}
	testutil.Eventually(t, 10*time.Second, "the failed start logged", func() bool {
		return strings.Contains(tb.logs.String(), "event bus listener failed to start; retrying") && !tb.Running()
	})
	if c, err := tls.Dial("tcp", tb.addr, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: tb.roots(t), ServerName: "127.0.0.1",
		NextProtos: []string{"h2"}, Certificates: []tls.Certificate{*tb.clientCert(t, brokerA)}}); err == nil {
		_ = c.Close()
		t.Error("a handshake was served while the TLS files did not load")
	}
	if tb.SessionCount() != 1 {
		t.Errorf("%d sessions, want the token's kept", tb.SessionCount())
	}
	s.ClientCAFile = tb.pki.CAFile
	if err := tb.Apply(s); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the listener started again", tb.Running)
	tb.addr = tb.LocalAddr().String()
	rs := openSession(t, tb.dial(t, tb.clientCert(t, brokerA)), "", hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	if rs.resp.StatusCode != 200 {
		t.Errorf("a certificate session after the files loaded: %d", rs.resp.StatusCode)
	}
	if tb.SessionCount() != 2 {
		t.Errorf("%d sessions, want 2", tb.SessionCount())
	}
}

// TestStreamBudget: the per-stream, per-direction budget is the session
// buffer over four areas of every stream, clamped to 16 KiB..1 MiB.
func TestStreamBudget(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		buf     int64
		streams int
		want    int
	}{
		{64 << 20, 1024, 16 << 10},
		{1 << 30, 1024, 256 << 10},
		{64 << 30, 1024, 1 << 20},
		{64 << 10, 1, 16 << 10},
		{1 << 20, 16, 16 << 10},
	} {
		if got := eventbus.StreamBudget(c.buf, c.streams); got != c.want {
			t.Errorf("StreamBudget(%d, %d) = %d, want %d", c.buf, c.streams, got, c.want)
		}
	}
	s := baseSettings(testutil.NewTestPKI(t))
	s.MaxSessionBufferBytes = int64(s.MaxStreamsPerSession)*eventbus.MinSessionBudgetPerStream - 1
	if _, err := eventbus.New(s, nil, nil); err == nil || !strings.Contains(err.Error(), "64 KiB") {
		t.Errorf("a budget under max_streams × 64 KiB: %v", err)
	}
	// The welcome carries the intervals in whole milliseconds, and clients
	// refuse a zero: under a millisecond no session could open.
	for _, sub := range []func(*eventbus.Settings){
		func(s *eventbus.Settings) { s.HeartbeatInterval = 500 * time.Microsecond },
		func(s *eventbus.Settings) { s.IdleTimeout = 999 * time.Microsecond },
	} {
		s := baseSettings(testutil.NewTestPKI(t))
		sub(&s)
		if _, err := eventbus.New(s, nil, nil); err == nil || !strings.Contains(err.Error(), "from 1ms") {
			t.Errorf("heartbeat %v, idle %v: %v", s.HeartbeatInterval, s.IdleTimeout, err)
		}
	}
}

// TestTLSFilesRenewedInPlace: TLS files rewritten at the same paths (a
// certificate manager renewing a Secret) are served from the next
// handshake without a reload. A renewed server certificate keeps every
// session; a replaced client CA ends the sessions the old one verified
// (token sessions stay); files that do not load are logged and the last
// loaded ones kept.
func TestTLSFilesRenewedInPlace(t *testing.T) {
	t.Parallel()
	tb := startBus(t, func(_ *eventbus.Settings, to *eventbus.Timeouts) { to.TLSCheck = 20 * time.Millisecond })
	byCert := openSession(t, tb.dial(t, tb.clientCert(t, brokerA)), "", hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	byToken := openSession(t, tb.dial(t, nil), tokenB, hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil))
	if byCert.resp.StatusCode != 200 || byToken.resp.StatusCode != 200 {
		t.Fatalf("sessions refused: %d, %d", byCert.resp.StatusCode, byToken.resp.StatusCode)
	}
	roots := tb.roots(t) // the server's CA, whatever the client CA file becomes
	served := func() []byte {
		c, err := tls.Dial("tcp", tb.addr, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Raw
	}
	before := served()
	tb.pki.RenewServer(t)
	testutil.Eventually(t, 10*time.Second, "the renewed certificate served", func() bool { return !bytes.Equal(served(), before) })
	renewed := served()
	if tb.SessionCount() != 2 {
		t.Errorf("%d sessions after the server certificate's renewal, want both kept", tb.SessionCount())
	}

	// Another CA written over the client CA file.
	other, err := os.ReadFile(testutil.NewTestPKI(t).CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tb.pki.CAFile, other, 0o600); err != nil {
		t.Fatal(err)
	}
	if m := byCert.next(t); m.Type != eventbus.TypeError || m.Code != eventbus.CodeCredentialRevoked {
		t.Errorf("the session verified by the replaced CA told %+v, want credential_revoked", m)
	}
	testutil.Eventually(t, 10*time.Second, "the token session alone", func() bool { return tb.SessionCount() == 1 })

	logged := len(tb.logs.String())
	if err := os.WriteFile(tb.pki.ServerCert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the unloadable files logged", func() bool {
		return strings.Contains(tb.logs.String()[logged:], "event bus TLS files changed and do not load")
	})
	if !bytes.Equal(served(), renewed) {
		t.Error("the certificate served changed to files that do not load")
	}
}
