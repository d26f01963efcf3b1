package router

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"testing"
)

// TestWriteRequestMatchesNetHTTP: what writeRequest writes is what
// net/http's Request.Write writes, byte for byte, for the requests it
// writes itself and for those it hands to net/http.
func TestWriteRequestMatchesNetHTTP(t *testing.T) {
	t.Parallel()
	type build func() *http.Request
	post := func(url, body string, h map[string][]string) build {
		return func() *http.Request {
			var rd io.Reader
			if body != "" {
				rd = strings.NewReader(body)
			}
			req, err := http.NewRequest(http.MethodPost, url, rd)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range h {
				req.Header[k] = v
			}
			return req
		}
	}
	cases := map[string]build{
		"chat": post("http://be:8000/v1/chat/completions", `{"model":"m"}`, map[string][]string{
			"Content-Type": {"application/json"}, "Authorization": {"Bearer k"}, "X-Request-Id": {"r1"}, "Accept": {"*/*"},
		}),
		"no body post":   post("http://be/v1/x", "", nil),
		"query":          post("http://be/v1/x?a=1&b=%20", "q", nil),
		"escaped path":   post("http://be/v1/a%2Fb", "q", nil),
		"multi values":   post("http://be/", "q", map[string][]string{"X-M": {"1", "2", "3"}, "A": {"a"}}),
		"line breaks":    post("http://be/", "q", map[string][]string{"X-Split": {"a\r\nInjected: yes"}, "X-Pad": {"  v \t"}}),
		"invalid name":   post("http://be/", "q", map[string][]string{"Bad Name": {"v"}, "Ok": {"v"}}),
		"user agent":     post("http://be/", "q", map[string][]string{"User-Agent": {" curl/8 "}}),
		"no user agent":  post("http://be/", "q", map[string][]string{"User-Agent": {""}}),
		"nil user agent": post("http://be/", "q", map[string][]string{"User-Agent": nil}),
		"framing fields": post("http://be/", "q", map[string][]string{"Content-Length": {"99"}, "Transfer-Encoding": {"chunked"}, "Host": {"evil"}, "Trailer": {"X"}}),
		"empty value":    post("http://be/", "q", map[string][]string{"X-Empty": {""}}),
		"get": func() *http.Request {
			req, _ := http.NewRequest(http.MethodGet, "http://be:1/v1/models", nil)
			return req
		},
		"delete empty": func() *http.Request {
			req, _ := http.NewRequest(http.MethodDelete, "http://be/x", http.NoBody)
			return req
		},
		"put empty": func() *http.Request {
			req, _ := http.NewRequest(http.MethodPut, "http://be/x", nil)
			return req
		},
		"host override": func() *http.Request {
			req := post("http://be/", "q", nil)()
			req.Host = "other:9"
			return req
		},
		"close": func() *http.Request {
			req := post("http://be/", "q", nil)()
			req.Close = true
			return req
		},
		"ipv6 zone": func() *http.Request {
			req := post("http://[fe80::1%25eth0]:80/", "q", nil)()
			return req
		},
		"idn host": func() *http.Request {
			req := post("http://bücher.example/", "q", nil)()
			return req
		},
		"chunked": func() *http.Request {
			req := post("http://be/", "", nil)()
			req.Body = io.NopCloser(strings.NewReader("unsized"))
			req.ContentLength = -1
			return req
		},
		"traced": func() *http.Request {
			req := post("http://be/", "q", nil)()
			return req.WithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{}))
		},
		"many headers": func() *http.Request {
			h := map[string][]string{}
			for i := range maxSortedHeaders + 3 {
				h[fmt.Sprintf("X-H%02d", i)] = []string{"v"}
			}
			return post("http://be/", "q", h)()
		},
		"short body": func() *http.Request {
			req := post("http://be/", "abc", nil)()
			req.ContentLength = 5
			return req
		},
		"long body": func() *http.Request {
			req := post("http://be/", "abcdefg", nil)()
			req.ContentLength = 5
			return req
		},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "Z", "-", " ", "\t", "\r", "\n", ":", "é", "0", "_", "X-Y"}
	for i := range 200 {
		h := map[string][]string{}
		for range rng.IntN(8) {
			var k, v strings.Builder
			for range 1 + rng.IntN(4) {
				k.WriteString(pieces[rng.IntN(len(pieces))])
			}
			for range rng.IntN(6) {
				v.WriteString(pieces[rng.IntN(len(pieces))])
			}
			h[http.CanonicalHeaderKey(k.String())] = append(h[http.CanonicalHeaderKey(k.String())], v.String())
		}
		cases[fmt.Sprintf("random %d", i)] = post("http://be/p", strings.Repeat("b", rng.IntN(3)), h)
	}
	for name, mk := range cases {
		want, got, werr, gerr := writeBoth(mk)
		if (werr == nil) != (gerr == nil) {
			t.Errorf("%s: error %v, net/http %v", name, gerr, werr)
		}
		if werr == nil && got != want {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
	}
}

// writeBoth writes a request mk builds with net/http's Request.Write and
// another with writeRequest.
func writeBoth(mk func() *http.Request) (want, got string, werr, gerr error) {
	var wb, gb bytes.Buffer
	wbw, gbw := bufio.NewWriter(&wb), bufio.NewWriter(&gb)
	werr = mk().Write(wbw)
	gerr = writeRequest(gbw, mk(), "")
	_ = wbw.Flush()
	_ = gbw.Flush()
	return wb.String(), gb.String(), werr, gerr
}

// TestWriteRequestClosesBody: the body is closed however the write ends.
func TestWriteRequestClosesBody(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{"whole": "abc", "short": "ab", "none": ""} {
		c := &closeCount{Reader: strings.NewReader(body)}
		req, _ := http.NewRequest(http.MethodPost, "http://be/", nil)
		req.Body, req.ContentLength = c, 3
		if body == "" {
			req.ContentLength = 0
			req.Body = c
			req.GetBody = nil
		}
		_ = writeRequest(bufio.NewWriter(io.Discard), req, "")
		if c.closed != 1 {
			t.Errorf("%s: body closed %d times", name, c.closed)
		}
	}
}

type closeCount struct {
	io.Reader
	closed int
}

func (c *closeCount) Close() error { c.closed++; return nil }

func BenchmarkWriteRequest(b *testing.B) {
	body := []byte(`{"model":"bench","messages":[{"role":"user","content":"hi"}]}`)
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"*/*"}, "X-Request-Id": {"abc"}}
	bw := bufio.NewWriter(io.Discard)
	for _, impl := range []struct {
		name  string
		write func(*bufio.Writer, *http.Request) error
	}{{"net_http", func(bw *bufio.Writer, r *http.Request) error { return r.Write(bw) }}, {"router", func(bw *bufio.Writer, r *http.Request) error { return writeRequest(bw, r, "") }}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:8000/v1/chat/completions", bytes.NewReader(body))
				req.Header = h
				if err := impl.write(bw, req); err != nil {
					b.Fatal(err)
				}
				_ = bw.Flush()
			}
		})
	}
}

// FuzzWriteRequest: for any header field, path and body, writeRequest
// writes what net/http's Request.Write writes, or fails where it fails.
func FuzzWriteRequest(f *testing.F) {
	f.Add("Content-Type", "application/json", "/v1/chat/completions", `{"model":"m"}`)
	f.Fuzz(func(t *testing.T, key, value, path, body string) {
		mk := func() *http.Request {
			var rd io.Reader
			if body != "" {
				rd = strings.NewReader(body)
			}
			req, err := http.NewRequest(http.MethodPost, "http://be:8000"+path, rd)
			if err != nil {
				return nil
			}
			req.Header[key] = []string{value, value + "2"}
			req.Header["Accept"] = []string{"*/*"}
			return req
		}
		if mk() == nil {
			return
		}
		want, got, werr, gerr := writeBoth(mk)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("error %v, net/http %v", gerr, werr)
		}
		if werr == nil && got != want {
			t.Fatalf("\n got %q\nwant %q", got, want)
		}
	})
}

// FuzzClientLines: a client's field lines sent as they came (writeRequest
// given them beside the router's own header map) reach a backend as the
// same fields as when they are copied into that map first
// (copyRequestHeaders, then the router's fields set over them): the same
// header map once the backend has parsed the request.
func FuzzClientLines(f *testing.F) {
	f.Add("x-custom: a\r\nX-Custom: b\r\nuser-agent: ua/1\r\nContent-Type: text/plain\r\n", true)
	f.Add("X-Dynamo-Worker-Instance-Id: 3\r\nAuthorization: Bearer k\r\nUser-Agent: \r\nUser-Agent: two\r\n", false)
	f.Add("x-request-id: abc\r\nAccept:  */*  \r\nx-empty:\r\n", true)
	f.Fuzz(func(t *testing.T, fields string, newID bool) {
		if !servedFields(fields) {
			return
		}
		client, err := http.ReadRequest(bufio.NewReader(strings.NewReader("POST / HTTP/1.1\r\nHost: h\r\n" + fields + "\r\n")))
		if err != nil {
			return
		}
		own := func(h http.Header) {
			h["Content-Type"] = jsonContentType
			h["Authorization"] = []string{"Bearer backend"}
			if newID {
				h[requestIDHeader] = []string{"NEWID"}
			}
		}
		body := `{"model":"m"}`
		send := func(h http.Header, lines string) http.Header {
			req, err := http.NewRequest(http.MethodPost, "http://be:8000/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header = h
			var buf bytes.Buffer
			bw := bufio.NewWriter(&buf)
			if err := writeRequest(bw, req, lines); err != nil {
				t.Fatal(err)
			}
			_ = bw.Flush()
			got, err := http.ReadRequest(bufio.NewReader(&buf))
			if err != nil {
				t.Fatalf("the backend cannot read %q: %v", buf.String(), err)
			}
			return got.Header
		}
		mapped := http.Header{}
		copyRequestHeaders(mapped, client.Header)
		own(mapped)
		lined := http.Header{}
		own(lined)
		want, got := send(mapped, ""), send(lined, fields)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("fields %q\nsent as lines %v\nfrom the map  %v", fields, got, want)
		}
	})
}

// servedFields reports whether fields are lines the lean server serves a
// request with (h1's checks): names that are tokens, values of visible
// ASCII and tabs, none of the fields it leaves to net/http, no Host or
// Content-Length (the test's request has its own).
func servedFields(fields string) bool {
	if fields == "" || !strings.HasSuffix(fields, "\r\n") {
		return false
	}
	for _, line := range strings.Split(strings.TrimSuffix(fields, "\r\n"), "\r\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || name == "" || strings.ContainsAny(line, "\r\n") {
			return false
		}
		for i := 0; i < len(name); i++ {
			if c := name[i]; c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
				return false
			}
		}
		for i := 0; i < len(value); i++ {
			if c := value[i]; (c < ' ' && c != '\t') || c >= 0x7f {
				return false
			}
		}
		switch http.CanonicalHeaderKey(name) {
		case "Host", "Content-Length", "Transfer-Encoding", "Expect", "Upgrade", "Te", "Trailer", "Http2-Settings",
			"Proxy-Connection", "Keep-Alive", "Pragma", "Connection":
			return false
		}
	}
	return true
}

// FuzzOwnRequest: a request the router writes from its own head (no header
// map: writeOwnRequest) goes on the wire byte for byte as the same request
// written from a header map holding the router's fields (writeRequest,
// itself checked against net/http), with or without the client's lines,
// a key, a new request id, a body; a target whose request line or host
// writeRequest would not write as it is gets no prepared head.
func FuzzOwnRequest(f *testing.F) {
	f.Add("backend:8000", "/v1/chat/completions", "Bearer k", "id-1", "x-custom: a\r\nUser-Agent: ua/1\r\n", `{"model":"m"}`)
	f.Add("b.example", "/base/v1/completions?x=1", "", "", "", "")
	f.Add("10.0.0.1:80", "/v1/chat/completions", " spaced\r\nkey ", "01KBZ3", "Content-Type: text/plain\r\nAuthorization: mine\r\nx-request-id: abc\r\nUser-Agent: \r\n", "{}")
	f.Add("backend", "/v1/chat/completions", "", "", "Authorization: Bearer client\r\nX-Request-Id: client-id\r\n", "{}")
	f.Add("[::1]:8000", "/v1/chat/completions", "", "", "", "")
	f.Fuzz(func(t *testing.T, host, path, key, id, fields, body string) {
		u, err := url.Parse("http://" + host + path)
		if err != nil || u.Host != host {
			return
		}
		start := postStart(u)
		if start == "" {
			req := &http.Request{Method: http.MethodPost, URL: u, Host: u.Host, Header: http.Header{}, Body: http.NoBody}
			if _, ok := plainRequestHost(req); ok && !hasCTL(u.RequestURI()) {
				t.Fatalf("%q: no prepared head for a target writeRequest writes as it is", u)
			}
			return
		}
		own := ownHead{start: start}
		if key != "" {
			own.key = []string{key}
		}
		if id != "" {
			if !validRequestID(id) {
				return // the router makes the ids it sends this way
			}
			own.id = []string{id}
		}
		mk := func(h http.Header) *http.Request {
			req := &http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Host: u.Host, Body: http.NoBody}
			if body != "" {
				req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
			}
			return req
		}
		var got, want bytes.Buffer
		bw := bufio.NewWriter(&got)
		if err := writeOwnRequest(bw, mk(http.Header{}), &own, fields); err != nil {
			t.Fatal(err)
		}
		_ = bw.Flush()
		h := http.Header{}
		r := &upRequest{req: *mk(h), own: own}
		r.mapOwnHead()
		bw = bufio.NewWriter(&want)
		if err := writeRequest(bw, &r.req, fields); err != nil {
			t.Fatal(err)
		}
		_ = bw.Flush()
		if got.String() != want.String() {
			t.Fatalf("from the own head:\n%q\nfrom the map:\n%q", got.String(), want.String())
		}
	})
}
