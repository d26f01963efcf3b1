package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

func utf8Valid(s string) bool { return utf8.ValidString(s) }

// Record types, the "type" tag of Dynamo's DiscoveryInstance JSON.
const (
	TypeEndpoint     = "Endpoint"
	TypeModel        = "Model"
	TypeEventChannel = "EventChannel"
	// TypeEventSource is the newer name of an event channel record (kept
	// under event_sources in Kubernetes metadata), with its publisher id
	// in publisher_id.
	TypeEventSource = "EventSource"
)

// ID is an instance or publisher id: a JSON number (decimal), or a string of
// hex digits as keys write it. Both normalise to the same value.
type ID struct {
	Value uint64
	Set   bool
}

// UnmarshalJSON accepts a non-negative integer or a hex string; null leaves
// the id unset.
func (id *ID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*id = ID{}
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := parseHexID(strings.TrimPrefix(strings.ToLower(s), "0x"))
		if err != nil {
			return err
		}
		*id = ID{v, true}
		return nil
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("id %s is not a non-negative integer", clipID(string(b)))
	}
	*id = ID{v, true}
	return nil
}

// Transport is an Endpoint record's request-plane address, externally tagged
// as {"tcp": ...}, {"http": ...} or {"nats_tcp": ...}. It is internal: it is
// never shown to clients or operators.
type Transport struct {
	Kind    string
	Address string
}

// UnmarshalJSON reads the one-entry tagged map; a bare string is kept too.
// Of a map with several entries (which Dynamo never writes) the first key
// in byte order counts, so that the same record always reads the same.
func (t *Transport) UnmarshalJSON(b []byte) error {
	if kind, addr, ok := plainPair(b); ok {
		*t = Transport{Kind: kind, Address: addr}
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		var s string
		if json.Unmarshal(b, &s) == nil {
			*t = Transport{Address: s}
			return nil
		}
		return err
	}
	if len(m) == 0 {
		return nil
	}
	k := slices.Min(slices.Collect(maps.Keys(m)))
	var addr string
	_ = json.Unmarshal(m[k], &addr)
	*t = Transport{Kind: k, Address: addr}
	return nil
}

// plainPair reads b when it is an object of one string-valued entry whose
// key and value hold no escapes and only valid UTF-8 (a transport as
// workers write it), so that the common case costs no map. ok is false for
// anything else, including what is not valid JSON.
func plainPair(b []byte) (key, value string, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return "", "", false
	}
	k, i, ok := plainString(b, skipSpace(b, i+1))
	if !ok {
		return "", "", false
	}
	if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
		return "", "", false
	}
	v, i, ok := plainString(b, skipSpace(b, i+1))
	if !ok {
		return "", "", false
	}
	if i = skipSpace(b, i); i >= len(b) || b[i] != '}' || skipSpace(b, i+1) != len(b) {
		return "", "", false
	}
	return string(k), string(v), true
}

// plainString reads the JSON string at b[i] when it has no escapes, no
// control characters and only valid UTF-8, and returns its contents and
// the index after it.
func plainString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	end, escaped := stringEnd(b, i)
	if escaped || end-1 <= i || b[end-1] != '"' {
		return nil, 0, false
	}
	s = b[i+1 : end-1]
	for _, c := range s {
		if c < 0x20 {
			return nil, 0, false
		}
	}
	if !utf8.Valid(s) {
		return nil, 0, false
	}
	return s, end, true
}

// Endpoint is a worker's request endpoint under v1/instances/.
type Endpoint struct {
	Type       string    `json:"type"`
	Namespace  string    `json:"namespace"`
	Component  string    `json:"component"`
	Endpoint   string    `json:"endpoint"`
	InstanceID ID        `json:"instance_id"`
	Transport  Transport `json:"transport"`
	// ComponentSet and EndpointSet say the value writes component and
	// endpoint as strings, empty ones included; one it leaves out (or
	// writes as another type) may be taken from the record's key.
	ComponentSet bool `json:"-"`
	EndpointSet  bool `json:"-"`
}

// ErrRecord is wrapped by every record parse error.
var ErrRecord = errors.New("malformed record")

// recordHead reads the fields every record shares.
type recordHead struct {
	Type string `json:"type"`
}

// RecordType returns the "type" tag of a record, or "" when absent.
func RecordType(value []byte) (string, error) {
	var h recordHead
	if err := json.Unmarshal(value, &h); err != nil {
		return "", fmt.Errorf("%w: %w", ErrRecord, err)
	}
	return h.Type, nil
}

// endpointFields holds an Endpoint record's fields raw, so that one of the
// wrong type is ignored rather than failing the record (N-2 rules).
type endpointFields struct {
	Type       json.RawMessage `json:"type"`
	Namespace  json.RawMessage `json:"namespace"`
	Component  json.RawMessage `json:"component"`
	Endpoint   json.RawMessage `json:"endpoint"`
	InstanceID json.RawMessage `json:"instance_id"`
	Transport  json.RawMessage `json:"transport"`
}

// ParseEndpoint parses an Endpoint record. Unknown fields are ignored,
// every field is optional, and a field of the wrong type is left empty;
// only a value that is not a JSON object, or an instance_id that is not an
// id, fails.
func ParseEndpoint(value []byte) (*Endpoint, error) {
	var f endpointFields
	if err := unmarshalFields(value, &f); err != nil {
		return nil, fmt.Errorf("%w: endpoint: %w", ErrRecord, err)
	}
	e := &Endpoint{}
	lenientString(f.Type, &e.Type)
	lenientString(f.Namespace, &e.Namespace)
	lenientString(f.Component, &e.Component)
	lenientString(f.Endpoint, &e.Endpoint)
	e.ComponentSet, e.EndpointSet = isString(f.Component), isString(f.Endpoint)
	// The raw fields are JSON the decode above has checked, so their
	// parsers are called directly rather than through json.Unmarshal,
	// which would check each again.
	if !isNull(f.InstanceID) {
		if err := e.InstanceID.UnmarshalJSON(f.InstanceID); err != nil {
			return nil, fmt.Errorf("%w: endpoint instance_id: %w", ErrRecord, err)
		}
	}
	if !isNull(f.Transport) {
		_ = e.Transport.UnmarshalJSON(f.Transport)
	}
	return e, nil
}

// lenientString sets dst from a raw JSON string; null, absent or a value of
// another type leaves it empty. A string without escapes whose bytes are
// valid UTF-8 reads as its bytes (what json.Unmarshal would make of it,
// without its second pass over JSON already checked); others go through
// json.Unmarshal, which decodes escapes and replaces invalid UTF-8.
func lenientString(raw json.RawMessage, dst *string) {
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' {
		if in := raw[1 : n-1]; bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
			*dst = string(in)
			return
		}
	}
	if !isNull(raw) {
		_ = json.Unmarshal(raw, dst)
	}
}

// ModelRecord is a model deployment card under v1/mdc/.
type ModelRecord struct {
	Type        string
	Namespace   string
	Component   string
	Endpoint    string
	InstanceID  ID
	ModelSuffix string
	// ComponentSet and EndpointSet say the value writes component and
	// endpoint as strings, empty ones included (a legacy writer's card
	// writes both empty); one it leaves out (or writes as another type)
	// may be taken from the record's key.
	ComponentSet, EndpointSet bool
	// Card holds the typed fields that parsed; CardErrors names those that
	// did not (the worker is still built).
	Card       Card
	CardErrors []string
	// CardJSON is the whole card as it came, kept opaque.
	CardJSON json.RawMessage
	// CardDroppedBytes is the size of the card a source shrank
	// (CardDroppedField), 0 when none did; CardJSON then holds its core
	// fields only.
	CardDroppedBytes uint64
}

// Card is the subset of Dynamo's ModelDeploymentCard the router reads.
type Card struct {
	DisplayName string
	Name        string
	// SourcePath is the Hugging Face repository the model came from when
	// display_name was changed (--served-model-name); empty when absent.
	SourcePath string
	// WorkerType is the card's worker_type as ParseWorkerType reads it, and
	// RawWorkerType the string as written. WorkerTypeAbsent is true when
	// the card (a JSON object) has no worker_type, a null or a blank one,
	// as cards written before worker types existed; WorkerTypeProblem says
	// why a worker_type that is present claims no type.
	WorkerType        WorkerType
	RawWorkerType     string
	WorkerTypeAbsent  bool
	WorkerTypeProblem string
	// ModelType is the card's model_type flags (zero when absent).
	ModelType        ModelType
	KVCacheBlockSize *uint32
	// MigrationLimit is how many times a request that fails because its
	// worker is gone may be tried again on another worker (0 when absent:
	// never).
	MigrationLimit uint32
	Runtime        RuntimeConfig
	// LoRA is true for adapter cards (a non-null "lora" field).
	LoRA bool
	// Versions holds release-version strings the card carries, by key.
	Versions map[string]string
	// Artifact slots, raw: tokenizer, prompt_formatter, chat_template_file.
	Tokenizer, PromptFormatter, ChatTemplateFile json.RawMessage
}

// HFSource is the Hugging Face repository the card's files may be fetched
// from when its worker's paths are not on the reader's host, as Dynamo's
// frontend resolves them: source_path, else display_name.
func (c *Card) HFSource() string {
	if c.SourcePath != "" {
		return c.SourcePath
	}
	return c.DisplayName
}

// Model returns the served model name: display_name, else name.
func (c *Card) Model() string {
	if c.DisplayName != "" {
		return c.DisplayName
	}
	return c.Name
}

// RuntimeConfig is the card's runtime_config; nil pointers were absent.
type RuntimeConfig struct {
	TotalKVBlocks         *uint64
	MaxNumBatchedTokens   *uint64
	MaxNumSeqs            *uint64
	ContextLength         *uint32
	DataParallelStartRank uint32
	DataParallelSize      uint32
	// DataParallelDeclared is true when the card sets data_parallel_size.
	DataParallelDeclared bool
	// EnableEagle is runtime_config.enable_eagle: the worker runs Eagle
	// speculative decoding, and its blocks' tokens_hash covers a window of
	// kv_cache_block_size+1 tokens (EagleBlockHashes).
	EnableEagle bool
	// DisaggregatedEndpoint is a JSON string in older cards and an object
	// {bootstrap_host, bootstrap_port} in newer ones; kept as compact JSON.
	DisaggregatedEndpoint json.RawMessage
	// KeepToolsWhenToolChoiceNone is exclude_tools_when_tool_choice_none
	// set to false: the frontend then renders a request's tools even when
	// its tool_choice is "none" (by default it leaves them out).
	KeepToolsWhenToolChoiceNone bool
}

// CoreCardFields are the card fields the router reads into Card. A source
// that shrinks an oversized card to these keeps every typed field, as the
// reducer does when it drops the opaque JSON of a card put whole: the two
// give one Card. They are the names of cardFields, so a field read is
// never left out.
var CoreCardFields = jsonNames(reflect.TypeFor[cardFields]())

// jsonNames returns the JSON names of a struct's fields, in order.
func jsonNames(t reflect.Type) []string {
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return names
}

// modelFields holds a Model record's fields raw, so that one of the wrong
// type is ignored rather than failing the record and costing the worker
// its card (N-2 rules: every field optional, a partial failure keeps the
// rest).
type modelFields struct {
	Type        json.RawMessage `json:"type"`
	Namespace   json.RawMessage `json:"namespace"`
	Component   json.RawMessage `json:"component"`
	Endpoint    json.RawMessage `json:"endpoint"`
	InstanceID  json.RawMessage `json:"instance_id"`
	ModelSuffix json.RawMessage `json:"model_suffix"`
	CardJSON    json.RawMessage `json:"card_json"`
	CardDropped json.RawMessage `json:"card_json_dropped_bytes"`
}

// CardDroppedField is the envelope field of a Model record whose card a
// source shrank to CoreCardFields before handing it on (a source that
// cannot hold an oversized card whole): the size of the card it came
// with. The reducer then treats the card as one put whole over the
// retained bound, so that both give one view: the typed fields kept, the
// opaque JSON dropped and reported. Dynamo never writes the field; a
// record that carries it with a size within the bound (no source shrinks
// such a card) has it ignored as any unknown field is.
const CardDroppedField = "card_json_dropped_bytes"

// ParseModel parses a Model record. Unknown fields are ignored, every field
// is optional, and an envelope field of the wrong type is left empty; only
// a value that is not a JSON object, or an instance_id that is not an id,
// fails (the id names the worker the card belongs to: a wrong one must not
// be guessed). Inside the card, each typed field that fails is recorded in
// CardErrors and left at its zero value, and the rest still parse.
func ParseModel(value []byte) (*ModelRecord, error) {
	var f modelFields
	if err := unmarshalFields(value, &f); err != nil {
		return nil, fmt.Errorf("%w: model: %w", ErrRecord, err)
	}
	m := &ModelRecord{}
	m.Card.Runtime.DataParallelSize = 1
	lenientString(f.Type, &m.Type)
	lenientString(f.Namespace, &m.Namespace)
	lenientString(f.Component, &m.Component)
	lenientString(f.Endpoint, &m.Endpoint)
	m.ComponentSet, m.EndpointSet = isString(f.Component), isString(f.Endpoint)
	lenientString(f.ModelSuffix, &m.ModelSuffix)
	if !isNull(f.InstanceID) {
		if err := m.InstanceID.UnmarshalJSON(f.InstanceID); err != nil {
			return nil, fmt.Errorf("%w: model instance_id: %w", ErrRecord, err)
		}
	}
	if !isNull(f.CardJSON) {
		m.CardJSON = f.CardJSON
		m.Card, m.CardErrors = parseCard(f.CardJSON)
		if json.Unmarshal(f.CardDropped, &m.CardDroppedBytes) != nil {
			m.CardDroppedBytes = 0
		}
	}
	return m, nil
}

// cardFields holds the card fields the router reads, each kept raw so that
// one that fails to decode does not affect the others.
type cardFields struct {
	DisplayName      json.RawMessage `json:"display_name"`
	Name             json.RawMessage `json:"name"`
	SourcePath       json.RawMessage `json:"source_path"`
	WorkerType       json.RawMessage `json:"worker_type"`
	ModelType        json.RawMessage `json:"model_type"`
	KVCacheBlockSize json.RawMessage `json:"kv_cache_block_size"`
	MigrationLimit   json.RawMessage `json:"migration_limit"`
	Lora             json.RawMessage `json:"lora"`
	RuntimeConfig    json.RawMessage `json:"runtime_config"`
	DynamoVersion    json.RawMessage `json:"dynamo_version"`
	RuntimeVersion   json.RawMessage `json:"runtime_version"`
	Version          json.RawMessage `json:"version"`
	Release          json.RawMessage `json:"release"`
	Tokenizer        json.RawMessage `json:"tokenizer"`
	PromptFormatter  json.RawMessage `json:"prompt_formatter"`
	ChatTemplateFile json.RawMessage `json:"chat_template_file"`
}

// isString reports whether raw, checked JSON, is a string.
func isString(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '"'
}

func isNull(v json.RawMessage) bool {
	return len(v) == 0 || bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

func parseCard(raw json.RawMessage) (Card, []string) {
	var f cardFields
	if err := unmarshalFields(raw, &f); err != nil {
		return Card{Runtime: RuntimeConfig{DataParallelSize: 1}}, []string{"card_json is not an object"}
	}
	var c Card
	var errs []string
	field := func(name string, v json.RawMessage, dst any) bool {
		if isNull(v) {
			return false
		}
		if err := json.Unmarshal(v, dst); err != nil {
			errs = append(errs, name)
			return false
		}
		return true
	}
	field("display_name", f.DisplayName, &c.DisplayName)
	field("name", f.Name, &c.Name)
	field("source_path", f.SourcePath, &c.SourcePath)
	switch {
	case isNull(f.WorkerType):
		c.WorkerTypeAbsent = true
	case field("worker_type", f.WorkerType, &c.RawWorkerType):
		c.WorkerType, c.WorkerTypeAbsent, c.WorkerTypeProblem = ParseWorkerType(c.RawWorkerType)
	default:
		c.WorkerTypeProblem = "not a string"
	}
	if !isNull(f.ModelType) {
		var ok bool
		if c.ModelType, ok = ParseModelType(f.ModelType); !ok {
			errs = append(errs, "model_type")
		}
	}
	var bs uint32
	if field("kv_cache_block_size", f.KVCacheBlockSize, &bs) {
		c.KVCacheBlockSize = &bs
	}
	field("migration_limit", f.MigrationLimit, &c.MigrationLimit)
	c.LoRA = !isNull(f.Lora)
	if !isNull(f.RuntimeConfig) {
		c.Runtime, errs = parseRuntime(f.RuntimeConfig, errs)
	} else {
		c.Runtime.DataParallelSize = 1
	}
	for _, v := range []struct {
		key string
		raw json.RawMessage
	}{{"dynamo_version", f.DynamoVersion}, {"runtime_version", f.RuntimeVersion}, {"version", f.Version}, {"release", f.Release}} {
		var s string
		if !isNull(v.raw) && json.Unmarshal(v.raw, &s) == nil && s != "" {
			if c.Versions == nil {
				c.Versions = map[string]string{}
			}
			c.Versions[v.key] = s
		}
	}
	slot := func(name string, raw json.RawMessage) json.RawMessage {
		if isNull(raw) {
			return nil
		}
		if len(raw) > MaxArtifactSlotBytes {
			errs = append(errs, name)
			return nil
		}
		return raw
	}
	c.Tokenizer = slot("tokenizer", f.Tokenizer)
	c.PromptFormatter = slot("prompt_formatter", f.PromptFormatter)
	c.ChatTemplateFile = slot("chat_template_file", f.ChatTemplateFile)
	return c, errs
}

func parseRuntime(raw json.RawMessage, errs []string) (RuntimeConfig, []string) {
	rc := RuntimeConfig{DataParallelSize: 1}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		if !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			errs = append(errs, "runtime_config")
		}
		return rc, errs
	}
	u64 := func(name string) *uint64 {
		v, ok := fields[name]
		if !ok || bytes.Equal(v, []byte("null")) {
			return nil
		}
		var n uint64
		if err := json.Unmarshal(v, &n); err != nil {
			errs = append(errs, "runtime_config."+name)
			return nil
		}
		return &n
	}
	u32 := func(name string) *uint32 {
		v, ok := fields[name]
		if !ok || bytes.Equal(v, []byte("null")) {
			return nil
		}
		var n uint32
		if err := json.Unmarshal(v, &n); err != nil {
			errs = append(errs, "runtime_config."+name)
			return nil
		}
		return &n
	}
	rc.TotalKVBlocks = u64("total_kv_blocks")
	rc.MaxNumBatchedTokens = u64("max_num_batched_tokens")
	rc.MaxNumSeqs = u64("max_num_seqs")
	rc.ContextLength = u32("context_length")
	if p := u32("data_parallel_start_rank"); p != nil {
		rc.DataParallelStartRank = *p
	}
	if p := u32("data_parallel_size"); p != nil {
		rc.DataParallelDeclared = true
		if *p > 0 && *p <= MaxDataParallelSize && uint64(rc.DataParallelStartRank)+uint64(*p) <= 1<<32-1 {
			rc.DataParallelSize = *p
		} else {
			errs = append(errs, "runtime_config.data_parallel_size")
		}
	}
	if v, ok := fields["exclude_tools_when_tool_choice_none"]; ok && !isNull(v) {
		var exclude bool
		if err := json.Unmarshal(v, &exclude); err != nil {
			errs = append(errs, "runtime_config.exclude_tools_when_tool_choice_none")
		} else {
			rc.KeepToolsWhenToolChoiceNone = !exclude
		}
	}
	if v, ok := fields["enable_eagle"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &rc.EnableEagle); err != nil {
			errs = append(errs, "runtime_config.enable_eagle")
		}
	}
	if v, ok := fields["disaggregated_endpoint"]; ok && !isNull(v) {
		var compact bytes.Buffer
		if json.Compact(&compact, v) == nil && compact.Len() <= maxDisaggregatedEndpointBytes {
			rc.DisaggregatedEndpoint = compact.Bytes()
		}
	}
	return rc, errs
}

// MaxDataParallelSize bounds the ranks one card may declare (each rank is a
// routing candidate and a load key).
const MaxDataParallelSize = 1024

// maxDisaggregatedEndpointBytes bounds the disaggregated_endpoint kept.
const maxDisaggregatedEndpointBytes = 1 << 10

// MaxArtifactSlotBytes bounds each artifact slot (tokenizer,
// prompt_formatter, chat_template_file) kept from a card: a slot is a path,
// a checksum and a size.
const MaxArtifactSlotBytes = 4 << 10

// EventChannel is a publisher registration under v1/event_channels/.
type EventChannel struct {
	Type        string
	Namespace   string
	Component   string
	Endpoint    string
	Scope       ScopeKind
	Topic       string
	PublisherID ID
	// TransportKind is "Zmq", "ZmqBroker", "Nats" or whatever the record says.
	TransportKind string
	// ZmqEndpoint is the publisher address of a Zmq channel (tcp://host:port).
	ZmqEndpoint string
	Legacy      bool
}

// channelFields holds an event channel record's fields raw, as the other
// record fields are held, so that each is read by the rules of its shape.
type channelFields struct {
	Type        json.RawMessage `json:"type"`
	Scope       json.RawMessage `json:"scope"`
	Namespace   json.RawMessage `json:"namespace"`
	Component   json.RawMessage `json:"component"`
	Topic       json.RawMessage `json:"topic"`
	InstanceID  json.RawMessage `json:"instance_id"`
	PublisherID json.RawMessage `json:"publisher_id"`
	Transport   json.RawMessage `json:"transport"`
}

// scopeFields is a scoped record's scope: a kind and the fields of that kind.
type scopeFields struct {
	Kind      json.RawMessage `json:"kind"`
	Name      json.RawMessage `json:"name"`
	Namespace json.RawMessage `json:"namespace"`
	Component json.RawMessage `json:"component"`
	Endpoint  json.RawMessage `json:"endpoint"`
}

// scopeEndpointFields is an endpoint scope's endpoint.
type scopeEndpointFields struct {
	Namespace json.RawMessage `json:"namespace"`
	Component json.RawMessage `json:"component"`
	Name      json.RawMessage `json:"name"`
}

// channelTransportFields is a channel's transport: a kind and its config.
type channelTransportFields struct {
	Kind   json.RawMessage `json:"kind"`
	Config json.RawMessage `json:"config"`
}

// zmqConfigFields is a Zmq transport's config.
type zmqConfigFields struct {
	Endpoint json.RawMessage `json:"endpoint"`
}

// lenientObject decodes raw, a JSON object, into dst (a struct of
// json.RawMessage fields) with exact field names; null, absent or a value
// of another type leaves dst empty.
func lenientObject(raw json.RawMessage, dst any) {
	if !isNull(raw) && unmarshalFields(raw, dst) != nil {
		reflect.ValueOf(dst).Elem().SetZero()
	}
}

// ParseEventChannel parses an EventChannel (or EventSource) record, scoped
// or legacy, as Dynamo's own decoder reads it and by the rules
// ParseEndpoint follows:
//   - field names match exactly, at every level (the record, its scope and
//     the scope's endpoint, its transport and the transport's config): a key
//     in another case is an unknown field;
//   - unknown fields are ignored, and so are fields outside the record's
//     shape, whatever their type: a record with a non-null scope is scoped
//     and its top-level namespace and component are not read; one without
//     is legacy and has only those; of a scope only the fields of its kind
//     are read, and of a transport's config only a Zmq transport's
//     endpoint; the publisher id is instance_id, or publisher_id (an
//     EventSource's) only when instance_id is absent or null;
//   - every field is optional, and a field of the wrong type is left empty
//     (a scope that is not an object has no kind, which the reducer reports
//     as unsupported; a transport that is not one has no kind);
//   - only a value that is not a JSON object, or a publisher id read that
//     is not an id, fails: the id names the subscription, and a wrong one
//     must not be guessed.
func ParseEventChannel(value []byte) (*EventChannel, error) {
	var f channelFields
	if err := unmarshalFields(value, &f); err != nil {
		return nil, fmt.Errorf("%w: event channel: %w", ErrRecord, err)
	}
	ch := &EventChannel{}
	lenientString(f.Type, &ch.Type)
	lenientString(f.Topic, &ch.Topic)
	id, idName := f.InstanceID, "instance_id"
	if isNull(id) {
		id, idName = f.PublisherID, "publisher_id" // an EventSource record
	}
	if !isNull(id) {
		if err := ch.PublisherID.UnmarshalJSON(id); err != nil {
			return nil, fmt.Errorf("%w: event channel %s: %w", ErrRecord, idName, err)
		}
	}
	if isNull(f.Scope) {
		ch.Legacy = true
		lenientString(f.Namespace, &ch.Namespace)
		lenientString(f.Component, &ch.Component)
	} else {
		var s scopeFields
		lenientObject(f.Scope, &s)
		var kind string
		lenientString(s.Kind, &kind)
		ch.Scope = ScopeKind(kind)
		switch ch.Scope {
		case ScopeNamespace:
			lenientString(s.Name, &ch.Namespace)
		case ScopeComponent:
			lenientString(s.Namespace, &ch.Namespace)
			lenientString(s.Component, &ch.Component)
		case ScopeEndpoint:
			var e scopeEndpointFields
			lenientObject(s.Endpoint, &e)
			lenientString(e.Namespace, &ch.Namespace)
			lenientString(e.Component, &ch.Component)
			lenientString(e.Name, &ch.Endpoint)
		}
	}
	var t channelTransportFields
	lenientObject(f.Transport, &t)
	lenientString(t.Kind, &ch.TransportKind)
	if ch.TransportKind == "Zmq" {
		var c zmqConfigFields
		lenientObject(t.Config, &c)
		lenientString(c.Endpoint, &ch.ZmqEndpoint)
	}
	return ch, nil
}
