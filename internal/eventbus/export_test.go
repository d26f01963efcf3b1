package eventbus

import "time"

// Timeouts shortens a bus's timeouts for a test; zero keeps one. Call it
// before Run.
type Timeouts struct {
	Handshake, Hello, Auth, Open, ListenRetry, LossGrace, TLSCheck time.Duration
}

// SetTimeouts applies t.
func (b *Bus) SetTimeouts(t Timeouts) {
	set := func(dst *time.Duration, v time.Duration) {
		if v > 0 {
			*dst = v
		}
	}
	set(&b.t.handshake, t.Handshake)
	set(&b.t.hello, t.Hello)
	set(&b.t.auth, t.Auth)
	set(&b.t.open, t.Open)
	set(&b.t.listenRetry, t.ListenRetry)
	set(&b.t.lossGrace, t.LossGrace)
	set(&b.t.tlsCheck, t.TLSCheck)
}
