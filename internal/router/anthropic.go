package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The Anthropic Messages ingress (POST /v1/messages, /anthropic/v1/messages
// and their count_tokens): a Messages request becomes a chat completion
// request and its answer a Messages answer.
//
// Request rules:
//   - system (a string or text blocks, joined by newlines) leads as a system
//     message; a message of role system keeps its place.
//   - A user message's text and image blocks go in order into user
//     messages (text alone as a string, with images as content parts; an
//     image's base64 source becomes a data: URL, a url source the URL);
//     each tool_result block becomes a tool message (its text blocks
//     joined; its images follow in a user message), in the order given.
//   - An assistant message's text blocks are its content, its tool_use
//     blocks its tool_calls (input as the arguments' JSON).
//   - thinking and redacted_thinking blocks are dropped: chat templates
//     do not take back a model's reasoning.
//   - tools (input_schema as parameters), tool_choice (auto, any as
//     required, tool as the named function, none; disable_parallel_tool_use
//     as parallel_tool_calls false), max_tokens (required), stop_sequences
//     as stop (with include_stop_str_in_output, so that the matched one can
//     be told), temperature, top_p, top_k (a root field Dynamo's and vLLM's
//     frontends read) and metadata.user_id as user (unless a UUID).
//   - thinking {type: enabled|adaptive} sets chat_template_kwargs
//     enable_thinking true and {type: disabled} false: the switch of the
//     templates that reason (Qwen3's and others that read it; the rest
//     ignore it). The frontend's reasoning_content then comes back as
//     thinking blocks (without a signature); without thinking enabled it is
//     dropped.
//   - Structured output (output_config.format, or the beta's
//     output_format: {type: json_schema, schema}) becomes response_format
//     json_schema (named "output"), as the chat API asks for it.
//   - Server tools (a tools entry with a type other than custom),
//     mcp_servers, container and document, search result or file-source
//     blocks are refused (400): the router runs no tools and keeps no files.

// anthropicRequest is what the router reads of a Messages request.
type anthropicRequest struct {
	Model         string             `json:"model"`
	MaxTokens     *int               `json:"max_tokens"`
	System        json.RawMessage    `json:"system"`
	Messages      []anthropicMessage `json:"messages"`
	Tools         []json.RawMessage  `json:"tools"`
	ToolChoice    json.RawMessage    `json:"tool_choice"`
	StopSequences []string           `json:"stop_sequences"`
	Temperature   json.RawMessage    `json:"temperature"`
	TopP          json.RawMessage    `json:"top_p"`
	TopK          json.RawMessage    `json:"top_k"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	Stream   bool `json:"stream"`
	Thinking *struct {
		Type string `json:"type"`
	} `json:"thinking"`
	// Structured output: output_config.format, or the beta's
	// output_format.
	OutputConfig *struct {
		Format json.RawMessage `json:"format"`
	} `json:"output_config"`
	OutputFormat json.RawMessage `json:"output_format"`
	// Features the router cannot carry out (it runs no tools and no
	// containers): refused rather than dropped, as server tools are.
	MCPServers json.RawMessage `json:"mcp_servers"`
	Container  json.RawMessage `json:"container"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is what the router reads of a request content block.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Source    *anthropicImage `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

type anthropicImage struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

// requestError is a request the router refuses: 400 naming the parameter.
type requestError struct {
	param, message string
}

func (e *requestError) Error() string { return e.param + ": " + e.message }

func badParam(param, format string, args ...any) *requestError {
	return &requestError{param: param, message: fmt.Sprintf(format, args...)}
}

// convertMessages turns a Messages request into a chat completion request.
// count is for count_tokens, where max_tokens is not required.
func convertMessages(q *anthropicRequest, count bool) (*chatRequest, *requestError) {
	if q.Model == "" {
		return nil, badParam("model", "Field required")
	}
	if !count {
		if q.MaxTokens == nil {
			return nil, badParam("max_tokens", "Field required")
		}
		if *q.MaxTokens < 1 {
			return nil, badParam("max_tokens", "must be at least 1")
		}
	}
	if len(q.Messages) == 0 {
		return nil, badParam("messages", "at least one message is required")
	}
	if !isNull(q.MCPServers) {
		return nil, badParam("mcp_servers", "MCP servers are not supported: this router runs no tools")
	}
	if !isNull(q.Container) {
		return nil, badParam("container", "containers are not supported: this router runs no tools")
	}
	c := &chatRequest{Model: q.Model, MaxTokens: q.MaxTokens, Temperature: q.Temperature, TopP: q.TopP, TopK: q.TopK}
	if len(q.System) > 0 && string(q.System) != "null" {
		text, err := textBlocks(q.System, "system")
		if err != nil {
			return nil, err
		}
		c.Messages = append(c.Messages, chatMessage{Role: "system", Content: text})
	}
	for i, m := range q.Messages {
		msgs, err := convertAnthropicMessage(m, fmt.Sprintf("messages.%d", i))
		if err != nil {
			return nil, err
		}
		c.Messages = append(c.Messages, msgs...)
	}
	for i, raw := range q.Tools {
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
			Strict      *bool           `json:"strict"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, badParam(fmt.Sprintf("tools.%d", i), "not a tool object")
		}
		if t.Type != "" && t.Type != "custom" {
			return nil, badParam(fmt.Sprintf("tools.%d.type", i), "%q is a server tool; this router runs none (declare a custom tool with input_schema)", t.Type)
		}
		if t.Name == "" {
			return nil, badParam(fmt.Sprintf("tools.%d.name", i), "Field required")
		}
		if len(t.InputSchema) == 0 {
			return nil, badParam(fmt.Sprintf("tools.%d.input_schema", i), "Field required")
		}
		c.Tools = append(c.Tools, chatTool{Type: "function", Function: chatFunction{Name: t.Name, Description: t.Description, Parameters: t.InputSchema, Strict: t.Strict}})
	}
	if len(q.ToolChoice) > 0 && string(q.ToolChoice) != "null" {
		var tc struct {
			Type                   string `json:"type"`
			Name                   string `json:"name"`
			DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
		}
		if err := json.Unmarshal(q.ToolChoice, &tc); err != nil {
			return nil, badParam("tool_choice", "not a tool choice object")
		}
		switch tc.Type {
		case "auto":
			c.ToolChoice = "auto"
		case "any":
			c.ToolChoice = "required"
		case "none":
			c.ToolChoice = "none"
		case "tool":
			if tc.Name == "" {
				return nil, badParam("tool_choice.name", "Field required")
			}
			c.ToolChoice = namedToolChoice(tc.Name)
		default:
			return nil, badParam("tool_choice.type", "%q is not one of auto, any, tool, none", tc.Type)
		}
		if tc.DisableParallelToolUse != nil && *tc.DisableParallelToolUse && tc.Type != "none" {
			f := false
			c.ParallelToolCalls = &f
		}
	}
	for _, s := range q.StopSequences {
		// As the Messages API refuses it: an engine given an empty stop
		// string refuses the request in its own words or stops at once.
		if s == "" {
			return nil, badParam("stop_sequences", "each stop sequence must be non-empty")
		}
	}
	if len(q.StopSequences) > 0 {
		c.Stop = q.StopSequences
		t := true
		c.IncludeStopStr = &t
	}
	if q.Metadata != nil && !parsesAsUUID(q.Metadata.UserID) {
		c.User = q.Metadata.UserID
	}
	if q.Thinking != nil {
		switch q.Thinking.Type {
		case "enabled", "adaptive":
			c.TemplateKwargs = map[string]any{"enable_thinking": true}
		case "disabled":
			c.TemplateKwargs = map[string]any{"enable_thinking": false}
		default:
			return nil, badParam("thinking.type", "%q is not one of enabled, adaptive, disabled", q.Thinking.Type)
		}
	}
	format, param := q.OutputFormat, "output_format"
	if q.OutputConfig != nil && !isNull(q.OutputConfig.Format) {
		format, param = q.OutputConfig.Format, "output_config.format"
	}
	if !isNull(format) {
		var f struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		}
		if err := json.Unmarshal(format, &f); err != nil {
			return nil, badParam(param, "not a format object")
		}
		if f.Type != "json_schema" {
			return nil, badParam(param+".type", "%q is not json_schema", f.Type)
		}
		if isNull(f.Schema) {
			return nil, badParam(param+".schema", "Field required")
		}
		c.ResponseFormat = map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "output", "schema": f.Schema}}
	}
	if q.Stream {
		c.Stream = true
		c.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	return c, nil
}

// blocks reads a content that is a string (one text block) or a list of
// blocks.
func blocks(raw json.RawMessage, param string) ([]anthropicBlock, *requestError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var list []anthropicBlock
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badParam(param, "must be a string or a list of content blocks")
	}
	return list, nil
}

// textBlocks is a content of text blocks only, joined by newlines.
func textBlocks(raw json.RawMessage, param string) (string, *requestError) {
	list, err := blocks(raw, param)
	if err != nil {
		return "", err
	}
	texts := make([]string, 0, len(list))
	for j, b := range list {
		if b.Type != "text" {
			return "", badParam(fmt.Sprintf("%s.%d.type", param, j), "only text blocks are allowed here, not %q", b.Type)
		}
		texts = append(texts, b.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// userContent is a user message's content: the text alone as a string
// when there is no image, else the parts.
func userContent(parts []chatPart) any {
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type != "text" {
			return parts
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n")
}

func imagePart(src *anthropicImage, param string) (chatPart, *requestError) {
	if src == nil {
		return chatPart{}, badParam(param+".source", "Field required")
	}
	switch src.Type {
	case "base64":
		if src.MediaType == "" || src.Data == "" {
			return chatPart{}, badParam(param+".source", "a base64 image needs media_type and data")
		}
		return chatPart{Type: "image_url", ImageURL: &chatImageURL{URL: "data:" + src.MediaType + ";base64," + src.Data}}, nil
	case "url":
		if src.URL == "" {
			return chatPart{}, badParam(param+".source.url", "Field required")
		}
		return chatPart{Type: "image_url", ImageURL: &chatImageURL{URL: src.URL}}, nil
	}
	return chatPart{}, badParam(param+".source.type", "%q is not supported here: give the image as base64 or url", src.Type)
}

// convertAnthropicMessage turns one Messages message into chat messages.
func convertAnthropicMessage(m anthropicMessage, param string) ([]chatMessage, *requestError) {
	list, err := blocks(m.Content, param+".content")
	if err != nil {
		return nil, err
	}
	switch m.Role {
	case "system":
		text, err := textBlocks(m.Content, param+".content")
		if err != nil {
			return nil, err
		}
		return []chatMessage{{Role: "system", Content: text}}, nil
	case "assistant":
		var texts []string
		var calls []chatToolCall
		for j, b := range list {
			bp := fmt.Sprintf("%s.content.%d", param, j)
			switch b.Type {
			case "text":
				texts = append(texts, b.Text)
			case "tool_use":
				if b.ID == "" || b.Name == "" {
					return nil, badParam(bp, "a tool_use block needs id and name")
				}
				args := "{}"
				if len(b.Input) > 0 && string(b.Input) != "null" {
					var buf bytes.Buffer
					if json.Compact(&buf, b.Input) == nil {
						args = buf.String()
					}
				}
				calls = append(calls, chatToolCall{ID: b.ID, Type: "function", Function: chatFunctionCall{Name: b.Name, Arguments: args}})
			case "thinking", "redacted_thinking":
			default:
				return nil, badParam(bp+".type", "%q blocks are not supported in an assistant message", b.Type)
			}
		}
		return []chatMessage{{Role: "assistant", Content: strings.Join(texts, "\n"), ToolCalls: calls}}, nil
	case "user":
		var out []chatMessage
		// parts is the user content before the first tool result; after
		// it, the tool results' images and then the content that came
		// among or after them (toolParts, later) follow the whole run of
		// tool messages in one user message: a user message between two
		// tool messages answering one assistant turn is refused by strict
		// templates (the Messages API asks for tool results first).
		var parts, toolParts, later []chatPart
		tools := false
		add := func(p chatPart) {
			if tools {
				later = append(later, p)
			} else {
				parts = append(parts, p)
			}
		}
		for j, b := range list {
			bp := fmt.Sprintf("%s.content.%d", param, j)
			switch b.Type {
			case "text":
				add(chatPart{Type: "text", Text: b.Text})
			case "image":
				p, err := imagePart(b.Source, bp)
				if err != nil {
					return nil, err
				}
				add(p)
			case "tool_result":
				if b.ToolUseID == "" {
					return nil, badParam(bp+".tool_use_id", "Field required")
				}
				if !tools && len(parts) > 0 {
					out = append(out, chatMessage{Role: "user", Content: userContent(parts)})
				}
				tools = true
				text, images, err := toolResult(b.Content, bp+".content")
				if err != nil {
					return nil, err
				}
				out = append(out, chatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: text})
				toolParts = append(toolParts, images...)
			case "thinking", "redacted_thinking":
			default:
				return nil, badParam(bp+".type", "%q blocks are not supported in a user message", b.Type)
			}
		}
		if tools {
			parts = append(toolParts, later...)
		}
		if len(parts) > 0 {
			out = append(out, chatMessage{Role: "user", Content: userContent(parts)})
		}
		if len(out) == 0 {
			out = append(out, chatMessage{Role: "user", Content: ""})
		}
		return out, nil
	}
	return nil, badParam(param+".role", "%q is not one of user, assistant, system", m.Role)
}

// toolResult is a tool_result's content: its text, and its images.
func toolResult(raw json.RawMessage, param string) (string, []chatPart, *requestError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	list, err := blocks(raw, param)
	if err != nil {
		return "", nil, err
	}
	var texts []string
	var images []chatPart
	for j, b := range list {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "image":
			p, err := imagePart(b.Source, fmt.Sprintf("%s.%d", param, j))
			if err != nil {
				return "", nil, err
			}
			images = append(images, p)
		default:
			return "", nil, badParam(fmt.Sprintf("%s.%d.type", param, j), "%q blocks are not supported in a tool result", b.Type)
		}
	}
	return strings.Join(texts, "\n"), images, nil
}

// anthropicOut answers a Messages request.
type anthropicOut struct {
	model    string
	stops    []string
	thinking bool // reasoning comes back as thinking blocks
	id       func() string
}

func (a *anthropicOut) messageID() string {
	if a.id != nil {
		return a.id()
	}
	return newID("msg_")
}

// anthropicErrorType is the Messages API's error type of a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

func anthropicErrorObject(typ, message string) object {
	return object{{"type", "error"}, {"error", object{{"type", typ}, {"message", message}}}}
}

func anthropicError(status int, message string) []byte {
	b, _ := json.Marshal(anthropicErrorObject(anthropicErrorType(status), message))
	return append(b, '\n')
}

// fail writes a router error as the Messages API does, with the router's
// code (and the parameter at fault) leading the message. The type is
// Anthropic's for the status, except for a shim refusal for want of a
// prefill worker: its code is the error's type, as it is the code in every
// ingress's error shape.
func (a *anthropicOut) fail(w http.ResponseWriter, status int, code, param, message string) {
	msg := message
	if param != "" {
		msg = param + ": " + msg
	}
	typ := anthropicErrorType(status)
	if code == CodePrefillDecodeUnavailable {
		typ = code
	}
	if code != "" && code != typ {
		msg = code + ": " + msg
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(anthropicErrorObject(typ, msg))
	_, _ = w.Write(append(b, '\n'))
}

func (a *anthropicOut) upstreamError(status int, data []byte) []byte {
	return anthropicError(status, upstreamMessage(data))
}

// anthropicUsage is a Messages usage.
// A prompt's tokens read from the cache are cache_read_input_tokens,
// outside input_tokens, as the Messages API counts them (its input is
// input_tokens plus the cache's). The API always sends both cache counts;
// nothing here writes a cache a client asked for, so its creation count
// is 0.
type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

func usageOf(u *chatUsage) anthropicUsage {
	if u == nil {
		return anthropicUsage{}
	}
	cached := u.cached()
	return anthropicUsage{InputTokens: u.PromptTokens - cached, CacheReadInputTokens: cached, OutputTokens: u.CompletionTokens}
}

// stopReason is the Messages stop reason of a chat finish reason.
func stopReason(finish string, toolCalls bool, matched bool) string {
	switch {
	case finish == "length":
		return "max_tokens"
	case toolCalls:
		// Only with a tool_use block: told to run a tool it was not
		// given, a client has no turn to send back (a chat finish reason
		// of tool_calls without calls is a tool parser that gave up).
		return "tool_use"
	case finish == "content_filter":
		return "refusal"
	case matched:
		return "stop_sequence"
	}
	return "end_turn"
}

func textBlock(text string) object {
	return object{{"type", "text"}, {"text", text}}
}

func thinkingBlock(text string) object {
	return object{{"type", "thinking"}, {"thinking", text}, {"signature", ""}}
}

func toolUseBlock(id, name string, input json.RawMessage) object {
	return object{{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", input}}
}

// message is a Messages message object.
func (a *anthropicOut) message(content []any, stopReason, stopSequence any, usage anthropicUsage) object {
	return object{{"id", a.messageID()}, {"type", "message"}, {"role", "assistant"}, {"model", a.model}, {"content", content},
		{"stop_reason", stopReason}, {"stop_sequence", stopSequence}, {"usage", usage}}
}

// answer converts a buffered chat completion into a Messages message.
func (a *anthropicOut) answer(data []byte) ([]byte, error) {
	var c chatCompletion
	if err := json.Unmarshal(data, &c); err != nil || len(c.Choices) == 0 {
		return nil, errors.New("the upstream answer is not a chat completion")
	}
	ch := c.Choices[0]
	content := []any{}
	if r := reasoningText(ch.Message.ReasoningContent, ch.Message.Reasoning); a.thinking && r != "" {
		content = append(content, thinkingBlock(r))
	}
	text := contentText(ch.Message.Content)
	var seq *string
	matched := false
	if ch.FinishReason == "stop" && len(a.stops) > 0 && len(ch.Message.ToolCalls) == 0 {
		var s string
		if text, s, matched = stopMatch(text, a.stops, ch.StopReason); matched {
			seq = &s
		}
	}
	if text != "" {
		content = append(content, textBlock(text))
	}
	for _, tc := range ch.Message.ToolCalls {
		id := tc.ID
		if id == "" {
			id = newID("toolu_") // as the stream names it: a client answers a tool_use by its id
		}
		content = append(content, toolUseBlock(id, tc.Function.Name, parseArguments(tc.Function.Arguments)))
	}
	out := a.message(content, stopReason(ch.FinishReason, len(ch.Message.ToolCalls) > 0, matched), seq, usageOf(c.Usage))
	b, err := json.Marshal(out)
	return append(b, '\n'), err
}

// anthropicStream converts one chat chunk stream into Messages events:
// message_start and a ping, then per content block content_block_start,
// its deltas (text_delta, thinking_delta, input_json_delta) and
// content_block_stop, then message_delta (stop reason, stop sequence,
// usage) and message_stop. An error the upstream sends inside the stream,
// or a stream cut before its end, becomes an error event that ends it.
type anthropicStream struct {
	a  *anthropicOut
	sw *sseWriter

	blocks    int                 // blocks started
	open      string              // the open block's kind: "", text, thinking, tool
	calls     map[int]*streamCall // by the chunks' tool call index
	pending   []*streamCall       // calls not yet sent, in the order they began
	heldArgs  int                 // bytes held for calls, all of them together
	toolCalls bool                // a tool_use block was sent
	hold      *stopHold           // text held back while it may be a stop sequence (nil: no stops)
	finish    string
	stopRsn   json.RawMessage
	usage     *chatUsage
}

func (a *anthropicOut) stream(w http.ResponseWriter, body io.Reader) error {
	s := &anthropicStream{a: a, sw: newSSEWriter(w), calls: map[int]*streamCall{}}
	s.hold = newStopHold(a.stops)
	s.sw.event("message_start", object{{"type", "message_start"}, {"message", a.message([]any{}, nil, nil, anthropicUsage{})}})
	s.sw.event("ping", object{{"type", "ping"}})
	if err := s.sw.flush(); err != nil {
		return err
	}
	if err := relayChunks(body, s.sw, s); err != nil {
		return err
	}
	s.end()
	return s.sw.flush()
}

func (s *anthropicStream) finished() bool { return s.finish != "" }

// keepAlive is a ping event, the Messages API's own keep-alive.
func (s *anthropicStream) keepAlive() { s.sw.event("ping", object{{"type", "ping"}}) }

// fail ends the stream with an error event, after the text held back for
// a possible stop sequence (the answer it was part of is not ending at a
// stop sequence now, and the client keeps what was generated).
func (s *anthropicStream) fail(status int, message string) error {
	// Calls still held are dropped: the failure may have cut their
	// arguments, and a tool_use block is an instruction to run the tool.
	s.pending = s.pending[:0]
	if s.hold.holding() && !s.opens("text", maxStreamBlocks) {
		s.text(s.hold.take())
	}
	s.sw.event("error", anthropicErrorObject(anthropicErrorType(status), message))
	return s.sw.flush()
}

// start opens a block of kind, closing the open one; the calls still
// held go first, since they began before it.
func (s *anthropicStream) start(kind string, block object) int {
	s.sendCalls()
	return s.begin(kind, block)
}

func (s *anthropicStream) begin(kind string, block object) int {
	s.stop()
	idx := s.blocks
	s.blocks++
	s.open = kind
	s.sw.event("content_block_start", object{{"type", "content_block_start"}, {"index", idx}, {"content_block", block}})
	return idx
}

func (s *anthropicStream) stop() {
	if s.open != "" {
		s.sw.event("content_block_stop", object{{"type", "content_block_stop"}, {"index", s.blocks - 1}})
		s.open = ""
	}
}

func (s *anthropicStream) delta(idx int, typ, key, value string) {
	s.sw.event("content_block_delta", object{{"type", "content_block_delta"}, {"index", idx}, {"delta", object{{"type", typ}, {key, value}}}})
}

// opens reports whether a block of kind would be started for the next
// piece of its kind (none of that kind is open, or calls held must go
// first) and that would take more than n blocks beyond those started.
func (s *anthropicStream) opens(kind string, n int) bool {
	return (s.open != kind || len(s.pending) > 0) && s.blocks+len(s.pending)+1 > n
}

// text sends text in the open text block, opening one if needed (after
// the calls held, which began before it).
func (s *anthropicStream) text(text string) {
	if text == "" {
		return
	}
	if s.open != "text" || len(s.pending) > 0 {
		s.start("text", textBlock(""))
	}
	s.delta(s.blocks-1, "text_delta", "text", text)
}

func (s *anthropicStream) chunk(c *chatChunk) string {
	if c.Usage != nil {
		s.usage = c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		d := ch.Delta
		if r := reasoningDelta(d.ReasoningContent, d.Reasoning); r != nil && s.a.thinking {
			// Text held back for a stop sequence was written before this
			// reasoning, and no stop sequence the answer ends at runs on
			// through it: the text goes out first (after the calls held,
			// in a text block of its own), so the blocks keep the model's
			// order. Its block counts against the bound with the
			// thinking block's.
			need, pending, open := 0, len(s.pending), s.open
			if s.hold.holding() {
				if open != "text" || pending > 0 {
					need += pending + 1
				}
				pending, open = 0, "text"
			}
			if open != "thinking" || pending > 0 {
				need += pending + 1
			}
			if s.blocks+need > maxStreamBlocks {
				return errTooManyBlocks
			}
			s.text(s.hold.take())
			if s.open != "thinking" || len(s.pending) > 0 {
				s.start("thinking", thinkingBlock(""))
			}
			s.delta(s.blocks-1, "thinking_delta", "thinking", *r)
		}
		if d.Content != nil && *d.Content != "" {
			send := s.hold.add(*d.Content)
			if send != "" && s.opens("text", maxStreamBlocks) {
				return errTooManyBlocks
			}
			s.text(send)
		}
		for _, tc := range d.ToolCalls {
			c, ok := s.calls[tc.Index]
			if !ok {
				need := len(s.pending) + 1
				if s.hold.holding() && (s.open != "text" || len(s.pending) > 0) {
					need++ // the held text opens a block before the call's
				}
				if s.blocks+need > maxStreamBlocks {
					return errTooManyBlocks
				}
				s.text(s.hold.take()) // text before a tool call ends no answer
				c = &streamCall{}
				s.calls[tc.Index] = c
				s.pending = append(s.pending, c)
			}
			if !s.holdCall(c, tc.ID, tc.Function.Name, tc.Function.Arguments) {
				return errAnswerTooLong
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finish = *ch.FinishReason
			s.stopRsn = ch.StopReason
		}
	}
	return ""
}

// streamCall is a tool call of the chat stream, held until it is sent
// whole as a tool_use block: its start (id and name), one input_json_delta
// with its input, and its stop. A chat stream may give a call's arguments
// before the chunk that names it, and a model's arguments need not be JSON:
// sent as they came, a block could start without its name, and a client
// that joins and parses the input_json_delta pieces could meet text that is
// not a JSON object. Held whole, the block carries the call's name and id
// whichever chunk brought them, and its input is what a buffered answer's
// is (parseArguments: an object, or {}). A call is sent when a text or
// thinking block starts after it, or at the end of the answer; what comes
// for it after that is dropped.
type streamCall struct {
	id, name string
	args     strings.Builder
	sent     bool
}

// maxHeldArguments bounds what a stream holds for its calls, all of them
// together.
const maxHeldArguments = maxBufferedResponse

// holdCall adds a chunk's piece of c: its id and name when c has none yet,
// and its arguments; false past the bound.
func (s *anthropicStream) holdCall(c *streamCall, id, name, args string) bool {
	if c.sent {
		return true
	}
	if c.id == "" && id != "" {
		c.id = id
		s.heldArgs += len(id)
	}
	if c.name == "" && name != "" {
		c.name = name
		s.heldArgs += len(name)
	}
	c.args.WriteString(args)
	s.heldArgs += len(args)
	return s.heldArgs <= maxHeldArguments
}

// sendCalls sends the calls held, in the order they began.
func (s *anthropicStream) sendCalls() {
	for _, c := range s.pending {
		id := c.id
		if id == "" {
			id = newID("toolu_")
		}
		idx := s.begin("tool", toolUseBlock(id, c.name, json.RawMessage(`{}`)))
		if in := parseArguments(c.args.String()); string(in) != "{}" {
			s.delta(idx, "input_json_delta", "partial_json", string(in))
		}
		c.sent, c.args = true, strings.Builder{}
		s.toolCalls = true
	}
	s.pending = s.pending[:0]
}

// end sends the calls and the text held (without the stop sequence that
// ended the answer), closes the open block and ends the message.
func (s *anthropicStream) end() {
	var seq *string
	matched := false
	text := s.hold.take()
	if s.finish == "stop" && len(s.a.stops) > 0 && !s.toolCalls && len(s.pending) == 0 {
		var m string
		if text, m, matched = stopMatch(text, s.a.stops, s.stopRsn); matched {
			seq = &m
		}
	}
	s.sendCalls()
	s.text(text)
	s.stop()
	s.sw.event("message_delta", object{{"type", "message_delta"},
		{"delta", object{{"stop_reason", stopReason(s.finish, s.toolCalls, matched)}, {"stop_sequence", seq}}},
		{"usage", usageOf(s.usage)}})
	s.sw.event("message_stop", object{{"type", "message_stop"}})
}

// anthropicRequestIDHeader is where the Messages API gives a request's id
// (the Anthropic SDKs read it as the response's request id); the router
// sends its own request id there too.
const anthropicRequestIDHeader = "Request-Id"

func setAnthropicRequestID(w http.ResponseWriter) {
	h := w.Header()
	if id := h[requestIDHeader]; len(id) > 0 {
		h[anthropicRequestIDHeader] = id
	}
}

// messages handles POST /v1/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	setAnthropicRequestID(w)
	out := &anthropicOut{}
	policy, body, ok := s.admit(w, r, out.fail)
	if !ok {
		return
	}
	var q anthropicRequest
	if err := json.Unmarshal(body, &q); err != nil {
		param, problem := bodyProblem(err)
		out.fail(w, http.StatusBadRequest, CodeBadRequest, param, "the body is not a valid Messages request: "+problem)
		return
	}
	c, rerr := convertMessages(&q, false)
	if rerr != nil {
		out.fail(w, http.StatusBadRequest, CodeBadRequest, rerr.param, rerr.message)
		return
	}
	out.model, out.stops = q.Model, q.StopSequences
	out.thinking = q.Thinking != nil && q.Thinking.Type != "disabled"
	s.sendConverted(w, r, c, policy, out)
}

// countTokens handles POST /v1/messages/count_tokens: the converted
// request's prompt, rendered with the model's chat template and encoded
// with its tokenizer, as KV-aware routing loads them.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	setAnthropicRequestID(w)
	out := &anthropicOut{}
	policy, body, ok := s.admit(w, r, out.fail)
	if !ok {
		return
	}
	var q anthropicRequest
	if err := json.Unmarshal(body, &q); err != nil {
		param, problem := bodyProblem(err)
		out.fail(w, http.StatusBadRequest, CodeBadRequest, param, "the body is not a valid count_tokens request: "+problem)
		return
	}
	c, rerr := convertMessages(&q, true)
	if rerr != nil {
		out.fail(w, http.StatusBadRequest, CodeBadRequest, rerr.param, rerr.message)
		return
	}
	if !s.known(q.Model, policy) {
		out.fail(w, http.StatusNotFound, CodeModelNotFound, "model", "the model "+strconvQuote(q.Model)+" does not exist here (GET /v1/models lists the models)")
		return
	}
	n, reason := 0, CountTokensOff
	if s.opts.CountTokens != nil {
		chatBody, _ := json.Marshal(c)
		n, reason = s.opts.CountTokens(s.dispatch.Plan().Model(q.Model), chatBody)
	}
	if reason == CountTokensOff {
		out.fail(w, http.StatusNotImplemented, CodeNotImplemented, "",
			"count_tokens needs KV-aware routing (dynamo.kv.enabled) with the model's tokenizer and chat template pinned and loaded; it is off here")
		return
	}
	switch reason {
	case "":
	case countTokensTooLarge:
		out.fail(w, http.StatusRequestEntityTooLarge, CodeBadRequest, "messages",
			"the prompt is larger than the router renders and counts (1 MiB of text, 1,048,576 tokens)")
		return
	case CountTokensLoading:
		w.Header().Set("Retry-After", "1")
		out.fail(w, http.StatusServiceUnavailable, CodeOverloaded, "",
			"the tokenizer and chat template of model "+strconvQuote(q.Model)+" are still loading: try again in a moment")
		return
	case countTokensRenderFailed:
		// The render's permits were all taken, its time spent, or the
		// template failed on this conversation: not a missing endpoint.
		w.Header().Set("Retry-After", "1")
		out.fail(w, http.StatusServiceUnavailable, CodeOverloaded, "",
			"the prompt could not be rendered and counted now ("+reason+"): the router's renders are busy or the model's chat template failed on it")
		return
	default:
		out.fail(w, http.StatusNotImplemented, CodeNotImplemented, "",
			"the tokenizer and chat template of model "+strconvQuote(q.Model)+" are not loaded ("+reason+"): pin the artifacts its workers declare in dynamo.kv.pinned_artifacts")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"input_tokens": n})
}

// sendConverted sends a converted chat request through the chat dispatch
// and answers through out.
func (s *Server) sendConverted(w http.ResponseWriter, r *http.Request, c *chatRequest, policy *keyPolicy, out ingress) {
	body, err := json.Marshal(c)
	if err != nil {
		out.fail(w, http.StatusInternalServerError, CodeUpstream, "", "converting the request: "+err.Error())
		return
	}
	var q request
	_ = json.Unmarshal(body, &q)
	x := &exchange{s: s, w: w, r: r, ctx: r.Context(), path: "/v1/chat/completions", body: body, q: &q, policy: policy,
		reveal: r.Header[revealHeader] != nil, out: out, freshPins: true}
	x.route()
}

// parsesAsUUID reports whether s is a UUID in any of the spellings Rust's
// uuid crate parses (32 hex digits, hyphenated, braced, urn:uuid:). Dynamo's
// frontend takes a chat request's user that parses so as the request's id,
// and the Messages API suggests a UUID for metadata.user_id: sent on as
// user, one person's concurrent requests would share an engine request id
// (which vLLM refuses while the first runs). Such a user_id is not sent.
func parsesAsUUID(s string) bool {
	if rest, ok := strings.CutPrefix(s, "urn:uuid:"); ok {
		s = rest
	} else if len(s) == 38 && s[0] == '{' && s[37] == '}' {
		s = s[1:37]
	}
	switch len(s) {
	case 32:
		return allHex(s)
	case 36:
		return s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' &&
			allHex(s[:8]) && allHex(s[9:13]) && allHex(s[14:18]) && allHex(s[19:23]) && allHex(s[24:])
	}
	return false
}

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}
