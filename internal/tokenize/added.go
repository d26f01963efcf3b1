package tokenize

import (
	"fmt"
	"sort"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of added_tokens.
type addedToken struct {
	id         uint32
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
}

// addedVocab finds added tokens in text: the non-normalized ones in the raw
// text, the normalized ones (their content normalized too) in the normalized
// text, each leftmost-longest, as the library's Aho-Corasick matcher does.
type addedVocab struct {
	raw       *trie
	norm      *trie
	byContent map[string]uint32
}

// trie is a byte trie over token contents; node 0 is the root.
type trie struct {
	nodes []trieNode
	first [256]bool
	toks  []addedToken
}

type trieNode struct {
	edges []trieEdge // sorted by b
	tok   int32      // index into toks + 1; 0: no token ends here
}

type trieEdge struct {
	b    byte
	next int32
}

func (tr *trie) insert(content string, tok addedToken) {
	n := int32(0)
	for i := 0; i < len(content); i++ {
		b := content[i]
		edges := tr.nodes[n].edges
		j := sort.Search(len(edges), func(k int) bool { return edges[k].b >= b })
		if j < len(edges) && edges[j].b == b {
			n = edges[j].next
			continue
		}
		tr.nodes = append(tr.nodes, trieNode{})
		next := int32(len(tr.nodes) - 1)
		edges = append(edges, trieEdge{})
		copy(edges[j+1:], edges[j:])
		edges[j] = trieEdge{b: b, next: next}
		tr.nodes[n].edges = edges
		n = next
	}
	// The first token with a (normalized) content wins. Two contents the
	// normalizer makes alike are one the library picks between from run
	// to run (it builds its matcher from a hash map), so any pick is one
	// of its own.
	if tr.nodes[n].tok == 0 {
		tr.toks = append(tr.toks, tok)
		tr.nodes[n].tok = int32(len(tr.toks))
	}
	tr.first[content[0]] = true
}

// longest returns the longest token starting at s[i:] (index into toks) and
// its end, or -1.
func (tr *trie) longest(s string, i int) (int, int) {
	best, end := -1, -1
	n := int32(0)
	for j := i; j < len(s); j++ {
		edges := tr.nodes[n].edges
		b := s[j]
		lo, hi := 0, len(edges)
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if edges[m].b < b {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if lo == len(edges) || edges[lo].b != b {
			break
		}
		n = edges[lo].next
		if t := tr.nodes[n].tok; t != 0 {
			best, end = int(t-1), j+1
		}
	}
	return best, end
}

func newAddedVocab(toks []addedTokenJSON, norm normalizer) (*addedVocab, error) {
	av := &addedVocab{
		raw:       &trie{nodes: []trieNode{{}}},
		norm:      &trie{nodes: []trieNode{{}}},
		byContent: make(map[string]uint32, len(toks)),
	}
	// The library keeps one token per content: a later entry with the
	// content of an earlier one replaces it, flags and all (normalized,
	// lstrip, rstrip, single_word), and keeps its id (assignAddedIDs gave
	// both the same), so only the last entry of each content is matched.
	last := make(map[string]int, len(toks))
	for i, a := range toks {
		last[a.Content] = i
	}
	for i, a := range toks {
		if a.Content == "" {
			continue
		}
		if a.ID == nil {
			return nil, fmt.Errorf("tokenize: added_tokens[%d] %q has no id", i, a.Content)
		}
		if _, dup := av.byContent[a.Content]; !dup {
			av.byContent[a.Content] = *a.ID
		}
		if last[a.Content] != i {
			continue
		}
		tok := addedToken{id: *a.ID, content: a.Content, singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip}
		if !a.Normalized {
			av.raw.insert(a.Content, tok)
			continue
		}
		content := a.Content
		if norm != nil {
			content = norm.normalize(content)
		}
		if content == "" {
			// The library keeps the empty pattern, which matches at every
			// byte: it cuts all text into single bytes, and panics on a
			// multi-byte character. No worker serves such a file well.
			if a.Content != "" {
				return nil, unsupported("added token %q normalizes to empty text", a.Content)
			}
			continue
		}
		av.norm.insert(content, tok)
	}
	return av, nil
}

// split appends the segments of s to segs: added tokens (matched by the raw
// or the normalized trie) and the text between them. first says whether s
// starts the original text.
func (av *addedVocab) split(segs []segment, s string, raw, first bool) []segment {
	tr := av.norm
	if raw {
		tr = av.raw
	}
	if len(tr.toks) == 0 {
		return append(segs, segment{text: s, first: first})
	}
	startOffset := 0
	for i := 0; i < len(s); {
		if !tr.first[s[i]] {
			i++
			continue
		}
		k, stop := tr.longest(s, i)
		if k < 0 {
			i++
			continue
		}
		tok := &tr.toks[k]
		start := i
		i = stop // matches never overlap: the scan resumes after this one
		if tok.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.lstrip {
			start = max(spaceLeftmostAtEnd(s[:start]), startOffset)
		}
		if tok.rstrip {
			// The scan still resumes at the match's end, not after the
			// stripped space, as the library's matcher does: a token found
			// inside that space is emitted (and its span overlaps).
			stop += spaceRightmostAtStart(s[stop:])
		}
		if startOffset < start {
			segs = append(segs, segment{text: s[startOffset:start], first: first && startOffset == 0})
		}
		if start >= stop {
			// An earlier match's rstrip consumed this whole match (its
			// content is white space) and lstrip clamped its start to
			// that match's end: the library's split drops every empty
			// piece, this token with it. (start > stop, a match without
			// rstrip inside such space after an lstrip clamp, makes the
			// library panic; it gives no token here either.)
			startOffset = max(startOffset, stop)
			continue
		}
		segs = append(segs, segment{id: tok.id, isTok: true})
		startOffset = stop
	}
	if startOffset < len(s) {
		segs = append(segs, segment{text: s[startOffset:], first: first && startOffset == 0})
	}
	return segs
}

// isWordChar is the library's single_word test, the regex crate's \w
// (Alphabetic, marks, decimal digits, connector punctuation, joiners; not ²
// or ½): hfWord, measured through the Whitespace pre-tokenizer, whose \w is
// the same crate's.
func isWordChar(r rune) bool {
	if r < utf8.RuneSelf {
		return r == '_' || asciiClass[r]&(clL|clN) != 0
	}
	return unicode.Is(hfWord, r)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordChar(r)
}

// spaceLeftmostAtEnd returns where the whitespace at the end of s begins.
func spaceLeftmostAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= n
	}
	return i
}

// spaceRightmostAtStart returns the length of the whitespace s starts with.
func spaceRightmostAtStart(s string) int {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += n
	}
	return i
}
