package fleetsim_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/fleetsim"
)

// FuzzFrontendAnswers sends fuzzed request bodies to the demo fleet's
// frontend, once buffered and once streamed, for the model it serves:
// every answer must be well formed (a JSON object with one choice and a
// known finish reason; server-sent events of JSON ending with [DONE]), and
// the stream must carry what the buffered answer does: the same text or
// tool call, finish reason and completion tokens (with include_usage).
// A tool call's arguments are a JSON object unless the answer was cut at
// its length limit.
func FuzzFrontendAnswers(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"max_tokens":2,"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`,
		`{"prompt":["Say","hi"],"stop":"tok1","include_stop_str_in_output":true}`,
		`{"prompt":"x","stop":["1 t","k0"]}`,
		`{"messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"w","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":["null","integer"]},"unit":{"enum":["c","f"]},"opts":{"type":"object","properties":{"x":{"type":"boolean"}}}},"required":["city","unit","opts"]}}}]}`,
		`{"messages":[{"role":"user","content":"q"}],"tools":[{"function":{"name":"a"}},{"function":{"name":"b","parameters":{"properties":{"n":{"type":"number"}}}}}],"tool_choice":{"type":"function","function":{"name":"b"}},"max_tokens":1}`,
		`{"messages":[{"role":"tool","content":"r"}],"tools":[{"function":{"name":"a"}}]}`,
		`{"messages":[{"role":"user","content":"q"}],"tools":[{"function":{"name":"a"}}],"tool_choice":"none","max_completion_tokens":1}`,
		`{"messages":[{"role":"user","content":"q"}],"tools":[{"function":{"name":"a","parameters":{"properties":{"a":{"enum":["ééé"]}}}}}]}`,
		`{"ſtream":true,"MODEL":"x","prompt":"p"}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		// The body as an object, numbers kept as written, for the model
		// the frontend serves and each stream setting.
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var req map[string]any
		if dec.Decode(&req) != nil || req == nil {
			return
		}
		// encoding/json matches member names in any case (Unicode's
		// simple folding: "ſtream" is "stream"), the last match winning:
		// every such member gives way to the ones set here.
		for k := range req {
			if strings.EqualFold(k, "model") || strings.EqualFold(k, "stream") {
				delete(req, k)
			}
		}
		req["model"] = "m"
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		fe := fleetsim.NewFrontend()
		fe.SetWorkers("m", nil, []uint64{7})
		fe.Tokens = 5
		send := func(stream bool) *bytes.Buffer {
			req["stream"] = stream
			b, err := json.Marshal(req)
			if err != nil {
				t.Skip(err) // a number json.Number cannot write back
			}
			rec := do(t, fe, http.MethodPost, path, string(b), map[string]string{"x-dynamo-worker-instance-id": "7"})
			want := "application/json"
			if stream {
				want = "text/event-stream"
			}
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != want {
				t.Fatalf("stream %v: status %d, %s: %s", stream, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
			}
			return rec.Body
		}

		var whole toolAnswer
		if err := json.Unmarshal(send(false).Bytes(), &whole); err != nil {
			t.Fatalf("buffered answer: %v", err)
		}
		if len(whole.Choices) != 1 || whole.Choices[0].FinishReason == nil || whole.Usage == nil {
			t.Fatalf("buffered answer without its choice, finish reason or usage: %+v", whole)
		}
		c := whole.Choices[0]
		finish := *c.FinishReason
		if finish != "stop" && finish != "length" && finish != "tool_calls" {
			t.Fatalf("finish reason %q", finish)
		}
		var text, name, args string
		calls := 0
		switch {
		case chat && c.Message != nil:
			if c.Message.Content != nil {
				text = *c.Message.Content
			}
			calls = len(c.Message.ToolCalls)
			if calls == 1 {
				name, args = c.Message.ToolCalls[0].Function.Name, c.Message.ToolCalls[0].Function.Arguments
			}
		case !chat && c.Text != nil && c.Message == nil:
			text = *c.Text
		default:
			t.Fatalf("a %s answer without its text or message: %+v", path, c)
		}
		if calls > 1 || (calls == 1 && finish == "stop") || (calls == 0 && finish == "tool_calls") {
			t.Fatalf("%d tool calls with finish reason %q", calls, finish)
		}
		if calls == 1 && finish == "tool_calls" {
			var obj map[string]any
			if err := json.Unmarshal([]byte(args), &obj); err != nil {
				t.Fatalf("tool call arguments %q: %v", args, err)
			}
		}

		// The stream: JSON events, [DONE] last, carrying the same answer.
		raw := send(true).String()
		evs := strings.Split(strings.TrimSuffix(raw, "\n\n"), "\n\n")
		if len(evs) < 2 || evs[len(evs)-1] != "data: [DONE]" {
			t.Fatalf("the stream does not end with data: [DONE]: %q", raw)
		}
		var sText, sName, sArgs, sFinish string
		sCalls, usage := 0, -1
		for _, ev := range evs[:len(evs)-1] {
			d, ok := strings.CutPrefix(ev, "data: ")
			if !ok {
				t.Fatalf("event %q is not one data line", ev)
			}
			var a toolAnswer
			if err := json.Unmarshal([]byte(d), &a); err != nil {
				t.Fatalf("event %q: %v", d, err)
			}
			if a.Usage != nil {
				usage = a.Usage.CompletionTokens
			}
			for _, ch := range a.Choices {
				if ch.FinishReason != nil {
					sFinish = *ch.FinishReason
				}
				switch {
				case chat && ch.Delta != nil:
					if ch.Delta.Content != nil {
						sText += *ch.Delta.Content
					}
					for _, tc := range ch.Delta.ToolCalls {
						if tc.ID != "" { // a call's first delta
							sCalls++
							sName = tc.Function.Name
						}
						sArgs += tc.Function.Arguments
					}
				case !chat && ch.Text != nil:
					sText += *ch.Text
				default:
					t.Fatalf("a %s chunk without its text or delta: %s", path, d)
				}
			}
		}
		if sText != text || sFinish != finish || sCalls != calls || sName != name || sArgs != args {
			t.Fatalf("the stream carries text %q, finish %q, %d calls %q(%q); the buffered answer %q, %q, %d calls %q(%q)",
				sText, sFinish, sCalls, sName, sArgs, text, finish, calls, name, args)
		}
		if usage >= 0 && usage != whole.Usage.CompletionTokens {
			t.Fatalf("the stream's usage has %d completion tokens, the buffered answer's %d", usage, whole.Usage.CompletionTokens)
		}
	})
}
