package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// decodeRequest decodes an inference request's body into q as
// decodeExact does, but for its raw members, which may share body's
// bytes (body must not change while q is used). A body of the common shape (an object whose field
// names are plain, a model name without escapes, stream a boolean,
// messages objects, no field twice) is read here in one pass with a
// handful of allocations; anything else, invalid JSON included, goes to
// decodeExact, whose errors the client then sees. encoding/json's
// reflection walks a large amount of code and type data for each body,
// which a router woken for each request meets with cold caches.
func decodeRequest(body []byte, q *request) error {
	if decodePlainRequest(body, q) {
		return nil
	}
	return decodeExact(body, q)
}

// errNotARequest is a body that is JSON but not an inference request.
var errNotARequest = errors.New("the body is not a valid request")

// decodeExact decodes body's members by their exact names, as the
// backends read them (serde, pydantic): encoding/json would take "MODEL"
// for model too, and the router would route by a name the backend never
// sees. A repeated member's last value counts.
func decodeExact(body []byte, q *request) error {
	*q = request{}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%w: it is not a JSON object", errNotARequest)
		}
		return fmt.Errorf("the body is not valid JSON: %w", err)
	}
	for _, f := range []struct {
		name, want string
		dst        any
	}{{"model", "a string", &q.Model}, {"stream", "a boolean", &q.Stream}, {"messages", "a list of objects", &q.Messages}} {
		if v, ok := members[f.name]; ok {
			if json.Unmarshal(v, f.dst) != nil {
				return fmt.Errorf("%w: %s must be %s", errNotARequest, f.name, f.want)
			}
		}
	}
	q.Prompt, q.Nvext = members["prompt"], members["nvext"]
	return nil
}

// maxPlainDepth bounds the nesting decodePlainRequest follows; a deeper
// body goes to json.Unmarshal.
const maxPlainDepth = 64

// decodePlainRequest decodes body into q when it has the common shape,
// reporting false (with q in any state) otherwise.
func decodePlainRequest(body []byte, q *request) bool {
	d := plainDecoder{b: body}
	d.space()
	if !d.byte('{') {
		return false
	}
	var seen [5]bool
	if !d.members(func(key []byte) bool {
		var i int
		switch string(key) {
		case "model":
			i = 0
		case "stream":
			i = 1
		case "messages":
			i = 2
		case "prompt":
			i = 3
		case "nvext":
			i = 4
		default:
			return d.skip(1) // "MODEL" too: names are matched exactly
		}
		if seen[i] {
			return false // the last one wins there: left to decodeExact
		}
		seen[i] = true
		switch i {
		case 0:
			return d.model(q)
		case 1:
			return d.stream(q)
		case 2:
			return d.messages(q)
		case 3:
			q.Prompt = d.raw(1)
			return q.Prompt != nil
		default:
			q.Nvext = d.raw(1)
			return q.Nvext != nil
		}
	}) {
		return false
	}
	d.space()
	return d.i == len(d.b)
}

// plainDecoder reads JSON from b at i. Its methods report false for what
// they do not read (malformed, or not plain).
type plainDecoder struct {
	b []byte
	i int
}

func (d *plainDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte reads c after white space.
func (d *plainDecoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *plainDecoder) peek() byte {
	d.space()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// seq reads the items of an object or array after its opening byte, up
// to close: item reads one, and they are separated by commas.
func (d *plainDecoder) seq(close byte, item func() bool) bool {
	if d.byte(close) {
		return true
	}
	for {
		if !item() {
			return false
		}
		if d.byte(close) {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

// members reads an object's members after its '{', calling member with
// each plain key (ASCII, no escapes; valid until the next read) with the
// decoder at its value.
func (d *plainDecoder) members(member func(key []byte) bool) bool {
	return d.seq('}', func() bool {
		key, ok := d.plainString()
		return ok && d.byte(':') && member(key)
	})
}

// plainString reads a string without escapes or bytes past ASCII.
func (d *plainDecoder) plainString() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// model reads the model: a string without escapes, of valid UTF-8 (which
// json.Unmarshal would keep as it is), or null.
func (d *plainDecoder) model(q *request) bool {
	if d.literal("null") {
		return true
	}
	if !d.byte('"') {
		return false
	}
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if !utf8.Valid(s) {
				return false
			}
			q.Model = string(s)
			return true
		case c == '\\' || c < 0x20:
			return false
		}
		d.i++
	}
	return false
}

func (d *plainDecoder) stream(q *request) bool {
	switch {
	case d.literal("true"):
		q.Stream = true
	case d.literal("false"):
		q.Stream = false
	case d.literal("null"):
	default:
		return false
	}
	return true
}

// messages reads an array of message objects (or null), keeping each
// one's content as it is written.
func (d *plainDecoder) messages(q *request) bool {
	if d.literal("null") {
		return true
	}
	if !d.byte('[') {
		return false
	}
	// An empty array is an empty slice, not nil, as json.Unmarshal leaves
	// it.
	q.Messages = make([]struct {
		Content json.RawMessage `json:"content"`
	}, 0)
	return d.seq(']', func() bool {
		if !d.byte('{') {
			return false
		}
		var content json.RawMessage
		seen := false
		if !d.members(func(key []byte) bool {
			if string(key) != "content" {
				if bytes.EqualFold(key, []byte("content")) {
					return false
				}
				return d.skip(2)
			}
			if seen {
				return false
			}
			seen = true
			content = d.raw(2)
			return content != nil
		}) {
			return false
		}
		q.Messages = append(q.Messages, struct {
			Content json.RawMessage `json:"content"`
		}{content})
		return true
	})
}

// raw reads any value and returns its bytes, nil when it is not valid.
// Unlike json.Unmarshal, which copies a RawMessage, the bytes are the
// body's own (capacity clipped, so that an append copies): nothing writes
// a request body once it is read (the router's rewrites of it make new
// ones), and a conversation's messages then cost no allocation each.
func (d *plainDecoder) raw(depth int) json.RawMessage {
	d.space()
	start := d.i
	if !d.skip(depth) {
		return nil
	}
	return json.RawMessage(d.b[start:d.i:d.i])
}

// skip reads one value of any kind, checking it as JSON.
func (d *plainDecoder) skip(depth int) bool {
	if depth > maxPlainDepth {
		return false
	}
	switch d.peek() {
	case '{':
		d.i++
		return d.seq('}', func() bool { return d.skipString() && d.byte(':') && d.skip(depth+1) })
	case '[':
		d.i++
		return d.seq(']', func() bool { return d.skip(depth + 1) })
	case '"':
		return d.skipString()
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	default:
		return d.number()
	}
}

// skipString reads a string, checking its escapes.
func (d *plainDecoder) skipString() bool {
	if !d.byte('"') {
		return false
	}
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			d.i++
			if d.i >= len(d.b) {
				return false
			}
			switch d.b[d.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if d.i+4 >= len(d.b) {
					return false
				}
				for _, h := range d.b[d.i+1 : d.i+5] {
					if !isHex(h) {
						return false
					}
				}
				d.i += 4
			default:
				return false
			}
		}
		d.i++
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number reads a JSON number.
func (d *plainDecoder) number() bool {
	b, i := d.b, d.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	}
	d.i = i
	return true
}

// literal reads word (true, false, null) after white space.
func (d *plainDecoder) literal(word string) bool {
	d.space()
	if len(d.b)-d.i >= len(word) && string(d.b[d.i:d.i+len(word)]) == word {
		d.i += len(word)
		return true
	}
	return false
}

// bodyProblem says what is wrong with a body encoding/json refused for a
// request type, in the request's own terms: the member at fault and the
// JSON type it must have ("max_tokens must be an integer, not a
// string"), rather than encoding/json's message, which names the
// router's Go types; the caller puts what the body should have been
// before it. param is the member's path ("" for the body as a whole).
func bodyProblem(err error) (param, message string) {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return "", "it is not valid JSON: " + se.Error()
		}
		return "", err.Error()
	}
	if te.Field == "" {
		return "", "it must be a JSON object, not " + jsonValueName(te.Value)
	}
	return te.Field, te.Field + " must be " + jsonTypeName(te.Type) + ", not " + jsonValueName(te.Value)
}

// jsonTypeName is the JSON type a Go type decodes from.
func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another type"
}

// jsonValueName names what encoding/json found ("string", "number",
// "number 1.5", "bool", "array", "object").
func jsonValueName(v string) string {
	switch {
	case v == "bool":
		return "a boolean"
	case v == "array" || v == "object":
		return "an " + v
	case strings.HasPrefix(v, "number "):
		return "the number " + strings.TrimPrefix(v, "number ")
	case v == "":
		return "that"
	}
	return "a " + v
}
