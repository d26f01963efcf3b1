package router

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// TestSetConfig: a new configuration applies to the next request; what did
// not change keeps its state (a backend's breaker, a key's bucket).
func TestSetConfig(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	cfg := config.Default()
	cfg.Backends = []config.Backend{
		{Name: "a", Type: "openai", URL: "http://127.0.0.1:1", Role: config.RoleUnified, Enabled: true},
		{Name: "b", Type: "openai", URL: "http://127.0.0.1:2", Role: config.RoleUnified, Enabled: true},
	}
	cfg.APIKeys = []config.APIKey{{KeyHash: "sha256:" + sha("secret"), RateLimit: &config.RateLimit{RequestsPerSecond: 1, Burst: 1}}}
	cfg.Dynamo.Enabled, cfg.DisaggregatedServing.Enabled = true, true
	cfg.Dynamo.Shim.Backends = []string{"a"}
	s := New(Options{Config: cfg, Registry: fleet.NewRegistry(nil, nil), Now: func() time.Time { return now }})
	a, b := s.backends.get("a"), s.backends.get("b")
	a.openUntil.Store(now.Add(time.Minute).UnixNano()) // a's breaker is open
	req := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	req.Header.Set("Authorization", "Bearer secret")
	if ok, _ := s.keys.Load().match(req).bucket.take(now); !ok {
		t.Fatal("the first request of the bucket")
	}

	next := *cfg
	next.Backends = []config.Backend{cfg.Backends[0], {Name: "b", Type: "openai", URL: "http://127.0.0.1:3", Role: config.RoleUnified, Enabled: true}}
	next.APIKeys = append([]config.APIKey(nil), cfg.APIKeys...)
	next.Dynamo.Shim = config.Shim{Backends: []string{"b"}, ModelMap: map[string]string{"short": "long"}, LegacyPinHeaders: true}
	s.SetConfig(&next)
	if s.backends.get("a") != a || a.Available(now) {
		t.Error("an unchanged backend lost its state")
	}
	if nb := s.backends.get("b"); nb == b || nb.URL() != "http://127.0.0.1:3" {
		t.Error("a changed backend was not replaced")
	}
	if ok, _ := s.keys.Load().match(req).bucket.take(now); ok {
		t.Error("an unchanged rate limit got a full bucket again")
	}
	plan := s.dispatch.Plan()
	if !plan.IsReplica(s.backends.get("b")) || plan.IsReplica(a) || plan.Model("short") != "long" {
		t.Error("the dispatch plan was not replaced")
	}
	if s.cfg.Load() != &next {
		t.Error("the configuration was not swapped")
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
