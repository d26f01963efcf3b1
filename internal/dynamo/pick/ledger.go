package pick

import (
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// In-flight accounting (seed section 14).
const (
	// InFlightWindow: a dispatched request counts in its worker's backlog
	// until the worker's next sample, or this long.
	InFlightWindow = 30 * time.Second
	// StallAfter: a worker sent a request of at least StallBlocks blocks
	// that has sent no sample for this long may be stalled.
	StallAfter  = 5 * time.Second
	StallBlocks = 2
	// maxEntriesPerKey bounds the ledger of one (worker, rank).
	maxEntriesPerKey = 4096
	// maxLedgerKeys bounds the (worker, rank) keys of the ledger.
	maxLedgerKeys = load.MaxStoreKeys
)

type entry struct {
	ticket        uint64
	at            time.Time
	prefillTokens int
	decodeBlocks  int
	stallable     bool
	done          bool
}

// Ledger counts what was dispatched to each (worker, rank) since its last
// sample. It is safe for concurrent use.
type Ledger struct {
	mu      sync.RWMutex
	entries map[load.Key][]entry
	next    uint64
	// dispatches since the last sweep of expired entries.
	sinceSweep int
}

// sweepEvery is how many dispatches pass between sweeps of expired
// entries (entries of departed workers are never read again otherwise).
const sweepEvery = 1024

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{entries: map[load.Key][]entry{}} }

// Ticket identifies a dispatch in the ledger.
type Ticket struct {
	keys []load.Key
	id   uint64
}

// Dispatched records a pin: the prompt tokens on the prefill side (or on
// the decode worker when it prefills itself) and the prompt's blocks on the
// decode side. The decode side of a pair cannot stall (it is reached only
// after prefill).
func (l *Ledger) Dispatched(pin Pin, promptTokens int, now time.Time) Ticket {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dispatchedLocked(pin, promptTokens, now)
}

func (l *Ledger) dispatchedLocked(pin Pin, promptTokens int, now time.Time) Ticket {
	if l.sinceSweep++; l.sinceSweep >= sweepEvery {
		l.sinceSweep = 0
		for k, list := range l.entries {
			l.entries[k] = expire(list, now)
			if len(l.entries[k]) == 0 {
				delete(l.entries, k)
			}
		}
	}
	l.next++
	t := Ticket{id: l.next}
	blocks := func(w Target) int {
		if w.Worker.BlockSize == nil || *w.Worker.BlockSize == 0 {
			return 0
		}
		bs := int(*w.Worker.BlockSize)
		return (promptTokens + bs - 1) / bs
	}
	add := func(target Target, e entry) {
		k := load.Key{WorkerID: target.Worker.ID.InstanceID, DPRank: target.DPRank}
		list := expire(l.entries[k], now)
		if list == nil && len(l.entries) >= maxLedgerKeys {
			return
		}
		if len(list) >= maxEntriesPerKey {
			list = list[1:]
		}
		e.ticket = t.id
		l.entries[k] = append(list, e)
		t.keys = append(t.keys, k)
	}
	decodeBlocks := blocks(pin.Decode)
	if pin.Prefill != nil {
		add(*pin.Prefill, entry{at: now, prefillTokens: promptTokens, stallable: blocks(*pin.Prefill) >= StallBlocks})
		add(pin.Decode, entry{at: now, decodeBlocks: decodeBlocks})
	} else {
		add(pin.Decode, entry{at: now, prefillTokens: promptTokens, decodeBlocks: decodeBlocks, stallable: decodeBlocks >= StallBlocks})
	}
	return t
}

// Finished marks a dispatch as done (answered, refused, failed or
// cancelled): it no longer counts towards a stall.
func (l *Ledger) Finished(t Ticket) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range t.keys {
		list := l.entries[k]
		for i := range list {
			if list[i].ticket == t.id {
				list[i].done = true
			}
		}
	}
}

// expire drops entries older than the in-flight window, in place.
func expire(list []entry, now time.Time) []entry {
	keep := list[:0]
	for _, e := range list {
		if now.Sub(e.at) <= InFlightWindow {
			keep = append(keep, e)
		}
	}
	return keep
}

// view returns, for one key, the backlog dispatched after since (the last
// sample) and within the window, and whether the key looks stalled. It
// only reads: the caller holds l.mu (read or write).
func (l *Ledger) view(k load.Key, since, now time.Time) (prefill, decode int, stalled bool) {
	for _, e := range l.entries[k] {
		if now.Sub(e.at) > InFlightWindow || !e.at.After(since) {
			continue // expired, or answered by a later sample
		}
		prefill += e.prefillTokens
		decode += e.decodeBlocks
		if e.stallable && !e.done && now.Sub(e.at) >= StallAfter {
			stalled = true
		}
	}
	return prefill, decode, stalled
}
