package eventbus_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/eventbus"
)

// TestEmptyAllowListAllowsAnyNamespace: a broker
// entry with an empty namespaces list may declare any namespace (not
// forbidden); the welcome names the session sess-<32 hex>.
func TestEmptyAllowListAllowsAnyNamespace(t *testing.T) {
	t.Parallel()
	tb := startBus(t, func(s *eventbus.Settings, _ *eventbus.Timeouts) {
		s.Entries[1].Namespaces = nil // broker B: empty allow-list
	})
	rs := openSession(t, tb.dial(t, nil), tokenB, hello(eventbus.RoleBroker, brokerB, []string{"anything", "prod"}, nil))
	if rs.resp.StatusCode != http.StatusOK {
		st, code := refusalOf(t, rs.resp)
		t.Fatalf("empty allow-list refused %d %s", st, code)
	}
	if !regexp.MustCompile(`^sess-[0-9a-f]{32}$`).MatchString(rs.id) {
		t.Errorf("session id %q, want sess-<32 hex>", rs.id)
	}
	if !tb.Covers("anything") || !tb.Covers("prod") {
		t.Error("declared namespaces not covered")
	}
}

// TestRefusalBodyShape: every refusal of an HTTP/2 request is JSON
// {"error":{"code","message"}} with Content-Type application/json; a 401
// carries a Bearer challenge.
func TestRefusalBodyShape(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	for _, tc := range []struct {
		path, token string
		status      int
		code        string
	}{
		{eventbus.PathSession, "", 401, eventbus.CodeUnauthenticated},
		{eventbus.PathStreams + strings.Repeat("cd", 16), tokenA, 404, eventbus.CodeUnknownStream},
	} {
		resp := post(t, tb.dial(t, nil), tc.path, tc.token, strings.NewReader(""), nil)
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", tc.path, ct)
		}
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status || !strings.Contains(string(data), `"code":"`+tc.code+`"`) || !strings.Contains(string(data), `"message":"`) {
			t.Errorf("%s: %d %s", tc.path, resp.StatusCode, data)
		}
	}
}
