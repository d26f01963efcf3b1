package zmtp

import "time"

// BufferCap is the capacity of the message buffer (tests).
func (s *Sub) BufferCap() int { return cap(s.buf) }

// SetIdleAfter shortens the wait before a subscription goes quiet; the
// returned func restores it.
func SetIdleAfter(d time.Duration) func() {
	old := idleAfter
	idleAfter = d
	return func() { idleAfter = old }
}

// Quiet reports whether the subscription holds no buffer.
func (s *Sub) Quiet() bool { return s.rb == nil && s.fb == nil }

// SetMessageTimeout shortens the bound on a message's rest; the returned
// func restores it.
func SetMessageTimeout(d time.Duration) func() {
	old := messageTimeout
	messageTimeout = d
	return func() { messageTimeout = old }
}
