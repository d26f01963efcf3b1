package h1

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestClientLeavingMidBodyCancels: a client that closes its connection
// before its declared body is all sent ends the request's context, as
// net/http's does (its connection reader cancels the request on any read
// failure): the handler, and the router's accounting, see a client gone
// rather than a malformed request.
func TestClientLeavingMidBodyCancels(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"net/http", "lean"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := make(chan error, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, err := io.ReadAll(r.Body)
				if err == nil {
					got <- nil
					return
				}
				select {
				case <-r.Context().Done():
					got <- r.Context().Err()
				case <-time.After(2 * time.Second):
					got <- nil
				}
			})
			addr := startNetHTTP(t, h)
			if name == "lean" {
				addr = startLean(t, h, nil).addr
			}
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.WriteString(conn, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly part")
			time.Sleep(3 * watchDelay) // past the watch delay: the request has run a while
			_ = conn.Close()
			if err := <-got; err == nil {
				t.Fatalf("%s: the request's context did not end when its client left mid-body", name)
			}
		})
	}
}

// TestClientLeavingCancelsWithBytesAfterBody: a client that leaves ends
// its request's context even when bytes of its came after the request
// (the stray CRLF some clients put after a POST body, which the server
// tolerates, or a pipelined request), as with net/http, whose watch reads
// the socket whatever its buffer holds.
func TestClientLeavingCancelsWithBytesAfterBody(t *testing.T) {
	t.Parallel()
	for _, tail := range []string{"\r\n", "GET /next HTTP/1.1\r\nHost: x\r\n\r\n"} {
		for _, name := range []string{"net/http", "lean"} {
			t.Run(name+"/"+strconv.Quote(tail[:2]), func(t *testing.T) {
				t.Parallel()
				got := make(chan error, 2)
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.ReadAll(r.Body)
					if r.Method != http.MethodPost {
						return
					}
					select {
					case <-r.Context().Done():
						got <- r.Context().Err()
					case <-time.After(3 * time.Second):
						got <- nil
					}
				})
				addr := startNetHTTP(t, h)
				if name == "lean" {
					addr = startLean(t, h, nil).addr
				}
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.WriteString(conn, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody"+tail)
				time.Sleep(300 * time.Millisecond)
				_ = conn.Close()
				if err := <-got; err == nil {
					t.Fatalf("%s: the request's context did not end when its client left", name)
				}
			})
		}
	}
}
