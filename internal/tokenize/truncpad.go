package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// truncation is a file's truncation setting, which the library applies to
// every encoding: the sequence (before the post-processor's special tokens)
// is cut to max_length less the special tokens the post-processor adds when
// they are asked for.
type truncation struct {
	maxLen     int
	left       bool // direction Left: the end of the sequence is kept
	onlySecond bool // strategy OnlySecond: a single sequence cannot be cut
}

// errSecondSequence is the library's error for an OnlySecond truncation of a
// single sequence that is too long.
var errSecondSequence = errors.New("tokenize: truncation error: second sequence not provided")

func parseTruncation(raw json.RawMessage) (*truncation, error) {
	if isNull(raw) {
		return nil, nil
	}
	var p struct {
		MaxLength *int    `json:"max_length"`
		Strategy  *string `json:"strategy"`
		Stride    *int    `json:"stride"`
		Direction *string `json:"direction"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("tokenize: truncation: %w", err)
	}
	// The library requires these three; direction defaults to Right. The
	// stride only shapes the overflowing parts, which an encoding here
	// does not return.
	switch {
	case p.MaxLength == nil:
		return nil, fmt.Errorf("tokenize: truncation lacks max_length")
	case p.Strategy == nil:
		return nil, fmt.Errorf("tokenize: truncation lacks strategy")
	case p.Stride == nil:
		return nil, fmt.Errorf("tokenize: truncation lacks stride")
	case *p.MaxLength < 0 || *p.Stride < 0:
		return nil, fmt.Errorf("tokenize: truncation max_length and stride must not be negative")
	}
	t := &truncation{maxLen: *p.MaxLength}
	switch *p.Strategy {
	case "LongestFirst", "OnlyFirst":
	case "OnlySecond":
		t.onlySecond = true
	default:
		return nil, fmt.Errorf("tokenize: truncation strategy %q", *p.Strategy)
	}
	if p.Direction != nil {
		switch *p.Direction {
		case "Right":
		case "Left":
			t.left = true
		default:
			return nil, fmt.Errorf("tokenize: truncation direction %q", *p.Direction)
		}
	}
	return t, nil
}

// apply cuts the sequence dst[seq:], given the number of special tokens
// the post-processor will add (0 when they are not asked for).
func (t *truncation) apply(dst []uint32, seq, added int) ([]uint32, error) {
	limit := t.maxLen
	if added > 0 {
		if limit < added {
			// The library subtracts in unsigned arithmetic, which wraps:
			// no token-level cut (Encode cuts whole words with
			// truncateWords, except for OnlySecond).
			return dst, nil
		}
		limit -= added
	}
	n := len(dst) - seq
	switch {
	case limit == 0:
		return dst[:seq], nil
	case n <= limit:
		return dst, nil
	case t.onlySecond:
		return dst, errSecondSequence
	case t.left:
		copy(dst[seq:], dst[len(dst)-limit:])
	}
	return dst[:seq+limit], nil
}

// truncateWords cuts the sequence dst[seq:] when max_length is below the
// number of special tokens the post-processor adds (strategy LongestFirst or
// OnlyFirst). The library's subtraction then wraps, so no token-level cut
// happens, but it has already stopped encoding whole words once max_length
// tokens were reached: from the start (Right) or the end (Left) it keeps
// added tokens and words up to and including the word that brings the
// model's tokens to max_length (at least one word). units lists the ends
// of the added tokens and model words of dst[seq:] in order.
func (t *truncation) truncateWords(dst []uint32, seq int, units []unit) []uint32 {
	count := 0
	if !t.left {
		start := seq
		for _, u := range units {
			if u.model {
				count += u.end - start
				if count >= t.maxLen {
					return dst[:u.end]
				}
			}
			start = u.end
		}
		return dst
	}
	for i := len(units) - 1; i >= 0; i-- {
		start := seq
		if i > 0 {
			start = units[i-1].end
		}
		if units[i].model {
			count += units[i].end - start
			if count >= t.maxLen {
				n := copy(dst[seq:], dst[start:])
				return dst[:seq+n]
			}
		}
	}
	return dst
}

// padding is a file's padding setting, which the library applies to every
// encoding, special tokens included: up to a fixed length, or (BatchLongest,
// a batch of one) to the encoding's own, either rounded up to a multiple.
type padding struct {
	fixed    int // -1: BatchLongest
	multiple int
	id       uint32
	left     bool
}

func parsePadding(raw json.RawMessage) (*padding, error) {
	if isNull(raw) {
		return nil, nil
	}
	var p struct {
		Strategy  json.RawMessage `json:"strategy"`
		Direction *string         `json:"direction"`
		Multiple  *int            `json:"pad_to_multiple_of"`
		PadID     *uint32         `json:"pad_id"`
		PadTypeID *uint32         `json:"pad_type_id"`
		PadToken  *string         `json:"pad_token"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("tokenize: padding: %w", err)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"strategy", !isNull(p.Strategy)}, {"direction", p.Direction != nil}, {"pad_id", p.PadID != nil},
		{"pad_type_id", p.PadTypeID != nil}, {"pad_token", p.PadToken != nil},
	} {
		if !f.set {
			return nil, fmt.Errorf("tokenize: padding lacks %s", f.name)
		}
	}
	pd := &padding{id: *p.PadID}
	var name string
	var fixed struct {
		Fixed *int `json:"Fixed"`
	}
	switch {
	case json.Unmarshal(p.Strategy, &name) == nil && name == "BatchLongest":
		pd.fixed = -1
	case json.Unmarshal(p.Strategy, &fixed) == nil && fixed.Fixed != nil && *fixed.Fixed >= 0:
		pd.fixed = *fixed.Fixed
	default:
		return nil, fmt.Errorf("tokenize: padding strategy %s", p.Strategy)
	}
	switch *p.Direction {
	case "Right":
	case "Left":
		pd.left = true
	default:
		return nil, fmt.Errorf("tokenize: padding direction %q", *p.Direction)
	}
	if p.Multiple != nil {
		if *p.Multiple < 0 {
			return nil, fmt.Errorf("tokenize: padding pad_to_multiple_of must not be negative")
		}
		pd.multiple = *p.Multiple
	}
	return pd, nil
}

// apply pads the encoding dst[base:]; a padded length past MaxTokens is
// ErrPromptTooLarge.
func (p *padding) apply(dst []uint32, base int) ([]uint32, error) {
	n := len(dst) - base
	target := p.fixed
	if target < 0 {
		target = n
	}
	if p.multiple > 0 && target%p.multiple > 0 {
		target += p.multiple - target%p.multiple
	}
	if n >= target {
		return dst, nil
	}
	if target > MaxTokens {
		return dst, ErrPromptTooLarge
	}
	pads := target - n
	dst = slices.Grow(dst, pads)
	if !p.left {
		for range pads {
			dst = append(dst, p.id)
		}
		return dst, nil
	}
	dst = dst[:len(dst)+pads]
	copy(dst[base+pads:], dst[base:base+n])
	for i := base; i < base+pads; i++ {
		dst[i] = p.id
	}
	return dst, nil
}
