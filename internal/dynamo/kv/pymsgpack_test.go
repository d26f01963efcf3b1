package kv_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// kvPublisherScript is a worker's kv-events publisher written with
// Python's msgpack over libzmq: RouterEvents as named maps (enums
// externally tagged, options nil), enveloped and framed as Dynamo does,
// block hashes as a vLLM engine gives them (i64, so negative ones), one
// message each after our subscription reaches its XPUB. argv[1] is the
// topic.
const kvPublisherScript = `
import struct, sys, time, msgpack, zmq
TOPIC, PID, W = sys.argv[1], 0x77, 7
T1, T2 = 0xd47a8f41c833328a, 2**64 - 1
msgs = []

def send(ev, seq):
    env = msgpack.packb({"topic": TOPIC, "publisher_id": PID, "sequence": seq,
                         "published_at": int(time.time() * 1000), "payload": msgpack.packb(ev)})
    msgs.append([TOPIC.encode(), struct.pack(">Q", PID), struct.pack(">Q", seq),
                 b"\x01" + struct.pack(">I", len(env)) + env])
    return len(env)

def event(eid, data, tier="device", **extra):
    ev = {"worker_id": W, "storage_tier": tier, "event": {"event_id": eid, "data": data, "dp_rank": 0}}
    ev.update(extra)
    return ev

def stored(parent, *blocks):
    return {"stored": {"parent_hash": parent, "start_position": None,
                       "blocks": [{"block_hash": b, "tokens_hash": t, "mm_extra_info": None} for b, t in blocks]}}

def sized(n, seq, ev):
    ev["pad"] = ""
    base = send(ev, seq)
    msgs.pop()
    for pad in range(n - base - 32, n - base + 32):
        ev["pad"] = "x" * pad
        if send(ev, seq) == n:
            return
        msgs.pop()
    raise SystemExit("no padding gives %d bytes" % n)

first = event(1, stored(None, (-5, T1), (-6, T2), (2**63 + 7, 5)))
send(first, 0)                                                   # accepted: 3 blocks
send(first, 1)                                                   # replay
send(event(2, {"removed": {"block_hashes": [2**63 + 7]}}), 2)    # accepted: 2 blocks
send(event(3, stored(None, (11, 9)), tier="host_pinned"), 3)    # other_tier
ev = event(4, stored(-6, (100, 6)), residency_domain="worker", future={"x": [1.5]})
ev["event"]["stored_future"] = 1
send(ev, 4)                                                      # accepted: [T1, T2, 6]
send(event(7, "cleared"), 5)                                     # gap, accepted: nothing
bad = event(8, stored(None, (1, T1)))
bad["worker_id"] = -1
send(bad, 6)                                                     # malformed
bad = event(8.0, stored(None, (1, T1)))
send(bad, 7)                                                     # malformed
send(event(8, stored(None, (1, T1))), 8)                         # accepted: [T1]
sized(1 << 20, 9, event(9, "cleared"))                           # accepted: nothing
sized((1 << 20) + 1, 10, event(10, stored(None, (2, T1))))       # oversized
send(event(11, stored(None, (3, T1), (4, T2))), 11)              # gap, accepted: [T1, T2]

ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)
pub.setsockopt(zmq.LINGER, 0)
print(pub.bind_to_random_port("tcp://127.0.0.1"), flush=True)
pub.recv()
for m in msgs:
    pub.send_multipart(m)
    time.sleep(0.01)
print(len(msgs), flush=True)
sys.stdin.readline()
`

// TestPythonMsgpackKVPublisher: what a kv-events publisher encoding with
// another msgpack implementation sends is read as Dynamo's decoder reads
// it: negative (i64) engine hashes and u64 token hashes at the top of the
// range, a resent event skipped, another tier counted apart, extra keys
// ignored, a skipped event_id a gap that empties the rank, a negative
// worker id and a float event id malformed without moving the cursor, a
// payload of exactly 1 MiB taken and one byte more refused as oversized
// (the event it held then missing, a gap).
func TestPythonMsgpackKVPublisher(t *testing.T) {
	t.Parallel()
	testutil.RequireLibzmq(t)
	testutil.RequirePythonModule(t, "msgpack", "python3-msgpack")
	for _, topic := range []string{"kv-events", "kv_events"} {
		t.Run(topic, func(t *testing.T) {
			t.Parallel()
			_, _, out := testutil.StartPython(t, kvPublisherScript, topic)
			port, err := out.ReadString('\n')
			if err != nil {
				t.Fatalf("publisher: %v", err)
			}
			r, reg := fleet.NewReducer(), fleet.NewRegistry(nil, nil)
			kvRecords(r, reg, 7, 0x77, topic, "tcp://127.0.0.1:"+strings.TrimSpace(port))
			ix := kv.NewIndex()
			m := telemetry.NewKVMetrics(nil)
			subs := kv.NewSubscriptions(reg, ix, &zmtp.Direct{}, m, nil)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); _ = subs.Run(ctx) }()
			t.Cleanup(func() { cancel(); wg.Wait() })
			if _, err := out.ReadString('\n'); err != nil {
				t.Fatalf("publisher: %v", err)
			}
			want := map[string]float64{kv.ResultAccepted: 7, kv.ResultReplay: 1, kv.ResultOtherTier: 1, kv.ResultGap: 2,
				kv.ResultMalformed: 2, wire.ResultOversized: 1}
			count := func() map[string]float64 {
				got := map[string]float64{}
				for _, res := range append(kv.Results, wire.ResultOversized, wire.ResultTopicMismatch, wire.ResultIdentityMismatch) {
					if v := promtest.ToFloat64(m.Events.WithLabelValues(res)); v != 0 {
						got[res] = v
					}
				}
				return got
			}
			testutil.Eventually(t, 10*time.Second, "every message counted", func() bool {
				return fmt.Sprint(count()) == fmt.Sprint(want)
			})
			held := 0
			for _, mt := range ix.FindMatches([]uint64{0xd47a8f41c833328a, 1<<64 - 1, 6}, nil) {
				if mt.Rank == (load.Key{Namespace: load.NS("dynamo"), WorkerID: 7}) {
					held = mt.Blocks
				}
			}
			if held != 2 {
				t.Errorf("the rank holds %d blocks of the prompt, want 2", held)
			}
		})
	}
}
