package h1

import (
	"net/http"
	"strings"
)

// ParseResponseHead parses the answer head in b (through its empty line,
// as HeadEnd finds it) when it is one a client may read without
// net/http's general reader: "HTTP/1.1 NNN[ reason]" with a final status
// that has a body, fields as parseHead takes them, and its body framed by
// one Content-Length or by "Transfer-Encoding: chunked" alone (a streamed
// answer), and none of the fields net/http rewrites or that change the
// framing otherwise (Connection, Trailer, Pragma). A chunked answer has
// ContentLength -1 and TransferEncoding ["chunked"], and its header map
// leaves the Transfer-Encoding field out, as http.ReadResponse's does.
// Anything else, malformed or merely unusual, is ok=false, for
// http.ReadResponse to read from the start. The response has no Body or
// Request; its strings share one allocation.
func ParseResponseHead(b []byte) (resp *http.Response, ok bool) {
	resp, _, ok = ParseResponseHeadFields(b, true)
	return resp, ok
}

// ParseResponseHeadFields is ParseResponseHead that also returns the
// head's field lines (each "name: value\r\n", names as sent, through the
// last field's line break) and builds the header map only when asked
// (withMap); else resp.Header is nil and HeaderOf makes it from fields
// when it is wanted. A caller that only relays the fields
// (WriteHeaderFields) then never builds the map.
func ParseResponseHeadFields(b []byte, withMap bool) (resp *http.Response, fields string, ok bool) {
	resp = new(http.Response)
	if fields, ok = ParseResponseHeadTo(resp, b, withMap); !ok {
		return nil, "", false
	}
	return resp, fields, true
}

// ParseResponseHeadTo is ParseResponseHeadFields into a response the
// caller holds (allocated with what it keeps beside it); resp is
// overwritten whole, and when ok is false its contents are undefined.
func ParseResponseHeadTo(resp *http.Response, b []byte, withMap bool) (fields string, ok bool) {
	s := string(b)
	eol := indexCRLF(s)
	if eol < 0 {
		return "", false
	}
	line := s[:eol]
	s = s[eol+2:]
	const proto = "HTTP/1.1 "
	if len(line) < len(proto)+3 || line[:len(proto)] != proto {
		return "", false
	}
	status := line[len(proto):]
	code := 0
	for i := range 3 {
		c := status[i]
		if c < '0' || c > '9' {
			return "", false
		}
		code = code*10 + int(c-'0')
	}
	if len(status) > 3 && (status[3] != ' ' || !validValue(status[4:])) {
		return "", false
	}
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return "", false
	}
	length := int64(-1)
	chunked := false
	header, ok := parseFields(s, withMap, func(key, value string) (keep, ok bool) {
		switch key {
		case "Content-Length":
			l, ok := parseLength(value)
			if !ok || length >= 0 {
				return false, false // repeated: net/http merges or refuses
			}
			length = l
		case "Transfer-Encoding":
			// One field naming chunked alone; lists, repeats and other
			// codings are net/http's to refuse or read.
			if chunked || !asciiEqualFold(value, "chunked") {
				return false, false
			}
			chunked = true
			return false, true // net/http keeps it in TransferEncoding only
		case "Connection", "Trailer", "Pragma":
			return false, false
		}
		return true, true
	})
	if !ok {
		return "", false
	}
	*resp = http.Response{
		Status:        status,
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		ContentLength: length,
	}
	switch {
	case chunked && length >= 0:
		return "", false // both framings: net/http's rules decide
	case chunked:
		resp.TransferEncoding = chunkedCoding
	case length < 0:
		return "", false // no length: the body ends with the connection
	}
	return s[:len(s)-2], true
}

// HeaderOf is the header map of an answer's fields as
// ParseResponseHeadFields returned them: what ParseResponseHead would
// have put in resp.Header.
func HeaderOf(fields string) http.Header {
	h, ok := parseFields(fields+"\r\n", true, func(key, _ string) (keep, ok bool) {
		return key != "Transfer-Encoding", true
	})
	if !ok {
		return http.Header{}
	}
	return h
}

// NextField takes the first field line off fields (as
// ParseResponseHeadFields gives them): its canonical name, the line itself
// through its line break, and the lines after it; ok is false at the end.
// A line that is not a field (there is none in what that gives) is passed
// over.
func NextField(fields string) (name, line, rest string, ok bool) {
	// The lines were checked when the head was parsed: each ends with its
	// CRLF and names a valid token.
	for fields != "" {
		eol := strings.IndexByte(fields, '\n')
		if eol < 0 {
			return "", "", "", false
		}
		line, fields = fields[:eol+1], fields[eol+1:]
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			continue
		}
		return canonicalKey(line[:colon]), line, fields, true
	}
	return "", "", "", false
}

// LineValue is the value of a field line as NextField returns it.
func LineValue(line string) string {
	colon := indexByte(line, ':')
	if colon < 0 || len(line) < colon+3 {
		return ""
	}
	return trimOWS(line[colon+1 : len(line)-2])
}

// FieldValue is the first value of the field named name (canonical) in
// fields (as ParseResponseHeadFields returned them), without a map.
func FieldValue(fields, name string) (string, bool) {
	for fields != "" {
		eol := strings.IndexByte(fields, '\n')
		if eol < 1 {
			return "", false
		}
		line := fields[:eol-1]
		fields = fields[eol+1:]
		if len(line) > len(name) && line[len(name)] == ':' && foldEqual(line[:len(name)], name) {
			return trimOWS(line[len(name)+1:]), true
		}
	}
	return "", false
}

// chunkedCoding is a chunked answer's TransferEncoding, one slice shared
// by every answer (nothing writes it).
var chunkedCoding = []string{"chunked"}
