package routerd_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/continuum-router/continuum/internal/admin"
)

// TestAdminImportRefusesAnEmptyDocument: PUT /admin/config with no
// document (an empty body, as `curl -X PUT` without -d sends) is refused,
// as SIGHUP on an empty file is, rather than applied as every default
// (which turns the admin API off and drops the backends); the running
// configuration stays and the admin API still answers.
func TestAdminImportRefusesAnEmptyDocument(t *testing.T) {
	t.Parallel()
	f := startReload(t, configYAML("http://127.0.0.1:1", t.TempDir(), ""))
	for _, body := range []string{"", "\n  \n", "# nothing\n", "---\n", "~\n"} {
		code, resp := f.adminDo(http.MethodPut, "/admin/config", body)
		var r admin.Reload
		_ = json.Unmarshal([]byte(resp), &r)
		if code != http.StatusUnprocessableEntity || r.Result != admin.ReloadRejected {
			t.Errorf("PUT /admin/config with %q: %d %s; want 422 rejected", body, code, resp)
		}
		if code, _ := f.adminDo(http.MethodGet, "/admin/config/status", ""); code != http.StatusOK {
			t.Fatalf("after the empty import the admin API answers %d: the running configuration was replaced by every default", code)
		}
	}
}
