package kv_test

import (
	"bufio"
	"encoding/json"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// mooncakeTrace is the Mooncake conversation trace (outside the repository;
// CONTINUUM_MOONCAKE_TRACE names another copy).
const mooncakeTrace = "/work/shared/data/mooncake/conversation_trace.jsonl"

// The simulated fleet of BenchmarkIndexMooncake: each of the trace's
// 512-token hash ids is 32 blocks of 16 tokens, and each worker keeps an LRU
// cache of simCaches blocks (512K tokens, whose index fits a 32 MiB L3
// cache, or 2M tokens, whose index does not).
const (
	simWorkers       = 8
	simBlocksPerID   = 32
	simMaxRunPerEvnt = 512
)

var simCaches = []struct {
	name   string
	blocks int
}{{"cache=512Ktok", 1 << 15}, {"cache=2Mtok", 1 << 17}}

// benchOp is one step of the replay: a FindMatches of tokens, or an event
// of a worker.
type benchOp struct {
	tokens []uint64
	worker uint64
	ev     wire.RouterEvent
}

type mooncakeReplay struct {
	ops                             []benchOp
	finds, stored, removed, matched int
	requestBlocks                   int
}

var (
	mooncakeMu   sync.Mutex
	mooncakeData = map[int]*mooncakeReplay{}
)

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// lru is one simulated worker's cache of engine block hashes.
type lru struct {
	slot       map[uint64]int32
	hash       []uint64
	prev, next []int32 // a ring through slot 0, most recent first
}

func newLRU(capacity int) *lru {
	l := &lru{slot: make(map[uint64]int32, capacity), hash: make([]uint64, 1, capacity+1),
		prev: make([]int32, 1, capacity+1), next: make([]int32, 1, capacity+1)}
	return l
}

func (l *lru) unlink(s int32) {
	l.next[l.prev[s]], l.prev[l.next[s]] = l.next[s], l.prev[s]
}

func (l *lru) front(s int32) {
	l.prev[s], l.next[s] = 0, l.next[0]
	l.prev[l.next[0]], l.next[0] = s, s
}

func (l *lru) touch(h uint64) bool {
	s, ok := l.slot[h]
	if ok {
		l.unlink(s)
		l.front(s)
	}
	return ok
}

// insert adds h and returns the hash it evicted, if any.
func (l *lru) insert(h uint64, capacity int) (uint64, bool) {
	var s int32
	var old uint64
	evicted := false
	if len(l.slot) < capacity {
		s = int32(len(l.hash))
		l.hash, l.prev, l.next = append(l.hash, 0), append(l.prev, 0), append(l.next, 0)
	} else {
		s = l.prev[0]
		l.unlink(s)
		old, evicted = l.hash[s], true
		delete(l.slot, old)
	}
	l.hash[s] = h
	l.slot[h] = s
	l.front(s)
	return old, evicted
}

// loadMooncake turns the trace into the operations of the replay: per
// request, a FindMatches, then the events of the worker it goes to (the one
// holding the longest prefix, else round robin): its evictions as one
// removed event, the blocks it lacked as stored chains.
func loadMooncake(path string, simBlocks int) (*mooncakeReplay, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rp := &mooncakeReplay{}
	caches := make([]*lru, simWorkers)
	for i := range caches {
		caches[i] = newLRU(simBlocks)
	}
	ids := make([]uint64, simWorkers)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var bh []uint64
	for n := 0; sc.Scan(); n++ {
		var req struct {
			HashIDs []uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return nil, err
		}
		tokens := make([]uint64, 0, len(req.HashIDs)*simBlocksPerID)
		bh = bh[:0]
		prev := uint64(0)
		for _, id := range req.HashIDs {
			for j := range uint64(simBlocksPerID) {
				t := splitmix(id<<5 | j)
				tokens = append(tokens, t)
				prev = splitmix(prev ^ splitmix(t))
				bh = append(bh, prev)
			}
		}
		rp.ops = append(rp.ops, benchOp{tokens: tokens})
		rp.finds++
		rp.requestBlocks += len(tokens)

		best, bestLen := n%simWorkers, 0
		for w, c := range caches {
			k := 0
			for k < len(bh) && c.slot[bh[k]] != 0 {
				k++
			}
			if k > bestLen {
				best, bestLen = w, k
			}
		}
		rp.matched += bestLen
		c := caches[best]
		var evicted []uint64
		var runs []wire.RouterEvent
		for i := 0; i < len(bh); {
			if c.touch(bh[i]) {
				i++
				continue
			}
			ev := wire.RouterEvent{WorkerID: uint64(best + 1), Kind: wire.KVStored}
			if i > 0 {
				parent := bh[i-1]
				ev.ParentHash = &parent
			}
			for ; i < len(bh) && len(ev.Blocks) < simMaxRunPerEvnt && c.slot[bh[i]] == 0; i++ {
				if old, ok := c.insert(bh[i], simBlocks); ok {
					evicted = append(evicted, old)
				}
				ev.Blocks = append(ev.Blocks, wire.StoredBlock{BlockHash: bh[i], TokensHash: tokens[i]})
			}
			rp.stored += len(ev.Blocks)
			runs = append(runs, ev)
		}
		if len(evicted) > 0 {
			ids[best]++
			rp.ops = append(rp.ops, benchOp{worker: uint64(best + 1), ev: wire.RouterEvent{
				WorkerID: uint64(best + 1), EventID: ids[best], Kind: wire.KVRemoved, Removed: evicted}})
			rp.removed += len(evicted)
		}
		for _, ev := range runs {
			ids[best]++
			ev.EventID = ids[best]
			rp.ops = append(rp.ops, benchOp{worker: uint64(best + 1), ev: ev})
		}
	}
	return rp, sc.Err()
}

func mooncake(b *testing.B, simBlocks int) *mooncakeReplay {
	path := mooncakeTrace
	if p := os.Getenv("CONTINUUM_MOONCAKE_TRACE"); p != "" {
		path = p
	}
	if _, err := os.Stat(path); err != nil {
		b.Skipf("Mooncake trace not found (%v); set CONTINUUM_MOONCAKE_TRACE", err)
	}
	mooncakeMu.Lock()
	defer mooncakeMu.Unlock()
	if rp := mooncakeData[simBlocks]; rp != nil {
		return rp
	}
	clear(mooncakeData) // one replay in memory at a time
	rp, err := loadMooncake(path, simBlocks)
	if err != nil {
		b.Fatal(err)
	}
	mooncakeData[simBlocks] = rp
	return rp
}

func benchLive(workers int, ranks uint32) map[fleet.WorkerID]load.LiveWorker {
	live := map[fleet.WorkerID]load.LiveWorker{}
	for w := 1; w <= workers; w++ {
		live[fleet.WorkerID{Namespace: "dynamo", InstanceID: uint64(w)}] = load.LiveWorker{DPSize: ranks}
	}
	return live
}

// BenchmarkIndexMooncake replays the Mooncake conversation trace through
// eight simulated workers: one op is a stored block, a removed block or a
// FindMatches call. Each iteration replays the whole trace into a new index.
func BenchmarkIndexMooncake(b *testing.B) {
	for _, c := range simCaches {
		b.Run(c.name, func(b *testing.B) { benchMooncake(b, mooncake(b, c.blocks)) })
	}
}

func benchMooncake(b *testing.B, rp *mooncakeReplay) {
	ops := rp.finds + rp.stored + rp.removed
	dst := make([]kv.Match, 0, simWorkers)
	var matched int
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		ix := kv.NewIndex()
		ix.SetLive(benchLive(simWorkers, 1))
		matched = 0
		runtime.GC()
		b.StartTimer()
		for i := range rp.ops {
			op := &rp.ops[i]
			if op.tokens != nil {
				dst = ix.FindMatches(op.tokens, dst[:0])
				best := 0
				for _, m := range dst {
					best = max(best, m.Blocks)
				}
				matched += best
				continue
			}
			if out := ix.Apply(kv.SubscriptionID(op.worker), load.NS("dynamo"), &op.ev); out.Result != kv.ResultAccepted || out.Gap {
				b.Fatalf("op %d: %+v", i, out)
			}
		}
	}
	if matched != rp.matched {
		b.Fatalf("index matched %d blocks, the simulated caches %d", matched, rp.matched)
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(ops)*float64(b.N)/sec/1e6, "Mops/s")
	b.ReportMetric(float64(rp.finds)*float64(b.N)/sec/1e6, "Mfinds/s")
	b.ReportMetric(float64(rp.stored+rp.removed)*float64(b.N)/sec/1e6, "Mblocks/s")
	b.ReportMetric(float64(ops), "ops/trace")
	b.ReportMetric(float64(rp.matched)/float64(rp.requestBlocks), "hit-rate")
}

// BenchmarkIndexAtCaps fills the index to its caps and reports the heap it
// takes: with one owner per node (MaxIndexBlocks nodes, as many
// ownerships), then with MaxIndexOwnerships ownerships over the same nodes;
// the difference gives the cost of one more ownership. It also times a
// FindMatches along 8192 blocks held by eight ranks.
func BenchmarkIndexAtCaps(b *testing.B) {
	const trees = kv.MaxIndexBlocks / kv.MaxBlocksPerRank
	const ranksPerTree = kv.MaxIndexOwnerships / kv.MaxIndexBlocks
	fill := func(ix *kv.Index, owners int) {
		ids := map[load.Key]uint64{}
		blocks := make([]wire.StoredBlock, 4096)
		for tree := range trees {
			for o := range owners {
				k := load.Key{Namespace: load.NS("dynamo"), WorkerID: uint64(tree*ranksPerTree + o + 1)}
				var parent *uint64
				for start := 0; start < kv.MaxBlocksPerRank; start += len(blocks) {
					for i := range blocks {
						d := uint64(start + i)
						blocks[i] = wire.StoredBlock{BlockHash: splitmix(uint64(tree)<<40 | d), TokensHash: splitmix(uint64(tree)<<32 | d)}
					}
					ids[k]++
					ev := wire.RouterEvent{WorkerID: k.WorkerID, EventID: ids[k], Kind: wire.KVStored, ParentHash: parent, Blocks: blocks}
					if out := ix.Apply(kv.SubscriptionID(k.WorkerID), load.NS("dynamo"), &ev); out.Result != kv.ResultAccepted {
						b.Fatalf("fill: %+v", out)
					}
					last := blocks[len(blocks)-1].BlockHash
					parent = &last
				}
			}
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var one, full kv.Stats
	var heapOne, heapFull uint64
	var findNs float64
	for b.Loop() {
		base := heap()
		ix := kv.NewIndex()
		ix.SetLive(benchLive(trees*ranksPerTree, 1))
		fill(ix, 1)
		heapOne, one = heap()-base, ix.Stats()
		ix = nil
		base = heap()
		ix = kv.NewIndex()
		ix.SetLive(benchLive(trees*ranksPerTree+1, 1))
		fill(ix, ranksPerTree)
		heapFull, full = heap()-base, ix.Stats()

		// One block more is refused.
		ev := wire.RouterEvent{WorkerID: trees*ranksPerTree + 1, EventID: 1, Kind: wire.KVStored,
			Blocks: []wire.StoredBlock{{BlockHash: 1, TokensHash: 1}}}
		if out := ix.Apply(0, load.NS("dynamo"), &ev); out.Result != kv.ResultOverCapacity {
			b.Fatalf("past the caps: %+v", out)
		}
		tokens := make([]uint64, 8192)
		for i := range tokens {
			tokens[i] = splitmix(uint64(i))
		}
		dst := make([]kv.Match, 0, ranksPerTree)
		const finds = 200
		start := time.Now()
		for range finds {
			dst = ix.FindMatches(tokens, dst[:0])
		}
		findNs = float64(time.Since(start).Nanoseconds()) / finds
		if len(dst) != ranksPerTree || dst[0].Blocks != len(tokens) {
			b.Fatalf("matches %+v", dst)
		}
		runtime.KeepAlive(ix)
	}
	if one.Nodes != kv.MaxIndexBlocks || full.Ownerships != kv.MaxIndexOwnerships {
		b.Fatalf("filled %+v and %+v", one, full)
	}
	b.ReportMetric(float64(heapOne)/float64(one.Nodes), "B/node")
	b.ReportMetric(float64(heapFull-heapOne)/float64(full.Ownerships-one.Ownerships), "B/ownership")
	b.ReportMetric(float64(heapFull)/(1<<20), "MiB-at-caps")
	b.ReportMetric(float64(full.Bytes)/float64(heapFull), "estimate/heap")
	b.ReportMetric(findNs/8192, "ns/find-block")
}
