package fleetsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// The OpenAI shapes the frontend answers with. A chat request
// (/v1/chat/completions) gets a chat.completion object, or
// chat.completion.chunk events when streamed; a text completion request
// (/v1/completions) gets text_completion objects either way. Every object
// carries created (Unix seconds). A stream puts finish_reason on its last
// content chunk, then, when stream_options.include_usage is set, one chunk
// with no choices and the usage, then data: [DONE].

// Finish reasons.
const (
	finishStop   = "stop"
	finishLength = "length"
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
		Content any `json:"content"`
	} `json:"messages"`
	Prompt any `json:"prompt"`
	Nvext  *struct {
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
