package kv

import (
	"context"
	"fmt"
	"time"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// Limits are caps for an index built by NewIndexWithLimits (tests).
type Limits struct {
	Blocks, PerRank, Ownerships, PerNode, Cursors int
}

// NewIndexWithLimits returns an index with smaller caps than the constants.
func NewIndexWithLimits(l Limits) *Index {
	return newIndex(limits{l.Blocks, l.PerRank, l.Ownerships, l.PerNode, l.Cursors})
}

// CheckInvariants recomputes what the index keeps in step (children counts,
// owner lists, ownership totals, edges) and returns the first difference.
func (ix *Index) CheckInvariants() string { return ix.checkInvariants() }

func (ix *Index) checkInvariants() string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	kids := map[int32]int32{}
	liveNodes, used := 0, 0
	for i := 1; i < len(ix.nodes); i++ {
		nd := ix.nodes[i]
		if nd.parent < 0 {
			continue
		}
		liveNodes++
		kids[nd.parent]++
		if ix.nodes[nd.parent].parent < 0 && nd.parent != 0 {
			return fmt.Sprintf("node %d: parent %d is free", i, nd.parent)
		}
		if e, ok := ix.edges.find(nd.path, nd.parent); !ok || ix.edges.slots[e].node != int32(i) {
			return fmt.Sprintf("node %d: edge missing", i)
		}
		if nd.nown >= 2 {
			used += 1 << nd.class
		}
		if nd.nown > 0 {
			own := ix.ownersOf(int32(i))
			for j, r := range own {
				if j > 0 && own[j-1] >= r {
					return fmt.Sprintf("node %d: owners not sorted: %v", i, own)
				}
				if !ix.ranks[r].inUse {
					return fmt.Sprintf("node %d: owner %d is free", i, r)
				}
			}
		}
	}
	for i := range ix.nodes {
		if ix.nodes[i].parent < 0 && i != 0 {
			continue
		}
		if ix.nodes[i].kids != kids[int32(i)] {
			return fmt.Sprintf("node %d: kids %d, counted %d", i, ix.nodes[i].kids, kids[int32(i)])
		}
		if i != 0 && ix.nodes[i].kids == 0 && ix.nodes[i].nown == 0 {
			return fmt.Sprintf("node %d: neither owners nor children", i)
		}
	}
	if liveNodes != ix.nodeCount || ix.edges.n != liveNodes {
		return fmt.Sprintf("nodes %d, counted %d, edges %d", ix.nodeCount, liveNodes, ix.edges.n)
	}
	if msg := checkTable(len(ix.edges.slots), func(i int) (int, bool) {
		s := ix.edges.slots[i]
		return ix.edges.home(s.path), s.node != 0
	}); msg != "" {
		return "edges: " + msg
	}
	if used != ix.owners.used {
		return fmt.Sprintf("arena used %d, counted %d", ix.owners.used, used)
	}
	owned := 0
	for r := range ix.ranks {
		rs := &ix.ranks[r]
		if !rs.inUse {
			continue
		}
		if ix.rankOf[rs.key] != int32(r) || rs.blocks.n == 0 {
			return fmt.Sprintf("rank %d: not indexed or empty", r)
		}
		if msg := checkTable(len(rs.blocks.slots), func(i int) (int, bool) {
			s := rs.blocks.slots[i]
			return rs.blocks.home(s.hash), s.node != 0
		}); msg != "" {
			return fmt.Sprintf("rank %d: %s", r, msg)
		}
		per := map[int32]uint32{}
		entries := 0
		for _, s := range rs.blocks.slots {
			if s.node != 0 {
				per[s.node]++
				entries++
			}
		}
		if entries != rs.blocks.n {
			return fmt.Sprintf("rank %d: %d entries, counted %d", r, rs.blocks.n, entries)
		}
		for n, c := range per {
			if !ix.owns(n, int32(r)) {
				return fmt.Sprintf("rank %d: holds node %d but is not its owner", r, n)
			}
			if m := rs.multi[n]; (c >= 2 && m != c) || (c < 2 && m != 0) {
				return fmt.Sprintf("rank %d node %d: %d hashes, multi %d", r, n, c, m)
			}
		}
		owned += len(per)
	}
	if owned != ix.ownerships {
		return fmt.Sprintf("ownerships %d, counted %d", ix.ownerships, owned)
	}
	total := 0
	for i := range ix.nodes {
		total += int(ix.nodes[i].nown)
	}
	if total != owned {
		return fmt.Sprintf("owner lists hold %d, ranks %d", total, owned)
	}
	if len(ix.rankOf) != countInUse(ix.ranks) {
		return "rankOf and ranks differ"
	}
	return ""
}

func countInUse(rs []rankState) int {
	n := 0
	for i := range rs {
		if rs[i].inUse {
			n++
		}
	}
	return n
}

// checkTable verifies linear probing: every slot in use is reached from its
// home without crossing an empty slot.
func checkTable(size int, slot func(int) (home int, used bool)) string {
	mask := size - 1
	for i := range size {
		home, used := slot(i)
		if !used {
			continue
		}
		for j := home; j != i; j = (j + 1) & mask {
			if _, u := slot(j); !u {
				return fmt.Sprintf("slot %d (home %d) is cut off by the empty slot %d", i, home, j)
			}
		}
	}
	return ""
}

// NewChoiceForBench returns the choice of a request whose prompt pr is
// hashed already, with its overlaps from ix (benchmarks).
func NewChoiceForBench(t Terms, isl int, ix *Index, pr *Prompt) pick.Scorer {
	b := &matchBuf{}
	(&Picker{index: ix, inflight: newPending()}).matchPrompt(b, pr, time.Time{})
	return &choice{terms: t, isl: isl, overlaps: b}
}

// SetRenderBudget shortens the render budget of p.
func SetRenderBudget(p *Prompts, d time.Duration) { p.budget = d }

// RenderBuilt renders a template artifact Build returned.
func RenderBuilt(ctx context.Context, built any, in chattemplate.Input) (string, error) {
	return built.(*templateArtifact).tmpl.Render(ctx, in)
}

// NamedTemplates is namedTemplates: a tokenizer config's default and
// tool_use templates as the prompts load them.
func NamedTemplates(data []byte) (def, toolUse *chattemplate.Template, err error) {
	return namedTemplates(data)
}

// ChatRequestText is the text ChatRequest renders for body, before its
// encoding.
func (p *Preparer) ChatRequestText(body []byte) (string, error) {
	in, _, err := chatInput(body, p.KeepToolsWhenToolChoiceNone, p.shape)
	if err != nil {
		return "", err
	}
	if p.SpecialTokens != nil {
		in.SpecialTokens = p.SpecialTokens
	}
	text, _, err := p.Chat(context.Background(), in)
	return text, err
}

// SerdeReads is serdeReads: whether serde_json reads s as JSON.
var SerdeReads = serdeReads

// ReplaceForTest makes the readers of a publisher whose record changed
// from old to new, and tells old stopped afterwards, as a reconcile does;
// between the two, fed runs (the new session feeding the index) with the
// old reader's Message (its loop delivering a last message).
func (s *Subscriptions) ReplaceForTest(old, new fleet.Publisher, fed func(oldMessage func(frames [][]byte))) {
	r := s.newReader(old)
	s.newReader(new)
	fed(func(frames [][]byte) { r.Message(frames, time.Now()) })
	s.pool.Stopped(old)
}

// DepartForTest makes a reader for p and tells p stopped (it left), and
// returns the reader's Message: its loop delivering a message it read.
func (s *Subscriptions) DepartForTest(p fleet.Publisher) (late func(frames [][]byte)) {
	r := s.newReader(p)
	s.pool.Stopped(p)
	return func(frames [][]byte) { r.Message(frames, time.Now()) }
}
