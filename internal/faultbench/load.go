package faultbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/workload"
)

// maxInFlight bounds the requests the load keeps open at once; a tick
// that finds them all open is counted as not sent (the router is far
// behind, and the report says so).
const maxInFlight = 1024

// maxAnswer bounds the answer read of one request.
const maxAnswer = 1 << 20

// outcome is one request of the steady load and what came of it.
type outcome struct {
	start, end time.Time
	stream     bool
	status     int
	// The router's x-continuum-* answer headers: the decode worker, the
	// prefill worker and the frontend replica it went through.
	worker, prefill, backend string
	// cause is empty for a success; otherwise why it failed (a status
	// with the router's error code, a stream cut short, a transport
	// error).
	cause string
	// detail is the error's message or the answer's end (at most
	// maxDetail bytes), for a failure.
	detail string
}

// maxDetail bounds a failure's detail.
const maxDetail = 300

func clip(s string) string {
	if len(s) > maxDetail {
		return s[len(s)-maxDetail:]
	}
	return s
}

func (o outcome) failed() bool { return o.cause != "" }

// load sends chat completions at a steady rate, streamed and buffered in
// turn, each on its own goroutine, until stopped.
type load struct {
	router    string
	model     string
	maxTokens int
	client    *http.Client
	mu        sync.Mutex
	all       []outcome
	skipped   int
	stopCh    chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup
}

func startLoad(ctx context.Context, router, model string, perSecond float64, maxTokens int) *load {
	l := &load{router: router, model: model, maxTokens: maxTokens, stopCh: make(chan struct{}),
		client: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: maxInFlight, IdleConnTimeout: 30 * time.Second}}}
	slots := make(chan struct{}, maxInFlight)
	l.wg.Go(func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / perSecond))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-l.stopCh:
				return
			case <-tick.C:
			}
			select {
			case slots <- struct{}{}:
			default:
				l.mu.Lock()
				l.skipped++
				l.mu.Unlock()
				continue
			}
			l.wg.Go(func() {
				defer func() { <-slots }()
				o := l.one(ctx, i, i%2 == 1)
				l.mu.Lock()
				l.all = append(l.all, o)
				l.mu.Unlock()
			})
		}
	})
	return l
}

// errorBody is the router's (OpenAI-shaped) error answer.
type errorBody struct {
	Error struct {
		Code    any    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (l *load) one(ctx context.Context, i int, stream bool) (o outcome) {
	o = outcome{start: time.Now(), stream: stream}
	defer func() { o.end = time.Now() }()
	// The router routes by KV overlap: prompts that shared a first block
	// would all go to the prefill worker holding it, and a restarted
	// worker (its cache empty) would never be chosen again. Each prompt
	// opens with 16 hex digits of its own, so that no two share a block
	// and placement follows load alone.
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":"%016x fault bench request %d"}]}`,
		l.model, stream, l.maxTokens, uint64(i)*0x9E3779B97F4A7C15, i)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.router+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		o.cause = "request: " + err.Error()
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-backend", "") // ask the router to show its routing identities
	resp, err := l.client.Do(req)
	if err != nil {
		o.cause, o.detail = "transport error", clip(err.Error())
		if errors.Is(err, context.Canceled) {
			o.cause = "cancelled by the bench"
		}
		return o
	}
	defer func() { _ = resp.Body.Close() }()
	o.status = resp.StatusCode
	o.worker, o.prefill, o.backend = resp.Header.Get("x-continuum-worker"), resp.Header.Get("x-continuum-prefill-worker"), resp.Header.Get("x-continuum-backend")
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	defer func() {
		if o.cause != "" && o.detail == "" {
			o.detail = fmt.Sprintf("%s %s %s %s: %s", o.start.Format("15:04:05.000"), o.worker, o.prefill, o.backend, clip(string(data)))
		}
	}()
	switch {
	case resp.StatusCode != http.StatusOK:
		o.cause = fmt.Sprintf("%d", resp.StatusCode)
		var e errorBody
		if json.Unmarshal(data, &e) == nil && e.Error.Code != nil {
			o.cause += fmt.Sprintf(" %v", e.Error.Code)
		}
	case err != nil:
		o.cause = "answer cut"
	case stream && streamErrored(data):
		o.cause = "error in stream"
	case stream && !bytes.Contains(data, []byte("data: [DONE]")):
		o.cause = "stream cut"
	case !stream && !bytes.Contains(data, []byte(`"choices"`)):
		o.cause = "answer without choices"
	}
	return o
}

// streamErrored reports whether a streamed answer carried an error event
// (the frontend's in-stream failure, relayed by the router as it came,
// ends with [DONE] all the same).
func streamErrored(data []byte) bool {
	for line := range strings.Lines(string(data)) {
		if workload.StreamErrorLine(line) {
			return true
		}
	}
	return false
}

// stop stops sending and waits for the requests in flight.
func (l *load) stop() []outcome {
	l.stopOnce.Do(func() { close(l.stopCh) })
	l.wg.Wait()
	l.client.CloseIdleConnections()
	return l.results()
}

func (l *load) results() []outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]outcome(nil), l.all...)
}

func (l *load) notSent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.skipped
}
