package router

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestConvertResponses: Responses requests and the chat requests they
// become, feature by feature.
func TestConvertResponses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in, want string
	}{
		{"reasoning effort as the templates' thinking switch",
			`{"model":"m","input":"Hi","reasoning":{"effort":"minimal"}}`,
			`{"model":"m","messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":false}}`},
		{"reasoning effort high",
			`{"model":"m","input":"Hi","reasoning":{"effort":"high","summary":"auto"}}`,
			`{"model":"m","messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":true}}`},
		{"a string input and instructions",
			`{"model":"m","instructions":"Be brief.","input":"Hi","max_output_tokens":20,"temperature":0.5,"top_p":1}`,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":20,"temperature":0.5,"top_p":1}`},
		{"message items: roles, parts, images",
			`{"model":"m","input":[{"role":"developer","content":"Formal."},{"type":"message","role":"system","content":[{"type":"input_text","text":"Short."}]},
			  {"role":"user","content":[{"type":"input_text","text":"What is this?"},{"type":"input_image","image_url":"https://example.com/a.png","detail":"low"}]},
			  {"role":"assistant","content":[{"type":"output_text","text":"A cat.","annotations":[]}]},
			  {"role":"user","content":[{"type":"input_text","text":"Sure?"}]}]}`,
			`{"model":"m","messages":[{"role":"system","content":"Formal."},{"role":"system","content":"Short."},
			  {"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"low"}}]},
			  {"role":"assistant","content":"A cat."},{"role":"user","content":"Sure?"}]}`},
		{"function calls join the assistant turn; outputs are tool messages; reasoning dropped",
			`{"model":"m","input":[{"role":"user","content":"Paris and Oslo?"},
			  {"type":"reasoning","id":"rs_1","summary":[]},
			  {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
			  {"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
			  {"type":"function_call","call_id":"call_2","name":"get_weather","arguments":"{\"city\":\"Oslo\"}"},
			  {"type":"function_call_output","call_id":"call_1","output":"Sunny"},
			  {"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"Rain"}]},
			  {"type":"function_call","call_id":"call_3","name":"noop","arguments":""}]}`,
			`{"model":"m","messages":[{"role":"user","content":"Paris and Oslo?"},
			  {"role":"assistant","content":"Checking.","tool_calls":[
			    {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
			    {"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
			  {"role":"tool","content":"Sunny","tool_call_id":"call_1"},{"role":"tool","content":"Rain","tool_call_id":"call_2"},
			  {"role":"assistant","content":"","tool_calls":[{"id":"call_3","type":"function","function":{"name":"noop","arguments":"{}"}}]}]}`},
		{"function tools, a named tool choice, parallel calls off, user, stream",
			`{"model":"m","input":"x","stream":true,"user":"u","parallel_tool_calls":false,"store":false,
			  "tools":[{"type":"function","name":"get_weather","description":"Weather","parameters":{"type":"object"},"strict":true}],
			  "tool_choice":{"type":"function","name":"get_weather"}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],
			  "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object"},"strict":true}}],
			  "tool_choice":{"function":{"name":"get_weather"},"type":"function"},"parallel_tool_calls":false,"user":"u","stream":true,"stream_options":{"include_usage":true}}`},
		{"a user that is a UUID is not sent (Dynamo would make it the request id)",
			`{"model":"m","input":"x","user":"3f0c2a7e-9d1b-4c7e-8a55-0e1f2d3c4b5a"}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}]}`},
		{"tool choice required",
			`{"model":"m","input":"x","tool_choice":"required"}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`},
		{"text.format json_schema as response_format",
			`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"city","schema":{"type":"object","properties":{"name":{"type":"string"}}},"strict":true}}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],
			  "response_format":{"json_schema":{"name":"city","schema":{"type":"object","properties":{"name":{"type":"string"}}},"strict":true},"type":"json_schema"}}`},
		{"text.format json_object; text is nothing",
			`{"model":"m","input":"x","text":{"format":{"type":"json_object"}}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var q responsesRequest
			if err := json.Unmarshal([]byte(tt.in), &q); err != nil {
				t.Fatal(err)
			}
			c, rerr := convertResponses(&q)
			if rerr != nil {
				t.Fatalf("refused: %v", rerr)
			}
			got, _ := json.Marshal(c)
			if want := compactJSON(t, tt.want); string(got) != want {
				t.Errorf("converted\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestConvertResponsesRefusals: state the router does not keep, tools it
// does not run, inputs it cannot convert.
func TestConvertResponsesRefusals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, param, msg string
	}{
		{`{"model":"m","input":[]}`, "input", "holds no message"},
		{`{"model":"m","input":"x","reasoning":{"effort":"extreme"}}`, "reasoning.effort", "not one of"},
		{`{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[]}]}`, "input", "holds no message"},
		{`{"model":"m","input":"x","previous_response_id":"resp_1"}`, "previous_response_id", "no conversation state"},
		{`{"model":"m","input":"x","store":true}`, "store", "no conversation state"},
		{`{"model":"m","input":"x","conversation":"conv_1"}`, "conversation", "no conversation state"},
		{`{"model":"m","input":"x","background":true}`, "background", "no conversation state"},
		{`{"model":"m","input":"x","prompt":{"id":"pmpt_1"}}`, "prompt", "no conversation state"},
		{`{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0]", "no stored items"},
		{`{"model":"m","input":[{"type":"web_search_call","id":"ws_1"}]}`, "input[0].type", "not supported"},
		{`{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`, "input[0].content[0].type", "not supported"},
		{`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]}`, "input[0].content[0].image_url", "no files"},
		{`{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, "tools[0].type", "function tools only"},
		{`{"model":"m","input":"x","tool_choice":"sometimes"}`, "tool_choice", "not one of"},
		{`{"model":"m","input":"x","tool_choice":{"type":"file_search"}}`, "tool_choice", "must be"},
		{`{"model":"m","input":"x","text":{"format":{"type":"json_schema"}}}`, "text.format", "name and schema"},
		{`{"model":"m"}`, "input", "Field required"},
		{`{"model":"m","input":[{"role":"tool","content":"x"}]}`, "input[0].role", "not one of"},
		{`{"model":"m","input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id", "Field required"},
		// A budget of no tokens is refused here, as the Messages ingress
		// refuses max_tokens 0, rather than sent on as max_tokens 0.
		{`{"model":"m","input":"x","max_output_tokens":0}`, "max_output_tokens", "at least 1"},
		{`{"model":"m","input":"x","max_output_tokens":-5}`, "max_output_tokens", "at least 1"},
	} {
		var q responsesRequest
		if err := json.Unmarshal([]byte(tt.in), &q); err != nil {
			t.Fatal(err)
		}
		_, rerr := convertResponses(&q)
		if rerr == nil || rerr.param != tt.param || !strings.Contains(rerr.message, tt.msg) {
			t.Errorf("%s: refusal %v, want %s: ...%s...", tt.in, rerr, tt.param, tt.msg)
		}
	}
}

// prefixIDs numbers identifiers per prefix: resp_01, msg_01, fc_01, ...
func prefixIDs() func(string) string {
	n := map[string]int{}
	return func(prefix string) string {
		n[prefix]++
		return fmt.Sprintf("%s%02d", prefix, n[prefix])
	}
}

func testResponsesOut(t *testing.T, req string) *responsesOut {
	t.Helper()
	var q responsesRequest
	if err := json.Unmarshal([]byte(req), &q); err != nil {
		t.Fatal(err)
	}
	o := newResponsesOut(&q, time.Unix(1_800_000_000, 0))
	o.id = prefixIDs()
	return o
}

// responseObject is the response object a test expects: the request
// echoed as testResponsesOut's requests give it, with status, output,
// details and usage.
func responseObject(status, output, incomplete, usage string) string {
	return `{"id":"resp_01","object":"response","created_at":1800000000,"status":"` + status + `","error":null,"incomplete_details":` + incomplete +
		`,"instructions":null,"max_output_tokens":null,"model":"m","output":` + output + `,"parallel_tool_calls":true,"previous_response_id":null,` +
		`"reasoning":{"effort":null,"summary":null},"store":false,"temperature":null,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],` +
		`"top_p":null,"truncation":"disabled","usage":` + usage + `,"user":null,"metadata":{}}`
}

const responsesUsage1 = `{"input_tokens":11,"input_tokens_details":{"cached_tokens":0},"output_tokens":4,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":15}`

// TestResponsesAnswer: chat completions and the response objects they
// become.
func TestResponsesAnswer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in, want string
	}{
		{"text", `{"choices":[{"message":{"content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":4}}`,
			responseObject("completed", `[{"id":"msg_01","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[],"logprobs":[]}]}]`,
				"null", responsesUsage1)},
		// The backend's reasoning leads as a reasoning item.
		{"reasoning, then text", `{"choices":[{"message":{"content":"Hello","reasoning_content":"Greet back."},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":4}}`,
			responseObject("completed", `[{"id":"rs_01","type":"reasoning","status":"completed","summary":[],"content":[{"type":"reasoning_text","text":"Greet back."}]},
				{"id":"msg_01","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[],"logprobs":[]}]}]`,
				"null", responsesUsage1)},
		{"cut by max_output_tokens", `{"choices":[{"message":{"content":"Hel"},"finish_reason":"length"}],"usage":{"prompt_tokens":11,"completion_tokens":4}}`,
			responseObject("incomplete", `[{"id":"msg_01","type":"message","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"Hel","annotations":[],"logprobs":[]}]}]`,
				`{"reason":"max_output_tokens"}`, responsesUsage1)},
		{"function calls", `{"choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},
			{"id":"call_2","type":"function","function":{"name":"g","arguments":""}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":11,"completion_tokens":4}}`,
			responseObject("completed", `[{"id":"fc_01","type":"function_call","status":"completed","call_id":"call_1","name":"f","arguments":"{\"a\":1}"},
				{"id":"fc_02","type":"function_call","status":"completed","call_id":"call_2","name":"g","arguments":"{}"}]`, "null", responsesUsage1)},
		// A call without an id gets one, as in the stream.
		{"function call without id", `{"choices":[{"message":{"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":11,"completion_tokens":4}}`,
			responseObject("completed", `[{"id":"fc_01","type":"function_call","status":"completed","call_id":"call_01","name":"f","arguments":"{}"}]`, "null", responsesUsage1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := testResponsesOut(t, `{"model":"m","input":"x"}`)
			got, err := o.answer([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if want := compactJSON(t, tt.want); strings.TrimSpace(string(got)) != want {
				t.Errorf("answer\n got %s\nwant %s", got, want)
			}
		})
	}
	// The request's settings are echoed.
	o := testResponsesOut(t, `{"model":"m","input":"x","instructions":"Be brief.","max_output_tokens":9,"temperature":0.3,"top_p":0.8,"user":"u",
		"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"required","parallel_tool_calls":false,
		"text":{"format":{"type":"json_object"}},"metadata":{"k":"v"}}`)
	got, _ := o.answer([]byte(`{"choices":[{"message":{"content":"{}"},"finish_reason":"stop"}]}`))
	var r map[string]json.RawMessage
	_ = json.Unmarshal(got, &r)
	for k, want := range map[string]string{"instructions": `"Be brief."`, "max_output_tokens": "9", "temperature": "0.3", "top_p": "0.8", "user": `"u"`,
		"tools": `[{"type":"function","name":"f","parameters":{"type":"object"}}]`, "tool_choice": `"required"`, "parallel_tool_calls": "false",
		"text": `{"format":{"type":"json_object"}}`, "metadata": `{"k":"v"}`, "usage": "null"} {
		if string(r[k]) != want {
			t.Errorf("%s = %s, want %s", k, r[k], want)
		}
	}
}

// TestResponsesStream: chat chunk streams and the Responses events they
// become, event by event, with their sequence numbers.
func TestResponsesStream(t *testing.T) {
	t.Parallel()
	created := func(seq int, name string) string {
		return name + ` {"type":"` + name + `","response":` + responseObject("in_progress", "[]", "null", "null") + `,"sequence_number":` + fmt.Sprint(seq) + `}`
	}
	msgAdded := `{"id":"msg_01","type":"message","status":"in_progress","role":"assistant","content":[]}`
	msgDone := `{"id":"msg_01","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[],"logprobs":[]}]}`
	// The item the answer was cut in is incomplete, as the response is.
	msgCut := strings.Replace(msgDone, `"status":"completed"`, `"status":"incomplete"`, 1)
	fcDone := `{"id":"fc_01","type":"function_call","status":"completed","call_id":"call_1","name":"f","arguments":"{\"a\":1}"}`
	rsDone := `{"id":"rs_01","type":"reasoning","status":"completed","summary":[],"content":[{"type":"reasoning_text","text":"Greet."}]}`
	for _, tt := range []struct {
		name string
		in   string
		want []string
	}{
		{"text then a function call",
			chunks(textChunk("Hel"), textChunk("lo"),
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}`,
				finishChunk("tool_calls"), usageChunk, "[DONE]"),
			[]string{created(0, "response.created"), created(1, "response.in_progress"),
				`response.output_item.added {"type":"response.output_item.added","output_index":0,"item":` + msgAdded + `,"sequence_number":2}`,
				`response.content_part.added {"type":"response.content_part.added","item_id":"msg_01","output_index":0,"content_index":0,
				  "part":{"type":"output_text","text":"","annotations":[],"logprobs":[]},"sequence_number":3}`,
				`response.output_text.delta {"type":"response.output_text.delta","item_id":"msg_01","output_index":0,"content_index":0,"delta":"Hel","logprobs":[],"sequence_number":4}`,
				`response.output_text.delta {"type":"response.output_text.delta","item_id":"msg_01","output_index":0,"content_index":0,"delta":"lo","logprobs":[],"sequence_number":5}`,
				`response.output_text.done {"type":"response.output_text.done","item_id":"msg_01","output_index":0,"content_index":0,"text":"Hello","logprobs":[],"sequence_number":6}`,
				`response.content_part.done {"type":"response.content_part.done","item_id":"msg_01","output_index":0,"content_index":0,
				  "part":{"type":"output_text","text":"Hello","annotations":[],"logprobs":[]},"sequence_number":7}`,
				`response.output_item.done {"type":"response.output_item.done","output_index":0,"item":` + msgDone + `,"sequence_number":8}`,
				`response.output_item.added {"type":"response.output_item.added","output_index":1,
				  "item":{"id":"fc_01","type":"function_call","status":"in_progress","call_id":"call_1","name":"f","arguments":""},"sequence_number":9}`,
				`response.function_call_arguments.delta {"type":"response.function_call_arguments.delta","item_id":"fc_01","output_index":1,"delta":"{\"a\":","sequence_number":10}`,
				`response.function_call_arguments.delta {"type":"response.function_call_arguments.delta","item_id":"fc_01","output_index":1,"delta":"1}","sequence_number":11}`,
				`response.function_call_arguments.done {"type":"response.function_call_arguments.done","item_id":"fc_01","output_index":1,"name":"f","arguments":"{\"a\":1}","sequence_number":12}`,
				`response.output_item.done {"type":"response.output_item.done","output_index":1,"item":` + fcDone + `,"sequence_number":13}`,
				`response.completed {"type":"response.completed","response":` + responseObject("completed", "["+msgDone+","+fcDone+"]", "null", responsesUsage1) + `,"sequence_number":14}`}},
		{"a function call without arguments has {}, as in a buffered answer",
			chunks(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}}]}`,
				finishChunk("tool_calls"), usageChunk, "[DONE]"),
			[]string{created(0, "response.created"), created(1, "response.in_progress"),
				`response.output_item.added {"type":"response.output_item.added","output_index":0,
				  "item":{"id":"fc_01","type":"function_call","status":"in_progress","call_id":"call_1","name":"f","arguments":""},"sequence_number":2}`,
				`response.function_call_arguments.delta {"type":"response.function_call_arguments.delta","item_id":"fc_01","output_index":0,"delta":"{}","sequence_number":3}`,
				`response.function_call_arguments.done {"type":"response.function_call_arguments.done","item_id":"fc_01","output_index":0,"name":"f","arguments":"{}","sequence_number":4}`,
				`response.output_item.done {"type":"response.output_item.done","output_index":0,"item":` + strings.Replace(fcDone, `{\"a\":1}`, `{}`, 1) + `,"sequence_number":5}`,
				`response.completed {"type":"response.completed","response":` + responseObject("completed", "["+strings.Replace(fcDone, `{\"a\":1}`, `{}`, 1)+"]", "null", responsesUsage1) + `,"sequence_number":6}`}},
		{"reasoning, then text",
			chunks(`{"choices":[{"index":0,"delta":{"reasoning_content":"Gre"}}]}`, `{"choices":[{"index":0,"delta":{"reasoning_content":"et."}}]}`,
				textChunk("Hello"), finishChunk("stop"), usageChunk, "[DONE]"),
			[]string{created(0, "response.created"), created(1, "response.in_progress"),
				`response.output_item.added {"type":"response.output_item.added","output_index":0,
				  "item":{"id":"rs_01","type":"reasoning","status":"in_progress","summary":[],"content":[]},"sequence_number":2}`,
				`response.content_part.added {"type":"response.content_part.added","item_id":"rs_01","output_index":0,"content_index":0,
				  "part":{"type":"reasoning_text","text":""},"sequence_number":3}`,
				`response.reasoning_text.delta {"type":"response.reasoning_text.delta","item_id":"rs_01","output_index":0,"content_index":0,"delta":"Gre","sequence_number":4}`,
				`response.reasoning_text.delta {"type":"response.reasoning_text.delta","item_id":"rs_01","output_index":0,"content_index":0,"delta":"et.","sequence_number":5}`,
				`response.reasoning_text.done {"type":"response.reasoning_text.done","item_id":"rs_01","output_index":0,"content_index":0,"text":"Greet.","sequence_number":6}`,
				`response.content_part.done {"type":"response.content_part.done","item_id":"rs_01","output_index":0,"content_index":0,
				  "part":{"type":"reasoning_text","text":"Greet."},"sequence_number":7}`,
				`response.output_item.done {"type":"response.output_item.done","output_index":0,"item":` + rsDone + `,"sequence_number":8}`,
				`response.output_item.added {"type":"response.output_item.added","output_index":1,"item":` + msgAdded + `,"sequence_number":9}`,
				`response.content_part.added {"type":"response.content_part.added","item_id":"msg_01","output_index":1,"content_index":0,
				  "part":{"type":"output_text","text":"","annotations":[],"logprobs":[]},"sequence_number":10}`,
				`response.output_text.delta {"type":"response.output_text.delta","item_id":"msg_01","output_index":1,"content_index":0,"delta":"Hello","logprobs":[],"sequence_number":11}`,
				`response.output_text.done {"type":"response.output_text.done","item_id":"msg_01","output_index":1,"content_index":0,"text":"Hello","logprobs":[],"sequence_number":12}`,
				`response.content_part.done {"type":"response.content_part.done","item_id":"msg_01","output_index":1,"content_index":0,
				  "part":{"type":"output_text","text":"Hello","annotations":[],"logprobs":[]},"sequence_number":13}`,
				`response.output_item.done {"type":"response.output_item.done","output_index":1,"item":` + msgDone + `,"sequence_number":14}`,
				`response.completed {"type":"response.completed","response":` + responseObject("completed", "["+rsDone+","+msgDone+"]", "null", responsesUsage1) + `,"sequence_number":15}`}},
		{"cut by max_output_tokens: response.incomplete",
			chunks(textChunk("Hello"), finishChunk("length"), usageChunk, "[DONE]"),
			[]string{created(0, "response.created"), created(1, "response.in_progress"),
				`response.output_item.added {"type":"response.output_item.added","output_index":0,"item":` + msgAdded + `,"sequence_number":2}`,
				`response.content_part.added {"type":"response.content_part.added","item_id":"msg_01","output_index":0,"content_index":0,
				  "part":{"type":"output_text","text":"","annotations":[],"logprobs":[]},"sequence_number":3}`,
				`response.output_text.delta {"type":"response.output_text.delta","item_id":"msg_01","output_index":0,"content_index":0,"delta":"Hello","logprobs":[],"sequence_number":4}`,
				`response.output_text.done {"type":"response.output_text.done","item_id":"msg_01","output_index":0,"content_index":0,"text":"Hello","logprobs":[],"sequence_number":5}`,
				`response.content_part.done {"type":"response.content_part.done","item_id":"msg_01","output_index":0,"content_index":0,
				  "part":{"type":"output_text","text":"Hello","annotations":[],"logprobs":[]},"sequence_number":6}`,
				`response.output_item.done {"type":"response.output_item.done","output_index":0,"item":` + msgCut + `,"sequence_number":7}`,
				`response.incomplete {"type":"response.incomplete","response":` + responseObject("incomplete", "["+msgCut+"]", `{"reason":"max_output_tokens"}`, responsesUsage1) + `,"sequence_number":8}`}},
		{"an error inside the stream: response.failed",
			chunks(`{"error":{"message":"engine crashed"}}`),
			[]string{created(0, "response.created"), created(1, "response.in_progress"),
				`response.failed {"type":"response.failed","response":` + strings.Replace(responseObject("failed", "[]", "null", "null"),
					`"error":null`, `"error":{"code":"server_error","message":"engine crashed"}`, 1) + `,"sequence_number":2}`}},
		{"an error after some text: the item it cut is incomplete",
			chunks(textChunk("Hello"), `{"error":{"message":"engine crashed"}}`),
			[]string{created(0, "response.created"), created(1, "response.in_progress"),
				`response.output_item.added {"type":"response.output_item.added","output_index":0,"item":` + msgAdded + `,"sequence_number":2}`,
				`response.content_part.added {"type":"response.content_part.added","item_id":"msg_01","output_index":0,"content_index":0,
				  "part":{"type":"output_text","text":"","annotations":[],"logprobs":[]},"sequence_number":3}`,
				`response.output_text.delta {"type":"response.output_text.delta","item_id":"msg_01","output_index":0,"content_index":0,"delta":"Hello","logprobs":[],"sequence_number":4}`,
				`response.output_text.done {"type":"response.output_text.done","item_id":"msg_01","output_index":0,"content_index":0,"text":"Hello","logprobs":[],"sequence_number":5}`,
				`response.content_part.done {"type":"response.content_part.done","item_id":"msg_01","output_index":0,"content_index":0,
				  "part":{"type":"output_text","text":"Hello","annotations":[],"logprobs":[]},"sequence_number":6}`,
				`response.output_item.done {"type":"response.output_item.done","output_index":0,"item":` + msgCut + `,"sequence_number":7}`,
				`response.failed {"type":"response.failed","response":` + strings.Replace(responseObject("failed", "["+msgCut+"]", "null", "null"),
					`"error":null`, `"error":{"code":"server_error","message":"engine crashed"}`, 1) + `,"sequence_number":8}`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := testResponsesOut(t, `{"model":"m","input":"x"}`)
			rec := httptest.NewRecorder()
			err := o.stream(rec, strings.NewReader(tt.in))
			endedTelling(t, err, strings.HasPrefix(tt.want[len(tt.want)-1], "response.failed "))
			sameEvents(t, events(t, rec.Body.String()), wantEvents(t, tt.want...))
		})
	}
}

// TestResponsesStreamDoneBeforeFinish: a chat stream that ends with
// [DONE] but never gave a finish reason was cut (an engine gone
// mid-stream): the response fails instead of completing.
func TestResponsesStreamDoneBeforeFinish(t *testing.T) {
	t.Parallel()
	o := testResponsesOut(t, `{"model":"m","input":"x"}`)
	rec := httptest.NewRecorder()
	err := o.stream(rec, strings.NewReader(chunks(textChunk("Hel"), "[DONE]")))
	endedTelling(t, err, true)
	ev := events(t, rec.Body.String())
	if last := ev[len(ev)-1]; !strings.HasPrefix(last, "response.failed ") {
		t.Fatalf("ended with %.80s", last)
	}
}

// TestStreamHelpers: the stop sequence match and the hold-back keep whole
// runes and the longest match.
func TestStreamHelpers(t *testing.T) {
	t.Parallel()
	if text, seq, ok := stopMatch("abc END", []string{"D", "END"}, nil); !ok || seq != "END" || text != "abc " {
		t.Errorf("longest match: %q %q %v", text, seq, ok)
	}
	if _, _, ok := stopMatch("abc", []string{"x"}, json.RawMessage(`128001`)); ok {
		t.Error("a stop token id is no stop sequence")
	}
	for _, tc := range []struct {
		pending    string
		stops      []string
		send, held string
	}{
		{"Hello ", []string{"END"}, "Hello ", ""},             // nothing that may begin one: all of it at once
		{"world E", []string{"END"}, "world ", "E"},           // the start of one
		{"xEN", []string{"END"}, "x", "EN"},                   // more of it
		{"xEND", []string{"END"}, "x", "END"},                 // all of it, stripped at the end
		{"ENDx", []string{"END"}, "ENDx", ""},                 // past it: not a stop
		{"a\n\nH", []string{"\n\nHuman:", "D"}, "a", "\n\nH"}, // the longest end that may begin one
		{"héé", []string{"éx"}, "hé", "é"},                    // whole runes
		{"aaa", []string{"aa"}, "a", "aa"},                    // within the longest stop's length
		{"abab", []string{"", "abac"}, "ab", "ab"},            // an empty stop is none
		{"tok " + strings.Repeat("x", 64), []string{strings.Repeat("x", 1<<20)}, "tok ", strings.Repeat("x", 64)},
	} {
		h := newStopHold(tc.stops)
		if send := h.add(tc.pending); send != tc.send || h.take() != tc.held {
			t.Errorf("%.20q with stops %.20q: sent %.20q, want %.20q held %.20q", tc.pending, tc.stops, send, tc.send, tc.held)
		}
	}
	if newStopHold([]string{"", ""}) != nil {
		t.Error("a hold for no stop sequences")
	}
}

// TestStopHoldAnyChunking: whatever the chunks, the text sent and held is
// the text, and what is held is its longest end that begins a stop
// sequence (checked against that definition, stop by stop, after every
// chunk), also after take lets it go.
func TestStopHoldAnyChunking(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "ab"[rng.IntN(2)]
		}
		return string(b)
	}
	longestEnd := func(text string, stops []string) string {
		for p := range len(text) {
			for _, s := range stops {
				if s != "" && strings.HasPrefix(s, text[p:]) {
					return text[p:]
				}
			}
		}
		return ""
	}
	for range 2000 {
		stops := []string{word(1 + rng.IntN(6)), word(1 + rng.IntN(6)), word(1 + rng.IntN(3))}
		h := newStopHold(stops)
		var all, out, text strings.Builder // every chunk; what was sent and taken; the text since the last take
		for range rng.IntN(12) {
			if rng.IntN(8) == 0 {
				out.WriteString(h.take())
				text.Reset()
				continue
			}
			chunk := word(rng.IntN(5))
			all.WriteString(chunk)
			text.WriteString(chunk)
			out.WriteString(h.add(chunk))
			if got, want := string(h.held), longestEnd(text.String(), stops); got != want {
				t.Fatalf("stops %q, text %q: held %q, want %q", stops, text.String(), got, want)
			}
		}
		if out.WriteString(h.take()); out.String() != all.String() {
			t.Fatalf("stops %q: sent %q of %q", stops, out.String(), all.String())
		}
	}
}

// TestResponsesStreamArguments: a function call's arguments are the
// deltas as they came, also those of a call the backend interleaved with
// another (after the other's item opened), and a call streamed in many small
// deltas costs memory in proportion to its arguments, not their square.
func TestResponsesStreamArguments(t *testing.T) { // not parallel: it counts allocations
	call := func(index int, id, args string) string {
		head := ""
		if id != "" {
			head = `"id":"` + id + `","type":"function","function":{"name":"f","arguments":""}`
			return `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":` + fmt.Sprint(index) + `,` + head + `}]}}]}`
		}
		return `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":` + fmt.Sprint(index) + `,"function":{"arguments":` + fmt.Sprintf("%q", args) + `}}]}}]}`
	}
	final := func(body string) []any {
		t.Helper()
		evs := events(t, body)
		_, data, _ := strings.Cut(evs[len(evs)-1], " ")
		var last struct {
			Response struct {
				Output []any `json:"output"`
			} `json:"response"`
		}
		if err := json.Unmarshal([]byte(data), &last); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		return last.Response.Output
	}
	o := testResponsesOut(t, `{"model":"m","input":"x"}`)
	rec := httptest.NewRecorder()
	in := chunks(call(0, "call_a", ""), call(0, "", `{"x":`), call(1, "call_b", ""), call(1, "", `{"y":2}`), call(0, "", `1}`),
		finishChunk("tool_calls"), usageChunk, "[DONE]")
	if err := o.stream(rec, strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	out := final(rec.Body.String())
	if len(out) != 2 || out[0].(map[string]any)["arguments"] != `{"x":1}` || out[1].(map[string]any)["arguments"] != `{"y":2}` {
		t.Errorf("output %v", out)
	}

	const n = 20000
	parts := []string{call(0, "call_a", "")}
	for range n {
		parts = append(parts, call(0, "", "ab"))
	}
	in = chunks(append(parts, finishChunk("tool_calls"), "[DONE]")...)
	o = testResponsesOut(t, `{"model":"m","input":"x"}`)
	rec = httptest.NewRecorder()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := o.stream(rec, strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if out := final(rec.Body.String()); len(out) != 1 || len(out[0].(map[string]any)["arguments"].(string)) != 2*n {
		t.Errorf("arguments of %d deltas: %v", n, out)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 128<<20 {
		t.Errorf("%d deltas of 2 bytes allocated %d MiB", n, grew>>20)
	}
}

// TestResponsesFailedCode: a converted stream's response.failed carries
// the Responses API's error code for the status it failed with.
func TestResponsesFailedCode(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]string{"429": "rate_limit_exceeded", "400": "invalid_prompt", "503": "server_error", "500": "server_error"} {
		o := testResponsesOut(t, `{"model":"m","input":"x"}`)
		rec := httptest.NewRecorder()
		_ = o.stream(rec, strings.NewReader(chunks(textChunk("Hi"))+"event: error\ndata: {\"error\":{\"message\":\"upstream says no\",\"code\":"+code+"}}\n\n"))
		ev := events(t, rec.Body.String())
		last := ev[len(ev)-1]
		if !strings.HasPrefix(last, "response.failed ") || !strings.Contains(last, `"error":{"code":"`+want+`","message":"upstream says no"`) {
			t.Errorf("status %s: %s; want error.code %s", code, last, want)
		}
	}
}
