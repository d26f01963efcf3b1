// Package artifact resolves the tokenizer and chat-template files a Dynamo
// model card declares (its CheckedFile slots), and fetches, verifies, caches
// and loads them in the background. Nothing is fetched, cached or loaded
// unless its blake3 checksum is pinned by the operator
// (dynamo.kv.pinned_artifacts): the files are code from the fleet.
//
// Imports: telemetry only: it takes plain values, never configuration types.
package artifact

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"

	"github.com/zeebo/blake3"
)

// Bounds of the artifacts. A tokenizer.json of the largest vocabularies is
// a few tens of MiB; anything beyond 64 MiB is not one.
const (
	// MaxArtifactBytes bounds one artifact; larger ones are refused.
	MaxArtifactBytes = 64 << 20
	// MaxSlotBytes bounds the JSON of one card slot (the discovery reducer
	// drops larger slots with the same bound).
	MaxSlotBytes = 4 << 10
)

// Slot is a model-card field that names an artifact.
type Slot string

// The card slots the router reads.
const (
	SlotTokenizer        Slot = "tokenizer"
	SlotPromptFormatter  Slot = "prompt_formatter"
	SlotChatTemplateFile Slot = "chat_template_file"
)

// Slots are the card slots, in card order.
var Slots = []Slot{SlotTokenizer, SlotPromptFormatter, SlotChatTemplateFile}

// Slot formats: the variant key of the card's externally tagged enum.
const (
	FormatHFTokenizerJSON       = "hf_tokenizer_json"
	FormatTikTokenModel         = "tik_token_model"
	FormatHFTokenizerConfigJSON = "hf_tokenizer_config_json"
	// FormatHFChatTemplate is a .jinja file (deserializer alias
	// hf_chat_template_jinja).
	FormatHFChatTemplate     = "hf_chat_template"
	FormatHFChatTemplateJSON = "hf_chat_template_json"
)

const formatHFChatTemplateJinja = "hf_chat_template_jinja"

// Kind is how an artifact's location is reached.
type Kind string

// Location kinds.
const (
	KindPath  Kind = "path"  // a local path
	KindFile  Kind = "file"  // file://
	KindHTTP  Kind = "http"  // http://
	KindHTTPS Kind = "https" // https://
	KindHF    Kind = "hf"    // hf://owner/repo[@revision]/file
	// KindOther is any other scheme (nats://, s3://, ...): unsupported.
	KindOther Kind = "other"
)

// Local reports whether the kind is read from the local file system.
func (k Kind) Local() bool { return k == KindPath || k == KindFile }

// Errors of parsing, fetching and loading. Callers branch on them with
// errors.Is; Result maps them to the metric's result label.
var (
	ErrMalformed        = errors.New("malformed artifact slot")
	ErrUnsupported      = errors.New("unsupported artifact")
	ErrUnpinned         = errors.New("artifact checksum not pinned in dynamo.kv.pinned_artifacts")
	ErrDisallowed       = errors.New("artifact source not allowed")
	ErrTooLarge         = errors.New("artifact larger than 64 MiB")
	ErrChecksumMismatch = errors.New("artifact checksum mismatch")
	ErrFetch            = errors.New("artifact fetch failed")
	ErrBuild            = errors.New("artifact build failed")
	ErrOverCapacity     = errors.New("artifact loader over capacity")
	// ErrPending: the artifact is queued or loading; ask again later.
	ErrPending = errors.New("artifact loading")
)

// Checksum is a blake3-256 digest.
type Checksum [32]byte

// ChecksumPrefix starts the text form of a checksum.
const ChecksumPrefix = "blake3:"

// ParseChecksum parses "blake3:<64 hex digits>" (either case).
func ParseChecksum(s string) (Checksum, error) {
	var c Checksum
	h, ok := strings.CutPrefix(s, ChecksumPrefix)
	if !ok {
		algo, _, found := strings.Cut(s, ":")
		if found {
			return c, fmt.Errorf("checksum algorithm %q is not blake3", trunc(algo))
		}
		return c, fmt.Errorf("checksum %q is not blake3:<64 hex digits>", trunc(s))
	}
	if len(h) != 64 {
		return c, fmt.Errorf("checksum %q is not blake3:<64 hex digits>", trunc(s))
	}
	if _, err := hex.Decode(c[:], []byte(h)); err != nil {
		return c, fmt.Errorf("checksum %q is not blake3:<64 hex digits>", trunc(s))
	}
	return c, nil
}

// String is "blake3:<64 lowercase hex digits>", as b3sum writes the digest.
func (c Checksum) String() string { return ChecksumPrefix + c.Hex() }

// Hex is the 64 lowercase hex digits.
func (c Checksum) Hex() string { return hex.EncodeToString(c[:]) }

// Sum is the blake3 checksum of data.
func Sum(data []byte) Checksum { return blake3.Sum256(data) }

// SumReader hashes r to its end and returns the checksum and the byte count.
func SumReader(r io.Reader) (Checksum, int64, error) {
	h := blake3.New()
	n, err := io.Copy(h, r)
	var c Checksum
	if err != nil {
		return c, n, err
	}
	copy(c[:], h.Sum(nil))
	return c, n, nil
}

// Ref is one artifact a card declares.
type Ref struct {
	Slot Slot
	// Format is the slot's variant (FormatHFTokenizerJSON, ...).
	Format string
	// Custom is a chat template's is_custom flag.
	Custom bool
	// Location is the path or URL as the card gives it.
	Location string
	Kind     Kind
	Checksum Checksum
	// Size is the declared size in bytes, or -1 when the card gives none.
	Size int64
	// HFFallback is where a local file that is not on this host is
	// fetched from instead, as Dynamo's frontend does: hf://<the card's
	// source>/<the file's name>, for a file that is not a custom template
	// (those are not on the Hub); empty when there is none.
	HFFallback string
}

// checkedFile is Dynamo's CheckedFile: {"path": "<path or URL>",
// "checksum": "blake3:<hex>"}, with "size" in newer cards.
type checkedFile struct {
	Path     *string `json:"path"`
	Checksum *string `json:"checksum"`
	Size     *int64  `json:"size"`
}

type chatTemplateFile struct {
	IsCustom bool            `json:"is_custom"`
	File     json.RawMessage `json:"file"`
}

// ParseSlot parses one card slot: an externally tagged enum whose variant
// holds a CheckedFile (tokenizer: hf_tokenizer_json, tik_token_model;
// prompt_formatter and chat_template_file: hf_tokenizer_config_json,
// hf_chat_template (alias hf_chat_template_jinja), hf_chat_template_json).
// An unknown variant or URI scheme is ErrUnsupported (with a Ref as far as
// it parsed); anything else that does not fit is ErrMalformed.
func ParseSlot(slot Slot, raw []byte) (Ref, error) {
	ref := Ref{Slot: slot, Size: -1}
	if len(raw) > MaxSlotBytes {
		return ref, fmt.Errorf("%w: %s: %d bytes, over %d", ErrMalformed, slot, len(raw), MaxSlotBytes)
	}
	var variants map[string]json.RawMessage
	if err := json.Unmarshal(raw, &variants); err != nil || variants == nil {
		return ref, fmt.Errorf("%w: %s is not an object with one variant", ErrMalformed, slot)
	}
	if len(variants) != 1 {
		return ref, fmt.Errorf("%w: %s has %d variants, want 1", ErrMalformed, slot, len(variants))
	}
	var inner json.RawMessage
	for k, v := range variants {
		ref.Format, inner = k, v
	}
	wrapped := false
	switch {
	case slot == SlotTokenizer && (ref.Format == FormatHFTokenizerJSON || ref.Format == FormatTikTokenModel):
	case slot != SlotTokenizer && ref.Format == FormatHFTokenizerConfigJSON:
	case slot != SlotTokenizer && (ref.Format == FormatHFChatTemplate || ref.Format == formatHFChatTemplateJinja):
		ref.Format, wrapped = FormatHFChatTemplate, true
	case slot != SlotTokenizer && ref.Format == FormatHFChatTemplateJSON:
		wrapped = true
	default:
		return ref, fmt.Errorf("%w: %s format %q", ErrUnsupported, slot, trunc(ref.Format))
	}
	if wrapped {
		var ct chatTemplateFile
		if err := json.Unmarshal(inner, &ct); err != nil || isNull(ct.File) {
			return ref, fmt.Errorf("%w: %s.%s is not {is_custom, file}", ErrMalformed, slot, ref.Format)
		}
		ref.Custom, inner = ct.IsCustom, ct.File
	}
	var cf checkedFile
	if err := json.Unmarshal(inner, &cf); err != nil {
		return ref, fmt.Errorf("%w: %s.%s is not a CheckedFile {path, checksum}", ErrMalformed, slot, ref.Format)
	}
	if cf.Path == nil || *cf.Path == "" || cf.Checksum == nil {
		return ref, fmt.Errorf("%w: %s.%s lacks path or checksum", ErrMalformed, slot, ref.Format)
	}
	if cf.Size != nil {
		if *cf.Size < 0 {
			return ref, fmt.Errorf("%w: %s.%s size %d is negative", ErrMalformed, slot, ref.Format, *cf.Size)
		}
		ref.Size = *cf.Size
	}
	sum, err := ParseChecksum(*cf.Checksum)
	if err != nil {
		return ref, fmt.Errorf("%w: %s.%s: %w", ErrUnsupported, slot, ref.Format, err)
	}
	ref.Checksum = sum
	ref.Location = *cf.Path
	ref.Kind, err = locationKind(ref.Location)
	if err != nil {
		return ref, fmt.Errorf("%s.%s: %w", slot, ref.Format, err)
	}
	return ref, nil
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

var schemeRE = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*):`)

// locationKind classifies a location the way Dynamo does: text that parses
// as an absolute URL is a URL, anything else a local path.
func locationKind(loc string) (Kind, error) {
	if strings.ContainsRune(loc, 0) {
		return KindPath, fmt.Errorf("%w: location holds a NUL byte", ErrMalformed)
	}
	m := schemeRE.FindStringSubmatch(loc)
	if m == nil {
		return KindPath, nil
	}
	switch strings.ToLower(m[1]) {
	case "file":
		if _, err := filePath(loc); err != nil {
			return KindFile, err
		}
		return KindFile, nil
	case "http":
		return KindHTTP, checkHTTPURL(loc)
	case "https":
		return KindHTTPS, checkHTTPURL(loc)
	case "hf":
		_, err := ParseHF(loc)
		return KindHF, err
	}
	return KindOther, fmt.Errorf("%w: URI scheme %q", ErrUnsupported, trunc(m[1]))
}

// LocationKind is how loc is reached, classified as a card's path is:
// text that parses as an absolute URL (its scheme in any case) is a URL,
// anything else a local path.
func LocationKind(loc string) Kind {
	k, _ := locationKind(loc)
	return k
}

func checkHTTPURL(loc string) error {
	u, err := url.Parse(loc)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%w: %q is not an absolute http(s) URL", ErrMalformed, trunc(Redact(loc)))
	}
	return nil
}

// filePath is the local path of a file:// URL (host empty or localhost).
func filePath(loc string) (string, error) {
	u, err := url.Parse(loc)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrMalformed, trunc(loc), err)
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", fmt.Errorf("%w: file URL %q names host %q", ErrUnsupported, trunc(loc), trunc(u.Host))
	}
	if u.Path == "" || !strings.HasPrefix(u.Path, "/") {
		return "", fmt.Errorf("%w: file URL %q has no absolute path", ErrMalformed, trunc(loc))
	}
	return u.Path, nil
}

// HFRef is a file of a Hugging Face model repository:
// hf://<owner>/<repo>[@<revision>]/<path>, the revision defaulting to main
// (a revision holding "/" is written percent-encoded: refs%2Fpr%2F1).
type HFRef struct {
	Repo     string // owner/repo
	Revision string
	Path     string
}

// ParseHF parses an hf:// location. Only model repositories are supported.
func ParseHF(loc string) (HFRef, error) {
	rest, ok := strings.CutPrefix(loc, "hf://")
	if !ok {
		return HFRef{}, fmt.Errorf("%w: %q is not hf://[owner/]repo[@revision]/file", ErrMalformed, trunc(loc))
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 {
		return HFRef{}, fmt.Errorf("%w: %q is not hf://[owner/]repo[@revision]/file", ErrMalformed, trunc(loc))
	}
	if parts[0] == "datasets" || parts[0] == "spaces" {
		return HFRef{}, fmt.Errorf("%w: %q is not a model repository", ErrUnsupported, trunc(loc))
	}
	// Two segments are a repository without an owner (gpt2), as the Hub
	// still serves them and Dynamo's own fallback may write them.
	hasOwner := len(parts) > 2
	var owner string
	if hasOwner {
		owner, parts = parts[0], parts[1:]
	}
	repo, rev, hasRev := strings.Cut(parts[0], "@")
	// The file path is a URL path: each segment is percent-decoded here
	// (and encoded once again by ResolveURL), so "a%20b.json" names the
	// file "a b.json" rather than "a%20b.json". A '%' that starts no
	// escape is kept as itself, as URL parsers keep it.
	file := parts[1:]
	for i, seg := range file {
		if dec, err := url.PathUnescape(seg); err == nil {
			if strings.ContainsAny(dec, "/\\") || strings.ContainsRune(dec, 0) {
				return HFRef{}, fmt.Errorf("%w: %q has an escaped separator in its path", ErrMalformed, trunc(loc))
			}
			file[i] = dec
		}
	}
	r := HFRef{Repo: repo, Revision: "main", Path: strings.Join(file, "/")}
	if hasOwner {
		r.Repo = owner + "/" + repo
	}
	if hasRev {
		dec, err := url.PathUnescape(rev)
		if err != nil || dec == "" {
			return HFRef{}, fmt.Errorf("%w: %q has a bad revision", ErrMalformed, trunc(loc))
		}
		r.Revision = dec
	}
	segs := append(strings.Split(r.Repo, "/"), file...)
	for _, seg := range segs {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "?#\\") {
			return HFRef{}, fmt.Errorf("%w: %q has an empty, dot or escaping path segment", ErrMalformed, trunc(loc))
		}
	}
	return r, nil
}

// ResolveURL is the file's download URL under endpoint
// (<endpoint>/<owner>/<repo>/resolve/<revision>/<path>).
func (r HFRef) ResolveURL(endpoint string) string {
	segs := strings.Split(r.Path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	repo := strings.Split(r.Repo, "/")
	for i, s := range repo {
		repo[i] = url.PathEscape(s)
	}
	return strings.TrimRight(endpoint, "/") + "/" + strings.Join(repo, "/") +
		"/resolve/" + url.PathEscape(r.Revision) + "/" + strings.Join(segs, "/")
}

// Name is the artifact's file name, for logs and listings.
func (r Ref) Name() string {
	loc := r.Location
	if i := strings.IndexAny(loc, "?#"); i >= 0 && r.Kind != KindPath {
		loc = loc[:i]
	}
	if i := strings.LastIndexAny(loc, "/\\"); i >= 0 && i+1 < len(loc) {
		return loc[i+1:]
	}
	return loc
}

// Declared is one slot a card declares: its Ref (as far as it parsed) and
// the error when it did not parse or is not supported.
type Declared struct {
	Ref
	Err error
}

// CardSlots parses the artifact slots of a card (its tokenizer,
// prompt_formatter and chat_template_file values), in that order; absent
// or null slots are skipped. hfSource is the card's Hugging Face
// repository (wire.Card.HFSource), which gives local files their
// HFFallback; empty for none.
func CardSlots(hfSource string, tokenizer, promptFormatter, chatTemplateFile json.RawMessage) []Declared {
	var out []Declared
	for _, s := range []struct {
		slot Slot
		raw  json.RawMessage
	}{{SlotTokenizer, tokenizer}, {SlotPromptFormatter, promptFormatter}, {SlotChatTemplateFile, chatTemplateFile}} {
		if isNull(s.raw) {
			continue
		}
		ref, err := ParseSlot(s.slot, s.raw)
		if err == nil && ref.Kind.Local() && !ref.Custom && hfSource != "" {
			// The name is a literal file name: escaped, so that a '%' in
			// it is not read as an escape of the hf:// path.
			fb := "hf://" + hfSource + "/" + url.PathEscape(ref.Name())
			if _, perr := ParseHF(fb); perr == nil {
				ref.HFFallback = fb
			}
		}
		out = append(out, Declared{Ref: ref, Err: err})
	}
	return out
}

// trunc bounds text from the card quoted in an error.
func trunc(s string) string {
	const n = 128
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
