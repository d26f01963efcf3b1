package testutil

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/continuum-router/continuum/internal/etcdembed"
)

// Etcd is an in-process etcd server on loopback, in a temp dir.
type Etcd struct {
	t      testing.TB
	server *etcdembed.Server
	// Endpoint is the client URL (http:// or https://127.0.0.1:port).
	Endpoint string
}

// EtcdOptions adjust StartEtcd.
type EtcdOptions struct {
	// TLS serves clients over TLS with these files.
	TLS *transport.TLSInfo
}

// StartEtcd starts an etcd server that stops when the test ends.
func StartEtcd(t testing.TB, opts EtcdOptions) *Etcd {
	t.Helper()
	srv, err := etcdembed.New(filepath.Join(t.TempDir(), "etcd"), opts.TLS)
	if err != nil {
		t.Fatal(err)
	}
	e := &Etcd{t: t, server: srv}
	e.Start()
	e.Endpoint = srv.Endpoint() // the first start may have moved the ports
	t.Cleanup(e.Stop)
	return e
}

// Start (re)starts the server on the same ports and data dir.
func (e *Etcd) Start() {
	e.t.Helper()
	if err := e.server.Start(); err != nil {
		e.t.Fatal(err)
	}
}

// Stop stops the server; Start brings it back with its data.
func (e *Etcd) Stop() { e.server.Stop() }

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
