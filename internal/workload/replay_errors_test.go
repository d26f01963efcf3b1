package workload_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/workload"
)

// TestReplayCountsFailedStreams: a streamed answer that carries an error
// event (the router relays the frontend's as it came, "told in stream",
// and ends the answer in good order, [DONE] included when the frontend
// sent one) or ends before its [DONE] is a failed request
// (ERRORS), not a success whose TTFT and end-to-end latency enter the
// percentiles (the fault bench's load, faultbench/load.go, at least
// requires the [DONE]).
func TestReplayCountsFailedStreams(t *testing.T) {
	t.Parallel()
	bodies := []string{
		// complete
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
		// an error event, then the answer's end
		"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: {\"error\":{\"message\":\"engine gone\",\"code\":500}}\n\n",
		// cut before [DONE], the chunked answer ended cleanly
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
		// Dynamo's frontend's in-stream error, relayed as it came
		"event: error\n: Prefill worker ID required in Direct routing mode\n\ndata: [DONE]\n\n",
	}
	var n atomic.Int64 // the requests arrive 100 ms apart, in order
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(bodies[(n.Add(1)-1)%int64(len(bodies))]))
	}))
	defer srv.Close()
	reqs := []workload.Request{
		{Timestamp: 0, InputLength: 16, OutputLength: 2, Seq: 0},
		{Timestamp: 100, InputLength: 16, OutputLength: 2, Seq: 1},
		{Timestamp: 200, InputLength: 16, OutputLength: 2, Seq: 2},
		{Timestamp: 300, InputLength: 16, OutputLength: 2, Seq: 3},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep := workload.Replay(ctx, reqs, workload.Options{Router: srv.URL, Model: "m"})
	if rep.Requests != 4 || rep.Errors != 3 {
		t.Fatalf("%d requests, %d errors; want 4 and 3 (the two error events and the stream without [DONE])", rep.Requests, rep.Errors)
	}
}
