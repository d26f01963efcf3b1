package tokenize

import (
	"fmt"
	"unicode/utf8"
)

// wordPiece is the WordPiece model (BERT and its kin): a word is cut,
// left to right, into the longest vocabulary pieces, every piece after the
// first spelled with the continuing-subword prefix; a word that cannot be
// cut entirely, or is longer than the character limit, is one unknown
// token.
type wordPiece struct {
	vocab    map[string]uint32
	unk      string
	prefix   string
	maxChars int
}

func parseWordPiece(j *modelJSON) (*wordPiece, error) {
	unk, err := requireString(j.UnkToken, "WordPiece", "unk_token")
	if err != nil {
		return nil, err
	}
	prefix, err := requireString(j.ContinuingSubwordPrefix, "WordPiece", "continuing_subword_prefix")
	if err != nil {
		return nil, err
	}
	if j.MaxInputCharsPerWord == nil {
		return nil, fmt.Errorf("tokenize: WordPiece model: missing field %q", "max_input_chars_per_word")
	}
	if *j.MaxInputCharsPerWord < 0 {
		return nil, fmt.Errorf("tokenize: WordPiece model: max_input_chars_per_word %d is negative", *j.MaxInputCharsPerWord)
	}
	if j.Vocab == nil {
		return nil, fmt.Errorf("tokenize: WordPiece model: missing field %q", "vocab")
	}
	vocab, err := readVocab(j.Vocab)
	if err != nil {
		return nil, fmt.Errorf("tokenize: WordPiece vocab: %w", err)
	}
	if err := checkIDs(vocab); err != nil {
		return nil, err
	}
	maxChars := int(min(*j.MaxInputCharsPerWord, MaxTextBytes+1))
	return &wordPiece{vocab: vocab, unk: unk, prefix: prefix, maxChars: maxChars}, nil
}

func (m *wordPiece) encodeWord(dst []uint32, w string, ws *wordScratch) []uint32 {
	if utf8.RuneCountInString(w) > m.maxChars {
		return m.unknown(dst)
	}
	start0 := len(dst)
	for start := 0; start < len(w); {
		found := false
		for end := len(w); start < end; {
			ws.stop.tick()
			var id uint32
			var ok bool
			if start == 0 {
				id, ok = m.vocab[w[:end]]
			} else {
				ws.buf = append(append(ws.buf[:0], m.prefix...), w[start:end]...)
				id, ok = m.vocab[string(ws.buf)]
			}
			if ok {
				dst = append(dst, id)
				start, found = end, true
				break
			}
			_, n := utf8.DecodeLastRuneInString(w[start:end])
			end -= n
		}
		if !found {
			return m.unknown(dst[:start0])
		}
	}
	return dst
}

func (m *wordPiece) unknown(dst []uint32) []uint32 {
	id, ok := m.vocab[m.unk]
	if !ok {
		panic(encodeError{fmt.Errorf("tokenize: a word needs the unk_token %q, which is not in the vocab", m.unk)})
	}
	return append(dst, id)
}

func (m *wordPiece) tokenID(tok string) (uint32, bool) {
	id, ok := m.vocab[tok]
	return id, ok
}

func (m *wordPiece) size() int { return len(m.vocab) }

func (m *wordPiece) eachToken(f func(uint32, string)) {
	for s, id := range m.vocab {
		f(id, s)
	}
}

// wordLevel is the WordLevel model: a word is its vocabulary id, or the
// unknown token's.
type wordLevel struct {
	vocab map[string]uint32
	unk   string
}

func parseWordLevel(j *modelJSON) (*wordLevel, error) {
	unk, err := requireString(j.UnkToken, "WordLevel", "unk_token")
	if err != nil {
		return nil, err
	}
	if j.Vocab == nil {
		return nil, fmt.Errorf("tokenize: WordLevel model: missing field %q", "vocab")
	}
	vocab, err := readVocab(j.Vocab)
	if err != nil {
		return nil, fmt.Errorf("tokenize: WordLevel vocab: %w", err)
	}
	if err := checkIDs(vocab); err != nil {
		return nil, err
	}
	return &wordLevel{vocab: vocab, unk: unk}, nil
}

func (m *wordLevel) encodeWord(dst []uint32, w string, _ *wordScratch) []uint32 {
	if id, ok := m.vocab[w]; ok {
		return append(dst, id)
	}
	id, ok := m.vocab[m.unk]
	if !ok {
		panic(encodeError{fmt.Errorf("tokenize: %q needs the unk_token %q, which is not in the vocab", w, m.unk)})
	}
	return append(dst, id)
}

func (m *wordLevel) tokenID(tok string) (uint32, bool) {
	id, ok := m.vocab[tok]
	return id, ok
}

func (m *wordLevel) size() int { return len(m.vocab) }

func (m *wordLevel) eachToken(f func(uint32, string)) {
	for s, id := range m.vocab {
		f(id, s)
	}
}
