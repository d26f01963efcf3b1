// Package eventbus is the event bus: a tunnel that lets a router outside a
// Kubernetes cluster read the event publishers of workers it cannot reach.
// In-cluster clients (a broker, a kv-listener) dial out to a dedicated
// HTTP/2 over TLS 1.3 listener on the router; each opens one long-lived
// control channel and, for every stream the router commands, a data stream
// carrying a publisher's raw bytes. The router never dials a client.
//
// The package holds the tunnel protocol (this file), the listener and its
// limits, the EventBus API the router's subscriptions open streams through,
// and the broker connector that runs a subscription over such a stream.
// The clients are in the agent subpackage.
//
// Imports: telemetry and zmtp (the connector contract); no configuration
// types, which the daemon turns into Settings.
package eventbus

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Request paths, headers and the protocol version.
const (
	// PathSession is the control channel: a long-lived bidirectional NDJSON
	// stream, hello and welcome first.
	PathSession = "/bus/v1/session"
	// PathStreams prefixes a data stream: PathStreams + stream id.
	PathStreams = "/bus/v1/streams/"
	// HeaderVersion carries the client's protocol version on every request.
	HeaderVersion = "continuum-bus-version"
	// ProtocolVersion is the version this build speaks.
	ProtocolVersion = 1
)

// Client roles.
const (
	RoleBroker     = "broker"
	RoleKVListener = "kv_listener"
)

// Control message types.
const (
	TypeHello        = "hello"
	TypeWelcome      = "welcome"
	TypeSubscribe    = "subscribe"
	TypeUnsubscribe  = "unsubscribe"
	TypeStreamClosed = "stream_closed"
	TypeDraining     = "draining"
	TypeHeartbeat    = "heartbeat"
	TypeHeartbeatAck = "heartbeat_ack"
	// TypeError ends a session: the listener says why before it closes
	// the control channel (session_superseded, forbidden, ...).
	TypeError = "error"
)

// Refusal and close codes. The listener answers a refused request with an
// HTTP status and a JSON body {"error":{"code","message"}}, and ends a
// session with an error message carrying one of them; a client reports a
// stream it could not open or that ended with stream_closed and a code.
const (
	CodeTLSRequired        = "tls_required"
	CodeHandshakeTimeout   = "handshake_timeout"
	CodeHandshakeFailed    = "handshake_failed"
	CodeConnectionLimit    = "connection_limit"
	CodeAuthTimeout        = "auth_timeout"
	CodeUnauthenticated    = "unauthenticated"
	CodeCredentialRevoked  = "credential_revoked"
	CodeForbidden          = "forbidden"
	CodeUnsupportedVersion = "unsupported_protocol_version"
	CodeTooManySessions    = "too_many_sessions"
	CodeHelloTimeout       = "hello_timeout"
	CodeInvalidHello       = "invalid_hello"
	CodeNotFound           = "not_found"
	CodeUnknownStream      = "unknown_stream"
	CodeDuplicateStream    = "duplicate_stream"
	CodeSessionSuperseded  = "session_superseded"
	CodeIdleTimeout        = "idle_timeout"
	CodeShuttingDown       = "shutting_down"
	CodeControlBacklog     = "control_backlog"

	// Stream codes a client reports.
	CodeTargetNotAdvertised  = "target_not_advertised"
	CodeNamespaceNotDeclared = "namespace_not_declared"
	CodeConnectFailed        = "connect_failed"
	CodePublisherClosed      = "publisher_closed"
	CodeBackendUnknown       = "backend_unknown"
	CodeBackendFailed        = "backend_failed"
	CodeTooManyStreams       = "too_many_streams"
	CodeDraining             = "draining"
	CodeUnsubscribed         = "unsubscribed"
	CodeStreamRefused        = "stream_refused"
)

// RefusalCodes are the codes the listener counts refusals by
// (continuum_dynamo_event_bus_refusals_total{code}), a closed set.
var RefusalCodes = []string{CodeTLSRequired, CodeHandshakeTimeout, CodeHandshakeFailed, CodeConnectionLimit,
	CodeAuthTimeout, CodeUnauthenticated, CodeCredentialRevoked, CodeForbidden, CodeUnsupportedVersion,
	CodeTooManySessions, CodeHelloTimeout, CodeInvalidHello, CodeNotFound, CodeUnknownStream, CodeDuplicateStream}

// Bounds of what the protocol carries. A control line is at most
// MaxLineBytes; lists and names are bounded so that a decoded message is
// small whatever a peer sends.
const (
	MaxLineBytes    = 64 << 10
	maxListLen      = 64
	maxNameBytes    = 253
	maxTopicBytes   = 256
	maxMessageBytes = 1024
	maxVersions     = 8
)

// Message is one control line. Which fields are set depends on Type; a
// field this version does not know is ignored, so that a newer peer's
// additions do not break an older one.
type Message struct {
	Type string `json:"type"`

	// hello
	Role             string   `json:"role,omitempty"`
	ClientID         string   `json:"client_id,omitempty"`
	DynamoNamespaces []string `json:"dynamo_namespaces,omitempty"`
	Sources          []string `json:"sources,omitempty"`
	Versions         []int    `json:"versions,omitempty"`

	// welcome
	SessionID string  `json:"session_id,omitempty"`
	Version   int     `json:"version,omitempty"`
	Limits    *Limits `json:"limits,omitempty"`

	// subscribe, unsubscribe, stream_closed
	StreamID  string           `json:"stream_id,omitempty"`
	Target    *Target          `json:"target,omitempty"`
	Announced *AnnouncedTarget `json:"announced,omitempty"`

	// stream_closed, error
	Code   string `json:"code,omitempty"`
	Detail string `json:"message,omitempty"`

	// heartbeat, heartbeat_ack
	Seq uint64 `json:"seq,omitempty"`
}

// Limits are what the listener applies to a session, sent in welcome.
type Limits struct {
	MaxStreams          int   `json:"max_streams"`
	StreamBufferBytes   int   `json:"stream_buffer_bytes"`
	HeartbeatIntervalMs int64 `json:"heartbeat_interval_ms"`
	IdleTimeoutMs       int64 `json:"idle_timeout_ms"`
}

// Target is a ZMQ publisher in a Dynamo namespace, and the topic read
// from it.
type Target struct {
	Namespace string `json:"namespace"`
	Host      string `json:"host"`
	Port      int    `json:"port"`
	Topic     string `json:"topic"`
}

// AnnouncedTarget is a kv_listener's announced source, and where its SSE
// stream resumes (the Last-Event-ID; none from the start).
type AnnouncedTarget struct {
	Backend     string  `json:"backend"`
	LastEventID *uint64 `json:"last_event_id,omitempty"`
}

// ErrInvalid is wrapped by every validation failure of a message.
var ErrInvalid = errors.New("invalid control message")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

var (
	streamIDRe  = regexp.MustCompile(`^[0-9a-f]{32}$`)
	sessionIDRe = regexp.MustCompile(`^sess-[0-9a-f]{32}$`)
)

// ValidStreamID reports whether id is a stream id (32 lowercase hex).
func ValidStreamID(id string) bool { return streamIDRe.MatchString(id) }

// checkName checks a Dynamo namespace, a broker id or a backend name on
// the wire: UTF-8, at most maxNameBytes, no white space or control
// character (nothing a log line or a label could be confused by). It is no
// narrower than what configuration accepts for each (a namespace such as
// dynamo_ns, a backend such as vllm_1): a name an entry allows must pass
// the hello, and whether it is allowed is the entry's to say (forbidden).
func checkName(what, s string) error {
	if s == "" || len(s) > maxNameBytes || !utf8.ValidString(s) || strings.ContainsFunc(s, badNameRune) {
		return invalid("%s %q is not a valid name", what, truncate(s))
	}
	return nil
}

func badNameRune(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

func checkNames(what string, list []string) error {
	if len(list) > maxListLen {
		return invalid("%d %s listed; at most %d", len(list), what, maxListLen)
	}
	for _, s := range list {
		if err := checkName(what, s); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks a message's fields for its type.
func (m *Message) Validate() error {
	if len(m.Code) > maxNameBytes || len(m.Detail) > maxMessageBytes {
		return invalid("code or message too long")
	}
	switch m.Type {
	case TypeHello:
		if m.Role != RoleBroker && m.Role != RoleKVListener {
			return invalid("role %q is not broker or kv_listener", truncate(m.Role))
		}
		if err := checkName("client_id", m.ClientID); err != nil {
			return err
		}
		if err := checkNames("dynamo_namespaces", m.DynamoNamespaces); err != nil {
			return err
		}
		if err := checkNames("sources", m.Sources); err != nil {
			return err
		}
		if len(m.Versions) == 0 || len(m.Versions) > maxVersions {
			return invalid("hello lists %d protocol versions; 1 to %d", len(m.Versions), maxVersions)
		}
	case TypeWelcome:
		if !sessionIDRe.MatchString(m.SessionID) {
			return invalid("session id %q is not sess-<32 hex>", truncate(m.SessionID))
		}
		if m.Version < 1 || m.Limits == nil {
			return invalid("welcome without a version or limits")
		}
		if l := m.Limits; l.MaxStreams < 1 || l.StreamBufferBytes < 1 || l.HeartbeatIntervalMs < 1 || l.IdleTimeoutMs < 1 {
			return invalid("welcome limits must be positive")
		}
		if l, most := m.Limits, MaxWelcomeInterval.Milliseconds(); l.MaxStreams > StreamsPerSessionLimit || l.StreamBufferBytes > MaxStreamBuffer ||
			l.HeartbeatIntervalMs > most || l.IdleTimeoutMs > most {
			return invalid("welcome limits past their bounds (max_streams %d, stream_buffer_bytes %d, intervals %d ms)",
				StreamsPerSessionLimit, MaxStreamBuffer, most)
		}
	case TypeSubscribe:
		if !ValidStreamID(m.StreamID) {
			return invalid("stream id %q is not 32 lowercase hex", truncate(m.StreamID))
		}
		if (m.Target == nil) == (m.Announced == nil) {
			return invalid("subscribe names exactly one of target and announced")
		}
		if m.Target != nil {
			return m.Target.Validate()
		}
		return checkName("backend", m.Announced.Backend)
	case TypeUnsubscribe, TypeStreamClosed:
		if !ValidStreamID(m.StreamID) {
			return invalid("stream id %q is not 32 lowercase hex", truncate(m.StreamID))
		}
	case TypeDraining, TypeHeartbeat, TypeHeartbeatAck, TypeError:
	default:
		return invalid("unknown message type %q", truncate(m.Type))
	}
	return nil
}

// Validate checks a target's fields.
func (t *Target) Validate() error {
	if err := checkName("namespace", t.Namespace); err != nil {
		return err
	}
	if t.Host == "" || len(t.Host) > maxNameBytes || strings.ContainsFunc(t.Host, badHostRune) {
		return invalid("host %q is not a host name or address", truncate(t.Host))
	}
	if t.Port < 1 || t.Port > 65535 {
		return invalid("port %d is out of range", t.Port)
	}
	if t.Topic == "" || len(t.Topic) > maxTopicBytes || strings.ContainsAny(t.Topic, "\x00\n") {
		return invalid("topic %q is not valid", truncate(t.Topic))
	}
	return nil
}

// badHostRune rejects what no host name or IP address (IPv6 included,
// unbracketed) contains.
func badHostRune(r rune) bool {
	return r <= ' ' || r >= 0x7f || strings.ContainsRune("/\\@?#[]%", r)
}

// Encode returns m as one NDJSON line (with its newline).
func Encode(m *Message) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		// A Message holds strings, numbers and lists only.
		panic(fmt.Sprintf("eventbus: encoding a control message: %v", err))
	}
	return append(b, '\n')
}

// Decode parses and validates one control line (without its newline).
func Decode(line []byte) (Message, error) {
	var m Message
	if len(line) > MaxLineBytes {
		return m, invalid("line of %d bytes; at most %d", len(line), MaxLineBytes)
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return Message{}, invalid("not JSON: %v", err)
	}
	// An empty list is no list, as Encode writes it.
	if len(m.DynamoNamespaces) == 0 {
		m.DynamoNamespaces = nil
	}
	if len(m.Sources) == 0 {
		m.Sources = nil
	}
	if len(m.Versions) == 0 {
		m.Versions = nil
	}
	if err := m.Validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}

// ErrLineTooLong is returned by a LineReader for a line over its bound.
var ErrLineTooLong = errors.New("control line too long")

// LineReader reads newline-delimited lines of at most max bytes each
// from a stream; it holds at most max bytes whatever the peer sends.
type LineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewLineReader returns a reader of lines of at most max bytes.
func NewLineReader(r io.Reader, max int) *LineReader {
	return &LineReader{r: bufio.NewReaderSize(r, 4<<10), max: max}
}

// Next returns the next line without its newline, valid until the next
// call. Empty lines are skipped. A line over the bound is ErrLineTooLong
// (the stream is then unusable); a stream that ends mid-line is
// io.ErrUnexpectedEOF.
func (l *LineReader) Next() ([]byte, error) {
	for {
		l.buf = l.buf[:0]
		for {
			chunk, err := l.r.ReadSlice('\n')
			if len(l.buf)+len(chunk) > l.max+1 {
				return nil, ErrLineTooLong
			}
			l.buf = append(l.buf, chunk...)
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) && len(l.buf) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line := l.buf[:len(l.buf)-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
		if len(line) > l.max {
			return nil, ErrLineTooLong
		}
		if len(line) > 0 {
			return line, nil
		}
	}
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
