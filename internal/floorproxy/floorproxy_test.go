package floorproxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestFloorRelays sends buffered and streamed (chunked) answers through
// the floor, several on each kept-alive connection, and reads them whole.
func TestFloorRelays(t *testing.T) {
	t.Parallel()
	const completion = `{"id":"c","choices":[{"message":{"content":"hello"}}]}`
	events := []string{"data: {\"a\":1}\n\n", "data: {\"b\":2}\n\n", "data: [DONE]\n\n"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Query().Get("stream") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(len(completion)))
			_, _ = io.WriteString(w, completion)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			_, _ = io.WriteString(w, e)
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	var requests atomic.Int32
	go func() {
		_ = Serve(ln, srv.Listener.Addr().String(), Options{Logf: t.Logf, PerRequest: func() { requests.Add(1) }})
	}()

	tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for i := range 6 {
		url, want := "http://"+ln.Addr().String()+"/v1/chat/completions", completion
		if i%2 == 1 {
			url, want = url+"?stream=1", strings.Join(events, "")
		}
		resp, err := client.Post(url, "application/json", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(got) != want {
			t.Fatalf("request %d: status %d, %v, body %q", i, resp.StatusCode, err, got)
		}
		if i%2 == 1 && len(resp.TransferEncoding) == 0 {
			t.Fatalf("request %d: the stream was not chunked (%v): the test does not cover chunked framing", i, resp.TransferEncoding)
		}
	}
	if n := requests.Load(); n != 6 {
		t.Fatalf("the work ran for %d requests of 6", n)
	}
}

// TestFramingEnds finds the end of answers fed a byte at a time and whole.
func TestFramingEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, answer string
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"},
		{"no body", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{"chunked", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\na;ext=1\r\n0123456789\r\n0\r\n\r\n"},
		{"trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var whole framing
			if err := whole.feed([]byte(tc.answer)); err != nil || !whole.done {
				t.Fatalf("whole: done=%v, %v", whole.done, err)
			}
			var f framing
			for i := range len(tc.answer) {
				if f.done {
					t.Fatalf("done after %d of %d bytes", i, len(tc.answer))
				}
				if err := f.feed([]byte{tc.answer[i]}); err != nil {
					t.Fatalf("byte %d: %v", i, err)
				}
			}
			if !f.done {
				t.Fatal("not done at the end")
			}
		})
	}
	var f framing
	if err := f.feed([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n")); err == nil {
		t.Fatal("an encoding the floor cannot frame was accepted")
	}
}

// FuzzFraming feeds answers to the floor's framing whole, a byte at a time
// and in pieces, and compares where it finds an answer's end with where
// net/http's reader stops. The floor serves what the benchmarks' backends
// send (heads with CRLF line ends, a Content-Length or a chunked body), so
// the comparison is made where both read an HTTP/1.1 answer and
// net/http's ends at a declared length or at a chunked body's end;
// anywhere, the three feedings must agree with one another.
func FuzzFraming(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nnext",
		"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\na;ext=1\r\n0123456789\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\nafter",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabcdef",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n1\r\na\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel",
		"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n1\r\na\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n20;name=a-long-chunk-extension\r\n0123456789abcdef0123456789abcdef\r\n0\r\nX-A-Long-Trailer-Field: and its value\r\n\r\n",
	} {
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, answer []byte, step uint8) {
		if len(answer) > maxFloorHead/2 {
			return // a head past the bound fails in pieces and may pass whole
		}
		// A byte at a time: where the framing ends or fails, if it does.
		var one framing
		doneAt, failAt := -1, -1
		for i := range answer {
			if err := one.feed(answer[i : i+1]); err != nil {
				failAt = i
				break
			}
			if one.done {
				doneAt = i + 1
				break
			}
		}
		// Whole: the same outcome (bytes past the end are not looked at).
		var whole framing
		err := whole.feed(answer)
		if (err != nil) != (failAt >= 0) || (err == nil && whole.done != (doneAt >= 0)) {
			t.Fatalf("whole: done=%v err=%v; a byte at a time: done at %d, failed at %d", whole.done, err, doneAt, failAt)
		}
		// In pieces of step+1 bytes: done or failed in the piece where a
		// byte at a time was.
		var pieces framing
		size := int(step) + 1
		for at := 0; at < len(answer); at += size {
			end := min(at+size, len(answer))
			err := pieces.feed(answer[at:end])
			if failAt >= 0 && failAt < end {
				if err == nil {
					t.Fatalf("pieces of %d: no error in the piece holding byte %d", size, failAt)
				}
				break
			}
			if err != nil {
				t.Fatalf("pieces of %d: %v at piece %d, a byte at a time failed at %d", size, err, at, failAt)
			}
			if pieces.done != (doneAt >= 0 && doneAt <= end) {
				t.Fatalf("pieces of %d: done=%v after byte %d, a byte at a time done at %d", size, pieces.done, end, doneAt)
			}
			if pieces.done {
				break
			}
		}

		// Against net/http, where the answer is one the floor serves.
		if failAt >= 0 || !crlfHead(answer) {
			return
		}
		rd := bytes.NewReader(answer)
		br := bufio.NewReaderSize(rd, 4096)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || !resp.ProtoAtLeast(1, 1) {
			return // HTTP/1.0 has no chunked coding: net/http frames it by length
		}
		_, err = io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode < 200 || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
			return // no answer, or one net/http reads without a body
		}
		chunked := len(resp.TransferEncoding) == 1 && resp.TransferEncoding[0] == "chunked"
		if !chunked && resp.ContentLength < 0 {
			return // net/http reads it to the connection's end
		}
		consumed := len(answer) - rd.Len() - br.Buffered()
		if doneAt != consumed {
			t.Fatalf("the floor finds the answer's end at %d, net/http at %d (chunked %v)", doneAt, consumed, chunked)
		}
	})
}

// crlfHead reports whether the answer has a whole head whose every line
// ends in CRLF.
func crlfHead(answer []byte) bool {
	end := bytes.Index(answer, []byte("\r\n\r\n"))
	if end < 0 {
		return false
	}
	head := answer[:end+2]
	return bytes.Count(head, []byte("\n")) == bytes.Count(head, []byte("\r\n"))
}
