package tokenize

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
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

// float reads a JSON number as a float64, rounded as the library reads it
// (see serdeFloat).
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
	f, err := serdeFloat(r.b[start:r.i])
	if err != nil {
		return 0, fmt.Errorf("offset %d: %w", start, err)
	}
	return f, nil
}

// serdeFloat converts a JSON number the way the library's JSON reader
// (serde_json without its float_roundtrip feature) does, which is not always
// the correctly rounded value strconv.ParseFloat gives: the decimal digits
// are gathered into a uint64 (digits past its range are dropped, those of
// the integer part adding one to the exponent each), the uint64 is
// converted to a float64, and that is multiplied or divided once by the
// power of ten of the exponent (divided by 1e308 first while the exponent is
// below -308). Both roundings can land one unit in the last place off
// ("-7.2298970222473145" reads as -7.229897022247315, about one score in
// six of a SentencePiece vocabulary is off), and Unigram sums and compares
// scores exactly: two cuts of a word that tie with correctly rounded scores
// can differ with the library's, or the other way round, and then the
// library keeps another cut. num is a valid JSON number (the file passed
// encoding/json).
func serdeFloat(num []byte) (float64, error) {
	const maxDiv10, maxMod10 = math.MaxUint64 / 10, math.MaxUint64 % 10
	i, neg := 0, false
	if i < len(num) && num[i] == '-' {
		neg, i = true, i+1
	}
	var sig uint64
	exp := 0
	// digits gathers the integer or the fraction digits; from the first
	// that does not fit on, the part's digits are dropped.
	digits := func(frac bool) {
		full := false
		for ; i < len(num) && num[i] >= '0' && num[i] <= '9'; i++ {
			d := uint64(num[i] - '0')
			full = full || sig > maxDiv10 || sig == maxDiv10 && d > maxMod10
			switch {
			case !full:
				sig = sig*10 + d
				if frac {
					exp--
				}
			case !frac:
				exp++ // a dropped integer digit still scales the number
			}
		}
	}
	digits(false)
	isFloat := false
	if i < len(num) && num[i] == '.' {
		i++
		isFloat = true
		digits(true)
	}
	if i < len(num) && (num[i] == 'e' || num[i] == 'E') {
		i++
		isFloat = true
		expNeg := false
		if i < len(num) && (num[i] == '+' || num[i] == '-') {
			expNeg, i = num[i] == '-', i+1
		}
		e := 0
		for ; i < len(num) && num[i] >= '0' && num[i] <= '9'; i++ {
			e = e*10 + int(num[i]-'0')
			if e > math.MaxInt32 {
				// An exponent past int32: zero, or out of range upwards.
				if sig != 0 && !expNeg {
					return 0, fmt.Errorf("number %s out of range", num)
				}
				if neg {
					return math.Copysign(0, -1), nil
				}
				return 0, nil
			}
		}
		if expNeg {
			e = -e
		}
		exp += e
	}
	f := float64(sig)
	if isFloat || exp != 0 {
		pow10 := serdePow10()
		for {
			if exp >= -308 && exp <= 308 {
				if exp >= 0 {
					f *= pow10[exp]
				} else {
					f /= pow10[-exp]
				}
				break
			}
			if f == 0 {
				break
			}
			if exp > 0 {
				return 0, fmt.Errorf("number %s out of range", num)
			}
			f /= 1e308
			exp += 308
		}
		if math.IsInf(f, 0) {
			return 0, fmt.Errorf("number %s out of range", num)
		}
	}
	if neg {
		f = -f
	}
	return f, nil
}

// serdePow10 is 1e0 ... 1e308, each correctly rounded (as Rust's literals
// are; math.Pow10 multiplies two table entries for some).
var serdePow10 = sync.OnceValue(func() *[309]float64 {
	var t [309]float64
	for n := range t {
		t[n], _ = strconv.ParseFloat("1e"+strconv.Itoa(n), 64)
	}
	return &t
})

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
