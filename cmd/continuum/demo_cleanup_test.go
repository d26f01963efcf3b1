package main_test

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/testutil"
)

// TestDemoSecondSignalLeavesNoFileStore: a second Ctrl-C ends serve --demo
// at once, as it ends serve, and the demo fleet's directory goes with it
// (the stop it cuts short would have removed it).
func TestDemoSecondSignalLeavesNoFileStore(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	cmd := exec.Command(binary(t), "serve", "--demo", "--bind", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(os.Environ(), "CONTINUUM_CONFIG=", "TMPDIR="+tmp)
	var stderr testutil.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	testutil.Eventually(t, 30*time.Second, "serve --demo listening", func() bool { return servingRe.MatchString(stderr.String()) })
	router := "http://" + servingRe.FindStringSubmatch(stderr.String())[1]
	resp, err := http.Post(router+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"Qwen/Qwen3-32B","stream":true,"max_tokens":256,"messages":[{"role":"user","content":"Hello!"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil { // the stream has started
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(os.Interrupt)
	// The second once the first is being served (the stream holds the
	// drain open).
	testutil.Eventually(t, 10*time.Second, "shutting down", func() bool { return shutdownRe.MatchString(stderr.String()) })
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("serve --demo still running 10 s after a second Ctrl-C")
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "continuum-demo-*")); len(left) > 0 {
		t.Fatalf("a second Ctrl-C left the demo's file store behind: %v", left)
	}
}
