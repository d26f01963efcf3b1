package fleet_test

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

const benchWorkers = 16384

func loadedReducer(b *testing.B, n int) *fleet.Reducer {
	b.Helper()
	r := fleet.NewReducer()
	for i := range n {
		r.Put(fmt.Sprintf("v1/instances/dynamo/decode/generate/%x", i+1), endpoint(i+1), t0)
		r.Put(fmt.Sprintf("v1/mdc/dynamo/decode/generate/%x", i+1), fmt.Appendf(nil,
			`{"type":"Model","component":"decode","endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m%d","worker_type":"Decode","kv_cache_block_size":64,"runtime_config":{"total_kv_blocks":12000,"max_num_batched_tokens":8192,"data_parallel_size":1}}}`, i+1, i%8), t0)
	}
	return r
}

// BenchmarkFirstBuild16k is the first materialisation of a 16,384-worker
// fleet whose 32,768 records are already held (the end of an initial sync).
func BenchmarkFirstBuild16k(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		r := loadedReducer(b, benchWorkers)
		b.StartTimer()
		if n := r.Build(t0).Workers.Len(); n != benchWorkers {
			b.Fatalf("%d workers", n)
		}
	}
}

// BenchmarkApplyAndPublish16k is one watch event (a changed endpoint record)
// applied to a 16,384-worker fleet and published as a new generation, with
// no coalescing: the cost of a view after one record changed. "persistent"
// is the registry's snapshot; "flat" is the same-run baseline: the same
// event, plus the worker list kept as one sorted slice copied on every
// change, as a snapshot that shares nothing with the one before must.
// B/op and allocs/op of "persistent" must not grow from
// BenchmarkApplyAndPublish1k's.
func BenchmarkApplyAndPublish16k(b *testing.B) { benchApplyAndPublish(b, benchWorkers) }

// BenchmarkApplyAndPublish1k is the same event at 1,024 workers.
func BenchmarkApplyAndPublish1k(b *testing.B) { benchApplyAndPublish(b, 1024) }

func benchApplyAndPublish(b *testing.B, n int) {
	for _, flat := range []bool{false, true} {
		name := "persistent"
		if flat {
			name = "flat"
		}
		b.Run(name, func(b *testing.B) {
			r := loadedReducer(b, n)
			reg := fleet.NewRegistry(nil, nil)
			snap := r.Build(t0)
			reg.Publish(snap)
			list := slices.Collect(snap.Workers.All())
			id := fleet.WorkerID{Namespace: "dynamo", InstanceID: 1}
			values := [2][]byte{endpoint(1), []byte(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":1,"transport":{"tcp":"x"}}`)}
			b.ReportAllocs()
			// The fleet's construction leaves garbage that is not the
			// events' to collect.
			runtime.GC()
			i := 0
			for b.Loop() {
				i++
				r.Put("v1/instances/dynamo/decode/generate/1", values[i%2], t0)
				snap := r.Build(t0)
				if flat {
					w := snap.Workers.Get(id)
					list = slices.Clone(list) // the previous view's list is never written
					j, _ := slices.BinarySearchFunc(list, w, byOrder)
					list[j] = w
				}
				reg.Publish(snap)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// byOrder is the snapshot's order of workers.
func byOrder(a, b *fleet.Worker) int {
	return cmp.Or(cmp.Compare(a.ID.Namespace, b.ID.Namespace), cmp.Compare(a.Model, b.Model),
		cmp.Compare(a.Role, b.Role), cmp.Compare(a.ID.InstanceID, b.ID.InstanceID))
}
