package testutil

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is an in-process etcd server on loopback, in a temp dir.
type Etcd struct {
	t                  testing.TB
	dir                string
	clientURL, peerURL url.URL
	tls                *transport.TLSInfo
	server             *embed.Etcd
	// Endpoint is the client URL (http:// or https://127.0.0.1:port).
	Endpoint string
}

// EtcdOptions adjust StartEtcd.
type EtcdOptions struct {
	// TLS serves clients over TLS with these files.
	TLS *transport.TLSInfo
}

// freePort asks the kernel for a free loopback port.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// StartEtcd starts an etcd server that stops when the test ends.
func StartEtcd(t testing.TB, opts EtcdOptions) *Etcd {
	t.Helper()
	scheme := "http"
	if opts.TLS != nil {
		scheme = "https"
	}
	e := &Etcd{t: t, dir: filepath.Join(t.TempDir(), "etcd"), tls: opts.TLS,
		clientURL: url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", freePort(t))},
		peerURL:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freePort(t))},
	}
	e.Endpoint = e.clientURL.String()
	e.Start()
	t.Cleanup(e.Stop)
	return e
}

// Start (re)starts the server on the same ports and data dir.
func (e *Etcd) Start() {
	e.t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = e.dir
	cfg.ListenClientUrls = []url.URL{e.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{e.clientURL}
	cfg.ListenPeerUrls = []url.URL{e.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{e.peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if e.tls != nil {
		cfg.ClientTLSInfo = *e.tls
	}
	var err error
	for attempt := 0; ; attempt++ {
		e.server, err = embed.StartEtcd(cfg)
		if err == nil || attempt == 20 {
			break
		}
		time.Sleep(100 * time.Millisecond) // the port may still be in TIME_WAIT after a stop
	}
	if err != nil {
		e.t.Fatalf("start etcd: %v", err)
	}
	select {
	case <-e.server.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.server.Close()
		e.t.Fatal("etcd did not become ready in 30s")
	}
}

// Stop stops the server; Start brings it back with its data.
func (e *Etcd) Stop() {
	if e.server != nil {
		e.server.Close()
		<-e.server.Server.StopNotify()
		e.server = nil
	}
}

// Client returns a client for the test's own writes (root, when auth is on).
func (e *Etcd) Client(t testing.TB, cfg clientv3.Config) *clientv3.Client {
	t.Helper()
	cfg.Endpoints = []string{e.Endpoint}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	cfg.Logger = zap.NewNop()
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Eventually polls cond every 10 ms until it holds or the deadline passes.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %s waiting for %s", within, what)
		case <-tick.C:
		}
	}
}
