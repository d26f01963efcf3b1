package h1

import (
	"context"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// head is a parsed request head that the lean path serves itself: an
// HTTP/1.1 request in origin form with a Host header, a body announced by
// one Content-Length (or none), and nothing that asks for more than a
// request and an answer (no Expect, Upgrade, Transfer-Encoding or TE).
type head struct {
	method, target, host string
	// fields are the head's field lines (each through its CRLF) and the
	// empty line that ends them.
	fields        string
	header        http.Header // nil until built (buildHeader)
	contentLength int64
	close         bool    // Connection: close
	url           url.URL // set by parseTarget
}

// parseHead reads the request head in b, which ends with the empty line.
// It returns ok=false for anything it does not serve itself, whether the
// request is malformed or merely unusual: net/http then reads it from the
// start and answers as it would (a 400 for what it rejects), so that the
// lean path never accepts what net/http would refuse nor refuses what it
// would accept. The strings of the result share one allocation. With
// build false the header map is left for buildHeader to make.
func parseHead(b []byte, build bool) (h head, ok bool) {
	s := string(b)
	eol := indexCRLF(s)
	if eol < 0 {
		return h, false
	}
	line := s[:eol]
	s = s[eol+2:]
	sp1 := indexByte(line, ' ')
	if sp1 <= 0 {
		return h, false
	}
	rest := line[sp1+1:]
	sp2 := indexByte(rest, ' ')
	if sp2 <= 0 || rest[sp2+1:] != "HTTP/1.1" {
		return h, false
	}
	h.method, h.target = line[:sp1], rest[:sp2]
	if !validMethod(h.method) || h.method == http.MethodHead || h.method == http.MethodConnect || !validTarget(h.target) {
		return h, false
	}

	h.contentLength = -1
	h.fields = s
	hosts := 0
	h.header, ok = parseFields(s, build, func(key, value string) (keep, ok bool) {
		switch key {
		case "Host":
			hosts++
			h.host = value
			return false, true // net/http keeps the host in Request.Host only
		case "Content-Length":
			length, ok := parseLength(value)
			if !ok || h.contentLength >= 0 {
				return false, false // repeated: net/http merges or refuses
			}
			h.contentLength = length
		case "Connection":
			switch {
			case asciiEqualFold(value, "close"):
				h.close = true
			case asciiEqualFold(value, "keep-alive"):
			default:
				return false, false // a list, or upgrade: net/http's reading
			}
		case "Transfer-Encoding", "Expect", "Upgrade", "Te", "Trailer", "Http2-Settings", "Proxy-Connection", "Keep-Alive",
			"Pragma": // net/http adds a Cache-Control to a Pragma: no-cache
			return false, false
		}
		return true, true
	})
	if !ok {
		return h, false
	}
	if hosts != 1 || !validHost(h.host) {
		return h, false
	}
	if h.contentLength < 0 {
		h.contentLength = 0
	}
	return h, true
}

// buildHeader makes the header map of a head parsed without one: the
// fields were checked then, so this cannot fail.
func (h *head) buildHeader() {
	if h.header != nil {
		return
	}
	h.header, _ = parseFields(h.fields, true, func(key, _ string) (keep, ok bool) {
		return key != "Host", true
	})
	if h.header == nil {
		h.header = http.Header{}
	}
}

// parseFields reads the field lines in s (a head after its first line,
// through its empty line) into a header map allocated once, its values
// sharing one slice. field sees each field's canonical name and value and
// says whether it goes in the map (keep) and whether the head is still one
// served here (ok); a malformed line, or bytes after the empty line, is
// not.
//
// With build false the fields are checked and seen but no map is made
// (the result is nil).
func parseFields(s string, build bool, field func(key, value string) (keep, ok bool)) (http.Header, bool) {
	// A head of no field lines is not one served here (nor is anything
	// shorter than its empty line).
	if len(s) < 2 || s == "\r\n" {
		return nil, false
	}
	var header http.Header
	var vals []string
	if build {
		// Count the lines first so that the header map and the slices
		// of its values are allocated once.
		lines := strings.Count(s[:len(s)-1], "\n")
		if lines == 0 {
			return nil, false // one line and no empty line after it
		}
		header = make(http.Header, lines)
		vals = make([]string, lines)
	}
	for n := 0; ; n++ {
		eol := indexCRLF(s)
		if eol < 0 {
			return nil, false
		}
		if eol == 0 {
			if s != "\r\n" {
				return nil, false // bytes after the head's end: not what the caller framed
			}
			return header, true
		}
		line := s[:eol]
		s = s[eol+2:]
		colon := indexByte(line, ':')
		if colon <= 0 {
			return nil, false
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !validToken(name) || !validValue(value) {
			return nil, false
		}
		key := canonicalKey(name)
		keep, ok := field(key, value)
		if !ok {
			return nil, false
		}
		if !keep || !build {
			continue
		}
		if prev, dup := header[key]; dup {
			header[key] = append(prev, value)
			continue
		}
		header[key] = append(vals[n:n:n+1], value)
	}
}

// parseTarget parses the request target as net/http does; false when it
// refuses it. A target whose path needs no unescaping (the API's paths, a
// query after them) is read here into what url.ParseRequestURI makes of
// it; others go through it.
func (h *head) parseTarget() bool {
	if path, query, ok := plainTarget(h.target); ok {
		h.url = url.URL{Path: path, RawQuery: query}
		return true
	}
	u, err := url.ParseRequestURI(h.target)
	if err != nil {
		return false
	}
	h.url = *u
	return true
}

// request builds the http.Request of a parsed head with its context and
// its URL (the head's, copied to where the caller keeps it: the request's
// response, allocated anyway). The request is built in place and copied
// once by WithContext (the only way to give it a context), not allocated
// twice.
func (h *head) request(ctx context.Context, u *url.URL) *http.Request {
	h.buildHeader()
	*u = h.url
	r := http.Request{
		Method:        h.method,
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h.header,
		ContentLength: h.contentLength,
		Close:         h.close,
		Host:          h.host,
		RequestURI:    h.target,
	}
	return r.WithContext(ctx)
}

// plainTarget splits a target (as validTarget takes it) whose path is
// made of bytes a URL path holds as they are (letters, digits and
// -._~/$&+,:;=@: nothing to unescape, nothing escaping would change) and
// whose query holds no control byte, so that its URL is its path and its
// raw query; false for anything else, including a '?' with no query after
// it (url sets ForceQuery then).
func plainTarget(t string) (path, query string, ok bool) {
	path, query, hasQuery := strings.Cut(t, "?")
	if hasQuery && query == "" || path == "" || path[0] != '/' {
		return "", "", false
	}
	for i := 0; i < len(path); i++ {
		if !pathChar[path[i]] {
			return "", "", false
		}
	}
	for i := 0; i < len(query); i++ {
		if c := query[i]; c < ' ' || c == 0x7f { // url refuses control bytes
			return "", "", false
		}
	}
	return path, query, true
}

var pathChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~/$&+,:;=@" {
		t[c] = true
	}
	return t
}()

func indexCRLF(s string) int {
	// The first LF must end the first CR: a CR before it stands alone, and
	// an LF without its CR is a bare one (net/http's leniency decides).
	i := strings.IndexByte(s, '\n')
	if i < 1 || s[i-1] != '\r' || strings.IndexByte(s[:i-1], '\r') >= 0 {
		return -1
	}
	return i - 1
}

func indexByte(s string, c byte) int { return strings.IndexByte(s, c) }

// trimOWS drops the optional white space around a field value.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// tokenChar: RFC 9110's tchar.
var tokenChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// hostChar: letters, digits and ".-_:".
var hostChar = func() (t [256]bool) {
	for _, c := range "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:" {
		t[c] = true
	}
	return t
}()

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChar[s[i]] {
			return false
		}
	}
	return true
}

// validMethod accepts the methods a client of an inference API sends;
// anything else (extension methods included) goes to net/http.
func validMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, http.MethodHead, http.MethodConnect:
		return true
	}
	return false
}

// validValue: visible ASCII, spaces and tabs only. Bytes above 0x7f are
// legal (obs-text) but rare; net/http takes them.
func validValue(s string) bool {
	// Eight bytes at a time: a word with no byte below a space and none at
	// or above DEL is valid; one that has such a byte (a tab, say) is
	// looked at byte by byte.
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		// below ' ': w-0x20.. borrows into a byte's high bit where the
		// byte was below 0x20 and had no high bit itself; >= 0x7f: adding
		// 1 carries into the high bit, or it was set.
		if ((w-ones*' ')&^w|(w+ones)|w)&highs == 0 {
			continue
		}
		if !validValueBytes(s[i : i+8]) {
			return false
		}
	}
	return validValueBytes(s[i:])
}

func validValueBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

// validTarget: origin form, visible ASCII without '#', of a length a
// query string of an API call may have.
func validTarget(s string) bool {
	if s == "" || s[0] != '/' || len(s) > 2048 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '#' {
			return false
		}
	}
	return true
}

// validHost: a host name or address with an optional port, as clients send
// it; brackets (IPv6), user info and the like go to net/http.
func validHost(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !hostChar[s[i]] {
			return false
		}
	}
	return true
}

// parseLength reads a Content-Length: digits only, at most 18 of them.
func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	// 18 digits cannot overflow an int64.
	var n int64
	for i := 0; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return 0, false
		}
		n = n*10 + int64(d)
	}
	return n, true
}

func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// commonKeys are canonical header names that requests to the router and
// answers of its backends carry, so that the usual ones cost no allocation
// in any case; commonByLen holds them by length, where canonicalKey looks
// a name up by comparing it with the few of its length (cheaper than
// hashing it for a map).
var commonKeys = []string{"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control",
	"Connection", "Content-Length", "Content-Type", "Cookie", "Host", "Origin", "Referer", "User-Agent",
	"X-Api-Key", "Anthropic-Version", "Anthropic-Beta", "Openai-Organization", "Openai-Project",
	"X-Request-Id", "X-Forwarded-For", "X-Forwarded-Proto", "X-Real-Ip", "Traceparent", "Tracestate",
	"X-Stainless-Lang", "X-Stainless-Package-Version", "X-Stainless-Os", "X-Stainless-Arch",
	"X-Stainless-Runtime", "X-Stainless-Runtime-Version", "X-Stainless-Retry-Count", "X-Stainless-Timeout",
	"Transfer-Encoding", "Expect", "Upgrade", "Te", "Trailer", "Keep-Alive", "Proxy-Connection", "Http2-Settings", "Pragma",
	// and answers from backends (ParseResponseHead)
	"Date", "Server", "Vary", "Etag", "Expires", "Last-Modified", "Location", "Set-Cookie",
	"Content-Encoding", "X-Content-Type-Options", "X-Dynamo-Request-Id", "Access-Control-Allow-Origin",
	"Access-Control-Allow-Credentials", "Access-Control-Expose-Headers"}

var commonByLen = func() (t [33][]string) {
	for _, k := range commonKeys {
		t[len(k)] = append(t[len(k)], k)
	}
	return t
}()

// canonicalKey is textproto's canonical form of a valid token, without an
// allocation for the common names in any case.
func canonicalKey(name string) string {
	// A name sent in canonical form (what most clients send) is its own
	// key: one pass over its bytes in registers. Looking it up among the
	// common names first cost more on a request met with cold caches,
	// each comparison a call that reads the table's strings from memory.
	if isCanonical(name) {
		return name
	}
	// Other cases of the common names (the lower case some SDKs send)
	// come from the table, without an allocation.
	if len(name) < len(commonByLen) {
		for _, k := range commonByLen[len(name)] {
			if foldEqual(name, k) {
				return k
			}
		}
	}
	return textproto.CanonicalMIMEHeaderKey(name)
}

// foldEqual reports whether s and t, of one length, are equal but for the
// case of their ASCII letters.
func foldEqual(s, t string) bool {
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if a == b {
			continue
		}
		if a|0x20 != b|0x20 || a|0x20 < 'a' || a|0x20 > 'z' {
			return false
		}
	}
	return true
}

// isCanonical reports whether a valid token is in canonical form already:
// a letter at the start or after a hyphen in upper case, every other in
// lower case (what most clients send, found without a map lookup).
func isCanonical(s string) bool {
	upper := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if upper {
			if 'a' <= c && c <= 'z' {
				return false
			}
		} else if 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}
