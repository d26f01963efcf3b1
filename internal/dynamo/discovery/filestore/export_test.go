package filestore

import "time"

// SetTiming shortens the TTL and the scan interval for tests.
func (s *Source) SetTiming(ttl, scan time.Duration) { s.ttl, s.scan = ttl, scan }

// SetListLimit lowers the entries one scan reads from a bucket.
func (s *Source) SetListLimit(n int) { s.listLimit = n }
