package top_test

import (
	"context"
	"testing"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/cli/top"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// TestOutputNeedsOnce: -o (the format of --once) without --once is a usage
// error, on a terminal too, where the full-screen program would start and
// a script asking for JSON would get it instead.
func TestOutputNeedsOnce(t *testing.T) {
	ios, _, _, _ := iostreams.Test()
	ios.SetTTY(true, true)
	f := &cmdutil.Factory{IOStreams: ios, Env: func(string) (string, bool) { return "", false }}
	ran := false
	cmd := top.NewCmdTop(f, func(context.Context, *top.Options) error { ran = true; return nil })
	cmd.SetArgs([]string{"--router", "http://127.0.0.1:1", "-o", "json"})
	cmd.SetOut(ios.Out)
	cmd.SetErr(ios.ErrOut)
	err := cmd.Execute()
	if err == nil || ran {
		t.Errorf("-o json without --once on a terminal: err %v, ran the interactive program %v; want a usage error", err, ran)
	}
}
