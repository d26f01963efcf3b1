package fleetsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// The frontend's prompt rules, as the simulated workers apply them before
// they look up their cache:
//
//   - a request carrying nvext.token_data is taken as those token ids;
//   - /v1/completions encodes its prompt text as it is (a list of token ids
//     is taken as it is);
//   - a chat request is rendered with the chat template: a content that is
//     a list of text parts becomes their texts joined by newlines, and the
//     generation prompt is added unless the last message is the
//     assistant's (the frontend decides it from the messages alone: a
//     client's add_generation_prompt, at the top or in
//     chat_template_kwargs, does not change it);
//   - special tokens are never added: the template places them;
//   - the block hashes take the seed of the request's cache salt
//     (nvext.cache_salt, else cache_salt; a non-empty x-tenant-id header
//     over both, which the caller applies).

// errNoPrompt: the request has no prompt the rules can render.
var errNoPrompt = errors.New("the request has no prompt to render")

// promptFields are the request fields the rules read besides the messages.
type promptFields struct {
	Prompt   json.RawMessage `json:"prompt"`
	Messages []struct {
		Role string `json:"role"`
	} `json:"messages"`
	CacheSalt string `json:"cache_salt"`
	Nvext     *struct {
		TokenData []uint32 `json:"token_data"`
		CacheSalt string   `json:"cache_salt"`
	} `json:"nvext"`
}

// batchOfOne is the one prompt of a completion prompt that is a batch of
// one (["text"] or [[ids]]), which the frontend serves as that prompt;
// prompt itself otherwise.
func batchOfOne(prompt json.RawMessage) json.RawMessage {
	var items []json.RawMessage
	if json.Unmarshal(prompt, &items) != nil || len(items) != 1 {
		return prompt
	}
	if t := bytes.TrimLeft(items[0], " \t\r\n"); len(t) > 0 && (t[0] == '[' || t[0] == '"') {
		return items[0]
	}
	return prompt
}

// encode returns a request's prompt token ids and the seed of its block
// hashes.
func (e *encoder) encode(path string, body []byte) ([]uint32, uint64, error) {
	var q promptFields
	if err := json.Unmarshal(body, &q); err != nil {
		return nil, 0, err
	}
	salt := q.CacheSalt
	if q.Nvext != nil && q.Nvext.CacheSalt != "" {
		salt = q.Nvext.CacheSalt
	}
	seed := wire.BlockHashSeed("", salt)
	if q.Nvext != nil && len(q.Nvext.TokenData) > 0 {
		return q.Nvext.TokenData, seed, nil
	}
	if path == "/v1/completions" {
		q.Prompt = batchOfOne(q.Prompt)
		var text string
		if json.Unmarshal(q.Prompt, &text) == nil {
			ids, err := e.tk.Encode(text, false)
			return ids, seed, err
		}
		var ids []uint32
		if json.Unmarshal(q.Prompt, &ids) == nil && len(ids) > 0 {
			return ids, seed, nil
		}
		return nil, seed, errNoPrompt
	}
	in, err := chattemplate.DecodeRequest(body)
	if err != nil {
		return nil, seed, err
	}
	if len(in.Messages) == 0 {
		return nil, seed, errNoPrompt
	}
	joinTextParts(in.Messages)
	in.AddGenerationPrompt = q.Messages[len(q.Messages)-1].Role != "assistant"
	in.ContinueFinalMessage = false
	ctx, cancel := context.WithTimeout(context.Background(), renderTimeout)
	defer cancel()
	text, err := e.tmpl.Render(ctx, in)
	if err != nil {
		return nil, seed, err
	}
	ids, err := e.tk.Encode(text, false)
	return ids, seed, err
}

// joinTextParts replaces each message content that is a list of text parts
// only by their texts joined by newlines.
func joinTextParts(messages []any) {
	for _, m := range messages {
		d, ok := m.(*chattemplate.Dict)
		if !ok {
			continue
		}
		c, _ := d.Get("content")
		parts, ok := c.(*chattemplate.List)
		if !ok || len(parts.Items) == 0 {
			continue
		}
		texts := make([]string, 0, len(parts.Items))
		all := true
		for _, p := range parts.Items {
			pd, ok := p.(*chattemplate.Dict)
			if !ok {
				all = false
				break
			}
			if ty, _ := pd.Get("type"); ty != "text" {
				all = false
				break
			}
			if t, ok := pd.Get("text"); ok {
				if s, ok := t.(string); ok {
					texts = append(texts, s)
				}
			}
		}
		if all {
			d.Set("content", strings.Join(texts, "\n"))
		}
	}
}

// fallbackIDs encodes the text of a request whose prompt the rules cannot
// render (a malformed or empty request): its messages' or prompt's text, one
// part a line, so that it still takes prefill time.
func (e *encoder) fallbackIDs(q *openAIRequest) []uint32 {
	ids, _ := e.tk.Encode(q.promptText(), false)
	return ids
}
