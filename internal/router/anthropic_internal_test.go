package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// compactJSON is s without insignificant space (and fails the test when s
// is not JSON).
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return b.String()
}

// TestConvertMessages: Messages requests and the chat requests they
// become, feature by feature.
func TestConvertMessages(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in, want string
	}{
		{"structured output as response_format json_schema",
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"Hi"}],
			 "output_config":{"format":{"type":"json_schema","schema":{"type":"object","properties":{"a":{"type":"string"}}}}}}`,
			`{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":10,
			 "response_format":{"json_schema":{"name":"output","schema":{"type":"object","properties":{"a":{"type":"string"}}}},"type":"json_schema"}}`},
		{"the beta's output_format too",
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"Hi"}],"output_format":{"type":"json_schema","schema":{"type":"object"}}}`,
			`{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":10,
			 "response_format":{"json_schema":{"name":"output","schema":{"type":"object"}},"type":"json_schema"}}`},
		{"string content and system",
			`{"model":"m","max_tokens":10,"system":"Be brief.","messages":[{"role":"user","content":"Hi"}]}`,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":10}`},
		{"system as text blocks, text blocks joined",
			`{"model":"m","max_tokens":10,"system":[{"type":"text","text":"One."},{"type":"text","text":"Two.","cache_control":{"type":"ephemeral"}}],
			 "messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			`{"model":"m","messages":[{"role":"system","content":"One.\nTwo."},{"role":"user","content":"a\nb"}],"max_tokens":10}`},
		{"images: base64 and url as image parts",
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},
			 {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},
			 {"type":"image","source":{"type":"url","url":"https://example.com/cat.jpg"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},
			 {"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},
			 {"type":"image_url","image_url":{"url":"https://example.com/cat.jpg"}}]}],"max_tokens":10}`},
		{"an empty text part beside an image keeps its text",
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":""},
			 {"type":"image","source":{"type":"url","url":"https://example.com/cat.jpg"}}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":""},
			 {"type":"image_url","image_url":{"url":"https://example.com/cat.jpg"}}]}],"max_tokens":10}`},
		{"tool use and results, in order; thinking dropped",
			`{"model":"m","max_tokens":100,"messages":[
			  {"role":"user","content":"Weather in Paris and Oslo?"},
			  {"role":"assistant","content":[{"type":"thinking","thinking":"two calls","signature":"sig"},{"type":"text","text":"Checking."},
			    {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city": "Paris"}},
			    {"type":"tool_use","id":"toolu_2","name":"get_weather","input":{"city":"Oslo"}}]},
			  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"Sunny"},
			    {"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"Rain"},{"type":"text","text":"5 C"}],"is_error":false},
			    {"type":"text","text":"Which is warmer?"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"Weather in Paris and Oslo?"},
			  {"role":"assistant","content":"Checking.","tool_calls":[
			    {"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
			    {"id":"toolu_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
			  {"role":"tool","content":"Sunny","tool_call_id":"toolu_1"},
			  {"role":"tool","content":"Rain\n5 C","tool_call_id":"toolu_2"},
			  {"role":"user","content":"Which is warmer?"}],"max_tokens":100}`},
		{"a tool result's image follows it in a user message",
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[
			  {"type":"text","text":"the chart"},{"type":"image","source":{"type":"url","url":"https://example.com/c.png"}}]}]}]}`,
			`{"model":"m","messages":[{"role":"tool","content":"the chart","tool_call_id":"t"},
			  {"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/c.png"}}]}],"max_tokens":10}`},
		{"the images of several tool results follow the run of tool messages, with the text after them",
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[
			  {"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":"A"},{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]},
			  {"type":"tool_result","tool_use_id":"b","content":[{"type":"text","text":"B"},{"type":"image","source":{"type":"url","url":"https://example.com/b.png"}}]},
			  {"type":"text","text":"Compare them."}]}]}`,
			`{"model":"m","messages":[{"role":"tool","content":"A","tool_call_id":"a"},{"role":"tool","content":"B","tool_call_id":"b"},
			  {"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}},
			    {"type":"image_url","image_url":{"url":"https://example.com/b.png"}},{"type":"text","text":"Compare them."}]}],"max_tokens":10}`},
		{"a user_id that is a UUID is not sent as user (Dynamo would make it the request id)",
			`{"model":"m","max_tokens":5,"metadata":{"user_id":"3f0c2a7e-9d1b-4c7e-8a55-0e1f2d3c4b5a"},"messages":[{"role":"user","content":"Hi"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":5}`},
		{"tools, tool_choice any without parallel calls, sampling, stop, user, stream",
			`{"model":"m","max_tokens":64,"stream":true,"temperature":0.2,"top_p":0.9,"top_k":40,"stop_sequences":["END","\n\n"],
			  "metadata":{"user_id":"u-1"},"tool_choice":{"type":"any","disable_parallel_tool_use":true},
			  "tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},
			    {"type":"custom","name":"noop","input_schema":{"type":"object"},"strict":true}],
			  "messages":[{"role":"user","content":"Hi"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":64,"temperature":0.2,"top_p":0.9,"top_k":40,
			  "stop":["END","\n\n"],"include_stop_str_in_output":true,
			  "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
			    {"type":"function","function":{"name":"noop","parameters":{"type":"object"},"strict":true}}],
			  "tool_choice":"required","parallel_tool_calls":false,"user":"u-1","stream":true,"stream_options":{"include_usage":true}}`},
		{"tool_choice tool",
			`{"model":"m","max_tokens":5,"tool_choice":{"type":"tool","name":"noop"},"tools":[{"name":"noop","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"tools":[{"type":"function","function":{"name":"noop","parameters":{"type":"object"}}}],
			  "tool_choice":{"function":{"name":"noop"},"type":"function"}}`},
		{"tool_choice auto and none",
			`{"model":"m","max_tokens":5,"tool_choice":{"type":"none"},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"tool_choice":"none"}`},
		{"thinking enabled: the template's switch",
			`{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":2048,"chat_template_kwargs":{"enable_thinking":true}}`},
		{"thinking disabled",
			`{"model":"m","max_tokens":5,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"chat_template_kwargs":{"enable_thinking":false}}`},
		{"a system message keeps its place; an assistant prefill",
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"system","content":[{"type":"text","text":"Now formal."}]},
			  {"role":"assistant","content":"Dear"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"system","content":"Now formal."},{"role":"assistant","content":"Dear"}],"max_tokens":5}`},
		{"an assistant turn of tool calls only has empty content",
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]},
			  {"role":"user","content":[{"type":"tool_result","tool_use_id":"a"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},
			  {"role":"tool","content":"","tool_call_id":"a"}],"max_tokens":5}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var q anthropicRequest
			if err := json.Unmarshal([]byte(tt.in), &q); err != nil {
				t.Fatal(err)
			}
			c, rerr := convertMessages(&q, false)
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

// TestConvertMessagesRefusals: what the router refuses, naming the
// parameter at fault.
func TestConvertMessagesRefusals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, param, msg string
	}{
		{`{"model":"m","messages":[{"role":"user","content":"x"}]}`, "max_tokens", "Field required"},
		{`{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, "max_tokens", "at least 1"},
		{`{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, "model", "Field required"},
		{`{"model":"m","max_tokens":5,"messages":[]}`, "messages", "at least one"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"tool","content":"x"}]}`, "messages.0.role", "not one of"},
		{`{"model":"m","max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"x"}]}`, "tools.0.type", "server tool"},
		{`{"model":"m","max_tokens":5,"tools":[{"name":"f"}],"messages":[{"role":"user","content":"x"}]}`, "tools.0.input_schema", "Field required"},
		{`{"model":"m","max_tokens":5,"mcp_servers":[{"type":"url","url":"https://mcp.example/sse","name":"x"}],"messages":[{"role":"user","content":"x"}]}`, "mcp_servers", "not supported"},
		{`{"model":"m","max_tokens":5,"container":"container_1","messages":[{"role":"user","content":"x"}]}`, "container", "not supported"},
		{`{"model":"m","max_tokens":5,"tool_choice":{"type":"sometimes"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice.type", "not one of"},
		{`{"model":"m","max_tokens":5,"tool_choice":{"type":"tool"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice.name", "Field required"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","data":"x"}}]}]}`, "messages.0.content.0.type", "not supported"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}`, "messages.0.content.0.source.type", "base64 or url"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"a"}]}]}`, "messages.0.content.0.type", "not supported"},
		{`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":42}]}`, "messages.0.content", "string or a list"},
		{`{"model":"m","max_tokens":5,"system":[{"type":"image"}],"messages":[{"role":"user","content":"x"}]}`, "system.0.type", "only text"},
		{`{"model":"m","max_tokens":5,"thinking":{"type":"maybe"},"messages":[{"role":"user","content":"x"}]}`, "thinking.type", "not one of"},
		{`{"model":"m","max_tokens":5,"output_config":{"format":{"type":"regex"}},"messages":[{"role":"user","content":"x"}]}`, "output_config.format.type", "not json_schema"},
		{`{"model":"m","max_tokens":5,"output_config":{"format":{"type":"json_schema"}},"messages":[{"role":"user","content":"x"}]}`, "output_config.format.schema", "Field required"},
		// The Messages API refuses an empty stop sequence (400 "each stop
		// sequence must be non-empty"); sent on as stop, an engine either
		// refuses it in its own words or matches it at once.
		{`{"model":"m","max_tokens":5,"stop_sequences":["END",""],"messages":[{"role":"user","content":"x"}]}`, "stop_sequences", "non-empty"},
	} {
		var q anthropicRequest
		if err := json.Unmarshal([]byte(tt.in), &q); err != nil {
			t.Fatal(err)
		}
		_, rerr := convertMessages(&q, false)
		if rerr == nil || rerr.param != tt.param || !strings.Contains(rerr.message, tt.msg) {
			t.Errorf("%s: refusal %v, want %s: ...%s...", tt.in, rerr, tt.param, tt.msg)
		}
	}
	// count_tokens does not need max_tokens.
	var q anthropicRequest
	_ = json.Unmarshal([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`), &q)
	if _, rerr := convertMessages(&q, true); rerr != nil {
		t.Errorf("count_tokens: %v", rerr)
	}
}

func fixedIDs(prefix string) func() string {
	n := 0
	return func() string {
		n++
		return fmt.Sprintf("%s%02d", prefix, n)
	}
}

// TestAnthropicAnswer: chat completions and the Messages they become.
func TestAnthropicAnswer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		stops    []string
		thinking bool
		in, want string
	}{
		{"text cut by the limit", nil, false,
			`{"id":"c1","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there"},"finish_reason":"length"}],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`,
			`{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hello there"}],
			  "stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":7,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}`},
		{"text ending by itself", []string{"END"}, false,
			`{"choices":[{"message":{"content":"Done."},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`,
			`{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Done."}],
			  "stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}`},
		{"a stop sequence kept in the output", []string{"END", "STOP"}, false,
			`{"choices":[{"message":{"content":"Done.STOP"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":3}}`,
			`{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Done."}],
			  "stop_reason":"stop_sequence","stop_sequence":"STOP","usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}`},
		{"a stop sequence named by vLLM's stop_reason", []string{"END", "STOP"}, false,
			`{"choices":[{"message":{"content":"Done."},"finish_reason":"stop","stop_reason":"END"}],"usage":{"prompt_tokens":3,"completion_tokens":3}}`,
			`{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Done."}],
			  "stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}`},
		{"tool calls with parsed input; bad arguments become {}", nil, false,
			`{"choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},
			  {"id":"call_2","type":"function","function":{"name":"noop","arguments":"not json"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":9,"completion_tokens":12}}`,
			`{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[
			  {"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}},{"type":"tool_use","id":"call_2","name":"noop","input":{}}],
			  "stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":12}}`},
		{"reasoning as a thinking block when thinking is on", nil, true,
			`{"choices":[{"message":{"content":"42","reasoning_content":"6 times 7"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":9}}`,
			`{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[{"type":"thinking","thinking":"6 times 7","signature":""},{"type":"text","text":"42"}],
			  "stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":9}}`},
		{"reasoning dropped when thinking is off; content_filter is a refusal", nil, false,
			`{"choices":[{"message":{"content":"","reasoning_content":"hmm"},"finish_reason":"content_filter"}]}`,
			`{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[],
			  "stop_reason":"refusal","stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &anthropicOut{model: "m", stops: tt.stops, thinking: tt.thinking, id: fixedIDs("msg_")}
			got, err := a.answer([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if want := compactJSON(t, tt.want); strings.TrimSpace(string(got)) != want {
				t.Errorf("answer\n got %s\nwant %s", got, want)
			}
		})
	}
	if _, err := (&anthropicOut{}).answer([]byte(`{"object":"list"}`)); err == nil {
		t.Error("a body without choices was taken for a chat completion")
	}
	// A tool call the backend left without an id gets one, as in the
	// stream: the client answers it by that id.
	a := &anthropicOut{model: "m", id: fixedIDs("msg_")}
	got, err := a.answer([]byte(`{"choices":[{"message":{"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Content []struct{ ID string } `json:"content"`
	}
	if err := json.Unmarshal(got, &m); err != nil || len(m.Content) != 1 || !strings.HasPrefix(m.Content[0].ID, "toolu_") || len(m.Content[0].ID) <= len("toolu_") {
		t.Errorf("tool_use without an upstream id: %s, %v", got, err)
	}
}

// chunks renders chat.completion.chunk events (each a JSON object) and the
// stream's end.
func chunks(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("data: " + e + "\n\n")
	}
	return b.String()
}

func textChunk(s string) string {
	b, _ := json.Marshal(s)
	return `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":` + string(b) + `},"finish_reason":null}]}`
}

func finishChunk(reason string) string {
	return `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"` + reason + `"}]}`
}

const usageChunk = `{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":4,"total_tokens":15}}`

// events reads a converted stream back as "name data" lines.
func events(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	rd := newSSEReader(strings.NewReader(body))
	for {
		ev, err := rd.next()
		if err != nil {
			return out
		}
		out = append(out, ev.name+" "+string(ev.data))
	}
}

func wantEvents(t *testing.T, lines ...string) []string {
	t.Helper()
	out := make([]string, len(lines))
	for i, l := range lines {
		name, data, _ := strings.Cut(l, " ")
		out[i] = name + " " + compactJSON(t, data)
	}
	return out
}

func sameEvents(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d events, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("event %d\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

const messageStart = `message_start {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[],
  "stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}`

// TestAnthropicStream: chat chunk streams and the Messages events they
// become, event by event.
func TestAnthropicStream(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		stops    []string
		thinking bool
		in       string
		want     []string
	}{
		{"text, then usage", nil, false,
			chunks(textChunk("Hel"), textChunk("lo"), finishChunk("length"), usageChunk, "[DONE]"),
			[]string{messageStart, `ping {"type":"ping"}`,
				`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}`,
				`content_block_stop {"type":"content_block_stop","index":0}`,
				`message_delta {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"input_tokens":11,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":4}}`,
				`message_stop {"type":"message_stop"}`}},
		{"a stop sequence split across chunks is held back and removed", []string{"END"}, false,
			chunks(textChunk("Hello "), textChunk("world E"), textChunk("ND"), finishChunk("stop"), usageChunk, "[DONE]"),
			[]string{messageStart, `ping {"type":"ping"}`,
				`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello "}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"world "}}`,
				`content_block_stop {"type":"content_block_stop","index":0}`,
				`message_delta {"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"END"},"usage":{"input_tokens":11,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":4}}`,
				`message_stop {"type":"message_stop"}`}},
		{"held text that is no stop sequence is sent at the end", []string{"END"}, false,
			chunks(textChunk("The E"), textChunk("N"), finishChunk("stop"), "[DONE]"),
			[]string{messageStart, `ping {"type":"ping"}`,
				`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"The "}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"EN"}}`,
				`content_block_stop {"type":"content_block_stop","index":0}`,
				`message_delta {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`,
				`message_stop {"type":"message_stop"}`}},
		{"thinking, text, then two tool calls", nil, true,
			chunks(`{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"Two cities."}}]}`,
				textChunk("Checking."),
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]}}]}`,
				finishChunk("tool_calls"), usageChunk, "[DONE]"),
			[]string{messageStart, `ping {"type":"ping"}`,
				`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Two cities."}}`,
				`content_block_stop {"type":"content_block_stop","index":0}`,
				`content_block_start {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
				`content_block_delta {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking."}}`,
				`content_block_stop {"type":"content_block_stop","index":1}`,
				`content_block_start {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"call_1","name":"get_weather","input":{}}}`,
				`content_block_delta {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Paris\"}"}}`,
				`content_block_stop {"type":"content_block_stop","index":2}`,
				`content_block_start {"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"call_2","name":"get_weather","input":{}}}`,
				`content_block_delta {"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Oslo\"}"}}`,
				`content_block_stop {"type":"content_block_stop","index":3}`,
				`message_delta {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":11,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":4}}`,
				`message_stop {"type":"message_stop"}`}},
		{"an error inside the stream ends it with an error event", nil, false,
			chunks(textChunk("Hi")) + "event: error\ndata: {\"error\":{\"message\":\"Prefill worker ID required in Direct routing mode\",\"code\":500}}\n\n",
			[]string{messageStart, `ping {"type":"ping"}`,
				`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`,
				`error {"type":"error","error":{"type":"api_error","message":"Prefill worker ID required in Direct routing mode"}}`}},
		{"an error inside the stream keeps its status's type", nil, false,
			chunks(textChunk("Hi")) + "event: error\ndata: {\"error\":{\"message\":\"engine overloaded\",\"code\":503}}\n\n",
			[]string{messageStart, `ping {"type":"ping"}`,
				`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`,
				`error {"type":"error","error":{"type":"overloaded_error","message":"engine overloaded"}}`}},
		{"an error object as data", nil, false,
			chunks(`{"error":{"message":"engine crashed","type":"internal"}}`),
			[]string{messageStart, `ping {"type":"ping"}`,
				`error {"type":"error","error":{"type":"api_error","message":"engine crashed"}}`}},
		{"[DONE] before a finish reason: cut, not complete", nil, false,
			chunks(textChunk("Hi"), "[DONE]"),
			[]string{messageStart, `ping {"type":"ping"}`,
				`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`,
				`error {"type":"error","error":{"type":"api_error","message":"the upstream stream ended before the answer was complete"}}`}},
		{"text held back for a stop sequence goes out before an error", []string{"END"}, false,
			chunks(textChunk("partial"), `{"error":{"message":"worker died","code":503}}`),
			[]string{messageStart, `ping {"type":"ping"}`,
				`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"partial"}}`,
				`error {"type":"error","error":{"type":"overloaded_error","message":"worker died"}}`}},
		{"text held back after a thinking block goes out before an error", []string{"END"}, true,
			chunks(`{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"Hmm."}}]}`, textChunk("E"),
				`{"error":{"message":"worker died","code":503}}`),
			[]string{messageStart, `ping {"type":"ping"}`,
				`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Hmm."}}`,
				`content_block_stop {"type":"content_block_stop","index":0}`,
				`content_block_start {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
				`content_block_delta {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"E"}}`,
				`error {"type":"error","error":{"type":"overloaded_error","message":"worker died"}}`}},
		{"a stream cut before its end", nil, false,
			chunks(textChunk("Hi")),
			[]string{messageStart, `ping {"type":"ping"}`,
				`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`,
				`error {"type":"error","error":{"type":"api_error","message":"the upstream stream ended before the answer was complete"}}`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &anthropicOut{model: "m", stops: tt.stops, thinking: tt.thinking, id: fixedIDs("msg_")}
			rec := httptest.NewRecorder()
			err := a.stream(rec, strings.NewReader(tt.in))
			endedTelling(t, err, strings.HasPrefix(tt.want[len(tt.want)-1], "error "))
			sameEvents(t, events(t, rec.Body.String()), wantEvents(t, tt.want...))
		})
	}
}

// TestAnthropicErrors: router and upstream errors in the Messages shape,
// with Anthropic's types for the statuses.
func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	a := &anthropicOut{}
	rec := httptest.NewRecorder()
	a.fail(rec, 503, CodePrefillDecodeUnavailable, "", "the fleet view is out of date")
	if rec.Code != 503 || compactJSON(t, rec.Body.String()) !=
		`{"type":"error","error":{"type":"disaggregated_prefill_decode_unavailable","message":"the fleet view is out of date"}}` {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	a.fail(rec, 503, CodeAllWorkersBusy, "", "every worker is busy")
	if compactJSON(t, rec.Body.String()) != `{"type":"error","error":{"type":"overloaded_error","message":"all_workers_busy: every worker is busy"}}` {
		t.Errorf("%s", rec.Body)
	}
	rec = httptest.NewRecorder()
	a.fail(rec, 400, CodeBadRequest, "max_tokens", "Field required")
	if compactJSON(t, rec.Body.String()) != `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}` {
		t.Errorf("%s", rec.Body)
	}
	for status, typ := range map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
		413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 502: "api_error", 503: "overloaded_error", 529: "overloaded_error", 422: "invalid_request_error",
		402: "billing_error", 504: "timeout_error"} {
		if got := anthropicErrorType(status); got != typ {
			t.Errorf("%d: %s, want %s", status, got, typ)
		}
	}
	if got := string(a.upstreamError(429, []byte(`{"error":{"message":"slow down","type":"rate_limit_error"}}`))); compactJSON(t, got) !=
		`{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}` {
		t.Errorf("%s", got)
	}
	if got := string(a.upstreamError(500, []byte("Failed to generate completions\n"))); compactJSON(t, got) !=
		`{"type":"error","error":{"type":"api_error","message":"Failed to generate completions"}}` {
		t.Errorf("%s", got)
	}
}

func TestParsesAsUUID(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"3f0c2a7e-9d1b-4c7e-8a55-0e1f2d3c4b5a":          true,
		"3F0C2A7E-9D1B-4C7E-8A55-0E1F2D3C4B5A":          true,
		"3f0c2a7e9d1b4c7e8a550e1f2d3c4b5a":              true,
		"{3f0c2a7e-9d1b-4c7e-8a55-0e1f2d3c4b5a}":        true,
		"urn:uuid:3f0c2a7e-9d1b-4c7e-8a55-0e1f2d3c4b5a": true,
		"u-1":                                   false,
		"":                                      false,
		"3f0c2a7e-9d1b-4c7e-8a55-0e1f2d3c4b5g":  false,
		"3f0c2a7e_9d1b_4c7e_8a55_0e1f2d3c4b5a":  false,
		"3f0c2a7e-9d1b-4c7e-8a55-0e1f2d3c4b5a0": false,
	} {
		if got := parsesAsUUID(s); got != want {
			t.Errorf("parsesAsUUID(%q) = %v", s, got)
		}
	}
}

// TestUsageCachedAndReasoning: a backend's cached prompt tokens are the
// Messages API's cache_read_input_tokens, outside input_tokens, and the
// Responses API's input_tokens_details.cached_tokens, inside
// input_tokens; reasoning tokens are output_tokens_details'.
func TestUsageCachedAndReasoning(t *testing.T) {
	t.Parallel()
	var u chatUsage
	if err := json.Unmarshal([]byte(`{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,
		"prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":12}}`), &u); err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(usageOf(&u)); string(got) != `{"input_tokens":36,"cache_creation_input_tokens":0,"cache_read_input_tokens":64,"output_tokens":20}` {
		t.Errorf("messages usage %s", got)
	}
	got, _ := json.Marshal(responsesUsage(&u))
	if want := `{"input_tokens":100,"input_tokens_details":{"cached_tokens":64},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":12},"total_tokens":120}`; string(got) != want {
		t.Errorf("responses usage %s, want %s", got, want)
	}
	// Without details, as before: nothing cached, nothing reasoned.
	var plain chatUsage
	_ = json.Unmarshal([]byte(`{"prompt_tokens":10,"completion_tokens":2}`), &plain)
	if got, _ := json.Marshal(usageOf(&plain)); string(got) != `{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}` {
		t.Errorf("messages usage %s", got)
	}
}
