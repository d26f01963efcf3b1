package kvstack_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kvstack"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/testutil"
)

// registry holds one decode worker (two dp ranks) of model "m" and its
// kv-events channel at endpoint.
func registry(worker, pid uint64, endpoint string) *fleet.Registry {
	r, reg := fleet.NewReducer(), fleet.NewRegistry(nil, nil)
	t0 := time.Unix(1_800_000_000, 0)
	r.Put(fmt.Sprintf("v1/instances/dynamo/decode/generate/%x", worker), fmt.Appendf(nil, `{"component":"decode","endpoint":"generate","instance_id":%d}`, worker), t0)
	r.Put(fmt.Sprintf("v1/mdc/dynamo/decode/generate/%x", worker), fmt.Appendf(nil,
		`{"component":"decode","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m","worker_type":"Decode","kv_cache_block_size":16,
		"runtime_config":{"data_parallel_size":2}}}`, worker), t0)
	r.Put(fmt.Sprintf("v1/event_channels/namespace/dynamo/topic/kv-events/%x", pid), fmt.Appendf(nil,
		`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":"kv-events","instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":%q}}}`, pid, endpoint), t0)
	reg.Publish(r.Build(t0))
	return reg
}

// TestStackFollowsTheFleet: a stack built from the configuration subscribes
// to the fleet's kv-events publisher, and its view shows each rank's
// blocks and cursor, the subscription and the events by result, in the
// admin API's shape; Run ends with its context.
func TestStackFollowsTheFleet(t *testing.T) {
	t.Parallel()
	pub := testutil.StartGoPublisher(t)
	reg := registry(9, 0x99, pub.Endpoint)
	cfg := config.Default()
	cfg.Dynamo.KV.ArtifactCacheDir = t.TempDir()
	st, err := kvstack.New(kvstack.Options{Config: cfg, Registry: reg, Base: pick.NewLoadBased(load.NewStore(time.Second, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if st.Picker == nil || st.Subscriptions == nil {
		t.Fatalf("picker %v, subscriptions %v", st.Picker, st.Subscriptions)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = st.Run(ctx) })
	wg.Go(func() {
		ev := wire.RouterEvent{WorkerID: 9, DPRank: 1, Kind: wire.KVStored, EventID: 4,
			Blocks: []wire.StoredBlock{{BlockHash: 1, TokensHash: 11}, {BlockHash: 2, TokensHash: 12}}}
		msg := wire.EncodeEventMessage("kv-events", 0x99, 0, 0, wire.EncodeRouterEvent(ev))
		for ctx.Err() == nil {
			_ = pub.Send(msg) // resent: the subscriber joins late; later copies are replays
			time.Sleep(10 * time.Millisecond)
		}
	})
	testutil.Eventually(t, 10*time.Second, "the stored event indexed", func() bool {
		v := st.View()
		return len(v.Ranks) == 1 && v.Ranks[0].Blocks == 2
	})
	v := st.View()
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Errorf("Run: %v", runErr)
	}
	r := v.Ranks[0]
	if !v.Enabled || r.WorkerID != "9" || r.Namespace != "dynamo" || r.DPRank != 1 || len(r.Cursors) != 1 ||
		r.Cursors[0].PublisherID != "153" || r.Cursors[0].EventID != 4 || r.Cursors[0].Gaps != 0 {
		t.Errorf("rank %+v", r)
	}
	if v.Index.Nodes != 2 || v.Index.StoredBlocks != 2 || v.Index.Bytes <= 0 || v.Index.Subscriptions != 1 {
		t.Errorf("index %+v", v.Index)
	}
	if len(v.Subscriptions) != 1 || v.Subscriptions[0].Family != "kv-events" || v.Subscriptions[0].PublisherID != "153" {
		t.Errorf("subscriptions %+v", v.Subscriptions)
	}
	if len(v.Events) == 0 || v.Events[0].Result != "accepted" || v.Events[0].Count != 1 {
		t.Errorf("events %+v", v.Events)
	}
	if v.Results == nil || len(v.Results) != 0 {
		t.Errorf("selection results %+v", v.Results)
	}
}

// TestStackOptions: without a base picker none is built; with the broker
// transport there are no direct subscriptions; a bad pin or CIDR names
// its key.
func TestStackOptions(t *testing.T) {
	t.Parallel()
	reg := fleet.NewRegistry(nil, nil)
	cfg := config.Default()
	cfg.Dynamo.Load.Transport = config.TransportBroker
	st, err := kvstack.New(kvstack.Options{Config: cfg, Registry: reg})
	if err != nil || st.Picker != nil || st.Subscriptions != nil {
		t.Fatalf("%+v %v", st, err)
	}
	if v := st.View(); v.Subscriptions == nil || v.Events == nil || v.Ranks == nil {
		t.Errorf("null lists: %+v", v)
	}
	cfg = config.Default()
	cfg.Dynamo.KV.PinnedArtifacts = []string{"blake3:nope"}
	if _, err := kvstack.New(kvstack.Options{Config: cfg, Registry: reg}); err == nil || !strings.Contains(err.Error(), "dynamo.kv.pinned_artifacts[0]") {
		t.Errorf("bad pin: %v", err)
	}
	cfg = config.Default()
	cfg.Dynamo.Load.DirectAllowCIDRs = []string{"10.0.0.0/99"}
	if _, err := kvstack.New(kvstack.Options{Config: cfg, Registry: reg}); err == nil || !strings.Contains(err.Error(), "direct_allow_cidrs") {
		t.Errorf("bad cidr: %v", err)
	}
	s := kvstack.Settings(&config.KV{OverlapScoreCredit: 2, PrefillLoadScale: 3, RouterTemperature: 0.5, SendTokenData: true})
	if s.OverlapScoreCredit != 2 || s.PrefillLoadScale != 3 || s.Temperature != 0.5 || !s.SendTokenData {
		t.Errorf("settings %+v", s)
	}
}
