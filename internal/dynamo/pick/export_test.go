package pick

// Keys is the number of (worker, rank) keys the ledger holds (tests).
func (l *Ledger) Keys() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.entries)
}
