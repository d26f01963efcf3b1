package main_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/testutil"
)

// sent is one request of a steady load and what came of it.
type sent struct {
	at      time.Time
	status  int
	worker  string // x-continuum-worker: the decode worker it was pinned to
	prefill string
	failure string
}

// steadyLoad sends chat requests (buffered and streamed in turn) at a
// fixed rate, each on its own goroutine (at most 64 at once), until
// stopped.
type steadyLoad struct {
	router string
	client *http.Client
	mu     sync.Mutex
	all    []sent
	stop   chan struct{}
	wg     sync.WaitGroup
}

func startSteadyLoad(router string, perSecond int) *steadyLoad {
	l := &steadyLoad{router: router, client: &http.Client{Timeout: 30 * time.Second}, stop: make(chan struct{})}
	slots := make(chan struct{}, 64)
	l.wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			select {
			case slots <- struct{}{}:
			default:
				continue // 64 in flight: the router is far behind; the results will show it
			}
			l.wg.Go(func() {
				defer func() { <-slots }()
				s := l.one(i%2 == 1)
				l.mu.Lock()
				l.all = append(l.all, s)
				l.mu.Unlock()
			})
		}
	})
	return l
}

func (l *steadyLoad) one(stream bool) sent {
	s := sent{at: time.Now()}
	req, _ := http.NewRequest(http.MethodPost, l.router+"/v1/chat/completions", strings.NewReader(
		fmt.Sprintf(`{"model":"Qwen/Qwen3-32B","stream":%v,"max_tokens":4,"messages":[{"role":"user","content":"Hello from the steady load"}]}`, stream)))
	req.Header.Set("x-backend", "")
	resp, err := l.client.Do(req)
	if err != nil {
		s.failure = err.Error()
		return s
	}
	defer resp.Body.Close()
	s.status, s.worker, s.prefill = resp.StatusCode, resp.Header.Get("x-continuum-worker"), resp.Header.Get("x-continuum-prefill-worker")
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		s.failure = "reading the answer: " + err.Error()
	case resp.StatusCode != http.StatusOK:
		s.failure = fmt.Sprintf("status %d: %s", resp.StatusCode, tail(string(body)))
	case stream && !strings.Contains(string(body), "data: [DONE]"):
		s.failure = "stream without [DONE]: " + tail(string(body))
	}
	return s
}

// results returns what was sent so far.
func (l *steadyLoad) results() []sent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sent(nil), l.all...)
}

func (l *steadyLoad) finish() []sent {
	close(l.stop)
	l.wg.Wait()
	return l.results()
}

var workerLineRe = regexp.MustCompile(`(?m)^\s+(prefill|decode)\s+instance (\d+)`)

// simWorkers lists fleet-sim's printed workers by role.
func simWorkers(out string) map[string][]string {
	ws := map[string][]string{}
	for _, m := range workerLineRe.FindAllStringSubmatch(out, -1) {
		ws[m[1]] = append(ws[m[1]], m[2])
	}
	return ws
}

// awaitFleet waits until the router sees every worker with its load
// subscription connected and pins requests.
func awaitFleet(t *testing.T, router string, n int) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%d workers with connected subscriptions", n), func() bool {
		v := workers(t, router)
		connected := 0
		for _, s := range v.Subscriptions {
			if s.State == "connected" && s.Family == "kv_metrics" {
				connected++
			}
		}
		return len(v.Workers) == n && connected == n
	})
	testutil.Eventually(t, 30*time.Second, "a pinned answer", func() bool {
		resp, _ := chat(t, router, false, 1)
		return resp.StatusCode == 200 && resp.Header.Get("x-continuum-routing-path") == "disaggregated"
	})
}

func listed(t *testing.T, router, id string) bool {
	for _, w := range workers(t, router).Workers {
		if w.WorkerID == id {
			return true
		}
	}
	return false
}

// TestRestartedWorkerPickedAtOnce: under 40 requests a second, a decode
// worker is killed; once discovery has dropped it, it is restarted under
// the same instance id. The requests it was sent before it died must not
// keep it out: it is picked again within a second of the router seeing it
// back (it had been kept out until its last requests aged out of the
// in-flight window, 5 to 14 s at this rate).
func TestRestartedWorkerPickedAtOnce(t *testing.T) {
	t.Parallel()
	router, frontend, sim, _ := fleet(t, "--decode", "4")
	ws := simWorkers(sim.out())
	awaitFleet(t, router, len(ws["prefill"])+len(ws["decode"]))
	victim := ws["decode"][0]
	load := startSteadyLoad(router, 40)
	defer load.finish()
	testutil.Eventually(t, 30*time.Second, "the victim serves", func() bool {
		for _, s := range load.results() {
			if s.worker == victim && s.status == 200 {
				return true
			}
		}
		return false
	})

	inject(t, frontend, victim, "kill")
	testutil.Eventually(t, 30*time.Second, "the killed worker dropped from discovery", func() bool { return !listed(t, router, victim) })
	inject(t, frontend, victim, "restart")
	restarted := time.Now()
	var back time.Time
	testutil.Eventually(t, 30*time.Second, "the restarted worker back in discovery", func() bool {
		back = time.Now()
		return listed(t, router, victim)
	})
	var picked time.Time
	testutil.Eventually(t, 30*time.Second, "the restarted worker picked", func() bool {
		for _, s := range load.results() {
			if s.worker == victim && s.at.After(restarted) && s.status == 200 && (picked.IsZero() || s.at.Before(picked)) {
				picked = s.at
			}
		}
		return !picked.IsZero()
	})
	gap := picked.Sub(back)
	t.Logf("restarted worker back in discovery %v after the restart, picked %v after that", back.Sub(restarted).Round(time.Millisecond), gap.Round(time.Millisecond))
	if gap > time.Second {
		t.Errorf("the restarted worker was picked %v after it was back, want within a second", gap)
	}
}

// TestKilledWorkersRepinned: with cards declaring migration_limit, under
// 40 requests a second (buffered and streamed), a decode worker and a
// prefill worker are killed. Until their records expire the router still
// pins requests to them and the frontend refuses those; each is pinned
// again to live workers before any byte reaches its client, so no request
// fails but a stream the killed workers were answering when they died
// (cut with them), and the re-pins are counted.
func TestKilledWorkersRepinned(t *testing.T) {
	t.Parallel()
	router, frontend, sim, _ := fleet(t, "--decode", "4", "--migration-limit", "3")
	ws := simWorkers(sim.out())
	awaitFleet(t, router, len(ws["prefill"])+len(ws["decode"]))
	load := startSteadyLoad(router, 40)
	deadDecode, deadPrefill := ws["decode"][1], ws["prefill"][0]
	testutil.Eventually(t, 30*time.Second, "a baseline before the faults", func() bool { return len(load.results()) >= 40 })
	inject(t, frontend, deadDecode, "kill")
	inject(t, frontend, deadPrefill, "kill")
	killed := time.Now() // a stream cut by the kills started before this
	testutil.Eventually(t, 30*time.Second, "both killed workers dropped from discovery", func() bool {
		return !listed(t, router, deadDecode) && !listed(t, router, deadPrefill)
	})
	results := load.finish()
	var failures []string
	cut := 0
	for _, s := range results {
		switch {
		case s.failure == "":
		case strings.HasPrefix(s.failure, "stream without [DONE]") && s.at.Before(killed) && (s.worker == deadDecode || s.prefill == deadPrefill):
			cut++ // streaming from a killed worker: cut with it
		default:
			failures = append(failures, s.at.Format("15:04:05.000")+" "+s.failure)
		}
	}
	repins := 0.0
	for _, reason := range []string{"instance_not_found", "engine_unreachable", "status_5xx"} {
		repins += metric(t, router, `continuum_dynamo_repin_total{reason="`+reason+`"}`)
	}
	t.Logf("%d requests, %d failed, %d streams cut by the kill, %v re-pinned", len(results), len(failures), cut, repins)
	if len(failures) > 0 {
		t.Errorf("%d of %d requests failed:\n%s", len(failures), len(results), strings.Join(failures[:min(len(failures), 20)], "\n"))
	}
	if repins == 0 {
		t.Error("no request was re-pinned: the killed workers were never pinned before their records expired")
	}
}
