package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/iostreams"
)

func runCLI(args ...string) (int, string, string) {
	ios, _, out, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Build: cmdutil.BuildInfo{Version: "v1.2.3", Commit: "abc123", GoVersion: "go1.26"}}
	code := cli.Run(context.Background(), f, args)
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := runCLI(args...)
		if code != 0 || out != "continuum v1.2.3 (commit abc123, go1.26)\n" {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	tests := [][]string{
		{"no-such-command"},
		{"--log-level", "loud", "version"},
		{"--log-format", "xml", "version"},
		{"config", "validate", "--no-such-flag"},
		{"config", "show", "-o", "toml"},
		// A word after a command group that is none of its subcommands
		// (cobra would show the group's help and exit 0).
		{"config", "valdate", "continuum.yaml"},
		{"kv-inspect", "tokenise"},
		{"completion", "tcsh"},
		// Argument counts and required flags.
		{"config", "diff", "a.yaml"},
		{"tail-load", "a", "b"},
		{"kv-inspect", "tokenize", "--text", "hi"},
		// Durations below zero, or zero where zero is not the default.
		{"serve", "--shutdown-grace", "-5s"},
		{"serve", "--shutdown-delay", "-1s"},
		{"discover", "--timeout", "0"},
		{"serve", "--demo", "--config", "continuum.yaml"},
	}
	for _, args := range tests {
		code, _, errOut := runCLI(args...)
		if code != cmdutil.ExitUsage || !strings.Contains(errOut, "error:") || !strings.Contains(errOut, "--help") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	// A group alone shows its help.
	if code, out, _ := runCLI("config"); code != 0 || !strings.Contains(out, "validate") {
		t.Errorf("config alone: exit %d:\n%s", code, out)
	}
}

// TestErrorAsJSON: with --log-format json, a failing command's error is
// one JSON log line (as the process's other lines are), usage errors
// included; with text it is the plain line.
func TestErrorAsJSON(t *testing.T) {
	for _, c := range []struct {
		args  []string
		code  int
		usage bool
	}{
		{[]string{"--log-format", "json", "config", "show", "/nonexistent/continuum.yaml"}, cmdutil.ExitUsage, false},
		{[]string{"--log-format", "json", "serve", "--shutdown-grace", "-5s"}, cmdutil.ExitUsage, true},
	} {
		code, _, errOut := runCLI(c.args...)
		var line struct {
			Level, Msg, Command, Err string
			ExitCode                 int  `json:"exit_code"`
			Usage                    bool `json:"usage"`
		}
		if err := json.Unmarshal([]byte(errOut), &line); err != nil || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: stderr %q is not one JSON line: %v", c.args, errOut, err)
			continue
		}
		if code != c.code || line.Level != "ERROR" || line.Msg != "command failed" || line.Err == "" || line.ExitCode != c.code ||
			line.Usage != c.usage || !strings.HasPrefix(line.Command, "continuum ") {
			t.Errorf("%v: exit %d, %+v", c.args, code, line)
		}
	}
	if code, _, errOut := runCLI("config", "show", "/nonexistent/continuum.yaml"); code != cmdutil.ExitUsage || !strings.HasPrefix(errOut, "error: ") {
		t.Errorf("text: exit %d, %q", code, errOut)
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := runCLI("--help")
	if code != 0 || !strings.Contains(out, "config") || !strings.Contains(out, "--log-format") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	code, out, _ = runCLI("config", "validate", "--help")
	if code != 0 || !strings.Contains(out, "Exit status") || !strings.Contains(out, "--strict") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestBuildFallsBackToBuildInfo(t *testing.T) {
	b := cli.Build()
	if b.Version == "" || b.Commit == "" || !strings.HasPrefix(b.GoVersion, "go") {
		t.Errorf("build info incomplete: %+v", b)
	}
}
