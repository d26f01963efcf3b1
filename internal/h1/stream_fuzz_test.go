package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
		if mayFrameTwoWays(in) {
			// The lean server refuses a request that frames its body two
			// ways where net/http serves it (TestFramingConflictCloses).
			return
		}
		got, gerr := exchangeRaw(lean.addr, in)
		want, werr := exchangeRaw(refAddr, in)
		switch {
		case gerr != nil && werr != nil:
			t.Skipf("lean %v, net/http %v", gerr, werr) // neither ended in time: a request waiting for more
		case gerr != nil || werr != nil:
			t.Fatalf("%q: lean %v, net/http %v", in, gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%q:\nlean     %q\nnet/http %q", in, got, want)
		}
	})
}

// mayFrameTwoWays reports whether a stream may hold a request head that
// frames its body two ways (Transfer-Encoding beside Content-Length, or on
// HTTP/1.0): any stream naming Transfer-Encoding and either of the others,
// in any case.
func mayFrameTwoWays(in []byte) bool {
	s := strings.ToLower(string(in))
	return strings.Contains(s, "transfer-encoding") && (strings.Contains(s, "content-length") || strings.Contains(s, "http/1.0"))
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

// FuzzRelayFields: an answer's field lines (as ParseResponseHeadFields
// gives them from a fuzzed head) relayed by the lean server with
// WriteHeaderFields reach the client as AddFields puts them in a header
// map, less what the server sets itself (its framing, and a Date when the
// lines bring none).
func FuzzRelayFields(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nConnection: x-hop\r\nX-Hop: 1\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Spaced:  v  \r\nX-Empty:\r\nContent-Encoding: gzip\r\nTrailer: X-T\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	var relay byPath[string] // the lines to relay
	lean := startLean(f, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(FieldsWriter).WriteHeaderFields(http.StatusOK, relay.get(r.URL.Path), func(string) bool { return true })
	}), nil)
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, fields, ok := ParseResponseHeadFields(raw, false)
		if !ok {
			return
		}
		path, drop := relay.put(fields)
		defer drop()
		conn, err := net.Dial("tcp", lean.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%q relayed: %v", fields, err)
		}
		_ = resp.Body.Close()
		want := http.Header{}
		AddFields(want, fields, func(string) bool { return true })
		got := resp.Header
		got.Del("Content-Length")
		if _, relayed := want["Date"]; !relayed {
			got.Del("Date")
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q relayed:\n got %q\nwant %q", fields, got, want)
		}
	})
}

// FuzzAnswers runs a handler scripted by the fuzzer's bytes (fields set
// and deleted, a status, writes of several sizes, flushes) on the lean
// server and on net/http for a GET or a HEAD, and requires the same
// answer from both, byte for byte but for Date: the framing (a length or
// chunks), the fields each server adds, what a 1xx, 204 or 304 carries and
// a sniffed Content-Type are the lean server's to get right. (Neither
// Trailer nor Transfer-Encoding is among the fields: the lean server
// writes no handler's Trailer field, which the router has no use for, and
// frames an answer itself whatever Transfer-Encoding its handler names;
// with a Content-Length beside it, net/http still refuses writes past that
// length, where the lean server drops the length.)
func FuzzAnswers(f *testing.F) {
	f.Add([]byte{0, 0, 2, 10}, false)
	f.Add([]byte{1, 2, 2, 40, 3, 2, 5}, false)
	f.Add([]byte{0, 3, 1, 3, 2, 9}, true)
	f.Add([]byte{0, 2, 1, 0, 2, 1, 2, 1}, false)
	f.Add([]byte{1, 5, 1, 1, 2, 200}, false)
	var scripts byPath[[]byte]
	fieldsTable := [][2]string{
		{"Content-Type", "text/plain"}, {"Content-Type", "application/json"}, {"Content-Length", "5"},
		{"Content-Length", "0"}, {"X-A", "1"}, {"Content-Encoding", "gzip"}, {"Connection", "close"},
		{"Content-Length", "300"}, {"X-B", " spaced "},
	}
	codes := []int{200, 201, 204, 304, 404, 500, 103, 206}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		script := scripts.get(r.URL.Path)
		next := func() int {
			if len(script) == 0 {
				return 0
			}
			b := script[0]
			script = script[1:]
			return int(b)
		}
		for len(script) > 0 {
			switch next() % 6 {
			case 0:
				kv := fieldsTable[next()%len(fieldsTable)]
				w.Header().Set(kv[0], kv[1])
			case 1:
				w.WriteHeader(codes[next()%len(codes)])
			case 2:
				n := next()
				if n%2 == 1 {
					_, _ = io.WriteString(w, "<html><body>")
				}
				_, _ = w.Write(bytes.Repeat([]byte("x"), n))
			case 3:
				w.(http.Flusher).Flush()
			case 4:
				w.Header().Del(fieldsTable[next()%len(fieldsTable)][0])
			case 5:
				w.Header().Add("X-A", strconv.Itoa(next()))
			}
		}
	})
	lean := startLean(f, handler, nil)
	refAddr := startNetHTTP(f, handler)
	f.Fuzz(func(t *testing.T, script []byte, head bool) {
		if len(script) > 256 {
			return
		}
		path, drop := scripts.put(script)
		defer drop()
		method := "GET"
		if head {
			method = "HEAD"
		}
		req := []byte(method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		got, gerr := exchangeRaw(lean.addr, req)
		want, werr := exchangeRaw(refAddr, req)
		if gerr != nil || werr != nil {
			t.Fatalf("%v: lean %v, net/http %v", script, gerr, werr)
		}
		if a, b := answersOf(got, method), answersOf(want, method); a != b {
			t.Fatalf("%s %v:\nlean     %s\nnet/http %s\n(raw: %q\n     %q)", method, script, a, b, got, want)
		}
	})
}

// answersOf is what a client reads of an answer (1xx answers, then the
// final one): status, fields and body, or the error that cut it. The
// framing is left out (a length or chunks, and where chunks are cut, are
// each server's to choose: the lean server decides them itself where
// net/http honours a handler's Transfer-Encoding), with the Date and a
// Connection: close (the request asked for it).
func answersOf(out []byte, method string) string {
	br := bufio.NewReader(bytes.NewReader(out))
	var b strings.Builder
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			fmt.Fprintf(&b, "error: %v", err)
			return b.String()
		}
		h := resp.Header.Clone()
		for _, k := range []string{"Date", "Content-Length", "Connection"} {
			h.Del(k)
		}
		body, err := io.ReadAll(resp.Body)
		fmt.Fprintf(&b, "%d %v %q %v; ", resp.StatusCode, h, body, err)
		if resp.StatusCode >= 200 {
			return b.String()
		}
	}
}

// byPath gives each fuzz input to the server's handler under a request
// path of its own, for as long as the input runs.
type byPath[T any] struct {
	mu sync.Mutex
	m  map[string]T
	n  atomic.Int64
}

// put holds v under a new path until drop.
func (b *byPath[T]) put(v T) (path string, drop func()) {
	path = fmt.Sprintf("/%d", b.n.Add(1))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]T{}
	}
	b.m[path] = v
	return path, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.m, path)
	}
}

func (b *byPath[T]) get(path string) T {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[path]
}
