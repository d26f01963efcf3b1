package tokenize

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// MaxFileSize bounds the tokenizer.json Load accepts: 64 MiB, the same
// bound as any artifact the router fetches (artifact.MaxArtifactBytes).
const MaxFileSize = 64 << 20

type fileJSON struct {
	Version       string           `json:"version"`
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         *modelJSON       `json:"model"`
}

type addedTokenJSON struct {
	ID         *uint32 `json:"id"`
	Content    string  `json:"content"`
	SingleWord bool    `json:"single_word"`
	LStrip     bool    `json:"lstrip"`
	RStrip     bool    `json:"rstrip"`
	Normalized bool    `json:"normalized"`
	Special    bool    `json:"special"`
}

// UnmarshalJSON reads an added token, which must spell out every field:
// the library refuses a file whose added token lacks one.
func (a *addedTokenJSON) UnmarshalJSON(data []byte) error {
	var raw struct {
		ID         *uint32 `json:"id"`
		Content    *string `json:"content"`
		SingleWord *bool   `json:"single_word"`
		LStrip     *bool   `json:"lstrip"`
		RStrip     *bool   `json:"rstrip"`
		Normalized *bool   `json:"normalized"`
		Special    *bool   `json:"special"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if raw.Content == nil {
		return fmt.Errorf("tokenize: an added token lacks \"content\"")
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"id", raw.ID != nil}, {"single_word", raw.SingleWord != nil}, {"lstrip", raw.LStrip != nil},
		{"rstrip", raw.RStrip != nil}, {"normalized", raw.Normalized != nil}, {"special", raw.Special != nil},
	} {
		if !f.set {
			return fmt.Errorf("tokenize: added token %q lacks %q", *raw.Content, f.name)
		}
	}
	*a = addedTokenJSON{ID: raw.ID, Content: *raw.Content, SingleWord: *raw.SingleWord, LStrip: *raw.LStrip,
		RStrip: *raw.RStrip, Normalized: *raw.Normalized, Special: *raw.Special}
	return nil
}

// typed reads the "type" field of a component.
type typed struct {
	Type string `json:"type"`
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// Load parses a tokenizer.json. Features it does not implement (a model
// other than BPE, a normalizer, pre-tokenizer or post-processor it does not
// know, dropout) are errors naming the feature.
func Load(data []byte) (tk *Tokenizer, err error) {
	defer func() {
		if r := recover(); r != nil {
			re, ok := r.(encodeError)
			if !ok {
				panic(r)
			}
			tk, err = nil, re.err
		}
	}()
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("tokenize: tokenizer.json is %d bytes, more than the %d allowed", len(data), MaxFileSize)
	}
	// The model is decoded with the rest, in one pass over the file (its
	// vocabulary and merges are kept raw for the hand-written readers).
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenize: parse tokenizer.json: %w", err)
	}
	if f.Model == nil {
		return nil, fmt.Errorf("tokenize: tokenizer.json has no model")
	}
	t := &Tokenizer{segs: newSegCache()}
	if t.trunc, err = parseTruncation(f.Truncation); err != nil {
		return nil, err
	}
	if t.pad, err = parsePadding(f.Padding); err != nil {
		return nil, err
	}
	if t.normalizer, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	byteLevel := false
	if t.pre, byteLevel, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	for _, st := range t.pre {
		if bm, ok := st.(byteLevelMapped); ok {
			st = bm.inner
		}
		if m, ok := st.(metaspacePre); ok && m.scheme == "first" {
			t.firstOnly = true
		}
	}
	if byteLevel && mapsToByteLevel(t.normalizer) {
		// The pre-tokenizer would map the alphabet's characters again.
		return nil, unsupported("ByteLevel normalizer with a ByteLevel pre-tokenizer")
	}
	if t.model, err = parseModel(f.Model, byteLevel); err != nil {
		return nil, err
	}
	assignAddedIDs(f.AddedTokens, t.model)
	if t.added, err = newAddedVocab(f.AddedTokens, t.normalizer); err != nil {
		return nil, err
	}
	if t.post, err = parsePostProcessor(f.PostProcessor, t); err != nil {
		return nil, err
	}
	t.idToToken = make(map[uint32]string, t.model.size()+len(f.AddedTokens))
	t.model.eachToken(func(id uint32, s string) { t.idToToken[id] = s })
	for _, a := range f.AddedTokens {
		if a.ID != nil {
			t.idToToken[*a.ID] = a.Content
		}
	}
	return t, nil
}

// assignAddedIDs gives the added tokens the ids the library gives them when
// it loads a file, whatever ids the file writes (they agree for files the
// library wrote): a token the vocab holds has the vocab's id; a content seen
// before keeps its id; any other takes the next id after the highest added
// id, or the vocab's size if that is higher.
func assignAddedIDs(toks []addedTokenJSON, vocab model) {
	vocabSize := uint32(vocab.size())
	seen := make(map[string]uint32, len(toks))
	var maxID uint32
	haveMax := false
	for i := range toks {
		a := &toks[i]
		if a.Content == "" {
			continue
		}
		id, ok := seen[a.Content]
		if !ok {
			id, ok = vocab.tokenID(a.Content)
		}
		if !ok {
			id = vocabSize
			if haveMax && (maxID >= vocabSize || vocabSize == 0) {
				id = maxID + 1
			}
		}
		a.ID = &id
		seen[a.Content] = id
		if !haveMax || id > maxID {
			maxID, haveMax = id, true
		}
	}
}
