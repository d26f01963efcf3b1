// Package pick chooses the workers a request is pinned to: the picker
// contract, the in-flight ledger, and the load-based picker of the design
// document (section 15, with the freshness rules of section 14).
package pick

import (
	"errors"
	"math"
	"strings"
	"unicode"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// Selection reasons (continuum_dynamo_selection_total{role, reason}).
const (
	ReasonLoad            = "load"
	ReasonRoundRobinStale = "round_robin_stale"
	ReasonNoPrefillPool   = "no_prefill_pool"
	ReasonKVAware         = "kv_aware"
	ReasonConditional     = "conditional_bypass"
)

// Roles of a selection.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// ErrNoWorkers: no worker of the request's model in any candidate namespace.
var ErrNoWorkers = errors.New("no dynamo worker serves the model")

// Request is what a picker knows of a request.
type Request struct {
	// Model is the Dynamo model name (after shim.model_map).
	Model string
	// Namespaces are the candidate namespaces: those whose shim pool has a
	// replica this request may use.
	Namespaces []string
	// EstPromptTokens is the estimated prompt size.
	EstPromptTokens int
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
}

// Picker chooses workers. Implementations are safe for concurrent use.
type Picker interface {
	Pick(snap *fleet.Snapshot, req Request) (Pin, error)
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

// EstimateMessages estimates the tokens of chat messages' text.
func EstimateMessages(parts []string) int {
	return EstimateTokens(strings.Join(parts, "\n"))
}
