package router

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReasoningFieldName: reasoning sent under "reasoning" (vLLM's newer
// name, and Dynamo's frontend's with DYN_REASONING_FIELD_NAME) reaches the
// Messages client as thinking and the Responses client as reasoning, as
// reasoning_content does.
func TestReasoningFieldName(t *testing.T) {
	t.Parallel()
	t.Run("stream", func(t *testing.T) {
		in := chunks(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","reasoning":"6 times 7"},"finish_reason":null}]}`,
			textChunk("42"), finishChunk("stop"), usageChunk, "[DONE]")
		a := &anthropicOut{model: "m", thinking: true, id: fixedIDs("msg_")}
		rec := httptest.NewRecorder()
		if err := a.stream(rec, strings.NewReader(in)); err != nil {
			t.Fatal(err)
		}
		if body := rec.Body.String(); !strings.Contains(body, `"thinking_delta","thinking":"6 times 7"`) {
			t.Errorf("the reasoning sent as delta.reasoning was dropped:\n%s", body)
		}
	})
	t.Run("unary", func(t *testing.T) {
		a := &anthropicOut{model: "m", thinking: true, id: fixedIDs("msg_")}
		got, err := a.answer([]byte(`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"42","reasoning":"6 times 7"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":9,"total_tokens":13}}`))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(got), `"thinking":"6 times 7"`) {
			t.Errorf("the reasoning sent as message.reasoning was dropped: %s", got)
		}
	})
	t.Run("responses stream", func(t *testing.T) {
		in := chunks(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","reasoning":"6 times 7"},"finish_reason":null}]}`,
			textChunk("42"), finishChunk("stop"), usageChunk, "[DONE]")
		o := testResponsesOut(t, `{"model":"m","stream":true,"input":"hi"}`)
		rec := httptest.NewRecorder()
		if err := o.stream(rec, strings.NewReader(in)); err != nil {
			t.Fatal(err)
		}
		if body := rec.Body.String(); !strings.Contains(body, "response.reasoning_text.delta") {
			t.Errorf("the reasoning sent as delta.reasoning was dropped:\n%s", body)
		}
	})
}
