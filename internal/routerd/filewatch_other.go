//go:build !linux

package routerd

import (
	"errors"

	"github.com/fsnotify/fsnotify"
)

// fsnotifyWatcher is the fileWatcher of other systems: their directories
// watched through fsnotify, its events filtered by watchedFiles.
type fsnotifyWatcher struct {
	w       *fsnotify.Watcher
	watched *watchedFiles
	changed chan struct{}
	errs    chan error
}

func newFileWatcher(watched *watchedFiles) (fileWatcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &fsnotifyWatcher{w: fw, watched: watched, changed: make(chan struct{}, 1), errs: make(chan error, 1)}
	var errs []error
	added := 0
	for _, dir := range watched.directories() {
		if err := fw.Add(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		added++
	}
	if added == 0 {
		_ = fw.Close()
		return nil, errors.Join(errs...)
	}
	go w.read()
	return w, nil
}

func (w *fsnotifyWatcher) Changed() <-chan struct{} { return w.changed }
func (w *fsnotifyWatcher) Errors() <-chan error     { return w.errs }
func (w *fsnotifyWatcher) Close() error             { return w.w.Close() }

// Rewatch resolves the files' symlinks again and watches any new
// directory of theirs.
func (w *fsnotifyWatcher) Rewatch() {
	w.watched.refresh()
	for _, dir := range w.watched.directories() {
		_ = w.w.Add(dir) // a directory watched already stays watched
	}
}

func (w *fsnotifyWatcher) read() {
	for {
		select {
		case ev, ok := <-w.w.Events:
			if !ok {
				return
			}
			if w.watched.concerns(ev.Name) {
				offer(w.changed, struct{}{})
			}
		case err, ok := <-w.w.Errors:
			if !ok {
				return
			}
			offer(w.errs, err)
		}
	}
}
