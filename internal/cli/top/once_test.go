package top_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/cli"
	"github.com/continuum-router/continuum/internal/cli/cmdutil"
	"github.com/continuum-router/continuum/internal/iostreams"
	"github.com/continuum-router/continuum/internal/tui"
)

// TestOnceJoinsLoadByNamespace: two Dynamo graphs may reuse instance ids
// (load samples are kept per namespace, instance id and dp rank): top
// shows each worker the load sample of its own namespace, as
// /admin/dynamo/load reports it.
func TestOnceJoinsLoadByNamespace(t *testing.T) {
	workers := `{"enabled":true,"connected":true,"source":"file","namespaces":["a","b"],"generation":1,"workers":[
	 {"instance_id":"1","namespace":"a","worker_id":"1","role":"decode","model":"m","component":"decode","endpoint":"generate","dp_start_rank":0,"dp_size":1,"capacity":{"total_kv_blocks":100},"first_seen":"2026-01-01T00:00:00+00:00","last_updated":"2026-01-01T00:00:00+00:00"},
	 {"instance_id":"1","namespace":"b","worker_id":"1","role":"decode","model":"m","component":"decode","endpoint":"generate","dp_start_rank":0,"dp_size":1,"capacity":{"total_kv_blocks":100},"first_seen":"2026-01-01T00:00:00+00:00","last_updated":"2026-01-01T00:00:00+00:00"}],
	 "load_publishers":2,"kv_event_publishers":0,"subscriptions":[]}`
	load := `{"max_staleness_ms":3000,"samples":[
	 {"worker_id":"1","namespace":"a","dp_rank":0,"active_decode_blocks":10,"active_prefill_tokens":0,"kv_used_blocks":null,"age_ms":5,"state":"fresh","selections":7},
	 {"worker_id":"1","namespace":"b","dp_rank":0,"active_decode_blocks":90,"active_prefill_tokens":0,"kv_used_blocks":null,"age_ms":5,"state":"fresh","selections":3}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/admin/dynamo/workers":
			_, _ = w.Write([]byte(workers))
		case "/admin/dynamo/load":
			_, _ = w.Write([]byte(load))
		case "/admin/dynamo/problems":
			_, _ = w.Write([]byte(`{"generation":1,"problems":[]}`))
		case "/metrics":
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	code, out, errOut := run(t, "top", "--once", "-o", "json", "--interval", "100ms", "--router", srv.URL, "--token", "t")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc tui.Once
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(doc.Workers) != 2 {
		t.Fatalf("want 2 rows:\n%s", out)
	}
	for _, w := range doc.Workers {
		if w.Load == nil {
			t.Errorf("namespace %s: no load row", w.Namespace)
			continue
		}
		if w.Load.Namespace != w.Namespace {
			t.Errorf("worker 1 of namespace %q shows the load sample of namespace %q (decode blocks %d, selections %d)",
				w.Namespace, w.Load.Namespace, *w.Load.ActiveDecodeBlocks, w.Load.Selections)
		}
	}
}

// TestOnceInterruptedSaysSo: top --once interrupted between its two
// polls exits 1 saying it was interrupted (as discover and kv-inspect match
// do), not with Go's bare "context canceled".
func TestOnceInterruptedSaysSo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/admin/dynamo/workers":
			_, _ = w.Write([]byte(`{"enabled":true,"connected":true,"source":"file","namespaces":["a"],"generation":1,"workers":[],"subscriptions":[]}`))
		case "/admin/dynamo/load":
			_, _ = w.Write([]byte(`{"max_staleness_ms":3000,"samples":[]}`))
		case "/admin/dynamo/problems":
			_, _ = w.Write([]byte(`{"generation":1,"problems":[]}`))
		case "/metrics":
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	t.Setenv("CONTINUUM_CONFIG", "")
	ios, _, _, errOut := iostreams.Test()
	f := &cmdutil.Factory{IOStreams: ios, Env: os.LookupEnv}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(500*time.Millisecond, cancel) // the signal, as Main's NotifyContext gives it
	code := cli.Run(ctx, f, []string{"top", "--once", "--interval", "10s", "--router", srv.URL})
	if code != 1 || strings.Contains(errOut.String(), "context canceled") || strings.Contains(errOut.String(), "deadline exceeded") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}
