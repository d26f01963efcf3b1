package kv_test

import (
	"encoding/binary"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/kv"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// model is the index's contract written the plain way: no tree, no caps.
// A rank's engine hash names a path (the tokens hashes from the root, as a
// string); a rank holds a path while one of its hashes names it.
type model struct {
	live  map[fleet.WorkerID]load.LiveWorker
	subs  map[kv.SubscriptionID]map[load.Key]modelCursor
	ranks map[load.Key]map[uint64]*modelBlock
}

type modelCursor struct {
	id   uint64
	last wire.RouterEvent
}

type modelBlock struct {
	path string
}

func newModel() *model {
	return &model{subs: map[kv.SubscriptionID]map[load.Key]modelCursor{}, ranks: map[load.Key]map[uint64]*modelBlock{}}
}

func (m *model) isLive(k load.Key) bool {
	w, ok := m.live[k.ID()]
	return ok && k.DPRank >= w.DPStartRank && k.DPRank < w.DPStartRank+max(w.DPSize, 1)
}

func (m *model) setLive(live map[fleet.WorkerID]load.LiveWorker) {
	m.live = live
	for k := range m.ranks {
		if !m.isLive(k) {
			delete(m.ranks, k)
		}
	}
	for _, cs := range m.subs {
		for k := range cs {
			if !m.isLive(k) {
				delete(cs, k)
			}
		}
	}
}

func (m *model) clearSubscription(id kv.SubscriptionID) {
	for k := range m.subs[id] {
		delete(m.ranks, k)
	}
	delete(m.subs, id)
}

func (m *model) apply(sub kv.SubscriptionID, ns string, ev wire.RouterEvent) kv.Outcome {
	if ev.Kind != wire.KVStored && ev.Kind != wire.KVRemoved && ev.Kind != wire.KVCleared {
		return kv.Outcome{Result: kv.ResultMalformed}
	}
	k := load.Key{Namespace: load.NS(ns), WorkerID: ev.WorkerID, DPRank: ev.DPRank}
	if !m.isLive(k) {
		return kv.Outcome{Result: kv.ResultIdentityMismatch}
	}
	cs := m.subs[sub]
	if cs == nil {
		cs = map[load.Key]modelCursor{}
		m.subs[sub] = cs
	}
	var out kv.Outcome
	if c, ok := cs[k]; ok {
		last := c.last
		last.EventID = ev.EventID
		switch {
		case ev.EventID < c.id, ev.EventID == c.id && reflect.DeepEqual(last, ev):
			return kv.Outcome{Result: kv.ResultReplay}
		case ev.EventID > c.id+1:
			delete(m.ranks, k)
			out.Gap = true
		}
	}
	cs[k] = modelCursor{ev.EventID, ev}
	if ev.Kind != wire.KVCleared && ev.StorageTier != "" && ev.StorageTier != "device" {
		out.Result = kv.ResultOtherTier
		return out
	}
	out.Result = kv.ResultAccepted
	if ev.Kind != wire.KVCleared && len(ev.Blocks) == 0 && len(ev.Removed) == 0 {
		return out // no block: nothing changes
	}
	blocks := m.ranks[k]
	switch ev.Kind {
	case wire.KVStored:
		path := ""
		if ev.ParentHash != nil {
			b, ok := blocks[*ev.ParentHash]
			if !ok {
				out.Result = kv.ResultUnknownParent
				return out
			}
			path = b.path
		}
		if blocks == nil {
			blocks = map[uint64]*modelBlock{}
			m.ranks[k] = blocks
		}
		for _, b := range ev.Blocks {
			path = string(binary.LittleEndian.AppendUint64([]byte(path), b.TokensHash))
			blocks[b.BlockHash] = &modelBlock{path: path}
		}
	case wire.KVRemoved:
		for _, h := range ev.Removed {
			delete(blocks, h)
		}
		if len(blocks) == 0 {
			delete(m.ranks, k)
		}
	default:
		delete(m.ranks, k)
	}
	return out
}

func pathOf(tokens []uint64) string {
	var b []byte
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint64(b, t)
	}
	return string(b)
}

func (m *model) matches(tokens []uint64) map[load.Key]int {
	got := map[load.Key]int{}
	for k, blocks := range m.ranks {
		held := map[string]bool{}
		for _, b := range blocks {
			held[b.path] = true
		}
		n := 0
		for n < len(tokens) && held[pathOf(tokens[:n+1])] {
			n++
		}
		if n > 0 {
			got[k] = n
		}
	}
	return got
}

// shape: nodes are every prefix of a held path; ownerships the distinct
// paths of each rank.
func (m *model) shape() shape {
	nodes := map[string]bool{}
	owned := 0
	for _, blocks := range m.ranks {
		held := map[string]bool{}
		for _, b := range blocks {
			held[b.path] = true
		}
		owned += len(held)
		for p := range held {
			for i := 8; i <= len(p); i += 8 {
				nodes[p[:i]] = true
			}
		}
	}
	return shape{len(nodes), owned, len(m.ranks)}
}

// The generator draws from small sets (tokens hashes 1..3, engine hashes
// 1..24 per rank, three workers of two ranks, three subscriptions) so that
// shared prefixes, repeated and moved engine hashes, replays, gaps and
// departures all happen often.
type generator struct {
	rnd  *rand.Rand
	m    *model
	ids  map[kv.SubscriptionID]map[load.Key]uint64
	last map[kv.SubscriptionID]map[load.Key]wire.RouterEvent
}

func (g *generator) pick(n int) int { return g.rnd.IntN(n) }

// nsOf is the namespace of subscription sub's publisher: two graphs, whose
// workers share instance ids.
func nsOf(sub kv.SubscriptionID) string {
	if sub == 3 {
		return "canary"
	}
	return "prod"
}

func (g *generator) event() (kv.SubscriptionID, wire.RouterEvent) {
	sub := kv.SubscriptionID(1 + g.pick(3))
	k := load.Key{Namespace: load.NS(nsOf(sub)), WorkerID: uint64(1 + g.pick(4)), DPRank: uint32(g.pick(2))}
	if g.pick(10) == 0 {
		k.DPRank = 2 // declared by no worker
	}
	if g.ids[sub] == nil {
		g.ids[sub], g.last[sub] = map[load.Key]uint64{}, map[load.Key]wire.RouterEvent{}
	}
	if last, ok := g.last[sub][k]; ok && g.pick(20) == 0 {
		return sub, last // a replay of the last event
	}
	ev := wire.RouterEvent{WorkerID: k.WorkerID, DPRank: k.DPRank}
	held := slices.Sorted(maps.Keys(g.m.ranks[k]))
	switch p := g.pick(100); {
	case p < 60:
		ev.Kind = wire.KVStored
		switch q := g.pick(10); {
		case q < 6 && len(held) > 0:
			ev.ParentHash = ph(held[g.pick(len(held))])
		case q == 6:
			ev.ParentHash = ph(uint64(1 + g.pick(30)))
		}
		for range 1 + g.pick(4) {
			ev.Blocks = append(ev.Blocks, wire.StoredBlock{BlockHash: uint64(1 + g.pick(24)), TokensHash: uint64(1 + g.pick(3))})
		}
	case p < 90:
		ev.Kind = wire.KVRemoved
		for range 1 + g.pick(3) {
			if len(held) > 0 && g.pick(5) > 0 {
				ev.Removed = append(ev.Removed, held[g.pick(len(held))])
			} else {
				ev.Removed = append(ev.Removed, uint64(1+g.pick(30)))
			}
		}
	case p < 94:
		ev.Kind = wire.KVCleared
	case p < 96:
		ev.Kind = wire.KVStored // malformed: no blocks
	default:
		ev.Kind = wire.KVRemoved
		ev.Removed = []uint64{uint64(1 + g.pick(24))}
		ev.StorageTier = []string{"device", "host_pinned", "disk"}[g.pick(3)]
	}
	id := g.ids[sub][k]
	switch p := g.pick(100); {
	case p < 80 || id == 0:
		id++
	case p < 88: // an older publisher's batch: the same id again
	case p < 94:
		id += 2 + uint64(g.pick(3))
	default:
		id -= uint64(g.pick(int(min(id, 3))))
	}
	g.ids[sub][k] = max(g.ids[sub][k], id)
	ev.EventID = id
	g.last[sub][k] = ev
	return sub, ev
}

func (g *generator) live() map[fleet.WorkerID]load.LiveWorker {
	live := map[fleet.WorkerID]load.LiveWorker{}
	for _, ns := range []string{"prod", "canary"} {
		for w := uint64(1); w <= 4; w++ {
			switch g.pick(6) {
			case 0: // absent
			case 1:
				live[fleet.WorkerID{Namespace: ns, InstanceID: w}] = load.LiveWorker{DPStartRank: 1, DPSize: 2}
			default:
				live[fleet.WorkerID{Namespace: ns, InstanceID: w}] = load.LiveWorker{DPSize: 2}
			}
		}
	}
	return live
}

func (g *generator) query() []uint64 {
	var tokens []uint64
	// Mostly a path some rank holds, extended; sometimes anything.
	keys := slices.SortedFunc(maps.Keys(g.m.ranks), func(a, b load.Key) int {
		if a.WorkerID != b.WorkerID {
			return int(a.WorkerID) - int(b.WorkerID)
		}
		return int(a.DPRank) - int(b.DPRank)
	})
	if len(keys) > 0 && g.pick(4) > 0 {
		blocks := g.m.ranks[keys[g.pick(len(keys))]]
		hashes := slices.Sorted(maps.Keys(blocks))
		path := blocks[hashes[g.pick(len(hashes))]].path
		for i := 0; i < len(path); i += 8 {
			tokens = append(tokens, binary.LittleEndian.Uint64([]byte(path[i:])))
		}
	}
	for range g.pick(4) {
		tokens = append(tokens, uint64(1+g.pick(3)))
	}
	return tokens
}

func TestIndexAgainstModel(t *testing.T) {
	t.Parallel()
	steps := 4000
	if testing.Short() {
		steps = 1000
	}
	for seed := range uint64(8) {
		g := &generator{rnd: rand.New(rand.NewPCG(seed, 7)), m: newModel(),
			ids: map[kv.SubscriptionID]map[load.Key]uint64{}, last: map[kv.SubscriptionID]map[load.Key]wire.RouterEvent{}}
		ix := kv.NewIndex()
		live := g.live()
		g.m.setLive(live)
		ix.SetLive(maps.Clone(live))
		var dst []kv.Match
		for step := range steps {
			switch p := g.pick(200); {
			case p == 0:
				live := g.live()
				g.m.setLive(live)
				ix.SetLive(maps.Clone(live))
			case p == 1:
				sub := kv.SubscriptionID(1 + g.pick(3))
				g.m.clearSubscription(sub)
				ix.ClearSubscription(sub)
			case p < 60:
				tokens := g.query()
				dst = ix.FindMatches(tokens, dst[:0])
				got := map[load.Key]int{}
				for _, m := range dst {
					got[m.Rank] = m.Blocks
				}
				if want := g.m.matches(tokens); !maps.Equal(got, want) {
					t.Fatalf("seed %d step %d: matches %v = %v, want %v", seed, step, tokens, got, want)
				}
			default:
				sub, ev := g.event()
				want := g.m.apply(sub, nsOf(sub), ev)
				if got := ix.Apply(sub, load.NS(nsOf(sub)), &ev); got != want {
					t.Fatalf("seed %d step %d: %+v: %+v, want %+v", seed, step, ev, got, want)
				}
			}
			if step%16 == 0 || step == steps-1 {
				if msg := ix.CheckInvariants(); msg != "" {
					t.Fatalf("seed %d step %d: %s", seed, step, msg)
				}
				st := ix.Stats()
				if got, want := (shape{st.Nodes, st.Ownerships, st.Ranks}), g.m.shape(); got != want {
					t.Fatalf("seed %d step %d: shape %+v, want %+v", seed, step, got, want)
				}
			}
		}
	}
}
