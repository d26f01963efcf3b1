package h1

import (
	"bufio"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// response is the http.ResponseWriter of one request. Its head is written
// to the connection's buffer when the status is set (so later changes to
// the header map have no effect, as with net/http), all but the framing:
// Content-Length or chunked transfer, Date, Connection and a sniffed
// Content-Type are added when the head is committed, at the first flush,
// once more than sniffLen bytes of body are written, or when the handler
// returns.
type response struct {
	c    *conn
	rctx reqContext // the request's context
	url  url.URL    // the request's URL
	raw  RawRequest // the request as RawServer sees it
	body *body
	// header is made by the first call of Header: a handler that sets no
	// field through it makes none.
	header   http.Header
	reqClose bool // the request asked to close the connection
	// own are the fields set through SetField, written after the map's.
	own  [2]ownField
	nOwn int
	// reqBody is the request's body, allocated with the response (body
	// points to it).
	reqBody body

	status      int
	wroteHeader bool
	committed   bool
	chunked     bool
	noBody      bool  // the status has no body
	declared    int64 // the handler's Content-Length, -1 when none
	written     int64
	hasType     bool
	hasDate     bool
	closeAfter  bool
	pending     []byte // body held back before the commit (in the connection's buffer)
	err         error
}

func (w *response) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header, 4)
	}
	return w.header
}

func (w *response) WriteHeader(code int) {
	if w.wroteHeader {
		w.c.srv.logf("http: superfluous response.WriteHeader call", "status", code)
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	bw := w.c.bw
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An informational answer goes out at once, with the headers set
		// so far; the final one follows.
		writeStatusLine(bw, code)
		writeHeaders(bw, w.header, code)
		_, _ = bw.WriteString("\r\n")
		if err := bw.Flush(); err != nil {
			w.err = err
		}
		return
	}
	w.wroteHeader = true
	w.status = code
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified || code < 200
	if len(w.header) > 0 {
		// An answer whose fields all came as SetField and
		// WriteHeaderFields lines (the router's plain answers) has no
		// map to read: that code stays off its path.
		w.readHeaderMap()
	}
	writeStatusLine(bw, code)
	if len(w.header) > 0 {
		writeHeaders(bw, w.header, code)
	}
	for _, f := range w.own[:w.nOwn] {
		if _, inMap := w.header[f.name]; !inMap {
			writeHeader(bw, f.name, f.value)
		}
	}
}

// readHeaderMap reads what the handler's header map says of the framing
// and the head the server completes: a declared length, Connection:
// close, a Content-Type or Content-Encoding (no sniffing), a Date.
func (w *response) readHeaderMap() {
	if te := w.header["Transfer-Encoding"]; len(te) > 0 && te[0] != "identity" {
		// A handler that names a transfer coding does not also declare a
		// length: net/http drops the Content-Length then.
		delete(w.header, "Content-Length")
	}
	if cl := w.header["Content-Length"]; len(cl) > 0 {
		if n, ok := parseLength(cl[0]); ok {
			w.declared = n
		} else {
			w.c.srv.logf("http: invalid Content-Length", "value", cl[0])
			delete(w.header, "Content-Length")
		}
	}
	if cv := w.header["Connection"]; len(cv) > 0 && asciiEqualFold(cv[0], "close") {
		w.closeAfter = true
	}
	_, w.hasType = w.header["Content-Type"]
	if ce := w.header["Content-Encoding"]; len(ce) > 0 && ce[0] != "" {
		w.hasType = true // an encoded body is not sniffed
	}
	if _, te := w.header["Transfer-Encoding"]; te {
		// Nor one whose handler named its transfer coding (net/http's
		// rule; the framing itself stays the server's).
		w.hasType = true
	}
	_, w.hasDate = w.header["Date"]
}

// FieldSetter is an answer that takes a field of the handler's as a name
// and a value, written with its head as a header map's entry would be,
// with no map to make: the lean server's answers implement it.
type FieldSetter interface {
	// SetField sets a field of the final answer's head, as
	// Header()[name] = []string{value} would: name canonical, and not one
	// of the framing fields (Content-Length, Transfer-Encoding,
	// Connection, Trailer, Content-Type, Date), which the server reads
	// from the map. A name the map also holds is the map's. False when
	// the head is written already or the answer holds as many such fields
	// as it can: the caller sets the map then.
	SetField(name, value string) bool
}

type ownField struct{ name, value string }

func (w *response) SetField(name, value string) bool {
	if w.wroteHeader {
		return false
	}
	for i := range w.own[:w.nOwn] {
		if w.own[i].name == name {
			w.own[i].value = value
			return true
		}
	}
	if w.nOwn == len(w.own) {
		return false
	}
	w.own[w.nOwn] = ownField{name, value}
	w.nOwn++
	return true
}

// owns reports whether the handler set the field name (map or SetField).
func (w *response) owns(name string) bool {
	if _, ok := w.header[name]; ok {
		return true
	}
	for _, f := range w.own[:w.nOwn] {
		if f.name == name {
			return true
		}
	}
	return false
}

// LengthDeclarer is an answer whose body length can be declared before
// its status is written, as a Content-Length in the header map declares
// it, with no map entry to make: the lean server's answers implement it.
type LengthDeclarer interface {
	// DeclareLength declares the body's length, n ≥ 0. A Content-Length
	// in the header map when the status is written wins over it.
	DeclareLength(n int64)
}

func (w *response) DeclareLength(n int64) {
	if !w.wroteHeader && n >= 0 {
		w.declared = n
	}
}

// FieldsWriter is an answer that relays another answer's field lines
// into its head as they are, with no header map in between: the lean
// server's answers implement it.
type FieldsWriter interface {
	// WriteHeaderFields is WriteHeader(code), code a final status, that
	// also writes the lines of fields (as ParseResponseHeadFields returned
	// them) whose canonical names keep accepts and that the header map
	// does not hold: a field the handler set is the handler's alone. The
	// framing fields (Content-Length, Transfer-Encoding, Connection,
	// Trailer) are never relayed; the server decides them.
	WriteHeaderFields(code int, fields string, keep func(name string) bool)
}

func (w *response) WriteHeaderFields(code int, fields string, keep func(name string) bool) {
	relay := !w.wroteHeader && code >= 200
	w.WriteHeader(code)
	if !relay {
		return
	}
	bw := w.c.bw
	for {
		name, line, rest, ok := NextField(fields)
		if !ok {
			return
		}
		fields = rest
		switch name {
		case "Content-Length", "Transfer-Encoding", "Connection", "Trailer":
			continue
		case "Content-Type":
			if code == http.StatusNotModified {
				continue
			}
		}
		if w.owns(name) || !keep(name) {
			continue
		}
		switch name {
		case "Content-Type":
			w.hasType = true
		case "Content-Encoding":
			if trimOWS(line[len(name)+1:len(line)-2]) != "" {
				w.hasType = true // an encoded body is not sniffed
			}
		case "Date":
			w.hasDate = true
		}
		_, _ = bw.WriteString(line)
	}
}

// AddFields adds to h the fields WriteHeaderFields would relay, for an
// answer that is not the lean server's.
func AddFields(h http.Header, fields string, keep func(name string) bool) {
	var added []string // names this call added: their repeats are relayed too
	for {
		name, line, rest, ok := NextField(fields)
		if !ok {
			return
		}
		fields = rest
		value := trimOWS(line[len(name)+1 : len(line)-2])
		switch name {
		case "Content-Length", "Transfer-Encoding", "Connection", "Trailer":
			continue
		}
		if slices.Contains(added, name) {
			h[name] = append(h[name], value)
			continue
		}
		if _, mine := h[name]; mine || !keep(name) {
			continue
		}
		h[name] = []string{value}
		added = append(added, name)
	}
}

// commit completes the head: chunked says whether the body follows in
// chunks (else its length is known: the handler's or the held bytes').
func (w *response) commit(chunked bool, next []byte) {
	w.committed = true
	bw := w.c.bw
	switch {
	case w.noBody:
		// 1xx, 204 and 304 carry no framing fields (net/http's rule).
	case w.declared >= 0:
		writeLength(bw, w.declared)
	case chunked:
		w.chunked = true
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
	default:
		writeLength(bw, int64(len(w.pending)))
	}
	if !w.hasType && !w.noBody && len(w.pending)+len(next) > 0 {
		writeHeader(bw, "Content-Type", sniff(w.pending, next))
	}
	if !w.hasDate {
		_, _ = bw.Write(date())
	}
	// What the handler has not read of the body is read now, before the
	// answer goes out (as net/http does): a client that sends its whole
	// body before reading would otherwise block on a full socket while
	// the answer waits for the body to be read. Beyond maxDrain the
	// connection closes after the answer instead.
	if w.reqClose || w.c.srv.shutting.Load() || w.c.srv.noKeepAlive.Load() || !w.body.drain(false) {
		w.closeAfter = true
	} else {
		// Read to its end for the handler, which then can read no more
		// of it (a read says so, as net/http's closed body does, rather
		// than find an end it did not read up to).
		_ = w.body.Close()
	}
	if w.closeAfter {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	_, _ = bw.WriteString("\r\n")
	if len(w.pending) > 0 {
		w.writeBody(w.pending)
		w.pending = nil
	}
}

// sniff is the Content-Type of a body that starts with held, then next.
func sniff(held, next []byte) string {
	const n = 512 // what http.DetectContentType reads
	if len(held) >= n || len(next) == 0 {
		return http.DetectContentType(held)
	}
	var buf [n]byte
	k := copy(buf[:], held)
	k += copy(buf[k:], next)
	return http.DetectContentType(buf[:k])
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	// A write past the declared length is refused and counted, as
	// net/http counts it: the answer is broken, and every write after it
	// is refused too.
	w.written += int64(len(p))
	if w.declared >= 0 && w.written > w.declared {
		return 0, http.ErrContentLength
	}
	if !w.committed {
		if len(w.pending)+len(p) <= sniffLen {
			if w.pending == nil {
				w.pending = w.c.pendBuf[:0]
			}
			w.pending = append(w.pending, p...)
			if !w.complete(len(p)) {
				return len(p), nil
			}
			w.commit(false, nil)
			return w.sendComplete(len(p))
		}
		w.commit(true, p)
	}
	w.writeBody(p)
	if w.err != nil {
		return 0, w.err
	}
	if w.complete(len(p)) {
		return w.sendComplete(len(p))
	}
	return len(p), nil
}

// complete reports whether a write of n bytes finished the body the
// handler declared.
func (w *response) complete(n int) bool {
	return n > 0 && w.declared >= 0 && w.written == w.declared
}

// sendComplete sends an answer whose declared body is all written at
// once, rather than when the handler returns: what a handler does after
// its last write (accounting, logging, putting a backend connection back
// in its pool) is then not part of the client's wait. finish has nothing
// left to send.
func (w *response) sendComplete(n int) (int, error) {
	if w.err == nil {
		// Marked before the flush that lets the client finish and leave;
		// a flush that fails ends the context itself (conn.write).
		w.c.answered.Store(true)
		w.err = w.c.bw.Flush()
	}
	if w.err != nil {
		return 0, w.err
	}
	return n, nil
}

func (w *response) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

func (w *response) writeBody(p []byte) {
	if len(p) == 0 || w.err != nil {
		return
	}
	bw := w.c.bw
	if w.chunked {
		// The size formatted in the buffer's free space: a local array
		// would escape, a heap object per chunk.
		_, _ = bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
		_, _ = bw.Write(p)
		_, w.err = bw.WriteString("\r\n")
		return
	}
	_, w.err = bw.Write(p)
}

// FlushError sends what is written so far (the head, at least).
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(!w.noBody, nil)
	}
	if w.err != nil {
		return w.err
	}
	w.err = w.c.bw.Flush()
	return w.err
}

func (w *response) Flush() { _ = w.FlushError() }

// finish completes the answer when the handler has returned.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false, nil)
	}
	if w.chunked && w.err == nil {
		_, w.err = w.c.bw.WriteString("0\r\n\r\n")
	}
	if w.declared >= 0 && !w.noBody && w.written != w.declared {
		// Fewer bytes than announced: the client can only tell by the
		// connection closing.
		w.closeAfter = true
	}
	if w.err == nil {
		w.err = w.c.bw.Flush()
	}
}

type stringWriter interface {
	WriteString(string) (int, error)
}

var statusLines = func() (t [600]string) {
	for code := range t {
		if text := http.StatusText(code); text != "" {
			t[code] = "HTTP/1.1 " + strconv.Itoa(code) + " " + text + "\r\n"
		}
	}
	return t
}()

func writeStatusLine(bw stringWriter, code int) {
	if code < len(statusLines) && statusLines[code] != "" {
		_, _ = bw.WriteString(statusLines[code])
		return
	}
	_, _ = bw.WriteString("HTTP/1.1 " + strconv.Itoa(code) + " status code " + strconv.Itoa(code) + "\r\n")
}

// writeHeaders writes the handler's fields but those the commit decides.
// Names that are not tokens are left out and line breaks in values become
// spaces, so a header cannot split the answer (net/http's rules).
func writeHeaders(bw stringWriter, h http.Header, code int) {
	for k, vs := range h {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Connection", "Trailer":
			continue
		case "Content-Type":
			if code == http.StatusNotModified {
				continue // net/http drops it from a 304
			}
		}
		if !validToken(k) {
			continue
		}
		for _, v := range vs {
			writeHeader(bw, k, v)
		}
	}
}

// lineBreaks turns the line breaks of a field value into spaces, as
// net/http does when it writes one.
var lineBreaks = strings.NewReplacer("\r", " ", "\n", " ")

// writeHeader writes one field line. (Two byte searches find a line break:
// strings.ContainsAny would build a byte set for every value.)
func writeHeader(bw stringWriter, k, v string) {
	_, _ = bw.WriteString(k)
	_, _ = bw.WriteString(": ")
	if strings.IndexByte(v, '\n') >= 0 || strings.IndexByte(v, '\r') >= 0 {
		v = lineBreaks.Replace(v)
	}
	if v != "" && (v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = strings.Trim(v, " \t") // white space around a value is not part of it
	}
	_, _ = bw.WriteString(v)
	_, _ = bw.WriteString("\r\n")
}

// writeLength writes the Content-Length line, the number formatted in the
// buffer's free space (a string of it would be a heap object per answer).
func writeLength(bw *bufio.Writer, n int64) {
	_, _ = bw.WriteString("Content-Length: ")
	_, _ = bw.Write(strconv.AppendInt(bw.AvailableBuffer(), n, 10))
	_, _ = bw.WriteString("\r\n")
}

// date is the Date header line of the current second.
func date() []byte {
	now := time.Now()
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return d.line
	}
	line := now.UTC().AppendFormat([]byte("Date: "), http.TimeFormat)
	line = append(line, "\r\n"...)
	dateCache.Store(&dateLine{sec: sec, line: line})
	return line
}

type dateLine struct {
	sec  int64
	line []byte
}

var dateCache atomic.Pointer[dateLine]
