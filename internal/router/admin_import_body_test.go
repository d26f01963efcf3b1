package router_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/router"
)

// TestAdminImportBrokenBodyIsNot413: a PUT /admin/config whose body cannot
// be read (malformed chunked framing) is a bad request (400), not 413
// "a configuration document is at most 4 MiB": only a body past the bound
// is too large.
func TestAdminImportBrokenBodyIsNot413(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, nil, func(o *router.Options) {
		o.ImportConfig = func([]byte) admin.Reload { return admin.Reload{Result: admin.ReloadApplied} }
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(h.router.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "PUT /admin/config HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-secret\r\n"+
		"Transfer-Encoding: chunked\r\n\r\n5\r\nserve\r\nzz\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusRequestEntityTooLarge {
		t.Errorf("a malformed body answered %d: %s", resp.StatusCode, body)
	}
}
