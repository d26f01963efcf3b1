package router

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/continuum-router/continuum/internal/h1"
)

// UpstreamRelay is the router's plain relay without the router: the client's
// body sent to s's first backend through the router's own upstream client,
// with the request and the answer's headers built as the plain path builds
// them, and the answer copied back as it copies it; no admission, decoding,
// routing, metrics or request id. BenchmarkCold serves it from the lean
// server to tell what the upstream client costs from what the router's
// logic around it costs.
func (s *Server) UpstreamRelay() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b := s.backends.all()[0]
		x := &exchange{s: s, w: w, r: r, ctx: r.Context(), path: r.URL.Path, body: body}
		ur, err := x.upstreamRequest(b, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer ur.put()
		resp, err := s.client.Transport.(*upstream).RoundTripUntil(r.Context(), &ur.req, ur.fields, ur.ownHead(), time.Now().Add(b.cfg.Timeout.D()))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.ContentLength >= 0 {
			w.Header()["Content-Length"] = []string{strconv.FormatInt(resp.ContentLength, 10)}
		}
		if fields, ok := answerFields(resp); ok {
			w.(h1.FieldsWriter).WriteHeaderFields(resp.StatusCode, fields, relayedField)
		} else {
			h := w.Header()
			for k, v := range resp.Header {
				if relayedField(k) {
					h[k] = v
				}
			}
			w.WriteHeader(resp.StatusCode)
		}
		if resp.ContentLength < 0 {
			_ = (&exchange{}).relayStream(w, resp.Body)
			return
		}
		bp := streamBufPool.Get().(*[]byte)
		_, _ = io.CopyBuffer(w, resp.Body, *bp)
		streamBufPool.Put(bp)
	})
}

// NewDoneTail returns doneTail.add over strings.
func NewDoneTail() func(string) bool {
	var t doneTail
	return func(s string) bool { return t.add([]byte(s)) }
}

// EndsWithDone says what doneTail must say of a whole stream s.
func EndsWithDone(s string) bool {
	return strings.HasSuffix(s, "data: [DONE]\n\n") || strings.HasSuffix(s, "data:[DONE]\n\n") || strings.HasSuffix(s, "data: [DONE]\r\n\r\n")
}
