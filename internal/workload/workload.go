// Package workload replays request traces against a router and measures
// what clients see: throughput, time to first token, latency, and the
// prefix-cache hit rate the simulated fleet reports.
//
// Imports: no internal package.
package workload

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Request is one trace line (Mooncake format): arrival in ms, token counts,
// and the ids of its prompt's 512-token prefix blocks.
type Request struct {
	Timestamp    int64    `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// MaxTraceRequests bounds the requests read from one trace.
const MaxTraceRequests = 1 << 20

// Load reads a JSON-lines trace, at most limit requests (0: all).
func Load(path string, limit int) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []Request
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var r Request
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, r)
		if (limit > 0 && len(out) >= limit) || len(out) >= MaxTraceRequests {
			break
		}
	}
	return out, sc.Err()
}

// Synthetic builds a multi-tenant workload: tenants with long shared
// prefixes (a system prompt and documents of prefixBlocks blocks) and short
// distinct queries, arriving every interval.
func Synthetic(tenants, requests, prefixBlocks int, interval time.Duration) []Request {
	out := make([]Request, requests)
	next := uint64(1 << 32) // ids of the queries' own blocks
	for i := range out {
		tenant := uint64(i % tenants)
		ids := make([]uint64, 0, prefixBlocks+1)
		for b := range prefixBlocks {
			ids = append(ids, tenant<<16|uint64(b))
		}
		ids = append(ids, next)
		next++
		out[i] = Request{Timestamp: int64(i) * interval.Milliseconds(), InputLength: (prefixBlocks + 1) * 512, OutputLength: 32, HashIDs: ids}
	}
	return out
}

// Prompt renders a request as a prompt the simulated fleet understands.
func Prompt(r Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<len:%d>", r.InputLength)
	for _, id := range r.HashIDs {
		fmt.Fprintf(&b, " <b:%d>", id)
	}
	return b.String()
}

// Options shape a replay.
type Options struct {
	Router string
	Model  string
	// TimeScale divides the trace's inter-arrival times (10: ten times
	// denser than recorded).
	TimeScale float64
	// MaxOutput caps each request's output tokens.
	MaxOutput int
	// Concurrency bounds requests in flight (0: unbounded).
	Concurrency int
	Client      *http.Client
}

// Result is one request's outcome.
type Result struct {
	TTFT, Latency        time.Duration
	PromptTokens, Cached int
	Err                  error
}

// Report summarises a replay.
type Report struct {
	Mode       string  `json:"mode"`
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	Duration   float64 `json:"duration_s"`
	Throughput float64 `json:"throughput_rps"`
	TTFTp50    float64 `json:"ttft_p50_ms"`
	TTFTp90    float64 `json:"ttft_p90_ms"`
	TTFTp99    float64 `json:"ttft_p99_ms"`
	E2Ep50     float64 `json:"e2e_p50_ms"`
	E2Ep99     float64 `json:"e2e_p99_ms"`
	HitRate    float64 `json:"prefix_hit_rate"`
}

// Replay sends the requests at their (scaled) arrival times as streaming
// chat completions and reports what clients saw.
func Replay(ctx context.Context, reqs []Request, o Options) Report {
	if o.TimeScale <= 0 {
		o.TimeScale = 1
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
	}
	results := make([]Result, len(reqs))
	var wg sync.WaitGroup
	var sem chan struct{}
	if o.Concurrency > 0 {
		sem = make(chan struct{}, o.Concurrency)
	}
	start := time.Now()
	t0 := int64(0)
	if len(reqs) > 0 {
		t0 = reqs[0].Timestamp
	}
	sent := len(reqs)
	for i, r := range reqs {
		at := start.Add(time.Duration(float64(r.Timestamp-t0) / o.TimeScale * float64(time.Millisecond)))
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			sent = i
			break
		}
		if sem != nil {
			sem <- struct{}{}
		}
		wg.Add(1)
		go func(i int, r Request) {
			defer wg.Done()
			if sem != nil {
				defer func() { <-sem }()
			}
			results[i] = one(ctx, r, o)
		}(i, r)
	}
	wg.Wait()
	return summarise(results[:sent], time.Since(start))
}

func one(ctx context.Context, r Request, o Options) Result {
	out := r.OutputLength
	if o.MaxOutput > 0 {
		out = min(out, o.MaxOutput)
	}
	body, _ := json.Marshal(map[string]any{"model": o.Model, "stream": true, "max_tokens": max(out, 1),
		"messages": []any{map[string]string{"role": "user", "content": Prompt(r)}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.Router+"/v1/chat/completions", strings.NewReader(string(body)))
	if err != nil {
		return Result{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := o.Client.Do(req)
	if err != nil {
		return Result{Err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return Result{Err: fmt.Errorf("status %d", resp.StatusCode)}
	}
	res := Result{}
	res.PromptTokens, _ = strconv.Atoi(resp.Header.Get("x-sim-prompt-tokens"))
	res.Cached, _ = strconv.Atoi(resp.Header.Get("x-sim-cached-tokens"))
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "data: ") && res.TTFT == 0 {
			res.TTFT = time.Since(start)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			res.Err = err
			return res
		}
	}
	res.Latency = time.Since(start)
	return res
}

func percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	i := min(int(float64(len(ds))*p), len(ds)-1)
	return float64(ds[i]) / float64(time.Millisecond)
}

func summarise(results []Result, elapsed time.Duration) Report {
	var ttft, e2e []time.Duration
	rep := Report{Requests: len(results), Duration: elapsed.Seconds()}
	prompt, cached := 0, 0
	for _, r := range results {
		if r.Err != nil {
			rep.Errors++
			continue
		}
		ttft = append(ttft, r.TTFT)
		e2e = append(e2e, r.Latency)
		prompt += r.PromptTokens
		cached += r.Cached
	}
	slices.Sort(ttft)
	slices.Sort(e2e)
	rep.TTFTp50, rep.TTFTp90, rep.TTFTp99 = percentile(ttft, 0.5), percentile(ttft, 0.9), percentile(ttft, 0.99)
	rep.E2Ep50, rep.E2Ep99 = percentile(e2e, 0.5), percentile(e2e, 0.99)
	if elapsed > 0 {
		rep.Throughput = float64(len(results)-rep.Errors) / elapsed.Seconds()
	}
	if prompt > 0 {
		rep.HitRate = float64(cached) / float64(prompt)
	}
	return rep
}
