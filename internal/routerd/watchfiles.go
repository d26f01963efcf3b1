package routerd

import (
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// watchedFiles tells which changes in a directory may change some files in
// it. A file is watched through its directory, since editors and volumes
// replace it by renaming another over it (which a watch of the file alone
// would lose), but a directory also reports changes to the files beside
// the watched one: a log written next to the configuration reports
// hundreds a second. Each change restarts the wait that gathers an edit's
// changes into one reload, so counting those would keep an edit from being
// applied for as long as the neighbour is written. The changes that count are those naming a watched file,
// the file a watched symlink points to, or the hidden entries ("..data"
// and its timestamped directories) through which a Kubernetes ConfigMap or
// Secret volume swaps all its files at once.
type watchedFiles struct {
	files []string

	mu    sync.Mutex
	names map[string]bool
	// dirs are the directories to watch: the files' and their targets'.
	dirs []string
}

func newWatchedFiles(files ...string) *watchedFiles {
	w := &watchedFiles{files: files}
	w.refresh()
	return w
}

// refresh resolves the files' symlinks again: a reload may follow a link
// that now points elsewhere.
func (w *watchedFiles) refresh() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.names = map[string]bool{}
	w.dirs = nil
	add := func(path string) {
		path = filepath.Clean(path)
		w.names[path] = true
		if dir := filepath.Dir(path); !slices.Contains(w.dirs, dir) {
			w.dirs = append(w.dirs, dir)
		}
	}
	for _, f := range w.files {
		add(f)
		if target, err := filepath.EvalSymlinks(f); err == nil {
			add(target)
		}
	}
}

// concerns reports whether a change to path may have changed one of the
// files.
func (w *watchedFiles) concerns(path string) bool {
	if strings.HasPrefix(filepath.Base(path), "..") {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.names[filepath.Clean(path)]
}

// directories are the directories to watch: the files' and their
// targets'.
func (w *watchedFiles) directories() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dirs
}

// fileWatcher reports, on Changed, that some watched files may have
// changed (one report for any number of changes not yet received), and on
// Errors what went wrong watching them. Rewatch follows the files again
// after they were replaced (call it before reading them). newFileWatcher
// makes one (inotify on Linux, fsnotify elsewhere).
type fileWatcher interface {
	Changed() <-chan struct{}
	Errors() <-chan error
	Rewatch()
	Close() error
}

// offer sends v on ch unless ch is full: a change (or an error) already
// waiting there says as much as another would.
func offer[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}
