package routerd

import (
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
)

// watchedFiles tells which events of a watched directory may change some
// files in it. A file is watched through its directory, since editors and
// volumes replace it by renaming another over it (which a watch of the
// file itself would lose), but a directory also reports every write to
// the files beside the watched one: a log written next to the
// configuration reports hundreds a second. Each event restarts the wait
// that gathers an edit's events into one reload, so such a neighbour kept
// an edit from ever being applied, and cost the serving process a wake-up
// per write. The events that count are those naming a watched file, the
// file a watched symlink points to, or the hidden entries ("..data" and
// its timestamped directories) through which a Kubernetes ConfigMap or
// Secret volume swaps all its files at once.
type watchedFiles struct {
	files []string
	names map[string]bool
}

func newWatchedFiles(files ...string) *watchedFiles {
	w := &watchedFiles{files: files}
	w.refresh()
	return w
}

// refresh resolves the files' symlinks again: a reload may follow a link
// that now points elsewhere.
func (w *watchedFiles) refresh() {
	w.names = map[string]bool{}
	for _, f := range w.files {
		w.names[filepath.Clean(f)] = true
		if target, err := filepath.EvalSymlinks(f); err == nil {
			w.names[filepath.Clean(target)] = true
		}
	}
}

// concerns reports whether ev may have changed one of the files.
func (w *watchedFiles) concerns(ev fsnotify.Event) bool {
	return w.names[filepath.Clean(ev.Name)] || strings.HasPrefix(filepath.Base(ev.Name), "..")
}
