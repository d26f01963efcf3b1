package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// backend is the fast OpenAI-shaped upstream every path of the comparison
// ends at: POST /v1/chat/completions answers a small chat completion at
// once, or, when the body asks for a stream, an SSE stream of tokens
// chat.completion.chunk events and [DONE], each event written and flushed
// on its own (gap apart) as a model server sends tokens; GET /v1/models
// answers the health checks of a proxy.
type backend struct {
	completion []byte
	events     [][]byte
	gap        time.Duration
}

func newBackend(tokens int, gap time.Duration) *backend {
	b := &backend{
		completion: []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench",` +
			`"choices":[{"index":0,"message":{"role":"assistant","content":"` + tokenText(tokens) + `"},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":5,"completion_tokens":` + strconv.Itoa(tokens) + `,"total_tokens":` + strconv.Itoa(tokens+5) + `}}`),
		gap: gap,
	}
	const head = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,`
	b.events = append(b.events, []byte(head+`"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n"))
	for i := range tokens {
		b.events = append(b.events, []byte(head+`"delta":{"content":"`+token(i)+`"},"finish_reason":null}]}`+"\n\n"))
	}
	b.events = append(b.events, []byte(head+`"delta":{},"finish_reason":"stop"}]}`+"\n\n"), []byte("data: [DONE]\n\n"))
	return b
}

func token(i int) string { return "tok" + strconv.Itoa(i) + " " }

func tokenText(n int) string {
	var s string
	for i := range n {
		s += token(i)
	}
	return s
}

// streamed is the byte size of one whole SSE answer, what a client must
// read to its end.
func (b *backend) streamed() int {
	n := 0
	for _, e := range b.events {
		n += len(e)
	}
	return n
}

var streamField = []byte(`"stream":true`)

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"bench","object":"model","owned_by":"bench"}]}`)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if !bytes.Contains(body, streamField) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(b.completion)))
			_, _ = w.Write(b.completion)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		f := w.(http.Flusher)
		for i, e := range b.events {
			if i > 0 && b.gap > 0 {
				time.Sleep(b.gap)
			}
			if _, err := w.Write(e); err != nil {
				return
			}
			f.Flush()
		}
	default:
		http.NotFound(w, r)
	}
}

// serveBackend listens on addr, prints "listening HOST:PORT" on stdout
// once it accepts connections, and serves until the process is stopped.
func serveBackend(addr string, tokens int, gap time.Duration) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "listening %s\n", ln.Addr())
	srv := &http.Server{Handler: newBackend(tokens, gap), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	return srv.Serve(ln)
}
