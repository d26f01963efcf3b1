package tokenize

import (
	"encoding/json"
	"fmt"
)

// model turns one pre-token into token ids: BPE, Unigram, WordPiece or
// WordLevel.
type model interface {
	// encodeWord appends the ids of one non-empty pre-token. A word the
	// model cannot encode (it needs an unknown token the file lacks)
	// panics with an encodeError, which Encode recovers.
	encodeWord(dst []uint32, w string, ws *wordScratch) []uint32
	// tokenID is the id of a vocabulary string as the file spells it.
	tokenID(tok string) (uint32, bool)
	// size is the vocabulary's size as the library counts it: added
	// tokens the vocabulary lacks are numbered from here.
	size() int
	// eachToken calls f with every id and the string the library names it by.
	eachToken(f func(id uint32, tok string))
}

// modelJSON holds the fields of every model type; which apply depends on
// Type.
type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	UnkID                   *int64          `json:"unk_id"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	MaxInputCharsPerWord    *int64          `json:"max_input_chars_per_word"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// parseModel builds the file's model. byteLevel says the pre-tokenizer
// ends with ByteLevel, whose pieces reach the model as raw bytes (see bpe).
func parseModel(j *modelJSON, byteLevel bool) (model, error) {
	var m model
	var err error
	switch legacyType(j) {
	case "BPE":
		return parseBPE(j, byteLevel)
	case "Unigram":
		m, err = parseUnigram(j)
	case "WordPiece":
		m, err = parseWordPiece(j)
	case "WordLevel":
		m, err = parseWordLevel(j)
	default:
		return nil, unsupported("model %q", j.Type)
	}
	if err != nil || !byteLevel {
		return m, err
	}
	return alphabetModel{m}, nil
}

// legacyType is the model's type, or for a file written before models
// named their type, the first the library's reader accepts, in its order:
// BPE (vocab and merges), WordPiece (unk_token, continuing_subword_prefix,
// max_input_chars_per_word), WordLevel (unk_token), else Unigram.
func legacyType(j *modelJSON) string {
	switch {
	case j.Type != "":
		return j.Type
	case j.Merges != nil:
		return "BPE"
	case j.UnkToken != nil && j.ContinuingSubwordPrefix != nil && j.MaxInputCharsPerWord != nil:
		return "WordPiece"
	case j.UnkToken != nil:
		return "WordLevel"
	}
	return "Unigram"
}

// alphabetModel gives a model that is not BPE the byte-level alphabet's
// spelling of each piece, as the library's ByteLevel pre-tokenizer leaves
// it (this package's leaves raw bytes, which only BPE reads directly).
type alphabetModel struct{ model }

func (a alphabetModel) encodeWord(dst []uint32, w string, ws *wordScratch) []uint32 {
	return a.model.encodeWord(dst, toByteLevel(w), ws)
}

// requireString returns a required string field of a model, as the
// library's deserializer refuses a file without it.
func requireString(p *string, modelType, field string) (string, error) {
	if p == nil {
		return "", fmt.Errorf("tokenize: %s model: missing field %q", modelType, field)
	}
	return *p, nil
}

// checkIDs refuses a vocabulary whose ids do not fit the id tables.
func checkIDs(vocab map[string]uint32) error {
	for tok, id := range vocab {
		if id >= maxTokenID {
			return fmt.Errorf("tokenize: token %q has id %d, more than %d", tok, id, maxTokenID)
		}
	}
	return nil
}
