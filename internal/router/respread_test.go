package router

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/continuum-router/continuum/internal/h1"
)

// responseHeads are answers a backend sends, plain and not, for the tests
// and the fuzzer's seeds.
var responseHeads = []string{
	"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\ndate: Wed, 02 Dec 2026 06:00:00 GMT\r\nx-custom-thing: a\r\n\r\n{}NEXT",
	"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 \r\nContent-Length:  3 \r\nX-Empty:\r\nX-Tab:\tv\t\r\n\r\nabc",
	"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\nX-M: 1\r\nX-M: 2\r\n\r\nnope!",
	"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 10\r\n\r\nshort",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" +
		"e\r\ndata: {\"a\":1}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\nNEXT",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n3;ext=1 \r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\nNEXT",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nbad trailer\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort",
	"HTTP/1.1 502 Bad Gateway\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nPragma: no-cache\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTrailer: X\r\n\r\nok",
	"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\n\r\nclose-delimited",
	"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nok",
	"HTTP/1.1 200 OK\r\nBad Name: v\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX-Ctl: a\x01b\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX-Obs: caf\xe9\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
	"HTTP/1.1 600 Odd\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\n: empty name\r\nContent-Length: 2\r\n\r\nok",
}

// TestReadResponseMatchesNetHTTP: an answer read here is the answer
// http.ReadResponse reads from the same bytes (head, body, what follows),
// and the heads it does not read itself it leaves to http.ReadResponse.
func TestReadResponseMatchesNetHTTP(t *testing.T) {
	t.Parallel()
	plain := 0
	for _, raw := range responseHeads {
		for _, method := range []string{http.MethodPost, http.MethodHead} {
			if checkReadResponse(t, []byte(raw), method) {
				plain++
			}
		}
	}
	if plain < 6 {
		t.Fatalf("only %d of the plain answers were read without net/http", plain)
	}
}

// TestReadResponseWaitsNoLonger: a head not all in the buffer goes to
// http.ReadResponse after at most the one read it would make itself.
func TestReadResponseWaitsNoLonger(t *testing.T) {
	t.Parallel()
	parts := []string{"HTTP/1.1 200 OK\r\nContent-", "Length: 2\r\n\r\nok"}
	br := bufio.NewReaderSize(&segments{parts: parts}, 4096)
	resp, err := readResponse(br, &http.Request{Method: http.MethodPost}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "ok" || resp.StatusCode != 200 {
		t.Fatalf("%d %q %v", resp.StatusCode, body, err)
	}
}

// TestReadResponseFirstReadError: a connection whose first read fails
// fails the answer with that error, as with http.ReadResponse, even when
// a second read would say something else.
func TestReadResponseFirstReadError(t *testing.T) {
	t.Parallel()
	for _, first := range []error{syscall.ECONNRESET, io.EOF, os.ErrDeadlineExceeded} {
		_, want := http.ReadResponse(bufio.NewReader(&failOnce{err: first}), nil)
		_, got := readResponse(bufio.NewReader(&failOnce{err: first}), &http.Request{Method: http.MethodPost}, nil)
		if got == nil || want == nil || got.Error() != want.Error() {
			t.Errorf("first read %v: got %v, net/http %v", first, got, want)
		}
	}
}

// failOnce fails its first read with err, then reads as closed.
type failOnce struct {
	err  error
	done bool
}

func (f *failOnce) Read([]byte) (int, error) {
	if f.done {
		return 0, io.EOF
	}
	f.done = true
	return 0, f.err
}

// segments reads its parts one per call, as a connection hands over
// segments.
type segments struct{ parts []string }

func (c *segments) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.parts[0])
	c.parts[0] = c.parts[0][n:]
	if c.parts[0] == "" {
		c.parts = c.parts[1:]
	}
	return n, nil
}

func FuzzReadResponse(f *testing.F) {
	for _, raw := range responseHeads {
		f.Add([]byte(raw), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		method := http.MethodPost
		if head {
			method = http.MethodHead
		}
		checkReadResponse(t, raw, method)
	})
}

// checkReadResponse reads raw both ways and fails t where they differ; it
// reports whether the head was read without net/http.
func checkReadResponse(t *testing.T, raw []byte, method string) bool {
	t.Helper()
	req := &http.Request{Method: method}
	mine := bufio.NewReaderSize(bytes.NewReader(raw), upstreamBufferSize)
	resp, ok := readPlainResponse(mine, req, nil)
	ref := bufio.NewReaderSize(bytes.NewReader(raw), upstreamBufferSize)
	want, werr := http.ReadResponse(ref, req)
	if !ok {
		// Nothing was taken from the buffer: net/http reads it all.
		got, gerr := http.ReadResponse(mine, req)
		if (gerr == nil) != (werr == nil) || (gerr == nil && got.StatusCode != want.StatusCode) {
			t.Errorf("%q: after the fast path declined: %v, %v; net/http alone: %v", raw, got, gerr, werr)
		}
		return false
	}
	if werr != nil {
		t.Fatalf("%q: read as plain, net/http refuses it: %v", raw, werr)
	}
	if resp.Status != want.Status || resp.StatusCode != want.StatusCode || resp.Proto != want.Proto ||
		resp.ProtoMajor != want.ProtoMajor || resp.ProtoMinor != want.ProtoMinor || resp.ContentLength != want.ContentLength ||
		resp.Close != want.Close || !reflect.DeepEqual(resp.TransferEncoding, want.TransferEncoding) || resp.Request != want.Request ||
		len(resp.Trailer) != len(want.Trailer) {
		t.Fatalf("%q:\n got %+v\nwant %+v", raw, resp, want)
	}
	if !reflect.DeepEqual(resp.Header, want.Header) {
		t.Fatalf("%q: header\n got %q\nwant %q", raw, resp.Header, want.Header)
	}
	if (resp.Body == http.NoBody) != (want.Body == http.NoBody) {
		t.Fatalf("%q: body %T, net/http %T", raw, resp.Body, want.Body)
	}
	got, gerr := io.ReadAll(resp.Body)
	exp, eerr := io.ReadAll(want.Body)
	if !bytes.Equal(got, exp) || (gerr == nil) != (eerr == nil) || (gerr != nil && gerr.Error() != eerr.Error()) {
		t.Fatalf("%q: body %q %v, net/http %q %v", raw, got, gerr, exp, eerr)
	}
	if !reflect.DeepEqual(resp.Trailer, want.Trailer) {
		t.Fatalf("%q: trailer %q, net/http %q", raw, resp.Trailer, want.Trailer)
	}
	restGot, _ := io.ReadAll(mine)
	restWant, _ := io.ReadAll(ref)
	if !bytes.Equal(restGot, restWant) {
		t.Fatalf("%q: after the answer %q, net/http %q", raw, restGot, restWant)
	}
	// Read again with the header map left unbuilt: the fields make the
	// same map, and give the same first Content-Type, without it.
	pb := &plainBody{fieldsOnly: true}
	lazy, ok := readPlainResponse(bufio.NewReaderSize(bytes.NewReader(raw), upstreamBufferSize), req, pb)
	if !ok || lazy.Header != nil {
		t.Fatalf("%q: fields only: %v, header %q", raw, ok, lazy.Header)
	}
	lazy.Body = &upBody{pb: *pb}
	wantType := ""
	if ct := want.Header["Content-Type"]; len(ct) > 0 {
		wantType = ct[0]
	}
	if got := answerContentType(lazy); got != wantType {
		t.Fatalf("%q: content type %q from the fields, %q from the map", raw, got, wantType)
	}
	if got := answerHeader(lazy); !reflect.DeepEqual(got, want.Header) {
		t.Fatalf("%q: header from the fields\n got %q\nwant %q", raw, got, want.Header)
	}
	// What the router relays of them to a client of another server (a
	// header map): the fields it passes on, less those the server frames.
	relayed := http.Header{}
	h1.AddFields(relayed, pb.fields, relayedField)
	expect := http.Header{}
	for k, v := range want.Header {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Connection", "Trailer":
		default:
			if relayedField(k) {
				expect[k] = v
			}
		}
	}
	if !reflect.DeepEqual(relayed, expect) {
		t.Fatalf("%q: relayed\n got %q\nwant %q", raw, relayed, expect)
	}
	return true
}

func BenchmarkReadResponse(b *testing.B) {
	raw := []byte("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 64\r\ndate: Wed, 02 Dec 2026 06:00:00 GMT\r\nx-request-id: 0123456789\r\n\r\n" + strings.Repeat("x", 64))
	for _, impl := range []struct {
		name string
		read func(*bufio.Reader, *http.Request) (*http.Response, error)
	}{{"net_http", http.ReadResponse}, {"router", func(br *bufio.Reader, req *http.Request) (*http.Response, error) {
		return readResponse(br, req, nil)
	}}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			rd := bytes.NewReader(raw)
			br := bufio.NewReaderSize(rd, upstreamBufferSize)
			req := &http.Request{Method: http.MethodPost}
			for b.Loop() {
				rd.Reset(raw)
				br.Reset(rd)
				resp, err := impl.read(br, req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
			}
		})
	}
}

// TestChunkedAnswerReadsAsItArrives: a chunked answer is read without
// net/http, and a read returns the chunks that have arrived without
// waiting for the next (a stream's events pass one by one).
func TestChunkedAnswerReadsAsItArrives(t *testing.T) {
	t.Parallel()
	pr, pw := io.Pipe()
	defer func() { _ = pw.Close() }()
	go func() {
		_, _ = io.WriteString(pw, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n7\r\ndata: 1\r\n")
		_, _ = io.WriteString(pw, "7\r\ndata: 2\r\n")
	}()
	br := bufio.NewReaderSize(pr, upstreamBufferSize)
	resp, err := readResponse(br, &http.Request{Method: http.MethodPost}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, plain := resp.Body.(*chunkedBody); !plain {
		t.Fatalf("body %T: the chunked answer went to net/http", resp.Body)
	}
	if _, ok := resp.Header["Transfer-Encoding"]; ok || resp.ContentLength != -1 {
		t.Fatalf("header %q, length %d", resp.Header, resp.ContentLength)
	}
	buf := make([]byte, 64)
	for _, want := range []string{"data: 1", "data: 2"} {
		n, err := resp.Body.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q %v, want %q", buf[:n], err, want)
		}
	}
	go func() { _, _ = io.WriteString(pw, "0\r\n\r\n") }()
	if n, err := resp.Body.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("end: %d %v", n, err)
	}
}
