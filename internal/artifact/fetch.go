package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// DefaultHFEndpoint is the Hugging Face Hub, used when HF_ENDPOINT is unset.
const DefaultHFEndpoint = "https://huggingface.co"

// HF reaches the Hugging Face Hub (HF_ENDPOINT, HF_TOKEN).
type HF struct {
	Endpoint string
	Token    string
}

// HFFromEnv reads HF_ENDPOINT and HF_TOKEN through env (os.LookupEnv).
func HFFromEnv(env func(name string) (string, bool)) HF {
	h := HF{Endpoint: DefaultHFEndpoint}
	if env == nil {
		return h
	}
	if v, ok := env("HF_ENDPOINT"); ok && v != "" {
		h.Endpoint = v
	}
	if v, ok := env("HF_TOKEN"); ok {
		h.Token = v
	}
	return h
}

// Policy is what the operator allows: the pinned checksums, the remote
// sources and the cache directory (dynamo.kv).
type Policy struct {
	AllowHTTP bool
	AllowHF   bool
	// CacheDir holds blobs/<hex>; "" caches nothing.
	CacheDir string
	HF       HF
	pinned   map[Checksum]bool
}

// sourceSettings are what a policy says about where artifacts may come
// from, apart from the pins.
type sourceSettings struct {
	allowHTTP, allowHF bool
	cacheDir           string
	hf                 HF
}

func (p *Policy) sources() sourceSettings {
	return sourceSettings{allowHTTP: p.AllowHTTP, allowHF: p.AllowHF, cacheDir: p.CacheDir, hf: p.HF}
}

// NewPolicy returns a policy pinning the given checksums.
func NewPolicy(pinned ...Checksum) Policy {
	p := Policy{pinned: make(map[Checksum]bool, len(pinned)), HF: HF{Endpoint: DefaultHFEndpoint}}
	for _, c := range pinned {
		p.pinned[c] = true
	}
	return p
}

// Settings are what the operator configures about artifacts.
type Settings struct {
	// Pinned are the allowed checksums, "blake3:<hex>".
	Pinned    []string
	AllowHTTP bool
	AllowHF   bool
	CacheDir  string
}

// PolicyFor builds the policy of s, with HF_ENDPOINT and HF_TOKEN read
// through env (os.LookupEnv). A checksum that does not parse is an error
// naming its index in s.Pinned.
func PolicyFor(s Settings, env func(name string) (string, bool)) (Policy, error) {
	p := NewPolicy()
	for i, v := range s.Pinned {
		c, err := ParseChecksum(v)
		if err != nil {
			return Policy{}, fmt.Errorf("pinned_artifacts[%d]: %w", i, err)
		}
		p.pinned[c] = true
	}
	p.AllowHTTP, p.AllowHF, p.CacheDir = s.AllowHTTP, s.AllowHF, s.CacheDir
	p.HF = HFFromEnv(env)
	return p, nil
}

// Pinned reports whether c is pinned.
func (p *Policy) Pinned(c Checksum) bool { return p.pinned[c] }

// admit checks what needs no I/O: the pin first (nothing happens to an
// unpinned artifact), then the source and the declared size.
func (p *Policy) admit(ref Ref) error {
	if !p.Pinned(ref.Checksum) {
		return fmt.Errorf("%w: %s %s", ErrUnpinned, ref.Slot, ref.Checksum)
	}
	switch ref.Kind {
	case KindPath, KindFile:
	case KindHTTP, KindHTTPS:
		if !p.AllowHTTP {
			return fmt.Errorf("%w: %s is an %s URL and dynamo.kv.allow_http_artifacts is false", ErrDisallowed, ref.Slot, ref.Kind)
		}
	case KindHF:
		if !p.AllowHF {
			return fmt.Errorf("%w: %s is an hf:// reference and dynamo.kv.allow_hf_artifacts is false", ErrDisallowed, ref.Slot)
		}
	default:
		return fmt.Errorf("%w: %s location %q", ErrUnsupported, ref.Slot, trunc(Redact(ref.Location)))
	}
	if ref.Size > MaxArtifactBytes {
		return fmt.Errorf("%w: %s declares %d bytes", ErrTooLarge, ref.Slot, ref.Size)
	}
	return nil
}

// Open opens a location for reading, unverified and unbounded: a local
// path, file://, http(s):// or hf:// (through hf). Callers bound and
// verify what they read; Fetch does both.
func Open(ctx context.Context, client *http.Client, loc string, hf HF) (io.ReadCloser, error) {
	kind, err := locationKind(loc)
	if err != nil {
		return nil, err
	}
	switch kind {
	case KindPath:
		return openFile(loc)
	case KindFile:
		p, err := filePath(loc)
		if err != nil {
			return nil, err
		}
		return openFile(p)
	case KindHTTP, KindHTTPS:
		return get(ctx, client, loc, "")
	case KindHF:
		r, err := ParseHF(loc)
		if err != nil {
			return nil, err
		}
		endpoint := hf.Endpoint
		if endpoint == "" {
			endpoint = DefaultHFEndpoint
		}
		return get(ctx, client, r.ResolveURL(endpoint), hf.Token)
	}
	return nil, fmt.Errorf("%w: location %q", ErrUnsupported, trunc(loc))
}

func openFile(path string) (io.ReadCloser, error) {
	// Opened without blocking: a card may name a FIFO, whose open would
	// wait for a writer beyond any timeout. The file is then refused
	// unless regular (for which the flag changes nothing).
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFetch, err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %w", ErrFetch, err)
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrFetch, path)
	}
	return f, nil
}

// sizedBody is an HTTP body with its announced length (-1 unknown).
type sizedBody struct {
	io.ReadCloser
	length int64
}

func get(ctx context.Context, client *http.Client, u, token string) (io.ReadCloser, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// url.Error quotes the whole URL; its query may hold a credential.
			return nil, fmt.Errorf("%w: %s %s: %w", ErrFetch, ue.Op, Redact(ue.URL), ue.Err)
		}
		return nil, fmt.Errorf("%w: %w", ErrFetch, err)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%w: GET %s: %s", ErrFetch, Redact(u), resp.Status)
	}
	return sizedBody{resp.Body, resp.ContentLength}, nil
}

// Redact drops a URL's query, fragment and user info, which may hold
// credentials, for errors and listings.
func Redact(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	if scheme, rest, ok := strings.Cut(u, "://"); ok {
		// The user info is in the authority alone, up to the first '/':
		// an '@' in the path (a revision such as repo@main) is not it.
		authority, path := rest, ""
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			authority, path = rest[:i], rest[i:]
		}
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			authority = authority[at+1:]
		}
		u = scheme + "://" + authority + path
	}
	return u
}

// ReadBounded reads r to its end, failing with ErrTooLarge past max bytes.
func ReadBounded(r io.Reader, max int64) ([]byte, error) {
	if sb, ok := r.(sizedBody); ok && sb.length > max {
		return nil, fmt.Errorf("%w: %d bytes announced", ErrTooLarge, sb.length)
	}
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Size() > max {
			return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, st.Size())
		}
	}
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFetch, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)
	}
	return data, nil
}

// ErrCacheWrite is a verified download the cache could not keep (a
// read-only or full disk): the artifact is used all the same.
var ErrCacheWrite = errors.New("artifact cache write failed")

// Fetch returns the verified bytes of a pinned artifact: read from its
// local path (or, when that is not on this host, downloaded from its
// HFFallback if hf artifacts are allowed), or from the cache's
// blobs/<hex> (verified on every read; a corrupted blob is removed), or
// downloaded, verified and cached. It is what Loader runs; onCache, when
// set, hears of a removed blob and of a blob it could not write
// (ErrCacheWrite), which fails nothing.
func (p *Policy) Fetch(ctx context.Context, client *http.Client, ref Ref, onCache func(error)) ([]byte, error) {
	if err := p.admit(ref); err != nil {
		return nil, err
	}
	if ref.Kind.Local() {
		data, err := readLocation(ctx, client, ref, p.HF)
		if err != nil && errors.Is(err, fs.ErrNotExist) && ref.HFFallback != "" {
			// The worker's path is not on this host (a snapshot in the
			// worker's own Hugging Face cache): the same file, by its
			// checksum, from the model's repository, as Dynamo's
			// frontend resolves it.
			if !p.AllowHF {
				return nil, fmt.Errorf("%s %s: %w (with dynamo.kv.allow_hf_artifacts it is fetched from %s)",
					ref.Slot, trunc(ref.Location), err, trunc(ref.HFFallback))
			}
			fb := ref
			fb.Location, fb.Kind, fb.HFFallback = ref.HFFallback, KindHF, ""
			return p.download(ctx, client, fb, onCache)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", ref.Slot, trunc(ref.Location), err)
		}
		if err := verify(ref, data); err != nil {
			return nil, err
		}
		return data, nil
	}
	return p.download(ctx, client, ref, onCache)
}

// download fetches a remote artifact through the cache: from its blob when
// that verifies, else from its location, verified, then kept.
func (p *Policy) download(ctx context.Context, client *http.Client, ref Ref, onCache func(error)) ([]byte, error) {
	blob := ""
	if p.CacheDir != "" {
		blob = filepath.Join(p.CacheDir, "blobs", ref.Checksum.Hex())
		data, err := readBlob(blob, ref)
		switch {
		case err == nil:
			return data, nil
		case errors.Is(err, ErrChecksumMismatch) || errors.Is(err, ErrTooLarge):
			rmErr := os.Remove(blob)
			if onCache != nil {
				onCache(errors.Join(err, rmErr))
			}
		}
		// Any other failure to read the blob (none yet, an unreadable
		// cache) is a miss: the artifact is downloaded, and a cache that
		// cannot be written either is heard of below.
	}
	data, err := readLocation(ctx, client, ref, p.HF)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", ref.Slot, trunc(Redact(ref.Location)), err)
	}
	if err := verify(ref, data); err != nil {
		return nil, err
	}
	if blob != "" {
		if err := writeBlob(p.CacheDir, blob, data); err != nil && onCache != nil {
			onCache(fmt.Errorf("%w: %s: %w", ErrCacheWrite, ref.Slot, err))
		}
	}
	return data, nil
}

// readLocation reads ref's bytes, no more than the card declared when it
// declared a size: a longer answer cannot be the pinned content.
func readLocation(ctx context.Context, client *http.Client, ref Ref, hf HF) ([]byte, error) {
	rc, err := Open(ctx, client, ref.Location, hf)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	limit := int64(MaxArtifactBytes)
	if ref.Size >= 0 && ref.Size < limit {
		limit = ref.Size
	}
	data, err := ReadBounded(rc, limit)
	if errors.Is(err, ErrTooLarge) && limit < MaxArtifactBytes {
		return nil, fmt.Errorf("%w: %s: more than the %d bytes declared", ErrChecksumMismatch, ref.Slot, ref.Size)
	}
	return data, err
}

func verify(ref Ref, data []byte) error {
	if got := Sum(data); got != ref.Checksum {
		return fmt.Errorf("%w: %s: declared %s, content is %s", ErrChecksumMismatch, ref.Slot, ref.Checksum, got)
	}
	return nil
}

func readBlob(path string, ref Ref) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := ReadBounded(f, MaxArtifactBytes)
	if err != nil {
		return nil, err
	}
	if err := verify(ref, data); err != nil {
		return nil, fmt.Errorf("blob %s: %w", path, err)
	}
	return data, nil
}

// ensureDir creates dir (and its parents) owner-only, and narrows it to
// 0700 when it exists wider: for the cache's own blobs directory only,
// never the configured directory, which may be shared (/tmp, /var/cache).
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if st.Mode().Perm() != 0o700 {
		return os.Chmod(dir, 0o700)
	}
	return nil
}

// writeBlob writes data to path atomically: a temp file (0600) in the same
// directory, synced, then renamed over path.
func writeBlob(cacheDir, path string, data []byte) error {
	// The configured directory is created owner-only when missing and
	// left as it is when it exists.
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := ensureDir(dir); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(name)
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	ok = true
	return nil
}
