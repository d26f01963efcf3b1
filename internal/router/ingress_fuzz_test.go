package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The Messages and Responses ingresses parse what clients send and
// translate what the frontend answers; both come off the network. Their
// fuzz targets hold each translation to its contract for any input: no
// panic, a converted request that is a chat request for the same model,
// and answers that are valid JSON (buffered) or SSE events whose data are
// valid JSON (streamed).

// checkConverted checks a converted chat request.
func checkConverted(t *testing.T, model string, c *chatRequest, rerr *requestError) {
	t.Helper()
	if rerr != nil {
		if rerr.message == "" {
			t.Fatalf("a refusal without a message (param %q)", rerr.param)
		}
		return
	}
	if c == nil {
		t.Fatal("neither a request nor an error")
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatalf("the converted request does not marshal: %v", err)
	}
	var back struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(out, &back); err != nil || back.Model != model {
		t.Fatalf("converted model %q (%v), want %q", back.Model, err, model)
	}
}

// checkSSE checks that every data line of a stream is valid JSON.
func checkSSE(t *testing.T, body []byte) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && data != "[DONE]" && !json.Valid([]byte(data)) {
			t.Fatalf("an event's data is not JSON: %q", data)
		}
	}
}

// upstreamSeeds are frontend answers: chat completions, stream chunks and
// broken ones.
var upstreamSeeds = []string{
	`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`,
	`{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}]}`,
	`{"choices":[{"message":{"reasoning_content":"think","content":"x"},"finish_reason":"length"}]}`,
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
	"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
	"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
	"data: not json\n\n", `{"object":"list"}`, `null`, ``,
}

func FuzzMessagesRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":1,"system":[{"type":"text","text":"S"}],"stop_sequences":["x"],"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"},"thinking":{"type":"enabled","budget_tokens":1024}}`,
		`{"model":"m","messages":[]}`, `{"model":"m","max_tokens":-1,"messages":[{"role":"system","content":5}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var q anthropicRequest
		if json.Unmarshal(body, &q) != nil {
			return
		}
		for _, count := range []bool{false, true} {
			q2 := q
			c, rerr := convertMessages(&q2, count)
			checkConverted(t, q.Model, c, rerr)
		}
	})
}

func FuzzResponsesRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","instructions":"Be brief.","max_output_tokens":5,"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"data:image/png;base64,AA=="}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"text":{"format":{"type":"json_schema","name":"s","schema":{}}}}`,
		`{"model":"m","previous_response_id":"resp_1","input":"x"}`, `{"model":"m","input":[{"type":"reasoning"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var q responsesRequest
		if json.Unmarshal(body, &q) != nil {
			return
		}
		c, rerr := convertResponses(&q)
		checkConverted(t, q.Model, c, rerr)
	})
}

func FuzzMessagesAnswer(f *testing.F) {
	for _, s := range upstreamSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, thinking bool) {
		a := &anthropicOut{model: "m", stops: []string{"x"}, thinking: thinking, id: fixedIDs("msg_")}
		if out, err := a.answer(data); err == nil && !json.Valid(out) {
			t.Fatalf("the answer is not JSON: %s", out)
		}
		rec := httptest.NewRecorder()
		a = &anthropicOut{model: "m", stops: []string{"x"}, thinking: thinking, id: fixedIDs("msg_")}
		_ = a.stream(rec, bytes.NewReader(data))
		checkSSE(t, rec.Body.Bytes())
	})
}

func FuzzResponsesAnswer(f *testing.F) {
	for _, s := range upstreamSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		q := responsesRequest{Model: "m"}
		o := newResponsesOut(&q, time.Unix(1_800_000_000, 0))
		o.id = prefixIDs()
		if out, err := o.answer(data); err == nil && !json.Valid(out) {
			t.Fatalf("the answer is not JSON: %s", out)
		}
		rec := httptest.NewRecorder()
		o = newResponsesOut(&q, time.Unix(1_800_000_000, 0))
		o.id = prefixIDs()
		_ = o.stream(rec, bytes.NewReader(data))
		checkSSE(t, rec.Body.Bytes())
	})
}
