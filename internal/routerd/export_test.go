package routerd

import (
	"errors"

	"github.com/continuum-router/continuum/internal/dynamo/kv"
)

// KVParts returns the running KV-aware selection's index and settings; nil
// when it is off.
func KVParts(d *Daemon) (*kv.Index, *kv.Settings) {
	k := d.kvState.Load()
	if k == nil {
		return nil, nil
	}
	s := k.st.Picker.Settings()
	return k.st.Index, &s
}

// ReloadDebounce is how long after a file event the file is read.
const ReloadDebounce = reloadDebounce

// CoverageDebounce is how long after a change the coverage gauges are set.
const CoverageDebounce = coverageDebounce

// CoverageRunning reports whether the broker coverage reporter runs.
func CoverageRunning(d *Daemon) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.coverageRun != nil
}

// CoverageCounts is how many times the broker coverage gauges were set.
func CoverageCounts(d *Daemon) uint64 { return d.coverageCounts.Load() }

// BusRunning reports whether the event bus listener runs (listening, or
// retrying to).
func BusRunning(d *Daemon) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.busRun != nil
}

// UnwatchCertificates makes the watch of server.tls's files fail, as it
// does where inotify is out of watches, until restore is called. Not for
// parallel tests.
func UnwatchCertificates() (restore func()) {
	prev := watchCertificate
	watchCertificate = func(*watchedFiles) (fileWatcher, error) { return nil, errors.New("inotify: out of watches (test)") }
	return func() { watchCertificate = prev }
}

// ClientConns is the client connections the main listeners hold open.
func ClientConns(d *Daemon) int64 { return d.clientConns.Load() }
