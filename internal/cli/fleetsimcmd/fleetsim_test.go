package fleetsimcmd_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/cli/fleetsimcmd"
	"github.com/continuum-router/continuum/internal/fleetsim"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

// TestWriteConfigReplacesTheFile: --write-config replaces the file whole
// once the fleet is up: a previous run's file, still open in a reader, is
// read whole by it, the path holds the fleet's configuration, and no
// temporary file stays beside it.
func TestWriteConfigReplacesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "continuum.yaml")
	old := strings.Repeat("# a previous run's configuration\n", 200)
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Close() }()

	ios, _, out, errOut := iostreams.Test()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var config string
	var entries []os.DirEntry
	cmd := fleetsimcmd.NewCmdFleetSim(&cmdutil.Factory{IOStreams: ios}, func(ctx context.Context, o *fleetsimcmd.Options) error {
		o.Ready = func(d *fleetsim.Demo) {
			config = d.Config
			entries, _ = os.ReadDir(dir)
			cancel()
		}
		return fleetsimcmd.Run(ctx, o)
	})
	cmd.SetArgs([]string{"--prefill", "1", "--decode", "1", "--router-bind", "127.0.0.1:0", "--write-config", path})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("%v\n%s%s", err, out, errOut)
	}
	if config == "" {
		t.Fatalf("the fleet never came up:\n%s%s", out, errOut)
	}
	if got, err := io.ReadAll(reader); err != nil || string(got) != old {
		t.Errorf("the reader of the previous file read %d bytes (%v), want it whole (%d): it was rewritten in place", len(got), err, len(old))
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != config {
		t.Errorf("%s holds %q (%v), want the fleet's configuration", path, got, err)
	}
	if len(entries) != 1 {
		t.Errorf("beside the configuration: %v", entries)
	}
	if !strings.Contains(out.String(), "router configuration: "+path) {
		t.Errorf("output:\n%s", out)
	}
}

// TestBadValuesNameTheirFlag: a value outside a flag's set is a usage
// error naming the flag as typed.
func TestBadValuesNameTheirFlag(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--store bogus", `--store "bogus" is not one of file, etcd`},
		{"--card-dialect bogus", `--card-dialect "bogus" is not one of`},
	} {
		ios, _, _, _ := iostreams.Test()
		cmd := fleetsimcmd.NewCmdFleetSim(&cmdutil.Factory{IOStreams: ios}, func(context.Context, *fleetsimcmd.Options) error { return nil })
		cmd.SetArgs(strings.Fields(tc.args))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if cmdutil.ExitCode(err) != cmdutil.ExitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.args, err)
		}
	}
}
