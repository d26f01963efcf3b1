package fleetsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// The OpenAI shapes the frontend answers with. A chat request
// (/v1/chat/completions) gets a chat.completion object, or
// chat.completion.chunk events when streamed; a text completion request
// (/v1/completions) gets text_completion objects either way. Every object
// carries created (Unix seconds). A stream puts finish_reason on its last
// content chunk, then, when stream_options.include_usage is set, one chunk
// with no choices and the usage, then data: [DONE].

//
// The simulated model answers a chat request that offers tools (tool_choice
// not "none") and does not end with a tool result by calling one: the
// function tool_choice names, else the first, with arguments made from its
// parameters schema (each required property, or every property when none
// is required: the first enum value, else "sim", 1, true, [] or an object
// made the same way), finish reason tool_calls. Otherwise it answers text,
// cut at the first stop string (stop, a string or a list) with finish
// reason stop, the stop string kept when include_stop_str_in_output is set.

// Finish reasons.
const (
	finishStop      = "stop"
	finishLength    = "length"
	finishToolCalls = "tool_calls"
)

// openAIRequest is what the frontend reads of an inference request.
type openAIRequest struct {
	Model               string `json:"model"`
	Stream              bool   `json:"stream"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice     json.RawMessage `json:"tool_choice"`
	Stop           json.RawMessage `json:"stop"`
	IncludeStopStr bool            `json:"include_stop_str_in_output"`
	Prompt         any             `json:"prompt"`
	Nvext          *struct {
		TokenData json.RawMessage `json:"token_data"`
	} `json:"nvext"`
}

// parseRequest reads body; a body that is not JSON reads as empty.
func parseRequest(body []byte) openAIRequest {
	var q openAIRequest
	_ = json.Unmarshal(body, &q)
	return q
}

// limit is the most tokens the request lets the answer have, 0 for no
// limit: max_completion_tokens, else max_tokens (zero or negative values
// count as unset).
func (q *openAIRequest) limit() int {
	for _, p := range []*int{q.MaxCompletionTokens, q.MaxTokens} {
		if p != nil && *p > 0 {
			return *p
		}
	}
	return 0
}

// promptText is the text of the messages (chat) or of the prompt (text
// completion), one part a line.
func (q *openAIRequest) promptText() string {
	var b strings.Builder
	for _, m := range q.Messages {
		fmt.Fprint(&b, m.Content, "\n")
	}
	switch p := q.Prompt.(type) {
	case nil:
	case string:
		b.WriteString(p + "\n")
	case []any:
		for _, part := range p {
			fmt.Fprint(&b, part, "\n")
		}
	default:
		fmt.Fprint(&b, p, "\n")
	}
	return b.String()
}

// estimatePromptTokens is the prompt size the frontend reports when it
// answers by itself, without simulated workers to encode the prompt: about
// four characters a token.
func estimatePromptTokens(text string) int { return len(text)/4 + 4 }

// answerLength is the length and finish reason of an answer whose natural
// length is natural tokens: a limit that natural reaches cuts it there,
// with finish reason length; otherwise the answer ends by itself (stop).
func answerLength(natural, limit int) (int, string) {
	if limit > 0 && limit <= natural {
		return limit, finishLength
	}
	return natural, finishStop
}

// stops are the request's stop strings.
func (q *openAIRequest) stops() []string {
	var one string
	if json.Unmarshal(q.Stop, &one) == nil {
		if one == "" {
			return nil
		}
		return []string{one}
	}
	var list []string
	_ = json.Unmarshal(q.Stop, &list)
	return list
}

// toolCall is a function call the simulated model makes.
type toolCall struct {
	id, name, arguments string
}

// call is the tool call the model makes for q, if any (see the rules
// above).
func (q *openAIRequest) call() *toolCall {
	if len(q.Tools) == 0 || len(q.Messages) == 0 || q.Messages[len(q.Messages)-1].Role == "tool" {
		return nil
	}
	var mode string
	if json.Unmarshal(q.ToolChoice, &mode) == nil && mode == "none" {
		return nil
	}
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	_ = json.Unmarshal(q.ToolChoice, &named)
	tool := q.Tools[0].Function
	for _, t := range q.Tools {
		if t.Function.Name == named.Function.Name {
			tool = t.Function
		}
	}
	args, _ := json.Marshal(sampleObject(tool.Parameters))
	return &toolCall{id: fmt.Sprintf("call_sim_%d", replyIDs.Add(1)), name: tool.Name, arguments: string(args)}
}

// sampleObject is an object that fits a JSON schema of type object.
func sampleObject(schema json.RawMessage) map[string]any {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	_ = json.Unmarshal(schema, &s)
	keys := s.Required
	if len(keys) == 0 {
		for k := range s.Properties {
			keys = append(keys, k)
		}
	}
	out := map[string]any{}
	for _, k := range keys {
		out[k] = sampleValue(s.Properties[k])
	}
	return out
}

func sampleValue(schema json.RawMessage) any {
	var s struct {
		Type any   `json:"type"`
		Enum []any `json:"enum"`
	}
	_ = json.Unmarshal(schema, &s)
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	typ, _ := s.Type.(string)
	if list, ok := s.Type.([]any); ok {
		for _, t := range list {
			if ts, _ := t.(string); ts != "null" && ts != "" {
				typ = ts
				break
			}
		}
	}
	switch typ {
	case "integer", "number":
		return 1
	case "boolean":
		return true
	case "array":
		return []any{}
	case "object":
		return sampleObject(schema)
	}
	return "sim"
}

// answerPlan is what the simulated model answers: text pieces (one token
// each, with the space after it but at the answer's end) that add up to its
// text, or a tool call; and the finish reason.
type answerPlan struct {
	pieces []string
	text   string // the whole text, as a buffered answer carries it
	call   *toolCall
	finish string
}

// tokens is the answer's length in tokens.
func (p *answerPlan) tokens() int {
	if p.call != nil {
		return max(1, len(p.call.arguments)/4)
	}
	return len(p.pieces)
}

// planAnswer plans the answer to q whose natural length is natural
// tokens, word giving the text of each.
func (q *openAIRequest) planAnswer(natural int, word func(i int) string) *answerPlan {
	if c := q.call(); c != nil {
		p := &answerPlan{call: c, finish: finishToolCalls}
		if l := q.limit(); l > 0 && l < p.tokens() {
			c.arguments = c.arguments[:l*4]
			p.finish = finishLength
		}
		return p
	}
	n, finish := answerLength(natural, q.limit())
	p := &answerPlan{finish: finish}
	for i := range n {
		p.pieces = append(p.pieces, word(i)+" ")
	}
	// The answer ends without a space, streamed or not: its pieces add up
	// to its text.
	if n > 0 {
		p.pieces[n-1] = strings.TrimSuffix(p.pieces[n-1], " ")
	}
	p.text = strings.Join(p.pieces, "")
	cut := -1
	var hit string
	for _, stop := range q.stops() {
		if i := strings.Index(p.text, stop); stop != "" && i >= 0 && (cut < 0 || i < cut) {
			cut, hit = i, stop
		}
	}
	if cut < 0 {
		return p
	}
	end := cut
	if q.IncludeStopStr {
		end += len(hit)
	}
	p.text, p.finish = p.text[:end], finishStop
	// The pieces up to the cut, the last one trimmed to it.
	at := 0
	for i, piece := range p.pieces {
		if at+len(piece) >= end {
			p.pieces = append(p.pieces[:i], piece[:end-at])
			break
		}
		at += len(piece)
	}
	return p
}

// write writes the planned answer, buffered or streamed; next waits for
// token i (as an engine does) and may fail.
func (p *answerPlan) write(w http.ResponseWriter, r *reply, stream bool, next func(i int) error) {
	if !stream {
		for i := range p.tokens() {
			if next(i) != nil {
				return
			}
		}
		if p.call != nil {
			r.writeCall(w, p.call, p.tokens(), p.finish)
			return
		}
		r.writeWhole(w, p.text, p.tokens(), p.finish)
		return
	}
	s := r.startStream(w)
	if p.call != nil {
		_ = s.call(p.call, p.tokens(), p.finish, next)
		return
	}
	_ = s.tokens(len(p.pieces), p.finish, func(i int) (string, error) { return p.pieces[i], next(i) })
}

// replyIDs numbers the answers of the process.
var replyIDs atomic.Uint64

// reply writes one answer to an inference request.
type reply struct {
	chat         bool
	id           string
	model        string
	created      int64
	promptTokens int
	// cachedTokens are the prompt tokens the prefill found in the cache.
	cachedTokens int
	includeUsage bool
}

// newReply prepares the answer to q received on path.
func newReply(path string, q *openAIRequest, promptTokens int) *reply {
	r := &reply{chat: path == "/v1/chat/completions", model: q.Model, created: time.Now().Unix(), promptTokens: promptTokens,
		includeUsage: q.Stream && q.StreamOptions != nil && q.StreamOptions.IncludeUsage}
	prefix := "cmpl-sim-"
	if r.chat {
		prefix = "chatcmpl-sim-"
	}
	r.id = fmt.Sprintf("%s%d", prefix, replyIDs.Add(1))
	return r
}

// usage is the answer's usage object; prompt_tokens_details.cached_tokens
// says, as OpenAI's does, how many prompt tokens came from the cache.
func (r *reply) usage(completion int) map[string]any {
	return map[string]any{"prompt_tokens": r.promptTokens, "completion_tokens": completion, "total_tokens": r.promptTokens + completion,
		"prompt_tokens_details": map[string]any{"cached_tokens": r.cachedTokens}}
}

// object is the object type of the whole answer or of one stream chunk.
func (r *reply) object(chunk bool) string {
	switch {
	case !r.chat:
		return "text_completion"
	case chunk:
		return "chat.completion.chunk"
	default:
		return "chat.completion"
	}
}

// writeWhole writes a buffered answer of completion tokens.
func (r *reply) writeWhole(w http.ResponseWriter, text string, completion int, finish string) {
	choice := map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil}
	if r.chat {
		choice["message"] = map[string]any{"role": "assistant", "content": text}
	} else {
		choice["text"] = text
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": r.id, "object": r.object(false), "created": r.created, "model": r.model,
		"choices": []any{choice}, "usage": r.usage(completion)})
}

// writeCall writes a buffered answer that is a tool call.
func (r *reply) writeCall(w http.ResponseWriter, c *toolCall, completion int, finish string) {
	msg := map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": c.id, "type": "function",
		"function": map[string]any{"name": c.name, "arguments": c.arguments}}}}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": r.id, "object": r.object(false), "created": r.created, "model": r.model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil, "message": msg}}, "usage": r.usage(completion)})
}

// stream is an answer being streamed as server-sent events.
type stream struct {
	r      *reply
	w      http.ResponseWriter
	rc     *http.ResponseController
	chunks int
}

// startStream writes the status and headers of a streamed answer.
func (r *reply) startStream(w http.ResponseWriter) *stream {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &stream{r: r, w: w, rc: http.NewResponseController(w)}
}

// event writes one data event and flushes it.
func (s *stream) event(v any) error {
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", mustJSON(v)); err != nil {
		return err
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// chunk writes a content chunk; finish is "" except on the last one. The
// first chat chunk also names the assistant role.
func (s *stream) chunk(text, finish string) error {
	choice := map[string]any{"index": 0, "finish_reason": nil, "logprobs": nil}
	if finish != "" {
		choice["finish_reason"] = finish
	}
	if s.r.chat {
		delta := map[string]any{"content": text}
		if s.chunks == 0 {
			delta["role"] = "assistant"
		}
		choice["delta"] = delta
	} else {
		choice["text"] = text
	}
	s.chunks++
	ev := map[string]any{"id": s.r.id, "object": s.r.object(true), "created": s.r.created, "model": s.r.model, "choices": []any{choice}}
	if s.r.includeUsage {
		ev["usage"] = nil // as OpenAI: every chunk but the last has a null usage
	}
	return s.event(ev)
}

// tokens streams an answer of n tokens, one chunk each with the text next
// gives it (next may wait, as an engine does), the last chunk with the
// finish reason (an answer of no tokens is one empty chunk), then ends the
// stream. It stops at the first error, of next or of the connection.
func (s *stream) tokens(n int, finish string, next func(i int) (string, error)) error {
	if n == 0 {
		if err := s.chunk("", finish); err != nil {
			return err
		}
	}
	for i := range n {
		text, err := next(i)
		if err != nil {
			return err
		}
		last := ""
		if i == n-1 {
			last = finish
		}
		if err := s.chunk(text, last); err != nil {
			return err
		}
	}
	return s.end(n)
}

// call streams a tool call: a chunk naming the call, its arguments in two
// pieces, the finish reason on the last, then the end. next waits as the
// tokens are made.
func (s *stream) call(c *toolCall, tokens int, finish string, next func(i int) error) error {
	// Split at a character's start: a delta is a JSON string, and half a
	// character in each would reach the client as two replacement
	// characters.
	half := len(c.arguments) / 2
	for half > 0 && !utf8.RuneStart(c.arguments[half]) {
		half--
	}
	deltas := []map[string]any{
		{"index": 0, "id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": ""}},
		{"index": 0, "function": map[string]any{"arguments": c.arguments[:half]}},
		{"index": 0, "function": map[string]any{"arguments": c.arguments[half:]}},
	}
	for i, d := range deltas {
		for k := i * tokens / len(deltas); k < (i+1)*tokens/len(deltas); k++ {
			if err := next(k); err != nil {
				return err
			}
		}
		delta := map[string]any{"tool_calls": []any{d}}
		if i == 0 {
			delta["role"] = "assistant"
			delta["content"] = nil
		}
		choice := map[string]any{"index": 0, "delta": delta, "finish_reason": nil, "logprobs": nil}
		if i == len(deltas)-1 {
			choice["finish_reason"] = finish
		}
		ev := map[string]any{"id": s.r.id, "object": s.r.object(true), "created": s.r.created, "model": s.r.model, "choices": []any{choice}}
		if s.r.includeUsage {
			ev["usage"] = nil
		}
		if err := s.event(ev); err != nil {
			return err
		}
	}
	return s.end(tokens)
}

// end writes the usage chunk when the request asked for it, then [DONE].
func (s *stream) end(completion int) error {
	if s.r.includeUsage {
		if err := s.event(map[string]any{"id": s.r.id, "object": s.r.object(true), "created": s.r.created, "model": s.r.model,
			"choices": []any{}, "usage": s.r.usage(completion)}); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprint(s.w, "data: [DONE]\n\n"); err != nil {
		return err
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
