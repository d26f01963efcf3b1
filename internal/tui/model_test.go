package tui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/tui"
)

var t0 = time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)

func u64(v uint64) *uint64 { return &v }
func u32(v uint32) *uint32 { return &v }

func worker(ns, model, role, hex, id string, dpStart, dpSize uint32) admin.Worker {
	return admin.Worker{InstanceID: hex, Namespace: ns, WorkerID: id, Role: role, Model: model, Component: role, Endpoint: "generate",
		DPStartRank: dpStart, DPSize: dpSize, BlockSize: u32(16),
		Capacity:              admin.Capacity{TotalKVBlocks: u64(8192), MaxNumBatchedTokens: u64(16384), MaxNumSeqs: u64(256), ContextLength: u32(32768)},
		DisaggregatedEndpoint: json.RawMessage("null"), FirstSeen: "2026-11-30T13:58:00+00:00", LastUpdated: "2026-11-30T13:59:00+00:00"}
}

// fixture is a fleet of two namespaces: prod serves two models with
// prefill, data-parallel decode and aggregated workers; canary one worker
// without a sample yet. n scales the counters so two fixtures a second
// apart give rates.
func fixture(at time.Time, n float64) *tui.Snapshot {
	workers := []admin.Worker{
		worker("prod", "Qwen/Qwen3-32B", "prefill", "694d9a8f0e8b2c41", "7587890000000000001", 0, 1),
		worker("prod", "Qwen/Qwen3-32B", "prefill", "694d9a8f0e8b2c42", "7587890000000000002", 0, 1),
		worker("prod", "Qwen/Qwen3-32B", "decode", "694d9a8f0e8b2c50", "7587890000000000016", 0, 2),
		worker("prod", "meta-llama/Llama-3.1-8B", "backend", "694d9a8f0e8b2c60", "7587890000000000032", 0, 1),
		worker("canary", "Qwen/Qwen3-32B", "decode", "694d9a8f0e8b2c70", "7587890000000000048", 0, 1),
	}
	sel := func(base float64) uint64 { return uint64(base * n) }
	c := func(base float64) float64 { return base * n }
	samples := []admin.LoadSample{
		{WorkerID: "7587890000000000001", Namespace: "prod", ActiveDecodeBlocks: u64(0), ActivePrefillTokens: u64(12288), KVUsedBlocks: u64(100), AgeMs: 120, State: "fresh", Selections: sel(40)},
		{WorkerID: "7587890000000000002", Namespace: "prod", ActiveDecodeBlocks: u64(0), ActivePrefillTokens: u64(2048), AgeMs: 5400, State: "stale", Selections: sel(10)},
		{WorkerID: "7587890000000000016", Namespace: "prod", DPRank: 0, ActiveDecodeBlocks: u64(6144), ActivePrefillTokens: u64(0), AgeMs: 80, State: "fresh", Selections: sel(30)},
		{WorkerID: "7587890000000000016", Namespace: "prod", DPRank: 1, ActiveDecodeBlocks: u64(1024), ActivePrefillTokens: u64(0), AgeMs: 95, State: "fresh", Selections: sel(20)},
		{WorkerID: "7587890000000000032", Namespace: "prod", KVUsedBlocks: u64(4096), AgeMs: 61000, State: "quiet", Selections: sel(5)},
		{WorkerID: "7587890000000000048", Namespace: "canary", State: "none"},
	}
	return &tui.Snapshot{
		At: at,
		Workers: admin.WorkersResponse{Enabled: true, Connected: true, Source: "etcd", Signals: admin.Signals{Load: true, Capacity: true},
			Namespaces: []string{"canary", "prod"}, Generation: 42, Workers: workers, LoadPublishers: 5, KVEventPublishers: 1,
			Subscriptions: []admin.Subscription{
				{Family: "kv_metrics", PublisherID: "7587890000000000001", Namespace: "prod", Component: "prefill", State: "connected", Transport: "direct"},
				{Family: "kv_metrics", PublisherID: "7587890000000000048", Namespace: "canary", Component: "decode", State: "backoff", Transport: "direct"},
				{Family: "kv-events", PublisherID: "7587890000000000101", Namespace: "prod", Component: "prefill", State: "connected", Transport: "direct"},
			}},
		Load: admin.LoadResponse{MaxStalenessMs: 3000, Samples: samples},
		Problems: admin.ProblemsResponse{Generation: 42, Problems: []admin.Problem{
			{Kind: "duplicate", Keys: []string{"v1/instances/prod/backend/generate/694d9a8f0e8b2c60"}, KeyCount: 2, Reason: "two records claim worker 694d9a8f0e8b2c60"},
		}},
		Metrics: map[string]map[string]float64{
			"continuum_dynamo_selection_total": {
				"reason=load,role=decode":              c(50),
				"reason=load,role=prefill":             c(45),
				"reason=round_robin_stale,role=decode": c(3),
				"reason=no_prefill_pool,role=decode":   c(5),
				// The router exports every pair of the closed set: those
				// at zero are not shown.
				"reason=kv_aware,role=decode": 0,
			},
			"disaggregated_requests_total": {"routing_path=disaggregated": c(45), "routing_path=aggregated": c(5), "routing_path=fallback": 0},
			"disaggregated_errors_total":   {"phase=decode": c(1), "phase=orchestration": 0},
			"continuum_dynamo_load_subscriptions": {"state=connected,transport=direct": 4, "state=backoff,transport=direct": 1,
				"state=pending,transport=broker": 0},
			"continuum_dynamo_load_events_total":      {"result=accepted": c(900), "result=duplicate": 2, "result=oversized": 0},
			"continuum_dynamo_discovery_events_total": {"kind=duplicate": n, "kind=restart": 1, "kind=mismatch": 0},
			"continuum_dynamo_kv_selection_total": {
				"result=overlap": c(30), "result=no_overlap": c(15), "result=tokenizer_unavailable": 2, "result=bypass": 0,
			},
			"continuum_dynamo_kv_subscriptions":    {"state=connected,transport=direct": 1, "state=backoff,transport=direct": 0},
			"continuum_dynamo_kv_events_total":     {"result=accepted": c(400), "result=gap": 1, "result=replay": 0},
			"continuum_dynamo_kv_index_nodes":      {"": 12400},
			"continuum_dynamo_kv_index_ownerships": {"": 13100},
			"continuum_dynamo_kv_index_bytes":      {"": 3 << 20},
		},
	}
}

func newModel(t *testing.T, w, h int, fetch tui.FetchFunc) tui.Model {
	t.Helper()
	m := tui.New(tui.Options{Router: "http://router:8080", Interval: time.Second, Fetch: fetch})
	return update(m, tea.WindowSizeMsg{Width: w, Height: h})
}

func update(m tui.Model, msgs ...tea.Msg) tui.Model {
	for _, msg := range msgs {
		next, _ := m.Update(msg)
		m = next.(tui.Model)
	}
	return m
}

func keys(m tui.Model, ks ...string) tui.Model {
	for _, k := range ks {
		var msg tea.KeyPressMsg
		switch k {
		case "tab":
			msg = tea.KeyPressMsg{Code: tea.KeyTab}
		case "enter":
			msg = tea.KeyPressMsg{Code: tea.KeyEnter}
		case "esc":
			msg = tea.KeyPressMsg{Code: tea.KeyEscape}
		case "down":
			msg = tea.KeyPressMsg{Code: tea.KeyDown}
		case "backspace":
			msg = tea.KeyPressMsg{Code: tea.KeyBackspace}
		default:
			for _, r := range k { // one press per character, as the terminal sends them
				m = update(m, tea.KeyPressMsg{Code: r, Text: string(r)})
			}
			continue
		}
		m = update(m, msg)
	}
	return m
}

// loaded is a model after two polls a second apart.
func loaded(t *testing.T, w, h int) tui.Model {
	return update(newModel(t, w, h, nil), tui.SnapshotMsg(fixture(t0, 1)), tui.SnapshotMsg(fixture(t0.Add(time.Second), 2)))
}

func frame(t *testing.T, m tui.Model, w, h int) string {
	t.Helper()
	v := m.Render()
	lines := strings.Split(v, "\n")
	if len(lines) != h {
		t.Fatalf("frame has %d lines, want %d:\n%s", len(lines), h, v)
	}
	for i, l := range lines {
		if n := len([]rune(l)); n > w {
			t.Errorf("line %d is %d wide (> %d): %q", i+1, n, w, l)
		}
	}
	return v + "\n"
}

func TestGoldenFrames(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {160, 48}} {
		w, h := size[0], size[1]
		m := loaded(t, w, h)
		views := map[string]tui.Model{
			"fleet":         m,
			"subscriptions": keys(m, "tab"),
			"routing":       keys(m, "tab", "tab"),
			"problems":      keys(m, "tab", "tab", "tab"),
			"detail":        keys(m, "down", "down", "enter"),
			"help":          keys(m, "?"),
			"filtered":      keys(m, "/", "canary", "enter"),
		}
		for name, v := range views {
			testutil.Golden(t, fmt.Sprintf("testdata/%s_%dx%d.golden", name, w, h), []byte(frame(t, v, w, h)))
		}
	}
}

// TestKVSections: the Routing view shows the KV-aware selections that
// happened with their rates, "none yet" before any, and says KV-aware
// selection is off when the router exports none of its families; the
// Subscriptions view summarises the kv-events subscriptions, events and
// index only when it is on.
func TestKVSections(t *testing.T) {
	m := loaded(t, 160, 48)
	routing, subs := keys(m, "3").Render(), keys(m, "2").Render()
	for _, want := range []string{"KV-aware selections by result", "overlap", "30/s", "tokenizer_unavailable"} {
		if !strings.Contains(routing, want) {
			t.Errorf("routing lacks %q:\n%s", want, routing)
		}
	}
	if strings.Contains(routing, "bypass") {
		t.Errorf("a result that never happened is listed:\n%s", routing)
	}
	for _, want := range []string{"kv-events subscriptions: connected/direct 1", "kv events: accepted 800, gap 1", "kv index: 12k blocks, 13k ownerships, 3.0 MiB",
		"kv-events  7587890000000000101"} {
		if !strings.Contains(subs, want) {
			t.Errorf("subscriptions lack %q:\n%s", want, subs)
		}
	}
	fresh := fixture(t0, 1)
	fresh.Metrics["continuum_dynamo_kv_selection_total"] = map[string]float64{"result=overlap": 0}
	if v := keys(update(newModel(t, 160, 48, nil), tui.SnapshotMsg(fresh)), "3").Render(); !strings.Contains(v, "none yet") {
		t.Errorf("no selections yet:\n%s", v)
	}
	off := fixture(t0, 1)
	for fam := range off.Metrics {
		if strings.HasPrefix(fam, "continuum_dynamo_kv_") {
			delete(off.Metrics, fam)
		}
	}
	m = update(newModel(t, 160, 48, nil), tui.SnapshotMsg(off))
	if v := keys(m, "3").Render(); !strings.Contains(v, "off (dynamo.kv.enabled is false)") {
		t.Errorf("kv off:\n%s", v)
	}
	if v := keys(m, "2").Render(); strings.Contains(v, "kv index") {
		t.Errorf("kv lines without KV-aware selection:\n%s", v)
	}
}

func TestFleetRows(t *testing.T) {
	m := loaded(t, 80, 24)
	rows := m.Rows()
	if len(rows) != 6 { // five workers, one with two ranks
		t.Fatalf("%d rows", len(rows))
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s/%s/%s#%d", r.Worker.Namespace, r.Worker.Role, r.Worker.InstanceID[12:], r.Rank))
	}
	// Groups sort by namespace, model (byte order), role; within a group by load.
	want := "canary/decode/2c70#0 prod/decode/2c50#0 prod/decode/2c50#1 prod/prefill/2c41#0 prod/prefill/2c42#0 prod/backend/2c60#0"
	if strings.Join(got, " ") != want {
		t.Fatalf("rows\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	if r := rows[1]; r.SelRate != 30 {
		t.Errorf("selection rate %v, want 30/s", r.SelRate)
	}
	m = keys(m, "s") // id
	m = keys(m, "s") // age
	if r := m.Rows()[3]; r.Worker.InstanceID != "694d9a8f0e8b2c41" {
		t.Errorf("age sort: %s first among prefill", r.Worker.InstanceID)
	}
	m = keys(m, "s") // selections
	if !strings.Contains(m.Render(), "sort:selections") {
		t.Error("sort not shown")
	}
	if r := m.Rows()[1]; r.Rank != 0 {
		t.Errorf("selections sort: rank %d first", r.Rank)
	}
}

func TestFilter(t *testing.T) {
	m := keys(loaded(t, 80, 24), "/", "p", "r", "e", "f", "i", "l", "l")
	if n := len(m.Rows()); n != 2 {
		t.Fatalf("filter prefill: %d rows", n)
	}
	if !strings.Contains(m.Render(), "filter: prefill") {
		t.Error("filter not shown while typing")
	}
	m = keys(m, "backspace", "backspace", "backspace", "backspace", "backspace", "backspace", "backspace", "backspace", "2c60", "enter")
	if n := len(m.Rows()); n != 1 || m.Rows()[0].Worker.Role != "backend" {
		t.Fatalf("filter by id: %+v", m.Rows())
	}
	m = keys(m, "esc")
	if n := len(m.Rows()); n != 6 {
		t.Fatalf("esc keeps the filter: %d rows", n)
	}
	m = keys(m, "/", "no-such-thing", "enter")
	if !strings.Contains(m.Render(), `no workers match the filter "no-such-thing"`) {
		t.Errorf("empty filter result:\n%s", m.Render())
	}
}

func TestCursorAndResize(t *testing.T) {
	m := loaded(t, 80, 24)
	m = keys(m, "down", "down", "down", "down", "down", "down", "down", "down")
	if r, _ := m.Selected(); r.Worker.InstanceID != "694d9a8f0e8b2c60" {
		t.Errorf("cursor past the end: %s", r.Worker.InstanceID)
	}
	m = keys(m, "k", "k", "g")
	if r, _ := m.Selected(); r.Worker.Namespace != "canary" {
		t.Errorf("g: %+v", r.Worker)
	}
	// A short terminal scrolls to keep the cursor visible.
	small := update(keys(m, "G"), tea.WindowSizeMsg{Width: 60, Height: 8})
	v := frame(t, small, 60, 8)
	if !strings.Contains(v, "› 694d9a8f0e8b2c60") {
		t.Errorf("cursor row not visible at 60x8:\n%s", v)
	}
}

func TestTabsWrapAndNumbers(t *testing.T) {
	m := loaded(t, 80, 24)
	for i, want := range []string{"[2 Subs]", "[3 Routing]", "[4 Problems]", "[1 Fleet]"} {
		m = keys(m, "tab")
		if !strings.Contains(m.Render(), want) {
			t.Fatalf("tab %d: want %s", i+1, want)
		}
	}
	if m = keys(m, "3"); !strings.Contains(m.Render(), "[3 Routing]") {
		t.Error("3 does not jump to Routing")
	}
}

func TestQuitAndHelp(t *testing.T) {
	m := keys(loaded(t, 80, 24), "?")
	if !strings.Contains(m.Render(), "cycle sort: load, id, age, selections") {
		t.Fatal("help not shown")
	}
	m = keys(m, "x")
	if strings.Contains(m.Render(), "cycle sort") {
		t.Fatal("help not closed by a key")
	}
	_, cmd := m.Update(tea.KeyPressMsg{Code: 'q', Text: "q"})
	if cmd == nil {
		t.Fatal("q returns no command")
	}
	if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Fatal("q does not quit")
	}
}

// TestPollingAndPause: a tick polls through the fetch function unless
// paused; a poll schedules the next tick.
func TestPollingAndPause(t *testing.T) {
	var calls atomic.Int32
	fetch := func(_ context.Context, now time.Time) (*tui.Snapshot, error) {
		calls.Add(1)
		return fixture(now, 1), nil
	}
	m := tui.New(tui.Options{Router: "r", Interval: time.Millisecond, Fetch: fetch})
	msg := m.Init()()
	if calls.Load() != 1 {
		t.Fatal("Init does not poll")
	}
	next, cmd := m.Update(msg)
	m = next.(tui.Model)
	if m.Snapshot() == nil || cmd == nil {
		t.Fatal("a poll does not schedule the next")
	}
	tick := cmd()
	_, cmd = m.Update(tick)
	_ = cmd()
	if calls.Load() != 2 {
		t.Fatalf("a tick does not poll: %d calls", calls.Load())
	}
	m = keys(m, "p")
	if !strings.Contains(m.Render(), "PAUSED") {
		t.Error("pause not shown")
	}
	_, cmd = m.Update(tick)
	if cmd == nil {
		t.Fatal("a paused tick schedules nothing")
	}
	if _ = cmd(); calls.Load() != 2 {
		t.Fatalf("paused tick polled: %d calls", calls.Load())
	}
}

// TestDisconnected: failures show since when and back off; a good poll
// clears the banner.
func TestDisconnected(t *testing.T) {
	m := loaded(t, 80, 24)
	errAt := t0.Add(3 * time.Second)
	for i := range 4 {
		m = update(m, tui.FetchErrMsg(errors.New("router unreachable: connection refused"), errAt.Add(time.Duration(i)*time.Second)))
	}
	v := frame(t, m, 80, 24)
	testutil.Golden(t, "testdata/disconnected_80x24.golden", []byte(v))
	if !strings.Contains(v, "disconnected since 14:00:03 (4 failures, retrying every 8s)") {
		t.Errorf("banner:\n%s", v)
	}
	if !strings.Contains(v, "694d9a8f0e8b2c50") {
		t.Error("the last good view is not kept while disconnected")
	}
	m = update(m, tui.SnapshotMsg(fixture(t0.Add(10*time.Second), 3)))
	if strings.Contains(m.Render(), "disconnected") || m.Err() != nil {
		t.Error("banner not cleared by a good poll")
	}
	many := m
	for range 20 {
		many = update(many, tui.FetchErrMsg(errors.New("x"), t0))
	}
	if !strings.Contains(many.Render(), "retrying every 30s") {
		t.Errorf("backoff not capped at 30s:\n%s", many.Render())
	}
	first := update(newModel(t, 80, 24, nil), tui.FetchErrMsg(errors.New("/admin/dynamo/workers: 401 Unauthorized (check --token)"), t0))
	if v := first.Render(); !strings.Contains(v, "no answer since 14:00:00") || !strings.Contains(v, "check --token") || !strings.Contains(v, "waiting for the first answer") {
		t.Errorf("never connected:\n%s", v)
	}
}

// TestNoColor: plain styles carry no escape sequences.
func TestNoColor(t *testing.T) {
	if v := loaded(t, 80, 24).Render(); strings.Contains(v, "\x1b[") {
		t.Errorf("escape sequences without colour:\n%q", v)
	}
}

func routerStub(t *testing.T, h http.HandlerFunc) *tui.Client {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &tui.Client{Base: srv.URL, Token: "tok"}
}

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	cases := map[string]struct {
		h    http.HandlerFunc
		want string
	}{
		"garbage": {func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>oops")) }, "bad response from /admin/dynamo/workers"},
		"401":     {func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) }, "/admin/dynamo/workers: 401 Unauthorized (check --token)"},
		"500":     {func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }, "500 Internal Server Error"},
		"404 with the router's reason": {func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"message":"the admin API is off: set admin.token","type":"invalid_request_error"}}`))
		}, "/admin/dynamo/workers: 404 Not Found: the admin API is off: set admin.token"},
		"bare 404": {func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) }, "404 Not Found (is the admin API on"},
		"404 from the router's main port": {func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"message":"no such route","type":"invalid_request_error"}}`))
		}, "404 Not Found: no such route (is the admin API on"},
		"bad metrics": {func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				_, _ = w.Write([]byte("continuum_dynamo_selection_total{role=\"decode\" 1\n"))
				return
			}
			_, _ = w.Write([]byte("{}"))
		}, "bad response from /metrics"},
		"timeout": {func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, "timed out"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cl := routerStub(t, c.h)
			// Only the stalled case runs out of time: the others must
			// fail for their own reason however slow the machine.
			limit := 10 * time.Second
			if name == "timeout" {
				limit = 200 * time.Millisecond
			}
			cctx, cancel := context.WithTimeout(ctx, limit)
			defer cancel()
			_, err := cl.Fetch(cctx, t0)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
	cl := &tui.Client{Base: "http://127.0.0.1:1"}
	if _, err := cl.Fetch(ctx, t0); err == nil || !strings.Contains(err.Error(), "router unreachable") {
		t.Fatalf("closed port: %v", err)
	}
}

func TestClientSendsTokenAndParsesMetrics(t *testing.T) {
	var auth atomic.Value
	cl := routerStub(t, func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		if r.URL.Path == "/metrics" {
			_, _ = w.Write([]byte("# TYPE continuum_dynamo_selection_total counter\ncontinuum_dynamo_selection_total{reason=\"load\",role=\"decode\"} 7\n# TYPE go_goroutines gauge\ngo_goroutines 12\n"))
			return
		}
		_, _ = w.Write([]byte(`{"workers":[],"samples":[],"problems":[]}`))
	})
	s, err := cl.Fetch(context.Background(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if auth.Load() != "Bearer tok" {
		t.Errorf("authorization %v", auth.Load())
	}
	if v := s.Metric("continuum_dynamo_selection_total", "reason=load,role=decode"); v != 7 {
		t.Errorf("selection %v", v)
	}
	if _, ok := s.Metrics["go_goroutines"]; ok {
		t.Error("unneeded families kept")
	}
}

func TestOnce(t *testing.T) {
	m := loaded(t, 80, 24)
	var js, table strings.Builder
	if err := m.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc tui.Once
	if err := json.Unmarshal([]byte(js.String()), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Workers) != 6 || doc.Source != "etcd" || doc.Generation != 42 || len(doc.Problems) != 1 || doc.At != "2026-11-30T14:00:01+00:00" {
		t.Fatalf("%s", js.String())
	}
	// --once polls twice so that the rates between the polls are real.
	if r := doc.Workers[1]; r.SelectionsPerSecond != 30 {
		t.Errorf("selections a second %v, want 30 (%+v)", r.SelectionsPerSecond, r)
	}
	if err := m.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, "testdata/once.table.golden", []byte(table.String()))
	if _, err := tui.New(tui.Options{Router: "r"}).Once(); err == nil {
		t.Error("a model without a snapshot printed one")
	}
}

// TestFilterPaste: a paste into the filter keeps its printable characters
// (no line break or terminal control reaches the prompt) up to the
// filter's bound; outside the filter a paste does nothing.
func TestFilterPaste(t *testing.T) {
	m := update(keys(loaded(t, 200, 24), "/"), tea.PasteMsg{Content: "cana\x1b]0;owned\x07ry\n"})
	if !strings.Contains(m.Render(), "filter: cana]0;ownedry") || strings.ContainsAny(m.Render(), "\x1b\x07") {
		t.Fatalf("paste:\n%q", m.Render())
	}
	m = update(keys(m, "esc", "/"), tea.PasteMsg{Content: strings.Repeat("x", 500)})
	if !strings.Contains(m.Render(), "filter: "+strings.Repeat("x", 64)) || strings.Contains(m.Render(), strings.Repeat("x", 65)) {
		t.Fatalf("a long paste:\n%s", m.Render())
	}
	if m = update(keys(m, "esc"), tea.PasteMsg{Content: "q"}); m.Err() != nil || strings.Contains(m.Render(), "filter:") {
		t.Fatalf("a paste outside the filter:\n%s", m.Render())
	}
}

// TestTinyTerminals: every view renders at any size without panicking.
func TestTinyTerminals(t *testing.T) {
	for _, size := range [][2]int{{0, 0}, {1, 1}, {20, 5}, {30, 6}, {10, 40}} {
		m := update(loaded(t, size[0], size[1]), tui.FetchErrMsg(errors.New("router unreachable"), t0))
		for _, k := range []string{"tab", "tab", "tab", "tab", "G", "enter", "esc", "?", "x", "/", "z"} {
			m = keys(m, k)
			_ = m.Render()
		}
	}
}

// TestProblemKeyKeepsItsEnd: a problem's first key too wide for its
// column keeps its end (the instance id that tells two records apart),
// not the prefix every key shares.
func TestProblemKeyKeepsItsEnd(t *testing.T) {
	snap := fixture(t0, 1)
	key := "v1/instances/dynamo/decode/generate/" + strings.Repeat("7a", 30) + "beef"
	snap.Problems.Problems = []admin.Problem{{Kind: "malformed", KeyCount: 1, Keys: []string{key}, Reason: "bad"}}
	v := keys(update(newModel(t, 130, 24, nil), tui.SnapshotMsg(snap)), "4").Render()
	if !strings.Contains(v, "7a7abeef") || strings.Contains(v, "v1/instances/dynamo") {
		t.Errorf("the key's end is not shown:\n%s", v)
	}
}

// TestLongListsScroll: the cursor's row stays visible in every list.
func TestLongListsScroll(t *testing.T) {
	snap := fixture(t0, 1)
	snap.Problems.Problems = nil
	snap.Workers.Subscriptions = nil
	for i := range 50 {
		snap.Problems.Problems = append(snap.Problems.Problems, admin.Problem{Kind: "malformed", KeyCount: 1, Reason: fmt.Sprintf("reason-%d", i)})
		snap.Workers.Subscriptions = append(snap.Workers.Subscriptions, admin.Subscription{Family: "kv_metrics", PublisherID: fmt.Sprint(1000 + i), State: "connected"})
	}
	m := update(newModel(t, 80, 24, nil), tui.SnapshotMsg(snap))
	if v := keys(m, "4", "G").Render(); !strings.Contains(v, "reason-49") || strings.Contains(v, "reason-0 ") {
		t.Errorf("problems do not scroll:\n%s", v)
	}
	if v := keys(m, "2", "G").Render(); !strings.Contains(v, "› kv_metrics 1049") {
		t.Errorf("subscriptions do not scroll:\n%s", v)
	}
}

// TestSparklinesRemember: the Routing view's sparklines show the rates of
// the polls so far, not the last one alone.
func TestSparklinesRemember(t *testing.T) {
	m := update(newModel(t, 100, 40, nil), tui.SnapshotMsg(fixture(t0, 1)), tui.SnapshotMsg(fixture(t0.Add(time.Second), 2)),
		tui.SnapshotMsg(fixture(t0.Add(2*time.Second), 4)))
	for _, line := range strings.Split(keys(m, "3").Render(), "\n") {
		if strings.Contains(line, "decode load") {
			if !strings.Contains(line, "▅█") { // 50/s, then 100/s
				t.Errorf("sparkline of two polls: %q", line)
			}
			return
		}
	}
	t.Error("no decode load line")
}

// TestRatesOfVanishedSeries: a series the router no longer reports (it
// restarted) stops counting in the totals.
func TestRatesOfVanishedSeries(t *testing.T) {
	m := loaded(t, 80, 24)
	if !strings.Contains(m.Render(), "58 req/s") {
		t.Fatalf("before:\n%s", m.Render())
	}
	next := fixture(t0.Add(2*time.Second), 2)
	next.Metrics["continuum_dynamo_selection_total"] = map[string]float64{}
	m = update(m, tui.SnapshotMsg(next))
	if !strings.Contains(m.Render(), " 0 req/s") {
		t.Errorf("after the series went:\n%s", m.Render())
	}
}

// TestFleetStringsEscapedForTerminal: strings of the router's answers (model,
// namespace and component names, problem keys and reasons, metric labels)
// reach every view and the --once table with their control characters
// escaped, so an answer cannot clear the screen, retitle the terminal or
// break a row; the --once JSON document keeps them as sent.
func TestFleetStringsEscapedForTerminal(t *testing.T) {
	evil := "m\x1b[2J\x1b]0;title\x07\r\nx\u202e"
	w := worker("ns\x1b[31m", evil, "decode", "0a", "10", 0, 1)
	w.Component = "c\x1b[Hc"
	w.DisaggregatedEndpoint = json.RawMessage("\"dynamo/prefill\u202e/generate\"")
	cl := routerStub(t, func(rw http.ResponseWriter, r *http.Request) {
		var v any
		switch r.URL.Path {
		case "/admin/dynamo/workers":
			v = admin.WorkersResponse{Enabled: true, Connected: true, Source: "etcd", Namespaces: []string{"ns\x1b[31m"}, Workers: []admin.Worker{w},
				Subscriptions: []admin.Subscription{{Family: "load", PublisherID: "1", Namespace: "ns\x1b[31m", Component: "c\x1b[Hc", State: "connected", Transport: "direct"}}}
		case "/admin/dynamo/load":
			v = admin.LoadResponse{Samples: []admin.LoadSample{{WorkerID: "10", Namespace: "ns\x1b[31m", State: "fresh", ActiveDecodeBlocks: u64(1)}}}
		case "/admin/dynamo/problems":
			v = admin.ProblemsResponse{Problems: []admin.Problem{{Kind: "malformed", Keys: []string{"v1/instances/\x1b]0;t\x07"}, KeyCount: 1, Reason: evil}}}
		case "/metrics":
			_, _ = rw.Write([]byte("# TYPE continuum_dynamo_selection_total counter\ncontinuum_dynamo_selection_total{reason=\"load\x1b[2J\",role=\"decode\"} 7\n"))
			return
		}
		_ = json.NewEncoder(rw).Encode(v)
	})
	m := newModel(t, 200, 40, nil)
	for range 2 {
		s, err := cl.Fetch(context.Background(), t0)
		if err != nil {
			t.Fatal(err)
		}
		m = update(m, tui.SnapshotMsg(s))
	}
	raw := func(s string) bool {
		return strings.ContainsAny(s, "\x07\r\u202e") || strings.Contains(s, "\x1b[2J") || strings.Contains(s, "\x1b]") || strings.Contains(s, "\x1b[H") || strings.Contains(s, "\x1b[31m")
	}
	views := []string{m.Render()}
	for _, k := range []string{"enter", "esc", "tab", "tab", "tab"} {
		m = keys(m, k)
		views = append(views, m.Render())
	}
	for i, v := range views {
		if raw(v) {
			t.Errorf("view %d carries raw control sequences:\n%q", i, v)
		}
	}
	if !strings.Contains(views[0], `m\x1b[2J`) {
		t.Errorf("the model name is not shown escaped:\n%s", views[0])
	}
	var table strings.Builder
	if err := m.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if raw(table.String()) || !strings.Contains(table.String(), `ns\x1b[31m`) {
		t.Errorf("--once table:\n%q", table.String())
	}
	// The JSON document carries the strings as the router sent them: the
	// encoder writes control characters as \u escapes, and a reader gets
	// back the names the fleet holds, not their terminal rendering.
	var js strings.Builder
	if err := m.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(js.String(), "\x1b\x07\r") {
		t.Errorf("--once -o json carries raw control characters:\n%q", js.String())
	}
	var doc tui.Once
	if err := json.Unmarshal([]byte(js.String()), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Workers) != 1 || doc.Workers[0].Model != evil || doc.Workers[0].Namespace != "ns\x1b[31m" ||
		doc.Workers[0].Load == nil || doc.Workers[0].Load.Namespace != "ns\x1b[31m" {
		t.Errorf("--once -o json workers: %+v", doc.Workers)
	}
	if len(doc.Subscriptions) != 1 || doc.Subscriptions[0].Component != "c\x1b[Hc" {
		t.Errorf("--once -o json subscriptions: %+v", doc.Subscriptions)
	}
	if len(doc.Problems) != 1 || doc.Problems[0].Reason != evil || doc.Problems[0].Keys[0] != "v1/instances/\x1b]0;t\x07" {
		t.Errorf("--once -o json problems: %+v", doc.Problems)
	}
	if doc.Counters["continuum_dynamo_selection_total"]["reason=load\x1b[2J,role=decode"] != 7 {
		t.Errorf("--once -o json counters: %v", doc.Counters)
	}
	// The views still draw the escaped strings after the JSON was taken.
	if v := m.Render(); raw(v) {
		t.Errorf("view after --once -o json:\n%q", v)
	}
}

// TestErrorBannerEscaped: a poll's error quoting the router's answer (a
// status line carrying terminal controls) is drawn escaped in the banner.
func TestErrorBannerEscaped(t *testing.T) {
	base := testutil.StatusLineServer(t, "500 bad\x1b]0;owned\x07\x1b[2J")
	cl := &tui.Client{Base: base, HTTP: &http.Client{}}
	_, ferr := cl.Fetch(context.Background(), t0)
	if ferr == nil || !strings.Contains(ferr.Error(), "\x1b]0;owned") {
		t.Fatalf("fetch error %v: the status line did not reach it", ferr)
	}
	m := update(newModel(t, 200, 20, nil), tui.FetchErrMsg(ferr, t0))
	v := m.Render()
	if strings.ContainsAny(v, "\x07") || strings.Contains(v, "\x1b]") || strings.Contains(v, "\x1b[2J") || !strings.Contains(v, `bad\x1b]0;owned\x07`) {
		t.Errorf("banner:\n%q", v)
	}
}

// TestCursorFollowsWorker: the cursor stays on its worker rank when a
// poll re-sorts the rows (here the two prefill workers swap loads), and
// so does the detail it opened.
func TestCursorFollowsWorker(t *testing.T) {
	m := loaded(t, 160, 48)
	for i, r := range m.Rows() { // down to the less loaded prefill worker
		if r.Worker.WorkerID == "7587890000000000002" {
			m = keys(m, slices.Repeat([]string{"down"}, i)...)
		}
	}
	before, ok := m.Selected()
	if !ok || before.Worker.Role != "prefill" {
		t.Fatalf("selected %+v", before.Worker)
	}
	next := fixture(t0.Add(2*time.Second), 3)
	var a, b *admin.LoadSample
	for i := range next.Load.Samples {
		switch next.Load.Samples[i].WorkerID {
		case "7587890000000000001":
			a = &next.Load.Samples[i]
		case "7587890000000000002":
			b = &next.Load.Samples[i]
		}
	}
	a.ActivePrefillTokens, b.ActivePrefillTokens = b.ActivePrefillTokens, a.ActivePrefillTokens
	idx := func(m tui.Model, id string) int {
		for i, r := range m.Rows() {
			if r.Worker.WorkerID == id {
				return i
			}
		}
		return -1
	}
	at := idx(m, before.Worker.WorkerID)
	m = update(keys(m, "enter"), tui.SnapshotMsg(next))
	after, _ := m.Selected()
	if after.Worker.WorkerID != before.Worker.WorkerID || after.Rank != before.Rank {
		t.Fatalf("the cursor moved from worker %s to %s", before.Worker.WorkerID, after.Worker.WorkerID)
	}
	if idx(m, before.Worker.WorkerID) == at {
		t.Fatalf("the poll did not re-sort the rows: the test shows nothing")
	}
	if !strings.Contains(m.Render(), before.Worker.WorkerID) {
		t.Fatalf("the detail does not show the worker:\n%s", m.Render())
	}
}

// TestDetailOfADepartedWorker: a worker that leaves the fleet while its
// detail is open stays in the detail, said to be gone, rather than the
// detail showing whichever worker the cursor is left on; closing it, or
// moving the cursor, shows the rows as they are.
func TestDetailOfADepartedWorker(t *testing.T) {
	m := loaded(t, 160, 48)
	const gone = "7587890000000000002"
	for i, r := range m.Rows() {
		if r.Worker.WorkerID == gone {
			m = keys(m, slices.Repeat([]string{"down"}, i)...)
		}
	}
	m = keys(m, "enter")
	next := fixture(t0.Add(2*time.Second), 3)
	ws := next.Workers.Workers[:0]
	for _, w := range next.Workers.Workers {
		if w.WorkerID != gone {
			ws = append(ws, w)
		}
	}
	next.Workers.Workers = ws
	m = update(m, tui.SnapshotMsg(next))
	if v := m.Render(); !strings.Contains(v, gone) || !strings.Contains(v, "left the fleet") {
		t.Fatalf("the detail of a worker that left:\n%s", v)
	}
	m = keys(m, "esc", "enter")
	if v := m.Render(); strings.Contains(v, "left the fleet") {
		t.Fatalf("the detail opened again on the rows as they are:\n%s", v)
	}
}

// TestSortByIDIsNumeric: instance ids are unpadded hex, ordered by value.
func TestSortByIDIsNumeric(t *testing.T) {
	snap := &tui.Snapshot{At: t0, Workers: admin.WorkersResponse{Enabled: true, Connected: true, Workers: []admin.Worker{
		worker("prod", "m", "decode", "1000", "4096", 0, 1), worker("prod", "m", "decode", "fff", "4095", 0, 1)}}}
	m := keys(update(newModel(t, 160, 48, nil), tui.SnapshotMsg(snap)), "s")
	if rows := m.Rows(); len(rows) != 2 || rows[0].Worker.InstanceID != "fff" {
		t.Fatalf("rows %v", rows)
	}
}

// TestRanksPerWorkerBounded: a worker list that declares a worker of
// billions of data-parallel ranks (not one the router takes) makes no more
// rows than the router's cap.
func TestRanksPerWorkerBounded(t *testing.T) {
	t.Parallel()
	s := fixture(t0, 1)
	s.Workers.Workers = append(s.Workers.Workers, worker("prod", "m", "decode", "694d9a8f0e8b2c80", "7587890000000000064", 0, 4_000_000_000))
	m := update(newModel(t, 160, 48, nil), tui.SnapshotMsg(s))
	if n := len(m.Rows()); n > 6+1024 {
		t.Errorf("%d rows", n)
	}
	_ = m.Render()
}

// TestFleetColumnsFit: at every width the fleet view's columns are whole,
// its states included (a layout is used only where all of it fits), and
// the worker ids and first-seen times come in as room allows.
func TestFleetColumnsFit(t *testing.T) {
	for w := 76; w <= 180; w++ {
		lines := strings.Split(loaded(t, w, 14).Render(), "\n")
		head := lines[3]
		if strings.Contains(head, "…") || !strings.Contains(head, "STATE") {
			t.Errorf("width %d: the header is cut: %q", w, head)
		}
		if got, want := strings.Contains(head, "WORKER ID"), w >= 113; got != want {
			t.Errorf("width %d: worker ids shown %v, want %v", w, got, want)
		}
		if got, want := strings.Contains(head, "FIRST SEEN"), w >= 143; got != want {
			t.Errorf("width %d: first seen shown %v, want %v", w, got, want)
		}
		frameText := strings.Join(lines, "\n")
		for _, state := range []string{"fresh", "stale", "none"} {
			if !strings.Contains(frameText, state) {
				t.Errorf("width %d: no whole %q state", w, state)
			}
		}
	}
}

// TestClientFollowsNoRedirect: a router address that redirects (to
// another port or scheme of the same host) gets no admin token sent on:
// the redirect is an error naming where it points.
func TestClientFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Get("Authorization"):
		default:
		}
		http.Error(w, "no", http.StatusNotFound)
	}))
	t.Cleanup(other.Close)
	router := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
	}))
	t.Cleanup(router.Close)
	c := &tui.Client{Base: router.URL, Token: "admin-SECRET"}
	_, err := c.Fetch(t.Context(), time.Now())
	if err == nil || !strings.Contains(err.Error(), "redirected to "+other.URL) {
		t.Errorf("Fetch: %v", err)
	}
	select {
	case a := <-got:
		t.Errorf("the redirect was followed (Authorization %q)", a)
	default:
	}
}

// TestRatesAcrossACounterReset: a counter lower than at the last poll was
// reset (the router restarted): its value is what it counted since, as
// Prometheus' rate() takes it, not a rate of 0 for a poll that saw traffic.
func TestRatesAcrossACounterReset(t *testing.T) {
	m := update(newModel(t, 80, 24, nil), tui.SnapshotMsg(fixture(t0, 10)), tui.SnapshotMsg(fixture(t0.Add(time.Second), 1)))
	if !strings.Contains(m.Render(), "58 req/s") { // the decode selections counted since the reset
		t.Errorf("after a reset:\n%s", m.Render())
	}
	var js strings.Builder
	if err := m.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc tui.Once
	if err := json.Unmarshal([]byte(js.String()), &doc); err != nil {
		t.Fatal(err)
	}
	if r := doc.Workers[1]; r.SelectionsPerSecond != 30 {
		t.Errorf("selections a second after a reset %v, want 30 (%+v)", r.SelectionsPerSecond, r)
	}
}
