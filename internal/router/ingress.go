package router

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/continuum-router/continuum/internal/dynamo/shim"
)

// Converted ingresses. The Anthropic Messages and Responses APIs are served
// by converting each request into a chat completion request, sending it
// through the same dispatch as a client's chat request (the pin is chosen on
// the converted body), and converting the chat answer back: a buffered
// chat.completion into the ingress's object, a chat.completion.chunk stream
// into the ingress's event sequence. Errors, the router's and the
// upstream's, are written in the ingress's own error shape.

// ingress answers the client of a converted request in its API's shapes.
type ingress interface {
	// fail writes an error the router decided (status, the router's code,
	// the parameter at fault or "", a message).
	fail(w http.ResponseWriter, status int, code, param, message string)
	// upstreamError converts an upstream error answer (non-2xx) into the
	// ingress's error body, for the same status.
	upstreamError(status int, data []byte) []byte
	// answer converts a buffered chat.completion; an error means the
	// upstream answer was not one.
	answer(data []byte) ([]byte, error)
	// stream relays a chat.completion.chunk stream as the ingress's events.
	// It returns a toldInStream when the stream ended with the ingress's
	// error event, else the error of writing to the client, if any.
	stream(w http.ResponseWriter, body io.Reader) error
}

// chatRequest is the chat completion request a converted request becomes.
// The field order is the order of the JSON sent.
type chatRequest struct {
	Model             string          `json:"model"`
	Messages          []chatMessage   `json:"messages"`
	MaxTokens         *int            `json:"max_tokens,omitempty"`
	Temperature       json.RawMessage `json:"temperature,omitempty"`
	TopP              json.RawMessage `json:"top_p,omitempty"`
	TopK              json.RawMessage `json:"top_k,omitempty"`
	Stop              []string        `json:"stop,omitempty"`
	IncludeStopStr    *bool           `json:"include_stop_str_in_output,omitempty"`
	Tools             []chatTool      `json:"tools,omitempty"`
	ToolChoice        any             `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls,omitempty"`
	ResponseFormat    any             `json:"response_format,omitempty"`
	User              string          `json:"user,omitempty"`
	TemplateKwargs    map[string]any  `json:"chat_template_kwargs,omitempty"`
	Stream            bool            `json:"stream,omitempty"`
	StreamOptions     *streamOptions  `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatMessage is one chat message. Content is a string or a list of
// chatParts.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatPart struct {
	Type     string        `json:"type"`
	Text     string        `json:"text,omitempty"`
	ImageURL *chatImageURL `json:"image_url,omitempty"`
}

// MarshalJSON writes a text part's text even when empty: a part of type
// text without one is refused upstream.
func (p chatPart) MarshalJSON() ([]byte, error) {
	if p.Type == "text" {
		return json.Marshal(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{p.Type, p.Text})
	}
	type plain chatPart
	return json.Marshal(plain(p))
}

type chatImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

type chatToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function chatFunctionCall `json:"function"`
}

type chatFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// namedToolChoice is the chat tool_choice naming one function.
func namedToolChoice(name string) map[string]any {
	return map[string]any{"type": "function", "function": map[string]string{"name": name}}
}

// chatCompletion is what a converter reads of a buffered chat answer.
type chatCompletion struct {
	ID      string `json:"id"`
	Choices []struct {
		Message struct {
			Content          json.RawMessage `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			// Reasoning is the same under the name newer servers use
			// (vLLM's, Dynamo's frontend with DYN_REASONING_FIELD_NAME):
			// read when reasoning_content is empty, and only when it is a
			// string (another server's object there is not the answer's
			// fault).
			Reasoning json.RawMessage `json:"reasoning"`
			ToolCalls []chatToolCall  `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
		// StopReason is vLLM's: the stop string that ended the answer (or
		// a token id).
		StopReason json.RawMessage `json:"stop_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// cached is how many of the prompt's tokens the backend reports served
// from its cache (prompt_tokens_details.cached_tokens), within the prompt.
func (u *chatUsage) cached() int {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return min(max(u.PromptTokensDetails.CachedTokens, 0), u.PromptTokens)
}

// reasoning is how many completion tokens were reasoning.
func (u *chatUsage) reasoning() int {
	if u.CompletionTokensDetails == nil {
		return 0
	}
	return min(max(u.CompletionTokensDetails.ReasoningTokens, 0), u.CompletionTokens)
}

// chatChunk is what a converter reads of one chat.completion.chunk.
type chatChunk struct {
	ID      string `json:"id"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        json.RawMessage `json:"reasoning"` // as the message's
			ToolCalls        []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// reasoningText is a message's reasoning: reasoning_content, else
// reasoning when it is a string.
func reasoningText(content string, reasoning json.RawMessage) string {
	if content != "" {
		return content
	}
	var s string
	if len(reasoning) > 0 && reasoning[0] == '"' && json.Unmarshal(reasoning, &s) == nil {
		return s
	}
	return ""
}

// reasoningDelta is a delta's reasoning as reasoningText reads it; nil
// when there is none.
func reasoningDelta(content *string, reasoning json.RawMessage) *string {
	var c string
	if content != nil {
		c = *content
	}
	if r := reasoningText(c, reasoning); r != "" {
		return &r
	}
	return nil
}

// text is a chat message content as text: a string, or the texts of a
// list of parts joined.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return ""
}

// parseArguments is a tool call's arguments as a JSON object; arguments
// that are not an object become {} (the Messages API's input is always an
// object).
func parseArguments(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if strings.TrimSpace(args) == "" || json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return json.RawMessage(`{}`)
	}
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(args)) != nil {
		return json.RawMessage(`{}`)
	}
	return buf.Bytes()
}

// stopMatch finds which stop sequence ended an answer: vLLM's stop_reason
// when it names one, else the one the text ends with (the converted
// request asks the frontend to keep the stop string in the output). It
// returns the text without that sequence.
func stopMatch(text string, stops []string, stopReason json.RawMessage) (string, string, bool) {
	var named string
	if json.Unmarshal(stopReason, &named) == nil && named != "" {
		for _, s := range stops {
			if s == named {
				return strings.TrimSuffix(text, s), s, true
			}
		}
	}
	best := ""
	for _, s := range stops {
		if s != "" && strings.HasSuffix(text, s) && len(s) > len(best) {
			best = s
		}
	}
	if best == "" {
		return text, "", false
	}
	return strings.TrimSuffix(text, best), best, true
}

// stopHold holds back the end of streamed text that may still turn out to
// be a stop sequence: the longest end of the text so far that begins one
// of the stops (or is one, which the stream's end strips). Text that
// cannot begin a stop sequence goes out at once. Each stop has a matcher
// (Knuth-Morris-Pratt) that follows the text byte by byte, so a chunk
// costs its length times the number of stops, whatever their length, and
// the held text is kept in one buffer rather than copied with each chunk.
// A stop starts with a rune's first byte (the request's JSON decodes to
// UTF-8), so the held end never splits a rune.
type stopHold struct {
	stops []string
	// fail[i][j] is the length of the longest proper prefix of stops[i]
	// that is also a suffix of stops[i][:j+1]; at[i] is how much of
	// stops[i] the text's end matches.
	fail [][]int32
	at   []int
	held []byte
}

// newStopHold returns a hold for stops (empty ones ignored), nil for none.
func newStopHold(stops []string) *stopHold {
	h := &stopHold{}
	for _, s := range stops {
		if s == "" {
			continue
		}
		f := make([]int32, len(s))
		for j, k := 1, int32(0); j < len(s); j++ {
			for k > 0 && s[j] != s[k] {
				k = f[k-1]
			}
			if s[j] == s[k] {
				k++
			}
			f[j] = k
		}
		h.stops = append(h.stops, s)
		h.fail = append(h.fail, f)
	}
	if len(h.stops) == 0 {
		return nil
	}
	h.at = make([]int, len(h.stops))
	return h
}

// add takes the next chunk of text and returns what can be sent now (all
// of it without stop sequences).
func (h *stopHold) add(chunk string) string {
	if h == nil {
		return chunk
	}
	keep := 0
	for i, s := range h.stops {
		m, f := h.at[i], h.fail[i]
		for j := 0; j < len(chunk); j++ {
			c := chunk[j]
			if m == len(s) {
				m = int(f[m-1])
			}
			for m > 0 && s[m] != c {
				m = int(f[m-1])
			}
			if s[m] == c {
				m++
			}
		}
		h.at[i] = m
		keep = max(keep, m)
	}
	h.held = append(h.held, chunk...)
	cut := len(h.held) - keep
	send := string(h.held[:cut])
	h.held = h.held[cut:]
	return send
}

// holding reports whether any text is held.
func (h *stopHold) holding() bool { return h != nil && len(h.held) > 0 }

// take returns the text held and lets it go: what follows starts afresh.
func (h *stopHold) take() string {
	if h == nil {
		return ""
	}
	s := string(h.held)
	h.held = h.held[:0]
	clear(h.at)
	return s
}

// upstreamMessage is the message of an upstream error body
// (shim.ErrorMessage), or the body itself.
func upstreamMessage(data []byte) string {
	if m := shim.ErrorMessage(data); m != "" {
		return m
	}
	msg := strings.TrimSpace(string(truncate(data, 512)))
	if msg == "" {
		return "the upstream answered without a body"
	}
	return msg
}

// newID is a random identifier with a prefix, as the APIs spell them.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// sseEvent is one server-sent event read from upstream.
type sseEvent struct {
	name string // the event: field, "" when absent
	data []byte // the data: lines joined
	// keepAlive: a block of comment lines alone (an upstream's keep-alive,
	// as Dynamo's frontend sends during a long silence), no event.
	keepAlive bool
}

// maxSSELine bounds one line of an upstream stream, and maxSSEEvent the
// data of one event, which may come in any number of lines: the reader
// holds an event whole until the blank line that ends it.
const (
	maxSSELine  = 16 << 20
	maxSSEEvent = 16 << 20
)

// errSSEEventTooLarge: an upstream event's data went past maxSSEEvent
// before the blank line that ends it.
var errSSEEventTooLarge = fmt.Errorf("an event is larger than %d MiB", maxSSEEvent>>20)

// sseReader reads server-sent events.
type sseReader struct {
	sc *bufio.Scanner
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxSSELine)
	sc.Split((&sseLines{}).split)
	return &sseReader{sc: sc}
}

// sseLines splits at the line ends server-sent events allow: CR LF, LF,
// or CR alone. The scanner hands split the whole unfinished line again
// after each read; scanned is how much of it was searched already, so that
// a long line (up to maxSSELine) arriving in small reads is searched once,
// not once per read.
type sseLines struct{ scanned int }

func (l *sseLines) split(data []byte, atEOF bool) (advance int, token []byte, err error) {
	i := bytes.IndexAny(data[min(l.scanned, len(data)):], "\r\n")
	if i >= 0 {
		i += min(l.scanned, len(data))
	}
	switch {
	case i < 0:
		if atEOF && len(data) > 0 {
			l.scanned = 0
			return len(data), data, nil
		}
		l.scanned = len(data)
		return 0, nil, nil
	case data[i] == '\n':
		l.scanned = 0
		return i + 1, data[:i], nil
	case i+1 < len(data):
		l.scanned = 0
		if data[i+1] == '\n' {
			return i + 2, data[:i], nil
		}
		return i + 1, data[:i], nil
	case atEOF:
		l.scanned = 0
		return i + 1, data[:i], nil
	}
	l.scanned = i // a CR last: an LF may follow
	return 0, nil, nil
}

// next returns the next event, io.EOF at the end of the stream, or the
// reading error. A block of comments alone comes back as a keep-alive, so
// that the client of a converted stream hears from the router as often as
// the router hears from the upstream.
//
// An event without data is not one, with one exception: an event named
// error whose text comes in comment lines, as Dynamo's frontend writes an
// error met inside an open stream ("event: error" then ": <message>"). It
// is returned with the comments as its data, so that the error reaches the
// client rather than the bare end of the stream.
func (r *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data []byte    // the data lines so far, joined by LF: what they cost is their size
	var comment []byte // the comment lines so far, likewise
	size := 0
	seen := false
	commented := false // a comment line came in this block
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if len(line) == 0 {
			if seen {
				ev.data = data
				return ev, nil
			}
			if ev.name == "error" && len(comment) > 0 {
				ev.data = comment
				return ev, nil
			}
			if commented {
				return sseEvent{keepAlive: true}, nil
			}
			ev.name, comment, size = "", comment[:0], 0
			continue
		}
		if line[0] == ':' {
			commented = true
			// A comment, kept only while no data came (for the error
			// event above).
			if !seen {
				if size += len(line); size > maxSSEEvent {
					return sseEvent{}, errSSEEventTooLarge
				}
				if len(comment) > 0 {
					comment = append(comment, '\n')
				}
				comment = append(comment, bytes.TrimPrefix(line[1:], []byte(" "))...)
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if size += len(value) + 1; size > maxSSEEvent {
				return sseEvent{}, errSSEEventTooLarge
			}
			if seen {
				data = append(data, '\n')
			}
			data = append(data, value...)
			seen = true
		case "event":
			ev.name = string(value)
		}
	}
	if err := r.sc.Err(); err != nil {
		return sseEvent{}, err
	}
	if seen {
		ev.data = data
		return ev, nil
	}
	if ev.name == "error" && len(comment) > 0 {
		ev.data = comment
		return ev, nil
	}
	return sseEvent{}, io.EOF
}

// sseWriter writes named server-sent events and flushes them.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
	err error
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// event buffers one event; flush sends what is buffered.
func (s *sseWriter) event(name string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data = []byte(`{}`)
	}
	if name != "" {
		fmt.Fprintf(&s.buf, "event: %s\n", name)
	}
	s.buf.WriteString("data: ")
	s.buf.Write(data)
	s.buf.WriteString("\n\n")
}

// comment buffers an SSE comment: a line every client's parser skips,
// which keeps an idle stream's connection from timing out.
func (s *sseWriter) comment(text string) {
	s.buf.WriteString(": ")
	s.buf.WriteString(text)
	s.buf.WriteString("\n\n")
}

func (s *sseWriter) flush() error {
	if s.err != nil {
		return s.err
	}
	if s.buf.Len() == 0 {
		return nil
	}
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		s.err = err
		return err
	}
	s.buf.Reset()
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
	return s.err
}

// chatStreamEvent classifies one upstream chat stream event: a chunk, the
// end ([DONE]), or an error the upstream sent inside the stream (an
// "error" event, or a data object with an "error" member).
func chatStreamEvent(ev sseEvent) (chunk *chatChunk, done bool, errMsg string) {
	data := bytes.TrimSpace(ev.data)
	if bytes.Equal(data, []byte("[DONE]")) {
		return nil, true, ""
	}
	var c chatChunk
	if err := json.Unmarshal(data, &c); err != nil {
		if ev.name == "error" {
			return nil, false, upstreamMessage(data)
		}
		return nil, false, "the upstream stream carried an event that is not JSON"
	}
	if ev.name == "error" || (len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null"))) {
		return nil, false, upstreamMessage(data)
	}
	return &c, false, ""
}

// upstreamStatus is the HTTP status an upstream error event carries in
// its error's numeric code (Dynamo's frontend sends {"error":{"message",
// "code":503}}), 500 when it carries none.
func upstreamStatus(data []byte) int {
	var e struct {
		Error struct {
			Code json.Number `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(bytes.TrimSpace(data), &e) == nil {
		if n, err := e.Error.Code.Int64(); err == nil && n >= 400 && n <= 599 {
			return int(n)
		}
	}
	return http.StatusInternalServerError
}

// A converted stream keeps state that grows with the upstream answer: the
// content blocks (Messages) or output items (Responses) it opened, and for
// Responses the whole text and arguments, which its last event repeats.
// maxStreamBlocks bounds the first, maxBufferedResponse (the bound of a
// buffered answer) the second; an answer past either ends with the
// ingress's error event. Real answers have a handful of blocks.
const maxStreamBlocks = 4096

var (
	errTooManyBlocks = fmt.Sprintf("the upstream answer has more than %d content blocks, more than the router converts", maxStreamBlocks)
	errAnswerTooLong = "the upstream answer is larger than the router holds to convert"
)

// chunkSink is an ingress's translation of a chat completion stream.
type chunkSink interface {
	// chunk translates one chunk; a message says why the answer cannot go
	// on (see maxStreamBlocks), "" when it can.
	chunk(c *chatChunk) string
	// finished reports whether a chunk carried a finish reason.
	finished() bool
	// fail ends the client's stream with an error event; status is the
	// HTTP status the error would have had (500 when none is known).
	fail(status int, message string) error
	// keepAlive tells the client the stream is alive, in its API's words,
	// when the upstream sent a keep-alive.
	keepAlive()
}

// toldInStream is how a converted stream that ended with its ingress's
// error event reports it: the client's answer ends in good order, and the
// request failed with status for message (an upstream error event's code,
// 500 when it carries none; 502 when the stream broke off, ended early or
// went past the router's bounds).
type toldInStream struct {
	status  int
	message string
	// upstream: the upstream's own error event ended it, and the rest of
	// its body is the stream's end (the body is neither broken nor
	// running on past a bound).
	upstream bool
}

func (t toldInStream) Error() string { return t.message }

// relayChunks feeds the frontend's chat completion stream to s chunk by
// chunk, flushing sw after each, until [DONE] or the end (or break) of a finished
// stream (nil). A stream that breaks, ends before a finish reason or
// carries an error ends with s.fail, and the error is a toldInStream once
// the client has the error event; any other error is the client's write
// failing.
func relayChunks(body io.Reader, sw *sseWriter, s chunkSink) error {
	rd := newSSEReader(body)
	for {
		ev, err := rd.next()
		if errors.Is(err, io.EOF) {
			if !s.finished() {
				return tell(s, http.StatusBadGateway, "the upstream stream ended before the answer was complete", false)
			}
			return nil
		}
		if err != nil {
			if s.finished() {
				// The answer was complete (a finish reason came): a
				// connection that breaks before [DONE] or the usage
				// chunk costs the client nothing but the usage not yet
				// sent, and the answer ends in good order.
				return nil
			}
			return tell(s, http.StatusBadGateway, "reading the upstream stream: "+errText(err), false) // no addresses
		}
		if ev.keepAlive {
			s.keepAlive()
			if err := sw.flush(); err != nil {
				return err
			}
			continue
		}
		chunk, done, errMsg := chatStreamEvent(ev)
		if errMsg != "" {
			return tell(s, upstreamStatus(ev.data), errMsg, true)
		}
		if done {
			if !s.finished() {
				// [DONE] without a finish reason: the answer was cut
				// (an engine gone mid-stream), not complete.
				return tell(s, http.StatusBadGateway, "the upstream stream ended before the answer was complete", false)
			}
			return nil
		}
		if msg := s.chunk(chunk); msg != "" {
			return tell(s, http.StatusBadGateway, msg, false)
		}
		if err := sw.flush(); err != nil {
			return err
		}
	}
}

// tell ends s's stream with its error event: a toldInStream (upstream:
// relaying the upstream's own error event), or the error of writing the
// event.
func tell(s chunkSink, status int, message string, upstream bool) error {
	if err := s.fail(status, message); err != nil {
		return err
	}
	return toldInStream{status: status, message: message, upstream: upstream}
}

// field is one member of an object.
type field struct {
	key   string
	value any
}

// object is a JSON object written with its members in the order given, as
// the APIs write theirs (type first).
type object []field

// MarshalJSON implements json.Marshaler.
func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.key)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// set replaces the value of key, or adds it at the end.
func (o object) set(key string, v any) object {
	for i := range o {
		if o[i].key == key {
			o[i].value = v
			return o
		}
	}
	return append(o, field{key, v})
}

// clone is a copy of the object (its values shared).
func (o object) clone() object { return append(object(nil), o...) }

// get is the value of key, nil when absent.
func (o object) get(key string) any {
	for _, f := range o {
		if f.key == key {
			return f.value
		}
	}
	return nil
}
