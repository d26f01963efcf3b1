package h1

import (
	"context"
	"io"
	"net/http"
)

// RawServer is a handler that may serve a request from its head as it
// came, before the lean server builds an http.Request, a URL and a header
// map for it. A proxy that passes a request's fields on as they are has no
// use for those objects, and on a short request their making and the maps'
// walks are a good part of what it costs. The lean server offers each
// request it serves itself to ServeRaw when its Handler implements it.
type RawServer interface {
	// ServeRaw serves rq through w and reports true; or it reports false
	// having read nothing of rq's body and written nothing to w, and the
	// server then calls ServeHTTP as usual.
	ServeRaw(w http.ResponseWriter, rq *RawRequest) bool
}

// RawRequest is a request as the lean server read it, checked as it checks
// every request it serves: HTTP/1.1, a target in origin form, a Host, a
// body of one declared length (or none), field names that are tokens and
// values of visible ASCII, nothing that asks for more than a request and
// an answer (no Transfer-Encoding, Expect, Upgrade, TE or Trailer).
type RawRequest struct {
	Method string
	// Target is the request target as sent: a path, maybe a query.
	Target string
	// Fields are the field lines, each through its CRLF, as the client
	// sent them (names in its case, Host and Content-Length included);
	// NextField walks them.
	Fields string
	// ContentLength is the body's length, 0 for none.
	ContentLength int64
	// Body reads the body's ContentLength bytes, then io.EOF.
	Body       io.Reader
	RemoteAddr string
	ctx        context.Context
}

// Context is the request's context, ended when the client leaves (as an
// http.Request's is).
func (r *RawRequest) Context() context.Context { return r.ctx }
