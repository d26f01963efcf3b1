package routerd

import (
	"log/slog"
	"testing"
	"testing/synctest"
	"time"
)

// TestStopPartsOneGrace: parts stopped together are cancelled at once and
// waited for under one grace, so a transition that stops several parts
// that ignore their cancellation takes one StopGrace, not one each; parts
// that stop at once cost nothing.
func TestStopPartsOneGrace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		cancelled := 0
		stuck := func(name string) *part {
			done := make(chan struct{})
			go func() { <-release; close(done) }()
			return &part{name: name, cancel: func() { cancelled++ }, done: done}
		}
		prompt := func(name string) *part {
			done := make(chan struct{})
			return &part{name: name, cancel: func() { cancelled++; close(done) }, done: done}
		}
		logger := slog.New(slog.DiscardHandler)
		start := time.Now()
		stopParts(logger, prompt("a"), nil, prompt("b"))
		if d := time.Since(start); d != 0 {
			t.Errorf("parts that stop at once took %v", d)
		}
		start = time.Now()
		stopParts(logger, stuck("watcher"), nil, stuck("load"), prompt("kv"), stuck("bus"))
		if d := time.Since(start); d != StopGrace {
			t.Errorf("three stuck parts took %v, want one grace (%v)", d, StopGrace)
		}
		if cancelled != 6 {
			t.Errorf("%d parts cancelled, want 6", cancelled)
		}
		close(release)
	})
}
