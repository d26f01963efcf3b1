package router_test

// Tool calls through the Anthropic Messages and OpenAI Responses
// ingresses, end to end through the router against a chat completions
// frontend, their output put together as the official SDKs put it
// together (@anthropic-ai/sdk MessageStream's accumulator, openai's
// ResponseStream's).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/config"
)

// sdkChunk is a chat completion chunk of choice 0 with delta.
func sdkChunk(delta string) string {
	return `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `}]}` + "\n\n"
}

func sdkFinish(reason string) string {
	return `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"` + reason + `"}]}` + "\n\n"
}

const sdkUsage = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":4,"total_tokens":15}}` + "\n\n"

// sdkToolChunk is a tool call piece; id and name only when not empty.
func sdkToolChunk(index int, id, name, args string, withArgs bool) string {
	fn := []string{}
	if name != "" {
		fn = append(fn, `"name":`+strconv.Quote(name))
	}
	if withArgs {
		a, _ := json.Marshal(args)
		fn = append(fn, `"arguments":`+string(a))
	}
	head := ""
	if id != "" {
		head = `"id":` + strconv.Quote(id) + `,"type":"function",`
	}
	return sdkChunk(`{"tool_calls":[{"index":` + strconv.Itoa(index) + `,` + head + `"function":{` + strings.Join(fn, ",") + `}}]}`)
}

// sdkBlock is a Messages content block as the Anthropic SDK's
// MessageStream accumulates it: content_block_start pushes the block,
// each delta adds to the block its index names, and a tool_use block's
// input is its input_json_delta pieces joined and parsed
// (partialParse: JSON.parse of the joined text, which throws on text
// that is not JSON).
type sdkBlock struct {
	Type, ID, Name, Text string
	json                 strings.Builder
	sawJSON              bool
}

// sdkAssembleMessages puts a Messages stream together as the SDK does:
// the blocks and the message_delta's stop reason.
func sdkAssembleMessages(t *testing.T, body string) ([]*sdkBlock, string) {
	t.Helper()
	var blocks []*sdkBlock
	stop := ""
	for _, ev := range sse(t, body) {
		var e struct {
			Type         string `json:"type"`
			Index        int    `json:"index"`
			ContentBlock struct {
				Type, ID, Name, Text string
			} `json:"content_block"`
			Delta struct {
				Type        string  `json:"type"`
				Text        string  `json:"text"`
				PartialJSON string  `json:"partial_json"`
				StopReason  *string `json:"stop_reason"`
			} `json:"delta"`
			Error *struct{ Type, Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(ev[1]), &e); err != nil {
			t.Fatalf("event %s: %v", ev[1], err)
		}
		switch e.Type {
		case "error":
			t.Fatalf("the stream ended in an error event: %s", ev[1])
		case "content_block_start":
			blocks = append(blocks, &sdkBlock{Type: e.ContentBlock.Type, ID: e.ContentBlock.ID, Name: e.ContentBlock.Name, Text: e.ContentBlock.Text})
		case "content_block_delta":
			b := blocks[e.Index]
			switch e.Delta.Type {
			case "text_delta":
				b.Text += e.Delta.Text
			case "input_json_delta":
				b.json.WriteString(e.Delta.PartialJSON)
				b.sawJSON = true
			}
		case "message_delta":
			if e.Delta.StopReason != nil {
				stop = *e.Delta.StopReason
			}
		}
	}
	return blocks, stop
}

// input is a tool_use block's input as the SDK gives it, or an error
// where the SDK's JSON.parse throws.
func (b *sdkBlock) input() (map[string]any, error) {
	if !b.sawJSON || b.json.Len() == 0 {
		return map[string]any{}, nil
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(b.json.String()), &v); err != nil {
		return nil, fmt.Errorf("input %q: %w", b.json.String(), err)
	}
	return v, nil
}

func sdkMessagesStream(t *testing.T, stream string) ([]*sdkBlock, string) {
	t.Helper()
	fe := fixedStreamFrontend(t, stream)
	h := newHarness(t, func(c *config.Config) { c.Backends[0].URL = fe.URL })
	body := fmt.Sprintf(`{"model":%q,"max_tokens":64,"stream":true,"tools":[{"name":"read_file","input_schema":{"type":"object"}}],
		"messages":[{"role":"user","content":"read it"}]}`, model)
	resp, got := h.postTo(t, "/v1/messages", body, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	return sdkAssembleMessages(t, got)
}

// TestMessagesStreamToolIdentityAfterArguments: Dynamo's chat stream may
// give a tool call's arguments before the chunk that carries its id and
// name. The tool_use block must carry the call's name and id whichever
// chunk brought them: a block named "" is a call the client cannot run.
func TestMessagesStreamToolIdentityAfterArguments(t *testing.T) {
	t.Parallel()
	stream := sdkToolChunk(0, "", "", `{"path":"/tmp/a.txt"}`, true) +
		sdkToolChunk(0, "call_0", "read_file", "", false) +
		sdkFinish("tool_calls") + sdkUsage + "data: [DONE]\n\n"
	blocks, stop := sdkMessagesStream(t, stream)
	if len(blocks) != 1 || blocks[0].Type != "tool_use" {
		t.Fatalf("blocks %+v", blocks)
	}
	if blocks[0].Name != "read_file" {
		t.Errorf("tool_use block name %q, want \"read_file\" (the name came in the call's second chunk)", blocks[0].Name)
	}
	if in, err := blocks[0].input(); err != nil || in["path"] != "/tmp/a.txt" {
		t.Errorf("input %v (%v)", in, err)
	}
	if stop != "tool_use" {
		t.Errorf("stop_reason %q", stop)
	}
}

// TestResponsesStreamToolIdentityAfterArguments: the same stream converted
// to a Responses stream: the function_call item is named, with the
// backend's call_id.
func TestResponsesStreamToolIdentityAfterArguments(t *testing.T) {
	t.Parallel()
	stream := sdkToolChunk(0, "", "", `{"path":"/tmp/a.txt"}`, true) +
		sdkToolChunk(0, "call_0", "read_file", "", false) +
		sdkFinish("tool_calls") + sdkUsage + "data: [DONE]\n\n"
	fe := fixedStreamFrontend(t, stream)
	h := newHarness(t, func(c *config.Config) { c.Backends[0].URL = fe.URL })
	body := fmt.Sprintf(`{"model":%q,"stream":true,"input":"read it","tools":[{"type":"function","name":"read_file","parameters":{"type":"object"}}]}`, model)
	resp, got := h.postTo(t, "/v1/responses", body, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	evs := sse(t, got)
	last := evs[len(evs)-1]
	if last[0] != "response.completed" {
		t.Fatalf("ended with %s", last[0])
	}
	var done struct {
		Response struct {
			Output []struct {
				Type      string `json:"type"`
				Name      string `json:"name"`
				CallID    string `json:"call_id"`
				Arguments string `json:"arguments"`
			} `json:"output"`
		} `json:"response"`
	}
	if err := json.Unmarshal([]byte(last[1]), &done); err != nil {
		t.Fatal(err)
	}
	out := done.Response.Output
	if len(out) != 1 || out[0].Type != "function_call" {
		t.Fatalf("output %+v", out)
	}
	if out[0].Name != "read_file" || out[0].Arguments != `{"path":"/tmp/a.txt"}` {
		t.Errorf("function_call name %q arguments %q, want read_file and the arguments", out[0].Name, out[0].Arguments)
	}
	if out[0].CallID != "call_0" {
		t.Errorf("function_call call_id %q, want the backend's call_0 (came in the call's second chunk)", out[0].CallID)
	}
}

// TestMessagesStreamMalformedObjectArguments: arguments that open a JSON
// object but are not JSON (a trailing comma, a raw newline in a string, a
// bare word, as models write them) must not reach the client as they came:
// the SDK parses the joined input_json_delta pieces (JSON.parse) and throws.
// The input is what the buffered answer's is: {} here.
func TestMessagesStreamMalformedObjectArguments(t *testing.T) {
	t.Parallel()
	for _, args := range []string{`{"a":1,}`, "{\"code\":\"line1\nline2\"}", `{"city": Paris}`} {
		t.Run(args, func(t *testing.T) {
			t.Parallel()
			stream := sdkToolChunk(0, "call_0", "read_file", "", true) +
				sdkToolChunk(0, "", "", args, true) +
				sdkFinish("tool_calls") + sdkUsage + "data: [DONE]\n\n"
			blocks, _ := sdkMessagesStream(t, stream)
			if len(blocks) != 1 || blocks[0].Type != "tool_use" {
				t.Fatalf("blocks %+v", blocks)
			}
			if _, err := blocks[0].input(); err != nil {
				t.Errorf("streamed tool_use input is not a JSON object, the SDK's JSON.parse throws: %v", err)
			}
		})
	}
}

// TestMessagesToolUseWithoutToolUseBlock: a chat answer whose finish
// reason is tool_calls but that carries no tool call (a tool parser that
// gave up) is not stop_reason tool_use: a client told to run tools with no
// tool_use block has no turn to send back. It is end_turn, as Dynamo's own
// converter reports it.
func TestMessagesToolUseWithoutToolUseBlock(t *testing.T) {
	t.Parallel()
	t.Run("buffered", func(t *testing.T) {
		t.Parallel()
		fe := fixedFrontend(t, "application/json", `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,
			"message":{"role":"assistant","content":"I will call it."},"finish_reason":"tool_calls"}],
			"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`)
		h := newHarness(t, func(c *config.Config) { c.Backends[0].URL = fe.URL })
		body := fmt.Sprintf(`{"model":%q,"max_tokens":64,"tools":[{"name":"read_file","input_schema":{"type":"object"}}],
			"messages":[{"role":"user","content":"read it"}]}`, model)
		resp, got := h.postTo(t, "/v1/messages", body, nil)
		var m struct {
			StopReason string `json:"stop_reason"`
			Content    []struct{ Type string }
		}
		if resp.StatusCode != 200 || json.Unmarshal([]byte(got), &m) != nil {
			t.Fatalf("%d %s", resp.StatusCode, got)
		}
		if m.StopReason == "tool_use" {
			t.Errorf("stop_reason tool_use with content %+v (no tool_use block): %s", m.Content, got)
		}
	})
	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		stream := sdkChunk(`{"role":"assistant","content":"I will call it."}`) + sdkFinish("tool_calls") + sdkUsage + "data: [DONE]\n\n"
		blocks, stop := sdkMessagesStream(t, stream)
		if stop == "tool_use" {
			t.Errorf("stop_reason tool_use with blocks of types %v (no tool_use block)", func() []string {
				var ts []string
				for _, b := range blocks {
					ts = append(ts, b.Type)
				}
				return ts
			}())
		}
	})
}

// TestMessagesStreamAssembles: a mixed answer (reasoning, text, a tool
// call, text after it) and a stream whose finish reason comes before the
// call's last argument piece both assemble, as the Anthropic SDK's
// accumulator assembles them, into the blocks and input the backend meant.
func TestMessagesStreamAssembles(t *testing.T) {
	t.Parallel()
	mixed := sdkChunk(`{"role":"assistant","reasoning_content":"think"}`) + sdkChunk(`{"content":"Hello"}`) +
		sdkToolChunk(0, "call_1", "read_file", `{"path":"x"}`, true) + sdkChunk(`{"content":"after"}`) +
		sdkFinish("tool_calls") + sdkUsage + "data: [DONE]\n\n"
	fe := fixedStreamFrontend(t, mixed)
	h := newHarness(t, func(c *config.Config) { c.Backends[0].URL = fe.URL })
	body := fmt.Sprintf(`{"model":%q,"max_tokens":64,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"x"}]}`, model)
	_, got := h.postTo(t, "/v1/messages", body, nil)
	blocks, stop := sdkAssembleMessages(t, got)
	var types []string
	for _, b := range blocks {
		types = append(types, b.Type)
	}
	if strings.Join(types, ",") != "thinking,text,tool_use,text" || stop != "tool_use" {
		t.Fatalf("blocks %v, stop %q", types, stop)
	}
	if in, err := blocks[2].input(); err != nil || in["path"] != "x" || blocks[2].Name != "read_file" || blocks[1].Text != "Hello" || blocks[3].Text != "after" {
		t.Errorf("blocks %+v input %v %v", blocks, in, err)
	}

	early := sdkToolChunk(0, "call_1", "read_file", `{"path":`, true) + sdkFinish("tool_calls") +
		sdkToolChunk(0, "", "", `"x"}`, true) + sdkFinish("tool_calls") + sdkUsage + "data: [DONE]\n\n"
	blocks, stop = sdkMessagesStream(t, early)
	if len(blocks) != 1 || stop != "tool_use" {
		t.Fatalf("blocks %+v stop %q", blocks, stop)
	}
	if in, err := blocks[0].input(); err != nil || in["path"] != "x" {
		t.Errorf("input %v (%v)", in, err)
	}
}
