package pick

// Keys is the number of (worker, rank) keys the ledger holds (tests).
func (l *Ledger) Keys() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.entries)
}

// NewScanOracle returns the straightforward picker that costs every
// candidate on every pick (the benchmarks' same-run baseline).
func NewScanOracle(l Loads, ledger *Ledger) Picker { return &oracle{Loads: l, Ledger: ledger} }
