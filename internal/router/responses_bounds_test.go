package router

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestResponsesToolNamesBounded: a Responses stream holds each function
// call's name and call_id in its items for the closing event, as it holds
// text and arguments; they count towards the same bound (maxBufferedResponse,
// scaled down here), else 4096 items of 16 MiB names each are held and
// repeated in response.completed.
func TestResponsesToolNamesBounded(t *testing.T) {
	t.Parallel()
	o := testResponsesOut(t, `{"model":"m","input":"x"}`)
	o.maxHeld = 4 << 10
	name := strings.Repeat("n", 2<<10)
	var cs []string
	for i := range 8 { // 8 calls × 2 KiB names: 16 KiB held, past 4 KiB
		cs = append(cs, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":"call_%d","type":"function","function":{"name":%q,"arguments":"{}"}}]}}]}`, i, i, name))
	}
	cs = append(cs, finishChunk("tool_calls"), usageChunk, "[DONE]")
	rec := httptest.NewRecorder()
	err := o.stream(rec, strings.NewReader(chunks(cs...)))
	evs := events(t, rec.Body.String())
	last := evs[len(evs)-1]
	if !strings.HasPrefix(last, "response.failed ") || !strings.Contains(last, errAnswerTooLong) {
		t.Fatalf("err %v; a stream holding %d bytes of names past a %d-byte bound ended with %.60s (%d bytes)", err, 8*len(name), o.maxHeld, last, len(last))
	}
}
