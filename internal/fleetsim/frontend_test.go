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
