package etcd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/etcdembed"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestConnectionBlipResyncs: a connection closed and made again at once
// (the client reconnects before its connection ever reports a failure)
// ends the pass like any closed connection: a full resync, not a watch
// resumed unnoticed.
func TestConnectionBlipResyncs(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	put(t, c, instanceKey("dynamo", "decode", 1), endpointValue(1, "decode"))
	p := testutil.StartProxy(t, srv.Endpoint[len("http://"):], 10*time.Second)
	src := newSource(t, config.Etcd{Endpoints: []string{"http://" + p.Addr()}})
	var passes atomic.Int32
	src.SetAfterSeed(func() { passes.Add(1) })
	h := run(t, src)
	testutil.Eventually(t, 10*time.Second, "seeded", func() bool { return h.workers()["dynamo/1"] != nil })
	p.Cut()
	testutil.Eventually(t, 15*time.Second, "a second pass", func() bool { return passes.Load() >= 2 })
	put(t, c, instanceKey("dynamo", "decode", 2), endpointValue(2, "decode"))
	testutil.Eventually(t, 10*time.Second, "an event after it", func() bool { return h.workers()["dynamo/2"] != nil })
}

// TestStoreWentBack: the etcd member restarts with its data wiped behind
// a proxy that keeps the router's connection up; the pass notices that the
// store's revision went below what it read and resyncs, dropping the
// worker that is gone and finding the one registered since, instead of a
// watch waiting on revisions the new store has not reached.
func TestStoreWentBack(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "etcd")
	srv, err := etcdembed.New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	client := func() *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c := client()
	put(t, c, instanceKey("dynamo", "decode", 1), endpointValue(1, "decode"))
	for i := range 50 {
		put(t, c, "unrelated", fmt.Sprint(i)) // the old store's revision runs ahead
	}
	p := testutil.StartProxy(t, srv.Endpoint()[len("http://"):], 10*time.Second)
	src := newSource(t, config.Etcd{Endpoints: []string{"http://" + p.Addr()}})
	src.SetProbeEvery(200 * time.Millisecond)
	h := run(t, src)
	testutil.Eventually(t, 10*time.Second, "seeded", func() bool { return h.workers()["dynamo/1"] != nil })
	srv.Stop()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	put(t, client(), instanceKey("dynamo", "decode", 2), endpointValue(2, "decode"))
	testutil.Eventually(t, 20*time.Second, "the new store's view", func() bool {
		w := h.workers()
		return w["dynamo/1"] == nil && w["dynamo/2"] != nil
	})
}

// TestRevisionProbeUnderWrites: workers registering while a pass watches
// move the store's revision forward only. A watch event for a write
// applied while the probe's read ran may reach the pass before the read's
// answer (etcd tells watchers of a write before reads see it), so an
// answer below the newest revision the watch delivered is no store gone
// back: the pass does not end and resync for it.
func TestRevisionProbeUnderWrites(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	src := newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}})
	src.SetProbeEvery(5 * time.Millisecond)
	var passes atomic.Int32
	src.SetAfterSeed(func() { passes.Add(1) })
	h := run(t, src)
	testutil.Eventually(t, 10*time.Second, "seeded", func() bool { return passes.Load() == 1 })
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	for i := uint64(1); ctx.Err() == nil; i++ {
		if _, err := c.Put(ctx, instanceKey("dynamo", "decode", i%32+1), endpointValue(i%32+1, "decode")); err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
	}
	if n := passes.Load(); n != 1 {
		t.Fatalf("%d passes while the store only moved forward; want 1 (the probe read a concurrent write's watch event as the store going back)", n)
	}
	if len(h.workers()) != 32 {
		t.Errorf("%d workers, want 32", len(h.workers()))
	}
}
