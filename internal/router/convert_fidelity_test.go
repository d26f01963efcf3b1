package router

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// toolCallChunk is a chat completion chunk carrying a piece of tool call
// index's arguments; id and name open the call (its first piece) when set.
func toolCallChunk(index int, id, name, args string) string {
	a, _ := json.Marshal(args)
	head := ""
	if id != "" {
		head = `"id":` + strconv.Quote(id) + `,"type":"function",`
	}
	fn := `"arguments":` + string(a)
	if name != "" {
		fn = `"name":` + strconv.Quote(name) + `,` + fn
	}
	return `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":` + strconv.Itoa(index) + `,` + head + `"function":{` + fn + `}}]}}]}`
}

// toolDelta is an input_json_delta of a converted Messages stream.
type toolDelta struct {
	index   int
	partial string
}

// toolInputDeltas converts a chat completion stream to a Messages stream
// and returns its input_json_delta pieces in order.
func toolInputDeltas(t *testing.T, in string) []toolDelta {
	t.Helper()
	a := &anthropicOut{model: "m", id: fixedIDs("msg_")}
	rec := httptest.NewRecorder()
	if err := a.stream(rec, strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	var out []toolDelta
	for _, ev := range events(t, rec.Body.String()) {
		name, data, _ := strings.Cut(ev, " ")
		if name != "content_block_delta" {
			continue
		}
		var d struct {
			Index int `json:"index"`
			Delta struct {
				Type        string `json:"type"`
				PartialJSON string `json:"partial_json"`
			} `json:"delta"`
		}
		_ = json.Unmarshal([]byte(data), &d)
		if d.Delta.Type == "input_json_delta" {
			out = append(out, toolDelta{d.Index, d.Delta.PartialJSON})
		}
	}
	return out
}

// TestAnthropicStreamToolInputIsAnObject: a streamed tool_use block's
// input, put together from its input_json_delta events as the Anthropic
// SDKs do, is a JSON object, as the buffered answer's input is
// (parseArguments): arguments the backend sent that are not one become {}
// there, and a client's SDK (@anthropic-ai/sdk's partialParse) throws on
// text that is not JSON.
func TestAnthropicStreamToolInputIsAnObject(t *testing.T) {
	t.Parallel()
	for _, args := range []string{`not json`, `[1,2]`, `{"city":"Paris"}}`} {
		t.Run(args, func(t *testing.T) {
			var partial strings.Builder
			for _, d := range toolInputDeltas(t, chunks(toolCallChunk(0, "call_1", "f", args), finishChunk("tool_calls"), usageChunk, "[DONE]")) {
				partial.WriteString(d.partial)
			}
			input := partial.String()
			if input == "" {
				input = "{}" // the content_block_start's input
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal([]byte(input), &obj); err != nil || obj == nil {
				t.Errorf("streamed tool_use input %q is not a JSON object (%v); the buffered answer gives %s", input, err, parseArguments(args))
			}
		})
	}
}

// TestConvertMessagesTextBetweenToolResults: the tool results answering
// one assistant turn stay one run of tool messages, with no user message
// between two of them (strict templates refuse that, as convertMessages'
// own rule for a tool result's images says); the Messages API puts a user
// message's text after its tool results.
func TestConvertMessagesTextBetweenToolResults(t *testing.T) {
	t.Parallel()
	in := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},
	  {"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}},{"type":"tool_use","id":"b","name":"f","input":{}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"A"},{"type":"text","text":"and"},
	    {"type":"tool_result","tool_use_id":"b","content":"B"}]}]}`
	var q anthropicRequest
	if err := json.Unmarshal([]byte(in), &q); err != nil {
		t.Fatal(err)
	}
	c, rerr := convertMessages(&q, false)
	if rerr != nil {
		return // refused, as the Messages API refuses text before a tool result: fine
	}
	var roles []string
	for _, m := range c.Messages {
		roles = append(roles, m.Role)
	}
	for i := 1; i+1 < len(roles); i++ {
		if roles[i] == "user" && roles[i-1] == "tool" && roles[i+1] == "tool" {
			b, _ := json.Marshal(c.Messages)
			t.Errorf("a user message between two tool messages of one turn (%v): %s", roles, b)
		}
	}
}

// brokenAfter reads data, then fails as a connection reset does.
type brokenAfter struct {
	r   *strings.Reader
	err error
}

func (b *brokenAfter) Read(p []byte) (int, error) {
	if b.r.Len() == 0 {
		return 0, b.err
	}
	return b.r.Read(p)
}

// TestConvertedStreamBrokenAfterFinish: an upstream stream that gave its
// finish reason (and usage) has the whole answer; a connection that breaks
// before [DONE] ends it as complete, as an upstream that closes there
// (io.EOF) does, rather than with an error event that makes the client's
// SDK throw the answer away.
func TestConvertedStreamBrokenAfterFinish(t *testing.T) {
	t.Parallel()
	in := chunks(textChunk("Hello"), finishChunk("stop"), usageChunk)
	for _, upErr := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET} {
		a := &anthropicOut{model: "m", id: fixedIDs("msg_")}
		rec := httptest.NewRecorder()
		err := a.stream(rec, &brokenAfter{r: strings.NewReader(in), err: upErr})
		ev := events(t, rec.Body.String())
		if last := ev[len(ev)-1]; err != nil || !strings.HasPrefix(last, "message_stop ") {
			t.Errorf("Messages, upstream %v after the finish: ended with %.90s (%v)", upErr, last, err)
		}
		o := testResponsesOut(t, `{"model":"m","input":"x"}`)
		rec = httptest.NewRecorder()
		err = o.stream(rec, &brokenAfter{r: strings.NewReader(in), err: upErr})
		ev = events(t, rec.Body.String())
		if last := ev[len(ev)-1]; err != nil || !strings.HasPrefix(last, "response.completed ") {
			t.Errorf("Responses, upstream %v after the finish: ended with %.90s (%v)", upErr, last, err)
		}
	}
}

// TestAnthropicStreamToolInputWhole: a call's arguments go out in one
// input_json_delta once the call ends, as the buffered answer's input
// (parseArguments): the pieces joined and compacted when they are one JSON
// object (a brace or quote inside a string does not end it), and nothing
// (the block's {} stands) when something follows the object.
func TestAnthropicStreamToolInputWhole(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pieces []string
		want   []string
	}{
		{[]string{` {"q":"a}`, `b\"}"`, `,"n":[1,{"x":2}]}`}, []string{`{"q":"a}b\"}","n":[1,{"x":2}]}`}},
		{[]string{` {"q":"a}`, `b\"}"`, `,"n":[1,{"x":2}]}`, `}trailing`}, nil},
	} {
		in := []string{toolCallChunk(0, "call_1", "f", c.pieces[0])}
		for _, p := range c.pieces[1:] {
			in = append(in, toolCallChunk(0, "", "", p))
		}
		in = append(in, finishChunk("tool_calls"), usageChunk, "[DONE]")
		var sent []string
		for _, d := range toolInputDeltas(t, chunks(in...)) {
			sent = append(sent, d.partial)
		}
		if strings.Join(sent, "|") != strings.Join(c.want, "|") {
			t.Errorf("pieces %q: sent %q, want %q", c.pieces, sent, c.want)
		}
	}
}

// interleavedCalls is a chat stream of two calls whose arguments
// interleave: call 0's tail ("1}") comes after call 1 began.
func interleavedCalls() string {
	return chunks(
		toolCallChunk(0, "call_a", "f", `{"a":`),
		toolCallChunk(1, "call_b", "g", `{"b":2}`),
		toolCallChunk(0, "", "", `1}`),
		finishChunk("tool_calls"), usageChunk, "[DONE]")
}

// TestAnthropicStreamInterleavedToolArguments: arguments of a call that
// come after the next call's block opened (interleaved calls) still reach
// the first call's block, so that each input joins into its whole object.
func TestAnthropicStreamInterleavedToolArguments(t *testing.T) {
	t.Parallel()
	in := interleavedCalls()
	inputs := map[int]string{}
	for _, d := range toolInputDeltas(t, in) {
		inputs[d.index] += d.partial
	}
	if inputs[0] != `{"a":1}` || inputs[1] != `{"b":2}` {
		t.Errorf("inputs %v, want {\"a\":1} and {\"b\":2}", inputs)
	}
}

// TestResponsesStreamInterleavedCallsDoneWhole: when a backend interleaves
// two calls' arguments, each call's response.function_call_arguments.done
// and response.output_item.done carry its whole arguments (clients such as
// Codex run a function call from its output_item.done), and no event names
// an item after its output_item.done.
func TestResponsesStreamInterleavedCallsDoneWhole(t *testing.T) {
	t.Parallel()
	in := interleavedCalls()
	o := testResponsesOut(t, `{"model":"m","input":"x"}`)
	rec := httptest.NewRecorder()
	if err := o.stream(rec, strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	done := map[string]bool{}
	args := map[string]string{}
	for _, ev := range events(t, rec.Body.String()) {
		name, data, _ := strings.Cut(ev, " ")
		var e struct {
			ItemID    string `json:"item_id"`
			Arguments string `json:"arguments"`
			Item      struct {
				ID        string `json:"id"`
				Arguments string `json:"arguments"`
			} `json:"item"`
		}
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatal(err)
		}
		id := e.ItemID
		if id == "" {
			id = e.Item.ID
		}
		if id != "" && done[id] {
			t.Errorf("%s for %s after its output_item.done", name, id)
		}
		switch name {
		case "response.function_call_arguments.done":
			args[id] = e.Arguments
		case "response.output_item.done":
			done[id] = true
			if e.Item.Arguments != args[id] {
				t.Errorf("%s: output_item.done arguments %q, arguments.done %q", id, e.Item.Arguments, args[id])
			}
		}
	}
	if args["fc_01"] != `{"a":1}` || args["fc_02"] != `{"b":2}` {
		t.Errorf("done arguments %v, want fc_01 {\"a\":1} and fc_02 {\"b\":2}", args)
	}
}
