package h1

import "net/http"

// ParseResponseHead parses the answer head in b (through its empty line,
// as HeadEnd finds it) when it is one a client may read without
// net/http's general reader: "HTTP/1.1 NNN[ reason]" with a final status
// that has a body, fields as parseHead takes them, one Content-Length, and
// none of the fields net/http rewrites or that change the framing
// (Connection, Transfer-Encoding, Trailer, Pragma). Anything else,
// malformed or merely unusual, is ok=false, for http.ReadResponse to read
// from the start. The response has no Body or Request; its strings share
// one allocation.
func ParseResponseHead(b []byte) (resp *http.Response, ok bool) {
	s := string(b)
	eol := indexCRLF(s)
	if eol < 0 {
		return nil, false
	}
	line := s[:eol]
	s = s[eol+2:]
	const proto = "HTTP/1.1 "
	if len(line) < len(proto)+3 || line[:len(proto)] != proto {
		return nil, false
	}
	status := line[len(proto):]
	code := 0
	for i := range 3 {
		c := status[i]
		if c < '0' || c > '9' {
			return nil, false
		}
		code = code*10 + int(c-'0')
	}
	if len(status) > 3 && (status[3] != ' ' || !validValue(status[4:])) {
		return nil, false
	}
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, false
	}
	length := int64(-1)
	header, ok := parseFields(s, func(key, value string) (keep, ok bool) {
		switch key {
		case "Content-Length":
			l, ok := parseLength(value)
			if !ok || length >= 0 {
				return false, false // repeated: net/http merges or refuses
			}
			length = l
		case "Connection", "Transfer-Encoding", "Trailer", "Pragma":
			return false, false
		}
		return true, true
	})
	if !ok {
		return nil, false
	}
	if length < 0 {
		return nil, false // no length: the body ends with the connection
	}
	return &http.Response{
		Status:        status,
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		ContentLength: length,
	}, true
}
