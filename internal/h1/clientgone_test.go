package h1

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestClientLeavingCancelsAnywhere: a client that closes its connection ends its
// request's context, on the lean server as on net/http: inside its body
// (net/http's connection reader cancels the request on any read failure,
// so the handler sees a client gone rather than a malformed request), and
// after its request when bytes of its came after it (the stray CRLF some
// clients put after a POST body, or a pipelined request), which do not
// stop the watch.
func TestClientLeavingCancelsAnywhere(t *testing.T) {
	t.Parallel()
	const post = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: "
	for _, tc := range []struct {
		name, send string
		wait       time.Duration
	}{
		{"mid-body", post + "100\r\n\r\nonly part", 3 * watchDelay},
		{"stray CRLF after the body", post + "4\r\n\r\nbody\r\n", 300 * time.Millisecond},
		{"pipelined request after the body", post + "4\r\n\r\nbodyGET /next HTTP/1.1\r\nHost: x\r\n\r\n", 300 * time.Millisecond},
	} {
		for _, server := range []string{"net/http", "lean"} {
			t.Run(tc.name+"/"+server, func(t *testing.T) {
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
				if server == "lean" {
					addr = startLean(t, h, nil).addr
				}
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.WriteString(conn, tc.send)
				time.Sleep(tc.wait)
				_ = conn.Close()
				if err := <-got; err == nil {
					t.Fatal("the request's context did not end when its client left")
				}
			})
		}
	}
}
