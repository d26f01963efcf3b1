package floorproxy

import (
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
