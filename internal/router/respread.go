package router

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
)

// readResponse reads an answer's head from br as http.ReadResponse does.
// The common answer (HTTP/1.1, a final status that has a body, one
// Content-Length, a head already in the buffer) is read here, with one
// allocation for the whole head; anything else goes to http.ReadResponse,
// which also has the last word on malformed heads. A backend's buffered
// answer spends most of its time in the router between this head and the
// client's write, and http.ReadResponse builds a textproto reader, a
// header map of one slice per field and a transfer reader for it.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if br.Buffered() == 0 {
		// The first read, made here so that its error is the answer's,
		// as http.ReadResponse would report it (a failed read is not
		// read again: a reset connection reads as closed the second time).
		if _, err := br.Peek(1); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	if resp, ok := readPlainResponse(br, req); ok {
		return resp, nil
	}
	return http.ReadResponse(br, req)
}

// readPlainResponse reads the head at the start of br when it is plain (see
// readResponse); false leaves br as it was, but for what it buffered.
func readPlainResponse(br *bufio.Reader, req *http.Request) (*http.Response, bool) {
	if req != nil && req.Method == http.MethodHead {
		return nil, false
	}
	head, ok := peekHead(br)
	if !ok {
		return nil, false
	}
	resp, ok := parsePlainHead(head)
	if !ok {
		return nil, false
	}
	_, _ = br.Discard(len(head))
	resp.Request = req
	if resp.ContentLength == 0 {
		resp.Body = http.NoBody
	} else {
		resp.Body = &lengthBody{br: br, left: resp.ContentLength}
	}
	return resp, true
}

// peekHead returns the head (through its blank line) when it is all in
// br's buffer, reading the connection once when the buffer is empty (as
// http.ReadResponse would first); false when the head is not all there,
// when a line ends in a bare line feed, or when the read failed.
// http.ReadResponse then reads on from where it is.
func peekHead(br *bufio.Reader) ([]byte, bool) {
	if br.Buffered() == 0 {
		if _, err := br.Peek(1); err != nil {
			return nil, false
		}
	}
	buf, _ := br.Peek(br.Buffered())
	end, crlf := headEnd(buf)
	if end < 0 || !crlf {
		return nil, false
	}
	return buf[:end], true
}

// headEnd is the length of the head at the start of buf (through the
// line feed that ends its blank line), -1 when buf holds no blank line yet;
// crlf says whether every line break up to there was CRLF.
func headEnd(buf []byte) (end int, crlf bool) {
	crlf = true
	for i := bytes.IndexByte(buf, '\n'); i >= 0; {
		if i == 0 || buf[i-1] != '\r' {
			crlf = false
		}
		switch rest := buf[i+1:]; {
		case len(rest) > 0 && rest[0] == '\n':
			return i + 2, false
		case len(rest) > 1 && rest[0] == '\r' && rest[1] == '\n':
			return i + 3, crlf
		}
		j := bytes.IndexByte(buf[i+1:], '\n')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return -1, false
}

// parsePlainHead parses head when it is plain: "HTTP/1.1 NNN[ reason]",
// then fields that are a token, a colon and a value of visible characters,
// spaces and tabs, one Content-Length and none of the fields net/http
// rewrites (Connection, Transfer-Encoding, Trailer, Pragma).
func parsePlainHead(head []byte) (*http.Response, bool) {
	s := string(head[:len(head)-2]) // every line ends in CRLF
	line, rest, _ := cutCRLF(s)
	const proto = "HTTP/1.1 "
	if len(line) < len(proto)+3 || line[:len(proto)] != proto {
		return nil, false
	}
	status := line[len(proto):]
	code, ok := statusCode(status)
	if !ok || (len(status) > 3 && (status[3] != ' ' || !fieldValue(status[4:]))) {
		return nil, false
	}
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil, false
	}
	lines := 0
	for i := 0; i < len(rest); i++ {
		if rest[i] == '\n' {
			lines++
		}
	}
	h := make(http.Header, lines)
	vals := make([]string, lines)
	length := int64(-1)
	for rest != "" {
		line, rest, _ = cutCRLF(rest)
		colon := -1
		for i := 0; i < len(line); i++ {
			if line[i] == ':' {
				colon = i
				break
			}
		}
		if colon <= 0 {
			return nil, false
		}
		key, ok := headerKey(line[:colon])
		if !ok {
			return nil, false
		}
		v := trimOWS(line[colon+1:])
		if !fieldValue(v) {
			return nil, false
		}
		switch key {
		case "Connection", "Transfer-Encoding", "Trailer", "Pragma":
			return nil, false
		case "Content-Length":
			if length >= 0 || v == "" {
				return nil, false
			}
			n, err := strconv.ParseUint(v, 10, 63)
			if err != nil {
				return nil, false
			}
			length = int64(n)
		}
		if prev, seen := h[key]; seen {
			h[key] = append(prev, v)
			continue
		}
		vals[0] = v
		h[key] = vals[:1:1]
		vals = vals[1:]
	}
	if length < 0 {
		return nil, false
	}
	return &http.Response{
		Status:        status,
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		ContentLength: length,
	}, true
}

// cutCRLF splits s at its first CRLF; a lone CR or LF makes the line
// invalid (it keeps the byte, which fieldValue and headerKey refuse).
func cutCRLF(s string) (line, rest string, ok bool) {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '\r' && s[i+1] == '\n' {
			return s[:i], s[i+2:], true
		}
	}
	return s, "", false
}

func statusCode(status string) (int, bool) {
	if len(status) < 3 {
		return 0, false
	}
	code := 0
	for i := range 3 {
		c := status[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		code = code*10 + int(c-'0')
	}
	return code, true
}

// fieldValue reports whether v holds only what a field value may:
// visible characters, bytes past ASCII, spaces and tabs.
func fieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func trimOWS(v string) string {
	for v != "" && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for v != "" && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// headerKey is k in canonical form (a common field's name without an
// allocation), false when k is not a token.
func headerKey(k string) (string, bool) {
	canonical := true
	upper := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !tokenByte(c) {
			return "", false
		}
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			canonical = false
		}
		upper = c == '-'
	}
	if canonical {
		return k, true
	}
	if len(k) <= 64 {
		var buf [64]byte
		b := buf[:len(k)]
		upper = true
		for i := 0; i < len(k); i++ {
			c := k[i]
			if upper && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			} else if !upper && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b[i] = c
			upper = c == '-'
		}
		if common, ok := commonResponseKeys[string(b)]; ok {
			return common, true
		}
	}
	return http.CanonicalHeaderKey(k), true
}

// commonResponseKeys are the fields backends send most, which a backend
// that writes its field names in lower case (hyper, uvicorn) would
// otherwise cost an allocation each.
var commonResponseKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Access-Control-Allow-Credentials", "Access-Control-Allow-Origin", "Access-Control-Expose-Headers",
		"Cache-Control", "Content-Encoding", "Content-Length", "Content-Type", "Date", "Etag", "Expires",
		"Keep-Alive", "Last-Modified", "Location", "Server", "Set-Cookie", "Vary", "X-Content-Type-Options",
		"X-Request-Id", "X-Dynamo-Request-Id", "Connection", "Transfer-Encoding", "Trailer", "Pragma",
	} {
		m[k] = k
	}
	return m
}()

// tokenByte reports whether c may appear in a field name.
func tokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// lengthBody is an answer's body of a known length read from the
// connection's buffer: io.EOF with its last bytes, io.ErrUnexpectedEOF when
// the connection ends before them (as net/http's body reads).
type lengthBody struct {
	br   *bufio.Reader
	left int64
	err  error
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.left == 0 {
		b.err = io.EOF
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		b.err = io.EOF
		return n, io.EOF
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }
