// Package jsonscan finds the parts of JSON text without decoding it: where
// a value ends and which members an object has, as byte offsets into the
// text. Rewriting a request body this way keeps every byte the client sent
// that the rewrite does not concern, and costs a fraction of decoding the
// body again.
//
// It is for text already checked as JSON (its callers decode or validate
// the body first). On other bytes its offsets are meaningless, but they
// stay within the text and it never panics.
//
// Imports: none of the module's packages.
package jsonscan

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the index after the string that starts at b[i] == '"'
// (len(b) when it is not closed).
func SkipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// SkipValue returns the index after the value that starts at b[i].
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = SkipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	// A number, true, false or null.
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ':' &&
		b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}

// Member is one "key": value of an object: the key with its quotes at
// b[Key:KeyEnd], the value at b[Val:ValEnd].
type Member struct {
	Key, KeyEnd, Val, ValEnd int
}

// Members lists the members of the object that starts at b[i] == '{', in
// their order, and returns the index after its '}'.
func Members(b []byte, i int) ([]Member, int) {
	var ms []Member
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, i + 1
	}
	for i < len(b) {
		var m Member
		m.Key = i
		i = SkipString(b, i)
		m.KeyEnd = i
		i = SkipSpace(b, i)
		i = SkipSpace(b, min(i+1, len(b))) // the colon
		m.Val = i
		i = SkipValue(b, i)
		m.ValEnd = max(i, m.Val)
		ms = append(ms, m)
		i = SkipSpace(b, i)
		if i >= len(b) || b[i] == '}' {
			return ms, min(i+1, len(b))
		}
		i = SkipSpace(b, min(i+1, len(b))) // the comma
	}
	return ms, len(b)
}

// Items returns the values of the list that starts at b[i] == '[', in
// order, and the index after its ']'.
func Items(b []byte, i int) ([][]byte, int) {
	var items [][]byte
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return nil, i + 1
	}
	for i < len(b) {
		end := max(SkipValue(b, i), i)
		items = append(items, b[i:end])
		i = SkipSpace(b, end)
		if i >= len(b) || b[i] == ']' {
			return items, min(i+1, len(b))
		}
		i = SkipSpace(b, min(i+1, len(b))) // the comma
	}
	return items, len(b)
}

// KeyIs reports whether m's key, decoded, is want.
func (m Member) KeyIs(b []byte, want string) bool {
	raw := b[m.Key:m.KeyEnd]
	if plain(raw) {
		return string(raw[1:len(raw)-1]) == want // compared without a copy
	}
	s, _ := String(raw)
	return s == want
}

// Value returns m's value as its bytes.
func (m Member) Value(b []byte) []byte { return b[m.Val:m.ValEnd] }

// Get returns the value of the last member of ms whose key is key (the one
// decoders keep when an object repeats a key).
func Get(b []byte, ms []Member, key string) ([]byte, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].KeyIs(b, key) {
			return ms[i].Value(b), true
		}
	}
	return nil, false
}

// String decodes the JSON string raw (quotes included) as encoding/json
// does: invalid UTF-8 becomes U+FFFD. It reports false for anything that
// is not a string.
func String(raw []byte) (string, bool) {
	switch {
	case len(raw) == 0 || raw[0] != '"':
		return "", false // null decodes into a string without an error
	case plain(raw):
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

// plain: raw is a quoted string of valid UTF-8 without escapes, whose
// bytes are its text.
func plain(raw []byte) bool {
	return len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw)
}
