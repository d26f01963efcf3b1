package tokenize

import (
	"encoding/json"
	"fmt"
)

// postProcessor adds special tokens around a single sequence (only asked
// when add_special_tokens is set).
type postProcessor interface {
	prefix(dst []uint32) []uint32
	suffix(dst []uint32) []uint32
	added() int // how many tokens prefix and suffix add
}

// template is a single-sequence template: ids before and after the sequence.
type template struct {
	pre, post []uint32
}

func (t template) prefix(dst []uint32) []uint32 { return append(dst, t.pre...) }
func (t template) suffix(dst []uint32) []uint32 { return append(dst, t.post...) }
func (t template) added() int                   { return len(t.pre) + len(t.post) }

func parsePostProcessor(raw json.RawMessage, tok *Tokenizer) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	t, err := parseTemplate(raw, tok)
	if err != nil {
		return nil, err
	}
	if len(t.pre) == 0 && len(t.post) == 0 {
		return nil, nil
	}
	return t, nil
}

func parseTemplate(raw json.RawMessage, tok *Tokenizer) (template, error) {
	var ty typed
	if err := json.Unmarshal(raw, &ty); err != nil {
		return template{}, fmt.Errorf("tokenize: post_processor: %w", err)
	}
	switch ty.Type {
	case "ByteLevel":
		return template{}, nil // offsets only
	case "Sequence":
		var p struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return template{}, fmt.Errorf("tokenize: Sequence post-processor: %w", err)
		}
		var out template
		for _, r := range p.Processors {
			if isNull(r) {
				continue
			}
			t, err := parseTemplate(r, tok)
			if err != nil {
				return template{}, err
			}
			// Each processor wraps the previous one's result.
			out = template{pre: append(append([]uint32(nil), t.pre...), out.pre...), post: append(out.post, t.post...)}
		}
		return out, nil
	case "TemplateProcessing":
		var p struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				ID  string   `json:"id"`
				IDs []uint32 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return template{}, fmt.Errorf("tokenize: TemplateProcessing: %w", err)
		}
		var out template
		seen := false
		for _, piece := range p.Single {
			switch {
			case piece.Sequence != nil:
				if seen {
					return template{}, unsupported("TemplateProcessing single template with the sequence twice")
				}
				seen = true
			case piece.SpecialToken != nil:
				st, ok := p.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return template{}, fmt.Errorf("tokenize: TemplateProcessing: special token %q not in special_tokens", piece.SpecialToken.ID)
				}
				if seen {
					out.post = append(out.post, st.IDs...)
				} else {
					out.pre = append(out.pre, st.IDs...)
				}
			default:
				return template{}, fmt.Errorf("tokenize: TemplateProcessing: a template piece is neither SpecialToken nor Sequence")
			}
		}
		if !seen {
			return template{}, unsupported("TemplateProcessing single template without the sequence")
		}
		return out, nil
	case "BertProcessing", "RobertaProcessing":
		var p struct {
			Sep [2]json.RawMessage `json:"sep"`
			Cls [2]json.RawMessage `json:"cls"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return template{}, fmt.Errorf("tokenize: %s: %w", ty.Type, err)
		}
		var cls, sep uint32
		if err := json.Unmarshal(p.Cls[1], &cls); err != nil {
			return template{}, fmt.Errorf("tokenize: %s cls: %w", ty.Type, err)
		}
		if err := json.Unmarshal(p.Sep[1], &sep); err != nil {
			return template{}, fmt.Errorf("tokenize: %s sep: %w", ty.Type, err)
		}
		return template{pre: []uint32{cls}, post: []uint32{sep}}, nil
	default:
		return template{}, unsupported("post-processor %q", ty.Type)
	}
}
