package etcd_test

import (
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/testutil"
)

const benchWorkers = 16384

// loadFleet writes benchWorkers endpoint and card records, 64 puts a txn.
func loadFleet(b *testing.B, c *clientv3.Client) {
	b.Helper()
	ctx := context.Background()
	var ops []clientv3.Op
	flush := func() {
		if len(ops) == 0 {
			return
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
		ops = ops[:0]
	}
	for i := 1; i <= benchWorkers; i++ {
		ops = append(ops,
			clientv3.OpPut(instanceKey("dynamo", "decode", uint64(i)), endpointValue(uint64(i), "decode")),
			clientv3.OpPut(fmt.Sprintf("v1/mdc/dynamo/decode/generate/%x", i), fmt.Sprintf(
				`{"type":"Model","component":"decode","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"model-%d","worker_type":"Decode","kv_cache_block_size":64,"runtime_config":{"total_kv_blocks":12000,"max_num_batched_tokens":8192,"max_num_seqs":256,"context_length":32768,"data_parallel_size":1}}}`, i, i%16)))
		if len(ops) >= 64 {
			flush()
		}
	}
	flush()
}

// BenchmarkInitialSync16k: 16,384 workers (32,768 records) in etcd to the
// first published snapshot, beside the bare range gets of the same prefixes
// in the same run (BenchmarkInitialSync16k/range-get is the baseline).
func BenchmarkInitialSync16k(b *testing.B) {
	srv := testutil.StartEtcd(b, testutil.EtcdOptions{})
	c := srv.Client(b, clientv3.Config{})
	loadFleet(b, c)
	b.Run("range-get", func(b *testing.B) {
		for b.Loop() {
			n := 0
			for _, p := range wire.WatchPrefixes("dynamo") {
				resp, err := c.Get(context.Background(), p, clientv3.WithPrefix())
				if err != nil {
					b.Fatal(err)
				}
				n += len(resp.Kvs)
			}
			if n != 2*benchWorkers {
				b.Fatalf("%d keys", n)
			}
		}
	})
	b.Run("sync", func(b *testing.B) {
		for b.Loop() {
			src, err := newBenchSource(srv.Endpoint)
			if err != nil {
				b.Fatal(err)
			}
			reg := fleet.NewRegistry(nil, nil)
			w := &discovery.Watcher{Source: src, Registry: reg, Backoff: discovery.Backoff{Initial: 1e9, Max: 1e9}}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = w.Run(ctx) }()
			if _, err := reg.Wait(ctx, 0); err != nil {
				b.Fatal(err)
			}
			if n := reg.Snapshot().Workers.Len(); n != benchWorkers {
				b.Fatalf("%d workers", n)
			}
			cancel()
			<-done
		}
	})
}

func newBenchSource(endpoint string) (discovery.Source, error) {
	return newSourceErr(config.Etcd{Endpoints: []string{endpoint}})
}
