package pick

import (
	"slices"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/load"
)

// In-flight accounting. A worker's load sample lags what the router has
// just sent it, so the picker adds what it dispatched since the sample; and
// a worker that was sent real work and has said nothing since may be
// stalled rather than idle.
const (
	// InFlightWindow: a dispatched request counts in its worker's backlog
	// until the worker's next sample (or its restart), or this long.
	InFlightWindow = 30 * time.Second
	// StallAfter: a worker sent a request of at least StallBlocks blocks
	// that has sent no sample for this long may be stalled.
	StallAfter  = 5 * time.Second
	StallBlocks = 2
	// maxEntriesPerKey bounds the ledger of one (worker, rank); past it the
	// oldest entry goes when a sample has accounted for it, else the two
	// oldest become one (see add), so the backlog keeps counting every
	// dispatch of the window.
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

// ledger counts what was dispatched to each (worker, rank) since its last
// sample. It has no lock of its own: its picker's lock guards it together
// with the picker's indexes, so that a pick and the dispatch it records are
// one step.
type ledger struct {
	entries map[load.Key][]entry
	next    uint64
	// dispatches since the last sweep of expired entries.
	sinceSweep int
	// version counts the changes of entries; changeLog holds the key of the
	// last changeLogSize of them, for pickers that keep costs up to date.
	version   uint64
	changeLog []load.Key
	// since, when set, is the instant up to which the load store has
	// accounted for a key's dispatches (load.ReadView.Since); read only
	// when a key's entries reach their bound.
	since func(load.Key) time.Time
}

// changeLogSize bounds the ledger's change log: a picker further behind
// than this recomputes every candidate.
const changeLogSize = 1 << 14

// changed records that k's entries changed.
func (l *ledger) changed(k load.Key) {
	if l.changeLog == nil {
		l.changeLog = make([]load.Key, changeLogSize)
	}
	l.changeLog[l.version%changeLogSize] = k
	l.version++
}

// changedSince calls each with the key of every change after version
// since, or returns false when the log no longer reaches back that far.
func (l *ledger) changedSince(since uint64, each func(load.Key)) bool {
	v := l.version
	if since > v || v-since > changeLogSize {
		return false
	}
	for ; since < v; since++ {
		each(l.changeLog[since%changeLogSize])
	}
	return true
}

// sweepEvery is how many dispatches pass between sweeps of expired
// entries (entries of departed workers are never read again otherwise).
const sweepEvery = 1024

func newLedger() ledger { return ledger{entries: map[load.Key][]entry{}} }

// Ticket identifies a dispatch in its picker's ledger; the zero Ticket
// records nothing.
type Ticket struct {
	keys []load.Key
	id   uint64
}

// ID names the dispatch, unique within its picker; 0 for the zero Ticket.
func (t Ticket) ID() uint64 { return t.id }

// dispatched records a pin: prefillTokens (of a prompt of promptTokens) on
// the prefill side (or on the decode worker when it prefills itself) and
// the prompt's blocks on the decode side. The decode side of a pair cannot
// stall (it is reached only after prefill).
func (l *ledger) dispatched(pin Pin, promptTokens, prefillTokens int, now time.Time) Ticket {
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
		k := load.RankOf(target.Worker, target.DPRank)
		list := expire(l.entries[k], now)
		if list == nil && len(l.entries) >= maxLedgerKeys {
			return
		}
		if len(list) >= maxEntriesPerKey {
			// The oldest entry goes. When a sample has accounted for it, it
			// counts no more (only its stall, which that sample ended
			// too). Else its work goes into the next one's, which then
			// stands for both: a worker sent more than this many requests
			// within the window (with no sample since) is not shown less
			// loaded than it is, which would draw still more to it. The
			// oldest's work then counts until the next one's time, a
			// little longer than its own.
			if l.since == nil || list[0].at.After(l.since(k)) {
				next := &list[1]
				next.prefillTokens += list[0].prefillTokens
				next.decodeBlocks += list[0].decodeBlocks
				next.stallable = next.stallable || (list[0].stallable && !list[0].done)
			}
			list = list[1:]
		}
		e.ticket = t.id
		// Keep the list in time order (dispatch times of concurrent
		// requests may arrive out of order), so view reads only the
		// entries since the last sample.
		i := len(list)
		for i > 0 && list[i-1].at.After(e.at) {
			i--
		}
		l.entries[k] = slices.Insert(list, i, e)
		t.keys = append(t.keys, k)
		l.changed(k)
	}
	decodeBlocks := blocks(pin.Decode)
	if pin.Prefill != nil {
		add(*pin.Prefill, entry{at: now, prefillTokens: prefillTokens, stallable: blocks(*pin.Prefill) >= StallBlocks})
		add(pin.Decode, entry{at: now, decodeBlocks: decodeBlocks})
	} else {
		add(pin.Decode, entry{at: now, prefillTokens: prefillTokens, decodeBlocks: decodeBlocks, stallable: decodeBlocks >= StallBlocks})
	}
	return t
}

// finished marks a dispatch as done (answered, refused, failed or
// cancelled): it no longer counts towards a stall.
func (l *ledger) finished(t Ticket) {
	for _, k := range t.keys {
		l.changed(k)
		list := l.entries[k]
		for i := range list {
			if list[i].ticket == t.id {
				list[i].done = true
			}
		}
	}
}

// expire drops entries older than the in-flight window (a prefix: lists
// are in time order).
func expire(list []entry, now time.Time) []entry {
	i := 0
	for i < len(list) && now.Sub(list[i].at) > InFlightWindow {
		i++
	}
	if i == 0 {
		return list
	}
	return slices.Delete(list, 0, i)
}

// view returns, for one key, the backlog dispatched after since (the
// instant the store has accounted for: the last sample, or the worker's or
// its publisher's restart) and within the window, and whether the key looks stalled; and
// the instants around now where that answer may change: prev, the latest
// at or before now, and next, the earliest after it (zero when none). It
// only reads.
func (l *ledger) view(k load.Key, since, now time.Time) (prefill, decode int, stalled bool, b bounds) {
	list := l.entries[k]
	// The list is in time order: entries answered by the last sample (not
	// after since) come first, then expired ones, then those that count.
	answered, _ := slices.BinarySearchFunc(list, since, func(e entry, t time.Time) int {
		if e.at.After(t) {
			return 1
		}
		return -1
	})
	start, _ := slices.BinarySearchFunc(list, now, func(e entry, t time.Time) int {
		if t.Sub(e.at) > InFlightWindow {
			return -1
		}
		return 1
	})
	start = max(start, answered)
	if start > answered {
		// The latest expiry so far (the instant it stopped counting).
		b.add(list[start-1].at.Add(InFlightWindow+1), now)
	}
	if start < len(list) {
		b.add(list[start].at.Add(InFlightWindow+1), now) // the next to expire
	}
	for _, e := range list[start:] {
		prefill += e.prefillTokens
		decode += e.decodeBlocks
		if e.stallable && !e.done {
			b.add(e.at.Add(StallAfter), now)
			if now.Sub(e.at) >= StallAfter {
				stalled = true
			}
		}
	}
	return prefill, decode, stalled, b
}

// bounds are the instants around now where a computed state may change.
type bounds struct{ prev, next time.Time }

// add takes in an instant at which the state may change.
func (b *bounds) add(t, now time.Time) {
	if now.Before(t) {
		if b.next.IsZero() || t.Before(b.next) {
			b.next = t
		}
	} else if b.prev.IsZero() || b.prev.Before(t) {
		b.prev = t
	}
}
