package load_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// pymsgpackScript is a kv_metrics publisher written the way Dynamo's is,
// but with Python's msgpack and libzmq instead of our own encoder: each
// case builds its envelope and ActiveLoad with msgpack.packb (named maps,
// payload as bin, integers in the most compact form msgpack-python
// picks), frames it [topic][publisher_id u64 BE][sequence u64 BE]
// [01 | payload_len u32 BE | envelope], and states the result the router
// must count for it. It prints the port, waits for our subscription on
// its XPUB, prints the cases as JSON, then sends them.
const pymsgpackScript = `
import json, struct, sys, time, msgpack, zmq

PID = 0x1f3a4b
WORKER = 1186445869714687
cases = []

def frames(env, topic=b"kv_metrics", pid=PID, seq=None):
    body = msgpack.packb(env, use_bin_type=True)
    return [topic, struct.pack(">Q", pid), struct.pack(">Q", env["sequence"] if seq is None else seq),
            b"\x01" + struct.pack(">I", len(body)) + body]

def envelope(seq, load, **extra):
    env = {"topic": "kv_metrics", "publisher_id": PID, "sequence": seq,
           "published_at": 1700000000000, "payload": msgpack.packb(load, use_bin_type=True)}
    env.update(extra)
    return env

def case(name, result, msg, used=None):
    cases.append({"name": name, "result": result, "kv_used_blocks": used})
    msgs.append(msg)

def load(**fields):
    l = {"worker_id": WORKER, "dp_rank": 0, "active_decode_blocks": None,
         "active_prefill_tokens": None, "kv_used_blocks": 30}
    l.update(fields)
    return {k: v for k, v in l.items() if v is not Ellipsis}

msgs = []
seq = 0
def nxt():
    global seq
    seq += 1
    return seq

case("dynamo 1.4.2 sample", "accepted", frames(envelope(0, load())), 30)
for v in (0, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 0xffffffff, 0x100000000, 2**64 - 1):
    case("kv_used_blocks %d" % v, "accepted", frames(envelope(nxt(), load(kv_used_blocks=v))), v)
case("negative fixint", "malformed", frames(envelope(nxt(), load(kv_used_blocks=-1))))
case("negative int64", "malformed", frames(envelope(nxt(), load(kv_used_blocks=-(2**63)))))
case("float where u64", "malformed", frames(envelope(nxt(), load(kv_used_blocks=3.0))))
case("every option nil", "accepted", frames(envelope(nxt(), load(kv_used_blocks=None))))
case("dp_rank absent", "accepted", frames(envelope(nxt(), load(dp_rank=..., kv_used_blocks=7))), 7)
case("dp_rank nil", "malformed", frames(envelope(nxt(), load(dp_rank=None))))
case("worker_id absent", "malformed", frames(envelope(nxt(), load(worker_id=...))))
case("extra keys", "accepted", frames(envelope(nxt(), load(kv_used_blocks=8, scheduler_load_scope="local", waiting_requests=2, future={"a": [1, 2.5]}), published_at_ns=1700000000000000000)), 8)
case("published_at nil", "malformed", frames(envelope(nxt(), load(), published_at=None)))
case("published_at absent", "accepted", frames({k: v for k, v in envelope(nxt(), load(kv_used_blocks=14)).items() if k != "published_at"}), 14)
case("payload as a list of byte values", "accepted", frames(envelope(nxt(), load(kv_used_blocks=15), payload=list(msgpack.packb(load(kv_used_blocks=15), use_bin_type=True)))), 15)
case("payload list with 256", "malformed", frames(envelope(nxt(), load(), payload=[0x81, 256])))
case("positional ActiveLoad", "accepted", frames(envelope(nxt(), [WORKER, 0, None, None, 9])), 9)
s = nxt()
case("positional envelope", "accepted", frames([], seq=s)[:3] + [b""], 10)
body = msgpack.packb(["kv_metrics", PID, s, 1700000000000, msgpack.packb(load(kv_used_blocks=10), use_bin_type=True)], use_bin_type=True)
msgs[-1][3] = b"\x01" + struct.pack(">I", len(body)) + body
case("trailing separator on frame 0", "topic_mismatch", frames(envelope(nxt(), load()), topic=b"kv_metrics."))
case("trailing separator in envelope", "topic_mismatch", frames(envelope(nxt(), load(), topic="kv_metrics.")))
case("five frames", "malformed", frames(envelope(nxt(), load())) + [b""])
case("three frames", "malformed", frames(envelope(nxt(), load()))[:3])
case("other publisher in envelope", "identity_mismatch", frames(envelope(nxt(), load(), publisher_id=PID + 1)))
case("other publisher in both", "identity_mismatch", frames(envelope(nxt(), load(), publisher_id=PID + 1), pid=PID + 1))
def sized(n, s, used):
    for pad in range(n):
        f = frames(envelope(s, load(kv_used_blocks=used), pad="x" * pad))
        if len(f[3]) - 5 == n:
            return f
    raise SystemExit("no padding gives %d bytes" % n)
case("envelope of 16 KiB", "accepted", sized(16384, nxt(), 11), 11)
case("envelope of 16 KiB + 1", "oversized", sized(16385, nxt(), 12))
case("sequence replayed", "duplicate", frames(envelope(seq - 1, load())))
case("sequence restarted at 0", "duplicate", frames(envelope(0, load())))
case("sequence at the top", "accepted", frames(envelope(2**64 - 1, load(kv_used_blocks=13))), 13)
case("sequence wrapped to 0", "duplicate", frames(envelope(0, load())))

ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)
pub.setsockopt(zmq.LINGER, 0)
print(pub.bind_to_random_port("tcp://127.0.0.1"), flush=True)
pub.recv()
print(json.dumps(cases), flush=True)
for m in msgs:
    pub.send_multipart(m)
    time.sleep(0.005)
sys.stdin.readline()
`

// TestPythonMsgpackPublisher: what a publisher encoding with another
// msgpack implementation sends (every integer width, negatives, floats,
// nils, absent and extra fields, both envelope forms, topics with a
// trailing separator, payloads at and one byte over 16 KiB, replayed,
// restarted and wrapped sequences) is judged message by message as
// Dynamo's decoder would judge it, over one subscription that stays up.
func TestPythonMsgpackPublisher(t *testing.T) {
	t.Parallel()
	testutil.RequireLibzmq(t)
	testutil.RequirePythonModule(t, "msgpack", "python3-msgpack")
	_, _, out := testutil.StartPython(t, pymsgpackScript)
	port, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	var mu sync.Mutex
	var events []load.Event
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = load.Tail(ctx, load.TailConfig{Endpoint: "tcp://127.0.0.1:" + strings.TrimSpace(port), PublisherID: 0x1f3a4b,
			Connector: &zmtp.Direct{}, Observe: func(ev load.Event) {
				if ev.Load != nil {
					l := *ev.Load
					ev.Load = &l
				}
				ev.Frames = nil
				mu.Lock()
				events = append(events, ev)
				mu.Unlock()
			}})
	}()
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	var cases []struct {
		Name   string
		Result string
		Used   *uint64 `json:"kv_used_blocks"`
	}
	if err := json.Unmarshal([]byte(line), &cases); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "every message judged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) >= len(cases)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(events) != len(cases) {
		t.Fatalf("%d events for %d messages", len(events), len(cases))
	}
	for i, c := range cases {
		ev := events[i]
		if c.Result == "accepted" {
			c.Result = telemetry.ResultAccepted
		}
		if ev.Result != c.Result {
			t.Errorf("%s: %s (%s), want %s", c.Name, ev.Result, ev.Detail, c.Result)
			continue
		}
		if c.Used != nil && (ev.Load == nil || ev.Load.KVUsedBlocks == nil || *ev.Load.KVUsedBlocks != *c.Used) {
			t.Errorf("%s: decoded %+v, want kv_used_blocks %d", c.Name, ev.Load, *c.Used)
		}
		if ev.Load != nil && ev.Load.WorkerID != 1186445869714687 {
			t.Errorf("%s: worker_id %d", c.Name, ev.Load.WorkerID)
		}
	}
}

// liveWorkerScript is a worker's kv_metrics publisher as a process: a
// libzmq PUB bound at argv[4] (or a free loopback port) that publishes an
// ActiveLoad of worker argv[2] with kv_used_blocks argv[3] every 10 ms
// under publisher id argv[1], its sequence counting from 0, enveloped and
// framed with Python's msgpack as Dynamo does.
const liveWorkerScript = `
import struct, sys, threading, time, msgpack, zmq
pid, worker, used = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
pub.setsockopt(zmq.LINGER, 0)
if sys.argv[4]:
    pub.bind(sys.argv[4])
    port = sys.argv[4].rsplit(":", 1)[1]
else:
    port = pub.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
threading.Thread(target=lambda: (sys.stdin.readline(), __import__("os")._exit(0)), daemon=True).start()
seq = 0
while True:
    load = msgpack.packb({"worker_id": worker, "dp_rank": 0, "active_decode_blocks": None,
                          "active_prefill_tokens": None, "kv_used_blocks": used})
    env = msgpack.packb({"topic": "kv_metrics", "publisher_id": pid, "sequence": seq,
                         "published_at": int(time.time() * 1000), "payload": load})
    pub.send_multipart([b"kv_metrics", struct.pack(">Q", pid), struct.pack(">Q", seq),
                        b"\x01" + struct.pack(">I", len(env)) + env])
    seq += 1
    time.sleep(0.01)
`

// TestWorkerRestartOnSameEndpoint: a worker restarts as Dynamo's do: a new
// process, a new publisher id, its sequence from 0, here on the address
// the old one had. While discovery still holds the old record, the new
// process's samples are refused (identity_mismatch: not the publisher the
// record names) and the old process's sample is gone (its session ended);
// once discovery names the new publisher, its samples are applied from
// sequence 0 on, not taken for replays of the old life's higher sequences.
func TestWorkerRestartOnSameEndpoint(t *testing.T) {
	t.Parallel()
	testutil.RequireLibzmq(t)
	testutil.RequirePythonModule(t, "msgpack", "python3-msgpack")
	const worker, oldPID, newPID = 1186445869714687, 0x1f3a4b, 0x2b4c5d
	start := func(pid, used uint64, endpoint string) (*exec.Cmd, string) {
		cmd, _, out := testutil.StartPython(t, liveWorkerScript, strconv.FormatUint(pid, 10), strconv.FormatUint(worker, 10), strconv.FormatUint(used, 10), endpoint)
		port, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("publisher: %v", err)
		}
		return cmd, "tcp://127.0.0.1:" + strings.TrimSpace(port)
	}
	old, endpoint := start(oldPID, 10, "")
	f := newFleet()
	f.worker(worker, 1)
	f.publisher(oldPID, endpoint)
	s := startSupervisor(t, f.reg)
	testutil.Eventually(t, 10*time.Second, "the old life's sample", func() bool {
		smp, ok := s.store.Latest(key(worker, 0))
		return ok && smp.PublisherID == oldPID && *smp.Load.KVUsedBlocks == 10 && smp.Sequence > 20
	})
	_ = old.Process.Kill()
	_ = old.Wait()
	start(newPID, 20, endpoint)
	testutil.Eventually(t, 20*time.Second, "the new process's samples refused under the old record", func() bool {
		return promtest.ToFloat64(s.metrics.Events.WithLabelValues(wire.ResultIdentityMismatch)) >= 3
	})
	if smp, ok := s.store.Latest(key(worker, 0)); ok {
		t.Fatalf("a sample kept under the old record after its process went: %+v", smp)
	}
	f.removePublisher(oldPID)
	f.publisher(newPID, endpoint)
	testutil.Eventually(t, 20*time.Second, "the new life's sample", func() bool {
		smp, ok := s.store.Latest(key(worker, 0))
		return ok && smp.PublisherID == newPID && *smp.Load.KVUsedBlocks == 20
	})
	if n := promtest.ToFloat64(s.metrics.Events.WithLabelValues(wire.ResultDuplicate)); n != 0 {
		t.Errorf("%v samples of the restarted worker counted duplicate", n)
	}
}
