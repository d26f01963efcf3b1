package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/workload"
)

// liveCheck runs scripts/dynamo-broker-live-check.sh with args and the
// demo admin token, and returns its output and exit status.
func liveCheck(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFailInCI(t, "%s is not installed (the live check needs it): %v", tool, err)
		}
	}
	script, err := filepath.Abs("../../scripts/dynamo-broker-live-check.sh")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	}
	t.Fatalf("running the live check: %v\n%s", err, out.String())
	return "", 0
}

// outputHas fails t for each of wants that out does not hold.
func outputHas(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("no %q", want)
		}
	}
}

// TestBrokerLiveCheck runs the live check of the broker tunnel against a
// router fed through a real broker from a simulated fleet under traffic:
// every check passes with the broker up and its own metrics read; with the
// broker killed the subscriptions go pending, no sample comes, and the
// check fails on both counts.
func TestBrokerLiveCheck(t *testing.T) {
	t.Parallel()
	admin := []string{"ROUTER_ADMIN_TOKEN=demo"}
	// Usage errors come first and need no fleet.
	if out, code := liveCheck(t, []string{"ROUTER_ADMIN_TOKEN="}, "--router-url", "http://127.0.0.1:1"); code != 2 || !strings.Contains(out, "ROUTER_ADMIN_TOKEN is not set") {
		t.Fatalf("without a token: exit %d\n%s", code, out)
	}
	if out, code := liveCheck(t, admin, "--router-url", "http://127.0.0.1:1", "--window", "soon"); code != 2 || !strings.Contains(out, "--window must be") {
		t.Fatalf("with a bad window: exit %d\n%s", code, out)
	}
	if out, code := liveCheck(t, admin, "--router-url", "http://127.0.0.1:1", "--probe-image", "curl"); code != 2 || !strings.Contains(out, "needs --bus-url") {
		t.Fatalf("a probe without a bus URL: exit %d\n%s", code, out)
	}

	b := startBrokered(t, "127.0.0.1:0")
	router, broker, metricsURL := b.router, b.broker, b.brokerMetricsURL

	// Traffic through the window, so that selections are counted: prompts
	// of whole blocks, new ones each time, so that the prefill worker
	// publishes KV events, and answers long enough that the decode workers
	// carry load when the check polls.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range uint64(3) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1000 * c; ; i += 2 {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				body := fmt.Sprintf(`{"model":"Qwen/Qwen3-32B","max_tokens":256,"messages":[{"role":"user","content":%q}]}`,
					workload.BlockText(i)+workload.BlockText(i+1))
				if resp, err := http.Post(router+"/v1/chat/completions", "application/json", strings.NewReader(body)); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	out, code := liveCheck(t, admin, "--router-url", router, "--broker-metrics-url", metricsURL, "--window", "3")
	t.Logf("broker up:\n%s", out)
	if code != 0 {
		t.Fatalf("exit %d with the broker up", code)
	}
	outputHas(t, out,
		"PASS  all 6 subscriptions connected through a broker: "+brokerA+" 6",
		"PASS  namespaces covered: dynamo by "+brokerA,
		"continuum_dynamo_event_bus_sessions 1",
		"PASS  broker at "+metricsURL+": session up, 6 streams relayed",
		"PASS  decode selections on fresh load: ",
		"== result: passed")
	for _, family := range []string{"kv_metrics", "kv-events"} {
		if m := regexp.MustCompile(family + ` (\d+) accepted`).FindStringSubmatch(out); m == nil || m[1] == "0" {
			t.Errorf("no %s frames counted", family)
		}
	}
	if !regexp.MustCompile(`PASS  longest gap \d+ ms \(rank \d+/\d+\) within 3000 ms`).MatchString(out) {
		t.Errorf("no gap within the bound")
	}

	if err := broker.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "every subscription pending", func() bool {
		v := workers(t, router)
		for _, s := range v.Subscriptions {
			if s.State != "pending" {
				return false
			}
		}
		return len(v.Subscriptions) == 6
	})
	out, code = liveCheck(t, admin, "--router-url", router, "--window", "4", "--max-staleness-ms", "1000")
	t.Logf("broker killed:\n%s", out)
	if code != 1 {
		t.Fatalf("exit %d with the broker killed, want 1", code)
	}
	outputHas(t, out,
		"FAIL  6 of 6 subscriptions are not connected through a broker:",
		"pending, transport broker",
		"FAIL  namespaces no broker covers: dynamo (6 subscriptions pending)",
		"FAIL  no kv_metrics sample arrived in the window, under traffic",
		"== result: FAILED")
}
