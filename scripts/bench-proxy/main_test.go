package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	line := "4242 (a) (b c) S 17 4242 4242 0 -1 4194560 1200 0 0 0 345 67 0 0 20 0 3 0 100 0 0\n"
	st, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 17 || st.utime != 345 || st.stime != 67 {
		t.Fatalf("parseStat = %+v, want ppid 17 utime 345 stime 67", st)
	}
	if _, err := parseStat("4242 (x) S 1 2"); err == nil {
		t.Fatal("a short line parsed")
	}
}

func TestStealOf(t *testing.T) {
	stat := "cpu  2557334 0 726977 2469983 9991 0 61661 9254 0 0\ncpu0 1261721 0 357003 1261587 2409 0 29384 4577 0 0\n"
	if got := stealOf(stat); got != 9254 {
		t.Fatalf("stealOf = %d, want 9254 (the eighth number of the first line)", got)
	}
	// A kernel that counts no steal (or a line cut short) gives 0.
	if got := stealOf("cpu  1 2 3 4\n"); got != 0 {
		t.Fatalf("stealOf of a short line = %d, want 0", got)
	}
}

// TestWriteStealNamesRounds: a round whose slices met the host's steal
// time is named with its p99, so a stall of the host is told from one of
// the proxy's.
func TestWriteStealNamesRounds(t *testing.T) {
	r := &report{Cells: []*cell{
		{Mode: modeBuffered, Rate: 2000, Path: pathContinuum, RoundP99: []float64{900, 55570.8, 1000}, RoundStealMS: []float64{0, 340, 10}},
		{Mode: modeBuffered, Rate: 2000, Path: pathNginx, RoundP99: []float64{800, 900, 1000}, RoundStealMS: []float64{0, 0, 0}},
	}}
	var b strings.Builder
	r.writeSteal(&b)
	want := "continuum buffered/2000 round 2: 340 ms (p99 55571 µs)"
	if !strings.Contains(b.String(), want) || strings.Contains(b.String(), "nginx") || strings.Contains(b.String(), "round 3") {
		t.Fatalf("writeSteal wrote %q, want only %q named", b.String(), want)
	}
	r.Cells[0].RoundStealMS = []float64{0, 0, 0}
	b.Reset()
	r.writeSteal(&b)
	if !strings.Contains(b.String(), "no path's slices met 20 ms") {
		t.Fatalf("writeSteal without steal wrote %q", b.String())
	}
}

func TestQuantilesNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1000; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Microsecond)
	}
	if q := quantilesOf(d); q != (quantiles{P50: 500, P99: 990, P999: 999}) {
		t.Fatalf("quantilesOf = %+v", q)
	}
	if q := quantilesOf(nil); q != (quantiles{}) {
		t.Fatalf("quantilesOf(nil) = %+v", q)
	}
}

// TestTimedTransport reads the backend's answers through the generator's
// transport, which notes the first byte and the body's size.
func TestTimedTransport(t *testing.T) {
	b := newBackend(4, 0)
	srv := httptest.NewServer(b)
	defer srv.Close()
	client := newClient()
	for _, tc := range []struct {
		mode string
		want int
	}{{modeBuffered, len(b.completion)}, {modeSSE, b.streamed()}} {
		t.Run(tc.mode, func(t *testing.T) {
			resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(requestBody(tc.mode)))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, %v", resp.StatusCode, err)
			}
			if got, _ := strconv.Atoi(resp.Header.Get(bytesHeader)); got != tc.want || len(body) != tc.want {
				t.Fatalf("%s says %d bytes, read %d, want %d", bytesHeader, got, len(body), tc.want)
			}
			if fb, _ := strconv.ParseInt(resp.Header.Get(firstByteHeader), 10, 64); fb <= 0 {
				t.Fatalf("%s = %q", firstByteHeader, resp.Header.Get(firstByteHeader))
			}
			if tc.mode == modeSSE && !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
				t.Fatalf("stream does not end with [DONE]: %q", body)
			}
		})
	}
}

// TestRoundMedian: the per-round figure pairs the two paths' values of the
// same round; one round's stall does not move the median.
func TestRoundMedian(t *testing.T) {
	cont := []float64{900, 1000, 250000, 1100, 950}
	ngx := []float64{1000, 1000, 1000, 1000, 1000}
	v, ok := roundMedian(cont, ngx, func(c, n float64) float64 { return c / n })
	if !ok || v != 1.0 {
		t.Fatalf("roundMedian = %v, %v, want 1.0", v, ok)
	}
	if _, ok := roundMedian(cont, ngx[:4], func(c, n float64) float64 { return c / n }); ok {
		t.Fatal("rounds of different counts paired")
	}
	if _, ok := roundMedian([]float64{0}, []float64{1}, func(c, n float64) float64 { return c / n }); ok {
		t.Fatal("a round without samples paired")
	}
}

// TestRunCellTakesTurns: the paths of a cell run in slices that take
// turns, and each path's slices add up to its whole cell.
func TestRunCellTakesTurns(t *testing.T) {
	b := newBackend(2, 0)
	var (
		mu    sync.Mutex
		order []string
	)
	var targets []*target
	for _, name := range []string{"a", "b"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			if len(order) == 0 || order[len(order)-1] != name {
				order = append(order, name)
			}
			mu.Unlock()
			b.ServeHTTP(w, r)
		}))
		defer srv.Close()
		targets = append(targets, &target{name: name, url: srv.URL + "/v1/chat/completions", client: newClient()})
	}
	o := options{rates: []int{50}, modes: []string{modeBuffered}, duration: 600 * time.Millisecond, slice: 200 * time.Millisecond, rounds: 1}
	rep := newReport(o, targets)
	self := &proc{name: "self", pids: []int{os.Getpid()}}
	m := &meter{watched: []*proc{self}, tick: float64(clockTicks())}
	results, err := runCell(context.Background(), o, rep, m, targets, modeBuffered, 50, len(b.completion))
	if err != nil {
		t.Fatal(err)
	}
	for k, res := range results {
		// 10 a slice, or fewer when the generator's pacer stalled near a
		// slice's end (vegeta stops a slice at its duration).
		if n := len(res.latency); n < 24 || n > 30 || res.errors != 0 {
			t.Errorf("%s: %d answers, %d errors; want 30 over its three slices", targets[k].name, n, res.errors)
		}
	}
	if want := []string{"a", "b", "a", "b", "a", "b"}; !slices.Equal(order, want) {
		t.Errorf("the paths ran in the order %v, want %v", order, want)
	}
}
