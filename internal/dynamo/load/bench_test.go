package load_test

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// BenchmarkDecode is one kv_metrics message from frames to a stored sample
// on one core (frame checks, envelope, ActiveLoad, dedupe, store). The
// baseline sub-benchmark decodes the same envelope and payload with the
// general-purpose vmihailenco/msgpack into maps, with no checks at all.
func BenchmarkDecode(b *testing.B) {
	store := load.NewStore(time.Minute, nil)
	store.SetLiveAndRetain(map[fleet.WorkerID]load.LiveWorker{{Namespace: "dynamo", InstanceID: 1186445869714687}: {DPSize: 1}})
	payload := wire.EncodeActiveLoad(wire.ActiveLoad{WorkerID: 1186445869714687, ActiveDecodeBlocks: u64(120), ActivePrefillTokens: u64(4096), KVUsedBlocks: u64(800)})
	const n = 1024
	msgs := make([][][]byte, n)
	for i := range msgs {
		msgs[i] = wire.EncodeEventMessage("kv_metrics", 0x1f3a4b, uint64(i), 1_700_000_000_000, payload)
	}
	b.Run("continuum", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			// A fresh reader per lap of the messages keeps sequences rising.
			r := load.NewReader(0x1f3a4b, store, func(string) {})
			for _, m := range msgs {
				r.Handle(m, time.Time{})
			}
			i += n
			store.DropPublisher(0x1f3a4b)
		}
		b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("baseline-vmihailenco-msgpack", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			for _, m := range msgs {
				var env map[string]any
				if err := msgpack.Unmarshal(m[3][5:], &env); err != nil {
					b.Fatal(err)
				}
				var l map[string]any
				if err := msgpack.Unmarshal(env["payload"].([]byte), &l); err != nil {
					b.Fatal(err)
				}
			}
			i += n
		}
		b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "msgs/s")
	})
}

// BenchmarkIdleSubscriptions measures the memory (heap and goroutine
// stacks) of 1,024 connected, idle kv_metrics subscriptions run by the
// supervisor, against a peer in another process. Target: at most 4 KiB each.
func BenchmarkIdleSubscriptions(b *testing.B) {
	const subs = 1024
	endpoint := startIdlePeer(b)
	for b.Loop() {
		f := newFleet()
		for i := range uint64(subs) {
			f.r.Put(channelKey(0x1000+i), []byte(`{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"dynamo","component":"decode","name":"generate"}},"topic":"kv_metrics","instance_id":`+itoa(0x1000+i)+`,"transport":{"kind":"Zmq","config":{"endpoint":"`+endpoint+`"}}}`), t0)
		}
		snap := f.r.Build(t0)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&before)
		goroutines := runtime.NumGoroutine()
		store := load.NewStore(time.Minute, nil)
		sup := load.NewSupervisor(f.reg, store, &zmtp.Direct{}, nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = sup.Run(ctx) }()
		f.reg.Publish(snap)
		testutil.Eventually(b, 60*time.Second, "all connected", func() bool {
			n := 0
			for _, s := range sup.Subscriptions() {
				if s.State == load.StateConnected {
					n++
				}
			}
			return n == subs
		})
		// The steady state: a running router collects many times while
		// its subscriptions settle, and the runtime sizes new goroutines'
		// stacks by what the goroutines of the last collection used (the
		// dialling ones, deep, right after connecting). One collection
		// after connecting stands for those.
		runtime.GC()
		// Idle: no message for longer than a subscription keeps its
		// buffers waiting for one.
		time.Sleep(zmtp.IdleAfter + 200*time.Millisecond)
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&after)
		// Heap: the larger of the rise in live objects and the rise in
		// spans holding them. Spans include what size classes round up,
		// but undercount when an earlier round left them partly used (new
		// objects fill the holes).
		heap := float64(max(int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(after.HeapInuse)-int64(before.HeapInuse))) / subs
		// Stacks: the rise in stack memory, but never less than the
		// goroutines added at the starting stack size each: stacks an
		// earlier round left cached count as in use before this one takes
		// them.
		stackStart := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
		metrics.Read(stackStart)
		stack := max(float64(int64(after.StackInuse)-int64(before.StackInuse)),
			float64(runtime.NumGoroutine()-goroutines)*float64(stackStart[0].Value.Uint64())) / subs
		b.ReportMetric(heap+stack, "bytes/sub")
		b.ReportMetric(stack, "stack-bytes/sub")
		cancel()
		<-done
	}
}

func itoa(v uint64) string {
	const digits = "0123456789"
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = digits[v%10]
		v /= 10
	}
	return string(b[i:])
}
