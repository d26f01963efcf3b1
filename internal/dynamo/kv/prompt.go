// Package kv holds the router's KV-cache view of a request. This file: the
// prompt pipeline — render a chat request with the model's pinned chat
// template, encode it with the pinned tokenizer exactly as the worker will,
// and hash its complete blocks as the worker's KV events do.
//
// Imports: wire, load, fleet, pick, artifact, zmtp, telemetry, tokenize,
// chattemplate and jsonscan.
package kv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/tokenize"
)

// Block sizes (tokens per block) the router computes XXH3-64 block hashes
// for: 16 to 65536, both included; any other size is ErrBlockSize.
const (
	MinBlockSize = 16
	MaxBlockSize = 65536
)

// ErrBlockSize is returned for a block size outside MinBlockSize..MaxBlockSize.
var ErrBlockSize = fmt.Errorf("block size outside %d..%d", MinBlockSize, MaxBlockSize)

// ErrNoTemplate is returned for a chat request when no template is loaded.
var ErrNoTemplate = errors.New("no chat template: a chat request needs the model's chat template")

// Preparer turns requests into token ids: the model's tokenizer and, for
// chat requests, its chat template. It is safe for concurrent use.
type Preparer struct {
	Tokenizer *tokenize.Tokenizer
	// Template renders chat requests; nil refuses them.
	Template *chattemplate.Template
	// ToolUse, when set, renders the chat requests that list tools
	// instead: a tokenizer config's template named tool_use, which
	// Dynamo's frontend renders such requests with.
	ToolUse *chattemplate.Template
	// KeepToolsWhenToolChoiceNone renders a request's tools even when its
	// tool_choice is "none" (the model's cards say
	// exclude_tools_when_tool_choice_none: false); by default they are
	// left out, as the frontend leaves them out.
	KeepToolsWhenToolChoiceNone bool
	// ContentArrays gives every text content as a list of one text part,
	// and joins no list of text parts: Dynamo's frontend does so for every
	// request when the default template requires it (see
	// RequiresContentArrays).
	ContentArrays bool
	// Media is how the default template marks media parts in a content
	// it renders only as text (see MediaPlaceholder); the zero value
	// leaves lists mixing text and media as they are.
	Media Media
	// SpecialTokens, when set, override the template's own (a chat
	// template file renders with the special tokens its model's tokenizer
	// config names).
	SpecialTokens map[string]string
}

// ErrNotText is returned for a completion request whose prompt is neither
// one text nor one list of token ids (a batch, or none).
var ErrNotText = errors.New("the prompt is not one text or one list of token ids")

// ChatRequest renders and encodes a chat completion request body as the
// router does for KV-aware selection, which is how Dynamo's frontend
// renders it (see chatInput): the ids of the rendered prompt, encoded
// without added special tokens, and the request's cache salt. Both steps
// run within ctx. The router and kv-inspect share this one path, so that
// what an operator computes by hand is what the router hashes.
func (p *Preparer) ChatRequest(ctx context.Context, body []byte) ([]uint32, string, error) {
	if p.Template == nil && p.ToolUse == nil {
		return nil, "", ErrNoTemplate
	}
	in, salt, err := chatInput(body, p.KeepToolsWhenToolChoiceNone, p.shape)
	if err != nil {
		return nil, "", fmt.Errorf("chat request: %w", err)
	}
	if p.SpecialTokens != nil {
		in.SpecialTokens = p.SpecialTokens
	}
	_, ids, err := p.Chat(ctx, in)
	return ids, salt, err
}

// CompletionRequest encodes a completion request body's prompt as the
// router does for KV-aware selection: the text as given, without added
// special tokens, within ctx; a list of token ids as it is (the frontend
// passes such a prompt to the engine untouched); and the request's cache
// salt (nvext.cache_salt, else cache_salt). A prompt that is neither is
// ErrNotText; a list of more than tokenize.MaxTokens ids is
// tokenize.ErrPromptTooLarge.
//
// A raw prompt is not held to a template's 1 MiB output bound: it is the
// client's text, and only its token count (and the tokenizer's own text
// bound) says whether it is too large.
func (p *Preparer) CompletionRequest(ctx context.Context, body []byte) ([]uint32, string, error) {
	top, err := requestObject(body)
	if err != nil {
		return nil, "", fmt.Errorf("completion request: %w", err)
	}
	salt, err := top.cacheSalt()
	if err != nil {
		return nil, "", fmt.Errorf("completion request: %w", err)
	}
	prompt, _ := top.get("prompt")
	prompt = BatchOfOne(prompt)
	if ids, ok, err := tokenIDs(prompt); ok {
		return ids, salt, err
	}
	var text string
	if bytes.Equal(prompt, jsonNull) || json.Unmarshal(prompt, &text) != nil {
		return nil, "", ErrNotText // none (absent or null), or not one string
	}
	ids, err := p.Tokenizer.EncodeContext(ctx, idsFor(text), text, false)
	return ids, salt, err
}

// BatchOfOne is the one prompt of a completion prompt that is a batch of
// one (["text"] or [[ids]]), which Dynamo's frontend serves as that prompt;
// prompt itself otherwise.
func BatchOfOne(prompt []byte) []byte {
	t := bytes.TrimLeft(prompt, " \t\r\n")
	if len(t) < 2 || t[0] != '[' {
		return prompt
	}
	if in := bytes.TrimLeft(t[1:], " \t\r\n"); len(in) == 0 || in[0] != '[' && in[0] != '"' {
		return prompt // a list of ids, or not a batch
	}
	var items []json.RawMessage
	if json.Unmarshal(t, &items) != nil || len(items) != 1 {
		return prompt
	}
	return items[0]
}

// tokenIDs reads a prompt that is one list of token ids (each an integer
// 0..2^32-1): ok is false for anything else (a text, a batch, ids out of
// range), which is then not read as ids.
func tokenIDs(prompt []byte) ([]uint32, bool, error) {
	prompt = bytes.TrimLeft(prompt, " \t\r\n")
	if len(prompt) == 0 || prompt[0] != '[' {
		return nil, false, nil
	}
	var ids []uint32
	if json.Unmarshal(prompt, &ids) != nil {
		return nil, false, nil // a batch, or not integers that fit
	}
	if len(ids) > tokenize.MaxTokens {
		return nil, true, tokenize.ErrPromptTooLarge
	}
	return ids, true, nil
}

// Chat renders a chat request and encodes the rendered prompt, both within
// ctx. The template places the special tokens itself, so none are added (as
// the frontend encodes a rendered prompt).
func (p *Preparer) Chat(ctx context.Context, in chattemplate.Input) (string, []uint32, error) {
	t := p.template(len(in.Tools) > 0)
	if t == nil {
		return "", nil, ErrNoTemplate
	}
	text, err := t.Render(ctx, in)
	if err != nil {
		return "", nil, err
	}
	ids, err := p.Tokenizer.EncodeContext(ctx, idsFor(text), text, false)
	return text, ids, err
}

// shape is what the template of a request with tools, or without, makes
// the frontend change in the request.
func (p *Preparer) shape(tools bool) requestShape {
	// A template that tests whether a tool call's arguments are a string
	// prints the client's string itself; Dynamo's frontend then leaves the
	// strings as they are, and parses them for every other template (which
	// would print an encoded string again).
	t := p.template(tools)
	return requestShape{contentArrays: p.ContentArrays, parseArgs: t != nil && !t.Mentions("arguments is string"),
		thinkInContent: t != nil && !t.Mentions("reasoning_content"), media: p.Media}
}

// template is the template a request with tools, or without, renders
// with.
func (p *Preparer) template(tools bool) *chattemplate.Template {
	if tools && p.ToolUse != nil {
		return p.ToolUse
	}
	return p.Template
}

// idsFor sizes the id slice for text once, rather than growing it by
// doubling: prompts run 3 to 5 bytes per token.
func idsFor(text string) []uint32 { return make([]uint32, 0, len(text)/3+16) }

// Text encodes a raw prompt.
func (p *Preparer) Text(text string, addSpecialTokens bool) ([]uint32, error) {
	return p.Tokenizer.EncodeAppend(idsFor(text), text, addSpecialTokens)
}

// ChatBlockHashes renders and encodes a chat request and returns only its
// block hashes: what KV-aware selection needs. The ids live in a pooled
// buffer, so a request allocates little beyond its render.
func (p *Preparer) ChatBlockHashes(ctx context.Context, in chattemplate.Input, blockSize int, seed uint64) ([]uint64, error) {
	if blockSize < MinBlockSize || blockSize > MaxBlockSize {
		return nil, fmt.Errorf("%w: %d", ErrBlockSize, blockSize)
	}
	if p.Template == nil {
		return nil, ErrNoTemplate
	}
	text, err := p.Template.Render(ctx, in)
	if err != nil {
		return nil, err
	}
	buf := idPool.Get().(*[]uint32)
	defer func() {
		if cap(*buf) <= maxPooledIDs {
			idPool.Put(buf)
		}
	}()
	ids, err := p.Tokenizer.EncodeContext(ctx, (*buf)[:0], text, false)
	*buf = ids
	if err != nil {
		return nil, err
	}
	return wire.LocalBlockHashes(ids, blockSize, seed), nil
}

// maxPooledIDs keeps buffers of huge prompts out of the pool.
const maxPooledIDs = 1 << 16

var idPool = sync.Pool{New: func() any { b := make([]uint32, 0, 8192); return &b }}

// BlockHashes returns the tokens_hash of every complete block of ids for a
// block size the router supports, with the seed of the request's LoRA
// adapter and cache salt (wire.BlockHashSeed).
func BlockHashes(ids []uint32, blockSize int, seed uint64) ([]uint64, error) {
	if blockSize < MinBlockSize || blockSize > MaxBlockSize {
		return nil, fmt.Errorf("%w: %d", ErrBlockSize, blockSize)
	}
	return wire.LocalBlockHashes(ids, blockSize, seed), nil
}
