package router

import (
	"net/http"
	"time"

	"github.com/continuum-router/continuum/internal/h1"
)

// ServeRaw serves a completion request from its head as the lean server
// read it (h1.RawServer), with no http.Request and no map of its fields:
// the client's field lines go to the backend as they came, less those a
// proxy drops (hop-by-hop fields, the framing, credentials, pins) and
// those the router sets itself. It takes a POST to exactly
// /v1/chat/completions or /v1/completions with a body of declared length
// within server.max_body_bytes, and no x-backend (whose answer names the
// backend: the map path writes those fields). Anything else, it declines
// before reading a byte of the body, and the request goes through
// ServeHTTP. Past that choice the request is served as ServeHTTP serves
// it: the same admission, metrics, request id, routing and relay; the
// fields are what changes, not what happens.
func (f *front) ServeRaw(w http.ResponseWriter, rq *h1.RawRequest) bool {
	if rq.Method != http.MethodPost {
		return false
	}
	var e *endpoint
	switch rq.Target {
	case "/v1/chat/completions":
		e = f.chatAt
	case "/v1/completions":
		e = f.completionsAt
	default:
		return false
	}
	s := f.s
	if rq.ContentLength <= 0 || rq.ContentLength > s.cfg.Load().Server.MaxBodyBytes {
		return false // no body, or one the map path refuses with its own error
	}
	// What the router reads of the fields: each name's first value, as a
	// header map's Get gives it.
	var id, authorization, apiKey string
	var hasID, idRepeated, hasAuthorization, hasAPIKey bool
	for fields := rq.Fields; ; {
		name, line, rest, ok := h1.NextField(fields)
		if !ok {
			break
		}
		fields = rest
		switch name {
		case revealHeader:
			return false
		case "Connection":
			// Fields it names are this hop's, which the map path removes.
			if connectionNominated([]string{h1.LineValue(line)}) != nil {
				return false
			}
		case requestIDHeader:
			if !hasID {
				id, hasID = h1.LineValue(line), true
			} else {
				idRepeated = true
			}
		case "Authorization":
			if !hasAuthorization {
				authorization, hasAuthorization = h1.LineValue(line), true
			}
		case "X-Api-Key":
			if !hasAPIKey {
				apiKey, hasAPIKey = h1.LineValue(line), true
			}
		}
	}

	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	x := &rec.x
	*x = exchange{s: s, w: rec, fields: rq.Fields, ctx: rq.Context(), path: e.path}
	if !hasID || !validRequestID(id) {
		id = newRequestID()
		x.newID = rec.idSlot[:]
	} else if idRepeated {
		// The first value goes on alone, as the router's own: the lines
		// after it were never checked.
		x.newID = rec.idSlot[:]
	}
	rec.idSlot[0] = id
	setField(rec, requestIDHeader, rec.idSlot[:])
	defer func() {
		aborted := recover()
		e.done(rec, rq.Context(), start, id, aborted != nil)
		if aborted != nil {
			panic(aborted)
		}
	}()

	keys := s.keys.Load()
	var policy *keyPolicy
	if !keys.open() {
		policy = keys.matchToken(bearerToken(authorization, apiKey))
	}
	if !s.admitClient(rec, keys, policy, writeParamError) {
		return true
	}
	// The declared length is the whole body (the lean server enforces it).
	body, err := readDeclared(rq.Body, rq.ContentLength)
	if err != nil {
		writeParamError(rec, http.StatusBadRequest, CodeBadRequest, "", "could not read the request body")
		return true
	}
	x.policy = policy
	x.serveBody(body)
	return true
}
