package eventbus_test

import (
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/eventbus"
)

// BenchmarkStalledStreamMemory measures what a stream holds when its
// client keeps sending and the router stops reading: the HTTP/2 receive
// window the listener advertises bounds the router's side, so the heap
// grows by about one budget per stream (plus the client's one frame in
// flight), within the four areas the session budget allows each stream.
// Reported: bytes/stream, and the budget.
func BenchmarkStalledStreamMemory(b *testing.B) {
	const streams = 64
	tb := startBus(b, func(s *eventbus.Settings, _ *eventbus.Timeouts) {
		s.MaxStreamsPerSession, s.MaxSessionBufferBytes = 1024, 64<<20
	})
	budget := eventbus.StreamBudget(64<<20, 1024)
	cc := tb.dial(b, nil)
	rs := openSession(b, cc, tokenA, hello(eventbus.RoleBroker, brokerA, []string{"dynamo"}, nil))
	var opened []*eventbus.Stream
	var writers []*io.PipeWriter
	var sent atomic.Int64
	var wg sync.WaitGroup
	defer func() {
		for _, w := range writers {
			_ = w.Close()
		}
		for _, s := range opened {
			_ = s.Close()
		}
		wg.Wait()
	}()
	for i := range streams {
		res := make(chan *eventbus.Stream, 1)
		go func() {
			s, err := tb.OpenStream(b.Context(), eventbus.Target{Namespace: "dynamo", Host: "10.0.0.1", Port: 1 + i, Topic: "kv_metrics"})
			if err != nil {
				b.Error(err)
			}
			res <- s
		}()
		sub := rs.next(b)
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		resp := post(b, cc, eventbus.PathStreams+sub.StreamID, tokenA, pr, nil)
		if resp.StatusCode != 200 {
			b.Fatal(refusalOf(b, resp))
		}
		s := <-res
		if s == nil {
			b.FailNow()
		}
		opened = append(opened, s)
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	chunk := make([]byte, 8<<10)
	for _, w := range writers {
		wg.Go(func() {
			for {
				n, err := w.Write(chunk)
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		})
	}
	// Wait until every writer is stalled by flow control.
	last := int64(-1)
	for sent.Load() != last {
		last = sent.Load()
		time.Sleep(300 * time.Millisecond)
	}
	after := heap()
	perStream := float64(int64(after)-int64(before)) / streams
	b.ReportMetric(perStream, "bytes/stream")
	b.ReportMetric(float64(budget), "budget-bytes")
	b.ReportMetric(float64(last)/streams, "sent-bytes/stream")
	if perStream > 4*float64(budget) {
		b.Errorf("a stalled stream holds %.0f bytes; its budget is %d per area, %d in all", perStream, budget, 4*budget)
	}
	if float64(last)/streams > float64(budget)+64<<10 {
		b.Errorf("a stalled stream took %.0f bytes from its client; the window is %d", float64(last)/streams, budget)
	}
	for range b.N {
	}
}
