package kube

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// DWM is what the metadata source keeps of a DynamoWorkerMetadata
// resource once classified: the etcd-shaped records it supplies, or why it
// supplies none.
type DWM struct {
	Name string
	UID  string
	// PodUID is the uid of the Pod that owns the resource (its
	// ownerReference of kind Pod), "" when the owner reference carries none.
	PodUID string
	// Namespace is the first, in sort order, of the Dynamo namespaces its
	// records belong to; "" when it supplies none.
	Namespace string
	// Records maps full etcd keys to values, for the configured Dynamo
	// namespaces only.
	Records map[string][]byte
	// Size is the bytes of Records (keys and values).
	Size int
	// Refusal is set when the whole resource is refused (container mode:
	// refused; an instance id that is not its pod's hash: mismatch).
	Refusal *wire.Refusal
	// Malformed is set when spec or spec.data is not an object; the
	// resource's last valid records are kept.
	Malformed string
}

// dataMaps are the spec.data maps and the bucket each one feeds.
var dataMaps = []struct {
	name  string
	space wire.Keyspace
}{
	{"endpoints", wire.KeyspaceInstances},
	{"model_cards", wire.KeyspaceModelCards},
	{"event_channels", wire.KeyspaceEventChannels},
	{"event_sources", wire.KeyspaceEventChannels},
}

type dwmJSON struct {
	Metadata struct {
		Name            string `json:"name"`
		UID             string `json:"uid"`
		OwnerReferences []struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"ownerReferences"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

// ClassifyDWM turns one DynamoWorkerMetadata resource (its JSON) into the
// records it supplies for the Dynamo namespaces given. It is pure.
//
// Identity comes from each record's value, but for its namespace: a map
// key that parses as a relative etcd key names it, as the key prefix does
// in etcd (a worker's namespace is where it is registered, not what its
// payload says), and keeps a LoRA card's suffix when it names the same
// worker. A key of another form leaves the namespace to the value. Every
// endpoint and card must carry the instance id that Dynamo derives from
// the pod's name, in key and value, or the whole resource is refused as a
// mismatch; event channels carry publisher ids and are exempt. A resource of the container discovery mode (named otherwise
// than its owning pod) is refused when it has records of the namespaces
// given, and ignored like any other resource when it has none. The owning
// Pod's uid is kept for the readiness join.
func ClassifyDWM(raw []byte, namespaces []string) DWM {
	var r dwmJSON
	if err := json.Unmarshal(raw, &r); err != nil {
		return DWM{Malformed: fmt.Sprintf("resource is not JSON: %v", err)}
	}
	d := DWM{Name: r.Metadata.Name, UID: r.Metadata.UID}
	// containerOf is the owning pod of a resource named otherwise: the
	// container discovery mode, one resource per container. Whether it is
	// refused waits for its records: only a resource with records of a
	// watched Dynamo namespace is the source's business.
	var containerOf string
	for _, o := range r.Metadata.OwnerReferences {
		if o.Kind != "Pod" {
			continue
		}
		if o.Name != d.Name {
			containerOf = o.Name
			break
		}
		if d.PodUID == "" {
			d.PodUID = o.UID
		}
	}
	var spec map[string]json.RawMessage
	if err := json.Unmarshal(r.Spec, &spec); err != nil || spec == nil {
		d.Malformed = fmt.Sprintf("DynamoWorkerMetadata %s: spec is not an object", d.Name)
		return d
	}
	var data map[string]json.RawMessage
	if err := json.Unmarshal(spec["data"], &data); err != nil || data == nil {
		d.Malformed = fmt.Sprintf("DynamoWorkerMetadata %s: spec.data is not an object", d.Name)
		return d
	}
	want := HashPodName(d.Name)
	d.Records = map[string][]byte{}
	for _, m := range dataMaps {
		var entries map[string]json.RawMessage
		if v := data[m.name]; len(v) > 0 {
			if err := json.Unmarshal(v, &entries); err != nil {
				d.Malformed = fmt.Sprintf("DynamoWorkerMetadata %s: spec.data.%s is not an object", d.Name, m.name)
				d.Records, d.Size, d.Namespace = nil, 0, ""
				return d
			}
		}
		for _, mapKey := range sortedKeys(entries) {
			value := entries[mapKey]
			if bytes.Equal(bytes.TrimSpace(value), []byte("null")) {
				continue
			}
			key, ns, id, ok := recordKey(m.space, mapKey, value)
			if !ok {
				// Unparseable: handed on under its map key so the reducer
				// reports it as malformed, if it names a watched namespace.
				ns, _, _ = strings.Cut(mapKey, "/")
				key = prefixOf(m.space) + mapKey
			}
			if !slices.Contains(namespaces, ns) {
				continue
			}
			if containerOf == "" && ok && m.space != wire.KeyspaceEventChannels && id != want {
				what := fmt.Sprintf("carries instance id %x", id)
				if id&mismatchMark != 0 {
					what = "names different instance ids in its key and its value"
					if k, err := wire.ParseRelativeKey(m.space, mapKey); err == nil {
						// The reported id is the two ids xored (and
						// marked): the key's gives back the value's.
						what = fmt.Sprintf("names instance id %x in its key and %x in its value", k.InstanceID, k.InstanceID^id&^mismatchMark)
					}
				}
				d.Refusal = &wire.Refusal{Kind: "mismatch", Namespace: ns, Reason: fmt.Sprintf(
					"DynamoWorkerMetadata %s: %s entry %q %s, but pod %s hashes to %x",
					d.Name, m.name, mapKey, what, d.Name, want)}
				d.Records, d.Size, d.Namespace = nil, 0, ""
				return d
			}
			if _, had := d.Records[key]; had && m.name == "event_sources" {
				// A worker that writes one publisher both as a channel and
				// as a source keeps the channel record, the one that names
				// the transport this router subscribes through.
				continue
			}
			if m.space == wire.KeyspaceModelCards && len(value) > fleet.MaxRetainedCardBytes {
				value = shrinkCard(value)
			}
			d.Records[key] = value
			d.Size += len(key) + len(value)
			if d.Namespace == "" || ns < d.Namespace {
				d.Namespace = ns
			}
		}
	}
	if containerOf != "" && len(d.Records) > 0 {
		d.Refusal = &wire.Refusal{Kind: "refused", Namespace: d.Namespace, Reason: fmt.Sprintf(
			"DynamoWorkerMetadata %s belongs to pod %s (container discovery mode); only pod mode is supported", d.Name, containerOf)}
		d.Records, d.Size, d.Namespace = nil, 0, ""
	}
	return d
}

func prefixOf(space wire.Keyspace) string {
	switch space {
	case wire.KeyspaceInstances:
		return wire.PrefixInstances
	case wire.KeyspaceModelCards:
		return wire.PrefixModelCards
	}
	return wire.PrefixEventChannels
}

// mismatchMark is set above the 53 bits of a pod hash in the id reported
// for a record whose key and value name different instance ids.
const mismatchMark = 1 << 63

// keyedID is the id a record under a relative key names: the key's, or
// one that can match no pod when the value names another id (the value's
// id is the one the reducer goes by).
func keyedID(keyID uint64, valueHasID bool, valueID uint64) uint64 {
	if !valueHasID || valueID == keyID {
		return keyID
	}
	return keyID ^ valueID ^ mismatchMark
}

// recordKey derives the full etcd key of one record from its value and,
// when the map key is a relative etcd key, its namespace (and a LoRA
// card's suffix) from the key; with the namespace and the instance (or
// publisher) id it names. When the key and the value disagree on the id,
// the id reported can match no pod.
//
// A record's namespace is its map key's (a relative key's namespace, or the
// first path segment of an older "<ns>/<component>/<endpoint>" one),
// never the payload's: only a key that is no path (a name of another
// format) leaves it to the value.
func recordKey(space wire.Keyspace, mapKey string, value []byte) (key, ns string, id uint64, ok bool) {
	k, kerr := wire.ParseRelativeKey(space, mapKey)
	pathNS, _, isPath := strings.Cut(mapKey, "/")
	isPath = isPath && pathNS != ""
	if kerr == nil {
		pathNS, isPath = k.Namespace, true // a scoped channel key's first segment is its scope's kind
	}
	switch space {
	case wire.KeyspaceInstances:
		e, err := wire.ParseEndpoint(value)
		if err != nil || !e.InstanceID.Set || e.Namespace == "" || e.Component == "" || e.Endpoint == "" {
			if kerr == nil {
				// The value's id, when it has one, is the worker's id in
				// the reducer: it must be the key's too.
				return wire.PrefixInstances + mapKey, k.Namespace, keyedID(k.InstanceID, err == nil && e.InstanceID.Set, e.InstanceID.Value), true
			}
			if err == nil && e.InstanceID.Set && isPath {
				// An older <ns>/<component>/<endpoint> key with a value
				// short of a field: handed on under its map key (the
				// reducer reads the rest from it), its id checked like
				// any other's.
				return wire.PrefixInstances + mapKey, pathNS, e.InstanceID.Value, true
			}
			return "", "", 0, false
		}
		id, ns = e.InstanceID.Value, e.Namespace
		if isPath {
			ns = pathNS
		}
		if kerr == nil {
			if k.InstanceID != id {
				id = k.InstanceID ^ id ^ mismatchMark // key and value disagree: never a pod's hash
			}
		}
		return fmt.Sprintf("%s%s/%s/%s/%s", wire.PrefixInstances, ns, e.Component, e.Endpoint, wire.FormatID(e.InstanceID.Value)), ns, id, true
	case wire.KeyspaceModelCards:
		m, err := wire.ParseModel(value)
		if err != nil || !m.InstanceID.Set || m.Namespace == "" || m.Component == "" || m.Endpoint == "" {
			if kerr == nil {
				return wire.PrefixModelCards + mapKey, k.Namespace, keyedID(k.InstanceID, err == nil && m.InstanceID.Set, m.InstanceID.Value), true
			}
			if err == nil && m.InstanceID.Set && isPath {
				return wire.PrefixModelCards + mapKey, pathNS, m.InstanceID.Value, true // as an endpoint's, above
			}
			return "", "", 0, false
		}
		id, ns = m.InstanceID.Value, m.Namespace
		if isPath {
			ns = pathNS
		}
		suffix := m.ModelSuffix
		if kerr == nil {
			// The key's id is checked whatever component or endpoint it
			// names, as an endpoint's is: a path id that is not the pod's
			// hash is a mismatch even where the path is not used.
			if k.InstanceID != id {
				id = k.InstanceID ^ id ^ mismatchMark
			} else if k.Component == m.Component && k.Endpoint == m.Endpoint {
				suffix = k.ModelSuffix
			}
		}
		key = fmt.Sprintf("%s%s/%s/%s/%s", wire.PrefixModelCards, ns, m.Component, m.Endpoint, wire.FormatID(m.InstanceID.Value))
		if suffix != "" {
			key += "/" + suffix
		}
		return key, ns, id, true
	default:
		ch, err := wire.ParseEventChannel(value)
		if err != nil || !ch.PublisherID.Set || ch.Namespace == "" || ch.Topic == "" {
			if kerr == nil {
				return wire.PrefixEventChannels + mapKey, k.Namespace, k.InstanceID, true
			}
			return "", "", 0, false
		}
		if isPath {
			ch.Namespace = pathNS
		}
		return wire.PrefixEventChannels + channelPath(ch), ch.Namespace, ch.PublisherID.Value, true
	}
}

// channelPath is an event channel's relative key: the scoped form, or the
// Dynamo 1.2 legacy form the record came in.
func channelPath(ch *wire.EventChannel) string {
	hex := wire.FormatID(ch.PublisherID.Value)
	if ch.Legacy {
		return ch.Namespace + "/" + ch.Component + "/" + ch.Topic + "/" + hex
	}
	p := "namespace/" + wire.EncodeSegment(ch.Namespace)
	if ch.Scope == wire.ScopeComponent || ch.Scope == wire.ScopeEndpoint {
		p += "/component/" + wire.EncodeSegment(ch.Component)
	}
	if ch.Scope == wire.ScopeEndpoint {
		p += "/endpoint/" + wire.EncodeSegment(ch.Endpoint)
	}
	return p + "/topic/" + wire.EncodeSegment(ch.Topic) + "/" + hex
}

// shrinkCard keeps a large Model record's envelope and only the core typed
// fields of its card, so the source does not hold megabytes per worker; the
// record says so (wire.CardDroppedField), and the reducer reports the card
// dropped as it does when etcd hands it one whole.
func shrinkCard(value []byte) []byte {
	var env map[string]json.RawMessage
	if json.Unmarshal(value, &env) != nil {
		return value
	}
	// The bound is the card's, as the reducer applies it to a card from
	// any source: a record over it whose card is under it is kept whole.
	if len(env["card_json"]) <= fleet.MaxRetainedCardBytes {
		return value
	}
	var card map[string]json.RawMessage
	if json.Unmarshal(env["card_json"], &card) != nil || card == nil {
		return value
	}
	env[wire.CardDroppedField] = json.RawMessage(strconv.Itoa(len(env["card_json"])))
	core := map[string]json.RawMessage{}
	for _, f := range wire.CoreCardFields {
		if v, ok := card[f]; ok {
			core[f] = v
		}
	}
	b, err := json.Marshal(core)
	if err != nil {
		return value
	}
	env["card_json"] = b
	out, err := json.Marshal(env)
	if err != nil {
		return value
	}
	return out
}
