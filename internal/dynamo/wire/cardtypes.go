package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// WorkerType is the role a card claims, whatever spelling wrote it.
type WorkerType string

// Worker types. Anything else parses as WorkerUnknown (no role claim).
const (
	WorkerUnknown    WorkerType = ""
	WorkerPrefill    WorkerType = "Prefill"
	WorkerDecode     WorkerType = "Decode"
	WorkerAggregated WorkerType = "Aggregated"
	WorkerEncode     WorkerType = "Encode"
)

// Worker type flags: Dynamo's worker type is a set of stages, and an
// aggregated worker is the prefill and decode stages together.
const (
	workerFlagPrefill = 1 << iota
	workerFlagDecode
	workerFlagEncode
)

// ParseWorkerType reads a card's worker_type string as every Dynamo
// revision writes it: the capitalised flag names of the bitflags derive
// ("Prefill", "Decode", "Encode", and "Prefill | Decode" for an aggregated
// worker), the lowercase names of later revisions ("prefill", "decode",
// "encode", "aggregated"), and anything between. The string is trimmed and
// split on "|"; each part, trimmed and compared without case, names a flag
// ("aggregated" is prefill and decode together), and the flags are joined.
//
// absent is true when the string is empty or blank: the card declares no
// worker type. Otherwise wt is the type the flags make, or WorkerUnknown
// with problem saying why: a part that names no flag, or encode joined
// with prefill or decode, which is no worker type (such a worker is never
// routed to as a prefill, decode or aggregated one).
func ParseWorkerType(s string) (wt WorkerType, absent bool, problem string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return WorkerUnknown, true, ""
	}
	flags := 0
	for part := range strings.SplitSeq(s, "|") {
		switch tok := strings.ToLower(strings.TrimSpace(part)); tok {
		case "prefill":
			flags |= workerFlagPrefill
		case "decode":
			flags |= workerFlagDecode
		case "encode":
			flags |= workerFlagEncode
		case "aggregated":
			flags |= workerFlagPrefill | workerFlagDecode
		case "":
			return WorkerUnknown, false, "an empty part between \"|\""
		default:
			return WorkerUnknown, false, fmt.Sprintf("unrecognised token %q", truncateToken(tok))
		}
	}
	switch flags {
	case workerFlagPrefill:
		return WorkerPrefill, false, ""
	case workerFlagDecode:
		return WorkerDecode, false, ""
	case workerFlagPrefill | workerFlagDecode:
		return WorkerAggregated, false, ""
	case workerFlagEncode:
		return WorkerEncode, false, ""
	}
	return WorkerUnknown, false, "encode joined with prefill or decode is not a worker type"
}

// maxTokenShown bounds a token quoted in a problem.
const maxTokenShown = 64

func truncateToken(s string) string {
	if len(s) > maxTokenShown {
		return strings.ToValidUTF8(s[:maxTokenShown], "") + "…"
	}
	return s
}

// ModelType is a card's model_type: the set of capabilities (endpoints) a
// model offers, as Dynamo's ModelType bitflags.
type ModelType uint64

// ModelType flags, with Dynamo's bit values.
const (
	ModelChat        ModelType = 1 << 0
	ModelCompletions ModelType = 1 << 1
	ModelEmbedding   ModelType = 1 << 2
	ModelTensorBased ModelType = 1 << 3
	// ModelPrefill marks a prefill worker's card in revisions that wrote no
	// worker_type.
	ModelPrefill  ModelType = 1 << 4
	ModelImages   ModelType = 1 << 5
	ModelAudios   ModelType = 1 << 6
	ModelVideos   ModelType = 1 << 7
	ModelRealtime ModelType = 1 << 8
)

var modelTypeNames = map[string]ModelType{
	"chat": ModelChat, "completions": ModelCompletions, "embedding": ModelEmbedding, "tensorbased": ModelTensorBased,
	"prefill": ModelPrefill, "images": ModelImages, "audios": ModelAudios, "videos": ModelVideos, "realtime": ModelRealtime,
}

// Has reports whether every flag of f is set in m.
func (m ModelType) Has(f ModelType) bool { return m&f == f }

// ParseModelType reads a card's model_type: a string of flag names joined
// by "|" ("Chat | Completions", "Prefill"; names compared without case,
// hexadecimal "0x…" parts as the bits they spell), or a bare integer
// bitmask. Names it does not know are ignored. ok is false for any other
// JSON value.
func ParseModelType(raw json.RawMessage) (m ModelType, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0, false
	}
	if raw[0] != '"' {
		n, err := strconv.ParseUint(string(raw), 10, 64)
		return ModelType(n), err == nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return 0, false
	}
	for part := range strings.SplitSeq(s, "|") {
		tok := strings.ToLower(strings.TrimSpace(part))
		if hex, isHex := strings.CutPrefix(tok, "0x"); isHex {
			if n, err := strconv.ParseUint(hex, 16, 64); err == nil {
				m |= ModelType(n)
			}
			continue
		}
		m |= modelTypeNames[tok]
	}
	return m, true
}
