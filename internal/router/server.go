package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/h1"
	"github.com/continuum-router/continuum/internal/jsonscan"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// maxBufferedResponse bounds a buffered upstream response held for
// inspection.
const maxBufferedResponse = 64 << 20

// Options wire a Server to the rest of the process.
type Options struct {
	Config   *config.Config
	Registry *fleet.Registry
	Store    *load.Store
	// Picker pins requests; the load-based picker over Store when nil
	// (round-robin without a store).
	Picker   pick.Picker
	Metrics  *telemetry.RouterMetrics
	Gatherer prometheus.Gatherer
	Logger   *slog.Logger
	// Subscriptions lists the load subscriptions for the admin API.
	Subscriptions func() []load.SubscriptionInfo
	// BrokerCoverage, when set, is the broker_coverage of GET
	// /admin/dynamo/workers with transport: broker.
	BrokerCoverage func() []admin.BrokerCoverage
	// DiscoveryConnected reports the discovery source's state.
	DiscoveryConnected func() bool
	// KV, when set, is the KV-aware view for GET /admin/dynamo/kv.
	KV func() admin.KVResponse
	// ImportConfig, when set, reloads from a configuration document PUT to
	// /admin/config (YAML or JSON) and says how it went.
	ImportConfig func(data []byte) admin.Reload
	// ConfigStatus, when set, is GET /admin/config/status.
	ConfigStatus func() admin.ConfigStatus
	// DiscoverySettling, when set, returns a channel that closes when
	// discovery has a view to pin from again, or nil when it has one now
	// (a reload replacing the watcher). A request that finds no worker
	// while discovery settles waits for it, at most settleWait.
	DiscoverySettling func() <-chan struct{}
	// CountTokens, when set, renders a chat completion request (body) for
	// the Dynamo model with the chat template and tokenizer its workers
	// declare, as KV-aware routing loads them, and returns the prompt's
	// size; without them it returns the reason (a KV selection result such
	// as tokenizer_unavailable). POST /v1/messages/count_tokens answers
	// 501 without it, when it returns CountTokensOff and while the
	// artifacts are missing; 413 for a prompt past the render's bounds and
	// 503 for a render that failed (see countTokensAnswer).
	CountTokens func(model string, body []byte) (tokens int, reason string)
	// Transport overrides the upstream transport (tests, benchmarks).
	Transport http.RoundTripper
	// Now is the clock of breakers and rate limits; time.Now when nil.
	Now func() time.Time
}

// CountTokensOff is the reason CountTokens gives while KV-aware routing is
// off (it may be turned on by a reload).
const CountTokensOff = "kv_routing_off"

// The reasons CountTokens gives (KV selection results) that are about the
// request or the moment, not about the model's artifacts.
const (
	countTokensTooLarge     = "prompt_too_large"
	countTokensRenderFailed = "render_unavailable"
	// CountTokensLoading: the model's pinned artifacts are still loading.
	CountTokensLoading = "artifacts_loading"
)

// Server is the router.
type Server struct {
	opts     Options
	cfg      atomic.Pointer[config.Config]
	backends *backends
	keys     atomic.Pointer[keys]
	client   *http.Client
	logger   *slog.Logger
	ready    atomic.Bool
	rr       atomic.Uint64
	// failLog bounds the warnings of failed dispatches (one a second),
	// reqLog those of failed requests (a client that leaves early makes
	// one at will).
	failLog  logLimiter
	reqLog   logLimiter
	picks    selections
	dispatch *shim.Dispatcher[*Backend]
	// routes are the backends and the dispatch plan built from them, one
	// pair: a request that reads both reads them of one configuration (a
	// replica whose settings changed is another *Backend, which a plan of
	// the other configuration does not know as a replica).
	routes atomic.Pointer[routes]
	// queue holds requests that found every worker busy.
	queue *busyQueue
	// inFlight counts the inference requests being served.
	inFlight atomic.Int64
	// cutAt is when the process's shutdown grace ends (unix nanoseconds;
	// 0 while it is not shutting down): a request whose context ends
	// from then on was cut by the router, not left by its client.
	cutAt atomic.Int64
}

// New builds a server from configuration.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = telemetry.NewRouterMetrics(nil)
	}
	if o.Picker == nil {
		if o.Store != nil {
			o.Picker = pick.NewLoadBased(o.Store)
		} else {
			o.Picker = &pick.RoundRobin{}
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	rt := o.Transport
	if rt == nil {
		rt = newTransport()
	}
	client := &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	s := &Server{opts: o, client: client, logger: o.Logger,
		backends: newBackends(o.Config.Backends, client), queue: newBusyQueue(o.Metrics), reqLog: logLimiter{burst: requestLogBurst}}
	s.keys.Store(newKeys(o.Config.APIKeys, nil))
	if o.Registry != nil {
		s.picks.live = func() func(load.Key) bool { return liveRanks(o.Registry.Snapshot()) }
	}
	s.cfg.Store(o.Config)
	plan := shimPlan(o.Config, s.backends, o.Registry != nil)
	s.dispatch = shim.NewDispatcher(o.Picker, plan)
	s.routes.Store(&routes{plan: plan, backends: s.backends.all()})
	return s
}

// requestLogBurst bounds the warnings of failed requests a second; those
// past it are counted in the next one logged (and all are in the metrics).
const requestLogBurst = 20

// routes is a configuration's backends and the dispatch plan of them.
type routes struct {
	plan     *shim.Plan[*Backend]
	backends []*Backend
}

// SetConfig applies a new configuration to the requests that follow: the
// backends (one whose settings did not change keeps its health and breaker
// state), the API keys and their rate limits (an unchanged limit keeps its
// bucket), the dispatch plan (shim pools, model map, fallback), the admin
// token, the busy threshold and the queue (requests already waiting keep
// the wait they started with). Listener addresses are the daemon's: they
// do not change here.
func (s *Server) SetConfig(cfg *config.Config) {
	s.backends.replace(cfg.Backends)
	s.keys.Store(newKeys(cfg.APIKeys, s.keys.Load()))
	plan := shimPlan(cfg, s.backends, s.opts.Registry != nil)
	s.dispatch.SetPlan(plan)
	s.routes.Store(&routes{plan: plan, backends: s.backends.all()})
	s.cfg.Store(cfg)
}

// SetPicker makes p the picker of the requests that follow (a reload
// turning KV-aware selection on or off); requests in flight release their
// reservations to the picker that made them.
func (s *Server) SetPicker(p pick.Picker) { s.dispatch.SetPicker(p) }

// Run checks backend health until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	s.backends.runHealth(ctx)
	return nil
}

// CloseIdleConnections closes the router's idle connections to its
// backends (the health checks' too): once nothing is in flight, a stopped
// router holds none.
func (s *Server) CloseIdleConnections() { s.client.CloseIdleConnections() }

// SetReady sets readiness (false while draining).
func (s *Server) SetReady(on bool) { s.ready.Store(on) }

// SetShutdownDeadline says when the shutdown's grace ends: requests still
// running then are cut by the router's own listeners, and are accounted
// as 503 (the router gave up on them), not as 499 (a client that left).
func (s *Server) SetShutdownDeadline(t time.Time) { s.cutAt.Store(t.UnixNano()) }

// Handler returns the HTTP handler: every request first loses its
// client-sent x-dynamo-* headers.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	chatAt, completionsAt := s.endpoint("/v1/chat/completions"), s.endpoint("/v1/completions")
	chat, completions := s.inference(chatAt), s.inference(completionsAt)
	mux.HandleFunc("POST /v1/chat/completions", chat)
	mux.HandleFunc("POST /v1/completions", completions)
	for _, prefix := range []string{"", "/anthropic"} {
		mux.HandleFunc("POST "+prefix+"/v1/messages", s.instrument(prefix+"/v1/messages", s.messages))
		mux.HandleFunc("POST "+prefix+"/v1/messages/count_tokens", s.instrument(prefix+"/v1/messages/count_tokens", s.countTokens))
	}
	mux.HandleFunc("POST /v1/responses", s.instrument("/v1/responses", s.responses))
	mux.HandleFunc("POST /v1/responses/compact", s.instrument("/v1/responses/compact", s.compact))
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /v1/models/{id...}", s.model) // ids may hold slashes (org/name)
	mux.HandleFunc("GET /health", health)
	mux.HandleFunc("GET /ready", s.readiness)
	if s.opts.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	}
	s.mountAdmin(mux, true)
	mux.HandleFunc("/", s.catchAll(mux, true))
	return &front{s: s, mux: mux, chat: chat, completions: completions, chatAt: chatAt, completionsAt: completionsAt}
}

// catchAll answers what no route of mux takes: a known path asked with
// another method 405 with Allow, anything else 404; in the Messages API's
// error shape under its paths, where an Anthropic client reads the
// answer. An admin path where the admin API is not served (no
// admin.token, or, on the main listener, admin.bind_address set) is 404
// whatever the method: its routes are not advertised.
func (s *Server) catchAll(mux *http.ServeMux, onMain bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, code, message string) { writeError(w, status, code, message) }
		if strings.HasPrefix(r.URL.Path, "/v1/messages") || strings.HasPrefix(r.URL.Path, "/anthropic/") {
			fail = func(status int, code, message string) { (&anthropicOut{}).fail(w, status, code, "", message) }
		}
		if strings.HasPrefix(r.URL.Path, "/admin/") {
			if a := s.cfg.Load().Admin; a.Token == "" || onMain && a.BindAddress != "" {
				fail(http.StatusNotFound, CodeNotFound, "no such route")
				return
			}
		}
		if allow := allowedMethods(mux, r); allow != "" {
			w.Header().Set("Allow", allow)
			fail(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
				"the method "+r.Method+" is not allowed on "+r.URL.Path+" (allowed: "+allow+")")
			return
		}
		fail(http.StatusNotFound, CodeNotFound, "no such route")
	}
}

// routeMethods are the methods the router's routes are registered with
// (GET ones also answer HEAD).
var routeMethods = [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete}

// allowedMethods lists the methods a route of mux other than the catch-all
// takes at r's path ("" when none does): a known path asked with another
// method is answered 405 with them, as RFC 9110 asks, not "no such route".
func allowedMethods(mux *http.ServeMux, r *http.Request) string {
	var allow []string
	probe := *r
	for _, m := range routeMethods {
		probe.Method = m
		if _, pattern := mux.Handler(&probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	return strings.Join(allow, ", ")
}

// front is the router's handler: it strips the client's pin headers, then
// sends the two completion routes, nearly every request a router serves,
// to their handlers itself and the rest through the mux. Exactly what the
// mux would do for them (a POST to the path as written, nothing escaped
// in it), without its pattern lookup: a request's path through the router
// is short, and every layer it crosses is code and data it brings into a
// cache that other processes have used since the last request.
type front struct {
	s                     *Server
	mux                   *http.ServeMux
	chat, completions     http.HandlerFunc
	chatAt, completionsAt *endpoint
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	stripPinHeaders(r.Header)
	if r.Method == http.MethodPost && r.URL.RawPath == "" {
		switch r.URL.Path {
		case "/v1/chat/completions":
			f.chat(w, r)
			return
		case "/v1/completions":
			f.completions(w, r)
			return
		}
	}
	f.mux.ServeHTTP(w, r)
}

// health is GET /health: the process serves.
func health(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"ok"}`)
}

// AdminHandler is the admin API, for admin.bind_address, with /metrics
// beside it so that one address serves continuum top.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	s.mountAdmin(mux, false)
	// /health here too: a liveness probe on the admin listener is not
	// refused when client connections fill server.max_connections (a
	// router restarted for being busy would drop every stream it holds).
	mux.HandleFunc("GET /health", health)
	if s.opts.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/", s.catchAll(mux, false))
	return stripDynamoHeaders(mux)
}

// stripDynamoHeaders removes every pin header a client sent, before
// anything else sees the request, whatever the configuration.
func stripDynamoHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stripPinHeaders(r.Header)
		next.ServeHTTP(w, r)
	})
}

func stripPinHeaders(h http.Header) {
	for k := range h {
		if shim.IsPinHeader(k) {
			delete(h, k)
		}
	}
}

// unseeded reports whether Dynamo discovery has no view yet: none since
// the start, or none since a reload emptied the registry for a new
// watcher (a source switched, discovery turned back on) whose first full
// read has not come.
func (s *Server) unseeded(cfg *config.Config) bool {
	if !cfg.Dynamo.Enabled || s.opts.Registry == nil {
		return false
	}
	if s.opts.Registry.Generation() == 0 {
		return true
	}
	return s.opts.DiscoverySettling != nil && s.opts.DiscoverySettling() != nil
}

func (s *Server) readiness(w http.ResponseWriter, _ *http.Request) {
	cfg := s.cfg.Load()
	ready := s.ready.Load()
	reason := "draining"
	if ready && s.unseeded(cfg) {
		ready, reason = false, "dynamo discovery not seeded yet"
	}
	w.Header().Set("Content-Type", "application/json")
	if !ready {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "not_ready", "reason": reason})
		return
	}
	_, _ = io.WriteString(w, `{"status":"ready"}`)
}

// models lists the models the client's key may see (see catalog).
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	set, ok := s.modelCatalog(w, r)
	if !ok {
		return
	}
	out := struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}{Object: "list", Data: []modelObject{}}
	ids := make([]string, 0, len(set))
	for m := range set {
		ids = append(ids, m)
	}
	slices.Sort(ids)
	for _, id := range ids {
		out.Data = append(out.Data, newModelObject(id))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// model handles GET /v1/models/{id}: the model as the list shows it, or
// 404 model_not_found for one the list does not show.
func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	set, ok := s.modelCatalog(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if !set[id] {
		writeParamError(w, http.StatusNotFound, CodeModelNotFound, "model",
			"the model "+strconvQuote(id)+" does not exist here (GET /v1/models lists the models)")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(newModelObject(id))
}

// modelObject is a model as the OpenAI models API describes one.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func newModelObject(id string) modelObject {
	return modelObject{ID: id, Object: "model", OwnedBy: "continuum"}
}

// modelCatalog is the models listed for the client of r; false, with the
// 401 written, when the router wants a key r does not carry.
func (s *Server) modelCatalog(w http.ResponseWriter, r *http.Request) (map[string]bool, bool) {
	policy := s.keys.Load().match(r)
	if !s.keys.Load().open() && policy == nil {
		writeError(w, http.StatusUnauthorized, CodeUnauthorized, "a valid API key is required")
		return nil, false
	}
	set, _ := s.catalog(policy)
	return set, true
}

// catalog is what the router knows of models for a client with policy.
// listed is what GET /v1/models shows it: the models of the enabled,
// non-internal backends its key may use, the models discovered Dynamo
// workers serve, and the client ids of shim.model_map whose Dynamo model a
// worker serves. anyModel reports a backend of those with no model list
// that plain routing uses (role unified, not a direct-mode frontend of the
// shim): it takes any model, so no model can be called unknown. With the
// shim on, a worker's model counts only when the key may use an enabled
// replica of the worker's namespace: a key kept from every frontend that
// reaches a model cannot call it, and is told so by a 404 as for a plain
// backend's model it may not use (a 503 would have its SDK retry what
// cannot succeed). A replica's health does not count: a model whose
// replicas are all down is there, and answers 503.
func (s *Server) catalog(policy *keyPolicy) (listed map[string]bool, anyModel bool) {
	cfg := s.cfg.Load()
	rt := s.routes.Load()
	plan := rt.plan
	listed = map[string]bool{}
	for _, b := range rt.backends {
		if b.cfg.Enabled && !b.cfg.Internal && policy.allows(b.Name()) {
			if len(b.cfg.Models) == 0 && b.cfg.Role == config.RoleUnified && !plan.IsReplica(b) {
				anyModel = true
			}
			for _, m := range b.cfg.Models {
				listed[m] = true
			}
		}
	}
	if cfg.Dynamo.Enabled && s.opts.Registry != nil {
		// reach: the namespaces the key may reach through the shim (nil:
		// every namespace, the shim being off or the key unrestricted).
		var reach []string
		if plan.Enabled() && policy != nil && policy.allowed != nil {
			reach = plan.Candidates(func(b *Backend) bool { return b.cfg.Enabled && policy.allows(b.Name()) }).Namespaces
			if reach == nil {
				reach = []string{}
			}
		}
		served := map[string]bool{}
		for wk := range s.opts.Registry.Snapshot().Workers.All() {
			if wk.Model != "" && wk.Role != fleet.RoleUnknown && (reach == nil || slices.Contains(reach, wk.ID.Namespace)) {
				served[wk.Model] = true
			}
		}
		for m := range served {
			listed[m] = true
		}
		for client, dyn := range cfg.Dynamo.Shim.ModelMap {
			if served[dyn] {
				listed[client] = true
			}
		}
	}
	return listed, anyModel
}

// known reports whether model may exist for a client with policy: GET
// /v1/models lists it, a backend takes any model, or Dynamo discovery has
// not yet seen the fleet (a worker may still serve it). A request for a
// model that is not known fails with 404 model_not_found; one for a known
// model that nothing can take now fails with 503.
func (s *Server) known(model string, policy *keyPolicy) bool {
	if s.unseeded(s.cfg.Load()) {
		return true
	}
	listed, anyModel := s.catalog(policy)
	return anyModel || listed[model]
}

// readBody reads a request body of at most limit bytes, in one
// allocation when the client declared its length.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		// Refused before a byte of it is read (or, with Expect:
		// 100-continue, asked for).
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if n := r.ContentLength; n > 0 && n <= limit {
		// The declared length is the whole body (the server enforces
		// it), within the limit: read as it is, with no bound to watch.
		return readDeclared(r.Body, n)
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

// wholeBodyAlloc is the largest declared body read into one allocation
// made before its bytes arrive: a larger one grows as they come, so that
// a client declaring the most it may send and sending little holds little.
const wholeBodyAlloc = 1 << 20

// readDeclared reads a body of declared length n (which the server
// enforces: r ends after n bytes), in one allocation up to wholeBodyAlloc
// and otherwise in a buffer that doubles as the bytes arrive.
func readDeclared(r io.Reader, n int64) ([]byte, error) {
	if n <= wholeBodyAlloc {
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			if err == io.EOF { // nothing came: still short of n
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return buf, nil
	}
	buf := make([]byte, 0, wholeBodyAlloc)
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(int64(cap(buf)), n-int64(len(buf)))))
		}
		m, err := r.Read(buf[len(buf):int(min(int64(cap(buf)), n))])
		buf = buf[:len(buf)+m]
		if err == io.EOF && int64(len(buf)) < n {
			return nil, io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
	}
	return buf, nil
}

// request is what the router reads of an inference body.
type request struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Prompt json.RawMessage `json:"prompt"`
	Nvext  json.RawMessage `json:"nvext"`
}

// estimateTokens is the prompt's token estimate the picker is given: the
// text's estimate (no tokenizer is at hand) and the ids counted.
func (q *request) estimateTokens() int {
	return pick.EstimateTokens(q.promptText()) + q.promptIDs()
}

// BodySummary is what the router reads of a chat or completion body to
// route it: the model (an exact "model" member), whether it has messages
// and a prompt, and the prompt's token estimate.
type BodySummary struct {
	Model               string
	Messages, Prompt    bool
	PromptTokenEstimate int
}

// SummarizeBody reads body as the router reads an inference request; its
// errors are the router's (a body that is not JSON, or not a request).
// kv-inspect uses it to give the picker what the router would.
func SummarizeBody(body []byte) (BodySummary, error) {
	var q request
	if err := decodeRequest(body, &q); err != nil {
		return BodySummary{}, err
	}
	return BodySummary{Model: q.Model, Messages: q.Messages != nil, Prompt: len(q.Prompt) > 0, PromptTokenEstimate: q.estimateTokens()}, nil
}

// promptText gathers the text a token estimate is made from.
func (q *request) promptText() string {
	var parts []string
	add := func(raw json.RawMessage) {
		raw = bytes.TrimLeft(raw, " \t\r\n")
		if len(raw) == 0 {
			return
		}
		switch raw[0] {
		case '"':
			var s string
			if json.Unmarshal(raw, &s) == nil {
				parts = append(parts, s)
			}
		case '[':
			// Walked in place: a list of token ids (the common large
			// one) costs nothing per id.
			eachItem(raw, func(item []byte) {
				switch item[0] {
				case '{':
					var p struct {
						Text string `json:"text"`
					}
					if json.Unmarshal(item, &p) == nil && p.Text != "" {
						parts = append(parts, p.Text)
					}
				case '"':
					var s string
					if json.Unmarshal(item, &s) == nil {
						parts = append(parts, s)
					}
				}
			})
		}
	}
	for _, m := range q.Messages {
		add(m.Content)
	}
	if len(q.Prompt) > 0 {
		add(q.Prompt)
	}
	return strings.Join(parts, "\n")
}

// promptIDs counts the token ids of a prompt given as ids ([1, 2, 3], or a
// batch of such lists), which promptText has no text of: their number is
// the prompt's length exactly.
func (q *request) promptIDs() int {
	n := 0
	isID := func(item []byte) bool { return item[0] == '-' || '0' <= item[0] && item[0] <= '9' }
	eachItem(q.Prompt, func(item []byte) {
		switch {
		case isID(item):
			n++
		case item[0] == '[':
			eachItem(item, func(id []byte) {
				if isID(id) {
					n++
				}
			})
		}
	})
	return n
}

// eachItem calls f with each item of the JSON array raw (checked JSON, as
// a decoded body's members are), in order; nothing when raw is not an
// array. Items are never empty.
func eachItem(raw []byte, f func(item []byte)) {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return
	}
	i = jsonscan.SkipSpace(raw, i+1)
	for i < len(raw) && raw[i] != ']' {
		end := jsonscan.SkipValue(raw, i)
		if end <= i {
			return
		}
		f(raw[i:end])
		i = jsonscan.SkipSpace(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = jsonscan.SkipSpace(raw, i+1)
		}
	}
}

// statusRecorder remembers the status written, for logs and metrics. It
// also holds what the request needs for the whole of its handling, so
// that it comes in one allocation: its id's header value and its
// exchange (for the completion routes, which the router serves most).
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	// inFlight: admit took one of server.max_in_flight's slots, released
	// when the handler returns.
	inFlight bool
	// idSlot is the header value of an id the router made for the request.
	idSlot [1]string
	// x is the exchange of a completion request (serveInference).
	x exchange
	// ended: a converted stream (Messages, Responses) went out whole, to
	// its last event; failedInStream, when not 0, is the status of the
	// failure its error event told the client of.
	ended          bool
	failedInStream int
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

// WriteHeaderFields relays an answer's fields (h1.FieldsWriter): through
// the lean server's answer as they are, else added to the header map.
func (r *statusRecorder) WriteHeaderFields(code int, fields string, keep func(name string) bool) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	if fw, ok := r.ResponseWriter.(h1.FieldsWriter); ok {
		fw.WriteHeaderFields(code, fields, keep)
		return
	}
	h1.AddFields(r.Header(), fields, keep)
	r.ResponseWriter.WriteHeader(code)
}

// SetField sets one of the router's own fields of the answer through the
// lean server's answer (h1.FieldSetter); false when it does not take it.
func (r *statusRecorder) SetField(name, value string) bool {
	if fs, ok := r.ResponseWriter.(h1.FieldSetter); ok {
		return fs.SetField(name, value)
	}
	return false
}

// setField sets the answer's field name to vs[0] (vs of one value), as
// w.Header()[name] = vs would, with no header map when w takes it as a
// field of its own (h1.FieldSetter).
func setField(w http.ResponseWriter, name string, vs []string) {
	if fs, ok := w.(h1.FieldSetter); ok && fs.SetField(name, vs[0]) {
		return
	}
	w.Header()[name] = vs
}

// DeclareLength declares the answer's body length (h1.LengthDeclarer):
// to the lean server's answer as it is, else as a Content-Length field.
func (r *statusRecorder) DeclareLength(n int64) {
	declareLength(r.ResponseWriter, n)
}

// declareLength declares w's body length n ≥ 0 before its status: through
// h1.LengthDeclarer when w has it (no header value to allocate), else in
// the header map.
func declareLength(w http.ResponseWriter, n int64) {
	if ld, ok := w.(h1.LengthDeclarer); ok {
		ld.DeclareLength(n)
		return
	}
	w.Header()["Content-Length"] = []string{strconv.FormatInt(n, 10)}
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(p)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// FlushError sends what is buffered to the client: the status (200 when
// none was written) and the body so far. A stream flushes through it
// without http.ResponseController walking the wrapper for every event.
func (r *statusRecorder) FlushError() error {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	if f, ok := r.ResponseWriter.(interface{ FlushError() error }); ok {
		return f.FlushError()
	}
	return http.NewResponseController(r.ResponseWriter).Flush()
}

// inference handles chat and text completions at e's path.
func (s *Server) inference(e *endpoint) http.HandlerFunc {
	return s.instrumentAt(e, func(w http.ResponseWriter, r *http.Request) { s.serveInference(w, r, e.path) })
}

// endpoint is the metric series of one route, looked up once rather than
// per request.
type endpoint struct {
	s        *Server
	path     string
	byClass  [6]prometheus.Counter // 1xx .. 5xx at [1] .. [5]
	duration prometheus.Observer
}

func (s *Server) endpoint(path string) *endpoint {
	e := &endpoint{s: s, path: path, duration: s.opts.Metrics.RequestDuration.WithLabelValues(path)}
	for c := 1; c <= 5; c++ {
		e.byClass[c] = s.opts.Metrics.Requests.WithLabelValues(path, strconv.Itoa(c)+"xx")
	}
	return e
}

// done accounts for a request that ended: its status (499 when the client
// went away, 503 when the end of a grace cut it (a shutdown's, or a
// replaced listener's drain), 502 when its answer was cut short), its
// duration, and a warning for a failure.
func (e *endpoint) done(rec *statusRecorder, ctx context.Context, start time.Time, id string, aborted bool) {
	s := e.s
	if rec.inFlight {
		s.inFlight.Add(-1)
	}
	status := rec.status
	switch {
	case ctx.Err() != nil && !rec.x.streamDone && !rec.ended:
		status = 499 // the client went away (not once it had its whole stream)
		if at := s.cutAt.Load(); at != 0 && time.Now().UnixNano() >= at || h1.Cut(ctx) {
			// Cut at the end of a grace: the shutdown's, or that of a
			// listener a reload replaced.
			status = http.StatusServiceUnavailable
		}
	case aborted:
		status = http.StatusBadGateway // the answer was cut short
	case rec.failedInStream != 0:
		status = rec.failedInStream // the stream ended with an error event
	}
	if c := status / 100; c >= 1 && c <= 5 {
		e.byClass[c].Inc()
	} else {
		s.opts.Metrics.Requests.WithLabelValues(e.path, strconv.Itoa(c)+"xx").Inc()
	}
	elapsed := time.Since(start)
	e.duration.Observe(elapsed.Seconds())
	if status >= 500 || status == 499 {
		if left, ok := s.reqLog.allow(start.Add(elapsed)); ok {
			s.logger.Warn("request failed", "path", e.path, "status", status, "duration", elapsed, "request_id", id,
				"not_logged_since_last", left)
		}
	}
}

// instrument counts a handler's requests by status class and times them
// under path.
func (s *Server) instrument(path string, serve http.HandlerFunc) http.HandlerFunc {
	return s.instrumentAt(s.endpoint(path), serve)
}

func (s *Server) instrumentAt(e *endpoint, serve http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		id, idValue := requestID(r, &rec.idSlot)
		w.Header()[requestIDHeader] = idValue
		// Accounted for however the handler ends: an answer cut short
		// (http.ErrAbortHandler, after its upstream broke off) panics
		// through here, and the panic goes on to the server, which closes
		// the connection.
		defer func() {
			aborted := recover()
			e.done(rec, r.Context(), start, id, aborted != nil)
			if aborted != nil {
				panic(aborted)
			}
		}()
		serve(rec, r)
	}
}

// failFunc writes a router error in an ingress's shape.
type failFunc func(w http.ResponseWriter, status int, code, param, message string)

// admit checks the client's credential (Authorization: Bearer, or
// x-api-key) and rate limit and reads the body; when it returns false it
// has answered through fail.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, fail failFunc) (*keyPolicy, []byte, bool) {
	keys := s.keys.Load()
	policy := keys.match(r)
	if !s.admitClient(w, keys, policy, fail) {
		return nil, nil, false
	}
	// The body is not pooled: the transport may still read it after the
	// upstream answered.
	limit := s.cfg.Load().Server.MaxBodyBytes
	body, err := readBody(w, r, limit)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, http.StatusRequestEntityTooLarge, CodeBadRequest, "", fmt.Sprintf("request body larger than %d bytes (server.max_body_bytes)", limit))
			return nil, nil, false
		}
		fail(w, http.StatusBadRequest, CodeBadRequest, "", "could not read the request body")
		return nil, nil, false
	}
	return policy, body, true
}

// admitClient takes one of server.max_in_flight's slots (when w is the
// recorder, which gives it back) and checks the client's key (policy,
// what keys matched of its credential) and the key's rate limit; when it
// returns false it has answered through fail.
func (s *Server) admitClient(w http.ResponseWriter, keys *keys, policy *keyPolicy, fail failFunc) bool {
	if rec, ok := w.(*statusRecorder); ok {
		limit := int64(s.cfg.Load().Server.MaxInFlight)
		if s.inFlight.Add(1) > limit {
			s.inFlight.Add(-1)
			s.opts.Metrics.Overloaded.WithLabelValues(telemetry.OverloadInFlight).Inc()
			w.Header().Set("Retry-After", "1")
			fail(w, http.StatusServiceUnavailable, CodeOverloaded, "", fmt.Sprintf("the router is serving its limit of %d requests (server.max_in_flight): retry shortly", limit))
			return false
		}
		rec.inFlight = true
	}
	if !keys.open() && policy == nil {
		fail(w, http.StatusUnauthorized, CodeUnauthorized, "", "a valid API key is required")
		return false
	}
	if policy != nil && policy.bucket != nil {
		if ok, wait := policy.bucket.take(s.opts.Now()); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
			fail(w, http.StatusTooManyRequests, CodeRateLimited, "", "rate limit exceeded for this API key")
			return false
		}
	}
	return true
}

func (s *Server) serveInference(w http.ResponseWriter, r *http.Request, path string) {
	policy, body, ok := s.admit(w, r, writeParamError)
	if !ok {
		return
	}
	var x *exchange
	if rec, ok := w.(*statusRecorder); ok {
		x = &rec.x
	} else {
		x = new(exchange)
	}
	*x = exchange{s: s, w: w, r: r, ctx: r.Context(), path: path, policy: policy, reveal: r.Header[revealHeader] != nil}
	x.serveBody(body)
}

// serveBody decodes a completion request's body and routes it.
func (x *exchange) serveBody(body []byte) {
	q := &x.query
	if err := decodeRequest(body, q); err != nil {
		writeError(x.w, http.StatusBadRequest, CodeBadRequest, err.Error())
		return
	}
	if q.Model == "" {
		writeParamError(x.w, http.StatusBadRequest, CodeBadRequest, "model", "model is required")
		return
	}
	if len(q.Nvext) > 0 {
		body = withoutClientRouting(body, x.reveal)
	}
	x.body, x.q = body, q
	x.route()
}
