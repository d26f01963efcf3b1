package load_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

// xpubScript is a libzmq publisher (libzmq 4.3 greets as ZMTP 3.1) on an
// XPUB socket, which is libzmq's PUB that also hands the application the
// subscriptions its subscribers send: it waits for one, prints it in hex,
// so that the test sees what libzmq made of ours, then sends the messages
// of the file, one every interval, with heartbeat PINGs in between (every
// 20 ms; the connection is dropped when nothing comes back for a second,
// where libzmq's default of one interval would drop a subscriber that a
// loaded machine kept from answering for 20 ms).
const xpubScript = `
import sys, time, zmq
msgs = [[bytes.fromhex(f) for f in line.split(",")] for line in open(sys.argv[1]).read().split("\n") if line]
interval = float(sys.argv[2])
ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)
pub.setsockopt(zmq.HEARTBEAT_IVL, 20)
pub.setsockopt(zmq.HEARTBEAT_TIMEOUT, 1000)
pub.setsockopt(zmq.LINGER, 0)
if sys.argv[3]:
    pub.bind(sys.argv[3])
    port = sys.argv[3].rsplit(":", 1)[1]
else:
    port = pub.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
print(pub.recv().hex(), flush=True)
for m in msgs:
    pub.send_multipart(m)
    time.sleep(interval)
sys.stdin.readline()
`

// xpub is one run of xpubScript.
type xpub struct {
	endpoint string
	cmd      *exec.Cmd
	lines    *bufio.Reader
}

// startXPub runs xpubScript bound at endpoint ("" for a free loopback
// port) with msgs.
func startXPub(t *testing.T, endpoint string, msgs [][][]byte) *xpub {
	t.Helper()
	testutil.RequireLibzmq(t)
	file := testutil.WriteMessagesFile(t, msgs)
	cmd, _, out := testutil.StartPython(t, xpubScript, file, "0.005", endpoint)
	p := &xpub{cmd: cmd, lines: out}
	port, err := p.lines.ReadString('\n')
	if err != nil {
		t.Fatalf("libzmq publisher: %v", err)
	}
	p.endpoint = "tcp://127.0.0.1:" + strings.TrimSpace(port)
	return p
}

// subscription returns the subscription libzmq received, in hex.
func (p *xpub) subscription(t *testing.T) string {
	t.Helper()
	line, err := p.lines.ReadString('\n')
	if err != nil {
		t.Fatalf("libzmq publisher got no subscription: %v", err)
	}
	return strings.TrimSpace(line)
}

// stop kills the publisher (again: a no-op).
func (p *xpub) stop() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// paddedLoad is an ActiveLoad whose envelope is exactly envelopeBytes long:
// the map carries one more key, a string of padding, which the decoder
// skips as an unknown field.
func paddedLoad(t *testing.T, pid, seq, worker, used uint64, envelopeBytes int) [][]byte {
	t.Helper()
	base := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: worker, KVUsedBlocks: &used})
	for pad := 0; pad < envelopeBytes; pad++ {
		payload := append([]byte{base[0] + 1}, base[1:]...) // one more map entry
		payload = append(payload, 0xa3, 'p', 'a', 'd', 0xdb)
		payload = binary.BigEndian.AppendUint32(payload, uint32(pad))
		payload = append(payload, bytes.Repeat([]byte{'x'}, pad)...)
		msg := wire.EncodeEventMessage("kv_metrics", pid, seq, 1, payload)
		if n := len(msg[3]) - wire.FrameHeaderSize; n == envelopeBytes {
			return msg
		} else if n > envelopeBytes {
			break
		}
	}
	t.Fatalf("no padding makes an envelope of %d bytes", envelopeBytes)
	return nil
}

// TestLibzmqPublisherMessages: a libzmq publisher (ZMTP 3.1, heartbeats
// on) receives our subscription as the one-frame 0x01 + topic message and
// filters by it; what it sends is judged message by message, every reason
// counted once, and the subscription stays up throughout: frames of
// another count, another topic sharing the prefix, an envelope of exactly
// the 16 KiB limit (long frames) and one byte over it, a replayed
// sequence, another frame version, another publisher id, a worker the
// registry does not hold.
func TestLibzmqPublisherMessages(t *testing.T) {
	t.Parallel()
	const pid, worker = 0xc5, 5
	ok := func(seq, used uint64) [][]byte {
		return wire.EncodeEventMessage("kv_metrics", pid, seq, 1, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: worker, KVUsedBlocks: &used}))
	}
	versioned := ok(3, 1)
	versioned[3] = append([]byte{2}, versioned[3][1:]...)
	extra := append(ok(9, 1), []byte("extra"))
	msgs := [][][]byte{
		ok(0, 10),
		ok(9, 1)[:3], // three frames
		extra,        // five frames
		wire.EncodeEventMessage("kv_metrics_other", pid, 9, 1, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: worker})),
		wire.EncodeEventMessage("kv-events", pid, 9, 1, []byte{0x90}), // not subscribed: filtered by libzmq
		paddedLoad(t, pid, 1, worker, 16, wire.MaxLoadPayloadBytes),
		paddedLoad(t, pid, 2, worker, 17, wire.MaxLoadPayloadBytes+1),
		ok(1, 1), // replayed
		versioned,
		wire.EncodeEventMessage("kv_metrics", pid+1, 4, 1, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: worker})),
		wire.EncodeEventMessage("kv_metrics", pid, 5, 1, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 99})),
		ok(6, 42),
	}
	pub := startXPub(t, "", msgs)
	f := newFleet()
	f.worker(worker, 1)
	f.publisher(pid, pub.endpoint)
	s := startSupervisor(t, f.reg)
	if got, want := pub.subscription(t), hex.EncodeToString([]byte("\x01kv_metrics")); got != want {
		t.Fatalf("libzmq received subscription %s, want %s", got, want)
	}
	testutil.Eventually(t, 10*time.Second, "the last sample", func() bool {
		smp, ok := s.store.FreshDefault(key(worker, 0))
		return ok && *smp.Load.KVUsedBlocks == 42
	})
	want := map[string]float64{
		telemetry.ResultAccepted:    3,
		wire.ResultMalformed:        2,
		wire.ResultTopicMismatch:    1,
		wire.ResultOversized:        1,
		wire.ResultDuplicate:        1,
		wire.ResultUnknownVersion:   1,
		wire.ResultIdentityMismatch: 2,
	}
	for _, result := range telemetry.LoadResults {
		if got := promtest.ToFloat64(s.metrics.Events.WithLabelValues(result)); got != want[result] {
			t.Errorf("%s: %v, want %v", result, got, want[result])
		}
	}
	if subs := s.sup.Subscriptions(); len(subs) != 1 || subs[0].State != load.StateConnected {
		t.Errorf("subscriptions %+v", subs)
	}
}

// TestLibzmqPublisherRestarts: a libzmq publisher that dies and comes back
// on its address, counting its sequence from 0 again, is reconnected to,
// and its new life's samples are applied rather than taken for replays.
func TestLibzmqPublisherRestarts(t *testing.T) {
	t.Parallel()
	const pid, worker = 0xc7, 7
	life := func(used uint64) [][][]byte {
		var msgs [][][]byte
		for seq := range uint64(3) {
			msgs = append(msgs, wire.EncodeEventMessage("kv_metrics", pid, seq, 1, wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: worker, KVUsedBlocks: u64(used + seq)})))
		}
		return msgs
	}
	first := startXPub(t, "", life(10))
	f := newFleet()
	f.worker(worker, 1)
	f.publisher(pid, first.endpoint)
	s := startSupervisor(t, f.reg)
	first.subscription(t)
	testutil.Eventually(t, 10*time.Second, "the first life's last sample", func() bool {
		smp, ok := s.store.Latest(key(worker, 0))
		return ok && *smp.Load.KVUsedBlocks == 12
	})
	first.stop()
	second := startXPub(t, first.endpoint, life(20))
	second.subscription(t)
	testutil.Eventually(t, 20*time.Second, "the second life's last sample", func() bool {
		smp, ok := s.store.Latest(key(worker, 0))
		return ok && *smp.Load.KVUsedBlocks == 22
	})
	if n := promtest.ToFloat64(s.metrics.Events.WithLabelValues(wire.ResultDuplicate)); n != 0 {
		t.Errorf("%v messages of the restarted publisher counted duplicate", n)
	}
}

// libzmqRefusedScript binds a libzmq socket our SUB cannot use: argv[1]
// names it, "plain" (a PUB whose security mechanism is PLAIN) or a socket
// type such as ROUTER.
const libzmqRefusedScript = `
import sys, zmq
ctx = zmq.Context()
kind = sys.argv[1]
s = ctx.socket(zmq.PUB if kind == "plain" else getattr(zmq, kind))
if kind == "plain":
    s.plain_server = True
port = s.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
sys.stdin.readline()
`

// TestLibzmqRefusedPeers: a libzmq peer outside the protocol's scope (a
// mechanism other than NULL, a socket type that cannot feed a SUB) is
// refused, counted transport_refused, and tried again after a backoff.
func TestLibzmqRefusedPeers(t *testing.T) {
	t.Parallel()
	testutil.RequireLibzmq(t)
	for i, kind := range []string{"plain", "ROUTER", "SUB"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			_, _, out := testutil.StartPython(t, libzmqRefusedScript, kind)
			port, err := out.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			pid := uint64(0xd0 + i)
			f := newFleet()
			f.worker(pid, 1)
			f.publisher(pid, "tcp://127.0.0.1:"+strings.TrimSpace(port))
			s := startSupervisor(t, f.reg)
			testutil.Eventually(t, 10*time.Second, "transport_refused counted twice", func() bool {
				return promtest.ToFloat64(s.metrics.Events.WithLabelValues(wire.ResultTransportRefused)) >= 2
			})
		})
	}
}
