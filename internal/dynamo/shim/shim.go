// Package shim dispatches requests through Dynamo's direct-mode frontend
// (`dynamo.frontend --router-mode direct`), which serves a request on
// exactly the workers its pin headers name and refuses to choose them
// itself. It owns which Dynamo namespaces a request may go to and their
// frontend replica pools, the model map, the pin headers, and what a
// frontend's answer means for the request (relay, refuse, fall back). It
// does no I/O: the router sends, and tells it what came back.
//
// Replicas are of the caller's type R (the router's backends), so that the
// plan hands them back without a lookup per request.
//
// Imports: fleet and pick only.
package shim

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/pick"
)

// Pin headers, with decimal ids (a frontend reads anything else, hex
// included, as absent). The rank headers go whenever the worker's card
// declares data_parallel_size, rank 0 included.
const (
	HeaderWorkerInstanceID  = "x-dynamo-worker-instance-id"
	HeaderPrefillInstanceID = "x-dynamo-prefill-instance-id"
	HeaderDPRank            = "x-dynamo-dp-rank"
	HeaderPrefillDPRank     = "x-dynamo-prefill-dp-rank"
)

// Legacy pin headers: the only names older direct-mode frontends read, and
// aliases the newest read when the x-dynamo-* form is absent. Clients may
// send none of them; the router may send them beside the x-dynamo-* form.
const (
	LegacyHeaderWorkerInstanceID  = "x-worker-instance-id"
	LegacyHeaderPrefillInstanceID = "x-prefill-instance-id"
	LegacyHeaderDPRank            = "x-dp-rank"
	// LegacyHeaderDataParallelRank is another alias of the decode rank; the
	// router strips it from clients but never sends it.
	LegacyHeaderDataParallelRank = "x-data-parallel-rank"
	LegacyHeaderPrefillDPRank    = "x-prefill-dp-rank"
)

var legacyPinHeaders = [...]string{LegacyHeaderWorkerInstanceID, LegacyHeaderPrefillInstanceID, LegacyHeaderDPRank,
	LegacyHeaderDataParallelRank, LegacyHeaderPrefillDPRank}

// Routing paths, the label of disaggregated_requests_total{routing_path}.
const (
	// PathDisaggregated: pinned to a prefill and a decode worker.
	PathDisaggregated = "disaggregated"
	// PathAggregated: pinned to one worker that prefills itself.
	PathAggregated = "aggregated"
	// PathUnified: not pinned; a plain backend serves it.
	PathUnified = "unified"
	// PathFallback: a pinned dispatch failed and a plain backend served it.
	PathFallback = "fallback"
)

// Phases of disaggregated_errors_total{phase}.
const (
	// PhaseOrchestration: the frontend refused the pins themselves.
	PhaseOrchestration = "orchestration"
	// PhaseDecode: the pinned dispatch failed.
	PhaseDecode = "decode"
)

// IsPinHeader reports whether a header name is one a frontend may read as
// a pin: any x-dynamo-* name, or a legacy pin name, in any case. A client's
// own are removed before anything else sees the request, whatever the
// configuration: a client must never choose its worker. It does not
// allocate.
func IsPinHeader(name string) bool {
	if len(name) < 9 || name[0]|0x20 != 'x' || name[1] != '-' {
		return false
	}
	if strings.EqualFold(name[:9], "x-dynamo-") {
		return true
	}
	for _, h := range legacyPinHeaders {
		// Field names are ASCII tokens: one of another length is no match.
		if len(name) == len(h) && strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// The pin headers in canonical form, so that building them per request
// does not canonicalise (and allocate) the names again.
var (
	canonWorkerInstanceID  = [2]string{http.CanonicalHeaderKey(HeaderWorkerInstanceID), http.CanonicalHeaderKey(LegacyHeaderWorkerInstanceID)}
	canonPrefillInstanceID = [2]string{http.CanonicalHeaderKey(HeaderPrefillInstanceID), http.CanonicalHeaderKey(LegacyHeaderPrefillInstanceID)}
	canonDPRank            = [2]string{http.CanonicalHeaderKey(HeaderDPRank), http.CanonicalHeaderKey(LegacyHeaderDPRank)}
	canonPrefillDPRank     = [2]string{http.CanonicalHeaderKey(HeaderPrefillDPRank), http.CanonicalHeaderKey(LegacyHeaderPrefillDPRank)}
)

// PinHeaders renders a pin as the headers the frontend reads; with legacy,
// each pin goes under its legacy name too, with the same value.
func PinHeaders(pin pick.Pin, legacy bool) http.Header {
	names := 1
	if legacy {
		names = 2
	}
	h := make(http.Header, 4*names)
	set := func(keys [2]string, v uint64) {
		vs := []string{strconv.FormatUint(v, 10)}
		for _, k := range keys[:names] {
			h[k] = vs
		}
	}
	set(canonWorkerInstanceID, pin.Decode.Worker.ID.InstanceID)
	if pin.Decode.SendRank {
		set(canonDPRank, uint64(pin.Decode.DPRank))
	}
	if p := pin.Prefill; p != nil {
		set(canonPrefillInstanceID, p.Worker.ID.InstanceID)
		if p.SendRank {
			set(canonPrefillDPRank, uint64(p.DPRank))
		}
	}
	return h
}

// Pool is the frontend replicas of one Dynamo namespace.
type Pool[R comparable] struct {
	Namespace string
	Replicas  []R
}

// Config is the shim's part of the configuration, as plain values.
type Config[R comparable] struct {
	// Enabled: disaggregated serving and Dynamo discovery are both on.
	Enabled bool
	// Pools are the discovery namespaces in their configured order, each
	// with its replicas (none: the namespace is never a candidate).
	Pools []Pool[R]
	// ModelMap maps a client's model name to the Dynamo model name.
	ModelMap map[string]string
	// FallbackToUnified sends a request whose pinned dispatch failed to a
	// plain backend instead of failing it.
	FallbackToUnified bool
	// LegacyPinHeaders sends each pin under its legacy name too.
	LegacyPinHeaders bool
	// Busy, when set, takes busy workers out of candidacy: a request whose
	// every candidate is busy is not pinned (ErrAllBusy).
	Busy *pick.BusyThreshold
}

// Plan is a configuration made ready for dispatch, once per configuration.
type Plan[R comparable] struct {
	cfg     Config[R]
	replica map[R]bool
}

// NewPlan prepares c.
func NewPlan[R comparable](c Config[R]) *Plan[R] {
	p := &Plan[R]{cfg: c, replica: map[R]bool{}}
	for _, pool := range c.Pools {
		for _, r := range pool.Replicas {
			p.replica[r] = true
		}
	}
	return p
}

// Enabled reports whether requests are pinned at all.
func (p *Plan[R]) Enabled() bool { return p.cfg.Enabled }

// IsReplica reports whether r is a direct-mode frontend of a pool. While
// dispatch goes through the shim, such a replica refuses unpinned requests,
// so it is never a plain backend.
func (p *Plan[R]) IsReplica(r R) bool { return p.cfg.Enabled && p.replica[r] }

// Model is the Dynamo model name of a client's model name.
func (p *Plan[R]) Model(client string) string {
	if m, ok := p.cfg.ModelMap[client]; ok {
		return m
	}
	return client
}

// Candidates are the namespaces a request may go to (those with a replica
// it may use now, in configured order) and those replicas.
type Candidates[R comparable] struct {
	Namespaces []string
	replicas   [][]R
}

// Of is the usable replicas of namespace ns.
func (c *Candidates[R]) Of(ns string) []R {
	for i, n := range c.Namespaces {
		if n == ns {
			return c.replicas[i]
		}
	}
	return nil
}

// Candidates returns the namespaces with a replica for which usable holds,
// and those replicas in pool order. When every replica of every pool is
// usable (the common case) the plan's own lists are shared, not copied.
func (p *Plan[R]) Candidates(usable func(R) bool) Candidates[R] {
	all := true
	for _, pool := range p.cfg.Pools {
		all = all && len(pool.Replicas) > 0 && !slices.ContainsFunc(pool.Replicas, func(r R) bool { return !usable(r) })
	}
	var out Candidates[R]
	for _, pool := range p.cfg.Pools {
		replicas := pool.Replicas
		if !all {
			replicas = nil
			for _, r := range pool.Replicas {
				if usable(r) {
					replicas = append(replicas, r)
				}
			}
		}
		if len(replicas) > 0 {
			out.Namespaces = append(out.Namespaces, pool.Namespace)
			out.replicas = append(out.replicas, replicas)
		}
	}
	return out
}

// Dispatcher pins requests with its current picker under its current plan;
// both can be replaced while requests are in flight (a KV-aware picker, a
// reloaded configuration).
type Dispatcher[R comparable] struct {
	picker atomic.Pointer[pickerBox]
	plan   atomic.Pointer[Plan[R]]
}

type pickerBox struct{ pick.Picker }

// NewDispatcher returns a dispatcher with picker and plan.
func NewDispatcher[R comparable](picker pick.Picker, plan *Plan[R]) *Dispatcher[R] {
	d := &Dispatcher[R]{}
	d.SetPicker(picker)
	d.SetPlan(plan)
	return d
}

// SetPicker replaces the picker for the requests that follow.
func (d *Dispatcher[R]) SetPicker(p pick.Picker) { d.picker.Store(&pickerBox{p}) }

// Picker is the current picker.
func (d *Dispatcher[R]) Picker() pick.Picker { return d.picker.Load().Picker }

// SetPlan replaces the plan for the requests that follow.
func (d *Dispatcher[R]) SetPlan(p *Plan[R]) { d.plan.Store(p) }

// Plan is the current plan.
func (d *Dispatcher[R]) Plan() *Plan[R] { return d.plan.Load() }

// Request is what dispatch knows of a request.
type Request[R comparable] struct {
	// Model is the model the client named.
	Model string
	// PromptTokens is the prompt's estimated size; BookTokens the size
	// to book the dispatch at when larger (pick.Request.BookTokens).
	PromptTokens, BookTokens int
	// Path and Body are the endpoint and the body the frontend will get.
	Path string
	Body []byte
	// CacheSalt overrides the body's cache salt (pick.Request.CacheSalt).
	CacheSalt string
	// Usable reports whether a replica may take this request now (the
	// client's key allows it, it is healthy, its breaker lets it through).
	Usable func(R) bool
	// Allowed, when set, reports whether a replica may take this request
	// at all (the client's key allows it), now or not: a model whose
	// workers are behind allowed replicas none of which is usable fails
	// with ErrNoReplica rather than going the plain way.
	Allowed func(R) bool
	// Exclude lists workers an earlier attempt of this request failed on
	// (see Repin): the request is not pinned to them again.
	Exclude []fleet.WorkerID
}

// Dispatch is a pinned request, to be sent to Replicas in turn with Header
// and ended with Done.
type Dispatch[R comparable] struct {
	Pin pick.Pin
	// Path is PathDisaggregated, PathAggregated, or PathUnified for a
	// conditional-disaggregation bypass.
	Path string
	// Replicas are the pinned namespace's usable replicas.
	Replicas []R
	// Header is the pin headers.
	Header http.Header

	picker pick.Picker
	ticket pick.Ticket
}

// Done ends the dispatch in the picker's in-flight accounting.
func (d *Dispatch[R]) Done() { d.picker.Release(d.ticket) }

// servedBehind reports whether a worker of model is in a namespace with a
// replica for which allowed holds, other than those in skip; and the path
// a dispatch to them would have taken: disaggregated where one of them is
// a prefill worker, else aggregated.
func (p *Plan[R]) servedBehind(snap *fleet.Snapshot, model string, allowed func(R) bool, skip []string) (served bool, path string) {
	if snap == nil {
		return false, ""
	}
	path = PathAggregated
	for _, ns := range p.Candidates(allowed).Namespaces {
		if slices.Contains(skip, ns) {
			continue
		}
		for w := range snap.Workers.InNamespace(ns) {
			if w.Model == model && w.Role != fleet.RoleUnknown {
				served = true
				if w.Role == fleet.RolePrefill {
					path = PathDisaggregated
				}
			}
		}
	}
	if !served {
		return false, ""
	}
	return true, path
}

// ErrNotPinned: the request goes the plain way: pinning is off, no replica
// is usable, or no worker of the model is a candidate (or every one is
// excluded).
var ErrNotPinned = errors.New("not pinned")

// ErrNoReplica: workers of the model are behind replicas the request may
// use (Request.Allowed), and none of those is usable now (a breaker open,
// a failing health check): a shim failure, not a model the shim does not
// serve.
var ErrNoReplica = errors.New("no frontend replica of the model's workers is available")

// NoReplicaError is ErrNoReplica with the routing path the request would
// have taken (PathDisaggregated or PathAggregated): the request is counted
// under it, as a dispatch that failed is.
type NoReplicaError struct{ Path string }

func (e *NoReplicaError) Error() string        { return ErrNoReplica.Error() }
func (e *NoReplicaError) Is(target error) bool { return target == ErrNoReplica }

// NoReplicaPath is the routing path err (an ErrNoReplica) carries,
// PathAggregated when it carries none.
func NoReplicaPath(err error) string {
	if e, ok := errors.AsType[*NoReplicaError](err); ok && e.Path != "" {
		return e.Path
	}
	return PathAggregated
}

// Pin picks the workers of a request and the replicas to send it to. It
// returns false when the request is not pinned, for whatever reason
// (Reserve tells them apart).
func (d *Dispatcher[R]) Pin(snap *fleet.Snapshot, req Request[R], now time.Time) (*Dispatch[R], bool) {
	dp, err := d.Reserve(snap, req, now)
	return dp, err == nil
}

// Reserve picks the workers of a request and the replicas to send it to.
// It fails with ErrNotPinned when the request goes the plain way, and with
// pick.ErrAllBusy when a busy threshold is set and every candidate worker
// is busy.
func (d *Dispatcher[R]) Reserve(snap *fleet.Snapshot, req Request[R], now time.Time) (*Dispatch[R], error) {
	plan := d.Plan()
	if !plan.Enabled() {
		return nil, ErrNotPinned
	}
	cands := plan.Candidates(req.Usable)
	if len(cands.Namespaces) == 0 {
		if req.Allowed != nil {
			if served, path := plan.servedBehind(snap, plan.Model(req.Model), req.Allowed, nil); served {
				return nil, &NoReplicaError{Path: path}
			}
		}
		return nil, ErrNotPinned
	}
	picker := d.Picker()
	pin, ticket, err := picker.Reserve(snap, pick.Request{Model: plan.Model(req.Model), Namespaces: cands.Namespaces,
		EstPromptTokens: req.PromptTokens, BookTokens: req.BookTokens, Path: req.Path, Body: req.Body, CacheSalt: req.CacheSalt,
		Exclude: req.Exclude, Busy: plan.cfg.Busy}, now)
	if errors.Is(err, pick.ErrAllBusy) {
		return nil, err
	}
	if err != nil {
		// No worker of the model in the namespaces with a usable replica:
		// where its workers are behind replicas none of which is usable,
		// that is a shim failure, whatever other namespaces are watched.
		if req.Allowed != nil {
			if served, path := plan.servedBehind(snap, plan.Model(req.Model), req.Allowed, cands.Namespaces); served {
				return nil, &NoReplicaError{Path: path}
			}
		}
		return nil, ErrNotPinned
	}
	path := PathAggregated
	switch {
	case pin.Bypass:
		path = PathUnified // prefilled where it decodes, by choice
	case pin.Prefill != nil:
		path = PathDisaggregated
	}
	return &Dispatch[R]{Pin: pin, Path: path, Replicas: cands.Of(pin.Namespace), Header: PinHeaders(pin, plan.cfg.LegacyPinHeaders), picker: picker, ticket: ticket}, nil
}

// directModePrefillError is how Dynamo's direct-mode frontend refuses a
// request without a prefill id while prefill workers are registered.
const directModePrefillError = "Prefill worker ID required in Direct routing mode"

// Outcome is what one pinned dispatch came to.
type Outcome int

const (
	// Relayed: the frontend's answer went to the client.
	Relayed Outcome = iota + 1
	// PrefillRefused: the frontend refused for want of a prefill id: the
	// router's view of the fleet is behind the frontend's.
	PrefillRefused
	// Failed: no replica could be reached, or the answer counts as a
	// failure (see Failure); nothing was relayed.
	Failed
	// ClientGone: the client went away.
	ClientGone
	// Cut: the frontend's answer broke after some of it went to the
	// client; the client's answer is cut short too (no worker is chosen
	// again for a request already under way).
	Cut
	// Told: the frontend's answer broke, or carried an error, after some
	// of it went to the client, and the client was told so inside its
	// stream (a converted stream's error event): a failure of the decode
	// like Cut, but the client's answer ends in good order.
	Told
)

// IsPrefillRefusal reports whether an answer is the frontend refusing a
// request for want of a prefill id: an error answer whose message is the
// refusal. A 500 that only quotes it inside a generic failure ("Failed to
// generate completions: Prefill worker ID required ...") is a failed
// dispatch like any other 500, not a refusal; an answer of another error
// status that carries the text anywhere is the refusal.
func IsPrefillRefusal(status int, body []byte) bool {
	if status < 400 || !MentionsPrefillRefusal(body) {
		return false
	}
	return status != http.StatusInternalServerError || strings.HasPrefix(errorMessage(body), directModePrefillError)
}

// MentionsPrefillRefusal reports whether an answer carries the frontend's
// refusal for want of a prefill id, as itself or quoted as a cause: either
// way the frontend is up and the router's view of the fleet is behind.
func MentionsPrefillRefusal(body []byte) bool {
	return bytes.Contains(body, []byte(directModePrefillError))
}

// ErrorMessage is the message a JSON error body carries, the first of
// {"error":{"message"}}, {"error":"..."}, {"message"} and {"detail"} that
// is not empty: the shapes OpenAI-compatible servers (Dynamo's frontend,
// vLLM, SGLang) and Python web frameworks answer errors in. "" when the
// body is not JSON or carries none of them.
func ErrorMessage(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  string          `json:"detail"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	var inner struct {
		Message string `json:"message"`
	}
	var s string
	switch {
	case json.Unmarshal(e.Error, &inner) == nil && inner.Message != "":
		return inner.Message
	case json.Unmarshal(e.Error, &s) == nil && s != "":
		return s
	case e.Message != "":
		return e.Message
	}
	return e.Detail
}

// errorMessage is what an error answer says: its JSON error message, else
// the body as text; spaces around it trimmed.
func errorMessage(body []byte) string {
	if m := ErrorMessage(body); m != "" {
		return strings.TrimSpace(m)
	}
	return strings.TrimSpace(string(body))
}

// Failure reports whether a frontend's answer counts as a failed dispatch
// (to fall back from) rather than one to relay. For a buffered request
// any answer but 2xx is; for a streaming one only 5xx, 429 and 408, since
// other 4xx say something about the request itself.
func Failure(status int, stream bool) bool {
	if !stream {
		return status < 200 || status > 299
	}
	return status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout
}

// Action is what the router does after a pinned dispatch.
type Action int

const (
	// Finished: the request is over (relayed, or its client left).
	Finished Action = iota + 1
	// RefusePrefill: answer 503 disaggregated_prefill_decode_unavailable.
	RefusePrefill
	// FallBack: route the request unpinned to a unified backend.
	FallBack
	// FailDecode: answer 502 disaggregated_decode_failed.
	FailDecode
	// Abort: end the client's connection without the end of the answer,
	// so that it sees the answer was cut rather than complete.
	Abort
)

// Verdict is the action after a pinned dispatch and what it counts.
type Verdict struct {
	Action Action
	// CountPath: count the request under its dispatch's routing path (a
	// fallback counts under PathFallback where it is routed).
	CountPath bool
	// ErrorPhase of disaggregated_errors_total, "" for none.
	ErrorPhase string
}

// Verdict decides what follows outcome o of a pinned dispatch.
func (p *Plan[R]) Verdict(o Outcome) Verdict {
	switch o {
	case Relayed, ClientGone:
		return Verdict{Action: Finished, CountPath: true}
	case PrefillRefused:
		return Verdict{Action: RefusePrefill, CountPath: true, ErrorPhase: PhaseOrchestration}
	case Cut:
		return Verdict{Action: Abort, CountPath: true, ErrorPhase: PhaseDecode}
	case Told:
		return Verdict{Action: Finished, CountPath: true, ErrorPhase: PhaseDecode}
	}
	if p.cfg.FallbackToUnified {
		return Verdict{Action: FallBack, ErrorPhase: PhaseDecode}
	}
	return Verdict{Action: FailDecode, CountPath: true, ErrorPhase: PhaseDecode}
}
