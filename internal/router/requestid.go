package router

import (
	"crypto/rand"
	"net/http"
)

// requestIDHeader carries a request's id: kept from the client when it
// sent a usable one, else made here; echoed in the response, passed to the
// backend and written in the router's log lines about the request.
const requestIDHeader = "X-Request-Id"

// maxRequestIDLen bounds a client's request id.
const maxRequestIDLen = 128

// requestID returns r's id, setting a new one on r when the client sent
// none or one that is too long or holds more than letters, digits and
// -_.:/+= (a value that could forge a log line or a header).
func requestID(r *http.Request) string {
	if id := r.Header.Get(requestIDHeader); validRequestID(id) {
		return id
	}
	id := rand.Text()
	r.Header.Set(requestIDHeader, id)
	return id
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := range len(id) {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '/', c == '+', c == '=':
		default:
			return false
		}
	}
	return true
}
