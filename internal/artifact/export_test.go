package artifact

// SetLimits narrows the loader's capacity for tests.
func SetLimits(l *Loader, maxLoaded int, maxBytes int64) {
	l.maxLoaded, l.maxBytes = maxLoaded, maxBytes
}
