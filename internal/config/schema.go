// Package config holds Continuum's one configuration schema: the typed
// sections, their defaults, loading from YAML with positions, validation
// findings, masking of secrets, and the classification of reload changes.
//
// Imports: no internal package.
package config

import (
	"os"
	"path/filepath"
	"time"
)

// Config is the whole product's configuration. Every field is tagged with the
// YAML key it is read from; keys not in this schema are errors.
type Config struct {
	Server               Server               `yaml:"server" json:"server"`
	Admin                Admin                `yaml:"admin" json:"admin"`
	Backends             []Backend            `yaml:"backends" json:"backends"`
	DisaggregatedServing DisaggregatedServing `yaml:"disaggregated_serving" json:"disaggregated_serving"`
	APIKeys              []APIKey             `yaml:"api_keys" json:"api_keys"`
	Dynamo               Dynamo               `yaml:"dynamo" json:"dynamo"`
}

// Server is the OpenAI-compatible listener.
type Server struct {
	BindAddress string `yaml:"bind_address" json:"bind_address"`
	// ReadHeaderTimeout bounds reading a request's line and headers;
	// ReadTimeout the whole request, body included (a client trickling
	// either is cut off); IdleTimeout a keep-alive connection between
	// requests. WriteTimeout bounds a client that takes none of its
	// answer's bytes: a write that cannot go on for that long ends the
	// request. A response's length (a stream) is not bounded here: a
	// backend's timeout bounds it.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout" json:"read_header_timeout"`
	ReadTimeout       Duration `yaml:"read_timeout" json:"read_timeout"`
	IdleTimeout       Duration `yaml:"idle_timeout" json:"idle_timeout"`
	WriteTimeout      Duration `yaml:"write_timeout" json:"write_timeout"`
	// MaxHeaderBytes bounds a request's headers; MaxBodyBytes its body
	// (413 beyond).
	MaxHeaderBytes int64 `yaml:"max_header_bytes" json:"max_header_bytes"`
	MaxBodyBytes   int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	// MaxConnections bounds the open client connections (a connection
	// beyond it is closed at once); MaxInFlight the inference requests
	// being served (503 router_overloaded beyond it).
	MaxConnections int `yaml:"max_connections" json:"max_connections"`
	MaxInFlight    int `yaml:"max_in_flight" json:"max_in_flight"`
	// TLS serves HTTPS (HTTP/1.1 and HTTP/2) with a certificate reloaded
	// when its files change; plain HTTP when absent.
	TLS *ServerTLS `yaml:"tls,omitempty" json:"tls,omitempty"`
}

// ServerTLS is the listener's certificate and key (PEM files).
type ServerTLS struct {
	Cert string `yaml:"cert" json:"cert"`
	Key  string `yaml:"key" json:"key" secret:"true"`
}

// Listener defaults and bounds.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultMaxHeaderBytes    = 1 << 20
	DefaultMaxBodyBytes      = 32 << 20
	DefaultMaxConnections    = 8192
	DefaultMaxInFlight       = 4096
	MinMaxHeaderBytes        = 4 << 10
	MaxMaxHeaderBytes        = 16 << 20
	MinMaxBodyBytes          = 1 << 10
	MaxMaxBodyBytes          = 1 << 30
	MaxMaxConnections        = 1 << 20
)

// Admin configures the /admin API. Without a token the admin API is off.
type Admin struct {
	Token       string `yaml:"token" json:"token" secret:"true"`
	BindAddress string `yaml:"bind_address" json:"bind_address"`
}

// Backend roles.
const (
	RoleUnified = "unified"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// Backend is one upstream OpenAI-wire endpoint.
type Backend struct {
	Name     string   `yaml:"name" json:"name"`
	Type     string   `yaml:"type" json:"type"`
	URL      string   `yaml:"url" json:"url"`
	Role     string   `yaml:"role" json:"role"`
	Models   []string `yaml:"models" json:"models"`
	Internal bool     `yaml:"internal" json:"internal"`
	Enabled  bool     `yaml:"enabled" json:"enabled"`
	APIKey   string   `yaml:"api_key" json:"api_key" secret:"true"`
	Timeout  Duration `yaml:"timeout" json:"timeout"`
	// ResponsesAPI is how POST /v1/responses reaches the backend: native
	// (passed as it is; through the shim, pinned by the model alone), the
	// default for an OpenAI backend, which Dynamo's frontend is; or chat
	// (converted to a chat completion request), for a server that has no
	// Responses API.
	ResponsesAPI string `yaml:"responses_api" json:"responses_api"`
}

// Responses API modes of a backend.
const (
	ResponsesAPIChat   = "chat"
	ResponsesAPINative = "native"
)

func (b *Backend) setDefaults() {
	b.ResponsesAPI = ResponsesAPINative
	b.Type = "openai"
	b.Role = RoleUnified
	b.Enabled = true
	b.Timeout = Duration(DefaultBackendTimeout)
}

// DefaultBackendTimeout bounds one upstream request when a backend sets none.
const DefaultBackendTimeout = 300 * time.Second

// DisaggregatedServing turns on prefill/decode dispatch through the shim.
type DisaggregatedServing struct {
	Enabled           bool `yaml:"enabled" json:"enabled"`
	FallbackToUnified bool `yaml:"fallback_to_unified" json:"fallback_to_unified"`
}

// APIKey is one client credential, stored as its SHA-256 hash.
type APIKey struct {
	KeyHash         string     `yaml:"key_hash" json:"key_hash"`
	AllowedBackends []string   `yaml:"allowed_backends" json:"allowed_backends"`
	RateLimit       *RateLimit `yaml:"rate_limit,omitempty" json:"rate_limit,omitempty"`
}

// RateLimit is a per-key token bucket.
type RateLimit struct {
	RequestsPerSecond float64 `yaml:"requests_per_second" json:"requests_per_second"`
	Burst             int     `yaml:"burst" json:"burst"`
}

// Dynamo is the `dynamo:` block: routing to an NVIDIA Dynamo fleet, with its
// discovery, load signals, shim, KV-aware routing and event bus.
type Dynamo struct {
	Enabled   bool        `yaml:"enabled" json:"enabled"`
	Discovery Discovery   `yaml:"discovery" json:"discovery"`
	Load      LoadSignals `yaml:"load" json:"load"`
	Shim      Shim        `yaml:"shim" json:"shim"`
	KV        KV          `yaml:"kv" json:"kv"`
	EventBus  EventBus    `yaml:"event_bus" json:"event_bus"`
}

// Discovery sources.
const (
	SourceEtcd           = "etcd"
	SourceFile           = "file"
	SourceKubernetes     = "kubernetes"
	SourceKubernetesPods = "kubernetes_pods"
)

// DefaultNamespace is Dynamo's default DYN_NAMESPACE.
const DefaultNamespace = "dynamo"

// Discovery selects and configures the worker discovery source.
type Discovery struct {
	Source     string     `yaml:"source" json:"source"`
	Etcd       Etcd       `yaml:"etcd" json:"etcd"`
	File       FileStore  `yaml:"file" json:"file"`
	Kubernetes Kubernetes `yaml:"kubernetes" json:"kubernetes"`
}

// Etcd is the etcd discovery source.
type Etcd struct {
	Endpoints             []string `yaml:"endpoints" json:"endpoints"`
	Namespace             string   `yaml:"namespace" json:"namespace"`
	Namespaces            []string `yaml:"namespaces" json:"namespaces"`
	TLS                   *EtcdTLS `yaml:"tls,omitempty" json:"tls,omitempty"`
	Auth                  *Auth    `yaml:"auth,omitempty" json:"auth,omitempty"`
	WatchReconnectBackoff Backoff  `yaml:"watch_reconnect_backoff" json:"watch_reconnect_backoff"`
}

// EtcdTLS holds client TLS settings; paths are read when the source starts.
type EtcdTLS struct {
	CACert     string `yaml:"ca_cert" json:"ca_cert"`
	ClientCert string `yaml:"client_cert" json:"client_cert"`
	ClientKey  string `yaml:"client_key" json:"client_key" secret:"true"`
	ServerName string `yaml:"server_name" json:"server_name"`
}

// Auth is etcd username/password authentication.
type Auth struct {
	Username string `yaml:"username" json:"username"`
	Password string `yaml:"password" json:"password" secret:"true"`
}

// Backoff is a doubling reconnect delay between initial and max.
type Backoff struct {
	Initial Duration `yaml:"initial" json:"initial"`
	Max     Duration `yaml:"max" json:"max"`
}

// Seed backoff defaults.
const (
	DefaultBackoffInitial = 500 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
)

// FileStore is Dynamo's file key-value store (DYN_FILE_KV) on one machine.
type FileStore struct {
	Root       string   `yaml:"root" json:"root"`
	Namespace  string   `yaml:"namespace" json:"namespace"`
	Namespaces []string `yaml:"namespaces" json:"namespaces"`
}

// Kubernetes configures both Kubernetes sources.
type Kubernetes struct {
	Namespace             string           `yaml:"namespace" json:"namespace"`
	DynamoNamespace       string           `yaml:"dynamo_namespace" json:"dynamo_namespace"`
	DynamoNamespaces      []string         `yaml:"dynamo_namespaces" json:"dynamo_namespaces"`
	Model                 string           `yaml:"model" json:"model"`
	Models                []ComponentModel `yaml:"models" json:"models"`
	WatchReconnectBackoff Backoff          `yaml:"watch_reconnect_backoff" json:"watch_reconnect_backoff"`
}

// ComponentModel maps an nvidia.com/dynamo-component label to a served model.
type ComponentModel struct {
	Component       string `yaml:"component" json:"component"`
	Model           string `yaml:"model" json:"model"`
	DynamoNamespace string `yaml:"dynamo_namespace" json:"dynamo_namespace"`
}

// Load transports.
const (
	TransportDirect = "direct"
	TransportBroker = "broker"
)

// LoadSignals configures the kv_metrics load signal and what the router
// does with it beyond costs: busy thresholds and the queue of requests
// that find every worker busy.
type LoadSignals struct {
	MaxStaleness     Duration `yaml:"max_staleness" json:"max_staleness"`
	DirectAllowCIDRs []string `yaml:"direct_allow_cidrs" json:"direct_allow_cidrs"`
	Transport        string   `yaml:"transport" json:"transport"`
	// BusyThreshold, when set, takes busy workers out of candidacy; a
	// request whose every candidate is busy is refused with 503
	// all_workers_busy, or waits in Queue when it is set.
	BusyThreshold *BusyThreshold `yaml:"busy_threshold,omitempty" json:"busy_threshold,omitempty"`
	// Queue, when set, holds requests that find every worker busy until
	// one has room, at most MaxWait.
	Queue *LoadQueue `yaml:"queue,omitempty" json:"queue,omitempty"`
}

// BusyThreshold says when a worker (a data-parallel rank) is busy: more
// than KVBlocks of its total_kv_blocks in use, or a prefill backlog of
// more than PrefillTokens times its max_num_batched_tokens (either may be
// left out). A busy worker is free again once every signal is Hysteresis
// below its threshold.
type BusyThreshold struct {
	KVBlocks      *float64 `yaml:"kv_blocks,omitempty" json:"kv_blocks,omitempty"`
	PrefillTokens *float64 `yaml:"prefill_tokens,omitempty" json:"prefill_tokens,omitempty"`
	Hysteresis    float64  `yaml:"hysteresis" json:"hysteresis"`
}

func (b *BusyThreshold) setDefaults() { b.Hysteresis = DefaultBusyHysteresis }

// DefaultBusyHysteresis is how far below its threshold a busy worker's
// signals must fall for it to be free again.
const DefaultBusyHysteresis = 0.05

// LoadQueue bounds the requests waiting for a worker with room: at most
// Size wait, each at most MaxWait.
type LoadQueue struct {
	Size    int      `yaml:"size" json:"size"`
	MaxWait Duration `yaml:"max_wait" json:"max_wait"`
}

func (q *LoadQueue) setDefaults() {
	q.Size = DefaultQueueSize
	q.MaxWait = Duration(DefaultQueueMaxWait)
}

// Queue defaults.
const (
	DefaultQueueSize    = 128
	DefaultQueueMaxWait = 5 * time.Second
)

// DefaultMaxStaleness is the default freshness window: a worker's load
// sample older than this no longer counts as its current load.
const DefaultMaxStaleness = 3 * time.Second

// Shim routes pinned requests through `dynamo.frontend --router-mode direct`.
type Shim struct {
	Backends []string          `yaml:"backends" json:"backends"`
	Pools    []ShimPool        `yaml:"pools" json:"pools"`
	ModelMap map[string]string `yaml:"model_map" json:"model_map"`
	// LegacyPinHeaders sends every pin under its older header name too
	// (x-worker-instance-id, x-prefill-instance-id, x-dp-rank,
	// x-prefill-dp-rank): older direct-mode frontends read only those, the
	// newest read them as aliases. On by default.
	LegacyPinHeaders bool `yaml:"legacy_pin_headers" json:"legacy_pin_headers"`
}

// ShimPool is the frontend pool of one Dynamo namespace.
type ShimPool struct {
	Namespace string   `yaml:"namespace" json:"namespace"`
	Backends  []string `yaml:"backends" json:"backends"`
}

// KV configures KV-overlap-aware prefill selection.
type KV struct {
	Enabled                   bool                      `yaml:"enabled" json:"enabled"`
	AllowHTTPArtifacts        bool                      `yaml:"allow_http_artifacts" json:"allow_http_artifacts"`
	AllowHFArtifacts          bool                      `yaml:"allow_hf_artifacts" json:"allow_hf_artifacts"`
	PinnedArtifacts           []string                  `yaml:"pinned_artifacts" json:"pinned_artifacts"`
	OverlapScoreCredit        float64                   `yaml:"overlap_score_credit" json:"overlap_score_credit"`
	PrefillLoadScale          float64                   `yaml:"prefill_load_scale" json:"prefill_load_scale"`
	RouterTemperature         float64                   `yaml:"router_temperature" json:"router_temperature"`
	SendTokenData             bool                      `yaml:"send_token_data" json:"send_token_data"`
	ConditionalDisaggregation ConditionalDisaggregation `yaml:"conditional_disaggregation" json:"conditional_disaggregation"`
	ArtifactCacheDir          string                    `yaml:"artifact_cache_dir" json:"artifact_cache_dir"`
}

// ConditionalDisaggregation lets a decode worker prefill locally.
type ConditionalDisaggregation struct {
	Enabled             bool     `yaml:"enabled" json:"enabled"`
	DecodeBusyThreshold *float64 `yaml:"decode_busy_threshold,omitempty" json:"decode_busy_threshold,omitempty"`
}

// Event bus broker roles.
const (
	BusRoleBroker     = "broker"
	BusRoleKVListener = "kv_listener"
)

// EventBus is the in-cluster event broker listener.
type EventBus struct {
	Enabled               bool          `yaml:"enabled" json:"enabled"`
	Listen                string        `yaml:"listen" json:"listen"`
	TLS                   EventBusTLS   `yaml:"tls" json:"tls"`
	Brokers               []BrokerEntry `yaml:"brokers" json:"brokers"`
	MaxSessions           int           `yaml:"max_sessions" json:"max_sessions"`
	MaxStreamsPerSession  int           `yaml:"max_streams_per_session" json:"max_streams_per_session"`
	MaxSessionBufferBytes int64         `yaml:"max_session_buffer_bytes" json:"max_session_buffer_bytes"`
	HeartbeatInterval     Duration      `yaml:"heartbeat_interval" json:"heartbeat_interval"`
	IdleTimeout           Duration      `yaml:"idle_timeout" json:"idle_timeout"`
}

// EventBusTLS holds the listener's certificate and optional client CA.
type EventBusTLS struct {
	Cert     string `yaml:"cert" json:"cert"`
	Key      string `yaml:"key" json:"key" secret:"true"`
	ClientCA string `yaml:"client_ca" json:"client_ca"`
}

// BrokerEntry is one credential allowed to open sessions.
type BrokerEntry struct {
	ID         string   `yaml:"id" json:"id"`
	Role       string   `yaml:"role" json:"role"`
	TokenHash  string   `yaml:"token_hash" json:"token_hash"`
	Namespaces []string `yaml:"namespaces" json:"namespaces"`
	Backends   []string `yaml:"backends" json:"backends"`
}

func (b *BrokerEntry) setDefaults() { b.Role = BusRoleBroker }

// Event bus defaults and bounds.
const (
	DefaultBusListen                = "0.0.0.0:7443"
	DefaultBusMaxSessions           = 64
	DefaultBusMaxStreamsPerSession  = 1024
	DefaultBusMaxSessionBufferBytes = 64 << 20
	DefaultBusHeartbeatInterval     = 10 * time.Second
	DefaultBusIdleTimeout           = 30 * time.Second
	// MinStreamBudgetBytes is the per-stream share below which a session
	// buffer budget is rejected: budget >= max_streams_per_session * 64 KiB.
	MinStreamBudgetBytes = 64 << 10
	// MaxStreamsPerSession bounds max_streams_per_session: the event
	// bus's clients refuse a welcome that allows more.
	MaxStreamsPerSession = 1 << 16
	// MaxBusInterval bounds heartbeat_interval and idle_timeout, which the
	// welcome carries in milliseconds to clients that refuse more.
	MaxBusInterval = 24 * time.Hour
)

// DefaultFor is Default with the defaults Dynamo itself takes from its
// environment, read through env (none when env is nil): the file store's
// root is DYN_FILE_KV when that is set, as it is for Dynamo's workers and
// frontend (their store is under $TMPDIR/dynamo_store_kv otherwise, which
// is Default's root). A root the file writes still wins.
func DefaultFor(env LookupEnv) *Config {
	c := Default()
	if env != nil {
		if root, ok := env("DYN_FILE_KV"); ok && root != "" {
			c.Dynamo.Discovery.File.Root = root
		}
	}
	return c
}

// Default returns the configuration with every default filled in: what a
// configuration that sets nothing means.
func Default() *Config {
	return &Config{
		Server: Server{BindAddress: "127.0.0.1:8080", ReadHeaderTimeout: Duration(DefaultReadHeaderTimeout),
			ReadTimeout: Duration(DefaultReadTimeout), IdleTimeout: Duration(DefaultIdleTimeout), WriteTimeout: Duration(DefaultWriteTimeout),
			MaxHeaderBytes: DefaultMaxHeaderBytes, MaxBodyBytes: DefaultMaxBodyBytes,
			MaxConnections: DefaultMaxConnections, MaxInFlight: DefaultMaxInFlight},
		Dynamo: Dynamo{
			Discovery: Discovery{
				Source: SourceEtcd,
				Etcd: Etcd{
					Namespace:             DefaultNamespace,
					WatchReconnectBackoff: defaultBackoff(),
				},
				File: FileStore{
					Root:      filepath.Join(os.TempDir(), "dynamo_store_kv"),
					Namespace: DefaultNamespace,
				},
				Kubernetes: Kubernetes{WatchReconnectBackoff: defaultBackoff()},
			},
			Load: LoadSignals{
				MaxStaleness: Duration(DefaultMaxStaleness),
				Transport:    TransportDirect,
			},
			Shim: Shim{LegacyPinHeaders: true},
			KV: KV{
				ArtifactCacheDir:   defaultArtifactCacheDir(),
				AllowHTTPArtifacts: true,
				OverlapScoreCredit: 1.0,
				PrefillLoadScale:   1.0,
			},
			EventBus: EventBus{
				Listen:                DefaultBusListen,
				MaxSessions:           DefaultBusMaxSessions,
				MaxStreamsPerSession:  DefaultBusMaxStreamsPerSession,
				MaxSessionBufferBytes: DefaultBusMaxSessionBufferBytes,
				HeartbeatInterval:     Duration(DefaultBusHeartbeatInterval),
				IdleTimeout:           Duration(DefaultBusIdleTimeout),
			},
		},
	}
}

// defaultArtifactCacheDir is <user cache dir>/continuum/artifacts, or a
// directory under the system temp dir where the user has none.
func defaultArtifactCacheDir() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "continuum", "artifacts")
	}
	return filepath.Join(os.TempDir(), "continuum-artifacts")
}

func defaultBackoff() Backoff {
	return Backoff{Initial: Duration(DefaultBackoffInitial), Max: Duration(DefaultBackoffMax)}
}

// Namespaces returns the Dynamo namespaces the configured source watches, in
// configuration order.
func (d *Discovery) Namespaces() []string {
	switch d.Source {
	case SourceKubernetes, SourceKubernetesPods:
		if len(d.Kubernetes.DynamoNamespaces) > 0 {
			return d.Kubernetes.DynamoNamespaces
		}
		if d.Kubernetes.DynamoNamespace != "" {
			return []string{d.Kubernetes.DynamoNamespace}
		}
		return nil
	case SourceFile:
		return pick(d.File.Namespaces, d.File.Namespace)
	default:
		return pick(d.Etcd.Namespaces, d.Etcd.Namespace)
	}
}

func pick(list []string, one string) []string {
	if len(list) > 0 {
		return list
	}
	if one == "" {
		return nil
	}
	return []string{one}
}

// Duration is a time.Duration written as a Go duration string ("500ms").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats the duration the way it is written in configuration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText renders the duration for YAML and JSON output.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
