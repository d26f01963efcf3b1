package discovery_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// held is a source that seeds n workers and hands its sink out, then
// holds the pass open until the watcher stops.
type held struct {
	n    int
	sink chan discovery.Sink
}

func (h *held) Name() string { return "held" }

func (h *held) Run(ctx context.Context, s discovery.Sink) error {
	s.ResyncBegin()
	for id := 1; id <= h.n; id++ {
		s.Put(fmt.Sprintf("v1/instances/dynamo/decode/generate/%x", id), endpointRecord(id, ""))
		s.Put(fmt.Sprintf("v1/mdc/dynamo/decode/generate/%x", id), fmt.Appendf(nil,
			`{"type":"Model","component":"decode","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m%d","worker_type":"Decode","kv_cache_block_size":64,"runtime_config":{"total_kv_blocks":12000,"max_num_batched_tokens":8192,"data_parallel_size":1}}}`, id, id%8))
	}
	s.ResyncEnd()
	h.sink <- s
	<-ctx.Done()
	return nil
}

func endpointRecord(id int, address string) []byte {
	return fmt.Appendf(nil, `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":%d,"transport":{"tcp":%q}}`, id, address)
}

// BenchmarkWatcherEvents is a stream of watch events (changed endpoint
// records, each worker in turn), each followed by Flush as a source does
// after a batch, through a watcher over a fleet of 1,024 or 16,384
// workers: what a source can feed with publishes coalesced, at most one
// per discovery.PublishDelay. BenchmarkApplyAndPublish in the fleet
// package is the cost of one event published on its own.
func BenchmarkWatcherEvents(b *testing.B) {
	for _, n := range []int{1024, 16384} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			src := &held{n: n, sink: make(chan discovery.Sink, 1)}
			reg := fleet.NewRegistry(nil, nil)
			w := &discovery.Watcher{Source: src, Registry: reg, Backoff: discovery.Backoff{Initial: time.Second, Max: time.Second}}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = w.Run(ctx) }()
			defer func() { cancel(); <-done }()
			s := <-src.sink
			keys := make([]string, n)
			values := make([][2][]byte, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("v1/instances/dynamo/decode/generate/%x", i+1)
				values[i] = [2][]byte{endpointRecord(i+1, "a"), endpointRecord(i+1, "b")}
			}
			before := reg.Generation()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.Put(keys[i%n], values[i%n][i/n%2])
				s.Flush()
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(reg.Generation()-before)/b.Elapsed().Seconds(), "publishes/s")
		})
	}
}
