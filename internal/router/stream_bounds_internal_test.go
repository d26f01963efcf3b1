package router

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// dataLines is an upstream stream of one event that never ends: n lines of
// data, each of size bytes, with no blank line between them.
func dataLines(n, size int) io.Reader {
	line := "data: " + strings.Repeat("x", size) + "\n"
	return io.MultiReader(strings.NewReader("event: x\n"), &repeatReader{s: line, n: n})
}

type repeatReader struct {
	s   string
	n   int
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		if r.n == 0 {
			if written == 0 {
				return 0, io.EOF
			}
			break
		}
		c := copy(p[written:], r.s[r.off:])
		written += c
		if r.off += c; r.off == len(r.s) {
			r.off, r.n = 0, r.n-1
		}
	}
	return written, nil
}

// TestSSEEventBounded: the reader holds one event until its blank line,
// and no more than maxSSEEvent of its data: an upstream that sends data
// lines without ever ending the event is refused past the bound, not
// held in memory.
func TestSSEEventBounded(t *testing.T) {
	t.Parallel()
	const line = 64 << 10
	rd := newSSEReader(dataLines(maxSSEEvent/line+2, line))
	ev, err := rd.next()
	if !errors.Is(err, errSSEEventTooLarge) {
		t.Fatalf("an event of %d bytes of data was read: %v", len(ev.data), err)
	}
	// Below the bound an event of many lines is read whole.
	rd = newSSEReader(io.MultiReader(dataLines(4, line), strings.NewReader("\n")))
	if ev, err := rd.next(); err != nil || ev.name != "x" || len(ev.data) != 4*line+3 {
		t.Fatalf("event %q of %d bytes: %v", ev.name, len(ev.data), err)
	}
}
