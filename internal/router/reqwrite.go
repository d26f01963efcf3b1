package router

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/h1"
)

// defaultUserAgent is what net/http's client sends when a request names
// none; the router's requests keep it so that a backend sees the same
// head whichever path wrote it.
const defaultUserAgent = "Go-http-client/1.1"

// maxSortedHeaders bounds the header fields writeRequest orders on the
// stack; a request with more goes through net/http's writer.
const maxSortedHeaders = 32

// writeRequest writes req to bw as net/http's Request.Write does, byte for
// byte, for the requests the router sends upstream: an ASCII host, a body
// of known length (or none), no trailers, no client trace. Anything else
// goes through Request.Write. Request.Write costs the router a formatted
// print per line, a header sorter and a transfer writer per request, on
// the path between the client's request and the backend's.
//
// client are a client's field lines to send with the header map's (see
// RoundTripUntil): written after them as they came, or added to the map
// for Request.Write.
func writeRequest(bw *bufio.Writer, req *http.Request, client string) error {
	host, ok := plainRequestHost(req)
	if !ok {
		return writeThroughNetHTTP(bw, req, client)
	}
	ruri := req.URL.RequestURI()
	if hasCTL(ruri) {
		return writeThroughNetHTTP(bw, req, client)
	}
	var fields [maxSortedHeaders]headerField
	sorted, ok := sortedHeaderFields(req.Header, fields[:0])
	if !ok {
		return writeThroughNetHTTP(bw, req, client)
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	_, _ = bw.WriteString(method)
	_ = bw.WriteByte(' ')
	_, _ = bw.WriteString(ruri)
	_, _ = bw.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = bw.WriteString(host)
	_, _ = bw.WriteString("\r\n")
	ua := defaultUserAgent
	if vs, named := req.Header["User-Agent"]; named {
		ua = ""
		if len(vs) > 0 {
			ua = vs[0]
		}
	} else if client != "" {
		ua = "" // the client's, with its lines, or the default after them
	}
	if ua != "" {
		writeHeaderLine(bw, "User-Agent", ua)
	}
	n := req.ContentLength
	if req.Body == nil || req.Body == http.NoBody {
		n = 0
	}
	if n > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		writeContentLength(bw, n)
	}
	for _, f := range sorted {
		for _, v := range f.vs {
			writeHeaderLine(bw, f.k, v)
		}
	}
	if client != "" && !writeClientLines(bw, client, func(name string) bool { _, own := req.Header[name]; return own }) {
		if _, named := req.Header["User-Agent"]; !named {
			writeHeaderLine(bw, "User-Agent", defaultUserAgent)
		}
	}
	return endRequest(bw, req, n)
}

// writeContentLength writes the Content-Length line of a body of n bytes.
func writeContentLength(bw *bufio.Writer, n int64) {
	_, _ = bw.WriteString("Content-Length: ")
	// Formatted in the buffer's free space: a local array would escape
	// (Write keeps its argument when the buffer is full), a heap object
	// per request.
	_, _ = bw.Write(strconv.AppendInt(bw.AvailableBuffer(), n, 10))
	_, _ = bw.WriteString("\r\n")
}

// endRequest ends a request's head and writes its body of n bytes.
func endRequest(bw *bufio.Writer, req *http.Request, n int64) error {
	if _, err := bw.WriteString("\r\n"); err != nil {
		closeRequestBody(req)
		return err
	}
	if n == 0 {
		closeRequestBody(req)
		return nil
	}
	return writeBody(bw, req.Body, n)
}

// ownHead is what a request the router makes itself carries in place of a
// header map (whose map is then empty): the request line and Host line
// made once for its target (target.start), and the router's own fields,
// which a map would hold as Content-Type: application/json, Authorization:
// key and X-Request-Id: id (nil for none; an id validRequestID accepts). writeOwnRequest writes exactly
// what writeRequest writes from that map, without building, sorting and
// checking the map for each request: the head of every plain request goes
// this way, between the client's request and the backend's.
type ownHead struct {
	start   string
	key, id []string
}

// size is about what o takes on the wire (0 for none).
func (o *ownHead) size() int64 {
	if o == nil {
		return 0
	}
	n := len(o.start) + len("Content-Type: application/json\r\nContent-Length: 00000000\r\n")
	if o.key != nil {
		n += len("Authorization: \r\n") + len(o.key[0])
	}
	if o.id != nil {
		n += len(requestIDHeader+": \r\n") + len(o.id[0])
	}
	return int64(n)
}

// owns reports whether the field named name (canonical) is one of o's:
// a client's field of that name is not sent.
func (o *ownHead) owns(name string) bool {
	return name == "Content-Type" || (name == "Authorization" && o.key != nil) || (name == requestIDHeader && o.id != nil)
}

// writeOwnRequest writes req, whose header map is empty, with o's head and
// the client's field lines: writeRequest's bytes for the map o stands for.
func writeOwnRequest(bw *bufio.Writer, req *http.Request, o *ownHead, client string) error {
	_, _ = bw.WriteString(o.start)
	if client == "" {
		_, _ = bw.WriteString("User-Agent: " + defaultUserAgent + "\r\n")
	}
	n := req.ContentLength
	if req.Body == nil || req.Body == http.NoBody {
		n = 0
	}
	writeContentLength(bw, n)
	// In the order of their names, as writeRequest sorts them.
	if o.key != nil {
		writeHeaderLine(bw, "Authorization", o.key[0])
	}
	_, _ = bw.WriteString("Content-Type: application/json\r\n")
	if o.id != nil {
		// An id validRequestID accepts (the router's, or the first of a
		// client's repeated ones): nothing in it to trim or replace.
		_, _ = bw.WriteString(requestIDHeader + ": ")
		_, _ = bw.WriteString(o.id[0])
		_, _ = bw.WriteString("\r\n")
	}
	if client != "" && !writeClientLines(bw, client, o.owns) {
		_, _ = bw.WriteString("User-Agent: " + defaultUserAgent + "\r\n")
	}
	return endRequest(bw, req, n)
}

// postStart is the request line and Host line writeRequest writes for a
// POST to u, "" when it would not write them as they are (a host or path
// it sends through net/http's writer).
func postStart(u *url.URL) string {
	if !plainHost(u.Host) {
		return ""
	}
	ruri := u.RequestURI()
	if hasCTL(ruri) {
		return ""
	}
	return "POST " + ruri + " HTTP/1.1\r\nHost: " + u.Host + "\r\n"
}

// writeThroughNetHTTP writes req with Request.Write, the client's lines
// added to its header map first.
func writeThroughNetHTTP(bw *bufio.Writer, req *http.Request, client string) error {
	if client != "" {
		h1.AddFields(req.Header, client, clientLine)
	}
	return req.Write(bw)
}

// clientLine reports whether a client's field (canonical name) goes on to
// a backend: what copyRequestHeaders copies of a header map.
func clientLine(k string) bool {
	return !dropped(k) && !shim.IsPinHeader(k)
}

// writeClientLines writes the lines of client that go on to the backend
// (clientLine) as they came, but those of a name the router sets (own:
// the router's value replaces the client's, as in a map) and, of
// User-Agent, all but a first one that is not empty (net/http sends one,
// and none when empty). agent reports whether the client sent a
// User-Agent.
func writeClientLines(bw *bufio.Writer, client string, own func(name string) bool) (agent bool) {
	for {
		name, line, rest, ok := h1.NextField(client)
		if !ok {
			return agent
		}
		client = rest
		if !clientLine(name) {
			continue
		}
		if own(name) {
			continue
		}
		if name == "User-Agent" {
			if agent {
				continue
			}
			agent = true
			if h1.LineValue(line) == "" {
				continue
			}
		}
		_, _ = bw.WriteString(line)
	}
}

// clientValue is the first value of the field named name in a client's
// field lines, "" when there is none.
func clientValue(client, name string) string {
	if client == "" {
		return ""
	}
	v, _ := h1.FieldValue(client, name)
	return v
}

// plainRequestHost is the Host line of req and whether writeRequest
// writes req itself: a known body length, nothing chunked, no trailer,
// no Connection: close to add, no client trace, and a host net/http would
// write unchanged (ASCII, valid, not an IPv6 literal with a zone).
func plainRequestHost(req *http.Request) (string, bool) {
	if req.URL == nil || req.ContentLength < 0 || (req.ContentLength == 0 && req.Body != nil && req.Body != http.NoBody) ||
		len(req.TransferEncoding) > 0 || req.Trailer != nil || req.Close || len(req.Header) > maxSortedHeaders ||
		httptrace.ContextClientTrace(req.Context()) != nil {
		return "", false
	}
	if req.Method != "" && !httpguts.ValidHeaderFieldName(req.Method) { // a method is a token too
		return "", false
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	return host, plainHost(host)
}

// plainHost reports whether net/http writes host as it is: ASCII, valid,
// not an IPv6 literal (which may carry a zone it drops).
func plainHost(host string) bool {
	return host != "" && !strings.HasPrefix(host, "[") && isASCII(host) && httpguts.ValidHostHeader(host)
}

// headerField is a field of a request's header map: its key and values.
type headerField struct {
	k  string
	vs []string
}

// sortedHeaderFields appends the fields of h that go on the wire after the
// request line, Host, User-Agent and Content-Length, ordered by key as
// net/http writes them; false when there are more than fields can hold.
func sortedHeaderFields(h http.Header, fields []headerField) ([]headerField, bool) {
	for k, vs := range h {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			continue // net/http drops such a field
		}
		if len(fields) == cap(fields) {
			return nil, false
		}
		// Insertion sort: a request carries a handful of fields.
		i := len(fields)
		fields = append(fields, headerField{})
		for ; i > 0 && fields[i-1].k > k; i-- {
			fields[i] = fields[i-1]
		}
		fields[i] = headerField{k: k, vs: vs}
	}
	return fields, true
}

// writeHeaderLine writes one field as net/http does: line breaks in the
// value become spaces and the value is trimmed of surrounding white space.
func writeHeaderLine(bw *bufio.Writer, k, v string) {
	if !plainHeaderValue(v) {
		if strings.ContainsAny(v, "\r\n") {
			v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
		}
		v = strings.Trim(v, " \t\r\n")
	}
	_, _ = bw.WriteString(k)
	_, _ = bw.WriteString(": ")
	_, _ = bw.WriteString(v)
	_, _ = bw.WriteString("\r\n")
}

// plainHeaderValue reports whether v goes on the wire as it is: no line
// break in it and no white space at either end (a parsed head's values
// never have them), so that most values cost one pass over their bytes.
func plainHeaderValue(v string) bool {
	if v == "" {
		return true
	}
	if c := v[0]; c == ' ' || c == '\t' {
		return false
	}
	if c := v[len(v)-1]; c == ' ' || c == '\t' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' {
			return false
		}
	}
	return true
}

// writeBody copies exactly n bytes of body to bw and closes body; a body
// shorter or longer than n is an error, as with net/http.
func writeBody(bw *bufio.Writer, body io.ReadCloser, n int64) error {
	defer func() { _ = body.Close() }()
	if r, ok := body.(*bodyReader); ok && int64(r.Len()) == n {
		// The router's own body, in memory and of the length declared.
		_, err := r.WriteTo(bw)
		return err
	}
	copied, err := io.Copy(bw, io.LimitReader(body, n))
	if err != nil {
		return err
	}
	if copied == n {
		var extra [1]byte
		k, _ := io.ReadFull(body, extra[:])
		copied += int64(k)
	}
	if copied != n {
		return fmt.Errorf("http: ContentLength=%d with Body length %d", n, copied)
	}
	return nil
}

func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < ' ' || b == 0x7f {
			return true
		}
	}
	return false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
