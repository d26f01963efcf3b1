package h1

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// FuzzServerStream sends the same bytes on one connection to the lean
// server and to net/http's, both serving a handler that echoes what it was
// given (method, target, host, protocol, fields, declared length, framing,
// body), closes its writing side and reads everything that comes back:
// the two must answer alike, byte for byte but for the Date field. The
// lean server parses what a client sends it before anything else does, so
// whatever it takes for a request, or refuses, net/http must have taken or
// refused the same way.
func FuzzServerStream(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
		"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\nGET /c HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nab\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://x/y?z HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"GET / HTTP/1.1\r\nHost: a\r\nX:  spaced value \r\nx-lower: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
		"GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nz",
	} {
		f.Add([]byte(s))
	}
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		keys := make([]string, 0, len(r.Header))
		for k := range r.Header {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var b strings.Builder
		fmt.Fprintf(&b, "%s %q %q %s len=%d te=%q close=%v\n", r.Method, r.RequestURI, r.Host, r.Proto, r.ContentLength, r.TransferEncoding, r.Close)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s: %q\n", k, r.Header[k])
		}
		fmt.Fprintf(&b, "body %q err=%v\n", body, err != nil)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, b.String())
	})
	lean := startLean(f, echo, nil)
	refAddr := startNetHTTP(f, echo)

	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 8<<10 {
			return
		}
		got, gerr := exchangeRaw(lean.addr, in)
		want, werr := exchangeRaw(refAddr, in)
		if gerr != nil || werr != nil {
			t.Skipf("lean %v, net/http %v", gerr, werr) // a connection that did not end in time
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%q:\nlean     %q\nnet/http %q", in, got, want)
		}
	})
}

// dateField and closeField are left out of the comparison: the time, and
// the lean server saying it will close where net/http closes without
// saying so (a request whose body ended early). Whether a connection was
// kept shows in the answers to the requests after.
var (
	dateField  = regexp.MustCompile("(?m)^Date: [^\r\n]*\r\n")
	closeField = regexp.MustCompile("(?m)^Connection: close\r\n")
)

// exchangeRaw writes in on a new connection to addr, closes the writing
// side and returns all that comes back until the server closes (Date and
// Connection: close fields removed).
func exchangeRaw(addr string, in []byte) ([]byte, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(in); err != nil {
		return nil, err
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	out, err := io.ReadAll(conn)
	if err != nil {
		return nil, err
	}
	return closeField.ReplaceAll(dateField.ReplaceAll(out, nil), nil), nil
}
