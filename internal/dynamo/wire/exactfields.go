package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
)

// unmarshalFields decodes the JSON object b into dst, a pointer to a struct
// of json.RawMessage fields, matching the fields' names exactly. Dynamo's
// records are read by a case-sensitive decoder there, where a key that
// differs from a field's name only in case is an unknown field and
// ignored; encoding/json would take it for the field. The common record
// has no such key and is decoded once; one that has is decoded again
// through a map of its exact keys.
func unmarshalFields(b []byte, dst any) error {
	if err := json.Unmarshal(b, dst); err != nil {
		return err
	}
	// null decodes into a struct without error, but it is no object: a
	// record or card of null names nothing, as Dynamo's decoder says too.
	if isNull(b) {
		return errNotObject
	}
	v := reflect.ValueOf(dst).Elem()
	names := fieldNames(v.Type())
	if exactKeys(b, names) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	v.SetZero()
	for i, n := range names {
		if raw, ok := m[n]; ok {
			v.Field(i).SetBytes(raw)
		}
	}
	return nil
}

// errNotObject is the error for null where an object belongs.
var errNotObject = errors.New("null is not an object")

var fieldNameCache sync.Map // reflect.Type -> []string

// fieldNames are the JSON names of t's fields, in field order.
func fieldNames(t reflect.Type) []string {
	if names, ok := fieldNameCache.Load(t); ok {
		return names.([]string)
	}
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	fieldNameCache.Store(t, names)
	return names
}

// exactKeys reports whether no top-level key of b, valid JSON, is one of
// names in another case (which encoding/json would match to it). b that
// is not an object has no keys.
func exactKeys(b []byte, names []string) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return true
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		end, escaped := stringEnd(b, i)
		if raw := b[i+1 : end-1]; escaped || foldable(raw) {
			key := string(raw)
			if escaped {
				_ = json.Unmarshal(b[i:end], &key)
			}
			for _, n := range names {
				if key != n && strings.EqualFold(key, n) {
					return false
				}
			}
		}
		i = skipSpace(b, end) // at ':'
		i = skipSpace(b, i+1) // at the value
		i = skipSpace(b, skipValue(b, i))
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return true
}

// foldable reports whether key could fold to a lower-case ASCII field
// name without being it: it holds an upper-case ASCII letter, or a
// non-ASCII byte (the Kelvin sign folds to "k", the long s to "s").
func foldable(key []byte) bool {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c >= 0x80 || 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// stringEnd returns the index after the JSON string that starts at b[i],
// and whether it holds an escape.
func stringEnd(b []byte, i int) (end int, escaped bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return len(b), escaped
}

// skipValue returns the index after the JSON value that starts at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		end, _ := stringEnd(b, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _ := stringEnd(b, j)
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\r' && b[i] != '\n' {
		i++
	}
	return i
}
