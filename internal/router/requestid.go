package router

import (
	"math/rand/v2"
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
// -_.:/+= (a value that could forge a log line or a header). The id also
// comes as the one-value slice of r's header that holds it, which the
// answer's header shares (clipped: an append copies); a new id's slice is
// slot, which the caller allocated with the request's other state.
func requestID(r *http.Request, slot *[1]string) (string, []string) {
	if vs := r.Header[requestIDHeader]; len(vs) > 0 && validRequestID(vs[0]) {
		// Its first value only, to the backend too: a repeated field's
		// other values were never checked.
		r.Header[requestIDHeader] = vs[:1:1]
		return vs[0], vs[:1:1]
	}
	id := newRequestID()
	slot[0] = id
	vs := slot[:]
	r.Header[requestIDHeader] = vs
	return id, vs
}

// idAlphabet is RFC 4648's base32 alphabet.
const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// newRequestID is 26 base32 characters, 130 random bits: an id needs to be
// unique, not secret, so it comes from the runtime's per-thread ChaCha8
// generator (seeded from the system's) rather than from crypto/rand, which
// cost a twentieth of the router's own time per request.
func newRequestID() string {
	var b [26]byte
	var bits uint64
	for i := range b {
		if i%12 == 0 {
			bits = rand.Uint64()
		}
		b[i] = idAlphabet[bits&31]
		bits >>= 5
	}
	return string(b[:])
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
