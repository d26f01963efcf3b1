package routerd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestWatcherReplacementTiers: a backoff-only change and a namespace list
// change replace the watcher (reason logged at info, restart counted) and
// keep the kept workers' first_seen; a connection change resets the
// reducer, so first_seen starts again.
func TestWatcherReplacementTiers(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	for _, w := range []struct {
		ns string
		id int
	}{{"a", 1}, {"b", 2}} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Put(ctx, fmt.Sprintf("v1/instances/%s/decode/generate/%x", w.ns, w.id),
			fmt.Sprintf(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":%d}`, w.id))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(backend.Close)
	port := srv.Endpoint[strings.LastIndex(srv.Endpoint, ":")+1:]
	cfg := func(endpoint, max string, namespaces string, pools string) string {
		return fmt.Sprintf(`server:
  bind_address: "127.0.0.1:0"
admin:
  token: %q
backends:
  - {name: fa, url: %q}
  - {name: fb, url: %q}
disaggregated_serving: {enabled: true}
dynamo:
  enabled: true
  discovery:
    etcd:
      endpoints: [%q]
      namespaces: %s
      watch_reconnect_backoff: {initial: 500ms, max: %s}
  load:
    direct_allow_cidrs: ["127.0.0.0/8"]
  shim:
    pools:
%s`, adminToken, backend.URL, backend.URL, endpoint, namespaces, max, pools)
	}
	both := "      - {namespace: a, backends: [fa]}\n      - {namespace: b, backends: [fb]}\n"
	onlyA := "      - {namespace: a, backends: [fa]}\n"
	f := startReload(t, cfg(srv.Endpoint, "30s", "[a, b]", both))
	seen := func() map[string]string {
		code, body := f.adminDo(http.MethodGet, "/admin/dynamo/workers", "")
		if code != http.StatusOK {
			t.Fatalf("workers: %d %s", code, body)
		}
		var resp admin.WorkersResponse
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, w := range resp.Workers {
			out[w.Namespace+"/"+w.InstanceID] = w.FirstSeen
		}
		return out
	}
	testutil.Eventually(t, 10*time.Second, "both workers", func() bool { return len(seen()) == 2 })
	first := seen()["a/1"]
	time.Sleep(1100 * time.Millisecond) // first_seen has a resolution of a second

	f.write(cfg(srv.Endpoint, "40s", "[a, b]", both))
	f.waitReload(1)
	testutil.Eventually(t, 10*time.Second, "connected after backoff change", func() bool { return connected(t, f.metrics) == 1 })
	if restarts(t, f.metrics) != 1 || !strings.Contains(f.logs.String(), "reason=backoff") {
		t.Errorf("backoff: restarts %v, logs:\n%s", restarts(t, f.metrics), f.logs.String())
	}
	if got := seen(); len(got) != 2 || got["a/1"] != first {
		t.Errorf("backoff-only change: workers %v, want a/1 first_seen %s kept", got, first)
	}

	f.write(cfg(srv.Endpoint, "40s", "[a]", onlyA))
	f.waitReload(2)
	testutil.Eventually(t, 10*time.Second, "b pruned", func() bool { return len(seen()) == 1 })
	if restarts(t, f.metrics) != 2 || !strings.Contains(f.logs.String(), "reason=namespaces") {
		t.Errorf("namespaces: restarts %v", restarts(t, f.metrics))
	}
	if got := seen(); got["a/1"] != first {
		t.Errorf("namespace pruning: workers %v, want a/1 first_seen %s kept", got, first)
	}

	f.write(cfg("localhost:"+port, "40s", "[a]", onlyA))
	f.waitReload(3)
	testutil.Eventually(t, 10*time.Second, "a again", func() bool { return len(seen()) == 1 })
	if restarts(t, f.metrics) != 3 || !strings.Contains(f.logs.String(), "reason=connection") {
		t.Errorf("connection: restarts %v", restarts(t, f.metrics))
	}
	if got := seen(); got["a/1"] == first {
		t.Errorf("connection change: a/1 first_seen %s kept; the reducer must start again", first)
	}
}
