package tokenize

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxTokenID bounds the ids a file may use (the id table is a slice).
const maxTokenID = 1 << 24

// bpe is the BPE model. In byte-level mode (the pre-tokenizer ends with
// ByteLevel) it keys its vocabulary by raw bytes, which is the library's
// byte-to-alphabet mapping undone once at load instead of on every word.
type bpe struct {
	vocabStr  map[string]uint32 // as the file spells the tokens
	vocab     map[string]uint32 // as words reach the model (raw bytes in byte-level mode)
	merges    mergeTable
	byteLevel bool
	byteTok   [256]uint32 // byte-level mode: the token of each byte
	// hasByte says which bytes have a token; allBytes that all do (a byte
	// without one is read as a missing character, see initialSymbols).
	hasByte  [256]bool
	allBytes bool
	// prefix and suffix decorate a word's characters before they are
	// looked up: every character but the first is spelled after prefix
	// (continuing_subword_prefix), the last before suffix
	// (end_of_word_suffix).
	prefix, suffix string
	byteFallback   bool
	fallback       [256]uint32 // <0xXX> tokens
	hasFallback    [256]bool
	unk            uint32
	hasUnk         bool
	// unkMissing is the file's unk_token when the vocab lacks it: the
	// library loads such a file and fails an encode only when a character
	// needs the unknown token.
	unkMissing   string
	fuseUnk      bool
	ignoreMerges bool
	cache        wordCache
	// chunkAfter, when set, lists the characters after which a word may be
	// cut before a "▁": no vocabulary token holds that character followed
	// by "▁", so no merge can cross the cut and the parts encode alone
	// (and cached). SentencePiece-style words are whole texts otherwise.
	chunkAfter map[rune]bool
}

const metaspace = "\u2581"

// minChunkedWord is the shortest word (bytes) cut into chunks.
const minChunkedWord = 64

// mergeTable is an open-addressing hash table from a token pair to its
// merge, read on every merge step (faster than a map for this key).
type mergeTable struct {
	slots []mergeSlot
	mask  uint64
}

type mergeSlot struct {
	key  uint64 // emptyPair when free
	rule mergeRule
}

const emptyPair = ^uint64(0) // ids are below maxTokenID, so no pair is this

func newMergeTable(n int) mergeTable {
	size := 8
	for size < n+n/2+1 {
		size <<= 1
	}
	slots := make([]mergeSlot, size)
	for i := range slots {
		slots[i].key = emptyPair
	}
	return mergeTable{slots: slots, mask: uint64(size - 1)}
}

func (t *mergeTable) put(key uint64, r mergeRule) {
	for i := (key * 0x9E3779B97F4A7C15) >> 20 & t.mask; ; i = (i + 1) & t.mask {
		if s := &t.slots[i]; s.key == emptyPair || s.key == key {
			s.key, s.rule = key, r // a repeated merge: the later one wins, as in the library's map
			return
		}
	}
}

func (t *mergeTable) get(key uint64) (mergeRule, bool) {
	for i := (key * 0x9E3779B97F4A7C15) >> 20 & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.key == key {
			return s.rule, true
		}
		if s.key == emptyPair {
			return mergeRule{}, false
		}
	}
}

type mergeRule struct {
	rank  uint32
	newID uint32
}

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

func parseBPE(j *modelJSON, byteLevel bool) (*bpe, error) {
	if j.Dropout != nil && *j.Dropout != 0 {
		return nil, unsupported("BPE dropout %v", *j.Dropout)
	}
	var prefix, suffix string
	if j.ContinuingSubwordPrefix != nil {
		prefix = *j.ContinuingSubwordPrefix
	}
	if j.EndOfWordSuffix != nil {
		suffix = *j.EndOfWordSuffix
	}
	if byteLevel && (prefix != "" || suffix != "") {
		return nil, unsupported("BPE continuing_subword_prefix or end_of_word_suffix with a ByteLevel pre-tokenizer")
	}
	vocab, err := readVocab(j.Vocab)
	if err != nil {
		return nil, fmt.Errorf("tokenize: BPE vocab: %w", err)
	}
	if len(vocab) == 0 {
		return nil, fmt.Errorf("tokenize: BPE model has an empty vocab")
	}
	m := &bpe{
		vocabStr:     vocab,
		byteLevel:    byteLevel,
		byteFallback: j.ByteFallback,
		fuseUnk:      j.FuseUnk,
		ignoreMerges: j.IgnoreMerges,
		prefix:       prefix,
		suffix:       suffix,
	}
	if err := checkIDs(vocab); err != nil {
		return nil, err
	}
	if j.UnkToken != nil {
		if id, ok := vocab[*j.UnkToken]; ok {
			m.unk, m.hasUnk = id, true
		} else {
			m.unkMissing = *j.UnkToken
		}
	}
	if byteLevel {
		m.vocab = make(map[string]uint32, len(vocab))
		var have [256]bool
		for tok, id := range vocab {
			raw, ok := fromByteLevel(tok)
			if !ok {
				continue // never produced from byte-level text
			}
			m.vocab[raw] = id
			if len(raw) == 1 {
				m.byteTok[raw[0]], have[raw[0]] = id, true
			}
		}
		m.allBytes = true
		for _, ok := range have {
			m.allBytes = m.allBytes && ok
		}
		m.hasByte = have
	} else {
		m.vocab = vocab
	}
	for b := 0; b < 256; b++ {
		if id, ok := vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.fallback[b], m.hasFallback[b] = id, true
		}
	}
	merges, err := readMerges(j.Merges)
	if err != nil {
		return nil, fmt.Errorf("tokenize: BPE merges: %w", err)
	}
	m.merges = newMergeTable(len(merges))
	for rank, mg := range merges {
		a, ok1 := vocab[mg[0]]
		b, ok2 := vocab[mg[1]]
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("tokenize: merge %q %q: token not in the vocab", mg[0], mg[1])
		}
		// The merged token is the pair with the second's first len(prefix)
		// bytes cut (its continuing prefix, whatever they are).
		second := mg[1]
		if len(prefix) > 0 {
			if len(second) < len(prefix) || !utf8.ValidString(second[len(prefix):]) {
				return nil, fmt.Errorf("tokenize: merge %q %q: the second token is shorter than the continuing_subword_prefix %q", mg[0], mg[1], prefix)
			}
			second = second[len(prefix):]
		}
		id, ok := vocab[mg[0]+second]
		if !ok {
			return nil, fmt.Errorf("tokenize: merge %q %q: merged token not in the vocab", mg[0], mg[1])
		}
		m.merges.put(pairKey(a, b), mergeRule{rank: uint32(rank), newID: id})
	}
	if !byteLevel && prefix == "" && suffix == "" {
		m.chunkAfter = chunkable(vocab)
	}
	m.cache.init()
	return m, nil
}

func (m *bpe) tokenID(tok string) (uint32, bool) {
	id, ok := m.vocabStr[tok]
	return id, ok
}

func (m *bpe) size() int { return len(m.vocabStr) }

func (m *bpe) eachToken(f func(uint32, string)) {
	for s, id := range m.vocabStr {
		f(id, s)
	}
}

// The byte-level alphabet: printable bytes stand for themselves, the others
// for the code points from U+0100 on, in byte order.
var runeToByte = func() map[rune]byte {
	r2b := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			r2b[rune(b)] = byte(b)
		} else {
			r2b[rune(256+n)] = byte(b)
			n++
		}
	}
	return r2b
}()

// byteToRune is runeToByte inverted: the alphabet character of each byte.
var byteToRune = func() (t [256]rune) {
	for r, b := range runeToByte {
		t[b] = r
	}
	return t
}()

// toByteLevel spells raw bytes in the byte-level alphabet (at most two
// UTF-8 bytes a character, so at most twice the input).
func toByteLevel(s string) string {
	out := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		out = utf8.AppendRune(out, byteToRune[s[i]])
	}
	return string(out)
}

// fromByteLevel maps a byte-level token back to its bytes.
func fromByteLevel(tok string) (string, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return "", false
		}
		out = append(out, b)
	}
	return string(out), true
}

// chunkable returns the single-character tokens c (other than "▁") such
// that no token contains c followed by "▁", or nil if the vocabulary has no
// "▁".
func chunkable(vocab map[string]uint32) map[rune]bool {
	if _, ok := vocab[metaspace]; !ok {
		return nil
	}
	bad := map[rune]bool{}
	for tok := range vocab {
		prev := rune(-1)
		for _, r := range tok {
			if r == '\u2581' && prev >= 0 && prev != '\u2581' {
				bad[prev] = true
			}
			prev = r
		}
	}
	out := map[rune]bool{}
	for tok := range vocab {
		r, n := utf8.DecodeRuneInString(tok)
		if n == len(tok) && r != utf8.RuneError && r != '\u2581' && !bad[r] {
			out[r] = true
		}
	}
	return out
}

// encodeChunked cuts a long SentencePiece-style word before each "▁" that
// follows a character in chunkAfter and encodes the parts.
func (m *bpe) encodeChunked(dst []uint32, w string, ws *wordScratch) []uint32 {
	start := 0
	prev := rune(-1)
	for i := 0; i < len(w); {
		r, n := utf8.DecodeRuneInString(w[i:])
		if r == '\u2581' && i > start && m.chunkAfter[prev] {
			dst = m.encodeOne(dst, w[start:i], ws)
			start = i
		}
		prev = r
		i += n
	}
	return m.encodeOne(dst, w[start:], ws)
}

// wordScratch is one Encode's merge workspace.
type wordScratch struct {
	syms []symbol
	heap mergeHeap
	// The other models' scratch: WordPiece's prefixed piece, Unigram's
	// best paths and the path found.
	buf   []byte
	uni   []uniNode
	spans []uniSpan
	// stop is the encode's stopper: a word of megabytes takes seconds of
	// merges.
	stop *stopper
}

// small reports whether the scratch is small enough to keep in the pool.
func (w *wordScratch) small() bool {
	return cap(w.syms) <= maxPooledPieces && cap(w.uni) <= maxPooledPieces && cap(w.spans) <= maxPooledPieces && cap(w.buf) <= maxPooledPieces
}

type symbol struct {
	id         uint32
	prev, next int32
	rank       uint32 // rank of the pair (this, next); noRank when none
	dead       bool
}

const noRank = ^uint32(0)

// maxCachedWord is the longest word (bytes) whose encoding is cached.
const maxCachedWord = 128

// encodeWord appends the tokens of one pre-token.
func (m *bpe) encodeWord(dst []uint32, w string, ws *wordScratch) []uint32 {
	if m.ignoreMerges || len(w) == 1 && m.byteLevel && m.suffix == "" {
		if id, ok := m.vocab[w]; ok {
			return append(dst, id)
		}
	}
	if m.chunkAfter != nil && len(w) >= minChunkedWord {
		return m.encodeChunked(dst, w, ws)
	}
	return m.encodeOne(dst, w, ws)
}

// encodeOne encodes one word (or chunk) with the cache.
func (m *bpe) encodeOne(dst []uint32, w string, ws *wordScratch) []uint32 {
	cacheable := len(w) <= maxCachedWord
	if cacheable {
		if ids, ok := m.cache.get(w); ok {
			return append(dst, ids...)
		}
	}
	ws.syms = m.initialSymbols(ws.syms[:0], w, ws)
	if len(ws.syms) > 24 {
		m.mergeHeap(ws)
	} else {
		m.mergeScan(ws)
	}
	start := len(dst)
	for i := int32(0); i >= 0 && int(i) < len(ws.syms); i = ws.syms[i].next {
		dst = append(dst, ws.syms[i].id)
	}
	if cacheable {
		m.cache.put(w, dst[start:])
	}
	return dst
}

// initialSymbols splits w into its characters' tokens (bytes in byte-level
// mode), with byte fallback and unknown tokens as the library does.
//
// A word has at most one symbol per byte: the slice is sized once, as a
// word of megabytes would otherwise spend most of its time regrowing it.
func (m *bpe) initialSymbols(syms []symbol, w string, ws *wordScratch) []symbol {
	syms = slices.Grow(syms, len(w))
	add := func(id uint32) {
		ws.stop.tick()
		syms = append(syms, symbol{id: id})
	}
	if m.byteLevel && m.allBytes {
		for i := 0; i < len(w); i++ {
			add(m.byteTok[w[i]])
		}
	} else {
		// A character the vocabulary lacks goes to byte fallback (its
		// bytes' <0xXX> tokens, when all exist), else to the unknown token
		// (runs of them fused into one with fuse_unk), else it is dropped,
		// as the library does. In byte-level mode the characters are the
		// bytes, spelled in the alphabet for the fallback's sake.
		unkPending := false
		for i := 0; i < len(w); {
			var ch string
			var id uint32
			var ok bool
			if m.byteLevel {
				b := w[i]
				i++
				if id, ok = m.byteTok[b], m.hasByte[b]; !ok {
					ch = string(byteToRune[b])
				}
			} else {
				_, n := utf8.DecodeRuneInString(w[i:])
				ch = w[i : i+n]
				if m.prefix != "" && i > 0 || m.suffix != "" && i+n == len(w) {
					ws.buf = ws.buf[:0]
					if m.prefix != "" && i > 0 {
						ws.buf = append(ws.buf, m.prefix...)
					}
					ws.buf = append(ws.buf, ch...)
					if m.suffix != "" && i+n == len(w) {
						ws.buf = append(ws.buf, m.suffix...)
					}
					ch = string(ws.buf)
				}
				i += n
				id, ok = m.vocab[ch]
			}
			if ok {
				if unkPending {
					add(m.unk)
					unkPending = false
				}
				add(id)
				continue
			}
			if m.byteFallback && m.allFallback(ch) {
				for k := 0; k < len(ch); k++ {
					add(m.fallback[ch[k]])
				}
				continue
			}
			if m.hasUnk {
				if unkPending && !m.fuseUnk {
					add(m.unk)
				}
				unkPending = true
			} else if m.unkMissing != "" {
				panic(encodeError{fmt.Errorf("tokenize: %q needs the unk_token %q, which is not in the vocab", ch, m.unkMissing)})
			}
		}
		if unkPending {
			add(m.unk)
		}
	}
	for i := range syms {
		syms[i].prev = int32(i - 1)
		syms[i].next = int32(i + 1)
		if i == len(syms)-1 {
			syms[i].next = -1
		}
	}
	return syms
}

func (m *bpe) allFallback(ch string) bool {
	for k := 0; k < len(ch); k++ {
		if !m.hasFallback[ch[k]] {
			return false
		}
	}
	return true
}

func (m *bpe) rule(a, b uint32) (mergeRule, bool) {
	return m.merges.get(pairKey(a, b))
}

// mergeScan merges a short word: repeatedly the lowest-ranked pair, the
// leftmost among equals, which is the order of the library's heap.
func (m *bpe) mergeScan(ws *wordScratch) {
	syms := ws.syms
	for i := range syms {
		syms[i].rank = noRank
		if n := syms[i].next; n >= 0 {
			if r, ok := m.rule(syms[i].id, syms[n].id); ok {
				syms[i].rank = r.rank
			}
		}
	}
	for len(syms) > 1 {
		best, bestRank := int32(-1), noRank
		for i := int32(0); i >= 0; i = syms[i].next {
			if syms[i].rank < bestRank {
				best, bestRank = i, syms[i].rank
			}
		}
		if best < 0 {
			break
		}
		right := syms[best].next
		r, _ := m.rule(syms[best].id, syms[right].id)
		syms[best].id = r.newID
		syms[best].next = syms[right].next
		if nn := syms[right].next; nn >= 0 {
			syms[nn].prev = best
		}
		syms[right].dead = true
		syms[best].rank = noRank
		if n := syms[best].next; n >= 0 {
			if r, ok := m.rule(syms[best].id, syms[n].id); ok {
				syms[best].rank = r.rank
			}
		}
		if p := syms[best].prev; p >= 0 {
			syms[p].rank = noRank
			if r, ok := m.rule(syms[p].id, syms[best].id); ok {
				syms[p].rank = r.rank
			}
		}
	}
}

type mergeItem struct {
	rank  uint32
	pos   int32
	newID uint32
}

func (a mergeItem) less(b mergeItem) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

// mergeHeap is the library's merge loop for long words: a min-heap of
// candidate merges by (rank, position), stale entries skipped.
func (m *bpe) mergeHeap(ws *wordScratch) {
	syms := ws.syms
	h := ws.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		ws.stop.tick()
		if r, ok := m.rule(syms[i].id, syms[i+1].id); ok {
			h.push(mergeItem{rank: r.rank, pos: int32(i), newID: r.newID})
		}
	}
	for len(h) > 0 {
		ws.stop.tick()
		top := h.pop()
		s := &syms[top.pos]
		if s.dead || s.next < 0 {
			continue
		}
		right := s.next
		if r, ok := m.rule(s.id, syms[right].id); !ok || r.newID != top.newID {
			continue
		}
		s.id = top.newID
		s.next = syms[right].next
		syms[right].dead = true
		if nn := s.next; nn >= 0 {
			syms[nn].prev = top.pos
		}
		if p := s.prev; p >= 0 {
			if r, ok := m.rule(syms[p].id, s.id); ok {
				h.push(mergeItem{rank: r.rank, pos: p, newID: r.newID})
			}
		}
		if n := s.next; n >= 0 {
			if r, ok := m.rule(s.id, syms[n].id); ok {
				h.push(mergeItem{rank: r.rank, pos: top.pos, newID: r.newID})
			}
		}
	}
	ws.heap = h
}

// mergeHeap is a binary min-heap of merge candidates.
type mergeHeap []mergeItem

func (h *mergeHeap) push(it mergeItem) {
	*h = append(*h, it)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].less(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeItem {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q = q[:last]
	for i := 0; ; {
		l, r, small := 2*i+1, 2*i+2, i
		if l < len(q) && q[l].less(q[small]) {
			small = l
		}
		if r < len(q) && q[r].less(q[small]) {
			small = r
		}
		if small == i {
			break
		}
		q[i], q[small] = q[small], q[i]
		i = small
	}
	*h = q
	return top
}

// wordCache remembers the encodings of recent words. It is bounded: a
// shard that fills up (in words or in bytes) is emptied.
type wordCache struct {
	shards [64]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]uint32
	// bytes is what the words and their ids hold (cacheEntryBytes each).
	bytes int
}

// cacheShardEntries and cacheShardBytes bound each shard: 262,144 words
// and 24 MiB in all. Clients choose the words, and their length (up to
// maxCachedWord) sets an entry's size, so the words alone would not bound
// the memory; words of natural text (under 100 bytes an entry) fill a
// shard's count before its bytes.
const (
	cacheShardEntries = 4096
	cacheShardBytes   = 384 << 10
)

// cacheEntryBytes is what one entry of w and ids holds: the bytes, the
// string and slice headers, and about as much again for the map's slot.
func cacheEntryBytes(w string, ids []uint32) int { return len(w) + 4*len(ids) + 64 }

func (c *wordCache) init() {
	for i := range c.shards {
		c.shards[i].m = make(map[string][]uint32)
	}
}

// shardOf spreads words over the shards by their ends and length: enough
// to keep two encodes off one lock, without hashing the word twice (the
// shard's map hashes it again).
func shardOf(w string) int {
	if w == "" {
		return 0
	}
	return int((uint(w[0])*131 + uint(w[len(w)-1])*31 + uint(len(w))) & 63)
}

func (c *wordCache) get(w string) ([]uint32, bool) {
	sh := &c.shards[shardOf(w)]
	sh.mu.RLock()
	ids, ok := sh.m[w]
	sh.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []uint32) {
	sh := &c.shards[shardOf(w)]
	cp := append([]uint32(nil), ids...)
	key := strings.Clone(w)
	size := cacheEntryBytes(key, cp)
	sh.mu.Lock()
	if len(sh.m) >= cacheShardEntries || sh.bytes+size > cacheShardBytes {
		clear(sh.m)
		sh.bytes = 0
	}
	if old, ok := sh.m[key]; ok {
		sh.bytes -= cacheEntryBytes(key, old)
	}
	sh.m[key] = cp
	sh.bytes += size
	sh.mu.Unlock()
}
