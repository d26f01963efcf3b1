package router_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/config"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// TestMeshConnectFailureTriesOtherReplica: a service mesh's own 503 for a
// frontend replica it could not reach ("upstream connect error ... reset
// reason: connection failure") says the request never reached the shim: a
// shim connection failure, which the design retries on another replica of
// the pool with the same pins, without choosing the workers again.
// Without a migration_limit the request fails instead; with one, it is
// re-pinned to other workers (the healthy ones blamed).
func TestMeshConnectFailureTriesOtherReplica(t *testing.T) {
	t.Parallel()
	mesh := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Server", "envoy")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: delayed connect error: 111")
	}))
	t.Cleanup(mesh.Close)
	for _, limit := range []int{0, 2} {
		h := newHarness(t, func(c *config.Config) {
			c.Backends = append(c.Backends, config.Backend{Name: "mesh", Type: "openai", URL: mesh.URL, Role: config.RoleUnified,
				Enabled: true, Timeout: config.Duration(10 * time.Second)})
			c.Dynamo.Shim.Backends = []string{"mesh", "fe"}
		})
		h.reducer = fleet.NewReducer()
		repinWorker(h.reducer, "prefill", "Prefill", 10, limit)
		repinWorker(h.reducer, "decode", "Decode", 20, limit)
		repinWorker(h.reducer, "decode", "Decode", 21, limit)
		h.reg.Publish(h.reducer.Build(t0))
		h.fe.SetWorkers(model, []uint64{10}, []uint64{20, 21})
		got := map[int]int{}
		for range 4 {
			resp := h.post(t, chat(false), nil)
			readAll(t, resp)
			got[resp.StatusCode]++
		}
		if got[200] != 4 || h.allRepins() != 0 {
			t.Errorf("migration_limit %d: statuses %v, %v re-pins: a replica the mesh could not reach was not retried on the other replica with the same pins",
				limit, got, h.allRepins())
		}
	}
}

// TestTLSHandshakeFailureTriesOtherReplica: a replica whose TLS handshake
// fails (a certificate expired or from another CA) never received the
// request: a shim connection failure, retried on another replica of the
// pool with the same pins, as a refused connection is.
func TestTLSHandshakeFailureTriesOtherReplica(t *testing.T) {
	t.Parallel()
	bad := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	t.Cleanup(bad.Close)
	h := newHarness(t, func(c *config.Config) {
		c.Backends = append(c.Backends, config.Backend{Name: "badtls", Type: "openai", URL: bad.URL, Role: config.RoleUnified,
			Enabled: true, Timeout: config.Duration(10 * time.Second)})
		c.Dynamo.Shim.Backends = []string{"badtls", "fe"}
	})
	got := map[int]int{}
	for range 4 {
		resp := h.post(t, chat(false), nil)
		readAll(t, resp)
		got[resp.StatusCode]++
	}
	if got[200] != 4 {
		t.Fatalf("statuses %v: a replica whose TLS handshake failed was not retried on the other replica", got)
	}
}
