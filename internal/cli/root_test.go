package cli_test

import (
	"context"
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
