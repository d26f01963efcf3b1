package router

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestMessagesHeldTextAfterHeldCallsBounded: a new tool call while
// calls are held and text is held back for a stop sequence costs a block
// for the held text too (it goes out after the held calls, in a text block
// of its own, even when a text block is open), so the stream never goes
// past maxStreamBlocks.
func TestMessagesHeldTextAfterHeldCallsBounded(t *testing.T) {
	t.Parallel()
	var in []string
	in = append(in, textChunk("hi")) // block 0, open text
	n := maxStreamBlocks - 2         // calls held: blocks+held+1 == maxStreamBlocks
	for i := range n {
		in = append(in, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":"call_%d","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`, i, i))
	}
	in = append(in, textChunk("S")) // held: may begin the stop sequence STOP
	in = append(in, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":"call_x","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`, n))
	in = append(in, finishChunk("tool_calls"), "[DONE]")
	rec := httptest.NewRecorder()
	_ = (&anthropicOut{model: "m", stops: []string{"STOP"}, id: fixedIDs("msg_")}).stream(rec, strings.NewReader(chunks(in...)))
	if starts := blockStarts(t, rec.Body.String()); starts > maxStreamBlocks {
		t.Fatalf("%d content blocks sent, more than maxStreamBlocks (%d)", starts, maxStreamBlocks)
	}
}

// TestMessagesHeldTextBeforeThinking: text held back because it may begin
// a stop sequence goes out in its own text block before a thinking block
// that follows it, not after it in the next text block: the blocks keep
// the order the model wrote them in.
func TestMessagesHeldTextBeforeThinking(t *testing.T) {
	t.Parallel()
	in := chunks(textChunk("Hi E"), `{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}`,
		textChunk("xyz"), finishChunk("stop"), "[DONE]")
	rec := httptest.NewRecorder()
	a := &anthropicOut{model: "m", stops: []string{"END"}, thinking: true, id: fixedIDs("msg_")}
	if err := a.stream(rec, strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	var blocks []string // each block as kind:text
	for _, e := range events(t, rec.Body.String()) {
		switch {
		case strings.HasPrefix(e, "content_block_start "):
			kind := "text"
			if strings.Contains(e, `"type":"thinking"`) {
				kind = "thinking"
			}
			blocks = append(blocks, kind+":")
		case strings.HasPrefix(e, "content_block_delta "):
			_, data, _ := strings.Cut(e, " ")
			var d struct {
				Delta struct{ Text, Thinking string } `json:"delta"`
			}
			_ = json.Unmarshal([]byte(data), &d)
			blocks[len(blocks)-1] += d.Delta.Text + d.Delta.Thinking
		}
	}
	if got, want := strings.Join(blocks, " | "), "text:Hi E | thinking:hmm | text:xyz"; got != want {
		t.Errorf("blocks %q, want %q", got, want)
	}

	// The held text's block counts against the stream's bound with the
	// thinking block's and the held calls' blocks.
	var many []string
	many = append(many, `{"choices":[{"index":0,"delta":{"reasoning_content":"t"}}]}`) // block 0
	n := maxStreamBlocks - 2
	for i := range n {
		many = append(many, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":"call_%d","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`, i, i))
	}
	many = append(many, textChunk("S"), `{"choices":[{"index":0,"delta":{"reasoning_content":"u"}}]}`, finishChunk("stop"), "[DONE]")
	rec = httptest.NewRecorder()
	a = &anthropicOut{model: "m", stops: []string{"STOP"}, thinking: true, id: fixedIDs("msg_")}
	_ = a.stream(rec, strings.NewReader(chunks(many...)))
	if starts := blockStarts(t, rec.Body.String()); starts > maxStreamBlocks {
		t.Fatalf("%d content blocks sent, more than maxStreamBlocks (%d)", starts, maxStreamBlocks)
	}
}

// blockStarts counts the content_block_start events of a Messages stream.
func blockStarts(t *testing.T, body string) int {
	t.Helper()
	starts := 0
	for _, e := range events(t, body) {
		if strings.HasPrefix(e, "content_block_start ") {
			starts++
		}
	}
	return starts
}
