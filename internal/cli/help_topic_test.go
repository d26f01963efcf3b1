package cli_test

import (
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
)

// TestHelpUnknownTopicIsUsageError: `help` with a topic that names no
// command is a usage error (exit 2), as the same words without help are, so
// a typo in a scripted help lookup does not pass; a topic that names one
// shows its help.
func TestHelpUnknownTopicIsUsageError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"help", "no-such-command"},
		{"help", "config", "valdate"},
	} {
		code, _, errOut := runCLI(args...)
		if code != cmdutil.ExitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, cmdutil.ExitUsage, errOut)
		}
	}
	for _, args := range [][]string{{"help"}, {"help", "config", "validate"}} {
		code, out, errOut := runCLI(args...)
		if code != cmdutil.ExitOK || !strings.Contains(out, "Usage:") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}
