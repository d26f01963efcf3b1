package pick

import (
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// LedgerKeys is the number of (worker, rank) keys p's ledger holds (tests).
func (p *LoadBased) LedgerKeys() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ledger.entries)
}

// NewScanOracle returns the straightforward picker that costs every
// candidate on every pick (the benchmarks' same-run baseline).
func NewScanOracle(l Loads) *ScanOracle {
	led := newLedger()
	return &ScanOracle{&oracle{Loads: l, Ledger: &led}}
}

// ScanOracle is the oracle as a Picker with a Pick like LoadBased's.
type ScanOracle struct{ *oracle }

// Pick chooses without recording.
func (o *ScanOracle) Pick(snap *fleet.Snapshot, req Request, now time.Time) (Pin, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pick(snap, req, now)
}
