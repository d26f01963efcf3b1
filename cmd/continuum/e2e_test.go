package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/testutil"
)

// Process-level end-to-end tests: the built binary, `fleet-sim` and `serve`
// as real processes on loopback.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// TestMain removes the binary the tests built (about 80 MB a run).
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process-level end-to-end test")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "continuum-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "continuum")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is a running child process with its output collected.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stdout strings.Builder
	stderr strings.Builder
	done   chan struct{}
	err    error
}

func start(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary(t), args...), done: make(chan struct{})}
	// The process is killed at the end: what it keeps in temporary
	// directories (the demo's file store) goes with the test's own.
	p.cmd.Env = append(os.Environ(), "CONTINUUM_CONFIG=", "TMPDIR="+t.TempDir())
	so, _ := p.cmd.StdoutPipe()
	se, _ := p.cmd.StderrPipe()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, pipe := range []struct {
		r io.Reader
		b *strings.Builder
	}{{so, &p.stdout}, {se, &p.stderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(pipe.r)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				p.mu.Lock()
				pipe.b.WriteString(sc.Text() + "\n")
				p.mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), p.out(), p.errOut())
		}
	})
	return p
}

func (p *proc) out() string    { p.mu.Lock(); defer p.mu.Unlock(); return p.stdout.String() }
func (p *proc) errOut() string { p.mu.Lock(); defer p.mu.Unlock(); return p.stderr.String() }

var (
	frontendRe = regexp.MustCompile(`frontend:\s+(http://\S+)`)
	servingRe  = regexp.MustCompile(`"msg":"continuum serving","address":"([^"]+)"`)
	instanceRe = regexp.MustCompile(`decode\s+instance (\d+)`)
)

// fleet starts fleet-sim and serve over it, and returns the router's and
// the frontend's base URLs.
func fleet(t *testing.T, extra ...string) (router, frontend string, sim, srv *proc) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "continuum.yaml")
	sim = start(t, append([]string{"fleet-sim", "--prefill", "2", "--decode", "2", "--speed", "4", "--router-bind", "127.0.0.1:0", "--write-config", cfg}, extra...)...)
	testutil.Eventually(t, 30*time.Second, "fleet-sim ready", func() bool { return strings.Contains(sim.out(), "router configuration:") })
	frontend = frontendRe.FindStringSubmatch(sim.out())[1]
	srv = start(t, "serve", "--config", cfg, "--log-format", "json", "--shutdown-grace", "20s")
	testutil.Eventually(t, 30*time.Second, "serve ready", func() bool { return servingRe.MatchString(srv.errOut()) })
	router = "http://" + servingRe.FindStringSubmatch(srv.errOut())[1]
	return router, frontend, sim, srv
}

func chat(t *testing.T, router string, stream bool, maxTokens int) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, router+"/v1/chat/completions", strings.NewReader(
		fmt.Sprintf(`{"model":"Qwen/Qwen3-32B","stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":"Hello from the end-to-end test"}]}`, stream, maxTokens)))
	req.Header.Set("x-backend", "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func workers(t *testing.T, router string) admin.WorkersResponse {
	t.Helper()
	var v admin.WorkersResponse
	getJSON(t, router+"/admin/dynamo/workers", &v)
	return v
}

// getJSON decodes an admin GET into v. Anything but a 200 with a JSON body
// fails the test: an error body would decode to an empty view and make
// "the worker is gone" hold vacuously.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer demo")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}

func metric(t *testing.T, router, series string) float64 {
	t.Helper()
	resp, err := http.Get(router + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func inject(t *testing.T, frontend, id, fault string) {
	t.Helper()
	resp, err := http.Post(frontend+"/sim/workers/"+id+"/"+fault, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("inject %s %s: %d", fault, id, resp.StatusCode)
	}
}

func TestFleetSimAndServe(t *testing.T) {
	t.Parallel()
	router, frontend, sim, _ := fleet(t)

	// Requests flow with pins once discovery and subscriptions are up.
	testutil.Eventually(t, 30*time.Second, "a disaggregated answer", func() bool {
		resp, _ := chat(t, router, false, 4)
		return resp.StatusCode == 200 && resp.Header.Get("x-continuum-routing-path") == "disaggregated"
	})
	// The configuration fleet-sim writes turns KV-aware routing on: each
	// worker's load and kv-events publishers are subscribed to.
	testutil.Eventually(t, 30*time.Second, "4 connected subscriptions of each family", func() bool {
		v := workers(t, router)
		n := map[string]int{}
		for _, s := range v.Subscriptions {
			if s.State == "connected" {
				n[s.Family]++
			}
		}
		return len(v.Workers) == 4 && n["kv_metrics"] == 4 && n["kv-events"] == 4 && len(v.Subscriptions) == 8
	})

	// A second record claiming a prefill worker's id: discovery rejects
	// every claimant (a duplicate problem) until the record goes.
	dup := regexp.MustCompile(`prefill\s+instance (\d+)`).FindStringSubmatch(sim.out())[1]
	present := func(id string) bool {
		for _, w := range workers(t, router).Workers {
			if w.WorkerID == id {
				return true
			}
		}
		return false
	}
	inject(t, frontend, dup, "duplicate")
	testutil.Eventually(t, 30*time.Second, "duplicated worker rejected", func() bool {
		var p admin.ProblemsResponse
		getJSON(t, router+"/admin/dynamo/problems", &p)
		for _, pr := range p.Problems {
			if pr.Kind == "duplicate" && pr.KeyCount == 2 {
				return !present(dup)
			}
		}
		return false
	})
	inject(t, frontend, dup, "resume")
	testutil.Eventually(t, 30*time.Second, "duplicate resolved", func() bool { return present(dup) })

	// A killed worker's records expire within the file store's TTL and it
	// leaves routing.
	victim := instanceRe.FindStringSubmatch(sim.out())[1]
	inject(t, frontend, victim, "kill")
	testutil.Eventually(t, 30*time.Second, "killed worker gone from discovery", func() bool {
		for _, w := range workers(t, router).Workers {
			if w.WorkerID == victim {
				return false
			}
		}
		return true
	})
	for range 6 {
		resp, body := chat(t, router, false, 2)
		if resp.StatusCode != 200 || resp.Header.Get("x-continuum-worker") == victim {
			t.Fatalf("after the kill: %d %v %s", resp.StatusCode, resp.Header, body)
		}
	}

	// Restarted, it comes back with its id.
	inject(t, frontend, victim, "restart")
	testutil.Eventually(t, 30*time.Second, "restarted worker back in discovery", func() bool { return present(victim) })

	// Every publisher stops: with no fresh sample, selection rotates.
	for _, line := range strings.Split(sim.out(), "\n") {
		if m := regexp.MustCompile(`instance (\d+) `).FindStringSubmatch(line); m != nil {
			inject(t, frontend, m[1], "stop-publisher")
		}
	}
	before := metric(t, router, `continuum_dynamo_selection_total{reason="round_robin_stale",role="decode"}`)
	testutil.Eventually(t, 30*time.Second, "round_robin_stale selections", func() bool {
		chat(t, router, false, 1)
		return metric(t, router, `continuum_dynamo_selection_total{reason="round_robin_stale",role="decode"}`) > before+2
	})
}

// TestFleetSimEtcd: a fleet registered in etcd under leases. Requests flow;
// the router's discovery survives an etcd restart; a killed worker's lease
// expires and it leaves routing.
func TestFleetSimEtcd(t *testing.T) {
	t.Parallel()
	router, frontend, sim, _ := fleet(t, "--store", "etcd")
	if !strings.Contains(sim.out(), "etcd:       http://127.0.0.1:") {
		t.Fatalf("no etcd endpoint printed:\n%s", sim.out())
	}
	testutil.Eventually(t, 30*time.Second, "a disaggregated answer", func() bool {
		resp, _ := chat(t, router, false, 4)
		return resp.StatusCode == 200 && resp.Header.Get("x-continuum-routing-path") == "disaggregated"
	})
	if v := workers(t, router); v.Source != "etcd" || len(v.Workers) != 4 {
		t.Fatalf("fleet view: %+v", v)
	}
	resp, err := http.Post(frontend+"/sim/etcd/restart", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("etcd restart: %d", resp.StatusCode)
	}
	testutil.Eventually(t, 30*time.Second, "discovery connected again with the whole fleet", func() bool {
		v := workers(t, router)
		return v.Connected && len(v.Workers) == 4
	})
	victim := instanceRe.FindStringSubmatch(sim.out())[1]
	inject(t, frontend, victim, "kill")
	testutil.Eventually(t, 30*time.Second, "killed worker's lease expired", func() bool {
		for _, w := range workers(t, router).Workers {
			if w.WorkerID == victim {
				return false
			}
		}
		return true
	})
	resp, body := chat(t, router, false, 2)
	if resp.StatusCode != 200 || resp.Header.Get("x-continuum-worker") == victim {
		t.Fatalf("after the kill: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// TestFleetSimDialects: fleet-sim writes its cards in each dialect Dynamo
// has shipped (--card-dialect), discover shows every worker's role as the
// default dialect does, and serve pins requests to a decode and a prefill
// worker as it does with the default.
func TestFleetSimDialects(t *testing.T) {
	binary(t)
	fileStoreRe := regexp.MustCompile(`file store: (\S+)`)
	for _, dialect := range []string{"bitflags", "lowercase", "legacy"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			router, _, sim, _ := fleet(t, "--card-dialect", dialect, "--workers", "1")
			root := fileStoreRe.FindStringSubmatch(sim.out())[1]
			want := map[string]string{}
			for _, m := range regexp.MustCompile(`(?m)^\s+(prefill|decode|backend)\s+instance (\d+)`).FindAllStringSubmatch(sim.out(), -1) {
				want[m[2]] = map[string]string{"prefill": "prefill", "decode": "decode", "backend": "aggregated"}[m[1]]
			}
			if len(want) != 5 {
				t.Fatalf("fleet-sim printed %d workers", len(want))
			}

			var rep struct {
				Workers  []admin.Worker  `json:"workers"`
				Problems []admin.Problem `json:"problems"`
			}
			disc := start(t, "discover", "--source", "file", "--file-root", root, "-o", "json")
			<-disc.done
			if disc.err != nil || json.Unmarshal([]byte(disc.out()), &rep) != nil {
				t.Fatalf("discover: %v\n%s%s", disc.err, disc.out(), disc.errOut())
			}
			got := map[string]string{}
			for _, w := range rep.Workers {
				got[w.WorkerID] = w.Role
			}
			if !reflect.DeepEqual(got, want) || len(rep.Problems) != 0 {
				t.Fatalf("discover roles %v, want %v; problems %+v", got, want, rep.Problems)
			}

			testutil.Eventually(t, 30*time.Second, "a disaggregated answer", func() bool {
				resp, _ := chat(t, router, false, 2)
				return resp.StatusCode == 200 && resp.Header.Get("x-continuum-routing-path") == "disaggregated"
			})
			for range 4 {
				resp, body := chat(t, router, false, 2)
				if resp.StatusCode != 200 || want[resp.Header.Get("x-continuum-worker")] != "decode" || want[resp.Header.Get("x-continuum-prefill-worker")] != "prefill" {
					t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
				}
			}
		})
	}
}

// TestServeDrainsOnSIGTERM: an in-flight stream completes after SIGTERM,
// and the process exits cleanly.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	router, _, _, srv := fleet(t)
	testutil.Eventually(t, 30*time.Second, "ready", func() bool {
		resp, _ := chat(t, router, false, 1)
		return resp.StatusCode == 200
	})
	req, _ := http.NewRequest(http.MethodPost, router+"/v1/chat/completions", strings.NewReader(
		`{"model":"Qwen/Qwen3-32B","stream":true,"max_tokens":200,"messages":[{"role":"user","content":"a long answer please"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil { // the stream has started
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("stream cut by the shutdown: %v", err)
	}
	if !strings.Contains(string(rest), "data: [DONE]") {
		t.Fatalf("stream did not finish: %q", tail(string(rest)))
	}
	select {
	case <-srv.done:
		if srv.err != nil {
			t.Fatalf("serve exited with %v", srv.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
}

func tail(s string) string {
	if len(s) > 300 {
		return s[len(s)-300:]
	}
	return s
}

// TestTopInTmux runs scripts/top-e2e.sh: `top --demo` in a real terminal
// (tmux), driven by keys. .ci/run installs tmux; without it the test skips
// (fails in CI).
func TestTopInTmux(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	if _, err := exec.LookPath("tmux"); err != nil {
		testutil.SkipOrFailInCI(t, "tmux is not installed (.ci/run installs it)")
	}
	cmd := exec.Command("bash", filepath.Join(testutil.RepoRoot(t), "scripts", "top-e2e.sh"), bin)
	cmd.Dir = testutil.RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestServeReloadsOnSIGHUP: SIGHUP reloads the configuration file (it does
// not end the process, as the signal's default would): an edit followed
// at once by the signal is applied by the signal, and a signal without an
// edit is a reload that changes nothing.
func TestServeReloadsOnSIGHUP(t *testing.T) {
	router, _, _, srv := fleet(t)
	file := srv.cmd.Args[3] // serve --config FILE
	status := func() admin.ConfigStatus {
		var st admin.ConfigStatus
		getJSON(t, router+"/admin/config/status", &st)
		return st
	}
	testutil.Eventually(t, 30*time.Second, "ready", func() bool {
		resp, _ := chat(t, router, false, 1)
		return resp.StatusCode == 200
	})
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), `max_staleness: "3s"`, `max_staleness: "5s"`, 1)
	if edited == string(data) {
		t.Fatalf("no max_staleness in\n%s", data)
	}
	if err := os.WriteFile(file, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "reloaded", func() bool { return status().Generation == 2 })
	first := status().LastReload
	if first.Trigger != "signal" || first.Result != admin.ReloadApplied {
		t.Errorf("last reload %+v", first)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "second reload", func() bool {
		r := status().LastReload
		return r.At != first.At && len(r.Changes) == 0 && r.Trigger == "signal" && r.Result == admin.ReloadApplied
	})
	if status().Generation != 2 {
		t.Error("a reload without changes made a new generation")
	}
	if resp, _ := chat(t, router, false, 1); resp.StatusCode != 200 {
		t.Errorf("after the reloads: %d", resp.StatusCode)
	}
	select {
	case <-srv.done:
		t.Fatalf("serve exited on SIGHUP: %v", srv.err)
	default:
	}
}
