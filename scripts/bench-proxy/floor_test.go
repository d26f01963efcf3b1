package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFloorRelays sends buffered and streamed answers through the floor,
// several on each kept-alive connection, and reads them whole.
func TestFloorRelays(t *testing.T) {
	t.Parallel()
	b := newBackend(5, 0)
	srv := httptest.NewServer(b)
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() { _ = floorOn(ln, srv.Listener.Addr().String()) }()

	tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for i := range 6 {
		mode := modeBuffered
		want := string(b.completion)
		if i%2 == 1 {
			mode, want = modeSSE, ""
			for _, e := range b.events {
				want += string(e)
			}
		}
		resp, err := client.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(requestBody(mode)))
		if err != nil {
			t.Fatalf("request %d (%s): %v", i, mode, err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(got) != want {
			t.Fatalf("request %d (%s): status %d, %v, body %q", i, mode, resp.StatusCode, err, got)
		}
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
