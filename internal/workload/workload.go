// Package workload replays request traces against a router and measures
// what clients see: throughput, time to first token, latency, and the
// prefix-cache hit rate the workers report.
//
// Prompts are real text: each block id of a trace stands for a fixed text
// of TraceBlockTokens printable ASCII bytes (as many tokens under the
// simulated fleet's byte-level tokenizer), so that requests sharing block
// ids share a prompt prefix that any tokenizer sees alike.
//
// Imports: no internal package.
package workload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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
	// Seq numbers the requests of a workload from 0 (a trace's line order):
	// it makes each prompt's suffix unique.
	Seq int `json:"-"`
}

// TraceBlockTokens is the size of a trace block: the Mooncake traces hash
// prompts in blocks of 512 tokens.
const TraceBlockTokens = 512

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
		r.Seq = len(out)
		out = append(out, r)
		if (limit > 0 && len(out) >= limit) || len(out) >= MaxTraceRequests {
			break
		}
	}
	return out, sc.Err()
}

// Synthetic builds a multi-tenant workload: tenants with long shared
// prefixes (a system prompt and documents of prefixBlocks blocks) and
// distinct queries of one block, taking turns, arriving every interval.
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
		out[i] = Request{Timestamp: int64(i) * interval.Milliseconds(), InputLength: (prefixBlocks + 1) * TraceBlockTokens, OutputLength: 32,
			HashIDs: ids, Seq: i}
	}
	return out
}

// TenantOptions shape a multi-tenant workload.
type TenantOptions struct {
	Tenants  int
	Requests int
	// PrefixBlocks is each tenant's shared prefix (a system prompt and its
	// documents), in blocks of TraceBlockTokens tokens.
	PrefixBlocks int
	// QueryTokens is the length of each request's own query.
	QueryTokens int
	// OutputTokens is each answer's length.
	OutputTokens int
	// Rate is the mean arrival rate (requests per second); arrivals are a
	// Poisson process.
	Rate float64
	// Seed makes the arrivals and the tenants' turns (each request's tenant
	// drawn uniformly) reproducible.
	Seed uint64
}

// Tenants builds a multi-tenant workload: each request is one tenant's
// shared prefix followed by a query of its own.
func Tenants(o TenantOptions) []Request {
	rng := rand.New(rand.NewPCG(o.Seed, 0x7e4a47))
	out := make([]Request, o.Requests)
	at := 0.0 // ms
	for i := range out {
		if i > 0 && o.Rate > 0 {
			at += rng.ExpFloat64() / o.Rate * 1000
		}
		tenant := uint64(rng.IntN(max(o.Tenants, 1)))
		ids := make([]uint64, 0, o.PrefixBlocks+1)
		for b := range o.PrefixBlocks {
			ids = append(ids, tenant<<20|uint64(b))
		}
		if o.QueryTokens > 0 {
			ids = append(ids, 1<<40|uint64(i)) // the query's own block
		}
		out[i] = Request{Timestamp: int64(at), InputLength: o.PrefixBlocks*TraceBlockTokens + o.QueryTokens, OutputLength: o.OutputTokens,
			HashIDs: ids, Seq: i}
	}
	return out
}

// blockAlphabet is what block texts are written with: letters, digits,
// spaces and a little punctuation, none of the characters that open a
// special token.
const blockAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789     .,;:-'"

// BlockText is the text a trace block id stands for: TraceBlockTokens
// printable ASCII bytes drawn from a generator seeded by the id, the same
// in every process.
func BlockText(id uint64) string {
	var b [TraceBlockTokens]byte
	x := id*0x9e3779b97f4a7c15 + 0x2545f4914f6cdd1d
	for i := range b {
		// splitmix64
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		b[i] = blockAlphabet[z%uint64(len(blockAlphabet))]
	}
	return string(b[:])
}

// Text is a request's prompt: the texts of its blocks in order, cut short
// to leave room for a suffix naming the request (which makes the prompt
// unique), InputLength bytes in all; when the blocks are too short, the
// suffix repeats up to that length.
func Text(r Request) string {
	suffix := fmt.Sprintf(" [request %d]", r.Seq)
	room := max(r.InputLength-len(suffix), 0)
	var b strings.Builder
	b.Grow(max(r.InputLength, len(suffix)))
	for _, id := range r.HashIDs {
		if b.Len() >= room {
			break
		}
		t := BlockText(id)
		b.WriteString(t[:min(len(t), room-b.Len())])
	}
	b.WriteString(suffix)
	for b.Len() < r.InputLength {
		b.WriteString(suffix[:min(len(suffix), r.InputLength-b.Len())])
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

// Result is one request's outcome. PromptTokens and Cached are what the
// worker that prefilled it reported: the usage's prompt_tokens and
// prompt_tokens_details.cached_tokens, else the x-sim-prompt-tokens and
// x-sim-cached-tokens headers. WorkerTTFT is the simulated fleet's own
// measure of the time to first token (x-sim-ttft-us), 0 without it.
type Result struct {
	TTFT, Latency        time.Duration
	WorkerTTFT           time.Duration
	PromptTokens, Cached int
	Err                  error
}

// Report summarises a replay. HitRate is the share of all prompt tokens
// the workers found cached; RequestHitRate is the mean of each request's
// share. TTFT and E2E are what the client measured; WorkerTTFT is the
// time to first token the simulated workers measured (from the frontend's
// receipt of the request to the end of its prefill), which the host's
// scheduling delays do not add to.
type Report struct {
	Mode           string  `json:"mode"`
	Requests       int     `json:"requests"`
	Errors         int     `json:"errors"`
	Duration       float64 `json:"duration_s"`
	Throughput     float64 `json:"throughput_rps"`
	TTFTp50        float64 `json:"ttft_p50_ms"`
	TTFTp90        float64 `json:"ttft_p90_ms"`
	TTFTp99        float64 `json:"ttft_p99_ms"`
	WorkerTTFTp50  float64 `json:"worker_ttft_p50_ms,omitempty"`
	WorkerTTFTp90  float64 `json:"worker_ttft_p90_ms,omitempty"`
	WorkerTTFTp99  float64 `json:"worker_ttft_p99_ms,omitempty"`
	E2Ep50         float64 `json:"e2e_p50_ms"`
	E2Ep90         float64 `json:"e2e_p90_ms"`
	E2Ep99         float64 `json:"e2e_p99_ms"`
	HitRate        float64 `json:"prefix_hit_rate"`
	RequestHitRate float64 `json:"request_hit_rate"`
	PromptTokens   int64   `json:"prompt_tokens"`
	CachedTokens   int64   `json:"cached_tokens"`
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

// usageChunk is the part of a stream's usage chunk a replay reads.
type usageChunk struct {
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func one(ctx context.Context, r Request, o Options) Result {
	out := r.OutputLength
	if o.MaxOutput > 0 {
		out = min(out, o.MaxOutput)
	}
	body, _ := json.Marshal(map[string]any{"model": o.Model, "stream": true, "max_tokens": max(out, 1),
		"stream_options": map[string]bool{"include_usage": true},
		"messages":       []any{map[string]string{"role": "user", "content": Text(r)}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.Router+"/v1/chat/completions", bytes.NewReader(body))
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
	if us, err := strconv.ParseInt(resp.Header.Get("x-sim-ttft-us"), 10, 64); err == nil && us > 0 {
		res.WorkerTTFT = time.Duration(us) * time.Microsecond
	}
	br := bufio.NewReader(resp.Body)
	var done, errored bool
	for {
		line, err := br.ReadString('\n')
		errored = errored || StreamErrorLine(line)
		done = done || strings.TrimRight(line, "\r\n") == "data: [DONE]"
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			if res.TTFT == 0 {
				res.TTFT = time.Since(start)
			}
			if strings.Contains(data, `"prompt_tokens_details"`) {
				var u usageChunk
				if json.Unmarshal([]byte(data), &u) == nil && u.Usage != nil && u.Usage.PromptTokensDetails != nil {
					res.PromptTokens, res.Cached = u.Usage.PromptTokens, u.Usage.PromptTokensDetails.CachedTokens
				}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			res.Err = err
			return res
		}
	}
	switch {
	case errored:
		res.Err = errors.New("the stream carried an error event")
	case !done:
		res.Err = errors.New("the stream ended before its [DONE]")
	default:
		res.Latency = time.Since(start)
	}
	return res
}

// StreamErrorLine reports whether a line of an OpenAI-style event stream
// opens an error event: "event: error" (Dynamo's frontend reports a
// failure inside an open stream so, before its [DONE]), or data holding an
// object whose first member is "error" (OpenAI's and vLLM's in-stream
// errors).
func StreamErrorLine(line string) bool {
	line = strings.TrimRight(line, "\r\n")
	if v, ok := strings.CutPrefix(line, "event:"); ok {
		return strings.TrimPrefix(v, " ") == "error"
	}
	v, ok := strings.CutPrefix(line, "data:")
	if !ok {
		return false
	}
	v, ok = strings.CutPrefix(strings.TrimLeft(v, " "), "{")
	return ok && strings.HasPrefix(strings.TrimLeft(v, " "), `"error"`)
}

func percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	i := min(int(float64(len(ds))*p), len(ds)-1)
	return float64(ds[i]) / float64(time.Millisecond)
}

func summarise(results []Result, elapsed time.Duration) Report {
	var ttft, e2e, worker []time.Duration
	rep := Report{Requests: len(results), Duration: elapsed.Seconds()}
	shares, measured := 0.0, 0
	for _, r := range results {
		if r.Err != nil {
			rep.Errors++
			continue
		}
		ttft = append(ttft, r.TTFT)
		e2e = append(e2e, r.Latency)
		if r.WorkerTTFT > 0 {
			worker = append(worker, r.WorkerTTFT)
		}
		rep.PromptTokens += int64(r.PromptTokens)
		rep.CachedTokens += int64(r.Cached)
		if r.PromptTokens > 0 {
			shares += float64(r.Cached) / float64(r.PromptTokens)
			measured++
		}
	}
	slices.Sort(ttft)
	slices.Sort(e2e)
	slices.Sort(worker)
	rep.WorkerTTFTp50, rep.WorkerTTFTp90, rep.WorkerTTFTp99 = percentile(worker, 0.5), percentile(worker, 0.9), percentile(worker, 0.99)
	rep.TTFTp50, rep.TTFTp90, rep.TTFTp99 = percentile(ttft, 0.5), percentile(ttft, 0.9), percentile(ttft, 0.99)
	rep.E2Ep50, rep.E2Ep90, rep.E2Ep99 = percentile(e2e, 0.5), percentile(e2e, 0.9), percentile(e2e, 0.99)
	if elapsed > 0 {
		rep.Throughput = float64(len(results)-rep.Errors) / elapsed.Seconds()
	}
	if rep.PromptTokens > 0 {
		rep.HitRate = float64(rep.CachedTokens) / float64(rep.PromptTokens)
	}
	if measured > 0 {
		rep.RequestHitRate = shares / float64(measured)
	}
	return rep
}
