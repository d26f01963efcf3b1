package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// The Responses ingress (POST /v1/responses). A request goes to a backend
// with responses_api: native as it is (pinned by its model alone when the
// backend is a direct-mode frontend of the shim); otherwise it becomes a
// chat completion request and its answer a response object.
//
// Conversion rules:
//   - instructions lead as a system message; input is a string (one user
//     message) or items in order: messages (user; assistant, whose
//     output_text parts are its content; system and developer as system),
//     function_call items as the assistant's tool_calls (consecutive calls,
//     and a call after an assistant message, join that message),
//     function_call_output items as tool messages; reasoning items are
//     dropped.
//   - function tools, tool_choice (auto, none, required, or a named
//     function), max_output_tokens as max_tokens, temperature, top_p,
//     parallel_tool_calls, user, and text.format (json_schema as
//     response_format json_schema, json_object as json_object).
//   - reasoning.effort none or minimal sets chat_template_kwargs
//     enable_thinking false, low, medium, high or xhigh true: the switch of the
//     templates that reason (Qwen3's and others; the rest ignore it). The
//     backend's reasoning_content comes back as a reasoning output item
//     (its text as reasoning_text content, no summary) before the message.
//   - The router keeps no conversation state: previous_response_id,
//     conversation, store: true, background: true and item references are
//     refused (400), as are hosted tools and file inputs.

type responsesRequest struct {
	Model           string            `json:"model"`
	Input           json.RawMessage   `json:"input"`
	Instructions    json.RawMessage   `json:"instructions"`
	Tools           []json.RawMessage `json:"tools"`
	ToolChoice      json.RawMessage   `json:"tool_choice"`
	MaxOutputTokens *int              `json:"max_output_tokens"`
	Temperature     json.RawMessage   `json:"temperature"`
	TopP            json.RawMessage   `json:"top_p"`
	Text            *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	User               string          `json:"user"`
	Stream             bool            `json:"stream"`
	Store              *bool           `json:"store"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Background         *bool           `json:"background"`
	Prompt             json.RawMessage `json:"prompt"`
	Metadata           json.RawMessage `json:"metadata"`
	Reasoning          *struct {
		Effort *string `json:"effort"`
	} `json:"reasoning"`
}

// responsesItem is what the router reads of an input item.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// responsesPart is what the router reads of a message content part.
type responsesPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL string `json:"image_url"`
	Detail   string `json:"detail"`
	FileID   string `json:"file_id"`
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// statefulParam names the first parameter asking for conversation state,
// which the router does not keep.
func statefulParam(q *responsesRequest) string {
	switch {
	case q.PreviousResponseID != nil && *q.PreviousResponseID != "":
		return "previous_response_id"
	case !isNull(q.Conversation):
		return "conversation"
	case q.Store != nil && *q.Store:
		return "store"
	case q.Background != nil && *q.Background:
		return "background"
	case !isNull(q.Prompt):
		return "prompt"
	}
	return ""
}

// convertResponses turns a Responses request into a chat completion
// request.
func convertResponses(q *responsesRequest) (*chatRequest, *requestError) {
	if q.Model == "" {
		return nil, badParam("model", "Field required")
	}
	if p := statefulParam(q); p != "" {
		return nil, badParam(p, "this router keeps no conversation state: send the whole conversation as input (and store: false)")
	}
	if q.MaxOutputTokens != nil && *q.MaxOutputTokens < 1 {
		// An engine asked for no tokens, or fewer, refuses in its own
		// words or answers nothing: refused as the Messages ingress
		// refuses such a max_tokens.
		return nil, badParam("max_output_tokens", "must be at least 1")
	}
	c := &chatRequest{Model: q.Model, MaxTokens: q.MaxOutputTokens, Temperature: q.Temperature, TopP: q.TopP,
		ParallelToolCalls: q.ParallelToolCalls}
	if !parsesAsUUID(q.User) {
		// A UUID would become the engine's request id (see parsesAsUUID).
		c.User = q.User
	}
	if q.Reasoning != nil && q.Reasoning.Effort != nil {
		switch *q.Reasoning.Effort {
		case "none", "minimal":
			c.TemplateKwargs = map[string]any{"enable_thinking": false}
		case "low", "medium", "high", "xhigh":
			c.TemplateKwargs = map[string]any{"enable_thinking": true}
		default:
			return nil, badParam("reasoning.effort", "%q is not one of none, minimal, low, medium, high, xhigh", *q.Reasoning.Effort)
		}
	}
	if !isNull(q.Instructions) {
		var s string
		if err := json.Unmarshal(q.Instructions, &s); err != nil {
			return nil, badParam("instructions", "must be a string")
		}
		c.Messages = append(c.Messages, chatMessage{Role: "system", Content: s})
	}
	if isNull(q.Input) {
		return nil, badParam("input", "Field required")
	}
	var s string
	if json.Unmarshal(q.Input, &s) == nil {
		c.Messages = append(c.Messages, chatMessage{Role: "user", Content: s})
	} else {
		var items []json.RawMessage
		if err := json.Unmarshal(q.Input, &items); err != nil {
			return nil, badParam("input", "must be a string or a list of input items")
		}
		msgs, err := convertItems(items)
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			// A chat request needs a message: an empty list, or items that
			// carry none (reasoning alone), would go upstream as no
			// messages at all.
			return nil, badParam("input", "holds no message: give at least one input item that carries one")
		}
		c.Messages = append(c.Messages, msgs...)
	}
	for i, raw := range q.Tools {
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, badParam(fmt.Sprintf("tools[%d]", i), "not a tool object")
		}
		if t.Type != "function" {
			return nil, badParam(fmt.Sprintf("tools[%d].type", i), "%q tools run on OpenAI's side; this router serves function tools only", t.Type)
		}
		if t.Name == "" {
			return nil, badParam(fmt.Sprintf("tools[%d].name", i), "Field required")
		}
		c.Tools = append(c.Tools, chatTool{Type: "function", Function: chatFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}})
	}
	if !isNull(q.ToolChoice) {
		var mode string
		if json.Unmarshal(q.ToolChoice, &mode) == nil {
			switch mode {
			case "auto", "none", "required":
				c.ToolChoice = mode
			default:
				return nil, badParam("tool_choice", "%q is not one of auto, none, required", mode)
			}
		} else {
			var tc struct {
				Type string `json:"type"`
				Name string `json:"name"`
			}
			if err := json.Unmarshal(q.ToolChoice, &tc); err != nil || tc.Type != "function" || tc.Name == "" {
				return nil, badParam("tool_choice", "must be auto, none, required, or {\"type\": \"function\", \"name\": ...}")
			}
			c.ToolChoice = namedToolChoice(tc.Name)
		}
	}
	if q.Text != nil && !isNull(q.Text.Format) {
		var f struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict"`
			Description string          `json:"description"`
		}
		if err := json.Unmarshal(q.Text.Format, &f); err != nil {
			return nil, badParam("text.format", "not a format object")
		}
		switch f.Type {
		case "text":
		case "json_object":
			c.ResponseFormat = map[string]string{"type": "json_object"}
		case "json_schema":
			if f.Name == "" || isNull(f.Schema) {
				return nil, badParam("text.format", "a json_schema format needs name and schema")
			}
			js := map[string]any{"name": f.Name, "schema": f.Schema}
			if f.Strict != nil {
				js["strict"] = *f.Strict
			}
			if f.Description != "" {
				js["description"] = f.Description
			}
			c.ResponseFormat = map[string]any{"type": "json_schema", "json_schema": js}
		default:
			return nil, badParam("text.format.type", "%q is not one of text, json_object, json_schema", f.Type)
		}
	}
	if q.Stream {
		c.Stream = true
		c.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	return c, nil
}

// convertItems turns input items into chat messages.
func convertItems(items []json.RawMessage) ([]chatMessage, *requestError) {
	var out []chatMessage
	// joinable: the last message is an assistant message that a following
	// function_call item joins.
	joinable := false
	for i, raw := range items {
		p := fmt.Sprintf("input[%d]", i)
		var it responsesItem
		if err := json.Unmarshal(raw, &it); err != nil {
			return nil, badParam(p, "not an input item")
		}
		if it.Type == "" && it.Role != "" {
			it.Type = "message"
		}
		switch it.Type {
		case "message":
			m, err := convertItemMessage(it, p)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
			joinable = m.Role == "assistant"
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return nil, badParam(p, "a function_call item needs call_id and name")
			}
			args := it.Arguments
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			call := chatToolCall{ID: it.CallID, Type: "function", Function: chatFunctionCall{Name: it.Name, Arguments: args}}
			if joinable {
				out[len(out)-1].ToolCalls = append(out[len(out)-1].ToolCalls, call)
			} else {
				out = append(out, chatMessage{Role: "assistant", Content: "", ToolCalls: []chatToolCall{call}})
				joinable = true
			}
		case "function_call_output":
			if it.CallID == "" {
				return nil, badParam(p+".call_id", "Field required")
			}
			text, err := outputText(it.Output, p+".output")
			if err != nil {
				return nil, err
			}
			out = append(out, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: text})
			joinable = false
		case "reasoning":
		case "item_reference":
			return nil, badParam(p, "this router keeps no stored items: send the item itself")
		default:
			return nil, badParam(p+".type", "%q items are not supported by this router", it.Type)
		}
	}
	return out, nil
}

// convertItemMessage turns a message item into a chat message.
func convertItemMessage(it responsesItem, p string) (chatMessage, *requestError) {
	role := it.Role
	switch role {
	case "user", "assistant", "system":
	case "developer":
		role = "system"
	default:
		return chatMessage{}, badParam(p+".role", "%q is not one of user, assistant, system, developer", it.Role)
	}
	var s string
	if json.Unmarshal(it.Content, &s) == nil {
		return chatMessage{Role: role, Content: s}, nil
	}
	var parts []responsesPart
	if err := json.Unmarshal(it.Content, &parts); err != nil {
		return chatMessage{}, badParam(p+".content", "must be a string or a list of content parts")
	}
	var chat []chatPart
	for j, part := range parts {
		pp := fmt.Sprintf("%s.content[%d]", p, j)
		switch part.Type {
		case "input_text", "output_text", "text":
			chat = append(chat, chatPart{Type: "text", Text: part.Text})
		case "refusal":
			chat = append(chat, chatPart{Type: "text", Text: part.Refusal})
		case "input_image":
			if role != "user" {
				return chatMessage{}, badParam(pp, "images are allowed in user messages only")
			}
			if part.ImageURL == "" {
				return chatMessage{}, badParam(pp+".image_url", "give the image as a URL or data: URL (this router keeps no files)")
			}
			chat = append(chat, chatPart{Type: "image_url", ImageURL: &chatImageURL{URL: part.ImageURL, Detail: part.Detail}})
		default:
			return chatMessage{}, badParam(pp+".type", "%q content is not supported by this router", part.Type)
		}
	}
	if role == "user" {
		return chatMessage{Role: role, Content: userContent(chat)}, nil
	}
	texts := make([]string, 0, len(chat))
	for _, c := range chat {
		texts = append(texts, c.Text)
	}
	return chatMessage{Role: role, Content: strings.Join(texts, "\n")}, nil
}

// outputText is a function_call_output's output: a string, or the texts
// of its input_text parts.
func outputText(raw json.RawMessage, p string) (string, *requestError) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []responsesPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badParam(p, "must be a string or a list of content parts")
	}
	var texts []string
	for j, part := range parts {
		if part.Type != "input_text" && part.Type != "output_text" {
			return "", badParam(fmt.Sprintf("%s[%d].type", p, j), "%q is not supported in a function output by this router", part.Type)
		}
		texts = append(texts, part.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// responsesOut answers a converted Responses request.
type responsesOut struct {
	q       *responsesRequest
	created int64
	id      func(prefix string) string
	respID  string
	// maxHeld bounds the text and arguments a stream holds for its last
	// event; 0 is maxBufferedResponse.
	maxHeld int
}

func newResponsesOut(q *responsesRequest, now time.Time) *responsesOut {
	return &responsesOut{q: q, created: now.Unix(), id: newID}
}

func (o *responsesOut) heldLimit() int {
	if o.maxHeld > 0 {
		return o.maxHeld
	}
	return maxBufferedResponse
}

func (o *responsesOut) fail(w http.ResponseWriter, status int, code, param, message string) {
	writeParamError(w, status, code, param, message)
}

// upstreamError keeps an upstream error as it is when it is OpenAI's
// shape, else wraps its message in it.
func (o *responsesOut) upstreamError(status int, data []byte) []byte {
	var e struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error != nil && e.Error.Message != "" {
		return data
	}
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	b, _ := json.Marshal(map[string]apiError{"error": {Message: upstreamMessage(data), Type: typ, Code: CodeUpstream}})
	return append(b, '\n')
}

func raw(v json.RawMessage) any {
	if isNull(v) {
		return nil
	}
	return v
}

func responsesUsage(u *chatUsage) any {
	if u == nil {
		return nil
	}
	return object{{"input_tokens", u.PromptTokens}, {"input_tokens_details", object{{"cached_tokens", u.cached()}}},
		{"output_tokens", u.CompletionTokens}, {"output_tokens_details", object{{"reasoning_tokens", u.reasoning()}}},
		{"total_tokens", u.PromptTokens + u.CompletionTokens}}
}

// response is the response object with status, output and usage; the
// request's settings are echoed.
func (o *responsesOut) response(status string, output []any, usage *chatUsage, incomplete string) object {
	if o.respID == "" {
		o.respID = o.id("resp_")
	}
	q := o.q
	text := object{{"format", object{{"type", "text"}}}}
	if q.Text != nil && !isNull(q.Text.Format) {
		text = object{{"format", q.Text.Format}}
	}
	var details any
	if incomplete != "" {
		details = object{{"reason", incomplete}}
	}
	toolChoice := any("auto")
	if !isNull(q.ToolChoice) {
		toolChoice = q.ToolChoice
	}
	tools := []any{}
	for _, t := range q.Tools {
		tools = append(tools, t)
	}
	parallel := true
	if q.ParallelToolCalls != nil {
		parallel = *q.ParallelToolCalls
	}
	metadata := any(object{})
	if !isNull(q.Metadata) {
		metadata = q.Metadata
	}
	var user any
	if q.User != "" {
		user = q.User
	}
	var effort any
	if q.Reasoning != nil && q.Reasoning.Effort != nil {
		effort = *q.Reasoning.Effort
	}
	return object{{"id", o.respID}, {"object", "response"}, {"created_at", o.created}, {"status", status}, {"error", nil},
		{"incomplete_details", details}, {"instructions", raw(q.Instructions)}, {"max_output_tokens", q.MaxOutputTokens},
		{"model", q.Model}, {"output", output}, {"parallel_tool_calls", parallel}, {"previous_response_id", nil},
		{"reasoning", object{{"effort", effort}, {"summary", nil}}}, {"store", false}, {"temperature", raw(q.Temperature)},
		{"text", text}, {"tool_choice", toolChoice}, {"tools", tools}, {"top_p", raw(q.TopP)}, {"truncation", "disabled"},
		{"usage", responsesUsage(usage)}, {"user", user}, {"metadata", metadata}}
}

// finishStatus is the response status of a chat finish reason, and the
// reason it is incomplete.
func finishStatus(finish string) (string, string) {
	switch finish {
	case "length":
		return "incomplete", "max_output_tokens"
	case "content_filter":
		return "incomplete", "content_filter"
	}
	return "completed", ""
}

func outputTextPart(text string) object {
	return object{{"type", "output_text"}, {"text", text}, {"annotations", []any{}}, {"logprobs", []any{}}}
}

func reasoningTextPart(text string) object {
	return object{{"type", "reasoning_text"}, {"text", text}}
}

// reasoningItem is the model's reasoning (the backend's
// reasoning_content) as its text, with no summary.
func reasoningItem(id, status string, content []any) object {
	return object{{"id", id}, {"type", "reasoning"}, {"status", status}, {"summary", []any{}}, {"content", content}}
}

func messageItem(id, status string, content []any) object {
	return object{{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", content}}
}

func functionCallItem(id, status, callID, name, args string) object {
	return object{{"id", id}, {"type", "function_call"}, {"status", status}, {"call_id", callID}, {"name", name}, {"arguments", args}}
}

// answer converts a buffered chat completion into a response object.
func (o *responsesOut) answer(data []byte) ([]byte, error) {
	var c chatCompletion
	if err := json.Unmarshal(data, &c); err != nil || len(c.Choices) == 0 {
		return nil, errors.New("the upstream answer is not a chat completion")
	}
	ch := c.Choices[0]
	output := []any{}
	if r := reasoningText(ch.Message.ReasoningContent, ch.Message.Reasoning); r != "" {
		output = append(output, reasoningItem(o.id("rs_"), "completed", []any{reasoningTextPart(r)}))
	}
	if text := contentText(ch.Message.Content); text != "" {
		output = append(output, messageItem(o.id("msg_"), "completed", []any{outputTextPart(text)}))
	}
	for _, tc := range ch.Message.ToolCalls {
		args := tc.Function.Arguments
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		callID := tc.ID
		if callID == "" {
			callID = o.id("call_") // as the stream names it
		}
		output = append(output, functionCallItem(o.id("fc_"), "completed", callID, tc.Function.Name, args))
	}
	status, incomplete := finishStatus(ch.FinishReason)
	if n := len(output); n > 0 && status == "incomplete" {
		// The answer was cut in its last item, as the stream marks it.
		output[n-1].(object).set("status", status)
	}
	b, err := json.Marshal(o.response(status, output, c.Usage, incomplete))
	return append(b, '\n'), err
}

// responsesStream converts one chat chunk stream into Responses events:
// response.created and response.in_progress; per output item
// response.output_item.added, then for a message response.content_part.added,
// response.output_text.delta ... response.output_text.done and
// response.content_part.done, for reasoning the same with
// response.reasoning_text.delta and .done, for a function call
// response.function_call_arguments.delta ... .done, then
// response.output_item.done; then response.completed (response.incomplete
// when the answer was cut short). Every event carries its sequence_number.
// An upstream error inside the stream, or a stream cut before its end,
// ends it with response.failed.
type responsesStream struct {
	o   *responsesOut
	sw  *sseWriter
	seq int

	items []object        // the output items so far
	open  int             // the open item's index, -1 for none
	text  strings.Builder // the open message's or reasoning's text
	tools map[int]int     // upstream tool call index → item index
	// args are the function calls' arguments as they came, by item
	// index: set on their items when these are sent whole (appending
	// each delta to the item's string copied it all, per delta).
	args map[int]*strings.Builder
	// unnamed are the function calls whose item is not announced yet:
	// a chat stream may give a call's arguments before the chunk that
	// names it, and an item announced without its name (and call_id) is
	// a call the client cannot run. Its arguments are held meanwhile.
	unnamed map[int]bool
	// calls are the function call items still open beside the open
	// item, in the order they began: a call stays open while the calls
	// after it stream, since a backend may interleave their arguments,
	// and its done events, which clients run the call from, must carry
	// its whole arguments. They are done when a message or reasoning
	// item starts or the answer ends.
	calls  []int
	held   int // bytes of text and arguments held in items
	finish string
	failed bool // the stream ends in response.failed
	usage  *chatUsage
}

// event sends an event of type name with the fields given.
func (s *responsesStream) event(name string, fields ...field) {
	v := append(object{{"type", name}}, fields...)
	v = append(v, field{"sequence_number", s.seq})
	s.seq++
	s.sw.event(name, v)
}

func (o *responsesOut) stream(w http.ResponseWriter, body io.Reader) error {
	s := &responsesStream{o: o, sw: newSSEWriter(w), open: -1, tools: map[int]int{}, args: map[int]*strings.Builder{}, unnamed: map[int]bool{}}
	s.event("response.created", field{"response", o.response("in_progress", []any{}, nil, "")})
	s.event("response.in_progress", field{"response", o.response("in_progress", []any{}, nil, "")})
	if err := s.sw.flush(); err != nil {
		return err
	}
	if err := relayChunks(body, s.sw, s); err != nil {
		return err
	}
	s.close()
	status, incomplete := finishStatus(s.finish)
	output := make([]any, len(s.items))
	for i, it := range s.items {
		output[i] = it
	}
	name := "response.completed"
	if status == "incomplete" {
		name = "response.incomplete"
	}
	s.event(name, field{"response", o.response(status, output, s.usage, incomplete)})
	return s.sw.flush()
}

func (s *responsesStream) finished() bool { return s.finish != "" }

// keepAlive is an SSE comment: the Responses API has no event for it, and
// a comment reaches no client's event handler.
func (s *responsesStream) keepAlive() { s.sw.comment("keep-alive") }

// fail ends the stream with response.failed, its error's code the one the
// Responses API gives the status.
func (s *responsesStream) fail(status int, message string) error {
	s.failed = true
	s.close()
	output := make([]any, len(s.items))
	for i, it := range s.items {
		output[i] = it
	}
	r := s.o.response("failed", output, s.usage, "")
	r = r.set("error", object{{"code", responsesErrorCode(status)}, {"message", message}})
	s.event("response.failed", field{"response", r})
	return s.sw.flush()
}

// responsesErrorCode is a failed response's error code for an HTTP
// status: the Responses API's rate_limit_exceeded for 429, invalid_prompt
// for another 4xx, server_error otherwise.
func responsesErrorCode(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status >= 400 && status <= 499:
		return "invalid_prompt"
	}
	return "server_error"
}

// announce sends a function call's output_item.added, and the arguments
// held while the call had no name in one delta. A call that never gets a
// name is announced without one when its item closes.
func (s *responsesStream) announce(i int) {
	delete(s.unnamed, i)
	it := s.items[i]
	if it.get("call_id") == "" {
		it.set("call_id", s.o.id("call_"))
	}
	s.event("response.output_item.added", field{"output_index", i}, field{"item", it.clone()})
	if b := s.args[i]; b != nil && b.Len() > 0 {
		s.event("response.function_call_arguments.delta", field{"item_id", it.get("id")}, field{"output_index", i},
			field{"delta", b.String()})
	}
}

// close ends the open items: the calls still open, then the open item.
func (s *responsesStream) close() {
	for _, i := range s.calls {
		s.closeItem(i, false)
	}
	s.calls = s.calls[:0]
	if s.open < 0 {
		return
	}
	i := s.open
	s.open = -1
	s.closeItem(i, true)
}

// closeItem ends item i: its done events, with its whole text or
// arguments. last: i is the item the answer ended in.
func (s *responsesStream) closeItem(i int, last bool) {
	if s.unnamed[i] {
		s.announce(i)
	}
	it := s.items[i]
	id := it.get("id")
	switch it.get("type") {
	case "reasoning":
		text := s.text.String()
		s.text.Reset()
		s.event("response.reasoning_text.done", field{"item_id", id}, field{"output_index", i}, field{"content_index", 0},
			field{"text", text})
		part := reasoningTextPart(text)
		s.event("response.content_part.done", field{"item_id", id}, field{"output_index", i}, field{"content_index", 0}, field{"part", part})
		it.set("content", []any{part})
	case "message":
		text := s.text.String()
		s.text.Reset()
		s.event("response.output_text.done", field{"item_id", id}, field{"output_index", i}, field{"content_index", 0},
			field{"text", text}, field{"logprobs", []any{}})
		part := outputTextPart(text)
		s.event("response.content_part.done", field{"item_id", id}, field{"output_index", i}, field{"content_index", 0}, field{"part", part})
		it.set("content", []any{part})
	case "function_call":
		b := s.args[i]
		if b == nil || strings.TrimSpace(b.String()) == "" {
			// A call without arguments has "{}", as in a buffered answer:
			// a client parses them as JSON.
			b = &strings.Builder{}
			b.WriteString("{}")
			s.args[i] = b
			s.event("response.function_call_arguments.delta", field{"item_id", id}, field{"output_index", i}, field{"delta", "{}"})
		}
		it.set("arguments", b.String())
		s.event("response.function_call_arguments.done", field{"item_id", id}, field{"output_index", i},
			field{"name", it.get("name")}, field{"arguments", it.get("arguments")})
	}
	// The item the answer was cut in (max_output_tokens, a content
	// filter) is incomplete, as the response is and as the buffered
	// answer marks its last item.
	status := "completed"
	if last {
		status, _ = finishStatus(s.finish)
	}
	if s.failed {
		status = "incomplete" // cut by the failure
	}
	it.set("status", status)
	s.event("response.output_item.done", field{"output_index", i}, field{"item", it})
}

// textDelta adds delta to the open item of type typ (message or
// reasoning), opening one (its output_item.added and content_part.added)
// when another or none is open, and sends it as an event named name with
// the fields given after the delta.
func (s *responsesStream) textDelta(delta, typ, name string, more ...field) string {
	if s.held += len(delta); s.held > s.o.heldLimit() {
		return errAnswerTooLong
	}
	if s.open < 0 || s.items[s.open].get("type") != typ {
		if len(s.items) >= maxStreamBlocks {
			return errTooManyBlocks
		}
		s.close()
		var it, part object
		if typ == "reasoning" {
			it, part = reasoningItem(s.o.id("rs_"), "in_progress", []any{}), reasoningTextPart("")
		} else {
			it, part = messageItem(s.o.id("msg_"), "in_progress", []any{}), outputTextPart("")
		}
		s.items = append(s.items, it)
		s.open = len(s.items) - 1
		s.event("response.output_item.added", field{"output_index", s.open}, field{"item", it.clone()})
		s.event("response.content_part.added", field{"item_id", it.get("id")}, field{"output_index", s.open}, field{"content_index", 0},
			field{"part", part})
	}
	s.text.WriteString(delta)
	s.event(name, append([]field{{"item_id", s.items[s.open].get("id")}, {"output_index", s.open}, {"content_index", 0}, {"delta", delta}}, more...)...)
	return ""
}

func (s *responsesStream) chunk(c *chatChunk) string {
	if c.Usage != nil {
		s.usage = c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		d := ch.Delta
		if r := reasoningDelta(d.ReasoningContent, d.Reasoning); r != nil {
			if err := s.textDelta(*r, "reasoning", "response.reasoning_text.delta"); err != "" {
				return err
			}
		}
		if d.Content != nil && *d.Content != "" {
			if err := s.textDelta(*d.Content, "message", "response.output_text.delta", field{"logprobs", []any{}}); err != "" {
				return err
			}
		}
		for _, tc := range d.ToolCalls {
			i, ok := s.tools[tc.Index]
			if ok && s.items[i].get("status") != "in_progress" {
				// The call is done (a message or reasoning item began
				// after it): its done events told its arguments, and
				// what comes for it now is dropped, as the Messages
				// stream drops it.
				continue
			}
			if !ok {
				if len(s.items) >= maxStreamBlocks {
					return errTooManyBlocks
				}
				// The call's name and id are held for the closing events
				// too, under the same bound as its arguments.
				if s.held += len(tc.ID) + len(tc.Function.Name); s.held > s.o.heldLimit() {
					return errAnswerTooLong
				}
				if s.open >= 0 && s.items[s.open].get("type") == "function_call" {
					// The call before stays open (see calls), announced
					// first: items are announced in their order.
					if s.unnamed[s.open] {
						s.announce(s.open)
					}
					s.calls = append(s.calls, s.open)
					s.open = -1
				} else {
					s.close()
				}
				it := functionCallItem(s.o.id("fc_"), "in_progress", tc.ID, tc.Function.Name, "")
				s.items = append(s.items, it)
				i = len(s.items) - 1
				s.open = i
				s.tools[tc.Index] = i
				s.unnamed[i] = true
			} else if s.unnamed[i] || s.items[i].get("name") == "" {
				// The call's identity, from a chunk after its first.
				if s.held += len(tc.ID) + len(tc.Function.Name); s.held > s.o.heldLimit() {
					return errAnswerTooLong
				}
				it := s.items[i]
				if it.get("call_id") == "" && tc.ID != "" {
					it.set("call_id", tc.ID)
				}
				if it.get("name") == "" && tc.Function.Name != "" {
					it.set("name", tc.Function.Name)
				}
			}
			if tc.Function.Arguments != "" {
				if s.held += len(tc.Function.Arguments); s.held > s.o.heldLimit() {
					return errAnswerTooLong
				}
				it := s.items[i]
				b := s.args[i]
				if b == nil {
					b = &strings.Builder{}
					s.args[i] = b
				}
				b.WriteString(tc.Function.Arguments)
				if !s.unnamed[i] {
					s.event("response.function_call_arguments.delta", field{"item_id", it.get("id")}, field{"output_index", i},
						field{"delta", tc.Function.Arguments})
				}
			}
			if s.unnamed[i] && s.items[i].get("name") != "" {
				s.announce(i)
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finish = *ch.FinishReason
		}
	}
	return ""
}

// isNative reports whether a backend serves /v1/responses itself.
func isNative(b *Backend) bool { return b.cfg.ResponsesAPI == config.ResponsesAPINative }

// nativeResponses reports whether a Responses request for model goes to
// native backends: when the shim would pin it (a worker serves the model
// in a namespace whose pool has a replica the client may use now), when
// one of those replicas is native; otherwise when a plain backend that
// would take it is native.
func (s *Server) nativeResponses(model string, policy *keyPolicy) bool {
	plan := s.dispatch.Plan()
	now := s.opts.Now()
	usable := func(b *Backend) bool { return policy.allows(b.Name()) && b.Available(now) }
	if plan.Enabled() && s.opts.Registry != nil {
		dyn := plan.Model(model)
		served := map[string]bool{}
		for wk := range s.opts.Registry.Snapshot().Workers.All() {
			if wk.Model == dyn && wk.Role != fleet.RoleUnknown {
				served[wk.ID.Namespace] = true
			}
		}
		cands := plan.Candidates(usable)
		pinned := false
		for _, ns := range cands.Namespaces {
			if !served[ns] {
				continue
			}
			pinned = true
			for _, b := range cands.Of(ns) {
				if isNative(b) {
					return true
				}
			}
		}
		if pinned {
			return false
		}
	}
	return s.nativePlain(model, policy)
}

// nativePlain reports whether a plain backend that may take model for the
// client now is native.
func (s *Server) nativePlain(model string, policy *keyPolicy) bool {
	rt := s.routes.Load()
	plan := rt.plan
	now := s.opts.Now()
	for _, b := range rt.backends {
		if isNative(b) && !b.cfg.Internal && b.cfg.Role == config.RoleUnified && !plan.IsReplica(b) && b.Serves(model) &&
			policy.allows(b.Name()) && b.Available(now) {
			return true
		}
	}
	return false
}

// inputText is the text of a Responses input, for a size estimate.
func inputText(input json.RawMessage) string {
	var s string
	if json.Unmarshal(input, &s) == nil {
		return s
	}
	var items []struct {
		Content   json.RawMessage `json:"content"`
		Arguments string          `json:"arguments"`
		Output    json.RawMessage `json:"output"`
	}
	if json.Unmarshal(input, &items) != nil {
		return ""
	}
	var b strings.Builder
	for _, it := range items {
		for _, raw := range []json.RawMessage{it.Content, it.Output} {
			if t := contentText(raw); t != "" {
				b.WriteString(t)
				b.WriteByte('\n')
			}
		}
		if it.Arguments != "" {
			b.WriteString(it.Arguments)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// responses handles POST /v1/responses.
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	policy, body, ok := s.admit(w, r, writeParamError)
	if !ok {
		return
	}
	var q responsesRequest
	if err := json.Unmarshal(body, &q); err != nil {
		param, problem := bodyProblem(err)
		writeParamError(w, http.StatusBadRequest, CodeBadRequest, param, "the body is not a valid Responses request: "+problem)
		return
	}
	// The model and stream members by their exact names, as the backends
	// read them: encoding/json takes "Model" for model too, and a body
	// passed on as it is would be routed (and its key's policy judged) by
	// a model the backend never sees.
	var exact request
	if err := decodeExact(body, &exact); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "the body is not a valid Responses request: "+err.Error())
		return
	}
	q.Model, q.Stream = exact.Model, exact.Stream
	if q.Model == "" {
		writeParamError(w, http.StatusBadRequest, CodeBadRequest, "model", "model is required")
		return
	}
	if s.nativeResponses(q.Model, policy) {
		// As it is, but never with the client's token data; pinned by the
		// model name alone: no prompt is rendered, scored or estimated
		// from a body the router does not convert, so the workers are
		// chosen by their load as it stands. The dispatch is still booked
		// at the input's estimated size, so that the next picks see it.
		reveal := r.Header[revealHeader] != nil
		x := &exchange{s: s, w: w, r: r, ctx: r.Context(), path: "/v1/responses", body: withoutClientRouting(body, reveal),
			q: &request{Model: q.Model, Stream: q.Stream}, policy: policy,
			reveal: reveal, only: isNative, modelOnly: true, freshPins: true,
			bookTokens: pick.EstimateTokens(instructionsAnd(q.Instructions, inputText(q.Input)))}
		x.route()
		return
	}
	c, rerr := convertResponses(&q)
	if rerr != nil {
		writeParamError(w, http.StatusBadRequest, CodeBadRequest, rerr.param, rerr.message)
		return
	}
	s.sendConverted(w, r, c, policy, newResponsesOut(&q, s.opts.Now()))
}

func instructionsAnd(instructions json.RawMessage, input string) string {
	var s string
	if json.Unmarshal(instructions, &s) == nil && s != "" {
		return s + "\n" + input
	}
	return input
}

// compact handles POST /v1/responses/compact: passed as it is, unpinned,
// to a plain backend with responses_api: native that serves the model
// (the router keeps no conversation to compact itself).
func (s *Server) compact(w http.ResponseWriter, r *http.Request) {
	policy, body, ok := s.admit(w, r, writeParamError)
	if !ok {
		return
	}
	// The model by its exact name, as the backend reads it (the body goes
	// on as it is).
	var q request
	if err := decodeExact(body, &q); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "the body is not a valid request: "+err.Error())
		return
	}
	if q.Model == "" {
		writeParamError(w, http.StatusBadRequest, CodeBadRequest, "model", "model is required")
		return
	}
	if !s.known(q.Model, policy) {
		writeParamError(w, http.StatusNotFound, CodeModelNotFound, "model",
			"the model "+strconvQuote(q.Model)+" does not exist here (GET /v1/models lists the models)")
		return
	}
	if !s.nativePlain(q.Model, policy) {
		writeError(w, http.StatusNotImplemented, CodeNotImplemented,
			"POST /v1/responses/compact goes only to a backend with responses_api: native serving the model (unpinned, not through the shim); none can take "+strconvQuote(q.Model)+" now")
		return
	}
	reveal := r.Header[revealHeader] != nil
	x := &exchange{s: s, w: w, r: r, ctx: r.Context(), path: "/v1/responses/compact", body: withoutClientRouting(body, reveal), q: &request{Model: q.Model},
		policy: policy, reveal: reveal, only: isNative, unpinned: true}
	x.route()
}
