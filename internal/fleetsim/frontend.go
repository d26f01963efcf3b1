// Package fleetsim simulates a Dynamo fleet in one process. Frontend
// behaves like `dynamo.frontend --router-mode direct` (Dynamo 1.5): it reads
// the pin headers and enforces the direct-mode rules.
//
// Imports: wire and etcdembed; only the demo, fleet-sim and tests use it.
package fleetsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Texts the real frontend answers with.
const (
	PrefillRequiredError = "Prefill worker ID required in Direct routing mode but none found in request. Expected prefill_worker_id to be set via x-dynamo-prefill-instance-id header by external router (e.g., EPP)."
	WorkerRequiredError  = "Worker ID required (--direct-route) but none found in request. Expected decode_worker_id or backend_instance_id to be set by external router (e.g., EPP)."
	UnknownInstanceError = "Failed to generate completions"
)

// maxRecorded bounds the requests a Frontend remembers.
const maxRecorded = 10000

// Recorded is one request the frontend saw.
type Recorded struct {
	Path   string
	Model  string
	Stream bool
	// The pins as the frontend reads them: the x-dynamo-* header, else its
	// legacy alias, parsed as decimal.
	Worker        *uint64
	Prefill       *uint64
	DPRank        *uint64
	PrefillDPRank *uint64
	// DynamoHeaders is every pin header as received: x-dynamo-* and the
	// legacy names.
	DynamoHeaders   http.Header
	Body            []byte
	Authorization   string
	HadTokenData    bool
	ReceivedAt      time.Time
	RejectedWith    string
	RespondedStatus int
}

// Frontend is a direct-mode frontend emulator.
type Frontend struct {
	mu     sync.Mutex
	models map[string]modelWorkers
	// hadPrefill remembers models that were served disaggregated.
	hadPrefill map[string]bool
	recorded   []Recorded
	// RejectInStream answers a missing prefill id on a streaming request
	// with a 200 SSE stream that carries the error, instead of a 500.
	RejectInStream bool
	// Tokens is how many content chunks a completion streams.
	Tokens int
	// Status, when set, answers every request with it (fault injection).
	Status int
	// Execute, when set, runs a valid request on the simulated workers and
	// writes its response; otherwise the frontend answers at once.
	Execute func(w http.ResponseWriter, r *http.Request, rec Recorded)
}

type modelWorkers struct {
	prefill, decode map[uint64]bool
}

// NewFrontend returns a frontend that knows no workers.
func NewFrontend() *Frontend {
	return &Frontend{models: map[string]modelWorkers{}, hadPrefill: map[string]bool{}, Tokens: 3}
}

// SetWorkers declares the instances serving model (aggregated workers go
// in decode). As Dynamo 1.5's frontend does, a model served with prefill
// workers is withdrawn when its last prefill worker leaves while decode
// workers remain.
func (f *Frontend) SetWorkers(model string, prefill, decode []uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(prefill) > 0 {
		f.hadPrefill[model] = true
	} else if f.hadPrefill[model] && len(decode) > 0 {
		delete(f.models, model)
		return
	}
	mw := modelWorkers{prefill: map[uint64]bool{}, decode: map[uint64]bool{}}
	for _, id := range prefill {
		mw.prefill[id] = true
	}
	for _, id := range decode {
		mw.decode[id] = true
	}
	if len(prefill) == 0 && len(decode) == 0 {
		delete(f.models, model)
		return
	}
	f.models[model] = mw
}

// Requests returns a copy of what the frontend saw.
func (f *Frontend) Requests() []Recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.recorded)
}

// Reset forgets the recorded requests.
func (f *Frontend) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recorded = nil
}

// decimalHeader parses a pin header the way the frontend does: a decimal
// u64, anything else (hex, garbage) counts as absent.
func decimalHeader(h http.Header, name string) *uint64 {
	v := h.Get(name)
	if v == "" {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

// pinHeader reads a pin as the newest frontends do: the x-dynamo-* header
// first, then its legacy aliases in order.
func pinHeader(h http.Header, names ...string) *uint64 {
	for _, n := range names {
		if v := decimalHeader(h, n); v != nil {
			return v
		}
	}
	return nil
}

// legacyPinNames are the pin headers older frontends read.
var legacyPinNames = map[string]bool{"x-worker-instance-id": true, "x-prefill-instance-id": true, "x-dp-rank": true,
	"x-data-parallel-rank": true, "x-prefill-dp-rank": true}

func isPinHeader(k string) bool {
	k = strings.ToLower(k)
	return strings.HasPrefix(k, "x-dynamo-") || legacyPinNames[k]
}

func (f *Frontend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && (r.URL.Path == "/health" || r.URL.Path == "/live"):
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"healthy"}`)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		f.listModels(w)
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions"):
		f.complete(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (f *Frontend) listModels(w http.ResponseWriter) {
	f.mu.Lock()
	var ids []string
	for m := range f.models {
		ids = append(ids, m)
	}
	f.mu.Unlock()
	slices.Sort(ids)
	type model struct {
		ID     string `json:"id"`
		Object string `json:"object"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, id := range ids {
		out.Data = append(out.Data, model{ID: id, Object: "model"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (f *Frontend) complete(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	var q struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
		Nvext  *struct {
			TokenData json.RawMessage `json:"token_data"`
		} `json:"nvext"`
	}
	_ = json.Unmarshal(body, &q)
	rec := Recorded{Path: r.URL.Path, Model: q.Model, Stream: q.Stream, Body: body, Authorization: r.Header.Get("Authorization"),
		Worker:        pinHeader(r.Header, "x-dynamo-worker-instance-id", "x-worker-instance-id"),
		Prefill:       pinHeader(r.Header, "x-dynamo-prefill-instance-id", "x-prefill-instance-id"),
		DPRank:        pinHeader(r.Header, "x-dynamo-dp-rank", "x-dp-rank", "x-data-parallel-rank"),
		PrefillDPRank: pinHeader(r.Header, "x-dynamo-prefill-dp-rank", "x-prefill-dp-rank"),
		DynamoHeaders: http.Header{}, HadTokenData: q.Nvext != nil && len(q.Nvext.TokenData) > 0, ReceivedAt: time.Now()}
	for k, v := range r.Header {
		if isPinHeader(k) {
			rec.DynamoHeaders[k] = v
		}
	}
	status, errText := f.decide(&rec)
	w.Header().Set("x-dynamo-served-by", "frontend-emulator") // must never reach clients
	rec.RejectedWith, rec.RespondedStatus = errText, status
	f.mu.Lock()
	if len(f.recorded) < maxRecorded {
		f.recorded = append(f.recorded, rec)
	}
	tokens := f.Tokens
	inStream := f.RejectInStream
	execute := f.Execute
	f.mu.Unlock()
	switch {
	case errText == "" && execute != nil:
		execute(w, r, rec)
	case errText != "" && q.Stream && inStream && errText == PrefillRequiredError:
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "event: error\ndata: %s\n\n", mustJSON(map[string]any{"error": map[string]any{"message": errText, "code": 500}}))
	case errText != "":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, `{"error":{"message":%s,"type":"Internal Server Error","code":%d}}`, mustJSON(errText), status)
	case q.Stream:
		streamCompletion(w, q.Model, rec.Worker, tokens)
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "cmpl-sim", "object": "chat.completion", "model": q.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": strings.TrimSpace(strings.Repeat("tok ", tokens))}}},
			"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
		})
	}
}

// decide applies the direct-mode rules: the status and error text, or 0.
func (f *Frontend) decide(rec *Recorded) (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Status != 0 {
		return f.Status, http.StatusText(f.Status)
	}
	mw, ok := f.models[rec.Model]
	if !ok {
		return http.StatusNotFound, fmt.Sprintf("Model not found: %s", rec.Model)
	}
	if rec.Worker == nil {
		return http.StatusInternalServerError, WorkerRequiredError
	}
	if !mw.decode[*rec.Worker] {
		return http.StatusInternalServerError, UnknownInstanceError
	}
	if len(mw.prefill) > 0 {
		if rec.Prefill == nil {
			return http.StatusInternalServerError, PrefillRequiredError
		}
		if !mw.prefill[*rec.Prefill] {
			return http.StatusInternalServerError, UnknownInstanceError
		}
	}
	return http.StatusOK, ""
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func streamCompletion(w http.ResponseWriter, model string, worker *uint64, tokens int) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for i := range tokens {
		chunk := map[string]any{"id": "cmpl-sim", "object": "chat.completion.chunk", "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": fmt.Sprintf("tok%d ", i)}}}}
		fmt.Fprintf(w, "data: %s\n\n", mustJSON(chunk))
		_ = rc.Flush()
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	_ = rc.Flush()
	_ = worker
}
