// Package fleetsim simulates a Dynamo fleet in one process. Frontend
// behaves like `dynamo.frontend --router-mode direct` (Dynamo 1.5): it reads
// the pin headers and enforces the direct-mode rules, answers in the shapes
// OpenAI clients expect, and reports its health as Dynamo's frontend does.
//
// Imports: wire, etcdembed, and artifact, tokenize and chattemplate (the
// workers encode prompts as the frontend does); only the demo, fleet-sim,
// bench and tests use it.
package fleetsim

import (
	"cmp"
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

// UnknownInstance is the frontend's answer to a pin naming an instance it
// does not know (it left): the failure, then its cause as Dynamo's router
// words it.
func UnknownInstance(id uint64) string {
	return fmt.Sprintf("%s: instance_id=%d not found", UnknownInstanceError, id)
}

// maxRecorded bounds the requests a Frontend remembers, and
// maxRecordedBodies the bytes of their bodies it keeps (past them a
// request is remembered without its body): a demo left running holds
// neither without bound.
const (
	maxRecorded       = 10000
	maxRecordedBodies = 16 << 20
)

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
	// instances are the Endpoint records of each model's workers, kept when
	// the model is withdrawn (the workers are still registered).
	instances map[string][]Instance
	// hadPrefill remembers models that were served disaggregated.
	hadPrefill map[string]bool
	// namespace is the namespace of the records SetWorkers makes.
	namespace string
	recorded  []Recorded
	// recordedBytes is the size of the bodies recorded keeps.
	recordedBytes int
	// RejectInStream answers a missing prefill id on a streaming request
	// with a 200 SSE stream that carries the error, instead of a 500.
	RejectInStream bool
	// Tokens is how many tokens an answer has (one chunk each when
	// streamed) unless the request's max_tokens or max_completion_tokens is
	// lower.
	Tokens int
	// Status, when set, answers every request with it (fault injection),
	// with StatusMessage as its error's message when set, else the
	// status's text.
	Status        int
	StatusMessage string
	// TerseErrors answers a pin naming an unknown instance with the bare
	// failure, without its cause (which instance), as a frontend that does
	// not pass the cause on.
	TerseErrors bool
	// Execute, when set, runs a valid request on the simulated workers and
	// writes its response; otherwise the frontend answers at once.
	Execute func(w http.ResponseWriter, r *http.Request, rec Recorded)
	// OnPin, when set, is told of every request received with a pin,
	// before the frontend judges it (pins to unknown instances included).
	OnPin func(rec Recorded)
}

type modelWorkers struct {
	prefill, decode map[uint64]bool
}

// Instance is a worker's Endpoint record as the frontend lists it on
// GET /health: instance_id is a JSON number (decimal), transport the
// record's one-key transport object.
type Instance struct {
	Namespace  string            `json:"namespace"`
	Component  string            `json:"component"`
	Endpoint   string            `json:"endpoint"`
	InstanceID uint64            `json:"instance_id"`
	Transport  map[string]string `json:"transport"`
}

// url is the instance's endpoint as Dynamo spells it:
// dyn://<namespace>.<component>.<endpoint>.
func (i Instance) url() string {
	return "dyn://" + i.Namespace + "." + i.Component + "." + i.Endpoint
}

// NewFrontend returns a frontend of namespace "dynamo" that knows no
// workers.
func NewFrontend() *Frontend {
	return &Frontend{models: map[string]modelWorkers{}, instances: map[string][]Instance{}, hadPrefill: map[string]bool{},
		Tokens: 3, namespace: "dynamo"}
}

// SetWorkers declares the instances serving model (aggregated workers go
// in decode), with Endpoint records of the frontend's namespace: component
// prefill for prefill workers, decode for the decode workers of a model
// ever served with prefill workers, backend for aggregated ones. See
// SetInstances.
func (f *Frontend) SetWorkers(model string, prefill, decode []uint64) {
	f.mu.Lock()
	disaggregated := len(prefill) > 0 || f.hadPrefill[model]
	f.mu.Unlock()
	decodeComponent := "backend"
	if disaggregated {
		decodeComponent = "decode"
	}
	mk := func(ids []uint64, component string) []Instance {
		var out []Instance
		for _, id := range ids {
			out = append(out, Instance{Namespace: f.namespace, Component: component, Endpoint: "generate", InstanceID: id,
				Transport: map[string]string{"tcp": fmt.Sprintf("127.0.0.1:0/%x", id)}})
		}
		return out
	}
	f.SetInstances(model, mk(prefill, "prefill"), mk(decode, decodeComponent))
}

// SetInstances declares the workers serving model by their Endpoint
// records (aggregated workers, of component "backend", go in decode). As
// Dynamo 1.5's frontend does, a model served with prefill workers is
// withdrawn when its last prefill worker leaves while decode workers
// remain; its workers stay listed on GET /health, since they are still
// registered. Once the disaggregated pools are empty (aggregated workers
// alone, or none) it is served again as an aggregated model.
func (f *Frontend) SetInstances(model string, prefill, decode []Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.instances[model] = append(slices.Clone(prefill), decode...)
	if len(f.instances[model]) == 0 {
		delete(f.instances, model)
	}
	disaggDecode := slices.ContainsFunc(decode, func(in Instance) bool { return in.Component != "backend" })
	switch {
	case len(prefill) > 0:
		f.hadPrefill[model] = true
	case !disaggDecode:
		delete(f.hadPrefill, model) // the disaggregated pools are empty
	case f.hadPrefill[model]:
		delete(f.models, model)
		return
	}
	mw := modelWorkers{prefill: map[uint64]bool{}, decode: map[uint64]bool{}}
	for _, in := range prefill {
		mw.prefill[in.InstanceID] = true
	}
	for _, in := range decode {
		mw.decode[in.InstanceID] = true
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
	f.recorded, f.recordedBytes = nil, 0
}

// decimalHeader parses a pin header the way the frontend does: a decimal
// number of bits bits (64 for instance ids, 32 for ranks), anything else
// (hex, garbage, out of range) counts as absent.
func decimalHeader(h http.Header, name string, bits int) *uint64 {
	v := h.Get(name)
	if v == "" {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, bits)
	if err != nil {
		return nil
	}
	return &n
}

// pinHeader reads an instance id pin as the newest frontends do: the
// x-dynamo-* header when it is present, else its legacy aliases in order;
// the one taken is then parsed, so a present but invalid header is no pin
// whatever an alias says.
func pinHeader(h http.Header, names ...string) *uint64 { return pinHeaderBits(h, 64, names...) }

// rankHeader reads a rank pin (a u32) as pinHeader reads an id.
func rankHeader(h http.Header, names ...string) *uint64 { return pinHeaderBits(h, 32, names...) }

func pinHeaderBits(h http.Header, bits int, names ...string) *uint64 {
	for _, n := range names {
		if len(h.Values(n)) > 0 {
			return decimalHeader(h, n, bits)
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
	case r.Method == http.MethodGet && r.URL.Path == "/health":
		f.health(w)
	case r.Method == http.MethodGet && r.URL.Path == "/live":
		writeJSON(w, http.StatusOK, map[string]any{"status": "live"})
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		f.listModels(w)
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions"):
		f.complete(w, r)
	default:
		http.NotFound(w, r)
	}
}

// Readiness as GET /health tells it: before the frontend serves a model
// (no worker has registered one, or every model was withdrawn) it is not
// ready, at the model discovery stage.
const (
	notReadyStage   = "model_discovery"
	notReadyMessage = "Service is not ready"
)

// health answers Dynamo's frontend health: when a model is served, 200
// with status healthy, the sorted unique endpoint URLs of the registered
// instances and their records; else 503 with status not_ready, the stage
// and a message.
func (f *Frontend) health(w http.ResponseWriter) {
	f.mu.Lock()
	ready := len(f.models) > 0
	type recordKey struct {
		url string
		id  uint64
	}
	seen := map[recordKey]bool{}
	var instances []Instance
	for _, list := range f.instances {
		for _, in := range list {
			if key := (recordKey{in.url(), in.InstanceID}); !seen[key] {
				seen[key] = true
				instances = append(instances, in)
			}
		}
	}
	f.mu.Unlock()
	if !ready {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not_ready", "stage": notReadyStage, "message": notReadyMessage})
		return
	}
	slices.SortFunc(instances, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(a.url(), b.url()), cmp.Compare(a.InstanceID, b.InstanceID))
	})
	endpoints := []string{}
	for _, in := range instances {
		if u := in.url(); len(endpoints) == 0 || endpoints[len(endpoints)-1] != u {
			endpoints = append(endpoints, u)
		}
	}
	if instances == nil {
		instances = []Instance{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "healthy", "endpoints": endpoints, "instances": instances})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
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
	q := parseRequest(body)
	rec := Recorded{Path: r.URL.Path, Model: q.Model, Stream: q.Stream, Body: body, Authorization: r.Header.Get("Authorization"),
		Worker:        pinHeader(r.Header, "x-dynamo-worker-instance-id", "x-worker-instance-id"),
		Prefill:       pinHeader(r.Header, "x-dynamo-prefill-instance-id", "x-prefill-instance-id"),
		DPRank:        rankHeader(r.Header, "x-dynamo-dp-rank", "x-dp-rank", "x-data-parallel-rank"),
		PrefillDPRank: rankHeader(r.Header, "x-dynamo-prefill-dp-rank", "x-prefill-dp-rank"),
		DynamoHeaders: http.Header{}, HadTokenData: q.Nvext != nil && len(q.Nvext.TokenData) > 0, ReceivedAt: time.Now()}
	for k, v := range r.Header {
		if isPinHeader(k) {
			rec.DynamoHeaders[k] = v
		}
	}
	f.mu.Lock()
	onPin := f.OnPin
	f.mu.Unlock()
	if onPin != nil && (rec.Worker != nil || rec.Prefill != nil) {
		onPin(rec)
	}
	status, errText := f.decide(&rec)
	w.Header().Set("x-dynamo-served-by", "frontend-emulator") // must never reach clients
	rec.RejectedWith, rec.RespondedStatus = errText, status
	f.mu.Lock()
	if len(f.recorded) < maxRecorded {
		if f.recordedBytes+len(rec.Body) > maxRecordedBodies {
			rec.Body = nil
		}
		f.recordedBytes += len(rec.Body)
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
		// As Dynamo's frontend writes an error met inside an open stream:
		// an event named error whose text is a comment line, no data;
		// then the stream's end marker.
		fmt.Fprintf(w, "event: error\n: %s\n\ndata: [DONE]\n\n", errText)
	case errText != "":
		writeDynamoError(w, status, errText)
	default:
		f.answer(w, r.URL.Path, &q, tokens)
	}
}

// answer answers a valid request at once (no Execute): Tokens tokens, cut
// short by the request's limit.
func (f *Frontend) answer(w http.ResponseWriter, path string, q *openAIRequest, tokens int) {
	if path != "/v1/chat/completions" {
		q.Tools = nil // text completions call no tools
	}
	p := q.planAnswer(tokens, func(i int) string { return fmt.Sprintf("tok%d", i) })
	rep := newReply(path, q, estimatePromptTokens(q.promptText()))
	p.write(w, rep, q.Stream, func(int) error { return nil })
}

// decide applies the direct-mode rules: the status and error text, or 0.
func (f *Frontend) decide(rec *Recorded) (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Status != 0 {
		if f.StatusMessage != "" {
			return f.Status, f.StatusMessage
		}
		return f.Status, http.StatusText(f.Status)
	}
	mw, ok := f.models[rec.Model]
	if !ok {
		return http.StatusNotFound, "Model not found"
	}
	if rec.Worker == nil {
		// No decimal worker id (none, or hex): the frontend refuses the
		// request itself, as a bad request.
		return http.StatusBadRequest, WorkerRequiredError
	}
	unknown := UnknownInstance
	if f.TerseErrors {
		unknown = func(uint64) string { return UnknownInstanceError }
	}
	if !mw.decode[*rec.Worker] {
		return http.StatusInternalServerError, unknown(*rec.Worker)
	}
	if len(mw.prefill) > 0 {
		if rec.Prefill == nil {
			return http.StatusInternalServerError, PrefillRequiredError
		}
		if !mw.prefill[*rec.Prefill] {
			return http.StatusInternalServerError, unknown(*rec.Prefill)
		}
	}
	return http.StatusOK, ""
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// writeDynamoError answers as Dynamo's frontend answers an error before a
// response starts (its ErrorMessage): the message, the status's canonical
// reason as its type, and the code, at the top level.
func writeDynamoError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"message":%s,"type":%s,"code":%d}`, mustJSON(msg), mustJSON(http.StatusText(status)), status)
}
