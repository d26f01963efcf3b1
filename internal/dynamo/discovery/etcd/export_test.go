package etcd

import "time"

// SetAfterSeed installs a hook run between the range get and the watches.
func (s *Source) SetAfterSeed(f func()) { s.afterSeed = f }

// SetRecvLimit lowers the client's receive limit, so that a test can put a
// value over it within the server's request limit.
func (s *Source) SetRecvLimit(n int) { s.recvLimit = n }

// SetProbeEvery shortens how often a pass reads the store's revision.
func (s *Source) SetProbeEvery(d time.Duration) { s.probeEvery = d }

// SetSeedTimeout shortens the seed timeout of each pass.
func (s *Source) SetSeedTimeout(d time.Duration) { s.seedTimeout = d }
