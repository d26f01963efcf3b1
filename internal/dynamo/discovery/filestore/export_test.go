package filestore

import "time"

// SetTiming shortens the TTL and the scan interval for tests.
func (s *Source) SetTiming(ttl, scan time.Duration) { s.ttl, s.scan = ttl, scan }
