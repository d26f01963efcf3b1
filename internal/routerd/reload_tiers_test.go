package routerd_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/testutil"
)

// TestReloadTiersAtRunTime: a watcher replacement (connection, then
// namespace) logs its reason at info and counts one restart each; an
// immediate change (max_staleness) counts none and is read at once.
func TestReloadTiersAtRunTime(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	text := configYAML("http://127.0.0.1:1", root, "  load:\n    max_staleness: \"3s\"\n")
	f := startReload(t, text)
	testutil.Eventually(t, 10*time.Second, "discovery connected", func() bool { return connected(t, f.metrics) == 1 })
	before := restarts(t, f.metrics)

	text = strings.Replace(text, `max_staleness: "3s"`, `max_staleness: "250ms"`, 1)
	f.write(text)
	if r := f.waitReload(1); r.Result != admin.ReloadApplied || !contains(r.Changes, "dynamo.load.max_staleness (immediate)") {
		t.Fatalf("staleness %+v", r)
	}
	if _, body := f.adminDo(http.MethodGet, "/admin/dynamo/load", ""); !strings.Contains(body, `"max_staleness_ms":250`) {
		t.Errorf("max_staleness not read at once: %s", body)
	}
	if restarts(t, f.metrics) != before {
		t.Error("an immediate change counted a restart")
	}

	root2 := filepath.Join(t.TempDir(), "other")
	text = strings.Replace(text, root, root2, 1)
	f.write(text)
	if r := f.waitReload(2); r.Result != admin.ReloadApplied || !contains(r.Changes, "dynamo.discovery.file.root (watcher_restart)") {
		t.Fatalf("root %+v", r)
	}
	if got := restarts(t, f.metrics); got != before+1 {
		t.Errorf("connection change: %v restarts, want %v", got, before+1)
	}
	if !strings.Contains(f.logs.String(), "reason=connection") {
		t.Error("reason=connection not logged")
	}
	text = strings.Replace(text, "namespace: a\n", "namespace: b\n", 1)
	f.write(text)
	if r := f.waitReload(3); r.Result != admin.ReloadApplied || !contains(r.Changes, "dynamo.discovery.file.namespace (watcher_restart)") {
		t.Fatalf("namespace %+v", r)
	}
	if got := restarts(t, f.metrics); got != before+2 {
		t.Errorf("namespace change: %v restarts, want %v", got, before+2)
	}
	if !strings.Contains(f.logs.String(), "reason=namespace") {
		t.Error("reason=namespace not logged")
	}
	if !strings.Contains(f.logs.String(), "level=INFO msg=\"dynamo discovery watcher restarting\"") {
		t.Errorf("restart not logged at info:\n%s", f.logs.String())
	}
}
