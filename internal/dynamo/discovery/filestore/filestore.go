// Package filestore is the discovery source for Dynamo's file key-value
// store (DYN_FILE_KV), for fleets on one machine: one directory per bucket
// under the root, one file per key named by the percent-encoded key, kept
// alive by its owner touching it. A file not touched for the TTL is not a
// live record. The source only reads.
//
// Imports: discovery, config, fleet and wire.
package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// Dynamo's file store constants.
const (
	// TTL is how long a file lives without a touch (Dynamo's DEFAULT_TTL,
	// the same as its etcd lease).
	TTL = 10 * time.Second
	// TempPrefix marks files being written; they are never records.
	TempPrefix = ".tmp_"
)

var buckets = []string{"v1/instances", "v1/mdc", "v1/event_channels"}

// Source reads one file store root.
type Source struct {
	root       string
	namespaces []string
	prefixes   []string
	logger     *slog.Logger

	ttl  time.Duration
	scan time.Duration
	now  func() time.Time
	// listLimit bounds the entries one scan reads from a bucket.
	listLimit int
}

var _ discovery.Source = (*Source)(nil)

// New builds a source over root for the given Dynamo namespaces.
func New(root string, namespaces []string, logger *slog.Logger) (*Source, error) {
	if root == "" {
		return nil, errors.New("file store: no root directory")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Source{root: filepath.Clean(root), namespaces: namespaces, logger: logger, ttl: TTL, scan: TTL / 3, now: time.Now, listLimit: maxListedFiles}
	for _, ns := range namespaces {
		p := wire.WatchPrefixes(ns)
		s.prefixes = append(s.prefixes, p[:]...)
	}
	return s, nil
}

// Name implements discovery.Source.
func (s *Source) Name() string { return config.SourceFile }

// keyOf maps a file path under a bucket to its etcd-shaped key, or "" for a
// file that is not a record of a watched namespace.
func (s *Source) keyOf(bucket, name string) string {
	if strings.HasPrefix(name, TempPrefix) {
		return ""
	}
	rel, err := url.PathUnescape(name)
	if err != nil {
		return ""
	}
	key := bucket + "/" + rel
	if strings.HasPrefix(key, wire.PrefixEventChannels) {
		// The scoped form and the Dynamo 1.2 form share the bucket: both
		// are read, told apart by parsing.
		// A channel of a topic the router does not subscribe to is not
		// held (the reducer would skip it): it does not use up the
		// keyspace's cap.
		if wire.WatchedChannelKey(key, s.namespaces) && !fleet.IgnoredChannel(key) {
			return key
		}
		return ""
	}
	for _, p := range s.prefixes {
		if strings.HasPrefix(key, p) {
			return key
		}
	}
	return ""
}

// fileState identifies a file's content without reading it: a keep-alive
// touch changes only the mtime; a rewrite (temp file and rename) changes the
// inode.
type fileState struct {
	ino  uint64
	size int64
}

// heldSet is what a pass holds (each key's file state and file name), with
// a count per bucket for the cap, and the buckets whose cap the reducer has
// been shown.
type heldSet struct {
	files     map[string]fileState
	names     map[string]string
	perBucket map[string]int
	full      map[string]bool
}

func newHeldSet() *heldSet {
	return &heldSet{files: map[string]fileState{}, names: map[string]string{}, perBucket: map[string]int{}, full: map[string]bool{}}
}

// bucketOf returns the bucket of a key ("v1/instances/...").
func bucketOf(key string) string {
	for _, b := range buckets {
		if strings.HasPrefix(key, b+"/") {
			return b
		}
	}
	return ""
}

func (h *heldSet) put(key, name string, st fileState) {
	if _, ok := h.files[key]; !ok {
		h.perBucket[bucketOf(key)]++
	}
	h.files[key] = st
	h.names[key] = name
}

func (h *heldSet) del(key string) bool {
	if _, ok := h.files[key]; !ok {
		return false
	}
	delete(h.files, key)
	delete(h.names, key)
	h.perBucket[bucketOf(key)]--
	return true
}

func stateOf(fi fs.FileInfo) fileState {
	st := fileState{size: fi.Size()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = uint64(sys.Ino) //nolint:unconvert // Ino is not uint64 on every platform
	}
	return st
}

// Run performs one pass: list every bucket, then follow changes.
func (s *Source) Run(ctx context.Context, sink discovery.Sink) error {
	if fi, err := os.Stat(s.root); err != nil {
		return fmt.Errorf("file store root %s: %w", s.root, err)
	} else if !fi.IsDir() {
		return &discovery.ConfigError{Err: fmt.Errorf("file store root %s: not a directory", s.root)}
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("file store watch: %w", err)
	}
	defer func() { _ = w.Close() }()
	// Watch the root and v1/ for buckets that appear later, and each bucket.
	for _, dir := range append([]string{"", "v1"}, buckets...) {
		if err := w.Add(filepath.Join(s.root, dir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file store watch %s: %w", filepath.Join(s.root, dir), err)
		}
	}
	held := newHeldSet()
	sink.ResyncBegin()
	s.scanAll(sink, held)
	sink.ResyncEnd()
	s.logger.Info("dynamo discovery seeded", "source", "file", "root", s.root, "records", len(held.files))

	tick := time.NewTicker(s.scan)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			return fmt.Errorf("file store watch: %w", err)
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("file store watch closed")
			}
			s.handle(w, ev, sink, held)
			sink.Flush()
		case <-tick.C:
			s.scanAll(sink, held)
			sink.Flush()
		}
	}
}

// handle applies one filesystem event.
func (s *Source) handle(w *fsnotify.Watcher, ev fsnotify.Event, sink discovery.Sink, held *heldSet) {
	dir, name := filepath.Split(ev.Name)
	bucket, ok := s.bucketOf(filepath.Clean(dir))
	if !ok {
		if ev.Has(fsnotify.Create) {
			s.follow(w, filepath.Clean(ev.Name), sink, held)
		}
		return
	}
	key := s.keyOf(bucket, name)
	if key == "" {
		return
	}
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		if held.del(key) {
			sink.Delete(key)
		}
		return
	}
	// A write rereads; a touch (chmod) only proves the file is alive.
	s.refresh(ev.Name, key, ev.Has(fsnotify.Write) || ev.Has(fsnotify.Create), sink, held)
}

// follow watches a directory created under the root, if it is v1/ or a
// bucket, and reads what it holds: files (and, in v1/, buckets) made
// before its watch was added sent no event. A store made after the source
// started gets v1/ and its buckets this way; without their watches every
// change would wait for the next scan.
func (s *Source) follow(w *fsnotify.Watcher, dir string, sink discovery.Sink, held *heldSet) {
	if dir == filepath.Join(s.root, "v1") {
		if err := w.Add(dir); err != nil {
			return // gone again, or unwatchable: the scans still read it
		}
		for _, b := range buckets {
			s.follow(w, filepath.Join(s.root, b), sink, held)
		}
		return
	}
	for _, b := range buckets {
		if dir == filepath.Join(s.root, b) {
			if err := w.Add(dir); err == nil {
				s.scanBucket(b, sink, held)
			}
		}
	}
}

func (s *Source) bucketOf(dir string) (string, bool) {
	for _, b := range buckets {
		if dir == filepath.Join(s.root, b) {
			return b, true
		}
	}
	return "", false
}

// scanAll lists every bucket: new or changed live files are put, files gone
// or older than the TTL are deleted.
func (s *Source) scanAll(sink discovery.Sink, held *heldSet) {
	for _, b := range buckets {
		s.scanBucket(b, sink, held)
	}
}

func (s *Source) scanBucket(bucket string, sink discovery.Sink, held *heldSet) {
	dir := filepath.Join(s.root, bucket)
	present := map[string]bool{}
	truncated, err := readDirBounded(dir, s.listLimit, func(e fs.DirEntry) {
		if !e.Type().IsRegular() {
			return
		}
		key := s.keyOf(bucket, e.Name())
		if key == "" {
			return
		}
		present[key] = true
		s.refresh(filepath.Join(dir, e.Name()), key, false, sink, held)
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.logger.Warn("file store bucket unreadable", "dir", dir, "err", err)
		return
	}
	for key := range held.files {
		if !strings.HasPrefix(key, bucket+"/") || present[key] {
			continue
		}
		if truncated {
			// The listing stopped at its bound before the end of the
			// bucket: a held key it did not reach may still have its
			// file. Its file is looked at instead, and the key dropped
			// only if that is gone or expired; were every key not listed
			// dropped, the keys past the bound (read from their events)
			// would come and go with each scan.
			s.refresh(filepath.Join(dir, held.names[key]), key, false, sink, held)
			continue
		}
		if held.del(key) {
			sink.Delete(key)
		}
	}
}

// refresh reads a file if it is live and new or changed, and deletes its key
// once it has outlived the TTL.
func (s *Source) refresh(path, key string, force bool, sink discovery.Sink, held *heldSet) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		if held.del(key) {
			sink.Delete(key)
		}
		return
	}
	if s.now().Sub(fi.ModTime()) > s.ttl {
		if held.del(key) {
			sink.Delete(key)
		}
		return
	}
	st := stateOf(fi)
	old, isHeld := held.files[key]
	if isHeld && old == st && !force {
		return // touched, not rewritten
	}
	if b := bucketOf(key); !isHeld && held.perBucket[b] >= fleet.MaxRecordsPerKeyspace {
		// The reducer holds what this pass holds, so it refuses a new key
		// here. The first one of a bucket is put all the same, so that the
		// reducer reports the keyspace over capacity (it does once, until
		// the next pass); the others are not read. None is held: each is
		// looked at again on its next event or scan, and taken then if a
		// held key has left.
		if !held.full[b] {
			held.full[b] = true
			if value, err := readCapped(path); err == nil {
				sink.Put(key, value)
			}
		}
		return
	}
	value, err := readCapped(path)
	if err != nil {
		return // gone between stat and read: the remove event follows
	}
	held.put(key, filepath.Base(path), st)
	sink.Put(key, value)
}

// maxListedFiles bounds the directory entries read from one bucket: twice
// what the reducer holds per keyspace, so temp files cannot crowd out keys.
const maxListedFiles = 2 * fleet.MaxRecordsPerKeyspace

// readDirBounded visits at most limit entries of dir, reading them in
// chunks so a huge directory is never listed whole. truncated is true when
// it stopped at limit with entries possibly left unread.
func readDirBounded(dir string, limit int, fn func(fs.DirEntry)) (truncated bool, err error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	seen := 0
	for seen < limit {
		entries, err := f.ReadDir(min(1024, limit-seen))
		for _, e := range entries {
			fn(e)
		}
		seen += len(entries)
		if errors.Is(err, io.EOF) || len(entries) == 0 {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}

// readCapped reads at most one byte more than the reducer accepts, so an
// oversized file is refused without being read whole.
func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return io.ReadAll(io.LimitReader(f, fleet.MaxRecordBytes+1))
}
