//go:build linux

package routerd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
)

// inotify masks. A directory is watched for the entries that appear,
// disappear or are renamed (an editor's or a volume's replacement), not for
// writes to the files in it: those would wake the router for every line a
// log beside the configuration gets. A file is watched (through its
// symlinks) for writes and for being removed or replaced.
const (
	dirMask  = syscall.IN_CREATE | syscall.IN_DELETE | syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_ONLYDIR
	fileMask = syscall.IN_MODIFY | syscall.IN_CLOSE_WRITE | syscall.IN_ATTRIB | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF
)

// inotifyWatcher is the Linux fileWatcher: one inotify instance watching
// the files and their directories.
type inotifyWatcher struct {
	f *os.File
	// fd is f's descriptor, kept apart: f.Fd would put it in blocking
	// mode and take it out of the poller.
	fd      int
	watched *watchedFiles
	changed chan struct{}
	errs    chan error

	// reads counts the reads that returned events, each counted once its
	// change is offered (tests: a neighbour's writes wake nothing; a
	// change's last event has been handled).
	reads atomic.Int64

	mu sync.Mutex
	// dirs names the directory of each directory watch, by descriptor;
	// files holds the file watches.
	dirs  map[int32]string
	files map[int32]bool
}

func newFileWatcher(watched *watchedFiles) (fileWatcher, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &inotifyWatcher{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, watched: watched,
		changed: make(chan struct{}, 1), errs: make(chan error, 1), dirs: map[int32]string{}, files: map[int32]bool{}}
	if err := w.add(); err != nil {
		_ = w.f.Close()
		return nil, err
	}
	go w.read()
	return w, nil
}

func (w *inotifyWatcher) Changed() <-chan struct{} { return w.changed }
func (w *inotifyWatcher) Errors() <-chan error     { return w.errs }
func (w *inotifyWatcher) Close() error             { return w.f.Close() }
func (w *inotifyWatcher) readCount() int64         { return w.reads.Load() }

// Rewatch watches the files as they are now: a replaced file is a new
// one, and a symlink may point elsewhere. A descriptor that is watched
// already keeps its watch.
func (w *inotifyWatcher) Rewatch() {
	w.watched.refresh()
	if err := w.add(); err != nil {
		w.report(err)
	}
}

// add watches the watched directories and the files that exist; it fails
// only when no directory can be watched.
func (w *inotifyWatcher) add() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for _, dir := range w.watched.directories() {
		wd, err := syscall.InotifyAddWatch(w.fd, dir, dirMask)
		if err != nil {
			errs = append(errs, fmt.Errorf("watching %s: %w", dir, err))
			continue
		}
		w.dirs[int32(wd)] = dir
	}
	if len(w.dirs) == 0 {
		return errors.Join(errs...)
	}
	for _, f := range w.watched.files {
		// A file that does not exist now is seen when it appears in its
		// directory.
		if wd, err := syscall.InotifyAddWatch(w.fd, f, fileMask); err == nil {
			w.files[int32(wd)] = true
		}
	}
	return nil
}

// read reads the events until the watcher is closed.
func (w *inotifyWatcher) read() {
	buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.report(fmt.Errorf("reading inotify events: %w", err))
			}
			return
		}
		if w.relevant(buf[:n]) {
			offer(w.changed, struct{}{})
		}
		w.reads.Add(1)
	}
}

// relevant reports whether the events in b say a watched file may have
// changed.
func (w *inotifyWatcher) relevant(b []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	found := false
	for len(b) >= syscall.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		size := int(binary.NativeEndian.Uint32(b[12:]))
		end := syscall.SizeofInotifyEvent + size
		if end > len(b) {
			break
		}
		name := b[syscall.SizeofInotifyEvent:end]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		b = b[end:]
		switch {
		case mask&syscall.IN_Q_OVERFLOW != 0:
			found = true // events were lost: any may have been one
		case mask&syscall.IN_IGNORED != 0:
			// The watch is gone (its file or directory was removed or
			// replaced); what replaced it shows in its directory.
			delete(w.dirs, wd)
			delete(w.files, wd)
		case w.files[wd]:
			found = true
		default:
			if dir, ok := w.dirs[wd]; ok && (len(name) == 0 || w.watched.concerns(filepath.Join(dir, string(name)))) {
				found = true
			}
		}
	}
	return found
}

func (w *inotifyWatcher) report(err error) { offer(w.errs, err) }
