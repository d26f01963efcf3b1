package h1

import (
	"net"
	"testing"
)

// TestHandedConnSeesLengthLines: a handed-off connection notes a
// Content-Length field line in what net/http reads, in any case and
// however the reads cut it, and nothing else (Content-Type, a length in a
// request line).
func TestHandedConnSeesLengthLines(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		stream string
		want   bool
	}{
		{"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", true},
		{"POST / HTTP/1.1\r\nhost: x\r\ncontent-LENGTH: 5\r\n\r\n", true},
		{"POST / HTTP/1.1\nContent-Length:5\n\n", true},
		{"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"POST /Content-Length HTTP/1.1\r\nX-Content-Length: 5\r\n\r\n", false},
	} {
		for _, size := range []int{1, 2, 3, 7, 14, 15, 16, 1 << 10} {
			a, b := net.Pipe()
			hc := &handedConn{Conn: b}
			go func() {
				for s := c.stream; len(s) > 0; {
					n := min(size, len(s))
					_, _ = a.Write([]byte(s[:n]))
					s = s[n:]
				}
				_ = a.Close()
			}()
			buf := make([]byte, size)
			for {
				if _, err := hc.Read(buf); err != nil {
					break
				}
			}
			_ = b.Close()
			if got := hc.sawLength.Load(); got != c.want {
				t.Errorf("%q read %d bytes at a time: saw a length %v, want %v", c.stream, size, got, c.want)
			}
		}
	}
}
