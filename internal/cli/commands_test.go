package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// TestSignalEndsStdinCommands: the first SIGINT or SIGTERM only ends a
// command's context (a second ends the process): a command reading its
// standard input from a producer that neither writes nor closes ends with
// it all the same, rather than waiting on the read.
func TestSignalEndsStdinCommands(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "tokenizer.json")
	// A minimal WordLevel tokenizer.
	if err := os.WriteFile(tok, []byte(`{"version":"1.0","model":{"type":"WordLevel","vocab":{"[UNK]":0,"hi":1},"unk_token":"[UNK]"},"pre_tokenizer":{"type":"Whitespace"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"kv-inspect", "tokenize", "--tokenizer", tok},
		{"pin-artifact", "-"},
		{"kv-inspect", "match", "--source", "file", "--file-root", dir},
	} {
		t.Run(args[0]+" "+args[1], func(t *testing.T) {
			t.Setenv("CONTINUUM_CONFIG", "")
			pr, pw := io.Pipe() // a producer that never writes nor closes
			t.Cleanup(func() { _ = pw.Close() })
			ios, _, _, errOut := iostreams.Test()
			ios.In = pr
			f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan int, 1)
			go func() { done <- cli.Run(ctx, f, args) }()
			time.Sleep(300 * time.Millisecond)
			cancel() // the first SIGTERM
			select {
			case code := <-done:
				if code != cmdutil.ExitFailure {
					t.Errorf("%v ended with exit %d, want %d: %s", args, code, cmdutil.ExitFailure, errOut.String())
				}
			case <-time.After(3 * time.Second):
				t.Errorf("%v still running 3s after its context ended (the first SIGINT/SIGTERM)", args)
				_ = pw.Close() // let it go
				<-done
			}
		})
	}
}

// runCLIWithEnv is runCLI with the process environment (serve reads it).
func runCLIWithEnv(args ...string) (int, string, string) {
	ios, _, out, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
	code := cli.Run(context.Background(), f, args)
	return code, out.String(), errOut.String()
}

// TestServeConfigErrorsAsJSON: with --log-format json every line serve
// writes about a refused configuration is a JSON log line, and one of them
// names the refused key.
func TestServeConfigErrorsAsJSON(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	file := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(file, []byte("server:\n  bind_port: \"127.0.0.1:0\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLIWithEnv("--log-format", "json", "serve", "--config", file)
	if code != 1 {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	sawCause := false
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Errorf("stderr line is not JSON under --log-format json: %q", line)
			continue
		}
		b, _ := json.Marshal(v)
		if strings.Contains(string(b), "bind_port") {
			sawCause = true
		}
	}
	if !sawCause {
		t.Errorf("no JSON line names the refused key server.bind_port; stderr:\n%s", errOut)
	}
}

// TestServeBindChecked: a --bind that is no listen address, or whose port
// another listener of the file takes, is a usage error (exit 2) naming the
// flag, before anything starts.
func TestServeBindChecked(t *testing.T) {
	t.Setenv("CONTINUUM_CONFIG", "")
	file := filepath.Join(t.TempDir(), "admin.yaml")
	if err := os.WriteFile(file, []byte("admin:\n  bind_address: 127.0.0.1:9\n  token: abcdefghijklmnopqrstuvwxyz012345\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"serve", "--bind", "nonsense"},
		{"serve", "--demo", "--bind", "nonsense"},
		{"serve", "--config", file, "--bind", "127.0.0.1:9"},
	} {
		code, _, errOut := runCLIWithEnv(args...)
		if code != 2 || !strings.Contains(errOut, "--bind") {
			t.Errorf("%v: exit %d, stderr:\n%s", args, code, errOut)
		}
	}
}
