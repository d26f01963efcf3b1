package tokenize

import (
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// unigram is the Unigram model (SentencePiece's, as T5, mT5, XLM-R and
// ALBERT files carry it): a word is cut into the vocabulary pieces whose
// scores (log probabilities) sum highest. A character no piece starts
// with is an unknown piece scored 10 below the lowest score; runs of
// unknown pieces are fused into one, which then goes to byte fallback
// (<0xXX> tokens, when every byte has one) or to the unknown id.
type unigram struct {
	pieces   []scoredPiece     // by id, as the file lists them
	ids      map[string]uint32 // a repeated piece keeps its last id, as in the library
	trie     byteTrie
	unkScore float64
	unk      uint32
	hasUnk   bool
	fallback bool
	cache    wordCache
}

type scoredPiece struct {
	s     string
	score float64
}

// unkPenalty is how far below the lowest piece score an unknown character
// is scored.
const unkPenalty = 10.0

func parseUnigram(j *modelJSON) (*unigram, error) {
	if j.Vocab == nil {
		return nil, fmt.Errorf("tokenize: Unigram model: missing vocab")
	}
	pieces, err := readScoredVocab(j.Vocab)
	if err != nil {
		return nil, fmt.Errorf("tokenize: Unigram vocab: %w", err)
	}
	if len(pieces) >= maxTokenID {
		return nil, fmt.Errorf("tokenize: Unigram vocab has %d pieces, more than %d", len(pieces), maxTokenID)
	}
	m := &unigram{pieces: pieces, ids: make(map[string]uint32, len(pieces)), fallback: j.ByteFallback}
	if j.UnkID != nil {
		if len(pieces) == 0 {
			return nil, fmt.Errorf("tokenize: Unigram model: the vocabulary is empty but unk_id is set")
		}
		if *j.UnkID < 0 || *j.UnkID >= int64(len(pieces)) {
			return nil, fmt.Errorf("tokenize: Unigram model: unk_id %d is not in the vocabulary of %d", *j.UnkID, len(pieces))
		}
		m.unk, m.hasUnk = uint32(*j.UnkID), true
	}
	minScore := math.Inf(1)
	for id, p := range pieces {
		m.ids[p.s] = uint32(id)
		minScore = min(minScore, p.score)
	}
	m.unkScore = minScore - unkPenalty
	m.trie = newByteTrie(m.ids)
	m.cache.init()
	return m, nil
}

// uniNode is the best path found so far that ends at one byte offset of a
// word: the last piece's id and start, and the path's score.
type uniNode struct {
	score float64
	start int32 // -1: no path yet
	id    uint32
}

// uniSpan is a piece of the best path; unk marks an unknown character.
type uniSpan struct {
	start, end int32
	unk        bool
}

func (m *unigram) encodeWord(dst []uint32, w string, ws *wordScratch) []uint32 {
	cacheable := len(w) <= maxCachedWord
	if cacheable {
		if ids, ok := m.cache.get(w); ok {
			return append(dst, ids...)
		}
	}
	start := len(dst)
	dst = m.encode(dst, w, ws)
	if cacheable {
		m.cache.put(w, dst[start:])
	}
	return dst
}

// encode finds the best path by dynamic programming over the word's
// character boundaries (ties keep the path found first: shorter pieces
// are tried first, and a later candidate must score strictly higher).
func (m *unigram) encode(dst []uint32, w string, ws *wordScratch) []uint32 {
	nodes := slices.Grow(ws.uni[:0], len(w)+1)[:len(w)+1]
	for i := range nodes {
		nodes[i] = uniNode{start: -1}
	}
	for pos := 0; pos < len(w); {
		ws.stop.tick()
		here := nodes[pos].score
		_, charLen := utf8.DecodeRuneInString(w[pos:])
		single := false
		node := int32(0)
		for k := pos; k < len(w); k++ {
			if node = m.trie.child(node, w[k]); node < 0 {
				break
			}
			id := m.trie.leaf[node]
			if id < 0 {
				continue
			}
			end := k + 1
			cand := m.pieces[id].score + here
			if t := &nodes[end]; t.start < 0 || cand > t.score {
				*t = uniNode{score: cand, start: int32(pos), id: uint32(id)}
			}
			if end-pos == charLen {
				single = true
			}
		}
		if !single {
			cand := m.unkScore + here
			if t := &nodes[pos+charLen]; t.start < 0 || cand > t.score {
				if !m.hasUnk {
					panic(encodeError{fmt.Errorf("tokenize: %q holds a character no Unigram piece covers, and the model has no unk_id", w)})
				}
				*t = uniNode{score: cand, start: int32(pos), id: m.unk}
			}
		}
		pos += charLen
	}
	// Walk the best path back from the end, then emit it forwards,
	// fusing each run of unknown pieces into one.
	spans := ws.spans[:0]
	for end := len(w); end > 0; {
		n := nodes[end]
		spans = append(spans, uniSpan{start: n.start, end: int32(end), unk: m.hasUnk && n.id == m.unk})
		end = int(n.start)
	}
	for i := len(spans) - 1; i >= 0; i-- {
		s := spans[i]
		if s.unk {
			for i > 0 && spans[i-1].unk {
				i--
				s.end = spans[i].end
			}
		}
		dst = m.emit(dst, w[s.start:s.end])
	}
	ws.uni, ws.spans = nodes[:0], spans[:0]
	return dst
}

// emit appends the id of one piece of the path: its vocabulary id, else
// its bytes' fallback tokens when byte fallback is on and every byte has
// one, else the unknown id.
func (m *unigram) emit(dst []uint32, piece string) []uint32 {
	if id, ok := m.ids[piece]; ok {
		return append(dst, id)
	}
	if m.fallback {
		all := true
		for i := 0; i < len(piece) && all; i++ {
			_, all = m.ids[byteToken[piece[i]]]
		}
		if all {
			for i := 0; i < len(piece); i++ {
				dst = append(dst, m.ids[byteToken[piece[i]]])
			}
			return dst
		}
	}
	if !m.hasUnk {
		panic(encodeError{fmt.Errorf("tokenize: %q is not a Unigram piece, and the model has no unk_id", piece)})
	}
	return append(dst, m.unk)
}

// byteToken spells each byte's fallback token, <0xXX>.
var byteToken = func() (t [256]string) {
	for b := range t {
		t[b] = fmt.Sprintf("<0x%02X>", b)
	}
	return t
}()

func (m *unigram) tokenID(tok string) (uint32, bool) {
	id, ok := m.ids[tok]
	return id, ok
}

func (m *unigram) size() int { return len(m.pieces) }

func (m *unigram) eachToken(f func(uint32, string)) {
	for id, p := range m.pieces {
		f(uint32(id), p.s)
	}
}

// byteTrie is a trie over the bytes of the vocabulary's pieces, flattened:
// node 0 is the root, whose children are found by table; every other
// node's children are a sorted run of labels.
type byteTrie struct {
	root  [256]int32 // child of the root per byte, -1 when none
	first []int32    // per node: index in labels/kids of its first child
	count []uint16   // per node: number of children
	label []byte
	kid   []int32
	leaf  []int32 // per node: the id of the piece ending here, -1 when none
}

func newByteTrie(ids map[string]uint32) byteTrie {
	// Build from the sorted pieces, each node's children in a sibling
	// list (appended in label order, as the pieces are sorted), without a
	// map per node: a vocabulary of 250,000 pieces has about a million
	// nodes. Then lay the nodes out breadth first, children contiguous.
	type node struct {
		label                   byte
		first, last, next, leaf int32
	}
	keys := make([]string, 0, len(ids))
	most := 1 // nodes at most: the root and one per byte of every piece
	for k := range ids {
		if k != "" { // the empty piece is never matched
			keys = append(keys, k)
			most += len(k)
		}
	}
	slices.Sort(keys)
	nodes := make([]node, 1, most)
	nodes[0] = node{first: -1, last: -1, next: -1, leaf: -1}
	path := []int32{0} // path[d]: the node at depth d on the previous piece's path
	prev := ""
	for _, k := range keys {
		common := 0
		for common < len(prev) && common < len(k) && prev[common] == k[common] {
			common++
		}
		path = path[:common+1]
		for d := common; d < len(k); d++ {
			parent := path[d]
			n := int32(len(nodes))
			nodes = append(nodes, node{label: k[d], first: -1, last: -1, next: -1, leaf: -1})
			if nodes[parent].last < 0 {
				nodes[parent].first = n
			} else {
				nodes[nodes[parent].last].next = n
			}
			nodes[parent].last = n
			path = append(path, n)
		}
		nodes[path[len(k)]].leaf = int32(ids[k])
		prev = k
	}
	t := byteTrie{
		first: make([]int32, len(nodes)),
		count: make([]uint16, len(nodes)),
		leaf:  make([]int32, len(nodes)),
		label: make([]byte, 0, len(nodes)),
		kid:   make([]int32, 0, len(nodes)),
	}
	for i := range t.root {
		t.root[i] = -1
	}
	// order[k] is the built node laid out as node k; a node's children
	// take the next flat numbers as they are queued.
	order := make([]int32, 1, len(nodes))
	for k := 0; k < len(order); k++ {
		n := nodes[order[k]]
		t.leaf[k] = n.leaf
		t.first[k] = int32(len(t.label))
		for c := n.first; c >= 0; c = nodes[c].next {
			flat := int32(len(order))
			order = append(order, c)
			t.label = append(t.label, nodes[c].label)
			t.kid = append(t.kid, flat)
			t.count[k]++
			if k == 0 {
				t.root[nodes[c].label] = flat
			}
		}
	}
	return t
}

// child returns the child of node n labelled b, or -1.
func (t *byteTrie) child(n int32, b byte) int32 {
	if n == 0 {
		return t.root[b]
	}
	lo, hi := int(t.first[n]), int(t.first[n])+int(t.count[n])
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		switch l := t.label[mid]; {
		case l == b:
			return t.kid[mid]
		case l < b:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return -1
}
