package artifact_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
)

// built is what the test Build hook makes of an artifact.
type built struct {
	format string
	text   string
}

func buildText(ref artifact.Ref, data []byte) (any, error) {
	if bytes.HasPrefix(data, []byte("bad")) {
		return nil, errors.New("not a tokenizer")
	}
	if bytes.HasPrefix(data, []byte("panic")) {
		panic("builder bug")
	}
	return built{format: ref.Format, text: string(data)}, nil
}

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type harness struct {
	loader  *artifact.Loader
	metrics *telemetry.ArtifactMetrics
	log     *testutil.SyncBuffer
	clock   *clock
	stop    func()
}

// startLoader runs a loader until the test ends; stop waits for Run to
// return (goleak then finds no goroutine left).
func startLoader(t *testing.T, pol artifact.Policy, client *http.Client, build artifact.BuildFunc) *harness {
	t.Helper()
	h := &harness{metrics: telemetry.NewArtifactMetrics(prometheus.NewRegistry()), log: &testutil.SyncBuffer{},
		clock: &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}}
	l, err := artifact.NewLoader(artifact.LoaderOptions{Policy: pol, Client: client, Build: build,
		Logger: slog.New(slog.NewTextHandler(h.log, nil)), Metrics: h.metrics, Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	h.loader = l
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Run did not return within 10s of cancel")
			}
		})
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) count(result string) float64 {
	return promtest.ToFloat64(h.metrics.Artifacts.WithLabelValues(result))
}

// waitReady polls Get until the artifact is loaded or fails for good.
func (h *harness) waitReady(t *testing.T, model string, ref artifact.Ref) (any, error) {
	t.Helper()
	var v any
	var err error
	testutil.Eventually(t, 10*time.Second, "artifact "+ref.Name()+" settled", func() bool {
		v, err = h.loader.Get(model, ref)
		return !errors.Is(err, artifact.ErrPending)
	})
	return v, err
}

func TestLoaderLoadsOverHTTPAndShares(t *testing.T) {
	tok, tmpl := []byte("tokenizer bytes"), []byte("template bytes")
	srv := serveFiles(t, map[string][]byte{"/tokenizer.json": tok, "/tokenizer_config.json": tmpl})
	pol := artifact.NewPolicy(artifact.Sum(tok), artifact.Sum(tmpl))
	pol.AllowHTTP, pol.CacheDir = true, t.TempDir()
	var builds atomic.Int64
	h := startLoader(t, pol, localClient(t), func(ref artifact.Ref, data []byte) (any, error) {
		builds.Add(1)
		return buildText(ref, data)
	})
	rt := refFor(t, artifact.SlotTokenizer, srv.srv.URL+"/tokenizer.json", tok)
	rp := refFor(t, artifact.SlotPromptFormatter, srv.srv.URL+"/tokenizer_config.json", tmpl)
	if _, err := h.loader.Resolve("m", rt, rp); !errors.Is(err, artifact.ErrPending) {
		t.Fatalf("first Resolve: %v", err)
	}
	var vals []any
	var err error
	testutil.Eventually(t, 10*time.Second, "both loaded", func() bool {
		vals, err = h.loader.Resolve("m", rt, rp)
		return err == nil
	})
	if vals[0].(built).text != string(tok) || vals[1].(built).format != artifact.FormatHFTokenizerConfigJSON {
		t.Errorf("values %+v", vals)
	}
	// Another worker declares the same tokenizer at another location: shared.
	other := rt
	other.Location = "http://elsewhere.invalid/tokenizer.json"
	if v, err := h.loader.Get("m", other); err != nil || v.(built).text != string(tok) {
		t.Errorf("shared: %v %v", v, err)
	}
	if builds.Load() != 2 || srv.hits.Load() != 2 || h.count("loaded") != 2 {
		t.Errorf("builds %d, requests %d, loaded %v", builds.Load(), srv.hits.Load(), h.count("loaded"))
	}
	if s := h.loader.Stats(); s.Loaded != 2 || s.Bytes != int64(len(tok)+len(tmpl)) {
		t.Errorf("stats %+v", s)
	}
	// Unpinning takes effect at once.
	h.loader.SetPolicy(artifact.NewPolicy(artifact.Sum(tmpl)))
	if _, err := h.loader.Get("m", rt); !errors.Is(err, artifact.ErrUnpinned) {
		t.Errorf("after unpinning: %v", err)
	}
	if s := h.loader.Stats(); s.Loaded != 1 || s.Bytes != int64(len(tmpl)) {
		t.Errorf("stats after unpinning %+v", s)
	}
}

// TestLoaderUnpinned: nothing is requested; one log line per model names
// slot, URI kind and declared checksum; the metric counts each artifact
// once, not each request.
func TestLoaderUnpinned(t *testing.T) {
	tok, tmpl := []byte("tok"), []byte("tmpl")
	srv := serveFiles(t, map[string][]byte{"/t": tok, "/c": tmpl})
	pol := artifact.NewPolicy(artifact.Sum(tmpl)) // the template only
	pol.AllowHTTP = true
	h := startLoader(t, pol, localClient(t), buildText)
	rt := refFor(t, artifact.SlotTokenizer, srv.srv.URL+"/t", tok)
	rp := refFor(t, artifact.SlotPromptFormatter, srv.srv.URL+"/c", tmpl)
	for range 5 {
		if _, err := h.loader.Resolve("Qwen/Qwen3-0.6B", rt, rp); !errors.Is(err, artifact.ErrUnpinned) || artifact.Result(err) != "unpinned" {
			t.Fatalf("Resolve: %v", err)
		}
	}
	if _, err := h.loader.Resolve("other-model", rt); !errors.Is(err, artifact.ErrUnpinned) {
		t.Fatal(err)
	}
	// The pinned template is still loaded (it is pinned); the tokenizer never.
	testutil.Eventually(t, 10*time.Second, "template loaded", func() bool { return h.loader.Stats().Loaded == 1 })
	if srv.hits.Load() != 1 {
		t.Errorf("%d requests, want 1 (the pinned template)", srv.hits.Load())
	}
	if got := h.count("unpinned"); got != 1 {
		t.Errorf("unpinned counted %v times, want 1", got)
	}
	lines := strings.Split(strings.TrimSpace(h.log.String()), "\n")
	var unpinned []string
	for _, l := range lines {
		if strings.Contains(l, "not pinned") {
			unpinned = append(unpinned, l)
		}
	}
	if len(unpinned) != 2 {
		t.Fatalf("want one line per model, got:\n%s", strings.Join(unpinned, "\n"))
	}
	want := fmt.Sprintf("tokenizer http %s", artifact.Sum(tok))
	if !strings.Contains(unpinned[0], "model=Qwen/Qwen3-0.6B") || !strings.Contains(unpinned[0], want) || strings.Contains(unpinned[0], artifact.Sum(tmpl).String()) {
		t.Errorf("log line %s", unpinned[0])
	}
}

// failingLoad starts a loader whose one pinned artifact (data, served by
// srv over http) fails to fetch: srv answers 500 until told otherwise.
func failingLoad(t *testing.T) ([]byte, *files, *harness, artifact.Ref) {
	data := []byte("tokenizer")
	srv := serveFiles(t, map[string][]byte{"/t": data})
	srv.status.Store(http.StatusInternalServerError)
	pol := artifact.NewPolicy(artifact.Sum(data))
	pol.AllowHTTP = true
	h := startLoader(t, pol, localClient(t), buildText)
	return data, srv, h, refFor(t, artifact.SlotTokenizer, srv.srv.URL+"/t", data)
}

// TestLoaderRetryAfterFailure: a failed load is reported until RetryAfter
// has passed on the loader's clock, and not retried before.
func TestLoaderRetryAfterFailure(t *testing.T) {
	_, srv, h, ref := failingLoad(t)
	if _, err := h.waitReady(t, "m", ref); !errors.Is(err, artifact.ErrFetch) || !strings.Contains(err.Error(), "retry in 5m0s") {
		t.Fatalf("first load: %v", err)
	}
	srv.status.Store(0)
	h.clock.Add(artifact.RetryAfter - time.Second)
	if _, err := h.loader.Get("m", ref); !errors.Is(err, artifact.ErrFetch) {
		t.Errorf("before RetryAfter: %v", err)
	}
	if srv.hits.Load() != 1 || h.count("fetch_failed") != 1 {
		t.Errorf("requests %d, fetch_failed %v", srv.hits.Load(), h.count("fetch_failed"))
	}
	h.clock.Add(time.Second)
	if v, err := h.waitReady(t, "m", ref); err != nil || v.(built).text != "tokenizer" {
		t.Fatalf("after RetryAfter: %v %v", v, err)
	}
	if srv.hits.Load() != 2 {
		t.Errorf("requests %d", srv.hits.Load())
	}
}

func TestLoaderBuildFailures(t *testing.T) {
	bad, boom := []byte("bad tokenizer"), []byte("panic please")
	pol := artifact.NewPolicy(artifact.Sum(bad), artifact.Sum(boom))
	h := startLoader(t, pol, nil, buildText)
	for _, data := range [][]byte{bad, boom} {
		ref := refFor(t, artifact.SlotTokenizer, writeFile(t, "t.json", data), data)
		if _, err := h.waitReady(t, "m", ref); !errors.Is(err, artifact.ErrBuild) || artifact.Result(err) != "build_failed" {
			t.Errorf("%q: %v", data, err)
		}
	}
	if h.count("build_failed") != 2 {
		t.Errorf("build_failed %v", h.count("build_failed"))
	}
}

// TestLoaderConcurrencyAndCapacity: two loads at once, the rest queued; at
// most the held-artifact limit, evicting the least recently used loaded
// one; bytes bounded the same way.
func TestLoaderConcurrencyAndCapacity(t *testing.T) {
	release := make(chan struct{})
	var inFlight, maxInFlight atomic.Int64
	payload := func(i int) []byte { return fmt.Appendf(nil, "artifact-%02d-%s", i, strings.Repeat("x", 88)) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		var i int
		_, _ = fmt.Sscanf(r.URL.Path, "/%d", &i)
		_, _ = w.Write(payload(i))
	}))
	defer srv.Close()
	var sums []artifact.Checksum
	for i := range 8 {
		sums = append(sums, artifact.Sum(payload(i)))
	}
	pol := artifact.NewPolicy(sums...)
	pol.AllowHTTP = true
	h := startLoader(t, pol, localClient(t), buildText)
	artifact.SetLimits(h.loader, 4, 3*100)
	refs := make([]artifact.Ref, 8)
	for i := range refs {
		refs[i] = refFor(t, artifact.SlotTokenizer, fmt.Sprintf("%s/%d", srv.URL, i), payload(i))
	}
	for i := range 4 {
		if _, err := h.loader.Get("m", refs[i]); !errors.Is(err, artifact.ErrPending) {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "two loads in flight", func() bool { return inFlight.Load() == 2 })
	if s := h.loader.Stats(); s.Loading != 2 || s.Queued != 2 {
		t.Errorf("stats %+v, want 2 loading and 2 queued", s)
	}
	// Four held and none loaded yet: nothing can be evicted.
	if _, err := h.loader.Get("m", refs[4]); !errors.Is(err, artifact.ErrOverCapacity) || artifact.Result(err) != "over_capacity" {
		t.Errorf("fifth while all are loading: %v", err)
	}
	close(release)
	testutil.Eventually(t, 10*time.Second, "queue drained", func() bool {
		s := h.loader.Stats()
		return s.Loading == 0 && s.Queued == 0
	})
	if maxInFlight.Load() != artifact.MaxConcurrentLoads {
		t.Errorf("max in flight %d", maxInFlight.Load())
	}
	// Each artifact is 100 bytes and 300 may be held: the fourth load evicted
	// the least recently used one.
	if s := h.loader.Stats(); s.Loaded != 3 || s.Bytes != 300 {
		t.Errorf("after loading 4 x 100 bytes under 300: %+v", s)
	}
	for i := range 4 {
		h.clock.Add(time.Second)
		_, _ = h.loader.Get("m", refs[i]) // touch; the evicted one is queued again
	}
	if v, err := h.waitReady(t, "m", refs[4]); err != nil || v.(built).text != string(payload(4)) {
		t.Fatalf("fifth after room was made: %v %v", v, err)
	}
	if s := h.loader.Stats(); s.Loaded+s.Loading+s.Queued > 4 || s.Bytes > 300 {
		t.Errorf("over the limits: %+v", s)
	}
}

func TestLoaderStopsLoadsInFlight(t *testing.T) {
	started := make(chan struct{}, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-r.Context().Done() // never answers
	}))
	defer srv.Close()
	data := []byte("never")
	pol := artifact.NewPolicy(artifact.Sum(data))
	pol.AllowHTTP = true
	h := startLoader(t, pol, localClient(t), buildText)
	_, _ = h.loader.Get("m", refFor(t, artifact.SlotTokenizer, srv.URL+"/t", data))
	<-started
	h.stop() // fails the test if Run does not return
	if s := h.loader.Stats(); s.Loading != 0 || s.Failed != 0 {
		t.Errorf("stats after stop %+v", s)
	}
	if err := h.loader.Run(context.Background()); err == nil {
		t.Error("second Run accepted")
	}
}

func TestNewLoaderNeedsBuild(t *testing.T) {
	if _, err := artifact.NewLoader(artifact.LoaderOptions{}); err == nil {
		t.Error("accepted a loader without Build")
	}
}

// TestLoaderRejectsWithoutIO: a disallowed source and a slot that does not
// parse are refused without a request, counted once and logged once.
func TestLoaderRejectsWithoutIO(t *testing.T) {
	tok, tmpl := []byte("tok"), []byte("tmpl")
	srv := serveFiles(t, map[string][]byte{"/t": tok})
	pol := artifact.NewPolicy(artifact.Sum(tok), artifact.Sum(tmpl)) // http not allowed
	h := startLoader(t, pol, localClient(t), buildText)
	rec := `{"type":"Model","component":"c","endpoint":"generate","instance_id":1,"card_json":{"display_name":"m",
	  "tokenizer":{"hf_tokenizer_json":{"path":"` + srv.srv.URL + `/t","checksum":"` + artifact.Sum(tok).String() + `"}},
	  "prompt_formatter":{"hf_chat_template":{"is_custom":false,"file":{"path":"nats://x/t.jinja","checksum":"` + artifact.Sum(tmpl).String() + `"}}}}}`
	m, err := wire.ParseModel([]byte(rec))
	if err != nil {
		t.Fatal(err)
	}
	ds := artifact.CardSlots("", m.Card.Tokenizer, m.Card.PromptFormatter, m.Card.ChatTemplateFile)
	for range 3 {
		vals, err := h.loader.ResolveDeclared("m", ds)
		if !errors.Is(err, artifact.ErrUnsupported) || len(vals) != 2 || vals[0] != nil {
			t.Fatalf("ResolveDeclared: %v %v", vals, err)
		}
		if _, err := h.loader.Get("m", ds[0].Ref); !errors.Is(err, artifact.ErrDisallowed) {
			t.Fatalf("Get: %v", err)
		}
	}
	if srv.hits.Load() != 0 || h.count("disallowed") != 1 || h.count("unsupported") != 1 {
		t.Errorf("requests %d, disallowed %v, unsupported %v", srv.hits.Load(), h.count("disallowed"), h.count("unsupported"))
	}
	if n := strings.Count(h.log.String(), "not usable"); n != 1 {
		t.Errorf("%d log lines for the bad slot:\n%s", n, h.log.String())
	}
	// Allowing http takes effect at once.
	pol.AllowHTTP = true
	h.loader.SetPolicy(pol)
	if v, err := h.waitReady(t, "m", ds[0].Ref); err != nil || v.(built).text != "tok" {
		t.Errorf("after allowing http: %v %v", v, err)
	}
}

// TestLoaderCacheCorrupt: a cached blob that no longer verifies is counted,
// removed and fetched again.
func TestLoaderCacheCorrupt(t *testing.T) {
	data := []byte("the real tokenizer")
	srv := serveFiles(t, map[string][]byte{"/t": data})
	cache := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cache, "blobs"), 0o700); err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(cache, "blobs", artifact.Sum(data).Hex())
	if err := os.WriteFile(blob, []byte("a tampered tokenizer"), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := artifact.NewPolicy(artifact.Sum(data))
	pol.AllowHTTP, pol.CacheDir = true, cache
	h := startLoader(t, pol, localClient(t), buildText)
	if v, err := h.waitReady(t, "m", refFor(t, artifact.SlotTokenizer, srv.srv.URL+"/t", data)); err != nil || v.(built).text != string(data) {
		t.Fatalf("%v %v", v, err)
	}
	if h.count("cache_corrupt") != 1 || h.count("loaded") != 1 || srv.hits.Load() != 1 {
		t.Errorf("cache_corrupt %v, loaded %v, requests %d", h.count("cache_corrupt"), h.count("loaded"), srv.hits.Load())
	}
	if on, _ := os.ReadFile(blob); string(on) != string(data) {
		t.Errorf("blob %q", on)
	}
}

// TestLoaderReloadKeepsRetryAfter: a failed artifact is tried again after
// RetryAfter; a reload that leaves the sources as they were (the daemon
// sets the policy on every reload while KV-aware selection is on) does not
// make it try at once.
func TestLoaderReloadKeepsRetryAfter(t *testing.T) {
	data, srv, h, ref := failingLoad(t)
	if _, err := h.waitReady(t, "m", ref); !errors.Is(err, artifact.ErrFetch) {
		t.Fatalf("first load: %v", err)
	}
	hits := srv.hits.Load()
	same := artifact.NewPolicy(artifact.Sum(data), artifact.Sum([]byte("another pin")))
	same.AllowHTTP = true
	h.loader.SetPolicy(same)
	if _, err := h.loader.Get("m", ref); !errors.Is(err, artifact.ErrFetch) {
		t.Errorf("right after a reload that left the sources alone, within RetryAfter: %v (want the remembered fetch failure)", err)
	}
	if srv.hits.Load() != hits {
		t.Errorf("fetched again: %d requests, %d before the reload", srv.hits.Load(), hits)
	}
}
