package router_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/router"
)

// fastBackend answers at once: a buffered completion, or a short SSE stream.
func fastBackend() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 8 {
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
				w.(http.Flusher).Flush()
			}
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`)
	}))
}

// BenchmarkOverhead sends requests at a fixed arrival rate of 2,000 req/s
// for 2 s straight to a fast local backend, then the same through the
// router, for buffered and SSE responses, and reports the p50 and p99
// latency of each and the latency the router adds. (Client, router and
// backend share this machine's cores.)
func BenchmarkOverhead(b *testing.B) {
	be := fastBackend()
	defer be.Close()
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "fast", Type: "openai", URL: be.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)}}
	srv := router.New(router.Options{Config: cfg})
	srv.SetReady(true)
	rt := httptest.NewServer(srv.Handler())
	defer rt.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}}
	const rate, duration = 2000, 2 * time.Second
	measure := func(b *testing.B, target, body string) (p50, p99 time.Duration, errs int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var lat []time.Duration
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		deadline := time.Now().Add(duration)
		for now := range tick.C {
			if now.After(deadline) {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				resp, err := client.Post(target+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil || resp.StatusCode != 200 {
					errs++
					return
				}
				lat = append(lat, time.Since(start))
			}()
		}
		wg.Wait()
		slices.Sort(lat)
		if len(lat) == 0 {
			b.Fatal("no request succeeded")
		}
		return lat[len(lat)/2], lat[len(lat)*99/100], errs
	}
	for _, stream := range []bool{false, true} {
		mode := "buffered"
		if stream {
			mode = "sse"
		}
		body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hello"}]}`, stream)
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				d50, d99, derr := measure(b, be.URL, body)
				r50, r99, rerr := measure(b, rt.URL, body)
				if derr+rerr > 0 {
					b.Errorf("%d direct and %d routed requests failed", derr, rerr)
				}
				b.ReportMetric(float64(d50.Microseconds()), "direct-p50-µs")
				b.ReportMetric(float64(d99.Microseconds()), "direct-p99-µs")
				b.ReportMetric(float64(r50.Microseconds()), "router-p50-µs")
				b.ReportMetric(float64(r99.Microseconds()), "router-p99-µs")
				b.ReportMetric(float64((r50 - d50).Microseconds()), "added-p50-µs")
				b.ReportMetric(float64((r99 - d99).Microseconds()), "added-p99-µs")
			}
		})
	}
}
