package eventbus_test

import (
	"net"
	"path/filepath"
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

// TestListenerRebinds: a reload that changes listen binds the new address
// and serves it; one whose address is in use is refused and the running
// listener kept.
func TestListenerRebinds(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	s := tb.settings
	s.Listen = busy.Addr().String()
	if err := tb.Apply(s); err == nil || !strings.Contains(err.Error(), "the running listener is kept") {
		t.Errorf("a busy address: %v", err)
	}
	if tb.LocalAddr().String() != tb.addr {
		t.Errorf("listener moved to %v", tb.LocalAddr())
	}
	s.Listen = "localhost:0"
	if err := tb.Apply(s); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the new address served", func() bool {
		a := tb.LocalAddr()
		return a != nil && a.String() != tb.addr
	})
	tb.addr = tb.LocalAddr().String()
	rs := openSession(t, tb.dial(t, nil), tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	if rs.resp.StatusCode != 200 {
		t.Errorf("on the new address: %d", rs.resp.StatusCode)
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
}
