package faultbench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestTallyInFlightOnKilledOnlyBeforeTheKill: "in flight on the killed
// worker when it died" (README, Under faults; Result.InFlightOnKilled) is a
// request that started before the kill and was still open at it. A stream
// that started after the kill and was cut on the dead worker is a request
// the router sent to a dead part: an unexpected failure, which must make
// the scenario NO. Likewise a stream cut before the kill is not the kill's.
func TestTallyInFlightOnKilledOnlyBeforeTheKill(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	ph := phases{loadStart: t0, fault: t0.Add(10 * time.Second), repair: t0.Add(18 * time.Second), whole: t0.Add(19 * time.Second), end: t0.Add(21 * time.Second)}
	victim := "1234"
	sc := scenarios[0] // decode-killed
	outcomes := []outcome{
		// In flight at the kill: the failure no router can save.
		{start: ph.fault.Add(-time.Second), end: ph.fault.Add(time.Second), stream: true, status: 200, worker: victim, cause: "stream cut"},
		// Sent to the dead worker 3 s after the kill, cut: the router's failure.
		{start: ph.fault.Add(3 * time.Second), end: ph.fault.Add(3500 * time.Millisecond), stream: true, status: 200, worker: victim, cause: "stream cut"},
		// Cut 5 s before the kill: not the kill's doing.
		{start: ph.fault.Add(-6 * time.Second), end: ph.fault.Add(-5 * time.Second), stream: true, status: 200, worker: victim, cause: "stream cut"},
	}
	var res Result
	(&env{}).tally(&res, sc, outcomes, ph, []string{victim}, "frontend-b")
	if res.Failed != 3 || res.InFlightOnKilled != 1 || res.Unexpected != 2 {
		t.Fatalf("failed %d, in flight on killed %d, unexpected %d; want 3, 1, 2", res.Failed, res.InFlightOnKilled, res.Unexpected)
	}
}

// TestTallyStreamCutByKillIsInFlight: a stream the killed worker was
// answering is cut with it (fleet-sim aborts the connection; the router
// then aborts the client's, dispatch.go exchange.abort: the chunked answer
// ends without its last chunk). That is the failure "no router can save"
// (README, Under faults), so it counts as IN FLIGHT ON KILLED, not as
// UNEXPECTED.
func TestTallyStreamCutByKillIsInFlight(t *testing.T) {
	t.Parallel()
	const victim = "4242"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("x-continuum-worker", victim)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"))
		w.(http.Flusher).Flush()
		time.Sleep(100 * time.Millisecond) // the kill comes here
		panic(http.ErrAbortHandler)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := &load{router: srv.URL, model: model, maxTokens: 4, client: srv.Client()}
	o := l.one(ctx, 1, true)
	if !o.failed() {
		t.Fatalf("a cut stream succeeded: %+v", o)
	}
	fault := o.start.Add(50 * time.Millisecond)
	ph := phases{loadStart: o.start.Add(-time.Second), fault: fault, repair: fault.Add(5 * time.Second), whole: fault.Add(6 * time.Second), end: fault.Add(8 * time.Second)}
	var res Result
	(&env{}).tally(&res, scenarios[0], []outcome{o}, ph, []string{victim}, "frontend-b")
	if res.InFlightOnKilled != 1 || res.Unexpected != 0 {
		t.Fatalf("cause %q: in flight on killed %d, unexpected %d; want 1, 0", o.cause, res.InFlightOnKilled, res.Unexpected)
	}
}

// TestLoadStreamErrorEventFails: Dynamo's frontend reports a failure inside
// an open stream as an event named error followed by its end marker
// ("event: error\n: <text>\n\ndata: [DONE]", fleetsim/frontend.go; the
// router relays a pinned stream's error event as it came and counts it as
// a decode failure). The load must count that request as failed, not as a
// success because [DONE] is there.
func TestLoadStreamErrorEventFails(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("event: error\n: Prefill worker ID required in Direct routing mode\n\ndata: [DONE]\n\n"))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := &load{router: srv.URL, model: model, maxTokens: 4, client: srv.Client()}
	if o := l.one(ctx, 1, true); !o.failed() {
		t.Fatalf("a stream that carried an error event counted as a success: %+v", o)
	}
}
