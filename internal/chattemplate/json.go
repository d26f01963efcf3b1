package chattemplate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// writeJSON writes v as Python's json.dumps(v, ensure_ascii=False,
// indent=indent, separators=..., sort_keys=...) does, which is how
// transformers defines the tojson filter. indent < 0 means no indent.
func writeJSON(b *strings.Builder, v any, indent string, hasIndent bool, itemSep, keySep string, sortKeys bool, level int, r *renderer) error {
	if level > maxNesting {
		return errors.New("tojson: value nested too deeply")
	}
	if r != nil {
		if err := r.step(1); err != nil {
			return err
		}
		if b.Len() > r.maxOutput {
			return r.overflow()
		}
	}
	newline := func(l int) error {
		if !hasIndent {
			return nil
		}
		if r != nil && b.Len()+1+l*len(indent) > r.maxOutput {
			return r.overflow()
		}
		b.WriteByte('\n')
		for range l {
			b.WriteString(indent)
		}
		return nil
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case bigInt:
		b.WriteString(string(x))
	case float64:
		minijinja := r != nil && r.dynamo
		switch {
		case minijinja && (math.IsNaN(x) || math.IsInf(x, 0)):
			b.WriteString("null")
		case minijinja:
			b.WriteString(serdeFloat(x))
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloat(x))
		}
	case string:
		jsonString(b, x)
	case *List:
		if len(x.Items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range x.Items {
			if i > 0 {
				b.WriteString(itemSep)
			}
			if err := newline(level + 1); err != nil {
				return err
			}
			if err := writeJSON(b, it, indent, hasIndent, itemSep, keySep, sortKeys, level+1, r); err != nil {
				return err
			}
		}
		if err := newline(level); err != nil {
			return err
		}
		b.WriteByte(']')
	case *Dict:
		if x.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		order := make([]int, x.Len())
		for i := range order {
			order[i] = i
		}
		if sortKeys {
			var err error
			sortStable(order, func(i, j int) bool {
				c, e := compare(x.keys[i], x.keys[j])
				if e != nil {
					err = e
				}
				return c < 0
			})
			if err != nil {
				return err
			}
		}
		b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				b.WriteString(itemSep)
			}
			if err := newline(level + 1); err != nil {
				return err
			}
			switch k := x.keys[i].(type) {
			case string:
				jsonString(b, k)
			case nil:
				if r != nil && r.dynamo {
					return errors.New("key must be a string")
				}
				b.WriteString(`"null"`)
			case bool, int64, float64, bigInt:
				// A key is written as its value would be, in quotes
				// (serde_json's floats in the Dynamo mode, whose NaN and
				// infinities keep Python's names).
				if f, ok := k.(float64); ok && r != nil && r.dynamo && !math.IsNaN(f) && !math.IsInf(f, 0) {
					jsonString(b, serdeFloat(f))
					break
				}
				var kb strings.Builder
				if err := writeJSON(&kb, k, "", false, "", "", false, 0, nil); err != nil {
					return err
				}
				jsonString(b, kb.String())
			default:
				return fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			b.WriteString(keySep)
			if err := writeJSON(b, x.vals[i], indent, hasIndent, itemSep, keySep, sortKeys, level+1, r); err != nil {
				return err
			}
		}
		if err := newline(level); err != nil {
			return err
		}
		b.WriteByte('}')
	case *Namespace:
		if r != nil && r.dynamo {
			// A map to minijinja, its attributes in key order.
			return writeJSON(b, x.mjMap(), indent, hasIndent, itemSep, keySep, sortKeys, level, r)
		}
		return errors.New("object of type Namespace is not JSON serializable")
	case undefined:
		if r != nil && r.dynamo {
			b.WriteString("null")
			return nil
		}
		return errors.New("object of type Undefined is not JSON serializable")
	default:
		return fmt.Errorf("object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func sortStable(order []int, less func(i, j int) bool) {
	// insertion sort keeps it stable and dependency-free; dicts are small
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && less(order[j], order[j-1]); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
}

// jsonString writes s as Python's json with ensure_ascii=False: only ", \
// and control characters are escaped.
func jsonString(b *strings.Builder, s string) {
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b.WriteString(s[start:i])
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			fmt.Fprintf(b, `\u%04x`, c)
		}
		start = i + 1
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

// EncodeSerdeJSON writes a value DecodeJSON returned as Rust's serde_json
// writes it with to_string (as Dynamo's frontend turns JSON it holds as a
// value back into text): compact, keys in order, strings escaped only where
// JSON requires it, floats in serde's shortest form (100.0, 1e-7).
func EncodeSerdeJSON(v any) (string, error) {
	r := &renderer{ctx: context.Background(), fuel: math.MaxInt64, maxOutput: math.MaxInt, dynamo: true}
	var b strings.Builder
	err := writeJSON(&b, v, "", false, ",", ":", false, 0, r)
	return b.String(), err
}

// MaxJSONDepth bounds the nesting DecodeJSON accepts.
const MaxJSONDepth = maxNesting

// DecodeJSON decodes one JSON value keeping the key order of objects (as
// *Dict; a repeated key keeps its first place and its last value, as
// Python's json does), integers as int64 and other numbers as float64.
// Invalid UTF-8 bytes in strings become U+FFFD. Use it for request bodies
// whose objects reach tojson.
func DecodeJSON(data []byte) (any, error) {
	d := jsonDecoder{data: data}
	d.skipSpace()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.pos != len(d.data) {
		return nil, d.errorf("trailing data after the value")
	}
	return v, nil
}

type jsonDecoder struct {
	data []byte
	pos  int
}

func (d *jsonDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("json: offset %d: %s", d.pos, fmt.Sprintf(format, args...))
}

func (d *jsonDecoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *jsonDecoder) value(depth int) (any, error) {
	if depth > MaxJSONDepth {
		return nil, d.errorf("nested too deeply")
	}
	if d.pos >= len(d.data) {
		return nil, d.errorf("unexpected end of input")
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		d.pos++
		obj := &Dict{}
		d.skipSpace()
		if d.pos < len(d.data) && d.data[d.pos] == '}' {
			d.pos++
			return obj, nil
		}
		for {
			d.skipSpace()
			if d.pos >= len(d.data) || d.data[d.pos] != '"' {
				return nil, d.errorf("expected a string key")
			}
			k, err := d.str()
			if err != nil {
				return nil, err
			}
			d.skipSpace()
			if d.pos >= len(d.data) || d.data[d.pos] != ':' {
				return nil, d.errorf("expected ':'")
			}
			d.pos++
			d.skipSpace()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			obj.Set(k, v)
			d.skipSpace()
			if d.pos >= len(d.data) {
				return nil, d.errorf("unexpected end of input")
			}
			if d.data[d.pos] == ',' {
				d.pos++
				continue
			}
			if d.data[d.pos] == '}' {
				d.pos++
				return obj, nil
			}
			return nil, d.errorf("expected ',' or '}'")
		}
	case c == '[':
		d.pos++
		l := &List{Items: []any{}}
		d.skipSpace()
		if d.pos < len(d.data) && d.data[d.pos] == ']' {
			d.pos++
			return l, nil
		}
		for {
			d.skipSpace()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			l.Items = append(l.Items, v)
			d.skipSpace()
			if d.pos >= len(d.data) {
				return nil, d.errorf("unexpected end of input")
			}
			if d.data[d.pos] == ',' {
				d.pos++
				continue
			}
			if d.data[d.pos] == ']' {
				d.pos++
				return l, nil
			}
			return nil, d.errorf("expected ',' or ']'")
		}
	case c == '"':
		return d.str()
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []struct {
			text string
			v    any
		}{{"true", true}, {"false", false}, {"null", nil}} {
			if bytes.HasPrefix(d.data[d.pos:], []byte(lit.text)) {
				d.pos += len(lit.text)
				return lit.v, nil
			}
		}
		return nil, d.errorf("invalid literal")
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	}
	return nil, d.errorf("unexpected character %q", d.data[d.pos])
}

func (d *jsonDecoder) number() (any, error) {
	start := d.pos
	digits := func() int {
		n := 0
		for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	if d.data[d.pos] == '-' {
		d.pos++
	}
	intStart := d.pos
	if digits() == 0 {
		return nil, d.errorf("invalid number")
	}
	if d.data[intStart] == '0' && d.pos-intStart > 1 {
		return nil, d.errorf("invalid number (leading zero)")
	}
	isFloat := false
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		isFloat = true
		if digits() == 0 {
			return nil, d.errorf("invalid number")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		isFloat = true
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return nil, d.errorf("invalid number")
		}
	}
	text := string(d.data[start:d.pos])
	if !isFloat {
		i, err := strconv.ParseInt(text, 10, 64)
		if err == nil {
			return i, nil
		}
		return bigInt(text), nil
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, d.errorf("number %s: %v", text, err)
	}
	return f, nil
}

// str decodes a string at d.pos (on the opening quote).
func (d *jsonDecoder) str() (string, error) {
	d.pos++
	start := d.pos
	// Fast path: no escapes, valid UTF-8.
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		if c == '"' {
			s := d.data[start:d.pos]
			d.pos++
			if utf8.Valid(s) {
				return string(s), nil
			}
			d.pos = start
			return d.strSlow()
		}
		if c == '\\' || c < 0x20 {
			d.pos = start
			return d.strSlow()
		}
		d.pos++
	}
	return "", d.errorf("unterminated string")
}

func (d *jsonDecoder) strSlow() (string, error) {
	var b strings.Builder
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			return b.String(), nil
		case c < 0x20:
			return "", d.errorf("control character in string")
		case c == '\\':
			if d.pos+1 >= len(d.data) {
				return "", d.errorf("unterminated string")
			}
			e := d.data[d.pos+1]
			d.pos += 2
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return "", d.errorf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					if d.pos+1 < len(d.data) && d.data[d.pos] == '\\' && d.data[d.pos+1] == 'u' {
						save := d.pos
						d.pos += 2
						r2, ok := d.hex4()
						if !ok {
							return "", d.errorf("invalid \\u escape")
						}
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							b.WriteRune(dec)
							continue
						}
						d.pos = save
					}
					b.WriteRune(utf8.RuneError)
					continue
				}
				b.WriteRune(r)
			default:
				return "", d.errorf("invalid escape \\%c", e)
			}
		default:
			r, n := utf8.DecodeRune(d.data[d.pos:])
			if r == utf8.RuneError && n == 1 {
				b.WriteRune(utf8.RuneError)
			} else {
				b.Write(d.data[d.pos : d.pos+n])
			}
			d.pos += n
		}
	}
	return "", d.errorf("unterminated string")
}

func (d *jsonDecoder) hex4() (rune, bool) {
	if d.pos+4 > len(d.data) {
		return 0, false
	}
	var r rune
	for _, h := range d.data[d.pos : d.pos+4] {
		v, ok := hexVal(h)
		if !ok {
			return 0, false
		}
		r = r*16 + rune(v)
	}
	d.pos += 4
	return r, true
}

// serdeFloat writes a finite float as serde_json does (the ryu crate's
// shortest form): the shortest digits that read back to x, as a decimal
// when the decimal point falls within 16 digits of them and at most 5
// places before them (123.0, 1e15 as 1000000000000000.0, 0.00001), else
// as d.ddde±x without a plus sign or padding (1e16, 1.5e-7).
func serdeFloat(x float64) string {
	if x == 0 {
		if math.Signbit(x) {
			return "-0.0"
		}
		return "0.0"
	}
	var b strings.Builder
	if x < 0 {
		b.WriteByte('-')
		x = -x
	}
	// Shortest digits and the power of ten of the first one.
	e := strconv.FormatFloat(x, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	p, _ := strconv.Atoi(exp)
	n := len(digits)
	kk := p + 1 // the decimal point falls after kk digits
	switch {
	case kk >= n && kk <= 16:
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", kk-n))
		b.WriteString(".0")
	case kk > 0 && kk <= 16:
		b.WriteString(digits[:kk])
		b.WriteByte('.')
		b.WriteString(digits[kk:])
	case kk > -5 && kk <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -kk))
		b.WriteString(digits)
	default:
		b.WriteString(digits[:1])
		if n > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		b.WriteString(strconv.Itoa(kk - 1))
	}
	return b.String()
}
