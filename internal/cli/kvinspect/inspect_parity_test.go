package kvinspect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/cli/kvinspect"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestMatchHonoursBusyThreshold: the router never pins a rank over
// dynamo.load.busy_threshold, whatever its overlap (README, KV-aware
// routing: "Ranks over dynamo.load.busy_threshold ... never compete,
// whatever their overlap"; the shim passes the rule to the picker as
// pick.Request.Busy). kv-inspect match "prints what the picker would do":
// a prefill worker holding the prompt's prefix whose fresh sample says
// 95 % of its KV blocks are in use, under busy_threshold.kv_blocks 0.9,
// must not be the pin; the idle worker is.
func TestMatchHonoursBusyThreshold(t *testing.T) {
	kvPub, holderLoad, otherLoad := testutil.StartGoPublisher(t), testutil.StartGoPublisher(t), testutil.StartGoPublisher(t)
	root := t.TempDir()
	recs, err := fleetsim.Records(fleetsim.Options{Model: "m", Prefill: 2, Decode: 1})
	if err != nil {
		t.Fatal(err)
	}
	prefills, loads, events := ids(recs, "prefill")
	if len(prefills) != 2 {
		t.Fatalf("prefill workers %v", prefills)
	}
	holder, other := prefills[1], prefills[0]
	snap, files, pins := kvFleet(t, root, map[uint64]string{events[1]: kvPub.Endpoint, loads[1]: holderLoad.Endpoint, loads[0]: otherLoad.Endpoint})
	var total uint64
	for w := range snap.Workers.All() {
		if w.ID.InstanceID == holder && w.Capacity.TotalKVBlocks != nil {
			total = *w.Capacity.TotalKVBlocks
		}
	}
	if total == 0 {
		t.Fatal("the holder's card declares no total_kv_blocks")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { keepAlive(ctx, files) })

	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}]}`, strings.Repeat("How do radix trees index cached prompt blocks? ", 30))
	hashes := preparedPrompt(t, snap, pins, body).Hashes[16]
	ev := storedEvent(holder, hashes)
	wg.Go(func() {
		resend(ctx, kvPub, wire.EncodeEventMessage("kv-events", events[1], 0, 0, wire.EncodeRouterEvent(ev)))
	})
	zero, full := uint64(0), total*95/100
	publish := func(pub *testutil.GoPublisher, pid, worker uint64, used uint64) {
		publishLoad(ctx, pub, pid, wire.ActiveLoad{WorkerID: worker, ActiveDecodeBlocks: &zero, ActivePrefillTokens: &zero, KVUsedBlocks: &used})
	}
	wg.Go(func() { publish(holderLoad, loads[1], holder, full) })
	wg.Go(func() { publish(otherLoad, loads[0], other, 0) })

	path := filepath.Join(t.TempDir(), "continuum.yaml")
	yaml := fmt.Sprintf(`dynamo:
  enabled: true
  discovery:
    source: file
    file:
      root: %q
      namespace: dynamo
  load:
    direct_allow_cidrs: ["127.0.0.0/8"]
    busy_threshold:
      kv_blocks: 0.9
  kv:
    enabled: true
    artifact_cache_dir: %q
    pinned_artifacts: [%q, %q]
`, root, t.TempDir(), pins[0], pins[1])
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runLive(t, nil, body, "kv-inspect", "match", "--config", path, "--duration", "3s", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep kvinspect.MatchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if p := rep.Pin.Prefill; p == nil || p.InstanceID != wire.FormatID(other) {
		t.Errorf("prefill pin %+v: want the idle worker %s; the holder %s is over busy_threshold.kv_blocks (%d of %d blocks in use) and the router never pins it\n%s",
			rep.Pin.Prefill, wire.FormatID(other), wire.FormatID(holder), full, total, out)
	}
	for _, c := range rep.Candidates {
		if c.InstanceID == wire.FormatID(holder) && (c.Competing || c.Chosen) {
			t.Errorf("busy holder shown competing: %+v", c)
		}
	}
}

// TestInspectLeavesArtifactCacheAlone: kv-inspect workers only reads a
// fleet ("builds the same index from a live fleet without a router"), and
// loads no artifact at all; it must not delete the blobs of the artifact
// cache a router on the same host (same user, default
// dynamo.kv.artifact_cache_dir) keeps. Pruning the cache to the pins is
// the router's start and reload rule (README, Pinning tokenizer and
// template artifacts: "a start removes the blobs its pins do not name").
// An operator running `kv-inspect workers --etcd-endpoints ...` in the
// router's pod (no --config: no pins) empties the router's cache.
func TestInspectLeavesArtifactCacheAlone(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache) // os.UserCacheDir: the default artifact_cache_dir's parent
	blobs := filepath.Join(cache, "continuum", "artifacts", "blobs")
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		t.Fatal(err)
	}
	tok := []byte(`{"a reviewed":"tokenizer"}`)
	blob := filepath.Join(blobs, artifact.Sum(tok).Hex())
	if err := os.WriteFile(blob, tok, 0o600); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir() // an empty file store: an idle fleet
	code, _, errOut := runLive(t, nil, "", "kv-inspect", "workers", "--source", "file", "--file-root", root, "--duration", "0s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(blob); err != nil {
		t.Errorf("kv-inspect workers deleted the router's cached artifact %s: %v", filepath.Base(blob), err)
	}
}

// TestWorkersRouterFollowsNoRedirect: the admin token goes to --router and
// nowhere else. Go's client keeps the Authorization field across a
// redirect to the same host on another port or scheme (the project's own
// words in internal/tui/client.go, whose `top` follows no redirect for
// that reason: README, "redirects are not followed, so the admin token
// goes nowhere but --router"). kv-inspect workers --router reads the same
// admin API with the same token ($CONTINUUM_ADMIN_TOKEN) and must not hand
// it to the address a redirect names.
func TestWorkersRouterFollowsNoRedirect(t *testing.T) {
	got := make(chan string, 4)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer elsewhere.Close()
	router := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusFound)
	}))
	defer router.Close()
	code, _, errOut := runLive(t, map[string]string{kvinspect.TokenEnv: "sekrit"}, "", "kv-inspect", "workers", "--router", router.URL)
	if code == 0 {
		t.Errorf("exit 0 through a redirect: %s", errOut)
	}
	select {
	case auth := <-got:
		if auth != "" {
			t.Errorf("the admin token reached the redirect's target %s: Authorization %q", elsewhere.URL, auth)
		}
	default:
	}
}
