package artifact_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/continuum-router/continuum/internal/artifact"
	"github.com/continuum-router/continuum/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// files is a real HTTP(S) server of artifacts that counts its requests.
type files struct {
	srv    *httptest.Server
	hits   atomic.Int64
	byPath map[string][]byte
	// status, when set, answers every request.
	status atomic.Int64
}

func (f *files) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	if s := f.status.Load(); s != 0 {
		http.Error(w, "nope", int(s))
		return
	}
	data, ok := f.byPath[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write(data)
}

func serveFiles(t *testing.T, byPath map[string][]byte) *files {
	f := &files{byPath: byPath}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

// serveFilesTLS serves over TLS with a certificate of testutil's PKI and
// returns a client that trusts only that PKI's CA.
func serveFilesTLS(t *testing.T, byPath map[string][]byte) (*files, *http.Client) {
	pki := testutil.NewTestPKI(t)
	cert, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	f := &files{byPath: byPath}
	f.srv = httptest.NewUnstartedServer(f)
	f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	ca, err := os.ReadFile(pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	return f, &http.Client{Transport: tr}
}

func localClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func refFor(t testing.TB, slot artifact.Slot, loc string, data []byte) artifact.Ref {
	t.Helper()
	format := artifact.FormatHFTokenizerJSON
	if slot != artifact.SlotTokenizer {
		format = artifact.FormatHFTokenizerConfigJSON
	}
	raw := `{"` + format + `":{"path":"` + loc + `","checksum":"` + artifact.Sum(data).String() + `"}}`
	ref, err := artifact.ParseSlot(slot, []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func writeFile(t testing.TB, name string, data []byte) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFetchLocal(t *testing.T) {
	data := []byte(`{"model":{"type":"BPE"}}`)
	p := writeFile(t, "tokenizer.json", data)
	pol := artifact.NewPolicy(artifact.Sum(data))
	for _, loc := range []string{p, "file://" + p} {
		got, err := pol.Fetch(t.Context(), nil, refFor(t, artifact.SlotTokenizer, loc, data), nil)
		if err != nil || string(got) != string(data) {
			t.Errorf("%s: %q %v", loc, got, err)
		}
	}
	// The file changed after the card was published: refused.
	ref := refFor(t, artifact.SlotTokenizer, p, data)
	if err := os.WriteFile(p, []byte(`{"model":{"type":"WordPiece"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := pol.Fetch(t.Context(), nil, ref, nil); !errors.Is(err, artifact.ErrChecksumMismatch) {
		t.Errorf("changed file: %v", err)
	}
	missing := refFor(t, artifact.SlotTokenizer, filepath.Join(t.TempDir(), "none.json"), data)
	if _, err := pol.Fetch(t.Context(), nil, missing, nil); !errors.Is(err, artifact.ErrFetch) || artifact.Result(err) != "fetch_failed" {
		t.Errorf("missing file: %v", err)
	}
	dir := refFor(t, artifact.SlotTokenizer, t.TempDir(), data)
	if _, err := pol.Fetch(t.Context(), nil, dir, nil); !errors.Is(err, artifact.ErrFetch) {
		t.Errorf("directory: %v", err)
	}
	// A FIFO is refused at once: opening it to read would wait for a
	// writer, past any timeout.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := pol.Fetch(t.Context(), nil, refFor(t, artifact.SlotTokenizer, fifo, data), nil); !errors.Is(err, artifact.ErrFetch) ||
		!strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("FIFO: %v", err)
	}
}

// TestFetchCacheDirectory: an existing cache directory is left as it is
// (it may be shared: only the blobs directory is the cache's own), and a
// cache that cannot be written fails nothing: the verified bytes are
// returned and the failure heard of.
func TestFetchCacheDirectory(t *testing.T) {
	data := []byte(`{"chat_template":"x"}`)
	srv, client := serveFilesTLS(t, map[string][]byte{"/t.json": data})
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	pol := artifact.NewPolicy(artifact.Sum(data))
	pol.AllowHTTP, pol.CacheDir = true, shared
	ref := refFor(t, artifact.SlotPromptFormatter, srv.srv.URL+"/t.json", data)
	if got, err := pol.Fetch(t.Context(), client, ref, nil); err != nil || string(got) != string(data) {
		t.Fatalf("%q %v", got, err)
	}
	if st, err := os.Stat(shared); err != nil || st.Mode().Perm() != 0o777 {
		t.Errorf("the configured directory's mode became %v (%v)", st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Join(shared, "blobs")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("blobs: %v (%v)", st.Mode(), err)
	}
	// A card that declares a size is read no further than it: an answer
	// longer than declared is not the pinned content.
	short := ref
	short.Size = 6
	pol.CacheDir = "" // downloaded, not read from the cache
	if _, err := pol.Fetch(t.Context(), client, short, nil); !errors.Is(err, artifact.ErrChecksumMismatch) ||
		!strings.Contains(err.Error(), "more than the 6 bytes declared") {
		t.Errorf("declared 6 bytes: %v", err)
	}
	// A file where the cache directory should be: nothing can be written.
	blocked := writeFile(t, "not-a-dir", []byte("x"))
	pol.CacheDir = filepath.Join(blocked, "cache")
	var heard error
	got, err := pol.Fetch(t.Context(), client, ref, func(err error) { heard = err })
	if err != nil || string(got) != string(data) {
		t.Fatalf("unwritable cache: %q %v", got, err)
	}
	if !errors.Is(heard, artifact.ErrCacheWrite) {
		t.Errorf("the cache failure was heard as %v", heard)
	}
}

// TestFetchTooLarge: a file over 64 MiB is refused from its size, before
// it is read; so is a declared size and an announced Content-Length.
func TestFetchTooLarge(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.json")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(artifact.MaxArtifactBytes + 1); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	var sum artifact.Checksum
	sum[0] = 1
	pol := artifact.NewPolicy(sum)
	pol.AllowHTTP = true
	ref := artifact.Ref{Slot: artifact.SlotTokenizer, Format: artifact.FormatHFTokenizerJSON, Location: p, Kind: artifact.KindPath, Checksum: sum, Size: -1}
	if _, err := pol.Fetch(t.Context(), nil, ref, nil); !errors.Is(err, artifact.ErrTooLarge) || artifact.Result(err) != "too_large" {
		t.Errorf("big file: %v", err)
	}
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Length", "67108865")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	ref.Location, ref.Kind = srv.URL+"/big.json", artifact.KindHTTP
	if _, err := pol.Fetch(t.Context(), localClient(t), ref, nil); !errors.Is(err, artifact.ErrTooLarge) {
		t.Errorf("announced length: %v", err)
	}
	ref.Size = artifact.MaxArtifactBytes + 1
	before := hits.Load()
	if _, err := pol.Fetch(t.Context(), localClient(t), ref, nil); !errors.Is(err, artifact.ErrTooLarge) || hits.Load() != before {
		t.Errorf("declared size: %v (requests %d)", err, hits.Load()-before)
	}
}

func TestReadBounded(t *testing.T) {
	r := io.MultiReader(strings.NewReader("0123456789"), strings.NewReader("x"))
	if _, err := artifact.ReadBounded(r, 10); !errors.Is(err, artifact.ErrTooLarge) {
		t.Errorf("11 bytes under a bound of 10: %v", err)
	}
	got, err := artifact.ReadBounded(strings.NewReader("0123456789"), 10)
	if err != nil || string(got) != "0123456789" {
		t.Errorf("10 bytes: %q %v", got, err)
	}
}

// TestFetchUnpinnedTouchesNothing: an unpinned artifact is neither
// requested nor cached, whatever its source.
func TestFetchUnpinnedTouchesNothing(t *testing.T) {
	data := []byte("tokenizer")
	srv := serveFiles(t, map[string][]byte{"/t.json": data})
	cache := filepath.Join(t.TempDir(), "cache")
	pol := artifact.NewPolicy() // nothing pinned
	pol.AllowHTTP, pol.AllowHF, pol.CacheDir = true, true, cache
	pol.HF.Endpoint = srv.srv.URL
	for _, loc := range []string{srv.srv.URL + "/t.json", "hf://o/r/t.json", writeFile(t, "t.json", data)} {
		_, err := pol.Fetch(t.Context(), localClient(t), refFor(t, artifact.SlotTokenizer, loc, data), nil)
		if !errors.Is(err, artifact.ErrUnpinned) || artifact.Result(err) != "unpinned" {
			t.Errorf("%s: %v", loc, err)
		}
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("%d requests for unpinned artifacts", n)
	}
	if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cache dir created: %v", err)
	}
}

func TestFetchDisallowedSources(t *testing.T) {
	data := []byte("template")
	srv := serveFiles(t, map[string][]byte{"/t.json": data})
	pol := artifact.NewPolicy(artifact.Sum(data))
	pol.HF.Endpoint = srv.srv.URL
	for _, loc := range []string{srv.srv.URL + "/t.json", "hf://o/r/t.json"} {
		_, err := pol.Fetch(t.Context(), localClient(t), refFor(t, artifact.SlotPromptFormatter, loc, data), nil)
		if !errors.Is(err, artifact.ErrDisallowed) || artifact.Result(err) != "disallowed" {
			t.Errorf("%s: %v", loc, err)
		}
	}
	if n := srv.hits.Load(); n != 0 {
		t.Errorf("%d requests", n)
	}
}

// TestFetchHTTPSCache: an https artifact is downloaded over real TLS,
// verified and cached owner-only; the next fetch is served from the blob;
// a corrupted blob is removed and fetched again.
func TestFetchHTTPSCache(t *testing.T) {
	data := []byte(`{"chat_template":"{{ messages }}"}`)
	srv, client := serveFilesTLS(t, map[string][]byte{"/v1/tokenizer_config.json": data})
	cache := filepath.Join(t.TempDir(), "artifacts")
	pol := artifact.NewPolicy(artifact.Sum(data))
	pol.AllowHTTP, pol.CacheDir = true, cache
	ref := refFor(t, artifact.SlotPromptFormatter, srv.srv.URL+"/v1/tokenizer_config.json", data)
	if ref.Kind != artifact.KindHTTPS {
		t.Fatalf("kind %s", ref.Kind)
	}
	got, err := pol.Fetch(t.Context(), client, ref, nil)
	if err != nil || string(got) != string(data) {
		t.Fatalf("%q %v", got, err)
	}
	blob := filepath.Join(cache, "blobs", artifact.Sum(data).Hex())
	for p, want := range map[string]os.FileMode{cache: 0o700 | os.ModeDir, filepath.Dir(blob): 0o700 | os.ModeDir, blob: 0o600} {
		st, err := os.Stat(p)
		if err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v, want %v (%v)", p, st.Mode(), want, err)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(blob))
	if len(entries) != 1 {
		t.Errorf("blobs dir holds %d entries (temp files left?)", len(entries))
	}
	if _, err := pol.Fetch(t.Context(), client, ref, nil); err != nil || srv.hits.Load() != 1 {
		t.Errorf("second fetch: %v, %d requests (want 1: served from the cache)", err, srv.hits.Load())
	}
	if err := os.WriteFile(blob, []byte(`{"chat_template":"{{ evil }}"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var corrupt error
	got, err = pol.Fetch(t.Context(), client, ref, func(err error) { corrupt = err })
	if err != nil || string(got) != string(data) || srv.hits.Load() != 2 {
		t.Fatalf("after corruption: %q %v, %d requests", got, err, srv.hits.Load())
	}
	if !errors.Is(corrupt, artifact.ErrChecksumMismatch) {
		t.Errorf("corruption reported as %v", corrupt)
	}
	if on, _ := os.ReadFile(blob); string(on) != string(data) {
		t.Errorf("blob not rewritten: %q", on)
	}
	// A server that answers with other bytes is refused and nothing is cached.
	other := []byte("other")
	srv.byPath["/v1/other.json"] = []byte("tampered")
	oref := refFor(t, artifact.SlotPromptFormatter, srv.srv.URL+"/v1/other.json", other)
	pol2 := artifact.NewPolicy(artifact.Sum(other))
	pol2.AllowHTTP, pol2.CacheDir = true, cache
	if _, err := pol2.Fetch(t.Context(), client, oref, nil); !errors.Is(err, artifact.ErrChecksumMismatch) || artifact.Result(err) != "checksum_mismatch" {
		t.Errorf("tampered download: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cache, "blobs", artifact.Sum(other).Hex())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("tampered download cached: %v", err)
	}
	srv.status.Store(http.StatusServiceUnavailable)
	if _, err := pol2.Fetch(t.Context(), client, oref, nil); !errors.Is(err, artifact.ErrFetch) || !strings.Contains(err.Error(), "503") {
		t.Errorf("503: %v", err)
	}
}

// hub emulates the Hugging Face Hub's resolve layout: a file answers at
// /<owner>/<repo>/resolve/<revision>/<path> with a redirect to its content
// (as the Hub does for LFS files), and only with the right bearer token.
type hub struct {
	token string
	files map[string][]byte // "<owner>/<repo>@<rev>/<path>"
	hits  atomic.Int64
}

func (h *hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.hits.Add(1)
	if c, ok := strings.CutPrefix(r.URL.Path, "/cdn/"); ok {
		_, _ = w.Write(h.files[c])
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+h.token {
		w.Header().Set("X-Error-Code", "GatedRepo")
		http.Error(w, "Access to this repo is restricted", http.StatusUnauthorized)
		return
	}
	parts := strings.SplitN(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/", 5)
	if len(parts) != 5 || parts[2] != "resolve" {
		http.NotFound(w, r)
		return
	}
	key := parts[0] + "/" + parts[1] + "@" + mustUnescape(parts[3]) + "/" + mustUnescape(parts[4])
	if _, ok := h.files[key]; !ok {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.NotFound(w, r)
		return
	}
	http.Redirect(w, r, "/cdn/"+key, http.StatusFound)
}

func mustUnescape(s string) string {
	u, err := url.PathUnescape(s)
	if err != nil {
		return "\x00bad"
	}
	return u
}

func TestFetchHF(t *testing.T) {
	data := []byte(`{"version":"1.0","model":{"type":"BPE"}}`)
	h := &hub{token: "hf_secret", files: map[string][]byte{
		"Qwen/Qwen3-0.6B@main/tokenizer.json":          data,
		"Qwen/Qwen3-0.6B@refs/pr/7/sub/tokenizer.json": data,
	}}
	srv := httptest.NewServer(h)
	defer srv.Close()
	set := artifact.Settings{AllowHF: true, CacheDir: filepath.Join(t.TempDir(), "c"), Pinned: []string{artifact.Sum(data).String()}}
	env := map[string]string{"HF_ENDPOINT": srv.URL, "HF_TOKEN": "hf_secret"}
	pol, err := artifact.PolicyFor(set, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	for _, loc := range []string{"hf://Qwen/Qwen3-0.6B/tokenizer.json", "hf://Qwen/Qwen3-0.6B@refs%2Fpr%2F7/sub/tokenizer.json"} {
		pol.CacheDir = filepath.Join(t.TempDir(), "c") // fresh cache: really fetched
		got, err := pol.Fetch(t.Context(), localClient(t), refFor(t, artifact.SlotTokenizer, loc, data), nil)
		if err != nil || string(got) != string(data) {
			t.Errorf("%s: %q %v", loc, got, err)
		}
	}
	pol.CacheDir = ""
	pol.HF.Token = "wrong"
	_, err = pol.Fetch(t.Context(), localClient(t), refFor(t, artifact.SlotTokenizer, "hf://Qwen/Qwen3-0.6B/tokenizer.json", data), nil)
	if !errors.Is(err, artifact.ErrFetch) || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "wrong") {
		t.Errorf("bad token: %v", err)
	}
	pol.HF.Token = "hf_secret"
	_, err = pol.Fetch(t.Context(), localClient(t), refFor(t, artifact.SlotTokenizer, "hf://Qwen/Qwen3-0.6B/missing.json", data), nil)
	if !errors.Is(err, artifact.ErrFetch) || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing file: %v", err)
	}
}

// TestFetchHFFallback: a worker's local path that is not on this host is
// fetched from the card's Hugging Face repository by the file's name (the
// same checksum), as Dynamo's frontend resolves it, when hf artifacts are
// allowed; a custom template has no such fallback, and a path that is
// here is read from here.
func TestFetchHFFallback(t *testing.T) {
	tok := []byte(`{"version":"1.0","model":{"type":"BPE"}}`)
	tmpl := []byte(`{{ messages }}`)
	h := &hub{token: "t", files: map[string][]byte{"Qwen/Qwen3-0.6B@main/tokenizer.json": tok, "Qwen/Qwen3-0.6B@main/chat_template.jinja": tmpl}}
	srv := httptest.NewServer(h)
	defer srv.Close()
	gone := "/nonexistent/hub/models--Qwen--Qwen3-0.6B/snapshots/abc/"
	card := func(path string) []byte {
		return []byte(`{"hf_tokenizer_json":{"path":"` + path + `","checksum":"` + artifact.Sum(tok).String() + `"}}`)
	}
	custom := []byte(`{"hf_chat_template":{"is_custom":true,"file":{"path":"` + gone + `chat_template.jinja","checksum":"` + artifact.Sum(tmpl).String() + `"}}}`)
	ds := artifact.CardSlots("Qwen/Qwen3-0.6B", card(gone+"tokenizer.json"), nil, custom)
	if len(ds) != 2 || ds[0].Err != nil || ds[0].HFFallback != "hf://Qwen/Qwen3-0.6B/tokenizer.json" || ds[1].HFFallback != "" {
		t.Fatalf("declared %+v", ds)
	}
	set := artifact.Settings{AllowHF: true, Pinned: []string{artifact.Sum(tok).String(), artifact.Sum(tmpl).String()}}
	env := map[string]string{"HF_ENDPOINT": srv.URL, "HF_TOKEN": "t"}
	pol, err := artifact.PolicyFor(set, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pol.Fetch(t.Context(), localClient(t), ds[0].Ref, nil); err != nil || string(got) != string(tok) {
		t.Fatalf("fallback: %q %v", got, err)
	}
	if _, err := pol.Fetch(t.Context(), localClient(t), ds[1].Ref, nil); !errors.Is(err, artifact.ErrFetch) {
		t.Errorf("a custom template fetched from the hub: %v", err)
	}
	hits := h.hits.Load()
	here := writeFile(t, "tokenizer.json", tok)
	local := artifact.CardSlots("Qwen/Qwen3-0.6B", card(here), nil, nil)
	if got, err := pol.Fetch(t.Context(), localClient(t), local[0].Ref, nil); err != nil || string(got) != string(tok) || h.hits.Load() != hits {
		t.Errorf("a path on this host: %q %v, %d hub requests", got, err, h.hits.Load()-hits)
	}
	pol.AllowHF = false
	if _, err := pol.Fetch(t.Context(), localClient(t), ds[0].Ref, nil); !errors.Is(err, artifact.ErrFetch) ||
		!strings.Contains(err.Error(), "with dynamo.kv.allow_hf_artifacts it is fetched from hf://Qwen/Qwen3-0.6B/tokenizer.json") {
		t.Errorf("without allow_hf_artifacts: %v", err)
	}
}

func TestPolicyFor(t *testing.T) {
	set := artifact.Settings{Pinned: []string{"blake3:" + strings.Repeat("ab", 32)}, AllowHTTP: true, CacheDir: "/var/cache/c"}
	pol, err := artifact.PolicyFor(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := artifact.ParseChecksum(set.Pinned[0])
	if !pol.Pinned(c) || !pol.AllowHTTP || pol.AllowHF || pol.HF.Endpoint != artifact.DefaultHFEndpoint || pol.CacheDir != "/var/cache/c" {
		t.Errorf("policy %+v", pol)
	}
	set.Pinned = []string{"md5:00"}
	if _, err := artifact.PolicyFor(set, nil); err == nil || !strings.Contains(err.Error(), "pinned_artifacts[0]") {
		t.Errorf("bad pin: %v", err)
	}
}

// TestFetchErrorsRedactURLs: a URL's query and user info (where a worker
// may put a credential) are not repeated in errors.
func TestFetchErrorsRedactURLs(t *testing.T) {
	data := []byte("x")
	pol := artifact.NewPolicy(artifact.Sum(data))
	pol.AllowHTTP = true
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens: the request fails to connect
	srv := serveFiles(t, map[string][]byte{})
	for _, base := range []string{"http://user:pw@" + addr, srv.srv.URL} {
		ref := refFor(t, artifact.SlotTokenizer, base+"/t.json?sig=s3cret", data)
		_, err := pol.Fetch(t.Context(), localClient(t), ref, nil)
		if !errors.Is(err, artifact.ErrFetch) || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "pw@") {
			t.Errorf("%s: %v", base, err)
		}
	}
}
