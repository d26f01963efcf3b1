package filestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/discovery/filestore"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/testutil"
)

// write publishes a record the way Dynamo does: a temp file, then a rename.
func write(t *testing.T, root, bucket, key, value string) string {
	t.Helper()
	dir := filepath.Join(root, bucket)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".tmp_0123456789abcdef")
	if err := os.WriteFile(tmp, []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir, wire.FileStoreName(key))
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	return final
}

func endpoint(id int, component string) string {
	return fmt.Sprintf(`{"type":"Endpoint","namespace":"dynamo","component":%q,"endpoint":"generate","instance_id":%d,"transport":{"tcp":"127.0.0.1:1"}}`, component, id)
}

func start(t *testing.T, root string, ttl time.Duration) *fleet.Registry {
	t.Helper()
	return startScan(t, root, ttl, 20*time.Millisecond)
}

// startScan runs a watcher over root that also lists every bucket each
// scan; time.Hour leaves it to filesystem events alone.
func startScan(t *testing.T, root string, ttl, scan time.Duration) *fleet.Registry {
	t.Helper()
	src, err := filestore.New(root, []string{"dynamo", "ns.one"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	src.SetTiming(ttl, scan)
	return watch(t, src)
}

// watch runs a discovery watcher over src into a new registry until the
// test ends.
func watch(t *testing.T, src *filestore.Source) *fleet.Registry {
	t.Helper()
	reg := fleet.NewRegistry(nil, nil)
	w := &discovery.Watcher{Source: src, Registry: reg, Backoff: discovery.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return reg
}

func ids(reg *fleet.Registry) map[string]bool {
	out := map[string]bool{}
	for w := range reg.Snapshot().Workers.All() {
		out[w.ID.Namespace+"/"+w.InstanceHex()] = true
	}
	return out
}

func TestFileStore(t *testing.T) {
	root := t.TempDir()
	write(t, root, "v1/instances", "dynamo/decode/generate/1", endpoint(1, "decode"))
	write(t, root, "v1/instances", "other/decode/generate/9", endpoint(9, "decode"))
	reg := start(t, root, time.Hour)
	testutil.Eventually(t, 10*time.Second, "seeded worker", func() bool { return ids(reg)["dynamo/1"] })
	if ids(reg)["other/9"] {
		t.Error("an unwatched namespace was read")
	}

	// A bucket created after start is followed.
	write(t, root, "v1/mdc", "dynamo/decode/generate/1", `{"type":"Model","component":"decode","endpoint":"generate","instance_id":1,"card_json":{"display_name":"m","worker_type":"Decode"}}`)
	testutil.Eventually(t, 10*time.Second, "card joined", func() bool {
		w := slices.Collect(reg.Snapshot().Workers.All())
		return len(w) == 1 && w[0].Model == "m"
	})

	// Event-channel keys keep their own %XX escapes through the file name.
	write(t, root, "v1/event_channels", "namespace/ns%2Eone/topic/kv_metrics/2a",
		`{"type":"EventChannel","scope":{"kind":"namespace","name":"ns.one"},"topic":"kv_metrics","instance_id":42,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://127.0.0.1:5"}}}`)
	testutil.Eventually(t, 10*time.Second, "publisher", func() bool {
		p := slices.Collect(reg.Snapshot().Publishers.All())
		return len(p) == 1 && p[0].Namespace == "ns.one" && p[0].PublisherID == 42
	})

	// A temp file is never a record.
	if err := os.WriteFile(filepath.Join(root, "v1/instances", ".tmp_ffff"), []byte(endpoint(3, "decode")), 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, root, "v1/instances", "dynamo/prefill/generate/2", endpoint(2, "prefill"))
	testutil.Eventually(t, 10*time.Second, "second worker", func() bool { return ids(reg)["dynamo/2"] })
	if ids(reg)["dynamo/3"] {
		t.Error("a temp file became a worker")
	}

	// Removing a file removes the worker.
	if err := os.Remove(filepath.Join(root, "v1/instances", wire.FileStoreName("dynamo/prefill/generate/2"))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "removed worker", func() bool { return !ids(reg)["dynamo/2"] })
}

// TestTTL: a file not touched for the TTL is not live; touching it again
// brings the record back, as Dynamo's keep-alive does.
func TestTTL(t *testing.T) {
	root := t.TempDir()
	path := write(t, root, "v1/instances", "dynamo/decode/generate/1", endpoint(1, "decode"))
	reg := start(t, root, 5*time.Second)
	testutil.Eventually(t, 10*time.Second, "live worker", func() bool { return ids(reg)["dynamo/1"] })
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "expired worker", func() bool { return !ids(reg)["dynamo/1"] })
	now := time.Now()
	if err := os.Chtimes(path, now, now); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "touched worker", func() bool { return ids(reg)["dynamo/1"] })
}

// TestFileNameDecoding: a record under Dynamo's own example of a file name
// (the key dynamo/backend/generate/17216e63492ef21f, its slashes escaped)
// is read as that key.
func TestFileNameDecoding(t *testing.T) {
	const name = "dynamo%2Fbackend%2Fgenerate%2F17216e63492ef21f"
	if wire.FileStoreName("dynamo/backend/generate/17216e63492ef21f") != name {
		t.Fatal("the test's encoder disagrees with Dynamo's example")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "v1/instances")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(endpoint(0x17216e63492ef21f, "backend")), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := start(t, root, time.Hour)
	testutil.Eventually(t, 10*time.Second, "the worker of Dynamo's example", func() bool { return ids(reg)["dynamo/17216e63492ef21f"] })
}

func TestMissingRoot(t *testing.T) {
	src, err := filestore.New(filepath.Join(t.TempDir(), "absent"), []string{"dynamo"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Run(context.Background(), nopSink{}); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Fatalf("err = %v", err)
	}
}

type nopSink struct{}

func (nopSink) Put(string, []byte) {}
func (nopSink) Delete(string)      {}
func (nopSink) ResyncBegin()       {}
func (nopSink) ResyncEnd()         {}
func (nopSink) Flush()             {}

// TestLegacyChannelKeys: Dynamo 1.2 channel keys (<ns>/<component>/<topic>/<hex>)
// share the bucket with scoped ones; those of a watched namespace are
// read, others are not, and a 1.2 key of a namespace named "namespace" is
// not taken for a watched namespace's scoped key.
func TestLegacyChannelKeys(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	channel := func(ns, component string, id int) string {
		return fmt.Sprintf(`{"type":"EventChannel","namespace":%q,"component":%q,"topic":"kv_metrics","instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://127.0.0.1:5"}}}`, ns, component, id)
	}
	write(t, root, "v1/event_channels", "dynamo/decode/kv_metrics/2a", channel("dynamo", "decode", 42))
	write(t, root, "v1/event_channels", "other/decode/kv_metrics/2b", channel("other", "decode", 43))
	write(t, root, "v1/event_channels", "namespace/dynamo/kv_metrics/2c", channel("namespace", "dynamo", 44))
	reg := start(t, root, time.Hour)
	testutil.Eventually(t, 10*time.Second, "the legacy publisher", func() bool {
		p := slices.Collect(reg.Snapshot().Publishers.All())
		return len(p) == 1 && p[0].Namespace == "dynamo" && p[0].PublisherID == 42 && p[0].Component == "decode"
	})
	if p := reg.Snapshot().Problems; len(p) != 0 {
		t.Errorf("problems %+v", p)
	}
}

// TestKeyspaceCapReported: files past the reducer's cap are not held, and
// the keyspace is reported over capacity, as for any other source.
func TestKeyspaceCapReported(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "v1/instances")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const total = fleet.MaxRecordsPerKeyspace + 10
	for i := range total {
		name := wire.FileStoreName(fmt.Sprintf("dynamo/decode/generate/%x", i))
		if err := os.WriteFile(filepath.Join(dir, name), []byte(endpoint(i, "decode")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reg := startScan(t, root, time.Hour, time.Hour)
	testutil.Eventually(t, 30*time.Second, "seeded fleet", func() bool { return reg.Snapshot().Workers.Len() > 0 })
	snap := reg.Snapshot()
	if n := snap.Workers.Len(); n != fleet.MaxRecordsPerKeyspace {
		t.Fatalf("%d workers from %d files; the cap is %d", n, total, fleet.MaxRecordsPerKeyspace)
	}
	if len(snap.Problems) != 1 || snap.Problems[0].Kind != fleet.ProblemOverCapacity {
		t.Fatalf("problems %+v, want one over_capacity", snap.Problems)
	}
}

// TestStoreMadeAfterStart: a root that is still empty when the source starts
// (the router up before any worker) is followed by its events alone, once
// v1/ and its buckets are made: the scan is off.
func TestStoreMadeAfterStart(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	reg := startScan(t, root, time.Hour, time.Hour)
	testutil.Eventually(t, 10*time.Second, "empty view published", func() bool { return reg.Generation() > 0 })

	write(t, root, "v1/instances", "dynamo/decode/generate/1", endpoint(1, "decode"))
	testutil.Eventually(t, 10*time.Second, "worker in a new v1/", func() bool { return ids(reg)["dynamo/1"] })

	write(t, root, "v1/mdc", "dynamo/decode/generate/1", `{"type":"Model","component":"decode","endpoint":"generate","instance_id":1,"card_json":{"display_name":"m","worker_type":"Decode"}}`)
	testutil.Eventually(t, 10*time.Second, "card in a new bucket", func() bool {
		w := slices.Collect(reg.Snapshot().Workers.All())
		return len(w) == 1 && w[0].Model == "m"
	})

	write(t, root, "v1/instances", "dynamo/prefill/generate/2", endpoint(2, "prefill"))
	testutil.Eventually(t, 10*time.Second, "second worker", func() bool { return ids(reg)["dynamo/2"] })
	if err := os.Remove(filepath.Join(root, "v1/instances", wire.FileStoreName("dynamo/decode/generate/1"))); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "removed worker", func() bool { return !ids(reg)["dynamo/1"] })
}

// TestScanPastListLimit: a scan reads at most a bounded number of entries
// of a bucket; keys it did not reach (read from their files' events) stay
// while their files live, and go when their files expire, as listed ones do.
func TestScanPastListLimit(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	// The bucket is there from the start, watched: every file made below
	// is read from its event, whatever a scan reaches.
	if err := os.MkdirAll(filepath.Join(root, "v1/instances"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := filestore.New(root, []string{"dynamo"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	src.SetTiming(time.Hour, 20*time.Millisecond)
	src.SetListLimit(4)
	reg := watch(t, src)
	testutil.Eventually(t, 10*time.Second, "empty view published", func() bool { return reg.Generation() > 0 })

	const n = 8
	var paths []string
	for i := 1; i <= n; i++ {
		paths = append(paths, write(t, root, "v1/instances", fmt.Sprintf("dynamo/decode/generate/%x", i), endpoint(i, "decode")))
	}
	testutil.Eventually(t, 10*time.Second, "every worker", func() bool { return len(ids(reg)) == n })
	// Ten scans, each reading half the bucket.
	time.Sleep(200 * time.Millisecond)
	if got := len(ids(reg)); got != n {
		t.Fatalf("%d of %d workers left after scans that read %d entries each", got, n, 4)
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, p := range paths {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "every expired worker gone", func() bool { return len(ids(reg)) == 0 })
}

// TestCapCountsOnlyHeldChannels: channels of topics the router does not
// subscribe to (active_sequences_events) are never held by the reducer, so
// they must not use up the 16384 keys of the event-channel keyspace. With
// that many of them in the bucket, kv_metrics channels written later are
// still publishers, none is reported over capacity, and removing one
// removes its publisher.
func TestCapCountsOnlyHeldChannels(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "v1/event_channels")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	channel := func(topic string, id int) string {
		return fmt.Sprintf(`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":%q,"instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://127.0.0.1:5"}}}`, topic, id)
	}
	for i := range fleet.MaxRecordsPerKeyspace {
		key := fmt.Sprintf("namespace/dynamo/topic/active_sequences_events/%x", i+1)
		if err := os.WriteFile(filepath.Join(dir, wire.FileStoreName(key)), []byte(channel("active_sequences_events", i+1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reg := startScan(t, root, time.Hour, time.Hour)
	testutil.Eventually(t, 30*time.Second, "seeded", func() bool { return reg.Generation() > 0 })

	pubs := func() map[uint64]bool {
		out := map[uint64]bool{}
		for p := range reg.Snapshot().Publishers.All() {
			out[p.PublisherID] = true
		}
		return out
	}
	a := write(t, root, "v1/event_channels", "namespace/dynamo/topic/kv_metrics/100001", channel("kv_metrics", 0x100001))
	write(t, root, "v1/event_channels", "namespace/dynamo/topic/kv_metrics/100002", channel("kv_metrics", 0x100002))
	testutil.Eventually(t, 10*time.Second, "both kv_metrics publishers", func() bool {
		p := pubs()
		return p[0x100001] && p[0x100002]
	})
	if probs := reg.Snapshot().Problems; len(probs) != 0 {
		t.Errorf("problems %+v, want none: the reducer holds 2 channel keys", probs)
	}
	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the removed channel's publisher gone", func() bool { return !pubs()[0x100001] })
}
