package fleetsim_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/fleetsim"
)

// answer is the part of an OpenAI object (whole or a stream chunk) the
// tests read.
type answer struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int    `json:"index"`
		Text    string `json:"text"`
		Message *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// pinned is a frontend serving model m with aggregated worker 7, and the
// headers that pin to it.
func pinned(t *testing.T) (*fleetsim.Frontend, map[string]string) {
	t.Helper()
	f := fleetsim.NewFrontend()
	f.SetWorkers("m", nil, []uint64{7})
	return f, map[string]string{"x-dynamo-worker-instance-id": "7"}
}

func do(t *testing.T, h http.Handler, method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func whole(t *testing.T, rec *httptest.ResponseRecorder) answer {
	t.Helper()
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d %v: %s", rec.Code, rec.Header(), rec.Body)
	}
	var a answer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	if len(a.Choices) != 1 || a.Choices[0].FinishReason == nil || a.Usage == nil {
		t.Fatalf("choices or usage missing: %s", rec.Body)
	}
	return a
}

// events splits an SSE body into its data payloads; the last must be
// [DONE], which is dropped.
func events(t *testing.T, rec *httptest.ResponseRecorder) []answer {
	t.Helper()
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %v: %s", rec.Code, rec.Header(), rec.Body)
	}
	var data []string
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
	}
	if len(data) == 0 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("the stream does not end with data: [DONE]: %q", data)
	}
	var out []answer
	for _, d := range data[:len(data)-1] {
		var a answer
		if err := json.Unmarshal([]byte(d), &a); err != nil {
			t.Fatalf("%v: %s", err, d)
		}
		out = append(out, a)
	}
	return out
}

// recent reports whether created is a Unix time in seconds of about now.
func recent(created int64) bool {
	return created > 0 && time.Since(time.Unix(created, 0)).Abs() < time.Minute
}

// TestFrontendWholeAnswers: /v1/chat/completions answers a chat.completion
// with a message, /v1/completions a text_completion with text; both carry
// created and usage, and finish with length when max_tokens or
// max_completion_tokens cut the answer short, else stop.
func TestFrontendWholeAnswers(t *testing.T) {
	t.Parallel()
	f, pin := pinned(t) // Tokens is 3
	for _, tt := range []struct {
		path, body, object, finish string
		tokens                     int
	}{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "chat.completion", "stop", 3},
		{"/v1/chat/completions", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, "chat.completion", "length", 2},
		{"/v1/chat/completions", `{"model":"m","max_completion_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, "chat.completion", "length", 3},
		{"/v1/chat/completions", `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`, "chat.completion", "stop", 3},
		{"/v1/completions", `{"model":"m","prompt":"Say hi"}`, "text_completion", "stop", 3},
		{"/v1/completions", `{"model":"m","prompt":["Say","hi"],"max_tokens":1}`, "text_completion", "length", 1},
	} {
		a := whole(t, do(t, f, http.MethodPost, tt.path, tt.body, pin))
		c := a.Choices[0]
		if a.Object != tt.object || !recent(a.Created) || a.Model != "m" || a.ID == "" || *c.FinishReason != tt.finish {
			t.Errorf("%s %s: object %q created %d model %q id %q finish %q", tt.path, tt.body, a.Object, a.Created, a.Model, a.ID, *c.FinishReason)
		}
		text := c.Text
		if tt.object == "chat.completion" {
			if c.Message == nil || c.Message.Role != "assistant" || c.Text != "" {
				t.Fatalf("%s: a chat answer carries a message: %+v", tt.body, c)
			}
			text = c.Message.Content
		} else if c.Message != nil {
			t.Fatalf("%s: a text completion carries text, not a message", tt.body)
		}
		if n := len(strings.Fields(text)); n != tt.tokens || a.Usage.CompletionTokens != tt.tokens ||
			a.Usage.PromptTokens <= 0 || a.Usage.TotalTokens != a.Usage.PromptTokens+tt.tokens {
			t.Errorf("%s: text %q, usage %+v, want %d tokens", tt.body, text, *a.Usage, tt.tokens)
		}
	}
}

// TestFrontendStreams: chat streams chat.completion.chunk events with a
// delta, text completions text_completion events with text; the last
// content chunk has the finish reason, earlier ones null; with
// stream_options.include_usage a last chunk with no choices carries the
// usage, and without it no chunk does; data: [DONE] ends the stream.
func TestFrontendStreams(t *testing.T) {
	t.Parallel()
	f, pin := pinned(t)
	f.Tokens = 4
	for _, tt := range []struct {
		path, body, object, finish string
		tokens                     int
		usage                      bool
	}{
		{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "chat.completion.chunk", "stop", 4, false},
		{"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, "chat.completion.chunk", "length", 2, true},
		{"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"hi"}]}`, "chat.completion.chunk", "stop", 4, false},
		{"/v1/completions", `{"model":"m","stream":true,"prompt":"Say hi"}`, "text_completion", "stop", 4, false},
		{"/v1/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":4,"prompt":"Say hi"}`, "text_completion", "length", 4, true},
	} {
		evs := events(t, do(t, f, http.MethodPost, tt.path, tt.body, pin))
		content := evs
		if tt.usage {
			last := evs[len(evs)-1]
			content = evs[:len(evs)-1]
			if len(last.Choices) != 0 || last.Usage == nil || last.Usage.CompletionTokens != tt.tokens ||
				last.Usage.TotalTokens != last.Usage.PromptTokens+tt.tokens || last.Object != tt.object {
				t.Errorf("%s: the usage chunk %+v", tt.body, last)
			}
		}
		if len(content) != tt.tokens {
			t.Fatalf("%s: %d content chunks, want %d", tt.body, len(content), tt.tokens)
		}
		for i, ev := range content {
			if ev.Object != tt.object || !recent(ev.Created) || ev.ID != content[0].ID || len(ev.Choices) != 1 || ev.Usage != nil {
				t.Fatalf("%s: chunk %d %+v", tt.body, i, ev)
			}
			c := ev.Choices[0]
			if tt.object == "chat.completion.chunk" {
				if c.Delta == nil || c.Delta.Content == "" || (i == 0) != (c.Delta.Role == "assistant") {
					t.Fatalf("%s: chunk %d delta %+v", tt.body, i, c.Delta)
				}
			} else if c.Text == "" || c.Delta != nil {
				t.Fatalf("%s: chunk %d %+v", tt.body, i, c)
			}
			switch {
			case i < len(content)-1 && c.FinishReason != nil:
				t.Errorf("%s: chunk %d finishes early (%s)", tt.body, i, *c.FinishReason)
			case i == len(content)-1 && (c.FinishReason == nil || *c.FinishReason != tt.finish):
				t.Errorf("%s: last chunk finish %v, want %s", tt.body, c.FinishReason, tt.finish)
			}
		}
	}
}

// health is GET /health as the tests read it.
type health struct {
	Status    string              `json:"status"`
	Stage     string              `json:"stage"`
	Message   string              `json:"message"`
	Endpoints []string            `json:"endpoints"`
	Instances []fleetsim.Instance `json:"instances"`
}

func getHealth(t *testing.T, h http.Handler) (int, health, string) {
	t.Helper()
	rec := do(t, h, http.MethodGet, "/health", "", nil)
	var v health
	if rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("content type %q", rec.Header().Get("Content-Type"))
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	return rec.Code, v, rec.Body.String()
}

// TestFrontendHealth: before a model is served GET /health is 503 not_ready
// with a stage and Dynamo's message; then 200 healthy with the sorted
// unique endpoint URLs and every registered instance (instance_id a
// decimal number); a withdrawn model's workers stay listed. /live is live
// throughout.
func TestFrontendHealth(t *testing.T) {
	t.Parallel()
	f := fleetsim.NewFrontend()
	live := func() {
		t.Helper()
		if rec := do(t, f, http.MethodGet, "/live", "", nil); rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"status":"live"}` {
			t.Fatalf("/live: %d %s", rec.Code, rec.Body)
		}
	}
	live()
	code, v, body := getHealth(t, f)
	if code != http.StatusServiceUnavailable || v.Status != "not_ready" || v.Stage == "" || v.Message != "Service is not ready" {
		t.Fatalf("not ready: %d %s", code, body)
	}
	const big = 18_000_000_000_000_000_001 // above 2^63: must not be written as a float or in hex
	f.SetWorkers("m", []uint64{big}, []uint64{20, 21})
	f.SetWorkers("agg", nil, []uint64{30})
	f.SetInstances("n", nil, []fleetsim.Instance{{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceID: 30,
		Transport: map[string]string{"tcp": "127.0.0.1:0/1e"}}}) // the same record again
	code, v, body = getHealth(t, f)
	if code != http.StatusOK || v.Status != "healthy" {
		t.Fatalf("ready: %d %s", code, body)
	}
	want := []string{"dyn://dynamo.backend.generate", "dyn://dynamo.decode.generate", "dyn://dynamo.prefill.generate"}
	if !slices.Equal(v.Endpoints, want) {
		t.Errorf("endpoints %v, want %v", v.Endpoints, want)
	}
	var ids []uint64
	for _, in := range v.Instances {
		ids = append(ids, in.InstanceID)
		if in.Namespace != "dynamo" || in.Endpoint != "generate" || len(in.Transport) != 1 || in.Transport["tcp"] == "" {
			t.Errorf("instance %+v", in)
		}
	}
	if !slices.Equal(ids, []uint64{30, 20, 21, big}) {
		t.Errorf("instances %v, want each record once, by endpoint then id", ids)
	}
	if !strings.Contains(body, `"instance_id":`+strconv.FormatUint(big, 10)+`,`) {
		t.Errorf("instance_id not a decimal number: %s", body)
	}
	// The last prefill worker leaves: m is withdrawn, its decode workers are
	// still registered; agg and n keep the frontend ready.
	f.SetWorkers("m", nil, []uint64{20, 21})
	if code, v, body = getHealth(t, f); code != http.StatusOK || len(v.Instances) != 3 || served(t, f) != "agg,n" {
		t.Fatalf("after the withdrawal: %d %s", code, body)
	}
	// Its decode workers leave too and an aggregated worker takes the
	// model: served again, as an aggregated model.
	agg := []fleetsim.Instance{{Namespace: "dynamo", Component: "backend", Endpoint: "generate", InstanceID: 40,
		Transport: map[string]string{"tcp": "127.0.0.1:0/28"}}}
	f.SetInstances("m", nil, agg)
	if served(t, f) != "agg,m,n" {
		t.Fatalf("after the disaggregated pools emptied: served %s", served(t, f))
	}
	f.SetInstances("m", nil, nil)
	f.SetWorkers("agg", nil, nil)
	f.SetInstances("n", nil, nil)
	if code, v, body = getHealth(t, f); code != http.StatusServiceUnavailable || v.Status != "not_ready" {
		t.Fatalf("no model served: %d %s", code, body)
	}
	live()
}

// TestSimAnswers: the simulated workers answer in the same shapes: a text
// completion stream cut by max_tokens finishes with length and, asked for,
// a usage chunk; a chat answer without a limit finishes with stop. The
// frontend's /health lists the workers' Endpoint records.
func TestSimAnswers(t *testing.T) {
	t.Parallel()
	sim, err := fleetsim.Start(fleetsim.Options{Root: t.TempDir(), Prefill: 1, Decode: 1, Speed: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Stop()
	pin := map[string]string{}
	var ids []uint64
	for _, w := range sim.Workers() {
		ids = append(ids, w.InstanceID)
		name := map[string]string{"prefill": "x-dynamo-prefill-instance-id", "decode": "x-dynamo-worker-instance-id"}[w.Role]
		pin[name] = strconv.FormatUint(w.InstanceID, 10)
	}
	h := sim.Handler(sim.Namespaces()[0])
	evs := events(t, do(t, h, http.MethodPost, "/v1/completions",
		`{"model":"Qwen/Qwen3-32B","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"prompt":"Once upon a time"}`, pin))
	if len(evs) != 6 {
		t.Fatalf("%d events, want 5 chunks and the usage", len(evs))
	}
	last, usage := evs[4], evs[5]
	if last.Object != "text_completion" || last.Choices[0].Text == "" || last.Choices[0].FinishReason == nil || *last.Choices[0].FinishReason != "length" {
		t.Errorf("last chunk %+v", last)
	}
	if len(usage.Choices) != 0 || usage.Usage == nil || usage.Usage.CompletionTokens != 5 || usage.Usage.PromptTokens <= 0 || !recent(usage.Created) {
		t.Errorf("usage chunk %+v", usage)
	}
	a := whole(t, do(t, h, http.MethodPost, "/v1/chat/completions", `{"model":"Qwen/Qwen3-32B","messages":[{"role":"user","content":"hi"}]}`, pin))
	if a.Object != "chat.completion" || *a.Choices[0].FinishReason != "stop" || a.Usage.CompletionTokens != 16 || a.Choices[0].Message == nil {
		t.Errorf("chat answer %+v", a)
	}
	// The prompt is the rendered chat, one token a byte; asked again, its
	// complete 16-token blocks come from the prefill worker's cache.
	long := `{"model":"Qwen/Qwen3-32B","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("tell me more ", 10) + `"}]}`
	// <|endoftext|><|im_start|>user\n...<|im_end|>\n<|im_start|>assistant\n
	rendered := 2 + len("user\n"+strings.Repeat("tell me more ", 10)) + 1 + len("\n") + 1 + len("assistant\n")
	for i, want := range []int{0, rendered / 16 * 16} {
		a := whole(t, do(t, h, http.MethodPost, "/v1/chat/completions", long, pin))
		if a.Usage.PromptTokens != rendered || a.Usage.PromptTokensDetails == nil || a.Usage.PromptTokensDetails.CachedTokens != want {
			t.Errorf("request %d: usage %+v %+v, want %d prompt tokens, %d cached", i, a.Usage, a.Usage.PromptTokensDetails, rendered, want)
		}
	}
	code, v, body := getHealth(t, h)
	var got []uint64
	for _, in := range v.Instances {
		got = append(got, in.InstanceID)
	}
	slices.Sort(got)
	if code != http.StatusOK || !slices.Equal(got, ids) ||
		!slices.Equal(v.Endpoints, []string{"dyn://dynamo.decode.generate", "dyn://dynamo.prefill.generate"}) {
		t.Errorf("health %d: %s", code, body)
	}
}

// toolAnswer is what the tests read of an answer (whole or a stream
// chunk) that may call tools.
type toolAnswer struct {
	Object  string `json:"object"`
	Choices []struct {
		Text    *string `json:"text"`
		Message *struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		Delta *struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

const weatherTools = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},
	"days":{"type":"integer"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"where":{"type":"object","properties":{"lat":{"type":["null","number"]}}}},
	"required":["city","days","unit","where"]}}},{"type":"function","function":{"name":"noop","parameters":{"type":"object"}}}]`

// TestFrontendToolCalls: a chat request offering tools is answered with a
// call of the first (or the named) one, arguments made from its schema;
// one that ends with a tool result, or says tool_choice none, with text.
func TestFrontendToolCalls(t *testing.T) {
	t.Parallel()
	f, pin := pinned(t)
	read := func(body string) toolAnswer {
		rec := do(t, f, http.MethodPost, "/v1/chat/completions", body, pin)
		var a toolAnswer
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &a) != nil || len(a.Choices) != 1 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		return a
	}
	a := read(`{"model":"m","tools":` + weatherTools + `,"messages":[{"role":"user","content":"Weather?"}]}`)
	c := a.Choices[0]
	if *c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.Content != nil {
		t.Fatalf("%+v", c)
	}
	call := c.Message.ToolCalls[0]
	if call.Type != "function" || call.Function.Name != "get_weather" || !strings.HasPrefix(call.ID, "call_sim_") ||
		call.Function.Arguments != `{"city":"sim","days":1,"unit":"celsius","where":{"lat":1}}` || a.Usage.CompletionTokens == 0 {
		t.Fatalf("%+v", call)
	}
	a = read(`{"model":"m","tools":` + weatherTools + `,"tool_choice":{"type":"function","function":{"name":"noop"}},"messages":[{"role":"user","content":"x"}]}`)
	if got := a.Choices[0].Message.ToolCalls[0]; got.Function.Name != "noop" || got.Function.Arguments != `{}` {
		t.Fatalf("named: %+v", got)
	}
	for _, body := range []string{
		`{"model":"m","tools":` + weatherTools + `,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"noop","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"done"}]}`,
		`{"model":"m","tools":` + weatherTools + `,"tool_choice":"none","messages":[{"role":"user","content":"x"}]}`,
	} {
		a = read(body)
		if c := a.Choices[0]; *c.FinishReason != "stop" || c.Message.Content == nil || *c.Message.Content != "tok0 tok1 tok2" || len(c.Message.ToolCalls) != 0 {
			t.Fatalf("%s: %+v", body, c)
		}
	}
	// Streamed: the call's id and name first, then its arguments in pieces.
	rec := do(t, f, http.MethodPost, "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"tools":`+weatherTools+`,"messages":[{"role":"user","content":"x"}]}`, pin)
	var args strings.Builder
	var finish []string
	chunks := 0
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || d == "[DONE]" {
			continue
		}
		var a toolAnswer
		if err := json.Unmarshal([]byte(d), &a); err != nil {
			t.Fatal(err)
		}
		if a.Usage != nil && len(a.Choices) == 0 {
			continue
		}
		c := a.Choices[0]
		if chunks == 0 && (c.Delta.ToolCalls[0].ID == "" || c.Delta.ToolCalls[0].Function.Name != "get_weather") {
			t.Fatalf("first chunk %s", d)
		}
		chunks++
		args.WriteString(c.Delta.ToolCalls[0].Function.Arguments)
		if c.FinishReason != nil {
			finish = append(finish, *c.FinishReason)
		}
	}
	if chunks != 3 || args.String() != `{"city":"sim","days":1,"unit":"celsius","where":{"lat":1}}` || !slices.Equal(finish, []string{"tool_calls"}) {
		t.Fatalf("%d chunks, arguments %s, finish %v", chunks, args.String(), finish)
	}
	// Text completions call no tools.
	if a := whole(t, do(t, f, http.MethodPost, "/v1/completions", `{"model":"m","prompt":"x","tools":`+weatherTools+`}`, pin)); a.Choices[0].Text != "tok0 tok1 tok2" {
		t.Fatalf("%+v", a)
	}
}

// TestFrontendStopStrings: an answer is cut at the first stop string,
// which is kept only with include_stop_str_in_output; streamed, the last
// piece is cut too.
func TestFrontendStopStrings(t *testing.T) {
	t.Parallel()
	f, pin := pinned(t)
	f.Tokens = 6
	for _, tt := range []struct {
		body, text, finish string
		tokens             int
	}{
		{`{"model":"m","stop":["tok3","k1 t"],"messages":[{"role":"user","content":"x"}]}`, "tok0 to", "stop", 2},
		{`{"model":"m","stop":"tok3","include_stop_str_in_output":true,"messages":[{"role":"user","content":"x"}]}`, "tok0 tok1 tok2 tok3", "stop", 4},
		{`{"model":"m","stop":["never"],"max_tokens":2,"messages":[{"role":"user","content":"x"}]}`, "tok0 tok1", "length", 2},
	} {
		a := whole(t, do(t, f, http.MethodPost, "/v1/chat/completions", tt.body, pin))
		if c := a.Choices[0]; c.Message.Content != tt.text || *c.FinishReason != tt.finish || a.Usage.CompletionTokens != tt.tokens {
			t.Errorf("%s: %q %s %d", tt.body, c.Message.Content, *c.FinishReason, a.Usage.CompletionTokens)
		}
		var text strings.Builder
		var finish string
		for _, ev := range events(t, do(t, f, http.MethodPost, "/v1/chat/completions", strings.Replace(tt.body, `{"model":"m"`, `{"model":"m","stream":true`, 1), pin)) {
			text.WriteString(ev.Choices[0].Delta.Content)
			if ev.Choices[0].FinishReason != nil {
				finish = *ev.Choices[0].FinishReason
			}
		}
		if got := text.String(); got != tt.text || finish != tt.finish {
			t.Errorf("streamed %s: %q %s", tt.body, text.String(), finish)
		}
	}
}

// TestFrontendUnknownInstance: a pin naming an instance the frontend does
// not know (a worker that left) is answered 500, the cause naming which
// instance, decode or prefill.
func TestFrontendUnknownInstance(t *testing.T) {
	t.Parallel()
	f := fleetsim.NewFrontend()
	f.SetWorkers("m", []uint64{1}, []uint64{2})
	for _, tt := range []struct {
		hdr  map[string]string
		want string
	}{
		{map[string]string{"x-dynamo-worker-instance-id": "9", "x-dynamo-prefill-instance-id": "1"}, "instance_id=9 not found"},
		{map[string]string{"x-dynamo-worker-instance-id": "2", "x-dynamo-prefill-instance-id": "8"}, "instance_id=8 not found"},
	} {
		rec := do(t, f, http.MethodPost, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, tt.hdr)
		if rec.Code != 500 || !strings.Contains(rec.Body.String(), fleetsim.UnknownInstanceError+": "+tt.want) {
			t.Errorf("%v: %d %s", tt.hdr, rec.Code, rec.Body)
		}
	}
}

// TestFrontendPinForms: only decimal pins count. A hex (or missing) worker
// id is refused as a bad request, as Dynamo's frontend does; a rank past
// u32 counts as absent.
func TestFrontendPinForms(t *testing.T) {
	t.Parallel()
	f := fleetsim.NewFrontend()
	f.SetWorkers("m", nil, []uint64{26})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, hdr := range []map[string]string{{"x-dynamo-worker-instance-id": "0x1a"}, {"x-dynamo-worker-instance-id": "1a"}, {}} {
		if rec := do(t, f, http.MethodPost, "/v1/chat/completions", body, hdr); rec.Code != http.StatusBadRequest ||
			!strings.Contains(rec.Body.String(), "Worker ID required") {
			t.Errorf("%v: %d %s", hdr, rec.Code, rec.Body)
		}
	}
	f.Reset()
	rec := do(t, f, http.MethodPost, "/v1/chat/completions", body, map[string]string{"x-dynamo-worker-instance-id": "26", "x-dynamo-dp-rank": "4294967296"})
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if got := f.Requests(); len(got) != 1 || got[0].DPRank != nil {
		t.Errorf("a rank past u32 was read: %+v", got)
	}
}

// TestControlAPIWorkerIDs: the control API takes a worker's id as decimal,
// 0x hex, or bare hex as discover and top print instance ids.
func TestControlAPIWorkerIDs(t *testing.T) {
	t.Parallel()
	sim, err := fleetsim.Start(fleetsim.Options{Root: t.TempDir(), Decode: 1, Speed: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Stop)
	id := sim.Workers()[0].InstanceID
	h := sim.Handler(sim.Namespaces()[0])
	for _, tc := range []struct {
		text string
		code int
	}{
		{strconv.FormatUint(id, 10), http.StatusNoContent},
		{"0x" + strconv.FormatUint(id, 16), http.StatusNoContent},
		{strconv.FormatUint(id, 16), http.StatusNoContent},
		{"12345", http.StatusNotFound},
		{"not-an-id", http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/sim/workers/"+tc.text+"/stop-publisher", nil))
		if rec.Code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.text, rec.Code, rec.Body, tc.code)
		}
	}
}
