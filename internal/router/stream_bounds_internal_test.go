package router

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
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

// TestSSEEventLinesCostTheirSize: an event of many short data lines
// costs about its size, not a slice per line (four million empty lines
// held 24 bytes each beside their bytes).
func TestSSEEventLinesCostTheirSize(t *testing.T) { // not parallel: it counts allocations
	const lines = 1 << 20
	body := strings.Repeat("data:\n", lines) + "\n"
	rd := newSSEReader(strings.NewReader(body))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ev, err := rd.next()
	runtime.ReadMemStats(&after)
	if err != nil || len(ev.data) != lines-1 {
		t.Fatalf("%d bytes of data: %v", len(ev.data), err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("an event of %d empty data lines allocated %d MiB", lines, grew>>20)
	}
}

// toolCallChunks is a chat stream of n tool calls, each its own.
func toolCallChunks(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"id":"call_%d","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`+"\n\n", i, i)
	}
	return b.String() + chunks(finishChunk("tool_calls"), "[DONE]")
}

// wantTold fails t unless err says that a converted stream ended with its
// error event for a failure counted 502.
func wantTold(t *testing.T, err error) {
	t.Helper()
	var told toldInStream
	if !errors.As(err, &told) || told.status != http.StatusBadGateway {
		t.Fatalf("the stream's end: %v, want the error event told of a 502", err)
	}
}

// endedTelling fails t unless a converted stream's end err is a
// toldInStream when the stream ended with its error event (failed), and
// nil otherwise.
func endedTelling(t *testing.T, err error, failed bool) {
	t.Helper()
	var told toldInStream
	if errors.As(err, &told) != failed || (!failed && err != nil) {
		t.Fatalf("the stream's end: %v; ended with its error event: %v", err, failed)
	}
}

// TestConvertedStreamBounded: a converted stream holds state per content
// block (Messages) or output item (Responses), and a Responses stream the
// whole answer for its last event; an upstream answer past
// maxStreamBlocks blocks or maxBufferedResponse bytes ends with the
// ingress's error event instead of growing without bound.
func TestConvertedStreamBounded(t *testing.T) {
	t.Parallel()
	t.Run("messages blocks", func(t *testing.T) {
		t.Parallel()
		rec := httptest.NewRecorder()
		wantTold(t, (&anthropicOut{model: "m"}).stream(rec, strings.NewReader(toolCallChunks(maxStreamBlocks+1))))
		evs := events(t, rec.Body.String())
		starts := 0
		for _, e := range evs {
			if strings.HasPrefix(e, "content_block_start ") {
				starts++
			}
		}
		if last := evs[len(evs)-1]; starts > maxStreamBlocks || !strings.HasPrefix(last, "error ") || !strings.Contains(last, errTooManyBlocks) {
			t.Fatalf("%d blocks, last event %.200s", starts, last)
		}
		// At the bound the answer is whole.
		rec = httptest.NewRecorder()
		if err := (&anthropicOut{model: "m"}).stream(rec, strings.NewReader(toolCallChunks(maxStreamBlocks))); err != nil {
			t.Fatal(err)
		}
		if evs := events(t, rec.Body.String()); evs[len(evs)-1] != `message_stop {"type":"message_stop"}` {
			t.Fatalf("last event %.200s", evs[len(evs)-1])
		}
	})
	t.Run("responses items", func(t *testing.T) {
		t.Parallel()
		rec := httptest.NewRecorder()
		wantTold(t, testResponsesOut(t, `{"model":"m","input":"x"}`).stream(rec, strings.NewReader(toolCallChunks(maxStreamBlocks+1))))
		evs := events(t, rec.Body.String())
		if last := evs[len(evs)-1]; !strings.HasPrefix(last, "response.failed ") || !strings.Contains(last, errTooManyBlocks) {
			t.Fatalf("last event %.200s", last)
		}
	})
	t.Run("responses bytes", func(t *testing.T) {
		t.Parallel()
		const size = 64 << 10
		o := testResponsesOut(t, `{"model":"m","input":"x"}`)
		o.maxHeld = 1 << 20 // maxBufferedResponse, scaled down
		chunk := "data: " + textChunk(strings.Repeat("x", size)) + "\n\n"
		body := io.MultiReader(&repeatReader{s: chunk, n: o.maxHeld/size + 1}, strings.NewReader(chunks(finishChunk("stop"), "[DONE]")))
		rec := httptest.NewRecorder()
		wantTold(t, o.stream(rec, body))
		evs := events(t, rec.Body.String())
		if last := evs[len(evs)-1]; !strings.HasPrefix(last, "response.failed ") || !strings.Contains(last, errAnswerTooLong) {
			t.Fatalf("last event %.200s", last)
		}
		if (&responsesOut{}).heldLimit() != maxBufferedResponse {
			t.Error("a stream holds up to maxBufferedResponse of its answer")
		}
	})
}

// TestSSEReaderFraming: lines end in CR LF, LF or CR alone; an event
// without data is none (its name does not carry over to the next); a
// block of comments alone is a keep-alive; a comment is otherwise skipped,
// but for an error event without data, which Dynamo's frontend writes with
// its message as a comment; the last event may end with the stream.
func TestSSEReaderFraming(t *testing.T) {
	t.Parallel()
	body := "event: ping\n\n: keep-alive\r\n\r\ndata: {\"a\":1}\rdata: x\r\rdata: 2\r\n\r\nevent: e\ndata: 3\n\n" +
		"event: error\n: the engine failed\n\ndata: last"
	rd := newSSEReader(strings.NewReader(body))
	var got []string
	for {
		ev, err := rd.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		if ev.keepAlive {
			got = append(got, "keep-alive")
			continue
		}
		got = append(got, ev.name+"|"+string(ev.data))
	}
	want := []string{"keep-alive", "|{\"a\":1}\nx", "|2", "e|3", "error|the engine failed", "|last"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// TestFinalEvents: a Responses stream ends with its final event when its
// last event is response.completed, response.incomplete or
// response.failed (by its event line or its data's type, however long the
// data) or data: [DONE], with the event's blank line written; in any line
// ending and however the bytes are cut.
func TestFinalEvents(t *testing.T) {
	t.Parallel()
	long := `{"type":"response.completed","response":{"output":"` + strings.Repeat("x", 300) + `"}}`
	for _, tc := range []struct {
		stream string
		done   bool
	}{
		{"event: response.created\ndata: {}\n\nevent: response.completed\ndata: {}\n\n", true},
		{"event: response.completed\r\ndata: {}\r\n\r\n", true},
		{"event: response.failed\rdata: {}\r\r", true},
		{"event:response.incomplete\ndata: {}\n\n", true},
		{"data: " + long + "\n\n", true},
		{`data: { "type" : "response.failed"}` + "\n\n", true},
		{"event: response.completed\ndata: {}\n\ndata: [DONE]\n\n", true},
		{"event: response.completed\ndata: {}\n\n\n", true},
		{"event: response.completed\ndata: {}\n", false},
		{"event: response.completed\ndata: {}\n\nevent: response.output_text.delta\ndata: {}\n\n", false},
		{"event: response.completed.x\ndata: {}\n\n", false},
		{`data: {"type":"response.output_text.delta","delta":"response.completed"}` + "\n\n", false},
		{"event: response.created\ndata: {}\n\n", false},
	} {
		for _, cut := range []int{1, 3, 7, 1 << 20} {
			var f streamLines
			done := false
			for s := tc.stream; len(s) > 0; {
				n := min(cut, len(s))
				done = f.add([]byte(s[:n]))
				s = s[n:]
			}
			if done != tc.done {
				t.Errorf("%q in pieces of %d: done %v, want %v", tc.stream, cut, done, tc.done)
			}
		}
	}
}

// TestErrorEvents: a stream followed line by line tells an error event
// (named error, or data holding an object whose first member is "error")
// from the rest, however the bytes are cut.
func TestErrorEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stream  string
		errored bool
	}{
		{"event: error\n: the engine failed\n\ndata: [DONE]\n\n", true},
		{"event:error\r\n: x\r\n\r\n", true},
		{`data: {"error":{"message":"Internal server error","code":500}}` + "\n\n", true},
		{`data:{ "error" : "x"}` + "\r\r", true},
		{`data: {"id":"c","choices":[{"delta":{"content":"{\"error\""}}]}` + "\n\n", false},
		{"event: errors\ndata: {}\n\n", false},
		{": error\n\n", false},
		{`data: {"choices":[],"error":null}` + "\n\n", false},
	} {
		for _, cut := range []int{1, 5, 1 << 20} {
			var f streamLines
			for s := tc.stream; len(s) > 0; {
				n := min(cut, len(s))
				f.add([]byte(s[:n]))
				s = s[n:]
			}
			if f.errored != tc.errored {
				t.Errorf("%q in pieces of %d: errored %v, want %v", tc.stream, cut, f.errored, tc.errored)
			}
		}
	}
}
