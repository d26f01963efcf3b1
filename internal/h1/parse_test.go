package h1

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/textproto"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// FuzzParseHead holds the lean parser to net/http's reading: whatever the
// lean path serves itself, net/http's server would have read the same
// request from the same bytes (method, target, host, headers, length,
// close). What the lean path declines goes to net/http, so declining is
// always allowed.
func FuzzParseHead(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: router:8080\r\nContent-Type: application/json\r\nContent-Length: 42\r\nAuthorization: Bearer k\r\n\r\n",
		"POST /a?b=c HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
		"GET //evil/x HTTP/1.1\r\nHost: x\r\nX-Sp:   padded \t\r\n\r\n",
		"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nx_under: 1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		end, plain := HeadEnd(data)
		if !plain || end < 0 {
			return
		}
		data = data[:end]
		h, ok := parseHead(data, true)
		// Parsed for a RawServer, the map made later: the same decision and
		// the same map.
		lazy, lazyOK := parseHead(data, false)
		if lazyOK != ok {
			t.Fatalf("served with the map made at once %v, made later %v: %q", ok, lazyOK, data)
		}
		if !ok {
			return
		}
		if lazy.header != nil {
			t.Fatalf("a map made for a head parsed without one: %q", data)
		}
		lazy.buildHeader()
		if fmt.Sprint(lazy.header) != fmt.Sprint(h.header) || lazy.fields != h.fields {
			t.Fatalf("map made later %v, at once %v: %q", lazy.header, h.header, data)
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
		lok := h.parseTarget()
		if err != nil {
			if lok {
				t.Fatalf("lean path serves what net/http refuses (%v): %q", err, data)
			}
			return
		}
		if !lok {
			t.Fatalf("lean path refuses what net/http reads: %q", data)
		}
		lreq := h.request(context.Background(), new(url.URL))
		// The checks net/http's server adds to ReadRequest's.
		// ReadRequest keeps one Host in req.Host and drops the field.
		hosts := 0
		for _, line := range bytes.Split(data, []byte("\r\n"))[1:] {
			if name, _, found := bytes.Cut(line, []byte(":")); found && bytes.EqualFold(name, []byte("Host")) {
				hosts++
			}
		}
		if hosts != 1 || !httpguts.ValidHostHeader(req.Host) {
			t.Fatalf("lean path serves a request with %d hosts (%q): %q", hosts, req.Host, data)
		}
		if req.Method != lreq.Method || req.RequestURI != lreq.RequestURI || req.Host != lreq.Host ||
			req.ContentLength != lreq.ContentLength || req.Close != lreq.Close || !reflect.DeepEqual(req.URL, lreq.URL) ||
			fmt.Sprint(req.Header) != fmt.Sprint(lreq.Header) || len(req.TransferEncoding) != 0 {
			t.Fatalf("read differently: %q\nnet/http %s %s host=%q len=%d close=%v %v\nlean     %s %s host=%q len=%d close=%v %v", data,
				req.Method, req.URL, req.Host, req.ContentLength, req.Close, req.Header,
				lreq.Method, lreq.URL, lreq.Host, lreq.ContentLength, lreq.Close, lreq.Header)
		}
	})
}

// TestPlainTarget: the targets read without net/url come out as
// url.ParseRequestURI reads them, field for field; targets made of every
// pair of bytes from an alphabet of the edge cases, and some by hand.
func TestPlainTarget(t *testing.T) {
	t.Parallel()
	targets := []string{"/", "/v1/chat/completions", "/v1/models?limit=5&after=x", "/a?", "/a??b", "/a?b?c", "/%41", "/a b",
		"//x/y", "/a;b=c", "/@x:y", "/~u/$&+,", "/a#b", "/a?b#c", "/ü", "a/b", "", "?x", "/*", "/a!b", "/(x)"}
	alphabet := "/a?%#=&!*'():@~.+ \x7f\xff"
	for _, a := range alphabet {
		for _, b := range alphabet {
			targets = append(targets, "/"+string(a)+string(b), "/x"+string(a)+"y"+string(b))
		}
	}
	plain := 0
	for _, target := range targets {
		path, query, ok := plainTarget(target)
		if !ok {
			continue
		}
		plain++
		want, err := url.ParseRequestURI(target)
		if err != nil {
			t.Errorf("%q: read as path %q query %q, url refuses it: %v", target, path, query, err)
			continue
		}
		if got := (&url.URL{Path: path, RawQuery: query}); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: read as %#v, url reads %#v", target, got, want)
		}
	}
	if plain < 50 {
		t.Fatalf("only %d targets read without net/url: the test covers little", plain)
	}
}

func TestHeadEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		end   int
		plain bool
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody", 27, true},
		{"GET / HTTP/1.1\r\nHost: x\r\n", -1, true},
		{"GET / HTTP/1.1\nHost: x\n\n", -1, false},
		{"\r\n\r\n", 4, true},
		{"", -1, true},
	} {
		if end, plain := HeadEnd([]byte(tc.in)); end != tc.end || plain != tc.plain {
			t.Errorf("HeadEnd(%q) = %d, %v; want %d, %v", tc.in, end, plain, tc.end, tc.plain)
		}
	}
}

func BenchmarkParseHead(b *testing.B) {
	head := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 120\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n")
	b.ReportAllocs()
	for b.Loop() {
		h, ok := parseHead(head, true)
		if !ok {
			b.Fatal("declined")
		}
		if !h.parseTarget() {
			b.Fatal("declined")
		}
		_ = h.request(context.Background(), new(url.URL))
	}
}

// canonicalKey gives textproto's canonical form of every valid token.
func TestCanonicalKeyMatchesTextproto(t *testing.T) {
	t.Parallel()
	names := []string{"Content-Type", "content-type", "CONTENT-TYPE", "X-Request-Id", "x-request-id", "X-Request-ID",
		"A", "a", "-", "--a", "a-", "X-1a", "X-1A", "Www-Authenticate", "X_Under", "x_under", "Foo-Bar-Baz", "foo-BAR"}
	rng := rand.New(rand.NewPCG(3, 4))
	const alphabet = "aZbY-0_9!~."
	for range 5000 {
		b := make([]byte, 1+rng.IntN(8))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		names = append(names, string(b))
	}
	for _, name := range names {
		if !httpguts.ValidHeaderFieldName(name) {
			continue
		}
		want := textproto.CanonicalMIMEHeaderKey(name)
		if got := canonicalKey(name); got != want {
			t.Errorf("canonicalKey(%q) = %q, textproto %q", name, got, want)
		}
	}
}

// walkFields takes every field line off fields, as a caller walking them
// does.
func walkFields(fields string) {
	for {
		_, _, rest, ok := NextField(fields)
		if !ok {
			return
		}
		fields = rest
	}
}

// BenchmarkFieldWalk is what the router's plain path does with a
// request's and an answer's fields: the request head parsed without a
// map, its fields walked three times (the router's reading of them, the
// lines written on, a value looked up), then an answer head parsed and
// its fields walked to be relayed. "go" is the Go client's head; "sdk"
// the OpenAI SDK's (lower-case names, a dozen fields).
func BenchmarkFieldWalk(b *testing.B) {
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Tue, 01 Dec 2026 00:00:00 GMT\r\nContent-Length: 240\r\n\r\n")
	for _, tc := range []struct{ name, head string }{
		{"go", "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 120\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n"},
		{"sdk", "POST /v1/chat/completions HTTP/1.1\r\naccept: application/json\r\ncontent-type: application/json\r\nuser-agent: OpenAI/JS 6.9.1\r\nx-stainless-lang: js\r\nx-stainless-package-version: 6.9.1\r\nx-stainless-os: Linux\r\nx-stainless-arch: x64\r\nx-stainless-runtime: node\r\nx-stainless-runtime-version: v20.20.2\r\nauthorization: Bearer sk-0123456789abcdef0123456789abcdef\r\nx-stainless-retry-count: 0\r\nx-stainless-timeout: 600\r\ncontent-length: 120\r\nhost: 127.0.0.1:8080\r\nconnection: keep-alive\r\n\r\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			head := []byte(tc.head)
			b.ReportAllocs()
			for b.Loop() {
				h, ok := parseHead(head, false)
				if !ok {
					b.Fatal("declined")
				}
				fields := h.fields[:len(h.fields)-2]
				walkFields(fields)
				walkFields(fields)
				if _, ok := FieldValue(fields, "User-Agent"); !ok {
					b.Fatal("no User-Agent")
				}
				var resp http.Response
				rf, ok := ParseResponseHeadTo(&resp, answer, false)
				if !ok {
					b.Fatal("answer declined")
				}
				walkFields(rf)
				if _, ok := FieldValue(rf, "Content-Type"); !ok {
					b.Fatal("no Content-Type")
				}
			}
		})
	}
}

// The word-at-a-time and library-backed field primitives agree with the
// byte-at-a-time rules they replace, on random lines over an alphabet of
// the bytes that matter (line breaks, tabs, controls, DEL, high bytes).
func TestFieldPrimitives(t *testing.T) {
	t.Parallel()
	crlf := func(s string) int { // the first CRLF; -1 at a CR or LF alone
		for i := 0; i < len(s); i++ {
			switch s[i] {
			case '\r':
				if i+1 < len(s) && s[i+1] == '\n' {
					return i
				}
				return -1
			case '\n':
				return -1
			}
		}
		return -1
	}
	valid := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; (c < ' ' && c != '\t') || c >= 0x7f {
				return false
			}
		}
		return true
	}
	const alphabet = "aZ-: \t\r\n\x00\x1f\x7f\x80\xff~"
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			if rng.IntN(4) == 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[i] = byte(' ' + rng.IntN(95))
			}
		}
		s := string(b)
		if got, want := indexCRLF(s), crlf(s); got != want {
			t.Fatalf("indexCRLF(%q) = %d, want %d", s, got, want)
		}
		if got, want := validValue(s), valid(s); got != want {
			t.Fatalf("validValue(%q) = %v, want %v", s, got, want)
		}
	}
	for _, k := range commonKeys {
		for _, name := range []string{k, strings.ToLower(k), strings.ToUpper(k)} {
			if got := canonicalKey(name); got != k {
				t.Errorf("canonicalKey(%q) = %q, want %q", name, got, k)
			}
		}
	}
	for _, tc := range []struct {
		s, t string
		eq   bool
	}{{"abc", "ABC", true}, {"a-b", "A-B", true}, {"@", "`", false}, {"[", "{", false}, {"a_b", "A-B", false}} {
		if foldEqual(tc.s, tc.t) != tc.eq {
			t.Errorf("foldEqual(%q, %q) != %v", tc.s, tc.t, tc.eq)
		}
	}
}
