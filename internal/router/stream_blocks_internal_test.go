package router

import (
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
	starts := 0
	for _, e := range events(t, rec.Body.String()) {
		if strings.HasPrefix(e, "content_block_start ") {
			starts++
		}
	}
	if starts > maxStreamBlocks {
		t.Fatalf("%d content blocks sent, more than maxStreamBlocks (%d)", starts, maxStreamBlocks)
	}
}
