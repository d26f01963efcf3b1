package demo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/demo"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/routerd"
	"github.com/continuum-router/continuum/internal/testutil"
)

// startDemo runs a demo of a fleet shape and returns its base URL.
func startDemo(t *testing.T, fleet fleetsim.Options) string {
	t.Helper()
	d, err := demo.Start(demo.Options{Fleet: fleet, Bind: "127.0.0.1:0", Deps: routerd.Deps{ShutdownGrace: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return "http://" + d.Addr()
}

// workerRoles returns the role of each worker the router sees, by decimal
// worker id.
func workerRoles(t *testing.T, base string) map[string]string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/admin/dynamo/workers", nil)
	req.Header.Set("Authorization", "Bearer "+demo.AdminToken)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var v admin.WorkersResponse
	if r.StatusCode != http.StatusOK || json.NewDecoder(r.Body).Decode(&v) != nil {
		t.Fatalf("GET /admin/dynamo/workers: %s", r.Status)
	}
	roles := map[string]string{}
	for _, w := range v.Workers {
		roles[w.WorkerID] = w.Role
	}
	return roles
}

func ask(t *testing.T, base, model string) *http.Response {
	t.Helper()
	return send(t, base+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":"Hello!"}]}`, model))
}

// complete sends a text completion request: its prompt is encoded as it
// is, without a chat template's common opening.
func complete(t *testing.T, base, model, prompt string) *http.Response {
	t.Helper()
	return send(t, base+"/v1/completions", fmt.Sprintf(`{"model":%q,"max_tokens":2,"prompt":%q}`, model, prompt))
}

func send(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("x-backend", "")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r
}

// TestDemoTopologies: namespaces, models, aggregated workers beside a
// prefill/decode pool, and data-parallel ranks: requests for the second
// model go disaggregated through both namespaces' frontends, pinned to a
// decode and a prefill worker, whichever dialect the cards are written in.
func TestDemoTopologies(t *testing.T) {
	t.Parallel()
	for _, dialect := range fleetsim.CardDialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			base := startDemo(t, fleetsim.Options{Namespaces: []string{"prod", "canary"}, Models: []string{"m1", "m2"},
				Prefill: 1, Decode: 1, Aggregated: 1, DPSize: 2, Speed: 50, CardDialect: dialect})
			testutil.Eventually(t, 20*time.Second, "m2 served", func() bool { return ask(t, base, "m2").StatusCode == 200 })
			roles := workerRoles(t, base)
			count := map[string]int{}
			for _, role := range roles {
				count[role]++
			}
			if count["prefill"] != 4 || count["decode"] != 4 || count["aggregated"] != 4 || len(roles) != 12 {
				t.Fatalf("roles %v", count)
			}
			// Prompts that share no block (with KV-aware routing, prompts
			// sharing a chat template's opening follow the rank holding
			// it, wherever that is): the prefill ranks of both namespaces
			// tie and take turns.
			backends := map[string]bool{}
			for i := range 8 {
				r := complete(t, base, "m2", strings.Repeat(fmt.Sprintf("w%d ", i), 40))
				if r.StatusCode != 200 || r.Header.Get("x-continuum-routing-path") != "disaggregated" ||
					roles[r.Header.Get("x-continuum-worker")] != "decode" || roles[r.Header.Get("x-continuum-prefill-worker")] != "prefill" {
					t.Fatalf("status %d %v", r.StatusCode, r.Header)
				}
				backends[r.Header.Get("x-continuum-backend")] = true
			}
			if len(backends) != 2 {
				t.Errorf("both namespaces' frontends should serve: %v", backends)
			}
		})
	}
}

// TestDemoLegacyLoadFields: workers publishing only kv_used_blocks (Dynamo
// 1.4.2 vLLM) are picked by load for decode and round-robin for prefill.
func TestDemoLegacyLoadFields(t *testing.T) {
	t.Parallel()
	base := startDemo(t, fleetsim.Options{Prefill: 2, Decode: 2, NilSchedulerFields: true, Speed: 50})
	testutil.Eventually(t, 20*time.Second, "load-based decode picks", func() bool {
		ask(t, base, "Qwen/Qwen3-32B")
		m := selections(t, base)
		return m["load decode"] > 0 && m["round_robin_stale prefill"] > 0 && m["load prefill"] == 0
	})
}

// scrape returns the router's /metrics text.
func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// selections reads continuum_dynamo_selection_total by "reason role" (every
// pair is exported, at zero until counted).
func selections(t *testing.T, base string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(scrape(t, base), "\n") {
		var reason, role string
		var v float64
		rest, ok := strings.CutPrefix(line, `continuum_dynamo_selection_total{reason="`)
		if !ok {
			continue
		}
		reason, rest, _ = strings.Cut(rest, `",role="`)
		role, rest, _ = strings.Cut(rest, `"} `)
		if _, err := fmt.Sscan(rest, &v); err == nil {
			out[reason+" "+role] = v
		}
	}
	return out
}

// bannerCurlRe finds each POST the banner suggests: its URL and body.
var bannerCurlRe = regexp.MustCompile(`curl -sN? (http://\S+/v1/\S+) (?:.*)\\\n\s+-d '([^']+)'`)

// TestBannerCurls: the banner suggests a request for each ingress (chat
// completions, Messages, Responses), and each is answered, pinned, in its
// API's shape.
func TestBannerCurls(t *testing.T) {
	t.Parallel()
	d, err := demo.Start(demo.Options{Bind: "127.0.0.1:0", Deps: routerd.Deps{ShutdownGrace: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	var banner strings.Builder
	d.Banner(&banner)
	curls := bannerCurlRe.FindAllStringSubmatch(banner.String(), -1)
	want := map[string]string{"/v1/chat/completions": `"object":"chat.completion`, "/v1/messages": `"type":"message"`, "/v1/responses": `"object":"response"`}
	seen := map[string]bool{}
	for _, c := range curls {
		url, body := c[1], c[2]
		path := url[strings.Index(url, "/v1/"):]
		testutil.Eventually(t, 30*time.Second, path+" answered and pinned", func() bool {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("x-backend", "")
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			got, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != 200 || r.Header.Get("x-continuum-routing-path") != "disaggregated" {
				return false
			}
			if !strings.Contains(string(got), want[path]) {
				t.Fatalf("%s: %s", path, got)
			}
			return true
		})
		seen[path] = true
	}
	if len(seen) != len(want) {
		t.Fatalf("the banner suggests %v, want each of %v:\n%s", seen, want, banner.String())
	}
}

// kvSelections reads continuum_dynamo_kv_selection_total by result.
func kvSelections(t *testing.T, base string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(scrape(t, base), "\n") {
		rest, ok := strings.CutPrefix(line, `continuum_dynamo_kv_selection_total{result="`)
		if !ok {
			continue
		}
		result, value, _ := strings.Cut(rest, `"} `)
		var v float64
		if _, err := fmt.Sscan(value, &v); err == nil {
			out[result] = v
		}
	}
	return out
}

// chat sends a chat request with x-backend: 1 and returns the worker that
// prefilled it: the prefill worker of a disaggregated pin, else the worker.
func chat(t *testing.T, base string, messages string) string {
	t.Helper()
	worker, status := tryChat(t, base, messages)
	if status != http.StatusOK || worker == "" {
		t.Fatalf("status %d, worker %q", status, worker)
	}
	return worker
}

func tryChat(t *testing.T, base string, messages string) (string, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"Qwen/Qwen3-32B","max_tokens":2,"messages":`+messages+`}`))
	req.Header.Set("x-backend", "1")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	if w := r.Header.Get("x-continuum-prefill-worker"); w != "" {
		return w, r.StatusCode
	}
	return r.Header.Get("x-continuum-worker"), r.StatusCode
}

// TestDemoKVAwareRouting: with KV-aware routing (the demo's default), once
// a worker has computed a long prompt prefix, the requests that repeat it
// are pinned to that worker, which the router sees in its kv-events:
// kv_selection_total{result="overlap"} grows with each. In a disaggregated
// fleet that is the prefill worker (x-continuum-prefill-worker), in an
// aggregated one the worker itself (x-continuum-worker).
func TestDemoKVAwareRouting(t *testing.T) {
	t.Parallel()
	for name, fleet := range map[string]fleetsim.Options{
		"disaggregated": {Prefill: 2, Decode: 2, Speed: 50},
		"aggregated":    {Aggregated: 3, Speed: 50},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			kvAware(t, startDemo(t, fleet))
		})
	}
}

func kvAware(t *testing.T, base string) {
	// The router loads the pinned tokenizer files in the background: short
	// unrelated prompts count no_overlap once it has.
	n := 0
	testutil.Eventually(t, 20*time.Second, "prompts rendered", func() bool {
		n++
		_, status := tryChat(t, base, fmt.Sprintf(`[{"role":"user","content":"warm-up %d"}]`, n))
		return status == http.StatusOK && kvSelections(t, base)["no_overlap"] > 0
	})
	doc := strings.Repeat("The quarterly report covers revenue, costs and the outlook. ", 40)
	ask := func(i int) string {
		return chat(t, base, fmt.Sprintf(`[{"role":"system","content":%q},{"role":"user","content":"question %d"}]`, doc, i))
	}
	// Every worker that served the prompt holds its prefix: the first,
	// and any that a request went to before the router saw the first's
	// kv-events, which reach it asynchronously.
	holders := map[string]bool{ask(0): true}
	i := 1
	testutil.Eventually(t, 20*time.Second, "an overlap selection", func() bool {
		before := kvSelections(t, base)["overlap"]
		got := ask(i)
		i++
		held := holders[got]
		holders[got] = true
		return held && kvSelections(t, base)["overlap"] > before
	})
	before := kvSelections(t, base)["overlap"]
	for j := range 6 {
		if got := ask(i + j); !holders[got] {
			t.Fatalf("request %d went to worker %s, not to one of %v which hold the prefix", j, got, slices.Sorted(maps.Keys(holders)))
		}
	}
	if after := kvSelections(t, base)["overlap"]; after < before+6 {
		t.Fatalf("overlap selections %v then %v", before, after)
	}
}
