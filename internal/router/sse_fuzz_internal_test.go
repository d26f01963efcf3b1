package router

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// The router reads an upstream's event stream (a converted answer: the
// Messages and Responses ingresses) with sseReader, on bytes a backend
// sends in whatever pieces the network delivers. FuzzSSEReader holds the
// reader to a plain reference reading of the server-sent events format as
// sseReader documents it, whatever the chunking:
//   - lines end at CR LF, LF or CR alone (a CR LF split across two reads is
//     one line end), and the last line may have no end;
//   - a line starting with ":" is a comment; a field is the text before
//     the first ":" (the whole line when there is none), its value what
//     follows, one leading space dropped;
//   - data fields join with LF; event names the event; a blank line ends
//     an event that has data (one without data is no event, and its name
//     goes with it); data pending at the end of the stream is an event;
//   - except an event named error with no data and comment lines before
//     its end: an event whose data are the comments' texts (one leading
//     space dropped, the non-empty ones joined with LF from the first
//     non-empty one on), as Dynamo's frontend writes an error in a stream;
//   - then io.EOF, and io.EOF again on every later call.
// It also bounds the output by the input: the events' data never hold
// more bytes than the stream.

// sseRefEvent is one event as the reference reads it.
type sseRefEvent struct {
	name      string
	data      string
	keepAlive bool
}

// refSSELines splits a stream at CR LF, LF or CR.
func refSSELines(b []byte) [][]byte {
	var lines [][]byte
	start := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '\n':
			lines = append(lines, b[start:i])
			start = i + 1
		case '\r':
			lines = append(lines, b[start:i])
			if i+1 < len(b) && b[i+1] == '\n' {
				i++
			}
			start = i + 1
		}
	}
	if start < len(b) {
		lines = append(lines, b[start:])
	}
	return lines
}

// refSSE reads a whole stream's events.
func refSSE(b []byte) []sseRefEvent {
	var out []sseRefEvent
	name, data, comment, seen, commented := "", "", "", false, false
	for _, line := range refSSELines(b) {
		if len(line) == 0 {
			if seen {
				out = append(out, sseRefEvent{name: name, data: data})
			} else if name == "error" && comment != "" {
				out = append(out, sseRefEvent{name: name, data: comment})
			} else if commented {
				out = append(out, sseRefEvent{keepAlive: true})
			}
			name, data, comment, seen, commented = "", "", "", false, false
			continue
		}
		if line[0] == ':' {
			commented = true
			if !seen {
				if comment != "" {
					comment += "\n"
				}
				comment += string(bytes.TrimPrefix(line[1:], []byte(" ")))
			}
			continue
		}
		field, value := string(line), ""
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = string(line[:i]), string(line[i+1:])
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch field {
		case "data":
			if seen {
				data += "\n"
			}
			data += value
			seen = true
		case "event":
			name = value
		}
	}
	if seen {
		out = append(out, sseRefEvent{name: name, data: data})
	} else if name == "error" && comment != "" {
		out = append(out, sseRefEvent{name: name, data: comment})
	}
	return out
}

// chunkReader hands out data in pieces whose sizes the fuzzer picks (1
// to 16 bytes each, cycling through sizes), and with eofWithData returns
// the last piece together with io.EOF, as io.Reader allows.
type chunkReader struct {
	data        []byte
	sizes       []byte
	i           int
	eofWithData bool
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = int(c.sizes[c.i%len(c.sizes)]%16) + 1
		c.i++
	}
	n = copy(p, c.data[:min(n, len(c.data))])
	c.data = c.data[n:]
	if len(c.data) == 0 && c.eofWithData {
		return n, io.EOF
	}
	return n, nil
}

// readAllSSE reads every event of r, and the error that ended it.
func readAllSSE(t *testing.T, r io.Reader) ([]sseRefEvent, error) {
	t.Helper()
	rd := newSSEReader(r)
	var out []sseRefEvent
	for {
		ev, err := rd.next()
		if err != nil {
			if _, again := rd.next(); !errors.Is(again, err) {
				t.Fatalf("after %v the reader answered %v", err, again)
			}
			return out, err
		}
		out = append(out, sseRefEvent{ev.name, string(ev.data), ev.keepAlive})
		if len(out) > 1<<16 {
			t.Fatal("more events than the stream can hold")
		}
	}
}

func FuzzSSEReader(f *testing.F) {
	for _, s := range upstreamSeeds {
		f.Add([]byte(s), []byte{3, 7, 1}, false)
	}
	for _, s := range []string{
		"event: message_start\r\ndata: {\"a\":1}\r\n\r\nevent: ping\r\n\r\ndata: x\rdata: y\r\r",
		": keep-alive\n\ndata:no-space\ndata:  two spaces\n\n",
		"data\n\ndata:\n\nevent\ndata: z",
		"data: a\r", "data: a\r\n", "\r\n\r\n", "event: e\n\ndata: after a nameless blank\n\n",
		"data: [DONE]\n\n",
		"event: error\n: the worker failed\n\ndata: [DONE]\n\n", ":\n: a\n:b\nevent: error\n\n", "event: error\n: x\ndata: y\n\n",
		": keep-alive\nevent: error", "event: error\n:\n\n",
	} {
		f.Add([]byte(s), []byte{0}, true)
		f.Add([]byte(s), []byte{}, false)
	}
	f.Fuzz(func(t *testing.T, stream, sizes []byte, eofWithData bool) {
		want := refSSE(stream)
		got, err := readAllSSE(t, &chunkReader{data: stream, sizes: sizes, eofWithData: eofWithData})
		if !errors.Is(err, io.EOF) {
			t.Fatalf("stream %q in pieces %v: ended with %v", stream, sizes, err)
		}
		total := 0
		for _, ev := range got {
			total += len(ev.data) + len(ev.name)
		}
		if total > len(stream) {
			t.Fatalf("stream %q: %d bytes of events from %d", stream, total, len(stream))
		}
		if len(got) != len(want) {
			t.Fatalf("stream %q in pieces %v: events %+v, want %+v", stream, sizes, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("stream %q in pieces %v: event %d is %+v, want %+v", stream, sizes, i, got[i], want[i])
			}
		}
	})
}

// TestSSELineSearchedOnce: a long line that arrives in small reads is
// searched for its end once, not once per read (the scanner hands the split
// the whole unfinished line again after each read): the split resumes where
// its last search stopped, and still finds a CR LF split across two reads.
func TestSSELineSearchedOnce(t *testing.T) {
	t.Parallel()
	var l sseLines
	line := bytes.Repeat([]byte("x"), 64<<10)
	for n := 4 << 10; n <= len(line); n += 4 << 10 {
		if adv, tok, _ := l.split(line[:n], false); adv != 0 || tok != nil {
			t.Fatalf("%d bytes without a line end: advance %d", n, adv)
		}
		if l.scanned != n {
			t.Fatalf("after %d bytes the search stands at %d, want %d", n, l.scanned, n)
		}
	}
	data := append(append([]byte{}, line...), '\r')
	if adv, tok, _ := l.split(data, false); adv != 0 || tok != nil || l.scanned != len(line) {
		t.Fatalf("a CR last: advance %d, search at %d", adv, l.scanned)
	}
	data = append(data, '\n', 'y')
	adv, tok, _ := l.split(data, false)
	if adv != len(line)+2 || !bytes.Equal(tok, line) || l.scanned != 0 {
		t.Fatalf("CR LF across reads: advance %d, token of %d bytes, search at %d", adv, len(tok), l.scanned)
	}
}
