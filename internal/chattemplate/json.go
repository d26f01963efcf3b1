package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
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
	newline := func(l int) {
		if hasIndent {
			b.WriteByte('\n')
			for range l {
				b.WriteString(indent)
			}
		}
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
	case float64:
		switch {
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
			newline(level + 1)
			if err := writeJSON(b, it, indent, hasIndent, itemSep, keySep, sortKeys, level+1, r); err != nil {
				return err
			}
		}
		newline(level)
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
			newline(level + 1)
			switch k := x.keys[i].(type) {
			case string:
				jsonString(b, k)
			case nil:
				b.WriteString(`"null"`)
			case bool, int64, float64:
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
		newline(level)
		b.WriteByte('}')
	case *Namespace:
		return errors.New("object of type Namespace is not JSON serializable")
	case undefined:
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

// MaxJSONDepth bounds the nesting DecodeJSON accepts.
const MaxJSONDepth = maxNesting

// DecodeJSON decodes one JSON value keeping the key order of objects (as
// *Dict), integers as int64 and other numbers as float64, as Python's json
// module does. Use it for request bodies whose objects reach tojson.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("json: trailing data after the value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > MaxJSONDepth {
		return nil, errors.New("json: nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("json: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := &Dict{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("json: %w", err)
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("json: object key is not a string")
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.Set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("json: %w", err)
			}
			return d, nil
		case '[':
			l := &List{Items: []any{}}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l.Items = append(l.Items, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("json: %w", err)
			}
			return l, nil
		}
		return nil, fmt.Errorf("json: unexpected %v", t)
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return i, nil
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("json: number %s: %w", s, err)
		}
		return f, nil
	case string, bool, nil:
		return t, nil
	}
	return nil, fmt.Errorf("json: unexpected token %v", tok)
}
