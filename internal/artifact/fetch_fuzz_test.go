package artifact_test

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/continuum-router/continuum/internal/artifact"
)

// What an artifact server answers (status, announced length, body) comes
// off the network, and so do the URLs of worker cards that errors repeat.
// FuzzFetchAnswer holds Fetch's reading of an answer to its rules;
// FuzzRedact holds Redact to keeping no credential of a URL.

// answer is one fuzzed server answer, served without a network: the
// client's transport returns it for any request, and counts what is read
// of its body and whether it was closed.
type answer struct {
	status    int
	announced int64
	body      []byte
	read      int
	closed    bool
	requests  int
}

func (a *answer) RoundTrip(req *http.Request) (*http.Response, error) {
	a.requests++
	return &http.Response{StatusCode: a.status, Status: http.StatusText(a.status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, ContentLength: a.announced, Body: &countingBody{a: a, r: bytes.NewReader(a.body)}, Request: req}, nil
}

type countingBody struct {
	a *answer
	r *bytes.Reader
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.a.read += n
	return n, err
}

func (b *countingBody) Close() error {
	b.a.closed = true
	return nil
}

// secretURL is an artifact URL whose query and user info hold secrets.
const secretURL = "http://user:pw-s3cret@artifacts.example/tokenizer.json?sig=q-s3cret"

// FuzzFetchAnswer: for any status, announced length, body and declared
// size, Fetch of a pinned http artifact returns the body exactly when the
// answer is a 200 whose announced length and body are within the bound
// (the declared size, else 64 MiB) and whose checksum is the pinned one;
// otherwise it fails with the error its rules name (fetch failed for
// another status; too large or, past a declared size, checksum mismatch;
// checksum mismatch). It reads at most the bound and one byte more of a
// 200 (nothing when the announced length is over it) and 4 KiB of another
// answer, closes every body, sends no request for a declared size over 64
// MiB, and never repeats the URL's query or user info.
func FuzzFetchAnswer(f *testing.F) {
	tok := []byte(`{"version":"1.0","model":{"type":"BPE","vocab":{"a":0}}}`)
	f.Add(uint16(200), int64(len(tok)), tok, int16(-1), true)
	f.Add(uint16(200), int64(-1), tok, int16(len(tok)), true)
	f.Add(uint16(200), int64(-1), tok, int16(len(tok)-1), true)
	f.Add(uint16(200), int64(1<<40), tok, int16(-1), true)
	f.Add(uint16(200), int64(len(tok)), tok, int16(-1), false)
	f.Add(uint16(404), int64(9), []byte("Not Found"), int16(-1), true)
	f.Add(uint16(302), int64(0), []byte{}, int16(-1), true)
	f.Add(uint16(503), int64(-1), bytes.Repeat([]byte("e"), 5000), int16(-1), true)
	f.Add(uint16(200), int64(0), []byte{}, int16(0), true)
	f.Add(uint16(200), int64(3), tok, int16(-32768), true)
	f.Fuzz(func(t *testing.T, status uint16, announced int64, body []byte, declared int16, pinBody bool) {
		a := &answer{status: 100 + int(status)%900, announced: max(announced, -1), body: body}
		size := int64(declared)
		switch {
		case declared == -32768:
			size = artifact.MaxArtifactBytes + 1
		case declared < 0:
			size = -1
		}
		sum := artifact.Sum(body)
		pinned := sum
		if !pinBody {
			pinned = artifact.Sum(append([]byte("not "), body...))
		}
		pol := artifact.NewPolicy(pinned)
		pol.AllowHTTP = true
		ref := artifact.Ref{Slot: artifact.SlotTokenizer, Format: artifact.FormatHFTokenizerJSON, Location: secretURL,
			Kind: artifact.KindHTTP, Checksum: pinned, Size: size}
		data, err := pol.Fetch(t.Context(), &http.Client{Transport: a}, ref, nil)

		limit := int64(artifact.MaxArtifactBytes)
		if size >= 0 && size < limit {
			limit = size
		}
		// tooLarge is what an answer past the bound fails with: past a
		// declared size it cannot be the pinned content.
		tooLarge := artifact.ErrTooLarge
		if limit < artifact.MaxArtifactBytes {
			tooLarge = artifact.ErrChecksumMismatch
		}
		var want error
		switch {
		case size > artifact.MaxArtifactBytes:
			want = artifact.ErrTooLarge
		case a.status != http.StatusOK:
			want = artifact.ErrFetch
		case a.announced > limit, int64(len(body)) > limit:
			want = tooLarge
		case sum != pinned:
			want = artifact.ErrChecksumMismatch
		}
		if want == nil {
			if err != nil || !bytes.Equal(data, body) {
				t.Fatalf("%d, announced %d, %d bytes, declared %d: %v (%d bytes), want the body", a.status, a.announced, len(body), size, err, len(data))
			}
		} else if !errors.Is(err, want) || data != nil {
			t.Fatalf("%d, announced %d, %d bytes, declared %d: %v (%d bytes), want %v", a.status, a.announced, len(body), size, err, len(data), want)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "user:")) {
			t.Fatalf("the error repeats the URL's credentials: %v", err)
		}
		switch {
		case size > artifact.MaxArtifactBytes:
			if a.requests != 0 {
				t.Fatalf("%d requests for an artifact declared over the limit", a.requests)
			}
			return
		case a.requests != 1:
			t.Fatalf("%d requests, want 1", a.requests)
		case !a.closed:
			t.Fatal("the answer's body was not closed")
		case a.status != http.StatusOK && a.read > 4<<10:
			t.Fatalf("read %d bytes of a %d answer", a.read, a.status)
		case a.status == http.StatusOK && a.announced > limit && a.read != 0:
			t.Fatalf("read %d bytes of an answer announced over the bound", a.read)
		case a.status == http.StatusOK && int64(a.read) > limit+1:
			t.Fatalf("read %d bytes past the bound %d", a.read, limit)
		}
	})
}

// FuzzRedact: a redacted URL holds no query or fragment and no user info
// (its authority, up to the first "/" after "://", has no "@": a URL
// client reads what stands before the authority's last "@" as user info),
// is no longer than the URL, and redacting it again changes nothing.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		secretURL, "https://huggingface.co/org/repo/resolve/main/tokenizer.json",
		"http://user:pw@127.0.0.1:8080/t.json?sig=s3cret", "hf://org/repo@refs%2Fpr%2F1/tokenizer.json",
		"/models/llama/tokenizer.json", "file:///models/t.json#frag", "http://a@b@c/p", "http://host/path@x",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, u string) {
		r := artifact.Redact(u)
		if strings.ContainsAny(r, "?#") {
			t.Fatalf("Redact(%q) = %q keeps a query or fragment", u, r)
		}
		if len(r) > len(u) {
			t.Fatalf("Redact(%q) = %q is longer", u, r)
		}
		if again := artifact.Redact(r); again != r {
			t.Fatalf("Redact(%q) = %q, then %q", u, r, again)
		}
		if _, rest, ok := strings.Cut(r, "://"); ok {
			authority, _, _ := strings.Cut(rest, "/")
			if strings.Contains(authority, "@") {
				t.Fatalf("Redact(%q) = %q keeps user info %q", u, r, authority)
			}
		}
	})
}

// TestRedact: user info goes wherever an '@' in the path is (a revision
// such as repo@main), and the path stays.
func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://user:pw-s3cret@h.example/org/repo@main/t.json": "http://h.example/org/repo@main/t.json",
		"http://user:pw@127.0.0.1:8080/t.json?sig=s3cret":      "http://127.0.0.1:8080/t.json",
		"https://h.example/org/repo@main/t.json#x":             "https://h.example/org/repo@main/t.json",
		"http://a@b@c/p": "http://c/p",
		"hf://org/repo@refs%2Fpr%2F1/tokenizer.json": "hf://org/repo@refs%2Fpr%2F1/tokenizer.json",
		"http://u:p@host": "http://host",
		"/models/t.json":  "/models/t.json",
	} {
		if got := artifact.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q; want %q", in, got, want)
		}
	}
}
