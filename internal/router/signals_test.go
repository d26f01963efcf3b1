package router_test

import (
	"testing"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/router"
)

// TestWorkersViewSignals: GET /admin/dynamo/workers says which signals the
// source gives: the kubernetes_pods source has no cards and no publishers,
// so neither load nor capacity; every other source reads both from the
// workers' records.
func TestWorkersViewSignals(t *testing.T) {
	t.Parallel()
	s := router.New(router.Options{Config: &config.Config{}, Registry: fleet.NewRegistry(nil, nil)})
	for src, want := range map[string]admin.Signals{
		config.SourceKubernetesPods: {Load: false, Capacity: false},
		config.SourceKubernetes:     {Load: true, Capacity: true},
		config.SourceEtcd:           {Load: true, Capacity: true},
		config.SourceFile:           {Load: true, Capacity: true},
	} {
		cfg := &config.Config{}
		cfg.Dynamo.Enabled = true
		cfg.Dynamo.Discovery.Source = src
		if got := s.WorkersView(cfg).Signals; got != want {
			t.Errorf("source %s: signals %+v, want %+v", src, got, want)
		}
	}
}
