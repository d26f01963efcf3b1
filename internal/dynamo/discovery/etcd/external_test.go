package etcd_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestAgainstExternalEtcd reads a fleet written to the etcd at
// ETCD_ENDPOINTS (comma-separated), such as the etcd 3.5 server a Dynamo
// deployment runs, and without it to an embedded one. It writes only under
// a namespace of its own (continuum-test-<pid>-<time>) and deletes
// everything it wrote when it ends, so it may point at a shared etcd.
func TestAgainstExternalEtcd(t *testing.T) {
	t.Parallel()
	var endpoints []string
	if v := os.Getenv("ETCD_ENDPOINTS"); v != "" {
		endpoints = strings.Split(v, ",")
	} else {
		endpoints = []string{testutil.StartEtcd(t, testutil.EtcdOptions{}).Endpoint}
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ns := fmt.Sprintf("continuum-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, prefix := range []string{"v1/instances/" + ns + "/", "v1/mdc/" + ns + "/", "v1/event_channels/namespace/" + ns + "/"} {
			if _, err := c.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
				t.Errorf("cleaning up %s: %v", prefix, err)
			}
		}
	})
	put(t, c, instanceKey(ns, "decode", 1), endpointValue(1, "decode"))
	put(t, c, fmt.Sprintf("v1/mdc/%s/decode/generate/1", ns),
		`{"component":"decode","endpoint":"generate","instance_id":1,"card_json":{"display_name":"m","worker_type":"Decode"}}`)
	h := run(t, newSource(t, config.Etcd{Endpoints: endpoints}, ns))
	testutil.Eventually(t, 15*time.Second, "the seeded worker", func() bool {
		w := h.workers()[ns+"/1"]
		return w != nil && w.Model == "m"
	})
	put(t, c, instanceKey(ns, "prefill", 2), endpointValue(2, "prefill"))
	testutil.Eventually(t, 15*time.Second, "a watched put", func() bool { return h.workers()[ns+"/2"] != nil })
	if _, err := c.Delete(context.Background(), instanceKey(ns, "decode", 1)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "a watched delete", func() bool { return h.workers()[ns+"/1"] == nil })
}
