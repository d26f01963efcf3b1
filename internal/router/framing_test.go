package router_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/router"
	"github.com/continuum-router/continuum/internal/testutil"
)

// framingBackend is a raw backend (scriptBackend) that records every
// POST (method, target and body) and which connections carried
// POSTs, and answers the n-th POST (from 0) with answer(n): raw bytes as
// they are, written in two parts 30 ms apart around splitMark; close says
// whether to close the connection after the answer.
type framingBackend struct {
	url       string
	mu        sync.Mutex
	posts     []string
	postConns map[int]bool
}

type framingAnswer struct {
	bytes string
	close bool
}

// splitMark in an answer makes the backend write what is before and after
// it in separate writes, 30 ms apart.
const splitMark = "\x00SPLIT\x00"

func newFramingBackend(t *testing.T, answer func(n int) framingAnswer) *framingBackend {
	t.Helper()
	ab := &framingBackend{postConns: map[int]bool{}}
	sb := newScriptBackend(t, func(c net.Conn, _, _ int) bool {
		ab.mu.Lock()
		n := len(ab.posts) - 1
		ab.mu.Unlock()
		a := answer(n)
		for i, part := range strings.Split(a.bytes, splitMark) {
			if i > 0 {
				time.Sleep(30 * time.Millisecond)
			}
			_, _ = io.WriteString(c, part)
		}
		return !a.close
	}, func(sb *scriptBackend) {
		sb.seen = func(conn int, req *http.Request, body []byte) {
			ab.mu.Lock()
			defer ab.mu.Unlock()
			ab.posts = append(ab.posts, req.Method+" "+req.RequestURI+" "+string(body))
			ab.postConns[conn] = true
		}
	})
	ab.url = sb.url
	return ab
}

func (ab *framingBackend) snapshot() []string {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	return append([]string(nil), ab.posts...)
}

func (ab *framingBackend) reset() {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	ab.posts = nil
}

func (ab *framingBackend) connsWithPosts() int {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	return len(ab.postConns)
}

const okJSON = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`

func plainAnswer(body string) framingAnswer {
	return framingAnswer{bytes: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body}
}

// startRawRouter starts a router (lean server, net/http behind it) in front of
// a raw backend answering answer.
func startRawRouter(t *testing.T, answer func(n int) framingAnswer) (*framingBackend, string) {
	t.Helper()
	if answer == nil {
		answer = func(int) framingAnswer { return plainAnswer(okJSON) }
	}
	ab := newFramingBackend(t, answer)
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "be", Type: "openai", URL: ab.url, Role: config.RoleUnified, Enabled: true,
		Timeout: config.Duration(5 * time.Second)}}
	cfg.Dynamo.Enabled = false
	srv := router.New(router.Options{Config: cfg})
	srv.SetReady(true)
	u := testutil.LeanServer(t, srv.Handler())
	return ab, strings.TrimPrefix(u, "http://")
}

// exchangeRaw writes req to addr in one write and reads all it gets until
// the connection closes (closed true) or wait passes with nothing more.
// The first byte may take up to firstByteWait however short wait is: a
// machine loaded by other tests may take longer than wait to answer at
// all, and every caller expects an answer.
func exchangeRaw(t *testing.T, addr, req string, wait time.Duration) (got string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	p := make([]byte, 4096)
	for {
		d := wait
		if buf.Len() == 0 {
			d = max(wait, firstByteWait)
		}
		_ = c.SetReadDeadline(time.Now().Add(d))
		n, err := c.Read(p)
		buf.Write(p[:n])
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return buf.String(), false
			}
			return buf.String(), true
		}
	}
}

// firstByteWait bounds exchangeRaw's wait for an answer's first byte.
const firstByteWait = 5 * time.Second

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

func cl(body string) string { return "Content-Length: " + strconv.Itoa(len(body)) + "\r\n" }

func statusLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\r\n") {
		if strings.HasPrefix(l, "HTTP/1.") {
			out = append(out, l)
		}
	}
	return out
}

func hexLen(s string) string { return strconv.FormatInt(int64(len(s)), 16) }

// TestFramedTwoWaysAfterHandOffRefused: the lean server refuses a
// request framed two ways (Transfer-Encoding beside Content-Length) with
// 400 and closes its connection; the same request must be refused when it
// comes on a connection the lean server already handed to net/http (here,
// after a chunked upload), or net/http reads it by Transfer-Encoding,
// keeps the connection and serves the bytes after it, which a hop in
// front that framed it by Content-Length took for its body, as a request
// of their own.
func TestFramedTwoWaysAfterHandOffRefused(t *testing.T) {
	t.Parallel()
	ab, addr := startRawRouter(t, nil)
	chunked := hexLen(chatBody) + "\r\n" + chatBody + "\r\n0\r\n\r\n"
	handedOff := "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
	smuggled := "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n" + cl(chatBody) + "\r\n" + chatBody
	twoWays := "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n" +
		"Content-Length: " + strconv.Itoa(len(chunked)+len(smuggled)) + "\r\n\r\n" + chunked + smuggled
	got, closed := exchangeRaw(t, addr, handedOff+twoWays, time.Second)
	posts := ab.snapshot()
	answers := strings.Count(got, "HTTP/1.1 ")
	t.Logf("closed=%v answers=%d backend POSTs=%d\n%s", closed, answers, len(posts), got)
	// Two requests as a Content-Length hop in front frames them: the
	// chunked upload and the one framed two ways (refused, or served by
	// its chunked body and the connection closed after it). Never a third.
	if answers > 2 || !closed || len(posts) > 2 {
		t.Fatalf("the bytes after the request framed two ways were served as a request of their own: %d answers, closed=%v, %d POSTs at the backend (want at most 2, and the connection closed)", answers, closed, len(posts))
	}
}

// TestLongHeadFramedTwoWaysRefused: a request whose head has both
// Transfer-Encoding and Content-Length is refused with 400 and its
// connection closed (the lean server's rule, README "serving path"; RFC
// 9112, section 6.3: such a message ought to be handled as an error, and
// a server that reads it by Transfer-Encoding MUST close the connection
// after responding). The same must hold when the head is longer than the
// lean server's 4 KiB buffer and the second framing field comes after it.
func TestLongHeadFramedTwoWaysRefused(t *testing.T) {
	t.Parallel()
	ab, addr := startRawRouter(t, nil)
	body := hexLen(chatBody) + "\r\n" + chatBody + "\r\n0\r\n\r\n"
	smuggled := "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n" + cl(chatBody) + "\r\n" + chatBody
	for _, pad := range []int{100, 5000} {
		req := "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n" +
			"X-Pad: " + strings.Repeat("a", pad) + "\r\n" +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body + smuggled
		got, closed := exchangeRaw(t, addr, req, time.Second)
		posts := ab.snapshot()
		t.Logf("pad %d: closed=%v statuses=%q backend POSTs so far=%d", pad, closed, statusLines(got), len(posts))
		// One request as a Content-Length hop in front frames it: refused
		// (400), or served by its chunked body with the connection closed
		// after it; the bytes after its chunked body never a request.
		if !closed || strings.Count(got, "HTTP/1.1 ") != 1 || len(posts) > 1 {
			t.Errorf("pad %d: the bytes after the request framed two ways were served as a request of their own: closed=%v, %d answers, %d POSTs at the backend (want 1 answer, at most 1 POST, the connection closed)",
				pad, closed, strings.Count(got, "HTTP/1.1 "), len(posts))
		}
		ab.reset()
	}
}

// TestPipelinedHandOffKeepsWatchedByte: a client pipelines a second
// request behind a long one (a generation) on the lean path; the second
// request's head is already read when the first one's watch (which looks
// out for the client leaving) takes the next byte off the socket, and the
// second request is one the lean server hands to net/http (a chunked
// body). Every byte the client sent must reach the server that reads the
// second request: the backend must see both requests, the second with its
// body whole, and the client both answers.
func TestPipelinedHandOffKeepsWatchedByte(t *testing.T) {
	t.Parallel()
	second := `{"model":"m","messages":[{"role":"user","content":"second"}]}`
	ab, addr := startRawRouter(t, func(n int) framingAnswer {
		if n == 0 {
			time.Sleep(400 * time.Millisecond) // a generation: the watch starts meanwhile
		}
		return plainAnswer(okJSON)
	})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	first := "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n" + cl(chatBody) + "\r\n" + chatBody
	head2 := "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
	body2 := hexLen(second) + "\r\n" + second + "\r\n0\r\n\r\n"
	if _, err := io.WriteString(c, first+head2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // the first request's watch is reading the socket now
	if _, err := io.WriteString(c, body2); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	br := bufio.NewReader(c)
	var statuses []int
	for range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Logf("reading answer %d: %v", len(statuses)+1, err)
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		statuses = append(statuses, resp.StatusCode)
	}
	posts := ab.snapshot()
	if len(statuses) != 2 || statuses[0] != 200 || statuses[1] != 200 || len(posts) != 2 || !strings.HasSuffix(posts[1], second) {
		t.Fatalf("client answers %v; backend got %d POSTs %q\nwant two 200s and the second request's body whole at the backend", statuses, len(posts), posts)
	}
}

// TestAnswerFramedTwoWaysNotReused: an answer whose head has both
// Transfer-Encoding and Content-Length is faulty framing (RFC 9112,
// section 6.3); the router's client must not keep its connection for the
// next request (FramesTwoWays), however the head arrived. Here it arrives
// in two writes.
func TestAnswerFramedTwoWaysNotReused(t *testing.T) {
	t.Parallel()
	chunked := hexLen(okJSON) + "\r\n" + okJSON + "\r\n0\r\n\r\n"
	ab, addr := startRawRouter(t, func(n int) framingAnswer {
		if n == 0 {
			return framingAnswer{bytes: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n" + splitMark +
				"Content-Length: " + strconv.Itoa(len(chunked)) + "\r\n\r\n" + chunked}
		}
		return plainAnswer(okJSON)
	})
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n" + cl(chatBody) + "\r\n" + chatBody
	for i := range 2 {
		got, _ := exchangeRaw(t, addr, req, 500*time.Millisecond)
		if !strings.HasPrefix(got, "HTTP/1.1 200 OK") {
			t.Fatalf("answer %d: %q", i, got)
		}
	}
	posts := ab.snapshot()
	if len(posts) != 2 {
		t.Fatalf("backend POSTs %d", len(posts))
	}
	if n := ab.connsWithPosts(); n != 2 {
		t.Fatalf("the second request went on the connection of the answer framed two ways: %d connection(s) carried the 2 POSTs, want 2", n)
	}
}

// TestAnswerWithBareLFHead: an answer whose head's lines end in bare LFs
// (which net/http reads) is relayed at once, however the head arrived: the
// router does not wait for a CRLF head end that never comes.
func TestAnswerWithBareLFHead(t *testing.T) {
	t.Parallel()
	_, addr := startRawRouter(t, func(int) framingAnswer {
		return framingAnswer{bytes: "HTTP/1.1 200 OK\nContent-Type: application/json\n" + splitMark + "Content-Length: " + strconv.Itoa(len(okJSON)) + "\n\n" + okJSON}
	})
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n" + cl(chatBody) + "\r\n" + chatBody
	// Within a second of quiet, well before the backend's timeout (5 s).
	got, _ := exchangeRaw(t, addr, req, time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 200 OK") || !strings.HasSuffix(got, okJSON) {
		t.Fatalf("answer %q", got)
	}
}

// TestFragmentTargetRefused: a request target holds no fragment (RFC 9112,
// section 3.2): one that does is answered 400, on the lean path and on
// net/http's, not looked up as a path.
func TestFragmentTargetRefused(t *testing.T) {
	t.Parallel()
	ab, addr := startRawRouter(t, nil)
	for _, extra := range []string{"", "Pragma: x\r\n"} { // the lean path, then net/http's
		req := "POST /v1/chat/completions#frag HTTP/1.1\r\nHost: r\r\n" + extra + "Content-Type: application/json\r\n" + cl(chatBody) + "\r\n" + chatBody
		got, closed := exchangeRaw(t, addr, req, 300*time.Millisecond)
		if !strings.HasPrefix(got, "HTTP/1.1 400 ") || !closed {
			t.Errorf("path %q: got %q (closed %v), want 400 and the connection closed", strings.TrimSpace(extra), statusLines(got), closed)
		}
	}
	if posts := ab.snapshot(); len(posts) != 0 {
		t.Errorf("the backend got %d requests", len(posts))
	}
}
