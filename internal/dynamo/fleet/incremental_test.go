package fleet_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// lines is a snapshot written out line by line, without timestamps and card
// identities (which differ between two reducers fed the same records).
func lines(s *fleet.Snapshot) []string {
	var out []string
	for w := range s.Workers.All() {
		out = append(out, fmt.Sprintf("worker %s/%x role=%s model=%s comp=%s ep=%s dp=%d+%d card=%v", w.ID.Namespace, w.ID.InstanceID, w.Role,
			w.Model, w.Component, w.Endpoint, w.DPStartRank, w.DPSize, w.Card != nil))
	}
	for p := range s.Publishers.All() {
		out = append(out, fmt.Sprintf("publisher %s/%d %s %s %s", p.Namespace, p.PublisherID, p.Topic, p.TransportKind, p.Key))
	}
	for _, p := range s.Problems {
		out = append(out, fmt.Sprintf("problem %s %s %v %d %s", p.Kind, p.Namespace, p.Keys, p.KeyCount, p.Reason))
	}
	for _, m := range s.Mixed {
		out = append(out, "mixed "+m.Namespace+" "+m.Model)
	}
	return out
}

// randomRecord is a record of a small fleet where identities collide:
// endpoints and cards of a few instance ids under several components (so
// duplicates, role conflicts and mixed namespaces come and go), event
// channels, endpoints under keys of another shape, and some malformed
// values.
func randomRecord(rng *rand.Rand, ids int) (key string, value []byte) {
	ns := []string{"a", "b"}[rng.IntN(2)]
	id := 1 + rng.IntN(ids)
	comps := []string{"prefill", "decode", "backend"}
	comp := comps[id%3]
	if rng.IntN(8) == 0 {
		comp = comps[rng.IntN(3)] // a second component claiming the id
	}
	switch rng.IntN(12) {
	case 0, 1, 2, 10:
		key = fmt.Sprintf("v1/instances/%s/%s/generate/%x", ns, comp, id)
		value = fmt.Appendf(nil, `{"component":%q,"endpoint":"generate","instance_id":%d,"transport":{"tcp":"h:%d"}}`, comp, id, rng.IntN(3))
	case 3, 4, 5, 11:
		key = fmt.Sprintf("v1/mdc/%s/%s/generate/%x", ns, comp, id)
		wt := []string{`"worker_type":"Prefill",`, `"worker_type":"Decode",`, `"worker_type":"Aggregated",`, `"worker_type":"Bogus",`, ""}[rng.IntN(5)]
		value = fmt.Appendf(nil, `{"component":%q,"endpoint":"generate","instance_id":%d,"card_json":{"display_name":"m%d",%s"kv_cache_block_size":%d,"runtime_config":{"data_parallel_size":%d}}}`,
			comp, id, rng.IntN(2), wt, 16*(1+rng.IntN(2)), 1+rng.IntN(2))
	case 6:
		// A card whose record leaves out component and endpoint (its key's
		// are its own), or writes them empty: a legacy card under any key.
		key = fmt.Sprintf("v1/mdc/%s/%s/generate/%x", ns, comp, id)
		scope := []string{"", `"component":"","endpoint":"",`}[rng.IntN(2)]
		value = fmt.Appendf(nil, `{%s"instance_id":%d,"card_json":{"display_name":"m%d"}}`, scope, id, rng.IntN(2))
	case 7, 8:
		topic := []string{"kv_metrics", "kv-events"}[rng.IntN(2)]
		pub := 100 + rng.IntN(max(6, ids/2))
		key = fmt.Sprintf("v1/event_channels/namespace/%s/topic/%s/%x", ns, topic, pub+rng.IntN(2)*0x1000)
		value = fmt.Appendf(nil, `{"type":"EventChannel","scope":{"kind":"namespace","name":%q},"topic":%q,"instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://h:%d"}}}`,
			ns, topic, pub, rng.IntN(3))
		if rng.IntN(2) == 0 {
			// A Dynamo 1.2 channel: the worker's id, one channel per topic
			// (kv_events the older spelling of kv-events).
			topic = []string{"kv_metrics", "kv-events", "kv_events"}[rng.IntN(3)]
			key = fmt.Sprintf("v1/event_channels/%s/%s/%s/%x", ns, comp, topic, pub)
			value = fmt.Appendf(nil, `{"type":"EventChannel","namespace":%q,"component":%q,"topic":%q,"instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://h:%d"}}}`,
				ns, comp, topic, pub, rng.IntN(3))
		}
	default:
		switch rng.IntN(3) {
		case 0: // an endpoint under a key of another shape: its value names it
			key = fmt.Sprintf("v1/instances/%s/w-%d", ns, rng.IntN(ids))
			value = fmt.Appendf(nil, `{"component":%q,"endpoint":"generate","instance_id":%d}`, comp, id)
		case 1: // a card of null: malformed
			key = fmt.Sprintf("v1/mdc/%s/%s/generate/%x", ns, comp, id)
			value = []byte(`null`)
		default:
			key = fmt.Sprintf("v1/instances/%s/%s/generate/%x", ns, comp, id)
			value = []byte(`{"component":`)
		}
	}
	return key, value
}

// TestIncrementalBuildMatchesFresh: after any sequence of puts, deletes and
// resyncs, the view a reducer builds incrementally is the view a new
// reducer builds from the records it holds; and every snapshot published
// on the way still shows what it showed when it was built.
func TestIncrementalBuildMatchesFresh(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 11))
			// Few ids: identities collide often. Many: the lists grow
			// past one tree node.
			if seed%2 == 1 {
				checkIncremental(t, rng, 200, 40, 1500, 30)
			} else {
				checkIncremental(t, rng, 12, 6, 0, 150)
			}
		})
	}
}

// FuzzIncrementalBuild is TestIncrementalBuildMatchesFresh with the
// fuzzer's bytes for its random choices (which record, put or delete,
// when to resync), so that it looks for a sequence of events after which
// the incremental view and a fresh build differ.
func FuzzIncrementalBuild(f *testing.F) {
	f.Add([]byte{}, uint8(12))
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"), uint8(3))
	f.Add(make([]byte, 64), uint8(200))
	f.Fuzz(func(t *testing.T, choices []byte, ids uint8) {
		if len(choices) > 4<<10 {
			return
		}
		rng := rand.New(&byteSource{b: choices})
		checkIncremental(t, rng, 1+int(ids)%40, 6, 0, 1+len(choices)/32)
	})
}

// byteSource is a rand.Source that takes its numbers from b, one byte
// each, mixed into a counter (splitmix64) so that every number is
// usable whatever the bytes (rand.IntN draws again on some values, and a
// source stuck on one of those would never end), and goes on with the
// counter alone once b runs out: a fuzzer's bytes as a test's choices.
type byteSource struct {
	b []byte
	n uint64
}

func (s *byteSource) Uint64() uint64 {
	s.n += 0x9e3779b97f4a7c15
	z := s.n
	if len(s.b) > 0 {
		z ^= uint64(s.b[0]) << 56
		s.b = s.b[1:]
	}
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// checkIncremental feeds a reducer start records, then steps batches of
// up to batch puts and deletes of records among ids identities (now and
// then a resync), and requires after each batch that the view it builds
// is the view a new reducer builds from the records it holds; and that
// every snapshot published on the way still shows what it showed when it
// was built.
func checkIncremental(t *testing.T, rng *rand.Rand, ids, batch, start, steps int) {
	t.Helper()
	r := fleet.NewReducer()
	held := map[string][]byte{}
	clock := t0
	type published struct {
		snap *fleet.Snapshot
		view []string
	}
	var pubs []published
	for range start {
		k, v := randomRecord(rng, ids)
		r.Put(k, v, clock)
		held[k] = v
	}
	for step := range steps {
		clock = clock.Add(time.Second)
		if rng.IntN(15) == 0 { // a resync that keeps most records, changes some and adds some
			r.ResyncBegin()
			next := map[string][]byte{}
			for _, k := range slices.Sorted(maps.Keys(held)) {
				if rng.IntN(8) > 0 {
					next[k] = held[k]
				}
			}
			for range rng.IntN(4) {
				k, v := randomRecord(rng, ids)
				next[k] = v
			}
			for _, k := range slices.Sorted(maps.Keys(next)) {
				r.Put(k, next[k], clock)
			}
			r.ResyncEnd()
			held = next
		}
		for range 1 + rng.IntN(batch) { // a batch of events
			clock = clock.Add(time.Second)
			if k, v := randomRecord(rng, ids); rng.IntN(4) > 0 || len(held) == 0 {
				r.Put(k, v, clock)
				held[k] = v
			} else {
				keys := slices.Sorted(maps.Keys(held))
				k := keys[rng.IntN(len(keys))]
				r.Delete(k)
				delete(held, k)
			}
		}
		snap := r.Build(clock)
		fresh := fleet.NewReducer()
		for _, k := range slices.Sorted(maps.Keys(held)) {
			fresh.Put(k, held[k], clock)
		}
		got, want := lines(snap), lines(fresh.Build(clock))
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: incremental view differs from a fresh build:\n got %s\nwant %s", step, strings.Join(got, "\n     "), strings.Join(want, "\n     "))
		}
		checkLookups(t, snap)
		pubs = append(pubs, published{snap, got})
	}
	for i, p := range pubs {
		if got := lines(p.snap); !slices.Equal(got, p.view) {
			t.Fatalf("snapshot %d changed after it was published:\n got %s\nwant %s", i, strings.Join(got, "\n     "), strings.Join(p.view, "\n     "))
		}
	}
}

// checkLookups: Get finds every worker by identity and nothing else;
// Serving and InNamespace yield exactly the workers of their model or
// namespace, in the snapshot's order.
func checkLookups(t *testing.T, s *fleet.Snapshot) {
	t.Helper()
	all := slices.Collect(s.Workers.All())
	if len(all) != s.Workers.Len() {
		t.Fatalf("%d workers listed, Len %d", len(all), s.Workers.Len())
	}
	for _, w := range all {
		if got := s.Workers.Get(w.ID); got != w {
			t.Fatalf("Get(%v) = %v, want %v", w.ID, got, w)
		}
	}
	for _, ns := range []string{"a", "b", "c"} {
		for id := range uint64(14) {
			want := slices.IndexFunc(all, func(w *fleet.Worker) bool { return w.ID == fleet.WorkerID{Namespace: ns, InstanceID: id} })
			if got := s.Workers.Get(fleet.WorkerID{Namespace: ns, InstanceID: id}); (got != nil) != (want >= 0) {
				t.Fatalf("Get(%s/%d) = %v, want a worker: %v", ns, id, got, want >= 0)
			}
		}
		var want []*fleet.Worker
		for _, w := range all {
			if w.ID.Namespace == ns {
				want = append(want, w)
			}
		}
		if got := slices.Collect(s.Workers.InNamespace(ns)); !slices.Equal(got, want) {
			t.Fatalf("InNamespace(%s): %d workers, want %d", ns, len(got), len(want))
		}
		for _, model := range []string{"", "m0", "m1", "m2"} {
			var want []*fleet.Worker
			for _, w := range all {
				if w.ID.Namespace == ns && w.Model == model {
					want = append(want, w)
				}
			}
			if got := slices.Collect(s.Workers.Serving(ns, model)); !slices.Equal(got, want) {
				t.Fatalf("Serving(%s, %q): %d workers, want %d", ns, model, len(got), len(want))
			}
		}
	}
}
