package router

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// TestRoutesOfOneConfiguration: a request reads the backends and the
// dispatch plan of one configuration, however often reloads change a
// replica's settings (which makes it another *Backend): a shim replica is
// never offered as a plain backend.
func TestRoutesOfOneConfiguration(t *testing.T) {
	t.Parallel()
	withTimeout := func(d time.Duration) *config.Config {
		c := config.Default()
		c.Backends = []config.Backend{{Name: "fe", Type: "openai", URL: "http://127.0.0.1:1", Role: config.RoleUnified, Enabled: true, Timeout: config.Duration(d)}}
		c.Dynamo.Enabled, c.DisaggregatedServing.Enabled = true, true
		c.Dynamo.Shim.Backends = []string{"fe"}
		return c
	}
	s := New(Options{Config: withTimeout(time.Second), Registry: fleet.NewRegistry(nil, nil)})
	var stop atomic.Bool
	var mixed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			rt := s.routes.Load() // as plain() reads them
			for _, b := range rt.backends {
				if rt.plan.Enabled() && !rt.plan.IsReplica(b) {
					mixed.Add(1)
				}
			}
		}
	}()
	for i := range 5000 {
		s.SetConfig(withTimeout(time.Duration(i%2+1) * time.Second))
	}
	stop.Store(true)
	<-done
	if n := mixed.Load(); n > 0 {
		t.Errorf("a shim replica was read as a plain backend %d times", n)
	}
}
