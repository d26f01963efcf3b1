package etcd

// SetAfterSeed installs a hook run between the range get and the watches.
func (s *Source) SetAfterSeed(f func()) { s.afterSeed = f }
