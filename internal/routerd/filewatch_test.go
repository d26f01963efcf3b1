package routerd

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFileWatcher: writes to a file beside the watched one report nothing;
// an in-place edit, a replacement by rename, an edit of the replacement
// (after Rewatch) and a removal each report a change.
func TestFileWatcher(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "continuum.yaml")
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(file, "a: 1\n")
	w, err := newFileWatcher(newWatchedFiles(file))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	counter, counts := w.(interface{ readCount() int64 })
	sentinels := 0
	settle := func() {
		t.Helper()
		if !counts {
			for {
				select {
				case <-w.Changed():
					continue
				case <-time.After(100 * time.Millisecond):
				}
				return
			}
		}
		// A neighbour created makes the watcher read again. The first
		// read counted after a creation may be one already under way,
		// which may have taken only part of the change's events; the
		// one after it began when all of them were queued, and takes
		// them all. So two rounds: then every event is handled.
		for range 2 {
			before := counter.readCount()
			sentinels++
			write(filepath.Join(dir, fmt.Sprintf("sentinel-%d", sentinels)), "")
			for deadline := time.Now().Add(10 * time.Second); counter.readCount() == before; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("a created neighbour was never read")
				}
			}
		}
		for {
			select {
			case <-w.Changed():
			default:
				return
			}
		}
	}
	expect := func(what string, want bool) {
		t.Helper()
		wait := 300 * time.Millisecond
		if want {
			wait = 10 * time.Second
		}
		select {
		case <-w.Changed():
			if !want {
				t.Fatalf("%s: reported a change", what)
			}
			// One change may come in more than one read of the events
			// (a write's truncation, data and close): the rest of it is
			// not the next step's.
			settle()
		case err := <-w.Errors():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(wait):
			if want {
				t.Fatalf("%s: no change reported", what)
			}
		}
	}
	// A neighbour appears (an entry in the directory: looked at, not a
	// change), then is written again and again: that does not even wake
	// the watcher.
	log := filepath.Join(dir, "continuum.log")
	write(log, "created")
	expect("a neighbour created", false)
	var before int64
	if counts {
		before = counter.readCount()
	}
	for i := range 50 {
		write(log, string(rune('a'+i%26)))
	}
	expect("a neighbour written", false)
	if counts {
		if n := counter.readCount() - before; n != 0 {
			t.Fatalf("a neighbour's writes woke the watcher %d times", n)
		}
	}

	write(file, "a: 2\n")
	expect("an edit in place", true)

	write(file+".tmp", "a: 3\n")
	expect("a new file beside it", false)
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
	expect("a replacement", true)
	w.Rewatch()
	write(file, "a: 4\n")
	expect("an edit of the replacement", true)

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	expect("a removal", true)
}
