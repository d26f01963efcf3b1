package artifact

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/continuum-router/continuum/internal/telemetry"
)

// Loader bounds: how many artifacts are held and loaded at once, their
// total bytes, and how long a failure is remembered, so that the model
// cards of a fleet cannot make the router fetch or hold without limit.
const (
	// MaxLoaded bounds the artifacts held (loaded, loading or queued).
	MaxLoaded = 16
	// MaxConcurrentLoads is the number of loads run at once.
	MaxConcurrentLoads = 2
	// MaxTotalBytes bounds the bytes of the loaded artifacts together.
	MaxTotalBytes = 256 << 20
	// RetryAfter is how long a failed artifact stays failed.
	RetryAfter = 5 * time.Minute
	// LoadTimeout bounds one fetch and build: a
	// source that trickles bytes cannot hold a load slot forever.
	LoadTimeout = 2 * time.Minute
	// maxFailures bounds the failures remembered for RetryAfter; past it the
	// oldest is forgotten.
	maxFailures = 256
	// maxNoted bounds the (artifact, result) and model keys logged once.
	maxNoted = 4096
)

// BuildFunc turns an artifact's verified bytes into what its consumer uses
// (a tokenizer, a chat template). It runs on a load slot; the size charged
// against MaxTotalBytes is len(data).
type BuildFunc func(ref Ref, data []byte) (any, error)

// LoaderOptions configure a Loader.
type LoaderOptions struct {
	Policy Policy
	// Client fetches http(s):// and hf:// artifacts (default
	// http.DefaultClient); the per-load timeout is LoadTimeout.
	Client *http.Client
	// Build is required.
	Build   BuildFunc
	Logger  *slog.Logger
	Metrics *telemetry.ArtifactMetrics
	// Now is the clock (default time.Now).
	Now func() time.Time
	// KeepCache leaves the cache's unpinned blobs where they are: a tool
	// sharing a router's cache directory (kv-inspect) must not prune what
	// the router's own pins name.
	KeepCache bool
}

// Key identifies a loaded artifact: content-addressed, and per slot format
// because the same bytes build differently as a tokenizer or a template.
type Key struct {
	Format   string
	Checksum Checksum
}

func keyOf(r Ref) Key { return Key{Format: r.Format, Checksum: r.Checksum} }

type state int

const (
	stateQueued state = iota
	stateLoading
	stateReady
)

type entry struct {
	ref   Ref
	state state
	value any
	size  int64
	// lastUsed is the loader's use counter at the last Get (LRU order
	// without reading the clock on every request).
	lastUsed uint64
}

type failure struct {
	err error
	at  time.Time
}

// Loader loads pinned artifacts in the background, shared by Key: at most
// MaxLoaded held, MaxConcurrentLoads at once, MaxTotalBytes together (the
// least recently used loaded artifact is evicted to make room), and a
// failed artifact is retried after RetryAfter. Get never blocks on I/O.
type Loader struct {
	client  *http.Client
	build   BuildFunc
	logger  *slog.Logger
	metrics *telemetry.ArtifactMetrics
	now     func() time.Time
	// keepCache: the cache is not pruned (LoaderOptions.KeepCache).
	keepCache bool
	policy    atomic.Pointer[Policy]
	wake      chan struct{}
	running   atomic.Bool
	// maxLoaded and maxBytes are MaxLoaded and MaxTotalBytes (tests narrow them).
	maxLoaded int
	maxBytes  int64

	mu       sync.Mutex
	entries  map[Key]*entry
	queue    []Key
	bytes    int64
	uses     uint64
	failures map[Key]failure
	noted    map[string]bool
}

// NewLoader returns a loader; call Run to load.
func NewLoader(o LoaderOptions) (*Loader, error) {
	if o.Build == nil {
		return nil, errors.New("artifact loader needs a Build function")
	}
	l := &Loader{client: o.Client, build: o.Build, logger: o.Logger, metrics: o.Metrics, now: o.Now, keepCache: o.KeepCache,
		wake: make(chan struct{}, 1), maxLoaded: MaxLoaded, maxBytes: MaxTotalBytes, entries: map[Key]*entry{}, failures: map[Key]failure{}, noted: map[string]bool{}}
	if l.client == nil {
		l.client = http.DefaultClient
	}
	if l.logger == nil {
		l.logger = slog.New(slog.DiscardHandler)
	}
	if l.now == nil {
		l.now = time.Now
	}
	p := o.Policy
	l.policy.Store(&p)
	l.pruneCache(&p)
	return l, nil
}

// pruneCache removes from the policy's cache the blobs no pin names (a
// reload that unpinned them, or a cache directory kept from an earlier
// run) and temporary files a download left an hour or more ago: the cache
// holds the pinned artifacts and nothing else, so its size is bounded by
// the pins (each at most MaxArtifactBytes). Failures are logged.
func (l *Loader) pruneCache(p *Policy) {
	if p.CacheDir == "" || l.keepCache {
		return
	}
	dir := filepath.Join(p.CacheDir, "blobs")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			l.logger.Warn("artifact cache not pruned", "dir", dir, "error", err)
		}
		return
	}
	pinned := make(map[string]bool, len(p.pinned))
	for c := range p.pinned {
		pinned[c.Hex()] = true
	}
	for _, e := range entries {
		name := e.Name()
		if pinned[name] || !e.Type().IsRegular() {
			continue
		}
		if strings.HasPrefix(name, ".tmp-") {
			if info, err := e.Info(); err != nil || l.now().Sub(info.ModTime()) < time.Hour {
				continue // a download may be writing it
			}
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			l.logger.Warn("artifact cache blob not removed", "blob", name, "error", err)
		}
	}
}

// SetPolicy applies a new dynamo.kv policy at once: loaded artifacts whose
// checksum is no longer pinned are dropped (their cached blobs too), and when a source setting
// changed (allow_http, allow_hf, the cache, the Hub's endpoint or token)
// remembered failures are forgotten: a changed source deserves a new try.
// A policy whose sources are as they were (a reload that changed
// something else, or only the pins) keeps them until RetryAfter.
func (l *Loader) SetPolicy(p Policy) {
	prev := l.policy.Swap(&p)
	l.pruneCache(&p)
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, e := range l.entries {
		if !p.Pinned(k.Checksum) && e.state == stateReady {
			l.drop(k, e)
		}
	}
	if prev == nil || prev.sources() != p.sources() {
		clear(l.failures)
	}
}

// Get returns the built artifact, or why it is not available:
// ErrUnpinned (nothing is fetched), ErrDisallowed, ErrUnsupported,
// ErrTooLarge, ErrPending (queued or loading: ask again later),
// ErrOverCapacity, or the load's own failure until RetryAfter has passed.
// model names the model in the once-per-model log of unpinned artifacts.
func (l *Loader) Get(model string, ref Ref) (any, error) {
	vals, err := l.Resolve(model, ref)
	return vals[0], err
}

// Resolve gets every artifact a model needs. When some are unpinned it
// logs them once for the model (slot, URI kind, declared checksum) and
// returns ErrUnpinned; the pinned ones are still queued. Otherwise the
// error is the first failure, else ErrPending while any is loading.
func (l *Loader) Resolve(model string, refs ...Ref) ([]any, error) {
	p := l.policy.Load()
	vals := make([]any, len(refs))
	var unpinned []Ref
	var firstErr, pending error
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, ref := range refs {
		if !p.Pinned(ref.Checksum) {
			unpinned = append(unpinned, ref)
			l.countOnce(ref, telemetry.ArtifactUnpinned)
			continue
		}
		v, err := l.getLocked(p, ref)
		switch {
		case err == nil:
			vals[i] = v
		case errors.Is(err, ErrPending):
			pending = err
		case firstErr == nil:
			firstErr = err
		}
	}
	if len(unpinned) > 0 {
		l.logUnpinned(model, unpinned)
		return vals, fmt.Errorf("%w: %s", ErrUnpinned, describe(unpinned))
	}
	if firstErr != nil {
		return vals, firstErr
	}
	return vals, pending
}

// ResolveDeclared resolves a card's declarations (CardSlots). A
// declaration that did not parse is counted once (unsupported or
// malformed), logged once per model, and its error returned before any
// other; the rest resolve as in Resolve. vals[i] belongs to ds[i].
func (l *Loader) ResolveDeclared(model string, ds []Declared) ([]any, error) {
	var bad []Declared
	refs := make([]Ref, 0, len(ds))
	idx := make([]int, 0, len(ds))
	for i, d := range ds {
		if d.Err != nil {
			bad = append(bad, d)
			continue
		}
		refs = append(refs, d.Ref)
		idx = append(idx, i)
	}
	got, err := l.Resolve(model, refs...)
	vals := make([]any, len(ds))
	for j, i := range idx {
		vals[i] = got[j]
	}
	if len(bad) == 0 {
		return vals, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range bad {
		if l.note("d\x00" + model + "\x00" + string(d.Slot) + "\x00" + d.Err.Error()) {
			l.count(Result(d.Err))
			l.logger.Warn("model artifact slot not usable", "model", model, "slot", string(d.Slot), "err", d.Err)
		}
	}
	return vals, bad[0].Err
}

func (l *Loader) getLocked(p *Policy, ref Ref) (any, error) {
	if err := p.admit(ref); err != nil {
		l.countOnce(ref, Result(err))
		return nil, err
	}
	k := keyOf(ref)
	if e, ok := l.entries[k]; ok {
		if e.state != stateReady {
			return nil, fmt.Errorf("%w: %s %s", ErrPending, ref.Slot, ref.Checksum)
		}
		l.uses++
		e.lastUsed = l.uses
		return e.value, nil
	}
	if f, ok := l.failures[k]; ok {
		if wait := f.at.Add(RetryAfter).Sub(l.now()); wait > 0 {
			return nil, fmt.Errorf("%w (retry in %s)", f.err, wait.Round(time.Second))
		}
		delete(l.failures, k)
	}
	if len(l.entries) >= l.maxLoaded && !l.evictLRU() {
		l.countOnce(ref, telemetry.ArtifactOverCapacity)
		return nil, fmt.Errorf("%w: %d artifacts held", ErrOverCapacity, l.maxLoaded)
	}
	l.entries[k] = &entry{ref: ref, state: stateQueued}
	l.queue = append(l.queue, k)
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil, fmt.Errorf("%w: %s %s", ErrPending, ref.Slot, ref.Checksum)
}

// evictLRU drops the least recently used loaded artifact; false when none
// is loaded (all are queued or loading).
func (l *Loader) evictLRU() bool {
	var victim Key
	var ve *entry
	for k, e := range l.entries {
		if e.state == stateReady && (ve == nil || e.lastUsed < ve.lastUsed) {
			victim, ve = k, e
		}
	}
	if ve == nil {
		return false
	}
	l.drop(victim, ve)
	return true
}

func (l *Loader) drop(k Key, e *entry) {
	if e.state == stateReady {
		l.bytes -= e.size
	}
	delete(l.entries, k)
}

// Run loads queued artifacts on MaxConcurrentLoads slots until ctx ends,
// then waits for the loads in flight (each bounded by ctx) and returns nil.
func (l *Loader) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("artifact loader is already running")
	}
	var wg sync.WaitGroup
	for range MaxConcurrentLoads {
		wg.Go(func() {
			for {
				k, ref, ok := l.next(ctx)
				if !ok {
					return
				}
				l.load(ctx, k, ref)
			}
		})
	}
	wg.Wait()
	return nil
}

// next takes the oldest queued artifact, waiting for one until ctx ends.
func (l *Loader) next(ctx context.Context) (Key, Ref, bool) {
	for {
		l.mu.Lock()
		for len(l.queue) > 0 {
			k := l.queue[0]
			l.queue = slices.Delete(l.queue, 0, 1)
			e, ok := l.entries[k]
			if !ok || e.state != stateQueued {
				continue
			}
			e.state = stateLoading
			if len(l.queue) > 0 {
				select {
				case l.wake <- struct{}{}:
				default:
				}
			}
			l.mu.Unlock()
			return k, e.ref, true
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return Key{}, Ref{}, false
		case <-l.wake:
		}
	}
}

func (l *Loader) load(ctx context.Context, k Key, ref Ref) {
	p := l.policy.Load()
	lctx, cancel := context.WithTimeout(ctx, LoadTimeout)
	data, err := p.Fetch(lctx, l.client, ref, func(err error) {
		if errors.Is(err, ErrCacheWrite) {
			l.logger.Warn("artifact cache: the verified artifact could not be written to the cache; it is used, and fetched again on the next load",
				"slot", string(ref.Slot), "checksum", ref.Checksum.String(), "err", err)
			return
		}
		l.count(telemetry.ArtifactCacheCorrupt)
		l.logger.Warn("artifact cache blob failed verification: removed, fetching again",
			"slot", string(ref.Slot), "checksum", ref.Checksum.String(), "err", err)
	})
	cancel()
	var value any
	if err == nil {
		value, err = l.safeBuild(ref, data)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[k]
	if !ok || e.state != stateLoading {
		return
	}
	if ctx.Err() != nil {
		delete(l.entries, k) // stopping: not a failure of the artifact
		return
	}
	if err != nil {
		delete(l.entries, k)
		l.fail(k, err)
		l.count(Result(err))
		l.logger.Warn("artifact load failed; retrying in 5m", "slot", string(ref.Slot), "kind", string(ref.Kind),
			"checksum", ref.Checksum.String(), "err", err)
		return
	}
	if !l.policy.Load().Pinned(k.Checksum) {
		delete(l.entries, k) // unpinned while loading
		return
	}
	size := int64(len(data))
	for l.bytes+size > l.maxBytes && l.evictLRU() {
	}
	l.uses++
	e.state, e.value, e.size, e.lastUsed = stateReady, value, size, l.uses
	l.bytes += size
	l.count(telemetry.ArtifactLoaded)
	l.logger.Info("artifact loaded", "slot", string(ref.Slot), "kind", string(ref.Kind),
		"checksum", ref.Checksum.String(), "bytes", size)
}

func (l *Loader) safeBuild(ref Ref, data []byte) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("%w: %s: panic: %v", ErrBuild, ref.Slot, r)
		}
	}()
	v, err = l.build(ref, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBuild, ref.Slot, err)
	}
	return v, nil
}

func (l *Loader) fail(k Key, err error) {
	if len(l.failures) >= maxFailures {
		var oldest Key
		var at time.Time
		first := true
		for fk, f := range l.failures {
			if first || f.at.Before(at) {
				oldest, at, first = fk, f.at, false
			}
		}
		delete(l.failures, oldest)
	}
	l.failures[k] = failure{err: err, at: l.now()}
}

// Stats is the loader's occupancy.
type Stats struct {
	Loaded, Loading, Queued, Failed int
	Bytes                           int64
}

// Stats returns the current occupancy.
func (l *Loader) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{Failed: len(l.failures), Bytes: l.bytes}
	for _, e := range l.entries {
		switch e.state {
		case stateReady:
			s.Loaded++
		case stateLoading:
			s.Loading++
		case stateQueued:
			s.Queued++
		}
	}
	return s
}

func (l *Loader) count(result string) {
	if l.metrics != nil {
		l.metrics.Artifacts.WithLabelValues(result).Inc()
	}
}

// countOnce counts a rejection found without I/O once per artifact and
// result, not once per request.
func (l *Loader) countOnce(ref Ref, result string) {
	if l.note("r\x00" + result + "\x00" + ref.Format + "\x00" + ref.Checksum.Hex()) {
		l.count(result)
	}
}

// note records key and reports whether it is new; the set is bounded (it
// starts over when full, so a key may be reported again).
func (l *Loader) note(key string) bool {
	if l.noted[key] {
		return false
	}
	if len(l.noted) >= maxNoted {
		clear(l.noted)
	}
	l.noted[key] = true
	return true
}

func (l *Loader) logUnpinned(model string, refs []Ref) {
	desc := describe(refs)
	if !l.note("m\x00" + model + "\x00" + desc) {
		return
	}
	l.logger.Warn("model artifacts not pinned: nothing is fetched or loaded until their checksums are in dynamo.kv.pinned_artifacts (review the files, then b3sum or continuum pin-artifact)",
		"model", model, "artifacts", desc)
}

// describe lists refs as "slot kind checksum" items.
func describe(refs []Ref) string {
	parts := make([]string, len(refs))
	for i, r := range refs {
		parts[i] = string(r.Slot) + " " + string(r.Kind) + " " + r.Checksum.String()
	}
	return strings.Join(parts, ", ")
}

// Result is the continuum_dynamo_kv_artifacts_total result for an error of
// this package.
func Result(err error) string {
	switch {
	case err == nil:
		return telemetry.ArtifactLoaded
	case errors.Is(err, ErrUnpinned):
		return telemetry.ArtifactUnpinned
	case errors.Is(err, ErrDisallowed):
		return telemetry.ArtifactDisallowed
	case errors.Is(err, ErrUnsupported):
		return telemetry.ArtifactUnsupported
	case errors.Is(err, ErrMalformed):
		return telemetry.ArtifactMalformed
	case errors.Is(err, ErrTooLarge):
		return telemetry.ArtifactTooLarge
	case errors.Is(err, ErrChecksumMismatch):
		return telemetry.ArtifactChecksumMismatch
	case errors.Is(err, ErrBuild):
		return telemetry.ArtifactBuildFailed
	case errors.Is(err, ErrOverCapacity):
		return telemetry.ArtifactOverCapacity
	}
	return telemetry.ArtifactFetchFailed
}
