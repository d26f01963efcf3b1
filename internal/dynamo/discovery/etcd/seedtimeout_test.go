package etcd_test

import (
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestWatchOutlivesSeedTimeout: the seed phase has a fixed 30 s timeout; the long-lived
// watch has none: a pass whose seed timeout is short keeps its watch past
// it, and a put long after is applied by the same pass.
func TestWatchOutlivesSeedTimeout(t *testing.T) {
	t.Parallel()
	if discovery.SeedTimeout != 30*time.Second {
		t.Errorf("SeedTimeout = %v, want 30s", discovery.SeedTimeout)
	}
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	put(t, c, instanceKey("dynamo", "decode", 1), endpointValue(1, "decode"))
	src := newSource(t, config.Etcd{Endpoints: []string{srv.Endpoint}})
	src.SetSeedTimeout(300 * time.Millisecond)
	var passes atomic.Int32
	src.SetAfterSeed(func() { passes.Add(1) })
	h := run(t, src)
	testutil.Eventually(t, 10*time.Second, "seeded", func() bool { return h.workers()["dynamo/1"] != nil })
	time.Sleep(time.Second)
	put(t, c, instanceKey("dynamo", "decode", 2), endpointValue(2, "decode"))
	testutil.Eventually(t, 10*time.Second, "watched put", func() bool { return h.workers()["dynamo/2"] != nil })
	if n := passes.Load(); n != 1 {
		t.Errorf("%d passes: the watch must not end at the seed timeout", n)
	}
}
