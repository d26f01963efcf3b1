package top_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/cli/top"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/tui"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	t.Setenv("CONTINUUM_CONFIG", "")
	ios, _, out, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := cli.Run(ctx, f, args)
	return code, out.String(), errOut.String()
}

// TestOnceDemo: `top --demo --once -o json` prints the demo fleet as the
// router sees it.
func TestOnceDemo(t *testing.T) {
	code, out, errOut := run(t, "top", "--demo", "--once", "-o", "json", "--interval", "300ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc tui.Once
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	roles := map[string]int{}
	for _, w := range doc.Workers {
		roles[w.Role]++
		if w.Load == nil || w.Capacity.TotalKVBlocks == nil {
			t.Errorf("worker without load row or capacity: %+v", w)
		}
	}
	if roles["prefill"] != 2 || roles["decode"] != 2 || doc.Source != "file" || !doc.Connected {
		t.Fatalf("%s", out)
	}
	code, out, errOut = run(t, "top", "--demo", "--once", "--interval", "300ms")
	if code != 0 || !strings.HasPrefix(out, "NAMESPACE  MODEL") || strings.Count(out, "Qwen/Qwen3-32B") != 4 {
		t.Fatalf("table: exit %d\n%s%s", code, out, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"top", "--demo", "--router", "http://x"},
		// The demo's router has its own token: one given would be
		// replaced, not used.
		{"top", "--demo", "--once", "--token", "x"},
		{"top", "--once", "-o", "yaml"},
		{"top", "--interval", "1ms"},
		{"top", "--router", "http://127.0.0.1:1"}, // no terminal: only --once prints
	} {
		if code, _, errOut := run(t, args...); code != cmdutil.ExitUsage || errOut == "" {
			t.Errorf("%v: exit %d %q", args, code, errOut)
		}
	}
	// A router given without its scheme is told as a usage error before
	// any request.
	for _, router := range []string{"127.0.0.1:8080", "ftp://router", "router"} {
		code, _, errOut := run(t, "top", "--once", "--router", router)
		if code != cmdutil.ExitUsage || !strings.Contains(errOut, "give an http(s) URL") {
			t.Errorf("--router %s: exit %d %q", router, code, errOut)
		}
	}
	// A bad value names its flag as typed, as every command's does.
	if code, _, errOut := run(t, "top", "--once", "-o", "yaml"); !strings.Contains(errOut, `--output "yaml" is not one of table, json`) {
		t.Errorf("-o yaml: exit %d %q", code, errOut)
	}
	code, _, errOut := run(t, "top", "--once", "--router", "http://127.0.0.1:1", "--timeout", "1s")
	if code != 1 || !strings.Contains(errOut, "router unreachable") {
		t.Errorf("unreachable: exit %d %q", code, errOut)
	}
}

// TestInteractiveDemo runs the program over the demo without a terminal:
// keys from a pipe, frames to a buffer.
func TestInteractiveDemo(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	out := &testutil.SyncBuffer{}
	pr, pw := io.Pipe()
	ios.In, ios.Out = pr, out
	done := make(chan error, 1)
	go func() {
		done <- top.Run(context.Background(), &top.Options{IO: ios, Env: os.LookupEnv, Demo: true, Interval: 200 * time.Millisecond,
			ProgramOptions: []tea.ProgramOption{tea.WithInput(pr), tea.WithOutput(ios.Out), tea.WithWindowSize(120, 30)}})
	}()
	testutil.Eventually(t, 30*time.Second, "the fleet view", func() bool { return strings.Contains(out.String(), "prefill (2)") })
	_, _ = pw.Write([]byte("2"))
	testutil.Eventually(t, 10*time.Second, "the subscriptions view", func() bool { return strings.Contains(out.String(), "[2 Subs") })
	_, _ = pw.Write([]byte("q"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("q did not quit")
	}
	_ = pw.Close()
}

// TestOnceErrorEscaped: --once ending on a router answer that quotes
// terminal controls (its status line) prints the error escaped, exit 1.
func TestOnceErrorEscaped(t *testing.T) {
	base := testutil.StatusLineServer(t, "500 bad\x1b]0;owned\x07")
	code, _, errOut := run(t, "top", "--once", "--router", base)
	if code != 1 || strings.ContainsAny(errOut, "\x1b\x07") || !strings.Contains(errOut, `500 bad\x1b]0;owned\x07`) {
		t.Errorf("exit %d %q", code, errOut)
	}
}
