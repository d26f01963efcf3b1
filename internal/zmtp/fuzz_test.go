package zmtp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/zmtp"
)

// scriptConn is a net.Conn that reads a fixed script and swallows writes.
type scriptConn struct {
	r *bytes.Reader
}

func (c *scriptConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *scriptConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzStream feeds arbitrary bytes as everything a peer says, first with a
// valid handshake in front, then raw: no panic, no buffer past the limit.
func FuzzStream(f *testing.F) {
	var m bytes.Buffer
	writeMessage(&m, message("kv_metrics", 1, []byte("payload")))
	f.Add(m.Bytes())
	f.Add(longHeader(false, 1<<60))
	f.Add(append(longHeader(true, 100), bytes.Repeat([]byte{1}, 100)...))
	f.Add([]byte{0x04, 3, 2, 'O', 'K'})
	var five bytes.Buffer // a frame too many, then a payload frame over the frame limit
	writeMessage(&five, append(message("kv_metrics", 2, []byte("payload")), []byte("fifth")))
	writeMessage(&five, message("kv_metrics", 3, bytes.Repeat([]byte{7}, 17<<10)))
	f.Add(five.Bytes())
	handshake := append(pubGreeting(), readyFrame("PUB")...)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, stream := range [][]byte{append(append([]byte{}, handshake...), data...), data} {
			conn := &scriptConn{r: bytes.NewReader(stream)}
			sub, err := zmtp.Subscribe(context.Background(), conn, []byte("kv_metrics"), zmtp.LimitsKVMetrics)
			if err != nil {
				continue
			}
			for i := 0; i < 64; i++ {
				frames, err := sub.Next()
				if sub.BufferCap() > zmtp.LimitsKVMetrics.MaxMessageBytes {
					t.Fatalf("buffer grew to %d", sub.BufferCap())
				}
				if errors.Is(err, io.EOF) || (err != nil && !errors.Is(err, zmtp.ErrOversized)) {
					break
				}
				if err == nil || errors.Is(err, zmtp.ErrOversized) {
					lim, total := zmtp.LimitsKVMetrics, 0
					if len(frames) > lim.MaxFrames {
						t.Fatalf("%d frames", len(frames))
					}
					for _, f := range frames {
						if len(f) > lim.MaxFrameBytes {
							t.Fatalf("a frame of %d bytes", len(f))
						}
						total += len(f)
					}
					if total > lim.MaxMessageBytes {
						t.Fatalf("a message of %d bytes", total)
					}
				}
			}
		}
	})
}
