package router_test

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/router"
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
// 401 to a missing, empty or wrong token, and 200 to
// the token. (Header values reach the handler trimmed, as HTTP defines
// them.)
func TestAdminNeedsTheToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, path := range adminPaths {
		for _, auth := range []string{"", "Bearer ", "Bearer    ", "Bearer  admin-secret", "Bearer admin-secre", "admin-secret"} {
			if status, _ := adminGet(t, h, path, auth); status != http.StatusUnauthorized {
				t.Errorf("%s with %q: %d, want 401", path, auth, status)
			}
		}
		if status, body := adminGet(t, h, path, "Bearer admin-secret"); status != http.StatusOK {
			t.Errorf("%s with the token: %d %s", path, status, body)
		}
	}
}

// keysOf returns the sorted keys of a JSON object.
func keysOf(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return slices.Sorted(maps.Keys(m))
}

var (
	rfc3339Offset = regexp.MustCompile(`^"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00"$`)
	lowerHex      = regexp.MustCompile(`^"[0-9a-f]+"$`)
	decimal       = regexp.MustCompile(`^"(0|[1-9][0-9]*)"$`)
)

// TestAdminWorkersShape: GET /admin/dynamo/workers has exactly the fields
// of its documented shape, at every level: the worker's instance id in
// lowercase hex beside the same id as a decimal worker_id, instants as
// RFC 3339 with an explicit +00:00 offset, capacity fields null when the
// card does not declare them, a string disaggregated_endpoint as the card
// has it, publisher ids in decimal, broker only on a subscription a broker
// relays, broker_coverage only with transport: broker. With dynamo off it
// answers 200, enabled false, with empty lists (never null).
func TestAdminWorkersShape(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, func(c *config.Config) { c.Dynamo.Load.Transport = config.TransportBroker }, func(o *router.Options) {
		o.Subscriptions = func() []load.SubscriptionInfo {
			return []load.SubscriptionInfo{
				{Family: "kv_metrics", PublisherID: 0x1f3a4b, Namespace: "dynamo", Component: "decode", State: "connected", Transport: "broker", Broker: "broker-a.dynamo"},
				{Family: "kv-events", PublisherID: 0x1f3a4c, Namespace: "dynamo", Component: "decode", State: "pending", Transport: "broker"},
			}
		}
		o.BrokerCoverage = func() []admin.BrokerCoverage {
			return []admin.BrokerCoverage{{Namespace: "dynamo", Covered: true, Brokers: []string{"broker-a.dynamo"}, PendingSubscriptions: 1}}
		}
	})
	// A worker whose card names its prefill endpoint and declares no
	// capacity but its block size.
	h.reducer.Put("v1/instances/dynamo/backend/generate/1a7f2b", []byte(
		`{"component":"backend","endpoint":"generate","instance_id":1736491,"transport":{"tcp":"10.0.0.9:31000"}}`), t0)
	h.reducer.Put("v1/mdc/dynamo/backend/generate/1a7f2b", []byte(
		`{"component":"backend","endpoint":"generate","instance_id":1736491,"card_json":{"display_name":"m","worker_type":"Decode","kv_cache_block_size":64,"runtime_config":{"disaggregated_endpoint":"dynamo/prefill/generate"}}}`), t0)
	h.reg.Publish(h.reducer.Build(t0))

	status, body := adminGet(t, h, "/admin/dynamo/workers", "Bearer admin-secret")
	if status != http.StatusOK {
		t.Fatalf("%d: %s", status, body)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		t.Fatal(err)
	}
	want := []string{"broker_coverage", "connected", "enabled", "generation", "kv_event_publishers", "load_publishers", "namespace",
		"namespaces", "signals", "source", "subscriptions", "workers"}
	if got := keysOf(t, json.RawMessage(body)); !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v", got, want)
	}
	if got := keysOf(t, top["signals"]); !slices.Equal(got, []string{"capacity", "load"}) {
		t.Errorf("signals %v", got)
	}
	var workers []json.RawMessage
	_ = json.Unmarshal(top["workers"], &workers)
	if len(workers) != 3 {
		t.Fatalf("%d workers: %s", len(workers), top["workers"])
	}
	wantWorker := []string{"block_size", "capacity", "component", "disaggregated_endpoint", "dp_size", "dp_start_rank", "endpoint",
		"first_seen", "instance_id", "last_updated", "model", "namespace", "role", "worker_id"}
	found := false
	for _, raw := range workers {
		if got := keysOf(t, raw); !slices.Equal(got, wantWorker) {
			t.Errorf("worker fields %v, want %v", got, wantWorker)
		}
		var w map[string]json.RawMessage
		_ = json.Unmarshal(raw, &w)
		if got := keysOf(t, w["capacity"]); !slices.Equal(got, []string{"context_length", "max_num_batched_tokens", "max_num_seqs", "total_kv_blocks"}) {
			t.Errorf("capacity fields %v", got)
		}
		for _, k := range []string{"first_seen", "last_updated"} {
			if !rfc3339Offset.Match(w[k]) {
				t.Errorf("%s = %s", k, w[k])
			}
		}
		if !lowerHex.Match(w["instance_id"]) || !decimal.Match(w["worker_id"]) {
			t.Errorf("instance_id %s, worker_id %s", w["instance_id"], w["worker_id"])
		}
		if string(w["instance_id"]) != `"1a7f2b"` {
			continue
		}
		found = true
		if string(w["worker_id"]) != `"1736491"` || string(w["disaggregated_endpoint"]) != `"dynamo/prefill/generate"` ||
			string(w["block_size"]) != "64" || string(w["dp_start_rank"]) != "0" || string(w["dp_size"]) != "1" {
			t.Errorf("worker %s", raw)
		}
		var c map[string]json.RawMessage
		_ = json.Unmarshal(w["capacity"], &c)
		for k, v := range c {
			if string(v) != "null" {
				t.Errorf("capacity.%s = %s, want null (not declared)", k, v)
			}
		}
	}
	if !found {
		t.Errorf("worker 1a7f2b missing: %s", top["workers"])
	}
	var subs []json.RawMessage
	_ = json.Unmarshal(top["subscriptions"], &subs)
	wantSub := []string{"component", "family", "namespace", "publisher_id", "state", "transport"}
	if len(subs) != 2 || !slices.Equal(keysOf(t, subs[0]), sortedWith(wantSub, "broker")) || !slices.Equal(keysOf(t, subs[1]), wantSub) {
		t.Errorf("subscriptions %s", top["subscriptions"])
	}
	if !strings.Contains(string(subs[0]), `"publisher_id":"2046539"`) || !strings.Contains(string(subs[0]), `"broker":"broker-a.dynamo"`) {
		t.Errorf("subscription %s", subs[0])
	}
	var cov []json.RawMessage
	_ = json.Unmarshal(top["broker_coverage"], &cov)
	if len(cov) != 1 || !slices.Equal(keysOf(t, cov[0]), []string{"brokers", "covered", "namespace", "pending_subscriptions"}) {
		t.Errorf("broker_coverage %s", top["broker_coverage"])
	}
	for _, leak := range []string{"10.0.0.9", "10.0.0.4", "tcp", "transport\":{", "card_json", "runtime_config"} {
		if strings.Contains(body, leak) {
			t.Errorf("the response carries %q", leak)
		}
	}

	off := newHarness(t, func(c *config.Config) { c.Dynamo.Enabled = false })
	status, body = adminGet(t, off, "/admin/dynamo/workers", "Bearer admin-secret")
	if status != http.StatusOK {
		t.Fatalf("dynamo off: %d", status)
	}
	top = nil
	_ = json.Unmarshal([]byte(body), &top)
	if string(top["enabled"]) != "false" || string(top["workers"]) != "[]" || string(top["subscriptions"]) != "[]" ||
		string(top["namespaces"]) != "[]" || top["broker_coverage"] != nil {
		t.Errorf("dynamo off: %s", body)
	}
}

func sortedWith(list []string, more ...string) []string {
	return slices.Sorted(slices.Values(append(slices.Clone(list), more...)))
}

// adminCall sends method path to base with the admin token and returns the
// status, the Allow field and the error code of a JSON error body ("" when
// the body is not one).
func adminCall(t *testing.T, base, method, path string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer admin-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, resp.Header.Get("Allow"), e.Error.Code
}

// TestAdminListenerErrorShape: the admin listener (admin.bind_address)
// answers a route asked with a method it does not take 405
// method_not_allowed with Allow, and an unknown path 404 not_found, in the
// router's JSON error shape, as the main listener does.
func TestAdminListenerErrorShape(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.Admin.Token = "admin-secret"
	cfg.Admin.BindAddress = "127.0.0.1:0"
	srv := router.New(router.Options{Config: cfg, Registry: fleet.NewRegistry(nil, nil), Store: load.NewStore(time.Second, nil), Gatherer: prometheus.NewRegistry()})
	adminSrv := serveRouter(t, srv.AdminHandler())
	if code, _, ecode := adminCall(t, adminSrv.URL, http.MethodGet, "/admin/no-such-view"); code != http.StatusNotFound || ecode != "not_found" {
		t.Errorf("unknown path on the admin listener: %d, error code %q; want 404 not_found", code, ecode)
	}
	if code, allow, ecode := adminCall(t, adminSrv.URL, http.MethodPost, "/admin/config"); code != http.StatusMethodNotAllowed || ecode != "method_not_allowed" || allow == "" {
		t.Errorf("POST /admin/config on the admin listener: %d, Allow %q, error code %q; want 405 method_not_allowed", code, allow, ecode)
	}
}

// TestAdminRoutesNotAdvertised: with the admin API off (no admin.token)
// or moved to admin.bind_address, an admin path on the main listener is
// 404 whatever the method: no 405 names the methods of a route that is not
// served there (to anyone, without a token).
func TestAdminRoutesNotAdvertised(t *testing.T) {
	t.Parallel()
	for name, edit := range map[string]func(*config.Config){
		"moved": func(c *config.Config) { c.Admin.Token, c.Admin.BindAddress = "admin-secret", "127.0.0.1:0" },
		"off":   func(c *config.Config) { c.Admin.Token = "" },
	} {
		cfg := config.Default()
		edit(cfg)
		srv := router.New(router.Options{Config: cfg, Registry: fleet.NewRegistry(nil, nil), Store: load.NewStore(time.Second, nil), Gatherer: prometheus.NewRegistry()})
		mainSrv := serveRouter(t, srv.Handler())
		getCode, _, _ := adminCall(t, mainSrv.URL, http.MethodGet, "/admin/config")
		postCode, allow, _ := adminCall(t, mainSrv.URL, http.MethodPost, "/admin/config")
		if getCode != http.StatusNotFound || postCode != http.StatusNotFound {
			t.Errorf("%s: GET /admin/config %d, POST /admin/config %d (Allow %q); want 404 for both", name, getCode, postCode, allow)
		}
	}
}

// TestRetryAfterBounded: a key whose rate limit is slow enough
// (validation takes any positive requests_per_second) still answers its
// 429 with a Retry-After that is not negative (the wait once overflowed a
// Duration).
func TestRetryAfterBounded(t *testing.T) {
	t.Parallel()
	const key = "sk-client-slow"
	h := newHarness(t, func(c *config.Config) {
		c.APIKeys = []config.APIKey{{KeyHash: "sha256:" + sha256hex(key), RateLimit: &config.RateLimit{RequestsPerSecond: 1e-12, Burst: 1}}}
	})
	// Such a limit passes validation.
	valid := config.Default()
	valid.APIKeys = []config.APIKey{{KeyHash: "sha256:" + sha256hex(key), RateLimit: &config.RateLimit{RequestsPerSecond: 1e-12, Burst: 1}}}
	if fs := config.Validate("test", valid); fs.Errors() > 0 {
		t.Fatalf("the configuration is refused: %v", fs)
	}
	auth := map[string]string{"Authorization": "Bearer " + key}
	if resp := h.post(t, chat(false), auth); resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	resp := h.post(t, chat(false), auth)
	ra := resp.Header.Get("Retry-After")
	if resp.StatusCode != http.StatusTooManyRequests || ra == "" || strings.HasPrefix(ra, "-") {
		t.Errorf("rate limited: %d, Retry-After %q; want 429 with a non-negative delay", resp.StatusCode, ra)
	}
}
