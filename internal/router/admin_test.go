package router_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/config"
)

// adminGet calls an admin path with an Authorization header as given ("" for
// none) and returns the status and body.
func adminGet(t *testing.T, h *harness, path, authorization string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, h.router.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, readAll(t, resp)
}

var adminPaths = []string{"/admin/config", "/admin/dynamo/workers", "/admin/dynamo/load", "/admin/dynamo/problems"}

// TestAdminConfigMasked: GET /admin/config returns the running
// configuration with every secret masked.
func TestAdminConfigMasked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) {
		c.Dynamo.Discovery.Etcd.Auth = &config.Auth{Username: "reader", Password: "etcd-password"}
	})
	status, body := adminGet(t, h, "/admin/config", "Bearer admin-secret")
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var cfg struct {
		Admin    struct{ Token string }
		Backends []struct {
			Name   string
			APIKey string `json:"api_key"`
		}
		Dynamo struct {
			Discovery struct {
				Etcd struct {
					Auth struct{ Username, Password string }
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &cfg); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	for _, secret := range []string{"admin-secret", "sk-upstream", "etcd-password"} {
		if strings.Contains(body, secret) {
			t.Errorf("the configuration shows the secret %q", secret)
		}
	}
	auth := cfg.Dynamo.Discovery.Etcd.Auth
	if cfg.Admin.Token != config.Mask || len(cfg.Backends) != 2 || cfg.Backends[0].APIKey != config.Mask || auth.Password != config.Mask {
		t.Fatalf("secrets not masked: %s", body)
	}
	// What is not secret is shown as it is.
	if cfg.Backends[0].Name != "fe" || auth.Username != "reader" || cfg.Backends[1].APIKey != "" {
		t.Errorf("configuration %s", body)
	}
}

// TestAdminOffWithoutToken: without admin.token the admin API does not
// exist (404), whatever the request carries, an empty bearer token
// included, so that an empty token can never match an unset one.
func TestAdminOffWithoutToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *config.Config) { c.Admin.Token = "" })
	for _, path := range adminPaths {
		for _, auth := range []string{"", "Bearer ", "Bearer    ", "Bearer anything", "Basic Og=="} {
			if status, body := adminGet(t, h, path, auth); status != http.StatusNotFound || !strings.Contains(body, "not_found") {
				t.Errorf("%s with %q: %d %s", path, auth, status, body)
			}
		}
	}
}

// TestAdminNeedsTheToken: with admin.token set, every admin path answers
// 401 to a missing, empty, wrong or differently spelt token, and 200 to
// the token. (Header values reach the handler trimmed, as HTTP defines
// them.)
func TestAdminNeedsTheToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, path := range adminPaths {
		for _, auth := range []string{"", "Bearer ", "Bearer    ", "Bearer  admin-secret", "bearer admin-secret", "Bearer admin-secre", "admin-secret"} {
			if status, _ := adminGet(t, h, path, auth); status != http.StatusUnauthorized {
				t.Errorf("%s with %q: %d, want 401", path, auth, status)
			}
		}
		if status, body := adminGet(t, h, path, "Bearer admin-secret"); status != http.StatusOK {
			t.Errorf("%s with the token: %d %s", path, status, body)
		}
	}
}
