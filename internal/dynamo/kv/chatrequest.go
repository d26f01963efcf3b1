package kv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/continuum-router/continuum/internal/chattemplate"
	"github.com/continuum-router/continuum/internal/jsonscan"
)

// This file reads a chat request as Dynamo's frontend hands it to the chat
// template. The frontend does not render the client's JSON: it decodes the
// request into typed structs and serializes those back (with serde_json
// keeping insertion order), then rewrites message contents and tool-call
// arguments. Every difference reaches the prompt's tokens, so the router
// makes the same ones before rendering.

// requestShape is what a model's templates make the frontend change in a
// request before rendering.
type requestShape struct {
	// contentArrays: the default template renders a user's text only from
	// a list of text parts (see RequiresContentArrays), so every text
	// content is given as one, and lists of text parts are not joined.
	contentArrays bool
	// parseArgs: tool calls' arguments strings holding JSON are given as
	// that JSON (the legacy function_call's always are).
	parseArgs bool
	// media: how a template that renders a content only as text (not
	// contentArrays) marks a media part; see MediaPlaceholder.
	media Media
	// thinkInContent: an assistant message's reasoning_content goes into
	// its content as <think>…</think> (see thinkInContent), for a template
	// that does not read reasoning_content itself.
	thinkInContent bool
}

// chatInput reads a chat request as Dynamo's frontend renders it:
//   - messages and tools as the frontend's typed structs write them back
//     (see normalizedChat);
//   - the tools are left out of a request whose tool_choice is "none"
//     unless keepTools (the workers' cards say
//     exclude_tools_when_tool_choice_none: false);
//   - the generation prompt is added unless the last message is the
//     assistant's (a continuation): the frontend decides it from the
//     messages alone, and its template context wins over a
//     chat_template_kwargs entry of the same name, so neither a top-level
//     add_generation_prompt or continue_final_message nor one in
//     chat_template_kwargs changes it;
//   - OpenAI's thinking and reasoning_effort become template variables as
//     the frontend folds them into its chat_template_args (thinking and
//     thinking_mode; reasoning_effort, and enable_thinking unless the
//     kwargs give it).
//
// shape says, for a request with tools or without, what its template
// makes the frontend change. chatInput also returns the request's cache
// salt (nvext.cache_salt, else cache_salt).
func chatInput(body []byte, keepTools bool, shape func(tools bool) requestShape) (chattemplate.Input, string, error) {
	// The frontend reads the members of exactly the names its structs give
	// (encoding/json would also take "Messages" for messages).
	top, err := requestObject(body)
	if err != nil {
		return chattemplate.Input{}, "", err
	}
	var effort *string
	var kwargs, args map[string]json.RawMessage
	if err := errors.Join(top.decode("reasoning_effort", &effort), top.decode("chat_template_kwargs", &kwargs),
		top.decode("chat_template_args", &args)); err != nil {
		return chattemplate.Input{}, "", err
	}
	salt, err := top.cacheSalt()
	if err != nil {
		return chattemplate.Input{}, "", err
	}
	messages, err := top.list("messages")
	if err != nil {
		return chattemplate.Input{}, "", err
	}
	tools, err := top.list("tools")
	if err != nil {
		return chattemplate.Input{}, "", err
	}
	choice, _ := top.get("tool_choice")
	dropTools := !keepTools && tools != nil && bytes.Equal(choice, []byte(`"none"`))
	if dropTools {
		tools = nil
	}
	in, err := chattemplate.DecodeRequest(normalizedChat(body, messages, tools, dropTools, shape(len(tools) > 0)))
	if err != nil {
		return chattemplate.Input{}, "", err
	}
	add := true
	if n := len(messages); n > 0 {
		last, _ := objectOf(messages[n-1])
		v, _ := last.get("role")
		role, _ := jsonscan.String(v)
		add = role != "assistant"
	}
	in.AddGenerationPrompt, in.ContinueFinalMessage = add, false
	thinking, _ := top.get("thinking")
	foldReasoning(&in, thinking, effort)
	return in, salt, nil
}

// generationPromptAgreed reports whether every Dynamo frontend release
// renders a chat request's generation prompt alike (Prompt.Portable): its
// last message is the user's, and neither the request nor its
// chat_template_kwargs asks for no generation prompt or to continue the
// final message.
func generationPromptAgreed(body []byte) bool {
	top, err := requestObject(body)
	if err != nil {
		return false
	}
	objects := []object{top}
	if raw, ok := top.get("chat_template_kwargs"); ok {
		if kwargs, ok := objectOf(raw); ok {
			objects = append(objects, kwargs)
		}
	}
	for _, o := range objects {
		var add, cont *bool
		if o.decode("add_generation_prompt", &add) != nil || o.decode("continue_final_message", &cont) != nil ||
			add != nil && !*add || cont != nil && *cont {
			return false
		}
	}
	messages, err := top.list("messages")
	if err != nil || len(messages) == 0 {
		return false
	}
	last, _ := objectOf(messages[len(messages)-1])
	v, _ := last.get("role")
	role, _ := jsonscan.String(v)
	return role == "user"
}

// foldReasoning sets the template variables the frontend derives from
// OpenAI's thinking (true, false, or {"type": "enabled" | "disabled" |
// "adaptive"}) and reasoning_effort. A value the frontend refuses (its
// request fails) sets nothing.
func foldReasoning(in *chattemplate.Input, thinking json.RawMessage, effort *string) {
	mode := ""
	var on bool
	var typed struct {
		Type string `json:"type"`
	}
	switch t := bytes.TrimSpace(thinking); {
	case len(t) == 0 || bytes.Equal(t, []byte("null")):
	case json.Unmarshal(t, &on) == nil:
		mode = "disabled"
		if on {
			mode = "enabled"
		}
	case json.Unmarshal(t, &typed) == nil:
		switch typed.Type {
		case "enabled", "disabled", "adaptive":
			mode = typed.Type
		}
	}
	if mode == "" && effort == nil {
		return
	}
	if in.Extra == nil {
		in.Extra = map[string]any{}
	}
	switch mode {
	case "enabled", "disabled":
		in.Extra["thinking"] = mode == "enabled"
		in.Extra["thinking_mode"] = mode
	case "adaptive":
		in.Extra["thinking_mode"] = mode
	}
	if effort != nil {
		if _, ok := in.Extra["enable_thinking"]; !ok {
			in.Extra["enable_thinking"] = *effort != "none"
		}
		in.Extra["reasoning_effort"] = *effort
	}
}

// normalizedChat returns the request body with its messages and tools as
// the frontend's typed structs write them back, and its contents and tool
// calls as the frontend rewrites them (see message and tool); with
// dropTools the body's tools go. The body is returned as it is when nothing
// changes.
func normalizedChat(body []byte, messages, tools []json.RawMessage, dropTools bool, shape requestShape) []byte {
	changed := dropTools
	rewrite := func(list []json.RawMessage, each func(json.RawMessage) json.RawMessage) []json.RawMessage {
		if list == nil {
			return nil
		}
		out := make([]json.RawMessage, len(list))
		for i, raw := range list {
			out[i] = each(raw)
			changed = changed || !bytes.Equal(out[i], raw)
		}
		return out
	}
	msgs := rewrite(messages, shape.message)
	tls := rewrite(tools, tool)
	if !changed {
		return body
	}
	top, ok := objectOf(body)
	if !ok {
		return body
	}
	out := make([]byte, 0, len(body)+len(body)/8)
	out = append(out, '{')
	for _, m := range top.members {
		v := m.Value(body)
		key, _ := jsonscan.String(body[m.Key:m.KeyEnd])
		switch key {
		case "messages":
			if msgs != nil {
				v = appendList(nil, msgs)
			}
		case "tools":
			if dropTools {
				continue
			}
			if tls != nil {
				v = appendList(nil, tls)
			}
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, body[m.Key:m.KeyEnd]...), ':'), v...)
	}
	return append(out, '}')
}

// appendList appends the JSON list of items to b.
func appendList(b []byte, items []json.RawMessage) []byte {
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, ']')
}

// A field of one of the frontend's typed request structs. Fields are
// listed in the order the struct declares them, which is the order serde
// writes them back in, whatever order the client sent.
type field struct {
	name string
	kind fieldKind
	// fix rewrites a present, non-null value; nil keeps it as sent.
	fix func(json.RawMessage) json.RawMessage
	// absent, when set, is written for a field the client left out.
	absent json.RawMessage
}

// fieldKind says how a struct writes a field back. The zero kind is a
// required field, written as sent (the frontend refuses a request without
// it, so its absence is not the router's to mend).
type fieldKind uint8

const (
	// optional: an Option the struct skips when None, so a field sent as
	// null disappears as one left out.
	optional fieldKind = iota + 1
	// nullable: an Option the struct writes even when None: null when the
	// client left it out.
	nullable
)

var jsonNull = json.RawMessage(`null`)

// reshape writes the object raw as a typed struct of fields writes itself
// back: its fields in their declared order, optional ones left out when
// absent or null, and every key the struct does not have dropped (the
// structs keep no unknown fields). raw itself is returned when that is
// what it already is, and when it is not an object (the frontend refuses
// such a request).
func reshape(raw json.RawMessage, fields []field) json.RawMessage {
	in, ok := objectOf(raw)
	if !ok {
		return raw
	}
	var b bytes.Buffer
	b.Grow(len(raw))
	b.WriteByte('{')
	same, written := true, 0
	for _, f := range fields {
		v, ok := in.get(f.name)
		null := ok && bytes.Equal(v, jsonNull)
		switch {
		case !ok && f.absent != nil:
			v, ok = f.absent, true
		case !ok && f.kind == nullable:
			v, ok, null = jsonNull, true, true
		case f.kind == optional && null:
			ok = false
		}
		if !ok {
			continue
		}
		if f.fix != nil && !null {
			fixed := f.fix(v)
			same = same && bytes.Equal(fixed, v)
			v = fixed
		}
		// Unchanged so far while the members come in the struct's order,
		// each once, and none is added.
		same = same && written < len(in.members) && in.members[written].KeyIs(raw, f.name) && bytes.Equal(in.members[written].Value(raw), v)
		if written > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(f.name)
		b.WriteString(`":`)
		b.Write(v)
		written++
	}
	if same && written == len(in.members) {
		return raw
	}
	b.WriteByte('}')
	return b.Bytes()
}

// object is a JSON object's text and its members.
type object struct {
	text    []byte
	members []jsonscan.Member
}

// objectOf splits raw into its members when it is an object. raw is part of
// a request already decoded as JSON.
func objectOf(raw []byte) (object, bool) {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return object{}, false
	}
	ms, _ := jsonscan.Members(raw, i)
	return object{raw, ms}, true
}

// get returns the value of key (the last, when the object repeats it, as
// decoders take it).
func (o object) get(key string) ([]byte, bool) { return jsonscan.Get(o.text, o.members, key) }

// requestObject checks a request body as JSON and splits it into its
// members.
func requestObject(body []byte) (object, error) {
	if !json.Valid(body) {
		var v any
		return object{}, json.Unmarshal(body, &v) // says where it is not JSON
	}
	top, ok := objectOf(body)
	if !ok {
		return object{}, errors.New("the request is not a JSON object")
	}
	return top, nil
}

// decode decodes the value of key into v; an absent or null value leaves v
// as it is.
func (o object) decode(key string, v any) error {
	raw, ok := o.get(key)
	if !ok || bytes.Equal(raw, jsonNull) {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// cacheSalt returns a request's cache salt: nvext.cache_salt, else
// cache_salt.
func (o object) cacheSalt() (string, error) {
	var salt, inner string
	if err := o.decode("cache_salt", &salt); err != nil {
		return "", err
	}
	if v, ok := o.get("nvext"); ok && v[0] == '{' {
		nvext, _ := objectOf(v)
		if err := nvext.decode("cache_salt", &inner); err != nil {
			return "", fmt.Errorf("nvext.%w", err)
		}
	}
	return cmpOr(inner, salt), nil
}

// list returns the items of the list that is the value of key: nil when
// the key is absent or null, an error when the value is not a list.
func (o object) list(key string) ([]json.RawMessage, error) {
	v, ok := o.get(key)
	switch {
	case !ok || bytes.Equal(v, jsonNull):
		return nil, nil
	}
	list, ok := items(v)
	if !ok {
		return nil, fmt.Errorf("%s: not a list", key)
	}
	return list, nil
}

// message returns a message as the frontend gives it to the template:
//   - its fields are those of its role's struct, in that struct's order
//     (role first), optional ones gone when null (an assistant's content:
//     null is no content at all), unknown ones dropped (a tool message's
//     name, for one); a function message's content is null when left out;
//   - with contentArrays every text content is a list of one text part;
//     in every content list an image_url part is {"type": "image"}, the
//     placeholder templates print an image's tokens for (the image reaches
//     the engine apart from the prompt), and without contentArrays a list
//     of text parts only is their texts joined by newlines;
//   - tool calls have type "function" when they give none, and arguments
//     sent as JSON rather than a string are that JSON's compact text; with
//     parseArgs an arguments string holding JSON is that JSON, and a legacy
//     function_call's always is.
//
// A message of a role the frontend does not know is left as it is (the
// frontend refuses the request).
func (s requestShape) message(raw json.RawMessage) json.RawMessage {
	in, _ := objectOf(raw)
	v, _ := in.get("role")
	r, ok := jsonscan.String(v)
	if !ok {
		return raw
	}
	role := field{name: "role"}
	content := field{name: "content", fix: s.content}
	switch r {
	case "system", "developer", "user":
		return reshape(raw, []field{role, content, {name: "name", kind: optional}})
	case "assistant":
		msg := reshape(raw, s.assistantFields(role, content))
		if s.thinkInContent {
			msg = thinkInContent(msg)
		}
		return msg
	case "tool":
		return reshape(raw, []field{role, content, {name: "tool_call_id"}})
	case "function":
		content.kind = nullable
		return reshape(raw, []field{role, content, {name: "name"}})
	}
	return raw
}

// assistantFields are the fields of an assistant message, in the order
// the frontend's struct writes them.
func (s requestShape) assistantFields(role, content field) []field {
	content.kind = optional
	calls := func(v json.RawMessage) json.RawMessage { return eachItem(v, s.toolCall) }
	return []field{role, content,
		{name: "reasoning_content", kind: optional},
		{name: "refusal", kind: optional},
		{name: "name", kind: optional},
		{name: "audio", kind: optional, fix: func(v json.RawMessage) json.RawMessage { return reshape(v, []field{{name: "id"}}) }},
		{name: "tool_calls", kind: optional, fix: calls},
		{name: "function_call", kind: optional, fix: func(v json.RawMessage) json.RawMessage { return functionCall(v, true) }},
	}
}

// thinkInContent moves an assistant message's reasoning into its content,
// as the frontend does before rendering with a template that does not read
// reasoning_content (its source does not name it): otherwise the model's
// earlier reasoning would vanish from the prompt. The reasoning, a string
// or a list of strings (each non-empty one), is wrapped in <think> and
// </think> and put before a text content (or is the content when there is
// none, or it is empty), or as a text part first in a list of parts; the
// message then has no reasoning_content. A message whose reasoning is
// empty, or whose content is of another type, is left as it is.
func thinkInContent(raw json.RawMessage) json.RawMessage {
	o, ok := objectOf(raw)
	if !ok {
		return raw
	}
	rv, ok := o.get("reasoning_content")
	if !ok {
		return raw
	}
	var think strings.Builder
	if r, isText := jsonscan.String(rv); isText {
		if r != "" {
			think.WriteString("<think>" + r + "</think>")
		}
	} else if segs, isList := items(rv); isList {
		for _, seg := range segs {
			if r, isText := jsonscan.String(seg); isText && r != "" {
				think.WriteString("<think>" + r + "</think>")
			}
		}
	}
	if think.Len() == 0 {
		return raw
	}
	cv, hasContent := o.get("content")
	var content json.RawMessage
	text, isText := jsonscan.String(cv)
	switch {
	case !hasContent || bytes.Equal(cv, jsonNull) || isText:
		content, _ = json.Marshal(think.String() + text)
	case len(cv) > 0 && cv[0] == '[':
		parts, _ := items(cv)
		part, _ := json.Marshal(map[string]string{"type": "text", "text": think.String()})
		content = appendList(nil, append([]json.RawMessage{json.RawMessage(part)}, parts...))
	default:
		return raw
	}
	var b bytes.Buffer
	b.WriteByte('{')
	written := 0
	put := func(key []byte, v []byte) {
		if written > 0 {
			b.WriteByte(',')
		}
		b.Write(key)
		b.WriteByte(':')
		b.Write(v)
		written++
	}
	for _, m := range o.members {
		switch {
		case m.KeyIs(raw, "reasoning_content"):
		case m.KeyIs(raw, "content"):
			put(raw[m.Key:m.KeyEnd], content)
		default:
			put(raw[m.Key:m.KeyEnd], m.Value(raw))
			if !hasContent && m.KeyIs(raw, "role") {
				put([]byte(`"content"`), content)
			}
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// content returns a message content as the frontend renders it (see
// message).
func (s requestShape) content(raw json.RawMessage) json.RawMessage {
	switch {
	case len(raw) > 0 && raw[0] == '"' && s.contentArrays:
		return json.RawMessage(`[{"type":"text","text":` + string(raw) + `}]`)
	case len(raw) == 0 || raw[0] != '[':
		return raw
	}
	parts, ok := items(raw)
	if !ok {
		return raw
	}
	texts := make([]string, 0, len(parts))
	onlyText, same := len(parts) > 0, true
	for i, p := range parts {
		part, _ := objectOf(p)
		v, _ := part.get("type")
		typ, _ := jsonscan.String(v)
		v, _ = part.get("text")
		text, isText := jsonscan.String(v)
		if placeholder, ok := mediaPlaceholders[typ]; ok {
			parts[i] = json.RawMessage(placeholder)
		} else {
			parts[i] = contentPart(p, typ)
		}
		same = same && bytes.Equal(parts[i], p)
		onlyText = onlyText && typ == "text" && isText
		if onlyText {
			texts = append(texts, text)
		}
	}
	switch {
	case onlyText && !s.contentArrays:
		b, _ := json.Marshal(strings.Join(texts, "\n"))
		return b
	case !s.contentArrays && s.media.Flatten && len(parts) > 0:
		return flattenMedia(parts, s.media.Placeholder)
	case same:
		return raw
	}
	return appendList(nil, parts)
}

// flattenMedia is a list of parts (media already placeholders) as one
// text: each text part's text, and for every other typed part the
// placeholder, {n} replaced by its 1-based place among them.
func flattenMedia(parts []json.RawMessage, placeholder string) json.RawMessage {
	var b strings.Builder
	n := 1
	for _, p := range parts {
		part, _ := objectOf(p)
		v, _ := part.get("type")
		typ, _ := jsonscan.String(v)
		switch typ {
		case "text":
			v, _ = part.get("text")
			if text, ok := jsonscan.String(v); ok {
				b.WriteString(text)
			}
		case "":
		default:
			b.WriteString(strings.ReplaceAll(placeholder, "{n}", strconv.Itoa(n)))
			n++
		}
	}
	out, _ := json.Marshal(b.String())
	return out
}

// Media says how the frontend gives a template that renders a content only
// as text a list mixing text and media parts: with Flatten, as one text,
// each media part replaced by Placeholder ({n} standing for its 1-based
// place among the message's media parts; an empty Placeholder drops them).
type Media struct {
	Flatten     bool
	Placeholder string
}

// MediaPlaceholder is how the frontend marks media parts for template t,
// told once per template: Phi-3-vision's templates (their source names
// <|end|> and <|assistant|>) number them <|image_1|>, <|image_2|>, ...;
// LLaVA-1.5's (USER: and ASSISTANT:) write <image>; a pass-through template
// (a user's text content comes out as it went in, and a list of parts
// comes out as the list printed) drops them, its model's encoder reading
// the media beside the prompt. Other templates get such lists as they are.
func MediaPlaceholder(t *chattemplate.Template) Media {
	switch {
	case t == nil:
		return Media{}
	case t.Mentions("<|end|>") && t.Mentions("<|assistant|>"):
		return Media{Flatten: true, Placeholder: "<|image_{n}|>"}
	case t.Mentions("USER:") && t.Mentions("ASSISTANT:"):
		return Media{Flatten: true, Placeholder: "<image>"}
	}
	// The probe text holds control characters no template writes itself;
	// in the request's JSON they are escaped.
	const probe, probeJSON = "\x01dynamo_passthrough_probe\x01", `"\u0001dynamo_passthrough_probe\u0001"`
	if out, ok := probeRender(t, probeJSON); !ok || strings.TrimSpace(out) != probe {
		return Media{}
	}
	if out, ok := probeRender(t, `[{"type":"text","text":`+probeJSON+`},{"type":"image"}]`); ok && strings.Contains(out, "[") && strings.Contains(out, "type") {
		return Media{Flatten: true}
	}
	return Media{}
}

// mediaPlaceholders are the parts the frontend gives a template in place
// of media parts (the media go to the engine, not into the prompt's text).
var mediaPlaceholders = map[string]string{
	"image_url": `{"type":"image"}`,
	"video_url": `{"type":"video"}`,
	"audio_url": `{"type":"audio"}`,
}

// contentPart returns a content part of type typ as the frontend's struct
// for it writes it back (type first); a part of a type the frontend does
// not know is left as it is (the frontend refuses the request).
func contentPart(raw json.RawMessage, typ string) json.RawMessage {
	kind := field{name: "type"}
	media := func(name string, fields ...field) field {
		return field{name: name, fix: func(v json.RawMessage) json.RawMessage { return reshape(v, fields) }}
	}
	url, uuid := field{name: "url"}, field{name: "uuid", kind: optional}
	detail := field{name: "detail", kind: nullable}
	switch typ {
	case "text":
		return reshape(raw, []field{kind, {name: "text"}})
	case "refusal":
		return reshape(raw, []field{kind, {name: "refusal"}})
	case "video_url":
		return reshape(raw, []field{kind, media("video_url", url, detail, uuid)})
	case "audio_url":
		return reshape(raw, []field{kind, media("audio_url", url, uuid)})
	case "input_audio":
		return reshape(raw, []field{kind, media("input_audio", field{name: "data"}, field{name: "format"})})
	}
	return raw
}

// toolCall returns an assistant's tool call as the frontend writes it back
// (see message).
func (s requestShape) toolCall(raw json.RawMessage) json.RawMessage {
	return reshape(raw, []field{{name: "id"}, {name: "type", absent: json.RawMessage(`"function"`)},
		{name: "function", fix: func(v json.RawMessage) json.RawMessage { return functionCall(v, s.parseArgs) }}})
}

// functionCall returns a called function ({"name", "arguments"}) with its
// arguments as the frontend gives them: JSON sent as an object or list is
// the text serde_json writes for it, as the struct holds a string (parsed
// again with parse); with parse, a string holding JSON that serde_json
// reads is that JSON.
func functionCall(raw json.RawMessage, parse bool) json.RawMessage {
	return reshape(raw, []field{{name: "name"}, {name: "arguments", fix: func(v json.RawMessage) json.RawMessage {
		var args string
		switch {
		case (v[0] == '{' || v[0] == '[') && parse:
			return v
		case v[0] == '{' || v[0] == '[':
			val, err := chattemplate.DecodeJSON(v)
			if err != nil {
				return v
			}
			text, err := chattemplate.EncodeSerdeJSON(val)
			if err != nil {
				return v
			}
			s, _ := json.Marshal(text)
			return s
		case parse && v[0] == '"' && json.Unmarshal(v, &args) == nil && serdeReads(args):
			return json.RawMessage(args)
		}
		return v
	}}})
}

// serdeMaxDepth is serde_json's recursion limit: it refuses a 128th level
// of nested lists and objects.
const serdeMaxDepth = 127

// serdeReads reports whether serde_json, which the frontend parses a tool
// call's arguments with, reads s as JSON. It is stricter than
// encoding/json: a UTF-16 surrogate escape without its pair, a number
// beyond a float64's range and nesting deeper than serdeMaxDepth are
// errors there (and the arguments stay a string).
func serdeReads(s string) bool {
	if !json.Valid([]byte(s)) {
		return false
	}
	depth := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '[' || c == '{':
			if depth++; depth > serdeMaxDepth {
				return false
			}
		case c == ']' || c == '}':
			depth--
		case c == '"':
			for i++; s[i] != '"'; i++ {
				if s[i] != '\\' {
					continue
				}
				i++
				if s[i] != 'u' {
					continue
				}
				r, _ := strconv.ParseUint(s[i+1:i+5], 16, 32)
				i += 4
				switch {
				case r >= 0xdc00 && r <= 0xdfff:
					return false
				case r >= 0xd800 && r <= 0xdbff:
					if i+6 >= len(s) || s[i+1] != '\\' || s[i+2] != 'u' {
						return false
					}
					lo, _ := strconv.ParseUint(s[i+3:i+7], 16, 32)
					if lo < 0xdc00 || lo > 0xdfff {
						return false
					}
					i += 6
				}
			}
		case c == '-' || c >= '0' && c <= '9':
			j := i
			for j < len(s) && strings.IndexByte("+-.eE0123456789", s[j]) >= 0 {
				j++
			}
			if f, err := strconv.ParseFloat(s[i:j], 64); err != nil && (math.IsInf(f, 0)) {
				return false
			}
			i = j - 1
		}
	}
	return true
}

// tool returns a request's tool as the frontend gives it to the template:
// {"type", "function": {"name", "description", "parameters", "strict"}} in
// that order whatever the client's, description and strict gone when null,
// other keys dropped, and object parameters that lack "type" or
// "properties" given "type": "object" and then "properties": {} after
// their own keys.
func tool(raw json.RawMessage) json.RawMessage {
	return reshape(raw, []field{{name: "type"}, {name: "function", fix: func(v json.RawMessage) json.RawMessage {
		return reshape(v, []field{{name: "name"}, {name: "description", kind: optional},
			{name: "parameters", kind: optional, fix: toolSchema}, {name: "strict", kind: optional}})
	}}})
}

// toolSchema appends "type": "object" and "properties": {} to object
// parameters that lack them, in that order after the schema's own keys.
func toolSchema(raw json.RawMessage) json.RawMessage {
	params, ok := objectOf(raw)
	if !ok {
		return raw
	}
	_, hasType := params.get("type")
	_, hasProps := params.get("properties")
	if hasType && hasProps {
		return raw
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	b.Truncate(b.Len() - 1) // the closing brace
	sep := func() {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
	}
	if !hasType {
		sep()
		b.WriteString(`"type":"object"`)
	}
	if !hasProps {
		sep()
		b.WriteString(`"properties":{}`)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// eachItem applies fix to every item of a JSON list; anything else is
// returned as it is.
func eachItem(raw json.RawMessage, fix func(json.RawMessage) json.RawMessage) json.RawMessage {
	list, ok := items(raw)
	if !ok {
		return raw
	}
	same := true
	for i, it := range list {
		list[i] = fix(it)
		same = same && bytes.Equal(list[i], it)
	}
	if same {
		return raw
	}
	return appendList(nil, list)
}

// items returns the items of raw when it is a JSON list.
func items(raw []byte) ([]json.RawMessage, bool) {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, false
	}
	spans, _ := jsonscan.Items(raw, i)
	out := make([]json.RawMessage, len(spans))
	for k, it := range spans {
		out[k] = it
	}
	return out, true
}

// RequiresContentArrays reports whether a chat template renders a user's
// text only when it comes as a list of text parts, as Dynamo's frontend
// decides it once when it loads the template: a render of one user
// message whose content is [{"type": "text", "text": T}] shows T, and one
// whose content is the string T does not. For such a template the
// frontend gives every text content as a one-part list.
func RequiresContentArrays(t *chattemplate.Template) bool {
	if t == nil {
		return false
	}
	const probe = "template_test"
	shows := func(content string) bool {
		out, ok := probeRender(t, content)
		return ok && strings.Contains(out, probe)
	}
	return shows(`[{"type":"text","text":"`+probe+`"}]`) && !shows(`"`+probe+`"`)
}

// probeRender renders t for one user message of content (JSON) in the
// frontend's probe context: messages and add_generation_prompt alone (a
// template that reads bos_token or tools fails it there, and so here).
func probeRender(t *chattemplate.Template, content string) (string, bool) {
	in, err := chattemplate.DecodeRequest([]byte(`{"messages":[{"role":"user","content":` + content + `}]}`))
	if err != nil {
		return "", false
	}
	in.Bare = true
	ctx, cancel := context.WithTimeout(context.Background(), RenderBudget)
	defer cancel()
	out, err := t.Render(ctx, in)
	return out, err == nil
}
