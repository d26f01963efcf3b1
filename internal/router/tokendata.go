package router

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"github.com/continuum-router/continuum/internal/jsonscan"
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
	start := jsonscan.SkipSpace(body, 0)
	if start >= len(body) || body[start] != '{' {
		return body
	}
	top, end := objectMembers(body, start)
	last, count := -1, 0
	for i, m := range top {
		if m.KeyIs(body, "nvext") {
			last, count = i, count+1
		}
	}
	if last < 0 {
		return body
	}
	ext := top[last]
	drop := false // the last nvext goes entirely
	if body[ext.Val] == '{' {
		inner, _ := objectMembers(body, ext.Val)
		innerKept := make([]member, 0, len(inner))
		changed := false
		for _, im := range inner {
			switch {
			case slices.ContainsFunc(clientNvextKeys, func(k string) bool { return im.KeyIs(body, k) }):
				changed = true
				continue
			case im.KeyIs(body, "annotations"):
				im.replacement = withoutStrings(body, im, func(s string) bool { return strings.HasPrefix(s, queryInstanceAnnotation) })
			case !reveal && im.KeyIs(body, "extra_fields"):
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
		case !m.KeyIs(body, "nvext"):
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
	if b[m.Val] != '[' {
		return nil
	}
	var kept [][2]int
	removed := false
	i := jsonscan.SkipSpace(b, m.Val+1)
	for i < m.ValEnd && b[i] != ']' {
		j := jsonscan.SkipValue(b, i)
		if s, isString := jsonscan.String(b[i:j]); b[i] == '"' && isString && gone(s) {
			removed = true
		} else {
			kept = append(kept, [2]int{i, j})
		}
		i = jsonscan.SkipSpace(b, j)
		if i < m.ValEnd && b[i] == ',' {
			i = jsonscan.SkipSpace(b, i+1)
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

// member is one "key": value of an object, with a new value when
// replacement is not nil.
type member struct {
	jsonscan.Member
	replacement []byte
}

// objectMembers lists the members of the object at b[i] == '{' and
// returns the index after its '}'.
func objectMembers(b []byte, i int) ([]member, int) {
	ms, end := jsonscan.Members(b, i)
	out := make([]member, len(ms))
	for k, m := range ms {
		out[k].Member = m
	}
	return out, end
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
			out.Write(b[m.Key:m.ValEnd])
			continue
		}
		out.Write(b[m.Key:m.Val])
		out.Write(m.replacement)
	}
	out.WriteByte('}')
	return out.Bytes()
}

// withTokenData sets nvext.token_data to ids in a body that has none
// (withoutClientRouting ran first), so the frontend skips its own
// tokenization: in the last nvext object (the one decoders keep), or in a
// new nvext at the end. Every other byte stays as it was.
func withTokenData(body []byte, ids []uint32) []byte {
	start := jsonscan.SkipSpace(body, 0)
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
		if m.KeyIs(body, "nvext") {
			last = i
		}
	}
	if last < 0 {
		top = append(top, member{Member: jsonscan.Member{Key: -1}})
	} else {
		ext := &top[last]
		inner := []member(nil)
		if body[ext.Val] == '{' {
			inner, _ = objectMembers(body, ext.Val)
		}
		var obj bytes.Buffer
		obj.WriteString(`{"token_data":`)
		obj.Write(arr.Bytes())
		for _, im := range inner {
			obj.WriteByte(',')
			obj.Write(body[im.Key:im.ValEnd])
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
		case m.Key < 0:
			out.WriteString(`"nvext":{"token_data":`)
			out.Write(arr.Bytes())
			out.WriteByte('}')
		case m.replacement != nil:
			out.Write(body[m.Key:m.Val])
			out.Write(m.replacement)
		default:
			out.Write(body[m.Key:m.ValEnd])
		}
	}
	out.WriteByte('}')
	out.Write(body[end:])
	return out.Bytes()
}
