package main_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/testutil"
)

// clientsDir is where .ci/run installs the official npm clients from
// scripts/client-tests: ${CONTINUUM_CACHE:-$HOME/.cache/continuum}/client-tests.
func clientsDir(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("CONTINUUM_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, ".cache", "continuum")
	}
	return filepath.Join(cache, "client-tests")
}

// missingClients says why the clients cannot run: node missing, a client
// not installed, or installed from another lock than the clone's.
func missingClients(t *testing.T, dir, lock string) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		return "node is not on PATH"
	}
	for _, pkg := range []string{"openai", "@anthropic-ai/sdk"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			return "the " + pkg + " npm client is not installed in " + dir
		}
	}
	want, err := os.ReadFile(lock)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "package-lock.json")); err != nil || !bytes.Equal(got, want) {
		return "the npm clients in " + dir + " were installed from another package-lock.json"
	}
	return ""
}

// TestClientLibraries runs scripts/client-tests against `serve --demo`:
// openai.test.mjs, the official openai npm client's calls (chat, a chat
// stream with usage, text completions, the model list, an unknown model,
// responses.create with a function call round trip, responses.stream), and
// anthropic.test.mjs, the official @anthropic-ai/sdk's (messages.create
// plain, with a system prompt, multi-turn, a tool use round trip, stop
// sequences; messages.stream with finalMessage(); the error shape;
// count_tokens), each asserting content, stop reasons and usage, and that
// converted requests are pinned. Without node or the clients it skips,
// saying how to install them; with CI set it fails instead.
func TestClientLibraries(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level end-to-end test")
	}
	root := testutil.RepoRoot(t)
	src := filepath.Join(root, "scripts", "client-tests")
	dir := clientsDir(t)
	if why := missingClients(t, dir, filepath.Join(src, "package-lock.json")); why != "" {
		install := "mkdir -p " + dir + " && cp scripts/client-tests/package.json scripts/client-tests/package-lock.json " + dir +
			"/ && npm ci --prefix " + dir + " (as .ci/run does)"
		if os.Getenv("CI") != "" {
			t.Fatalf("%s; .ci/run installs it: %s", why, install)
		}
		t.Skipf("%s; install it with: %s", why, install)
	}
	srv := start(t, "serve", "--demo", "--bind", "127.0.0.1:0", "--log-format", "json")
	testutil.Eventually(t, 30*time.Second, "serve --demo listening", func() bool { return servingRe.MatchString(srv.errOut()) })
	router := "http://" + servingRe.FindStringSubmatch(srv.errOut())[1]
	testutil.Eventually(t, 30*time.Second, "a pinned answer", func() bool {
		resp, _ := chat(t, router, false, 1)
		return resp.StatusCode == 200 && resp.Header.Get("x-continuum-routing-path") == "disaggregated"
	})

	for _, file := range []string{"openai.test.mjs", "anthropic.test.mjs"} {
		t.Run(strings.TrimSuffix(file, ".test.mjs"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", "--test", "--test-reporter=tap", filepath.Join(src, file))
			cmd.Env = append(os.Environ(), "CONTINUUM_URL="+router, "CONTINUUM_MODEL=Qwen/Qwen3-32B", "CONTINUUM_CLIENTS="+dir)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("node --test: %v\n%s", err, out)
			}
			// node exits 0 when every test passed; a run that found no test
			// passes too, so the counts must say tests ran and none failed.
			for _, want := range []*regexp.Regexp{regexp.MustCompile(`(?m)^# pass [1-9]`), regexp.MustCompile(`(?m)^# fail 0$`)} {
				if !want.Match(out) {
					t.Fatalf("node --test output lacks %q:\n%s", want, out)
				}
			}
			if testing.Verbose() {
				t.Logf("%s", strings.TrimSpace(string(out)))
			}
		})
	}
}
