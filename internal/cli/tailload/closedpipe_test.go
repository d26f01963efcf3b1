package tailload_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/iostreams"
)

// closedPipeChild names the endpoint a re-executed test binary tails with
// its real standard output (a pipe whose reader goes away).
const closedPipeChild = "CONTINUUM_TAILLOAD_CLOSED_PIPE_ENDPOINT"

// TestTailLoadClosedPipeFails: `tail-load ... | head -1` is a write to a
// closed pipe, which the README names beside a full disk: tail-load stops,
// prints its summary and exits 1, rather than being killed by SIGPIPE
// (exit 141, no summary) at its next line. The tail runs in a child
// process, since the runtime raises SIGPIPE only for a process's own
// standard output.
func TestTailLoadClosedPipeFails(t *testing.T) {
	if ep := os.Getenv(closedPipeChild); ep != "" {
		f := &cmdutil.Factory{IOStreams: iostreams.System(), Env: os.LookupEnv}
		os.Exit(cli.Run(context.Background(), f, []string{"tail-load", ep}))
	}
	pub := publishingSamples(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestTailLoadClosedPipeFails$")
	cmd.Env = append(os.Environ(), closedPipeChild+"="+pub.Endpoint, "CONTINUUM_CONFIG=")
	cmd.Stdout, cmd.Stderr = w, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// As head -1: one line, then the reader is gone.
	line, rerr := bufio.NewReader(r).ReadString('\n')
	_ = r.Close()
	if rerr != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("no line from tail-load: %v", rerr)
	}
	if !strings.Contains(line, "pub=9") {
		t.Errorf("first line %q", line)
	}
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("tail-load still running 20s after its standard output closed; stderr:\n%s", errOut.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("tail-load into a closed pipe: %v, want exit 1; stderr:\n%s", err, errOut.String())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("tail-load into a closed pipe was killed by %v, want exit 1 with its summary; stderr:\n%s", ws.Signal(), errOut.String())
	}
	if ee.ExitCode() != cmdutil.ExitFailure {
		t.Errorf("exit %d, want %d; stderr:\n%s", ee.ExitCode(), cmdutil.ExitFailure, errOut.String())
	}
	if !strings.Contains(errOut.String(), "tail-load: ") || !strings.Contains(errOut.String(), " messages: ") {
		t.Errorf("no summary on stderr:\n%s", errOut.String())
	}
}
