// Package kv holds the router's KV-cache view of a request. This file: the
// prompt pipeline — render a chat request with the model's pinned chat
// template, encode it with the pinned tokenizer exactly as the worker will,
// and hash its complete blocks as the worker's KV events do.
//
// Imports: wire, load, fleet, pick, artifact, zmtp, telemetry, tokenize and
// chattemplate.
package kv

import (
	"context"
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
}

// Chat renders a chat request and encodes the rendered prompt, both within
// ctx. The template places the special tokens itself, so none are added (as
// the frontend encodes a rendered prompt).
func (p *Preparer) Chat(ctx context.Context, in chattemplate.Input) (string, []uint32, error) {
	if p.Template == nil {
		return "", nil, ErrNoTemplate
	}
	text, err := p.Template.Render(ctx, in)
	if err != nil {
		return "", nil, err
	}
	ids, err := p.Tokenizer.EncodeContext(ctx, idsFor(text), text, false)
	return text, ids, err
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
