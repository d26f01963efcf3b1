package router_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// TestTenantHeaderSaltsHashes: Dynamo's frontend takes a non-empty
// x-tenant-id as the request's cache salt, over the body's, so the blocks
// the request leaves on its workers are hashed under it: the router hashes
// the prompt alike, on the lean path (a declared body) and on net/http's (a
// chunked one). Worker 11 holds the prompt under tenant-a's salt, worker 12
// two of its blocks unsalted: the tenant's request goes to 11, a request
// without the header (or with one the frontend cannot read) to 12.
func TestTenantHeaderSaltsHashes(t *testing.T) {
	t.Parallel()
	system := "You answer questions about Dynamo fleets briefly and precisely."
	user := strings.Repeat("Which prefill worker holds the longest prefix of this prompt, and why does it matter? ", 12)
	sj, _ := json.Marshal(system)
	uj, _ := json.Marshal(user)
	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":%s},{"role":"user","content":%s}],"max_tokens":16}`, sj, uj)
	for _, c := range []struct {
		name, tenant string
		chunked      bool
		want         uint64
	}{
		{"declared body", "tenant-a", false, 11},
		{"chunked body", "tenant-a", true, 11},
		{"no tenant", "", false, 12},
		{"unreadable tenant", "tenant-\x80", false, 12},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			k := newKVRouter(t, nil)
			pr := k.prompt(t, body)
			salted := wire.LocalBlockHashes(pr.IDs, 16, wire.BlockHashSeed("", "tenant-a"))
			k.hold(t, 11, salted, len(salted)-1)
			k.hold(t, 12, pr.Hashes[16], 2)
			var rd io.Reader = strings.NewReader(body)
			if c.chunked {
				rd = io.MultiReader(rd) // no length: sent chunked
			}
			req, err := http.NewRequest(http.MethodPost, k.router.URL+"/v1/chat/completions", rd)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if c.tenant != "" {
				req.Header["X-Tenant-Id"] = []string{c.tenant}
			}
			resp, err := k.router.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			reqs := k.fe.Requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests", len(reqs))
			}
			if r := reqs[0]; r.Prefill == nil || *r.Prefill != c.want {
				t.Errorf("prefill %v, want %d", r.DynamoHeaders, c.want)
			}
		})
	}
}
