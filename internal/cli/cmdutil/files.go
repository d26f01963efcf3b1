package cmdutil

import (
	"errors"
	"os"
	"path/filepath"
)

// WriteFileAtomic writes data to path whole or not at all: into a temporary
// file in path's directory, synced, then renamed over path. A reader that
// waits for the file (a script polling for it, serve --config) finds it
// absent or complete, never empty or cut short, and a reader of the file
// it replaces keeps reading the old one whole. The file gets perm. A path
// that is a symbolic link is written through: the file it leads to is
// replaced and the link stays. Its error names path, not the temporary
// file.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	target := path
	if t, err := filepath.EvalSymlinks(path); err == nil {
		target = t
	}
	if err := writeFileAtomic(target, data, perm); err != nil {
		var pe *os.PathError
		var le *os.LinkError
		switch {
		case errors.As(err, &pe):
			err = pe.Err
		case errors.As(err, &le):
			err = le.Err
		}
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
