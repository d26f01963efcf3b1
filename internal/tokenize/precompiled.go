package tokenize

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rivo/uniseg"
)

// precompiled is the Precompiled normalizer: the normalization rules a
// SentencePiece model carries (its normalizer_spec.precompiled_charsmap,
// e.g. nmt_nfkc: NFKC plus the removal or blanking of control characters),
// applied as the library applies them.
//
// The charsmap is [u32 LE: the trie's size in bytes][the trie: size/4
// units, u32 LE][the replacement strings, each ended by a NUL byte]. The
// trie is a darts-clone double array over the UTF-8 bytes of the strings
// that have a replacement; a leaf's value is the byte offset of the
// replacement in the strings.
//
// The text is taken an extended grapheme cluster at a time. A cluster
// shorter than 6 bytes that the trie knows is replaced whole by the
// replacement of its shortest prefix the trie holds, so a mark after a
// mapped character goes with it ("ﬁ" plus U+0301 is "fi"); any other
// cluster is replaced a character at a time, each character the trie knows
// by its replacement, the others kept. (The library's rule, which follows
// what SentencePiece's own normalizer yields on the data sets it was checked
// against.)
//
// Where the library would panic on a charsmap it loaded (a trie index past
// the array, a replacement offset past the strings or inside a character),
// the lookup finds nothing and the character or cluster is kept as it is;
// a lookup also ends at its first (shortest) match, where the library goes
// on reading the trie for longer ones it never uses and could panic doing
// so. The library reads no charsmap of the models it was written for that
// way; the rules only keep a malformed file from crashing the encoder.
//
// Clusters are the library's (unicode-segmentation 1.13.3, Unicode 17.0):
// github.com/rivo/uniseg's (Unicode 15.0), extended by clusterEnd with the
// newer rules. The difference matters only where the whole-cluster rule
// sees it, in a cluster under 6 bytes whose first character has a
// replacement: "²" + U+0897 (a mark new in 16.0) is one cluster, "2";
// "क्" + "क़" + U+0301 is one cluster of 11 bytes (GB9c), so "क़" + U+0301
// is not a cluster of 5 that drops the mark.
type precompiled struct {
	trie []uint32
	// repl holds the replacement strings, each ended by a NUL byte.
	repl string
	// ascii[b] is the replacement of the one-byte cluster b (valid when
	// asciiHit[b]): most text is ASCII, and between two ASCII characters
	// there is always a cluster boundary but in "\r\n".
	ascii    [utf8.RuneSelf]string
	asciiHit [utf8.RuneSelf]bool
}

// errCharsmap is the library's one error for a charsmap it cannot read.
var errCharsmap = errors.New("cannot parse precompiled_charsmap")

func parsePrecompiled(raw json.RawMessage) (normalizer, error) {
	var p struct {
		Charsmap json.RawMessage `json:"precompiled_charsmap"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("tokenize: Precompiled normalizer: %w", err)
	}
	blob, err := decodeCharsmap(p.Charsmap)
	if err != nil {
		return nil, fmt.Errorf("tokenize: Precompiled normalizer: %w", err)
	}
	pc, err := newPrecompiled(blob)
	if err != nil {
		return nil, fmt.Errorf("tokenize: Precompiled normalizer: %w", err)
	}
	return pc, nil
}

// decodeCharsmap reads the precompiled_charsmap field as the library reads
// it: a JSON string (null or a missing field fail; so does any escape
// sequence in it, since the library borrows the string from the file),
// base64 of the standard alphabet with optional padding: no character
// outside the alphabet, no '=' but at the end and no more of them than
// complete the last group of four, no group of one symbol, and the unused
// bits of the last symbol zero.
func decodeCharsmap(raw json.RawMessage) ([]byte, error) {
	if isNull(raw) {
		return nil, errors.New("precompiled_charsmap is missing or null")
	}
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, errors.New("precompiled_charsmap is not a string")
	}
	s := string(raw[1 : len(raw)-1])
	if strings.IndexByte(s, '\\') >= 0 {
		return nil, errors.New("precompiled_charsmap has an escape sequence")
	}
	sym := strings.TrimRight(s, "=")
	pad := len(s) - len(sym)
	if i := strings.IndexFunc(sym, notBase64); i >= 0 {
		return nil, fmt.Errorf("precompiled_charsmap: invalid base64 byte %d at offset %d", sym[i], i)
	}
	if len(sym)%4 == 1 || pad > (4-len(sym)%4)%4 {
		return nil, errors.New("precompiled_charsmap: invalid base64 length or padding")
	}
	blob, err := base64.RawStdEncoding.Strict().DecodeString(sym)
	if err != nil {
		return nil, fmt.Errorf("precompiled_charsmap: %w", err)
	}
	return blob, nil
}

// notBase64 reports whether r is outside the standard base64 alphabet.
func notBase64(r rune) bool {
	return (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '+' && r != '/'
}

// newPrecompiled parses a decoded charsmap. The trie may be empty and its
// units need not make sense (the library loads such a charsmap too); the
// size must fit the data and the strings must be UTF-8.
func newPrecompiled(blob []byte) (*precompiled, error) {
	if len(blob) < 4 {
		return nil, errCharsmap
	}
	units := binary.LittleEndian.Uint32(blob) / 4
	rest := blob[4:]
	if uint64(units)*4 > uint64(len(rest)) {
		return nil, errCharsmap
	}
	p := &precompiled{trie: make([]uint32, units)}
	for i := range p.trie {
		p.trie[i] = binary.LittleEndian.Uint32(rest[4*i:])
	}
	// A size not a multiple of 4 leaves its last bytes to the strings, as
	// the library reads it.
	strs := rest[4*int(units):]
	if !utf8.Valid(strs) {
		return nil, errCharsmap
	}
	p.repl = string(strs)
	for b := range utf8.RuneSelf {
		p.ascii[b], p.asciiHit[b] = p.lookup(string(rune(b)))
	}
	return p, nil
}

// lookup returns the replacement of key's shortest prefix the trie holds.
// A NUL byte ends the key.
func (p *precompiled) lookup(key string) (string, bool) {
	t := p.trie
	if len(t) == 0 {
		return "", false
	}
	pos := unitOffset(t[0])
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c == 0 {
			return "", false
		}
		pos ^= uint32(c)
		if uint64(pos) >= uint64(len(t)) {
			return "", false
		}
		u := t[pos]
		// The label keeps bit 31, set in value units, so a value never
		// reads as a label.
		if u&(1<<31|0xFF) != uint32(c) {
			return "", false
		}
		pos ^= unitOffset(u)
		if u&(1<<8) != 0 {
			if uint64(pos) >= uint64(len(t)) {
				return "", false
			}
			return p.replacement(t[pos] & (1<<31 - 1))
		}
	}
	return "", false
}

// unitOffset is a unit's offset to its children: bits 10-31, shifted left
// 8 more when bit 9 is set.
func unitOffset(u uint32) uint32 {
	return (u >> 10) << ((u & (1 << 9)) >> 6)
}

// replacement is the string at off up to the next NUL (or the end); an
// offset past the strings or inside a character has none.
func (p *precompiled) replacement(off uint32) (string, bool) {
	if uint64(off) > uint64(len(p.repl)) {
		return "", false
	}
	s := p.repl[off:]
	if s != "" && !utf8.RuneStart(s[0]) {
		return "", false
	}
	if n := strings.IndexByte(s, 0); n >= 0 {
		s = s[:n]
	}
	return s, true
}

// normalizeLead keeps lead at least as it is: the library's Precompiled
// code hands the span of a character it removes to the character after it
// (it records no removal), so a removed first character leaves the text
// starting at 0.
func (p *precompiled) normalizeLead(s string, lead int) (string, int) {
	out := p.normalize(s)
	if lead == 0 || out == "" {
		return out, 0
	}
	return out, max(lead, utf8.RuneCountInString(p.normalize(s[:runesPrefix(s, lead)])))
}

func (p *precompiled) normalize(s string) string {
	var b strings.Builder
	// done is how much of s is in b: nothing is written until the first
	// change, and an unchanged text is returned as it is.
	done := 0
	state := -1
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf && (i+1 == len(s) || s[i+1] < utf8.RuneSelf && (c != '\r' || s[i+1] != '\n')) {
			state = -1
			if r := p.ascii[c]; p.asciiHit[c] && (len(r) != 1 || r[0] != c) {
				b.WriteString(s[done:i])
				b.WriteString(r)
				done = i + 1
			}
			i++
			continue
		}
		var cluster string
		cluster, _, _, state = uniseg.FirstGraphemeClusterInString(s[i:], state)
		if n := clusterEnd(s[i:], len(cluster)); n != len(cluster) {
			cluster, state = s[i:i+n], -1
		}
		if len(cluster) < 6 {
			if r, ok := p.lookup(cluster); ok {
				if r != cluster {
					b.WriteString(s[done:i])
					b.WriteString(r)
					done = i + len(cluster)
				}
				i += len(cluster)
				continue
			}
		}
		for len(cluster) > 0 {
			_, n := utf8.DecodeRuneInString(cluster)
			if r, ok := p.lookup(cluster[:n]); ok && r != cluster[:n] {
				b.WriteString(s[done:i])
				b.WriteString(r)
				done = i + n
			}
			i += n
			cluster = cluster[n:]
		}
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}
