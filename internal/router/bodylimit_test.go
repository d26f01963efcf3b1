package router_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
)

// TestDeclaredBodyPastLimitRefusedAtOnce: a request whose declared
// Content-Length is past server.max_body_bytes is answered 413 from its
// head, before the client sends the body it will not be let to send; with
// Expect: 100-continue the client is not invited (100 Continue) to upload
// it first.
func TestDeclaredBodyPastLimitRefusedAtOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, expect := range []string{"Expect: 100-continue\r\n", ""} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(h.router.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
		_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+expect+
			"Content-Length: "+strconv.Itoa(config.DefaultMaxBodyBytes+1)+"\r\n\r\n{")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%q: no answer to a declared body past the limit: %v", expect, err)
		}
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("%q: status %d, want 413 before the body", expect, resp.StatusCode)
		}
	}
}
