package etcd

import (
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/testutil"
)

// TestProbeRevision: the probe ends the pass once the store's revision is
// below the newest the pass read (a store wiped or restored behind a
// connection that stayed up), and not while it is at or above it.
func TestProbeRevision(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	resp, err := c.Put(t.Context(), "v1/instances/x", "1")
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	var seen atomic.Int64
	seen.Store(rev)
	lost := make(chan error, 1)
	go probeRevision(t.Context(), c, "v1/instances/", &seen, 20*time.Millisecond, lost)
	select {
	case err := <-lost:
		t.Fatalf("the store at the revision read: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	seen.Store(rev + 1000) // the pass had read further than the store now is
	select {
	case err := <-lost:
		t.Logf("ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("a store behind the revision read did not end the pass")
	}
}
