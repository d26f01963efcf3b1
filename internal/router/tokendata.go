package router

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// clientNvextKeys are the nvext members a client may not send: its own
// tokens (token_data would skip the frontend's tokenization, and the
// guardrails on it), and the worker choices Dynamo's frontend takes from
// the body when no pin header overrides them (a client would otherwise
// pick its own decode or prefill worker or rank, or pair a prefill worker
// with an aggregated pin).
var clientNvextKeys = []string{"token_data", "backend_instance_id", "decode_worker_id", "prefill_worker_id", "dp_rank", "prefill_dp_rank"}

// queryInstanceAnnotation starts the nvext annotation with which an
// external router asks Dynamo's frontend for its own choice of worker
// (and the prompt's tokens) instead of an answer; the router is that
// external router, so a client's such annotation goes.
const queryInstanceAnnotation = "query_instance_id:"

// workerIDField is the nvext.extra_fields entry that makes the frontend
// name the prefill and decode workers in the answer's nvext. A worker's
// identity is shown only to a client that asked with x-backend.
const workerIDField = "worker_id"

// withoutClientRouting removes from a body's nvext what a client may not
// ask of the frontend: the clientNvextKeys members, annotations starting
// with queryInstanceAnnotation, and, unless reveal (the client sent
// x-backend), workerIDField from extra_fields. body must be valid JSON (it
// was decoded before). Only the members concerned change: every other
// byte of the body is kept as the client sent it, and the body is
// returned as it is when there is nothing to remove. An nvext left empty
// goes; of an nvext given more than once only the last (the one decoders
// keep) stays, so that no decoder finds a removed member.
func withoutClientRouting(body []byte, reveal bool) []byte {
	start := skipSpace(body, 0)
	if start >= len(body) || body[start] != '{' {
		return body
	}
	top, end := objectMembers(body, start)
	last, count := -1, 0
	for i, m := range top {
		if keyIs(body, m, "nvext") {
			last, count = i, count+1
		}
	}
	if last < 0 {
		return body
	}
	ext := top[last]
	drop := false // the last nvext goes entirely
	if body[ext.val] == '{' {
		inner, _ := objectMembers(body, ext.val)
		innerKept := make([]member, 0, len(inner))
		changed := false
		for _, im := range inner {
			switch {
			case slices.ContainsFunc(clientNvextKeys, func(k string) bool { return keyIs(body, im, k) }):
				changed = true
				continue
			case keyIs(body, im, "annotations"):
				im.replacement = withoutStrings(body, im, func(s string) bool { return strings.HasPrefix(s, queryInstanceAnnotation) })
			case !reveal && keyIs(body, im, "extra_fields"):
				im.replacement = withoutStrings(body, im, func(s string) bool { return s == workerIDField })
			}
			changed = changed || im.replacement != nil
			innerKept = append(innerKept, im)
		}
		if changed {
			if len(innerKept) == 0 {
				drop = true
			} else {
				ext.replacement = joinMembers(body, innerKept)
			}
		}
	}
	if count == 1 && !drop && ext.replacement == nil {
		return body
	}
	kept := make([]member, 0, len(top))
	for i, m := range top {
		switch {
		case i == last:
			if !drop {
				kept = append(kept, ext)
			}
		case !keyIs(body, m, "nvext"):
			kept = append(kept, m)
		}
	}
	out := make([]byte, 0, len(body))
	out = append(out, body[:start]...)
	out = append(out, joinMembers(body, kept)...)
	return append(out, body[end:]...)
}

// withoutStrings returns m's array value without the strings that match
// gone, or nil when m's value is not an array or nothing matches. Every
// other element is kept as it was written.
func withoutStrings(b []byte, m member, gone func(string) bool) []byte {
	if b[m.val] != '[' {
		return nil
	}
	var kept [][2]int
	removed := false
	i := skipSpace(b, m.val+1)
	for i < m.valEnd && b[i] != ']' {
		j := skipValue(b, i)
		if b[i] == '"' && gone(decodeString(b[i:j])) {
			removed = true
		} else {
			kept = append(kept, [2]int{i, j})
		}
		i = skipSpace(b, j)
		if i < m.valEnd && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	if !removed {
		return nil
	}
	out := []byte{'['}
	for k, e := range kept {
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, b[e[0]:e[1]]...)
	}
	return append(out, ']')
}

// decodeString decodes the JSON string raw (quotes included); one that
// does not decode gives "".
func decodeString(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// member is one "key": value of an object: the key's quotes at
// [key, keyEnd), the value at [val, valEnd).
type member struct {
	key, keyEnd, val, valEnd int
	replacement              []byte // a new value, when not nil
}

// joinMembers writes an object of the given members, each as it was (or
// with its replacement value).
func joinMembers(b []byte, ms []member) []byte {
	var out bytes.Buffer
	out.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			out.WriteByte(',')
		}
		if m.replacement == nil {
			out.Write(b[m.key:m.valEnd])
			continue
		}
		out.Write(b[m.key:m.val])
		out.Write(m.replacement)
	}
	out.WriteByte('}')
	return out.Bytes()
}

// keyIs compares a member's decoded key.
func keyIs(b []byte, m member, want string) bool {
	raw := b[m.key:m.keyEnd]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1:len(raw)-1]) == want // compared without a copy
	}
	return decodeString(raw) == want
}

// objectMembers lists the members of the object at b[i] == '{' and
// returns the index after its '}'.
func objectMembers(b []byte, i int) ([]member, int) {
	var ms []member
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, i + 1
	}
	for i < len(b) {
		var m member
		m.key = i
		i = skipString(b, i)
		m.keyEnd = i
		i = skipSpace(b, i)
		i = skipSpace(b, i+1) // the colon
		m.val = i
		i = skipValue(b, i)
		m.valEnd = i
		ms = append(ms, m)
		i = skipSpace(b, i)
		if i >= len(b) || b[i] == '}' {
			return ms, i + 1
		}
		i = skipSpace(b, i+1) // the comma
	}
	return ms, len(b)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string at b[i] == '"'.
func skipString(b []byte, i int) int {
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

// skipValue returns the index after the value at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default: // number, true, false, null
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}

// withTokenData sets nvext.token_data to ids in a body that has none
// (withoutClientRouting ran first), so the frontend skips its own
// tokenization: in the last nvext object (the one decoders keep), or in a
// new nvext at the end. Every other byte stays as it was.
func withTokenData(body []byte, ids []uint32) []byte {
	start := skipSpace(body, 0)
	if start >= len(body) || body[start] != '{' {
		return body
	}
	top, end := objectMembers(body, start)
	var arr bytes.Buffer
	arr.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			arr.WriteByte(',')
		}
		arr.WriteString(strconv.FormatUint(uint64(id), 10))
	}
	arr.WriteByte(']')
	last := -1
	for i, m := range top {
		if keyIs(body, m, "nvext") {
			last = i
		}
	}
	if last < 0 {
		top = append(top, member{key: -1})
	} else {
		ext := &top[last]
		inner := []member(nil)
		if body[ext.val] == '{' {
			inner, _ = objectMembers(body, ext.val)
		}
		var obj bytes.Buffer
		obj.WriteString(`{"token_data":`)
		obj.Write(arr.Bytes())
		for _, im := range inner {
			obj.WriteByte(',')
			obj.Write(body[im.key:im.valEnd])
		}
		obj.WriteByte('}')
		ext.replacement = obj.Bytes()
	}
	var out bytes.Buffer
	out.Grow(len(body) + arr.Len() + 32)
	out.Write(body[:start])
	out.WriteByte('{')
	for i, m := range top {
		if i > 0 {
			out.WriteByte(',')
		}
		switch {
		case m.key < 0:
			out.WriteString(`"nvext":{"token_data":`)
			out.Write(arr.Bytes())
			out.WriteByte('}')
		case m.replacement != nil:
			out.Write(body[m.key:m.val])
			out.Write(m.replacement)
		default:
			out.Write(body[m.key:m.valEnd])
		}
	}
	out.WriteByte('}')
	out.Write(body[end:])
	return out.Bytes()
}
