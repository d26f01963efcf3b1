package tokenize

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Hand-rolled readers for the two big parts of a tokenizer.json, the vocab
// object and the merges array, which encoding/json decodes slowly through
// reflection. The input has already been validated as JSON by
// encoding/json; these still fail cleanly on anything unexpected.

type jsonReader struct {
	b []byte
	i int
}

func (r *jsonReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

func (r *jsonReader) expect(c byte) error {
	r.ws()
	if r.i >= len(r.b) || r.b[r.i] != c {
		return fmt.Errorf("offset %d: want %q", r.i, c)
	}
	r.i++
	return nil
}

// peek returns the next non-space byte (0 at the end).
func (r *jsonReader) peek() byte {
	r.ws()
	if r.i >= len(r.b) {
		return 0
	}
	return r.b[r.i]
}

// str reads a JSON string; escapes go through encoding/json.
func (r *jsonReader) str() (string, error) {
	if err := r.expect('"'); err != nil {
		return "", err
	}
	start := r.i
	escaped := false
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case '\\':
			escaped = true
			r.i += 2
			continue
		case '"':
			raw := r.b[start:r.i]
			r.i++
			if !escaped {
				return string(raw), nil
			}
			var s string
			if err := json.Unmarshal(r.b[start-1:r.i], &s); err != nil {
				return "", err
			}
			return s, nil
		}
		r.i++
	}
	return "", fmt.Errorf("offset %d: unterminated string", start)
}

func (r *jsonReader) uint() (uint32, error) {
	r.ws()
	start := r.i
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		r.i++
	}
	n, err := strconv.ParseUint(string(r.b[start:r.i]), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("offset %d: %w", start, err)
	}
	return uint32(n), nil
}

// readVocab reads {"token": id, ...}.
func readVocab(raw []byte) (map[string]uint32, error) {
	r := &jsonReader{b: raw}
	if err := r.expect('{'); err != nil {
		return nil, err
	}
	out := make(map[string]uint32, len(raw)/16)
	if r.peek() == '}' {
		return out, nil
	}
	for {
		k, err := r.str()
		if err != nil {
			return nil, err
		}
		if err := r.expect(':'); err != nil {
			return nil, err
		}
		v, err := r.uint()
		if err != nil {
			return nil, err
		}
		out[k] = v
		switch r.peek() {
		case ',':
			r.i++
		case '}':
			return out, nil
		default:
			return nil, fmt.Errorf("offset %d: want ',' or '}'", r.i)
		}
	}
}

// readMerges reads ["a b", ...] or [["a", "b"], ...].
func readMerges(raw []byte) ([][2]string, error) {
	r := &jsonReader{b: raw}
	if r.peek() == 'n' { // null
		return nil, nil
	}
	if err := r.expect('['); err != nil {
		return nil, err
	}
	var out [][2]string
	if r.peek() == ']' {
		return out, nil
	}
	for {
		var pair [2]string
		skip := false
		if r.peek() == '[' {
			r.i++
			a, err := r.str()
			if err != nil {
				return nil, err
			}
			if err := r.expect(','); err != nil {
				return nil, err
			}
			b, err := r.str()
			if err != nil {
				return nil, err
			}
			if err := r.expect(']'); err != nil {
				return nil, fmt.Errorf("merge [%q, %q, ...] is not a pair: %w", a, b, err)
			}
			pair = [2]string{a, b}
		} else {
			s, err := r.str()
			if err != nil {
				return nil, err
			}
			if strings.HasPrefix(s, "#version") {
				// A merges.txt header carried over: the library skips it
				// (the merges after it keep their ranks from 0).
				skip = true
			}
			sp := -1
			for k := 0; k < len(s); k++ {
				if s[k] == ' ' {
					if sp >= 0 {
						sp = -2
						break
					}
					sp = k
				}
			}
			if sp < 0 && !skip {
				return nil, fmt.Errorf("merge %q is not two tokens separated by one space", s)
			}
			if !skip {
				pair = [2]string{s[:sp], s[sp+1:]}
			}
		}
		if !skip {
			out = append(out, pair)
		}
		switch r.peek() {
		case ',':
			r.i++
		case ']':
			return out, nil
		default:
			return nil, fmt.Errorf("offset %d: want ',' or ']'", r.i)
		}
	}
}

// float reads a JSON number as a float64.
func (r *jsonReader) float() (float64, error) {
	r.ws()
	start := r.i
	for r.i < len(r.b) {
		switch c := r.b[r.i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			r.i++
			continue
		}
		break
	}
	f, err := strconv.ParseFloat(string(r.b[start:r.i]), 64)
	if err != nil {
		return 0, fmt.Errorf("offset %d: %w", start, err)
	}
	return f, nil
}

// readScoredVocab reads [["piece", score], ...].
func readScoredVocab(raw []byte) ([]scoredPiece, error) {
	r := &jsonReader{b: raw}
	if err := r.expect('['); err != nil {
		return nil, err
	}
	out := make([]scoredPiece, 0, len(raw)/24)
	if r.peek() == ']' {
		return out, nil
	}
	for {
		if err := r.expect('['); err != nil {
			return nil, err
		}
		s, err := r.str()
		if err != nil {
			return nil, err
		}
		if err := r.expect(','); err != nil {
			return nil, err
		}
		f, err := r.float()
		if err != nil {
			return nil, err
		}
		if err := r.expect(']'); err != nil {
			return nil, fmt.Errorf("piece [%q, %v, ...] is not a pair: %w", s, f, err)
		}
		out = append(out, scoredPiece{s: s, score: f})
		switch r.peek() {
		case ',':
			r.i++
		case ']':
			return out, nil
		default:
			return nil, fmt.Errorf("offset %d: want ',' or ']'", r.i)
		}
	}
}
