// Package pick chooses the workers a request is pinned to: the Picker
// contract the dispatcher calls, the round-robin picker, and the
// load-based picker with its in-flight ledger. Pickers are pure over the
// fleet snapshot, the load view, the request's facts and their own
// cursors and ledger: they do no I/O.
//
// Imports: fleet and load only.
package pick

import (
	"errors"
	"math"
	"time"
	"unicode"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// Selection reasons (continuum_dynamo_selection_total{role, reason}).
const (
	ReasonLoad            = "load"
	ReasonRoundRobinStale = "round_robin_stale"
	ReasonNoPrefillPool   = "no_prefill_pool"
	// ReasonKVAware: the KV-aware cost formula chose.
	ReasonKVAware = "kv_aware"
	// ReasonConditional: the decode worker prefills the request itself
	// (conditional disaggregation).
	ReasonConditional = "conditional_bypass"
)

// Roles of a selection.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// ErrNoWorkers: no worker of the request's model in any candidate namespace
// (or every one is excluded by the request).
var ErrNoWorkers = errors.New("no dynamo worker serves the model")

// ErrAllBusy: a busy threshold is set and every candidate of a phase that
// could take the request is busy.
var ErrAllBusy = errors.New("every dynamo worker of the model is busy")

// Request is what a picker knows of a request.
type Request struct {
	// Model is the Dynamo model name (after shim.model_map).
	Model string
	// Namespaces are the candidate namespaces: those whose shim pool has a
	// replica this request may use.
	Namespaces []string
	// EstPromptTokens is the estimated prompt size.
	EstPromptTokens int
	// BookTokens, when larger than EstPromptTokens, is the size the
	// dispatch is booked at in the in-flight ledger: a request picked
	// without a prompt size (by its model name alone) still occupies its
	// workers until it ends, so that a burst of them is spread.
	BookTokens int
	// Path is the endpoint (/v1/chat/completions, /v1/completions) and
	// Body the request as the frontend will receive it: what a picker that
	// renders the prompt reads. Pickers that do not, ignore them. A nil
	// Body asks for a pick by the model and load alone (a request whose
	// prompt the router does not render).
	Path string
	Body []byte
	// CacheSalt, when not empty, is the request's cache salt over the
	// body's: the client's x-tenant-id header, which Dynamo's frontend
	// takes as the salt of the request's blocks.
	CacheSalt string
	// Exclude lists workers the request must not be pinned to: those an
	// earlier attempt of it failed on because they were gone or refused.
	Exclude []fleet.WorkerID
	// Busy, when set, takes busy (worker, rank)s out of candidacy (see
	// BusyThreshold); a request whose every candidate of a phase is busy
	// fails with ErrAllBusy.
	Busy *BusyThreshold
}

// excluded reports whether the request excludes w.
func (r *Request) excluded(w *fleet.Worker) bool {
	for _, id := range r.Exclude {
		if id == w.ID {
			return true
		}
	}
	return false
}

// Target is one pinned (worker, dp rank).
type Target struct {
	Worker *fleet.Worker
	DPRank uint32
	// SendRank: the card declares data_parallel_size, so the rank header is
	// always sent (rank 0 included).
	SendRank bool
}

// Pin is a picker's decision.
type Pin struct {
	Namespace     string
	Decode        Target
	Prefill       *Target
	DecodeReason  string
	PrefillReason string // "" when no prefill selection was made
	// Bypass: the model has a prefill pool but the decode worker prefills
	// this request itself (conditional disaggregation): only the decode pin
	// is sent.
	Bypass bool
	// TokenIDs, when set, are the prompt's token ids as the frontend would
	// encode them, to send as nvext.token_data so that it skips its own
	// tokenization.
	TokenIDs []uint32
}

// Picker chooses the workers a request is pinned to. Implementations are
// safe for concurrent use.
type Picker interface {
	// Reserve picks for req in snap and records the dispatch as in flight,
	// in one step with respect to other Reserve calls, so that requests
	// arriving together see each other's load. It returns ErrNoWorkers
	// when no worker of the request's model is a candidate, and
	// ErrAllBusy when every candidate is busy (nothing is recorded).
	Reserve(snap *fleet.Snapshot, req Request, now time.Time) (Pin, Ticket, error)
	// Release ends a reserved dispatch (answered, refused, failed or
	// cancelled); it no longer counts as a possible stall.
	Release(t Ticket)
}

// EstimateTokens guesses a prompt's token count without a tokenizer: the
// larger of a character estimate (4 per token) and a word estimate (4
// tokens per 3 words).
func EstimateTokens(text string) int {
	chars := 0
	words := 0
	inWord := false
	for _, r := range text {
		chars++
		if unicode.IsSpace(r) {
			inWord = false
		} else if !inWord {
			inWord = true
			words++
		}
	}
	byChars := (chars + 3) / 4
	byWords := int(math.Ceil(float64(words) * 4 / 3))
	return max(byChars, byWords)
}
