package router_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/dynamo/shim"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/testutil"
)

// repinWorker writes a worker of model whose card declares migration_limit.
func repinWorker(r *fleet.Reducer, component, workerType string, id uint64, limit int) {
	r.Put(fmt.Sprintf("v1/instances/dynamo/%s/generate/%x", component, id), fmt.Appendf(nil,
		`{"component":%q,"endpoint":"generate","instance_id":%d,"transport":{"tcp":"10.0.0.4:31000"}}`, component, id), t0)
	r.Put(fmt.Sprintf("v1/mdc/dynamo/%s/generate/%x", component, id), fmt.Appendf(nil,
		`{"component":%q,"endpoint":"generate","instance_id":%d,"card_json":{"display_name":%q,"worker_type":%q,"kv_cache_block_size":16,"migration_limit":%d,"runtime_config":{"total_kv_blocks":1000,"max_num_batched_tokens":8192}}}`,
		component, id, model, workerType, limit), t0)
}

// repinHarness: prefill workers 10 and 11, decode workers 20 and 21, each
// card with migration_limit; the frontend knows them all until a test says
// otherwise. No load is published, so pins rotate.
func repinHarness(t *testing.T, limit int) *harness {
	h := newHarness(t, nil)
	h.reducer = fleet.NewReducer()
	for _, w := range []struct {
		component, kind string
		id              uint64
	}{{"prefill", "Prefill", 10}, {"prefill", "Prefill", 11}, {"decode", "Decode", 20}, {"decode", "Decode", 21}} {
		repinWorker(h.reducer, w.component, w.kind, w.id, limit)
	}
	h.reg.Publish(h.reducer.Build(t0))
	h.fe.SetWorkers(model, []uint64{10, 11}, []uint64{20, 21})
	return h
}

func (h *harness) repins(reason string) float64 {
	return promtest.ToFloat64(h.metrics.Repins.WithLabelValues(reason))
}

// allRepins counts the re-pins of every reason.
func (h *harness) allRepins() float64 {
	n := 0.0
	for _, r := range shim.RepinReasons {
		n += h.repins(r)
	}
	return n
}

// TestRepinBeforeFirstByte: a pinned request that the frontend answers
// with a 5xx before any response (the pinned worker is gone) is pinned
// again without the workers it failed on, up to the card's
// migration_limit, buffered or streamed; the client sees one success.
// Without a migration_limit the failure stands, as before.
func TestRepinBeforeFirstByte(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			h := repinHarness(t, 2)
			h.fe.SetWorkers(model, []uint64{10, 11}, []uint64{21}) // 20 is gone; the router does not know yet
			for i := range 4 {
				resp := h.post(t, chat(stream), map[string]string{"x-backend": ""})
				body := readAll(t, resp)
				if resp.StatusCode != 200 || resp.Header.Get("x-continuum-worker") != "21" {
					t.Fatalf("request %d: %d (worker %s): %s", i, resp.StatusCode, resp.Header.Get("x-continuum-worker"), body)
				}
			}
			failed := 0
			for _, r := range h.fe.Requests() {
				if *r.Worker == 20 {
					failed++
					if r.RespondedStatus != 500 {
						t.Errorf("the frontend answered %d to worker 20", r.RespondedStatus)
					}
				}
			}
			// The frontend names the instance it does not know.
			if failed == 0 || h.repins(shim.RepinInstanceNotFound) != float64(failed) || h.allRepins() != float64(failed) {
				t.Fatalf("%d requests pinned to the departed worker, %v re-pins (%v for instance_not_found)", failed, h.allRepins(), h.repins(shim.RepinInstanceNotFound))
			}
		})
	}
	t.Run("no migration_limit", func(t *testing.T) {
		t.Parallel()
		h := repinHarness(t, 0)
		h.fe.SetWorkers(model, []uint64{10, 11}, []uint64{21})
		got := map[int]int{}
		for range 4 {
			resp := h.post(t, chat(false), nil)
			readAll(t, resp)
			got[resp.StatusCode]++
		}
		if got[http.StatusBadGateway] == 0 || h.allRepins() != 0 {
			t.Fatalf("statuses %v, %v re-pins: a card without migration_limit allows none", got, h.allRepins())
		}
	})
}

// TestRepinLimitAndSinglePrefill: re-pins stop at migration_limit; with a
// single prefill worker, an answer that does not say which worker failed
// keeps the prefill worker and changes the decode one.
func TestRepinLimitAndSinglePrefill(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.reducer = fleet.NewReducer()
	repinWorker(h.reducer, "prefill", "Prefill", 10, 1)
	for _, id := range []uint64{20, 21, 22} {
		repinWorker(h.reducer, "decode", "Decode", id, 1)
	}
	h.reg.Publish(h.reducer.Build(t0))
	h.fe.TerseErrors = true                            // the answers do not say which worker failed
	h.fe.SetWorkers(model, []uint64{10}, []uint64{22}) // 20 and 21 are gone
	got := map[int]int{}
	for range 6 {
		resp := h.post(t, chat(false), nil)
		readAll(t, resp)
		got[resp.StatusCode]++
	}
	// Rotating over 20, 21, 22: a request that meets both departed workers
	// runs out of its one re-pin.
	if got[200] == 0 || got[http.StatusBadGateway] == 0 {
		t.Fatalf("statuses %v", got)
	}
	reqs := h.fe.Requests()
	for _, r := range reqs {
		if *r.Prefill != 10 {
			t.Fatalf("prefill %d", *r.Prefill)
		}
	}
	if len(reqs) > 12 {
		t.Fatalf("%d dispatches for 6 requests with a limit of one re-pin each", len(reqs))
	}
	if n := h.allRepins(); n == 0 || n > 6 {
		t.Fatalf("%v re-pins", n)
	}
}

// TestNoRepinAfterFirstByte: a stream that breaks after its first bytes
// reached the client is not sent again: the client gets the broken stream.
func TestNoRepinAfterFirstByte(t *testing.T) {
	t.Parallel()
	h := repinHarness(t, 3)
	h.fe.Execute = func(w http.ResponseWriter, _ *http.Request, _ fleetsim.Recorded) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"half\"}}]}\n\n")
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // the engine dies mid-stream
	}
	resp := h.post(t, chat(true), nil)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "half") {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if n := len(h.fe.Requests()); n != 1 {
		t.Fatalf("the broken stream was sent %d times", n)
	}
	for _, r := range shim.RepinReasons {
		if h.repins(r) != 0 {
			t.Fatalf("re-pinned after the first byte (%s)", r)
		}
	}
}

// TestNoRepinWhenClientLeaves: a client that goes away while its pinned
// request is upstream ends it; the request is not pinned again.
func TestNoRepinWhenClientLeaves(t *testing.T) {
	t.Parallel()
	h := repinHarness(t, 3)
	arrived := make(chan struct{}, 1)
	h.fe.Execute = func(w http.ResponseWriter, r *http.Request, _ fleetsim.Recorded) {
		arrived <- struct{}{}
		<-r.Context().Done() // the router cancels upstream when its client leaves
		w.WriteHeader(http.StatusInternalServerError)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.router.URL+"/v1/chat/completions", strings.NewReader(chat(false)))
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the frontend")
	}
	cancel()
	<-errc
	// Once the handler has returned (and counted the 499) nothing more is
	// sent for this request.
	testutil.Eventually(t, 10*time.Second, "the request ended", func() bool {
		return promtest.ToFloat64(h.metrics.Requests.WithLabelValues("/v1/chat/completions", "4xx")) == 1
	})
	if n := len(h.fe.Requests()); n != 1 {
		t.Fatalf("%d dispatches after the client left", n)
	}
	for _, r := range shim.RepinReasons {
		if h.repins(r) != 0 {
			t.Fatalf("re-pinned for a client that left (%s)", r)
		}
	}
}

// TestRepinDeadDecodeAndPrefill: a decode and a prefill worker that were
// serving are gone, and the frontend's answer does not say which of a pair
// failed: the re-pin blames the one that served less recently, so every
// request finds a live pair within its migration_limit of 3.
func TestRepinDeadDecodeAndPrefill(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.reducer = fleet.NewReducer()
	for _, id := range []uint64{10, 11} {
		repinWorker(h.reducer, "prefill", "Prefill", id, 3)
	}
	for _, id := range []uint64{20, 21, 22} {
		repinWorker(h.reducer, "decode", "Decode", id, 3)
	}
	h.reg.Publish(h.reducer.Build(t0))
	h.fe.SetWorkers(model, []uint64{10, 11}, []uint64{20, 21, 22})
	for i := range 6 { // each serves (pins rotate: no load is published)
		if resp := h.post(t, chat(false), nil); resp.StatusCode != 200 {
			t.Fatalf("warming %d: %d %s", i, resp.StatusCode, readAll(t, resp))
		}
	}
	h.fe.TerseErrors = true                                // the answers do not say which worker failed
	h.fe.SetWorkers(model, []uint64{10}, []uint64{21, 22}) // 11 and 20 are gone
	for i := range 12 {
		resp := h.post(t, chat(i%2 == 1), map[string]string{"x-backend": ""})
		if body := readAll(t, resp); resp.StatusCode != 200 || resp.Header.Get("x-continuum-prefill-worker") != "10" || resp.Header.Get("x-continuum-worker") == "20" {
			t.Fatalf("request %d: %d %v %s", i, resp.StatusCode, resp.Header, body)
		}
	}
	if h.allRepins() == 0 {
		t.Fatal("no re-pin: the departed workers were never pinned")
	}
}

// TestWorkerFaultsKeepTheReplica: a frontend answering that a pinned
// worker is gone is up, so those answers do not open its breaker; other
// 5xx answers still do, and with the breaker open the request is a shim
// failure still (502 disaggregated_decode_failed without fallback_to_unified),
// never sent the plain way.
func TestWorkerFaultsKeepTheReplica(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		fault    func(h *harness)
		wantOpen bool
	}{
		{"instance not found", func(h *harness) { h.fe.SetWorkers(model, []uint64{10, 11}, nil) }, false},
		{"any other 5xx", func(h *harness) { h.fe.Status = http.StatusInternalServerError }, true},
		// A newer frontend's generic answers, in place of the failure's
		// words: the frontend that words them is up.
		{"generic failure", func(h *harness) {
			h.fe.Status, h.fe.StatusMessage = http.StatusInternalServerError, "Failed to generate completions"
		}, false},
		{"generic unavailable", func(h *harness) {
			h.fe.Status, h.fe.StatusMessage = http.StatusServiceUnavailable, "Service temporarily unavailable"
		}, false},
		// A frontend shedding load, or whose view lacks a role of the
		// model's workers, is up too.
		{"overloaded", func(h *harness) { h.fe.Status, h.fe.StatusMessage = 529, "Service temporarily overloaded" }, false},
		{"model not ready", func(h *harness) {
			h.fe.Status, h.fe.StatusMessage = http.StatusServiceUnavailable,
				"Model `"+model+"` is not ready to serve requests yet. The deployment may still be starting up or is not fully provisioned. Please retry shortly."
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := repinHarness(t, 0) // no re-pin: every failure reaches the breaker
			tt.fault(h)
			for i := range 8 {
				resp := h.post(t, chat(false), nil)
				body := readAll(t, resp)
				open := strings.Contains(body, "no Dynamo frontend replica")
				switch {
				case resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "disaggregated_decode_failed"):
					t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
				case open != (i >= 5 && tt.wantOpen):
					t.Fatalf("request %d: %s (breaker open: want %v)", i, body, i >= 5 && tt.wantOpen)
				}
			}
		})
	}
}

// TestReplicaDroppingTheConnectionRetried: with cards declaring
// migration_limit, a frontend replica that reads a request and closes the
// connection without answering (it died, or closed a kept-alive
// connection as the request went out) costs the client nothing: the
// request goes to the other replica of the pool, buffered or streamed.
// (Without a migration_limit it is not sent again:
// TestNoRetryAfterTheRequestWasSent.)
func TestReplicaDroppingTheConnectionRetried(t *testing.T) {
	t.Parallel()
	var dropped atomic.Int32
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		dropped.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_ = conn.Close()
	}))
	t.Cleanup(dead.Close)
	h := newHarness(t, func(c *config.Config) {
		c.Backends = append(c.Backends, config.Backend{Name: "dead", Type: "openai", URL: dead.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)})
		c.Dynamo.Shim.Backends = []string{"dead", "fe"}
	})
	h.reducer = fleet.NewReducer()
	repinWorker(h.reducer, "prefill", "Prefill", 10, 2)
	repinWorker(h.reducer, "decode", "Decode", 20, 2)
	h.reg.Publish(h.reducer.Build(t0))
	for i := range 6 {
		stream := i%2 == 1
		resp := h.post(t, chat(stream), map[string]string{"x-backend": ""})
		body := readAll(t, resp)
		if resp.StatusCode != 200 || resp.Header.Get("x-continuum-backend") != "fe" || (stream && !strings.Contains(body, "[DONE]")) {
			t.Fatalf("request %d: %d via %q: %s", i, resp.StatusCode, resp.Header.Get("x-continuum-backend"), body)
		}
	}
	if dropped.Load() == 0 {
		t.Fatal("no request went to the replica that drops connections: the test proves nothing")
	}
}

// TestDroppedConnectionRetriesWithinMigrationLimit: a pinned request sent
// again to another replica after a connection broke once it was out may
// have run: those sends count against the card's migration_limit with the
// re-pins. With a limit of 1 and three replicas that each read the request
// and drop the connection, it reaches two of them, then the failure stands.
func TestDroppedConnectionRetriesWithinMigrationLimit(t *testing.T) {
	t.Parallel()
	var dropped atomic.Int32
	dead := func() string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			dropped.Add(1)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	h := newHarness(t, func(c *config.Config) {
		for _, n := range []string{"d1", "d2", "d3"} {
			c.Backends = append(c.Backends, config.Backend{Name: n, Type: "openai", URL: dead(), Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)})
		}
		c.Dynamo.Shim.Backends = []string{"d1", "d2", "d3"}
	})
	h.reducer = fleet.NewReducer()
	repinWorker(h.reducer, "prefill", "Prefill", 10, 1)
	repinWorker(h.reducer, "decode", "Decode", 20, 1)
	h.reg.Publish(h.reducer.Build(t0))
	resp := h.post(t, chat(false), nil)
	if body := readAll(t, resp); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("%d %s, want the dispatch's failure", resp.StatusCode, body)
	}
	if n := dropped.Load(); n != 2 {
		t.Fatalf("the pinned request was read by %d frontends; migration_limit 1 allows 2", n)
	}
}

// TestPinnedNotResentByTheTransport: a pinned dispatch that went out on a
// kept-alive connection is not sent to its frontend again by the router's
// HTTP client, whatever the client's Idempotency-Key says (the frontend
// applies none) or a 408 closing the connection (a mesh's stream timeout
// after the frontend ran it): a card without migration_limit does not
// consent to a request running twice. The same with a prompt too large
// for the router's own client, which net/http's transport sends: it would
// send a POST again on its own when the request names an idempotency key.
func TestPinnedNotResentByTheTransport(t *testing.T) {
	t.Parallel()
	const completion = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`
	big := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, strings.Repeat("word ", 20000))
	for _, tc := range []struct {
		name   string
		header map[string]string
		fail   func(c net.Conn)
		body   string
	}{
		{"idempotency-key dropped", map[string]string{"Idempotency-Key": "k-1"}, func(net.Conn) {}, chat(false)},
		{"408 closing", nil, func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 15\r\n\r\nstream timeout\n")
		}, chat(false)},
		{"large body, idempotency-key dropped", map[string]string{"Idempotency-Key": "k-1"}, func(net.Conn) {}, big},
		{"large body, x-idempotency-key dropped", map[string]string{"X-Idempotency-Key": "k-1"}, func(net.Conn) {}, big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fe := newScriptBackend(t, func(c net.Conn, conn, req int) bool {
				if conn == 1 && req == 1 {
					tc.fail(c)
					return false
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(completion), completion)
				return true
			})
			h := newHarness(t, func(c *config.Config) { c.Backends[0].URL = fe.url })
			for range 2 {
				resp := h.post(t, tc.body, tc.header)
				_ = readAll(t, resp)
			}
			if n := fe.requests.Load(); n != 2 {
				t.Errorf("the frontend got %d requests for 2 pinned dispatches", n)
			}
		})
	}
}

// TestOpenBreakerIsAShimFailure: once the shim's only replica has its
// breaker open, a request for a model its workers serve is a shim failure
// like a failed dispatch: counted in phase decode, then sent the plain way
// as a fallback (counted as one) when fallback_to_unified is on, else
// answered 502 disaggregated_decode_failed; it never goes unpinned to a
// unified backend as if Dynamo did not serve the model.
func TestOpenBreakerIsAShimFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ fallback, second bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		fallback := tc.fallback
		// second: another namespace with a healthy replica and no worker
		// of the model is watched too; the answer is the same.
		t.Run(fmt.Sprintf("fallback=%v/second_namespace=%v", fallback, tc.second), func(t *testing.T) {
			t.Parallel()
			var hits, hits2 atomic.Int32
			fe := failingFrontend(t, http.StatusBadGateway, `{"error":{"message":"upstream connect error or disconnect/reset before headers"}}`, &hits)
			fe2 := failingFrontend(t, http.StatusInternalServerError, `{"error":{"message":"another namespace's frontend"}}`, &hits2)
			h := newHarness(t, func(c *config.Config) {
				c.Backends[0].URL = fe.URL
				c.DisaggregatedServing.FallbackToUnified = fallback
				if tc.second {
					c.Backends = append(c.Backends, config.Backend{Name: "fe2", Type: "openai", URL: fe2.URL, Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(10 * time.Second)})
					c.Dynamo.Discovery.Etcd.Namespaces = []string{"dynamo", "other"}
					c.Dynamo.Shim.Pools = []config.ShimPool{{Namespace: "dynamo", Backends: []string{"fe"}}, {Namespace: "other", Backends: []string{"fe2"}}}
				}
			})
			const n = 8
			for i := range n {
				resp := h.post(t, chat(false), nil)
				body := readAll(t, resp)
				if want := map[bool]int{false: http.StatusBadGateway, true: http.StatusOK}[fallback]; resp.StatusCode != want {
					t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
				}
			}
			if hits.Load() != 5 {
				t.Errorf("the frontend got %d requests, want 5 (then its breaker opened)", hits.Load())
			}
			path := func(p string) float64 { return promtest.ToFloat64(h.metrics.DisaggRequests.WithLabelValues(p)) }
			if got := promtest.ToFloat64(h.metrics.DisaggErrors.WithLabelValues(shim.PhaseDecode)); got != n {
				t.Errorf("decode errors %v, want %d", got, n)
			}
			if path(shim.PathUnified) != 0 {
				t.Errorf("%v requests counted as routed unified", path(shim.PathUnified))
			}
			if fallback {
				if path(shim.PathFallback) != n || len(*h.plain) != n {
					t.Errorf("fallbacks: %v counted, %d at the plain backend; want %d", path(shim.PathFallback), len(*h.plain), n)
				}
			} else if len(*h.plain) != 0 {
				t.Errorf("fallback_to_unified is off, yet %d requests went to the plain backend", len(*h.plain))
			}
		})
	}
}

// TestDisabledReplicasGoPlain: a namespace whose shim replicas are all
// disabled in the configuration has none: its model's requests go the
// plain way, not a shim failure (as an open breaker is).
func TestDisabledReplicasGoPlain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) { c.Backends[0].Enabled = false })
	resp := h.post(t, chat(false), nil)
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK || len(*h.plain) != 1 {
		t.Errorf("%d %s; %d at the plain backend", resp.StatusCode, body, len(*h.plain))
	}
}

// TestPinnedIdempotencyKeyStillSent: the idempotency key of a pinned
// dispatch that net/http's transport sends (a prompt too large for the
// router's own client) still reaches the frontend, where only the
// transport's own resending is kept from reading it.
func TestPinnedIdempotencyKeyStillSent(t *testing.T) {
	t.Parallel()
	const completion = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`
	got := make(chan [2]string, 1)
	fe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case got <- [2]string{r.Header.Get("Idempotency-Key"), r.Header.Get("X-Idempotency-Key")}:
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, completion)
	}))
	t.Cleanup(fe.Close)
	h := newHarness(t, func(c *config.Config) { c.Backends[0].URL = fe.URL })
	big := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, strings.Repeat("word ", 20000))
	resp := h.post(t, big, map[string]string{"Idempotency-Key": "k-1", "X-Idempotency-Key": "k-2"})
	if body := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if keys := <-got; keys != [2]string{"k-1", "k-2"} {
		t.Fatalf("the frontend got idempotency keys %q, want k-1 and k-2", keys)
	}
}

// TestRepinPastBusyPrefill: a pinned pair fails with an answer that does
// not say which of the two is gone, and neither has served yet, so the
// re-pin first leaves both out; when the only other prefill worker is
// busy, that leaves no pair, and the re-pin tries again without the
// decode worker alone, keeping the first prefill worker: the client is
// served by the free pair rather than failed.
func TestRepinPastBusyPrefill(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) {
		kv := 0.9
		c.Dynamo.Load.BusyThreshold = &config.BusyThreshold{KVBlocks: &kv, Hysteresis: 0.05}
	})
	h.reducer = fleet.NewReducer()
	live := map[fleet.WorkerID]load.LiveWorker{}
	for _, w := range []struct {
		component, kind string
		id              uint64
	}{{"prefill", "Prefill", 10}, {"prefill", "Prefill", 11}, {"decode", "Decode", 20}, {"decode", "Decode", 21}} {
		repinWorker(h.reducer, w.component, w.kind, w.id, 1)
		live[fleet.WorkerID{Namespace: "dynamo", InstanceID: w.id}] = load.LiveWorker{DPSize: 1}
	}
	h.reg.Publish(h.reducer.Build(t0))
	h.store.SetLiveAndRetain(live)
	for i, s := range []struct{ id, decode, used uint64 }{{20, 10, 10}, {21, 100, 100}, {10, 0, 10}, {11, 0, 950}} {
		zero, decode, used := uint64(0), s.decode, s.used
		if r := h.store.Apply(load.Sample{Load: wire.ActiveLoad{WorkerID: s.id, ActiveDecodeBlocks: &decode, ActivePrefillTokens: &zero, KVUsedBlocks: &used},
			Namespace: load.NS("dynamo"), PublisherID: s.id, Sequence: uint64(i + 1), ReceivedAt: time.Now()}); r != "" {
			t.Fatal(r)
		}
	}
	h.fe.TerseErrors = true                                // the answer does not say which worker failed
	h.fe.SetWorkers(model, []uint64{10, 11}, []uint64{21}) // 20 is gone; the router does not know yet
	resp := h.post(t, chat(false), map[string]string{"x-backend": ""})
	if body := readAll(t, resp); resp.StatusCode != 200 || resp.Header.Get("x-continuum-worker") != "21" || resp.Header.Get("x-continuum-prefill-worker") != "10" {
		t.Fatalf("%d (decode %s, prefill %s): %s", resp.StatusCode, resp.Header.Get("x-continuum-worker"), resp.Header.Get("x-continuum-prefill-worker"), body)
	}
	if h.allRepins() != 1 {
		t.Fatalf("%v re-pins, want 1", h.allRepins())
	}
}
