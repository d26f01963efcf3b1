// Package wire holds pure codecs of Dynamo's discovery bytes: etcd keys and
// the Endpoint, Model (card) and EventChannel records stored under them. It
// imports nothing of Continuum and does no I/O, so it can be fuzzed alone.
//
// Imports: no internal package (it is fuzzed alone).
package wire

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Keyspace is one of the etcd buckets Dynamo registers workers under.
type Keyspace int

// The keyspaces a read-only observer watches.
const (
	KeyspaceInstances Keyspace = iota + 1
	KeyspaceModelCards
	KeyspaceEventChannels
	// KeyspacePods and KeyspaceRefusals are Continuum's own: the Kubernetes
	// sources feed the reducer through them. Nothing reads them from etcd.
	KeyspacePods
	KeyspaceRefusals
)

// Bucket prefixes, each followed by "/".
const (
	PrefixInstances     = "v1/instances/"
	PrefixModelCards    = "v1/mdc/"
	PrefixEventChannels = "v1/event_channels/"
	// PrefixPods keys a ready worker pod: continuum/pods/<dynamo ns>/<pod>.
	PrefixPods = "continuum/pods/"
	// PrefixRefusals keys a Kubernetes object refused as a whole:
	// continuum/refusals/<kind>/<name>.
	PrefixRefusals = "continuum/refusals/"
)

func (k Keyspace) String() string {
	switch k {
	case KeyspaceInstances:
		return "instances"
	case KeyspaceModelCards:
		return "model_cards"
	case KeyspaceEventChannels:
		return "event_channels"
	case KeyspacePods:
		return "pods"
	case KeyspaceRefusals:
		return "refusals"
	}
	return "unknown"
}

// WatchPrefixes returns the three prefixes watched for one Dynamo namespace.
// The event-channel prefix covers every scope inside the namespace.
func WatchPrefixes(namespace string) [3]string {
	return [3]string{
		PrefixInstances + namespace + "/",
		PrefixModelCards + namespace + "/",
		PrefixEventChannels + "namespace/" + EncodeSegment(namespace) + "/",
	}
}

// WatchedChannelKey reports whether an event-channel key belongs to one of
// namespaces. A scoped key belongs to the namespace of its scope prefix. A
// key of four segments is the Dynamo 1.2 form <ns>/<component>/<topic>/<hex>
// and belongs to its first segment, so a 1.2 key of a namespace named
// "namespace" is never taken for a scoped key of another namespace. A key
// under a watched scoped prefix that does not parse belongs to that
// namespace, to be reported as malformed.
func WatchedChannelKey(key string, namespaces []string) bool {
	if k, err := ParseKey(key); err == nil && k.Legacy {
		return slices.Contains(namespaces, k.Namespace)
	}
	for _, ns := range namespaces {
		if strings.HasPrefix(key, PrefixEventChannels+"namespace/"+EncodeSegment(ns)+"/") {
			return true
		}
	}
	return false
}

// ScopeKind is the scope an event channel is registered at.
type ScopeKind string

// Event channel scopes.
const (
	ScopeNamespace ScopeKind = "namespace"
	ScopeComponent ScopeKind = "component"
	ScopeEndpoint  ScopeKind = "endpoint"
)

// Key is a parsed etcd key.
type Key struct {
	Space     Keyspace
	Namespace string
	Component string
	// Endpoint is the endpoint name (instances, model cards, endpoint-scoped
	// channels).
	Endpoint string
	// InstanceID is the worker's instance id (instances, model cards) or the
	// publisher id (event channels), parsed from lowercase hex.
	InstanceID uint64
	// ModelSuffix is the LoRA suffix of a model card key ("" for base cards).
	ModelSuffix string
	// Scope and Topic are set for event channels.
	Scope ScopeKind
	Topic string
	// Legacy marks the Dynamo 1.2 channel key <ns>/<component>/<topic>/<hex>.
	Legacy bool
}

// ErrKey is wrapped by every key parse error.
var ErrKey = errors.New("malformed key")

func keyErr(key, format string, args ...any) error {
	return fmt.Errorf("%w %q: %s", ErrKey, key, fmt.Sprintf(format, args...))
}

// ParseKey parses a full etcd key of one of the three buckets.
func ParseKey(key string) (Key, error) {
	switch {
	case strings.HasPrefix(key, PrefixInstances):
		return parseWorkerKey(key, KeyspaceInstances, strings.TrimPrefix(key, PrefixInstances))
	case strings.HasPrefix(key, PrefixModelCards):
		return parseWorkerKey(key, KeyspaceModelCards, strings.TrimPrefix(key, PrefixModelCards))
	case strings.HasPrefix(key, PrefixEventChannels):
		return parseChannelKey(key, strings.TrimPrefix(key, PrefixEventChannels))
	case strings.HasPrefix(key, PrefixPods):
		ns, pod, ok := strings.Cut(strings.TrimPrefix(key, PrefixPods), "/")
		if !ok || ns == "" || pod == "" || strings.Contains(pod, "/") {
			return Key{}, keyErr(key, "want %s<namespace>/<pod>", PrefixPods)
		}
		return Key{Space: KeyspacePods, Namespace: ns, Component: pod}, nil
	case strings.HasPrefix(key, PrefixRefusals):
		if strings.TrimPrefix(key, PrefixRefusals) == "" {
			return Key{}, keyErr(key, "empty refusal name")
		}
		return Key{Space: KeyspaceRefusals}, nil
	}
	return Key{}, keyErr(key, "not under %s, %s or %s", PrefixInstances, PrefixModelCards, PrefixEventChannels)
}

// ParseRelativeKey parses a key relative to its bucket, as the maps of a
// DynamoWorkerMetadata resource hold them.
func ParseRelativeKey(space Keyspace, rel string) (Key, error) {
	if space == KeyspaceEventChannels {
		return parseChannelKey(rel, rel)
	}
	return parseWorkerKey(rel, space, rel)
}

func parseWorkerKey(full string, space Keyspace, rel string) (Key, error) {
	seg := strings.Split(rel, "/")
	n := len(seg)
	if n < 4 || n > 5 || (space == KeyspaceInstances && n != 4) {
		return Key{}, keyErr(full, "want <namespace>/<component>/<endpoint>/<hex id>%s", map[bool]string{true: "[/<lora suffix>]"}[space == KeyspaceModelCards])
	}
	for i, s := range seg[:3] {
		// A legacy model card's writer left component and endpoint
		// empty, in the record and so in its key (<ns>///<hex id>); the
		// card joins by instance id alone, so its key's segments may be
		// empty. Other records need all three.
		if s == "" && (i == 0 || space != KeyspaceModelCards) {
			return Key{}, keyErr(full, "empty %s segment", [3]string{"namespace", "component", "endpoint"}[i])
		}
	}
	id, err := parseHexID(seg[3])
	if err != nil {
		return Key{}, keyErr(full, "%v", err)
	}
	k := Key{Space: space, Namespace: seg[0], Component: seg[1], Endpoint: seg[2], InstanceID: id}
	if n == 5 {
		if seg[4] == "" {
			return Key{}, keyErr(full, "empty LoRA suffix")
		}
		k.ModelSuffix = seg[4]
	}
	return k, nil
}

// parseChannelKey parses the scoped form
// namespace/<ns>[/component/<c>[/endpoint/<e>]]/topic/<topic>/<hex> (segments
// escaped) and the legacy form <ns>/<component>/<topic>/<hex>.
func parseChannelKey(full, rel string) (Key, error) {
	seg := strings.Split(rel, "/")
	n := len(seg)
	if n < 4 {
		return Key{}, keyErr(full, "too few segments for an event channel")
	}
	id, err := parseHexID(seg[n-1])
	if err != nil {
		return Key{}, keyErr(full, "%v", err)
	}
	k := Key{Space: KeyspaceEventChannels, InstanceID: id}
	if n == 4 {
		// Legacy: <ns>/<component>/<topic>/<hex>; component may be empty. A
		// scoped key has at least five segments, so four segments are
		// legacy even for a namespace literally named "namespace".
		if seg[0] == "" || seg[2] == "" {
			return Key{}, keyErr(full, "empty namespace or topic")
		}
		k.Namespace, k.Component, k.Topic, k.Legacy = seg[0], seg[1], seg[2], true
		k.Scope = ScopeNamespace
		if k.Component != "" {
			k.Scope = ScopeComponent
		}
		return k, nil
	}
	if seg[n-3] != "topic" {
		return Key{}, keyErr(full, "no topic segment")
	}
	if k.Topic, err = DecodeSegment(seg[n-2]); err != nil || k.Topic == "" {
		return Key{}, keyErr(full, "bad topic segment")
	}
	scope := seg[:n-3]
	pairs := [][2]string{}
	for i := 0; i+1 < len(scope); i += 2 {
		v, err := DecodeSegment(scope[i+1])
		if err != nil || v == "" {
			return Key{}, keyErr(full, "bad %s segment", scope[i])
		}
		pairs = append(pairs, [2]string{scope[i], v})
	}
	if len(scope)%2 != 0 || len(pairs) == 0 || len(pairs) > 3 {
		return Key{}, keyErr(full, "bad scope path")
	}
	names := []string{"namespace", "component", "endpoint"}
	for i, p := range pairs {
		if p[0] != names[i] {
			return Key{}, keyErr(full, "scope segment %q where %q belongs", p[0], names[i])
		}
	}
	k.Namespace = pairs[0][1]
	k.Scope = ScopeNamespace
	if len(pairs) > 1 {
		k.Component, k.Scope = pairs[1][1], ScopeComponent
	}
	if len(pairs) > 2 {
		k.Endpoint, k.Scope = pairs[2][1], ScopeEndpoint
	}
	return k, nil
}

// parseHexID parses an instance or publisher id written as lowercase hex
// without 0x or padding (uppercase is accepted too, and leading zeros of
// any number, as an unsigned integer parse of the string reads them: the
// same id, however it is padded).
func parseHexID(s string) (uint64, error) {
	digits := s
	if len(digits) > 16 {
		digits = strings.TrimLeft(digits, "0")
	}
	if s == "" || len(digits) > 16 {
		return 0, fmt.Errorf("id %q is not 1 to 16 hex digits", clipID(s))
	}
	if digits == "" {
		return 0, nil // zeros only
	}
	v, err := strconv.ParseUint(digits, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("id %q is not hex", clipID(s))
	}
	return v, nil
}

// maxIDShown bounds an id quoted in an error: a record's id field may be
// a string or a value as long as the record.
const maxIDShown = 32

// clipID returns s cut to maxIDShown bytes, marked when cut.
func clipID(s string) string {
	if len(s) <= maxIDShown {
		return s
	}
	return strings.ToValidUTF8(s[:maxIDShown], "") + "…"
}

// FormatID renders an id the way keys and the registry hold it: lowercase hex.
func FormatID(id uint64) string { return strconv.FormatUint(id, 16) }

// FileStoreName is the file name Dynamo's file store (Key::url_safe) gives
// a key: every byte that is not an ASCII letter or digit becomes %XX with
// uppercase hex.
func FileStoreName(key string) string {
	return escape(key, func(byte) bool { return false })
}

// EncodeSegment escapes an event-channel key segment: ASCII letters, digits,
// '-' and '_' stay; every other byte becomes %XX with uppercase hex.
func EncodeSegment(s string) string {
	return escape(s, func(c byte) bool { return c == '-' || c == '_' })
}

// escape keeps ASCII letters, digits and the bytes keep accepts, and writes
// every other byte as %XX with uppercase hex.
func escape(s string, keep func(byte) bool) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || keep(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// DecodeSegment reverses EncodeSegment. A truncated escape or a result that
// is not UTF-8 is an error.
func DecodeSegment(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", errors.New("truncated escape")
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", errors.New("bad escape")
		}
		b.WriteByte(byte(v))
		i += 2
	}
	out := b.String()
	if !utf8Valid(out) {
		return "", errors.New("not UTF-8")
	}
	return out, nil
}
