package main_test

import (
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/testutil"
)

// TestDemoSecondSignalAfterSIGHUP: `serve --demo` takes SIGHUP (its
// terminal closed) as the signal to stop, as SIGTERM; a second signal
// (SIGTERM, from an operator who will not wait out --shutdown-delay or the
// drain) then ends it at once, as after a first SIGTERM.
func TestDemoSecondSignalAfterSIGHUP(t *testing.T) {
	t.Parallel()
	p := start(t, "serve", "--demo", "--bind", "127.0.0.1:0", "--shutdown-delay", "60s", "--log-format", "json")
	testutil.Eventually(t, 30*time.Second, "serve ready", func() bool { return servingRe.MatchString(p.errOut()) })
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 10*time.Second, "shutting down", func() bool {
		return shutdownRe.MatchString(p.errOut())
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("serve --demo still runs 5 s after SIGHUP then SIGTERM (the SIGTERM was taken as a first signal)")
	}
}

var shutdownRe = regexp.MustCompile(`"msg":"shutting down`)
