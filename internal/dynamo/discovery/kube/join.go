package kube

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// overCapacityKey is the one refusal that stands for every resource
// refused at the source's caps.
const overCapacityKey = wire.PrefixRefusals + "dynamoworkermetadatas-over-capacity"

// join holds one pass's DynamoWorkerMetadata resources and EndpointSlice
// readiness, and the records they supply. A resource supplies its records
// while its pod is ready in some slice (see readiness). Several suppliers
// of one event-channel key (a channel every worker of a component
// registers) are counted; the key goes when the last one does. An instance
// or card key belongs to one worker: two resources supplying it are a
// duplicate (see dupKey). Only changed keys are handed on.
type join struct {
	namespaces []string
	logger     *slog.Logger

	dwms    map[string]*dwmEntry         // by resource name
	slices  map[string][]podRef          // slice name → pods ready in it
	ready   map[string]map[string]int    // pod name → uid ("" when not given) → ready endpoints
	keys    map[string]map[string][]byte // key → supplier → value
	sent    map[string][]byte            // what the sink holds
	pending map[string]struct{}          // keys to hand on at the next flush
	size    int                          // bytes of records held
	overCap map[string]struct{}          // resources refused at the caps (at most MaxDWMs named)
	// slicesCut: a new EndpointSlice was ignored at MaxSlices (logged
	// once per join, as the list logs its cut).
	slicesCut bool

	// carried holds the previous pass's last valid records by resource
	// name, taken by a resource of the same uid read malformed in this
	// pass's list (see carry); nil once the list is read.
	carried map[string]lastValid
}

// lastValid is a resource's last valid records, kept from one pass to the
// next: a resource that turns malformed keeps supplying them, and the
// re-list that ends every watch must not drop them.
type lastValid struct {
	uid, podUID string
	records     map[string][]byte
	ns          string
	size        int
}

// podRef is the pod of a ready slice endpoint: its name, and its uid when
// the endpoint's targetRef carries one.
type podRef struct{ name, uid string }

// dwmEntry is one resource: its last valid records and what it supplies.
type dwmEntry struct {
	uid      string
	podUID   string            // the owning Pod's uid, "" when not given
	records  map[string][]byte // last valid records
	ns       string            // a Dynamo namespace of the records
	size     int
	refusal  *wire.Refusal // refused, mismatch or malformed
	supplied map[string][]byte
}

func newJoin(namespaces []string, logger *slog.Logger) *join {
	return &join{namespaces: namespaces, logger: logger, dwms: map[string]*dwmEntry{}, slices: map[string][]podRef{},
		ready: map[string]map[string]int{}, keys: map[string]map[string][]byte{}, sent: map[string][]byte{}, pending: map[string]struct{}{},
		overCap: map[string]struct{}{}}
}

func refusalKey(name string) string { return wire.PrefixRefusals + "dynamoworkermetadata/" + name }

// podUIDKey keys the mismatch of a resource whose pod uid differs from the
// one its ready slice endpoints name. It is apart from refusalKey: a
// resource kept at its last valid records while malformed can have both.
func podUIDKey(name string) string {
	return wire.PrefixRefusals + "dynamoworkermetadata-pod-uid/" + name
}

// applyDWM applies a resource's new state (or its deletion).
func (j *join) applyDWM(raw []byte, deleted bool) {
	d := ClassifyDWM(raw, j.namespaces)
	if d.Name == "" {
		j.logger.Debug("dynamo metadata discovery: a DynamoWorkerMetadata without a name was ignored")
		return
	}
	e := j.dwms[d.Name]
	if deleted {
		if _, refused := j.overCap[d.Name]; refused {
			delete(j.overCap, d.Name)
			j.setOverCap()
		}
		if e != nil {
			j.size -= e.size
			j.supply(d.Name, e, nil)
			delete(j.dwms, d.Name)
		}
		return
	}
	if e == nil {
		if len(j.dwms) >= MaxDWMs || j.size+d.Size > MaxRecordBytes {
			if _, known := j.overCap[d.Name]; !known && len(j.overCap) < MaxDWMs {
				j.overCap[d.Name] = struct{}{}
				j.setOverCap()
			}
			return
		}
		if _, refused := j.overCap[d.Name]; refused {
			// Admitted now that there is room: no longer refused.
			delete(j.overCap, d.Name)
			j.setOverCap()
		}
		e = &dwmEntry{}
		j.dwms[d.Name] = e
		j.carry(d.Name, e)
	}
	if e.uid != d.UID || e.podUID != d.PodUID {
		// Another resource, or one written by another pod, under the old
		// name: the last valid records are not its own to keep.
		j.size -= e.size
		e.records, e.size, e.ns = nil, 0, ""
	}
	switch {
	case d.Malformed != "":
		e.refusal = &wire.Refusal{Kind: "malformed", Reason: d.Malformed}
	case d.Refusal != nil:
		j.size -= e.size
		e.records, e.size, e.ns = nil, 0, ""
		e.refusal = d.Refusal
	default:
		if j.size-e.size+d.Size > MaxRecordBytes {
			e.refusal = &wire.Refusal{Kind: "malformed", Reason: fmt.Sprintf(
				"DynamoWorkerMetadata %s: its records would take the held total past %d bytes", d.Name, MaxRecordBytes)}
			break
		}
		j.size += d.Size - e.size
		e.records, e.size, e.ns, e.refusal = d.Records, d.Size, d.Namespace, nil
	}
	e.uid, e.podUID = d.UID, d.PodUID
	j.supply(d.Name, e, e)
}

// carry gives e, a resource first read in this pass, the last valid
// records the previous pass held for its name, while they fit in the held
// total, with the uids they were read under: they stay its own only under
// the same resource and pod uids, which applyDWM checks next.
func (j *join) carry(name string, e *dwmEntry) {
	c, ok := j.carried[name]
	if !ok {
		return
	}
	delete(j.carried, name)
	if j.size+c.size > MaxRecordBytes {
		return
	}
	e.uid, e.podUID, e.records, e.ns, e.size = c.uid, c.podUID, c.records, c.ns, c.size
	j.size += c.size
}

// listed ends the carry-over once the list is read: a resource the list
// did not return is gone, and one created later has another uid.
func (j *join) listed() { j.carried = nil }

// lastValid returns the last valid records held, by resource name, for the
// next pass. When the list was not read to its end, what the previous pass
// carried and this one did not reach is kept too, within the same caps.
func (j *join) lastValid() map[string]lastValid {
	out := make(map[string]lastValid, len(j.dwms))
	size := 0
	for name, e := range j.dwms {
		if e.records != nil {
			out[name] = lastValid{uid: e.uid, podUID: e.podUID, records: e.records, ns: e.ns, size: e.size}
			size += e.size
		}
	}
	for _, name := range sortedKeys(j.carried) {
		c := j.carried[name]
		if _, ok := out[name]; ok {
			continue
		}
		if len(out) >= MaxDWMs || size+c.size > MaxRecordBytes {
			break
		}
		out[name] = c
		size += c.size
	}
	return out
}

// setOverCap keeps the one over-capacity refusal current: present while
// some resource stands refused at the caps. Its text does not change with
// how many: the registry counts a problem whose text changes as a new one.
func (j *join) setOverCap() {
	if len(j.overCap) == 0 {
		j.setSupplier(overCapacityKey, "", nil)
		return
	}
	r := wire.Refusal{Kind: "malformed", Reason: fmt.Sprintf(
		"DynamoWorkerMetadata resources refused: at most %d resources and %d bytes of records are held", MaxDWMs, MaxRecordBytes)}
	j.setSupplier(overCapacityKey, "", r.Encode())
}

// supply recomputes what resource name supplies: its records while its pod
// is ready, its refusal whatever the readiness, and a mismatch while the
// only ready endpoints of its pod name another pod uid.
func (j *join) supply(name string, old, e *dwmEntry) {
	next := map[string][]byte{}
	if e != nil {
		if e.refusal != nil {
			next[refusalKey(name)] = e.refusal.Encode()
		}
		ready, mismatch := j.readiness(name, e.podUID)
		switch {
		case ready:
			maps.Copy(next, e.records)
		case mismatch && len(e.records) > 0:
			// The reason names the resource and its pod, never the uids:
			// problems are served by the admin API, whose views carry no
			// UIDs, and the text stays the same while the uids change.
			r := wire.Refusal{Kind: "mismatch", Namespace: e.ns, Reason: fmt.Sprintf(
				"DynamoWorkerMetadata %s: the pod uid in its owner reference differs from the pod uid of the ready EndpointSlice endpoint of pod %s; "+
					"one of them belongs to an earlier pod of that name, and the records are held back until both name the same pod",
				name, name)}
			next[podUIDKey(name)] = r.Encode()
		}
	}
	var prev map[string][]byte
	if old != nil {
		prev = old.supplied
	}
	for k := range prev {
		if _, ok := next[k]; !ok {
			j.setSupplier(k, name, nil)
		}
	}
	for k, v := range next {
		if pv, ok := prev[k]; !ok || !bytes.Equal(pv, v) {
			j.setSupplier(k, name, v)
		}
	}
	if e != nil {
		e.supplied = next
	}
}

// readiness reports whether resource name, owned by the pod of uid podUID,
// is ready: some EndpointSlice lists its pod ready. When both the owner
// reference and the endpoint's targetRef carry the pod's uid they must be
// equal, so the records a pod wrote never go ready with the endpoint of a
// pod recreated under its name, nor the reverse; when either carries none
// (older operators), the name alone matches. mismatch reports that it is
// not ready only for the uids: ready endpoints name its pod, but another uid.
func (j *join) readiness(name, podUID string) (ready, mismatch bool) {
	uids := j.ready[name]
	if podUID == "" {
		return len(uids) > 0, false
	}
	if uids[podUID] > 0 || uids[""] > 0 {
		return true, false
	}
	return false, len(uids) > 0
}

// exclusive reports whether key may have only one supplier: instance and
// card keys carry the hashed id of the pod that wrote them, so a second
// supplier is another pod claiming the same identity. Event channels are
// shared (every worker of a component writes its component's channels),
// and refusal keys are the join's own, one supplier each.
func exclusive(key string) bool {
	return strings.HasPrefix(key, wire.PrefixInstances) || strings.HasPrefix(key, wire.PrefixModelCards)
}

// dupPrefix keys the duplicate refusal of an instance or card key that two
// or more resources supply; the rest of the key is that key.
const dupPrefix = wire.PrefixRefusals + "dynamoworkermetadata-duplicate/"

// dupKey is the key of key's duplicate refusal. The refusal stands while
// more than one resource supplies key, and key itself is withheld: as with
// two etcd keys of one identity, the router cannot tell the rightful
// claimant from the other (two pod names hashing to one id, or records
// copied from another pod), so every claimant is rejected.
func dupKey(key string) string { return dupPrefix + key }

// maxDupNames bounds the resources a duplicate refusal names.
const maxDupNames = 4

// setSupplier records that supplier supplies value at key (nil: no longer).
func (j *join) setSupplier(key, supplier string, value []byte) {
	s := j.keys[key]
	if value == nil {
		if s == nil {
			return
		}
		delete(s, supplier)
		if len(s) == 0 {
			delete(j.keys, key)
		}
	} else {
		if s == nil {
			s = map[string][]byte{}
			j.keys[key] = s
		}
		s[supplier] = value
	}
	j.pending[key] = struct{}{}
	if exclusive(key) {
		j.pending[dupKey(key)] = struct{}{}
	}
}

// applySlice applies an EndpointSlice's new state (or its deletion).
func (j *join) applySlice(es *discoveryv1.EndpointSlice, deleted bool) {
	var pods []podRef
	if !deleted {
		if _, known := j.slices[es.Name]; !known && len(j.slices) >= MaxSlices {
			if !j.slicesCut {
				j.slicesCut = true
				j.logger.Warn("dynamo metadata discovery: too many EndpointSlices; new ones are ignored, and the pods ready only in them are not published",
					"max", MaxSlices, "slice", es.Name)
			}
			return
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready && ep.TargetRef != nil && ep.TargetRef.Name != "" {
				pods = append(pods, podRef{name: ep.TargetRef.Name, uid: string(ep.TargetRef.UID)})
			}
		}
	}
	old := j.slices[es.Name]
	if deleted {
		delete(j.slices, es.Name)
	} else {
		j.slices[es.Name] = pods
	}
	changed := map[string]bool{}
	for _, p := range old {
		j.count(p, -1)
		changed[p.name] = true
	}
	for _, p := range pods {
		j.count(p, 1)
		changed[p.name] = true
	}
	for p := range changed {
		if e := j.dwms[p]; e != nil {
			j.supply(p, e, e)
		}
	}
}

// count adds n to the ready endpoints of pod p, dropping what reaches zero.
func (j *join) count(p podRef, n int) {
	uids := j.ready[p.name]
	if uids == nil {
		uids = map[string]int{}
		j.ready[p.name] = uids
	}
	uids[p.uid] += n
	if uids[p.uid] <= 0 {
		delete(uids, p.uid)
	}
	if len(uids) == 0 {
		delete(j.ready, p.name)
	}
}

// publishAll hands every key on (a pass's initial read).
func (j *join) publishAll(sink discovery.Sink) {
	clear(j.pending)
	keys := make([]string, 0, len(j.keys))
	for k, s := range j.keys {
		keys = append(keys, k)
		if len(s) > 1 && exclusive(k) {
			keys = append(keys, dupKey(k))
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if v := j.value(k); v != nil {
			j.sent[k] = v
			sink.Put(k, v)
		}
	}
}

// flush hands on the keys changed since the last flush.
func (j *join) flush(sink discovery.Sink) {
	if len(j.pending) == 0 {
		return
	}
	for _, k := range sortedKeys(j.pending) {
		v := j.value(k)
		prev, had := j.sent[k]
		switch {
		case v == nil && had:
			delete(j.sent, k)
			sink.Delete(k)
		case v != nil && (!had || !bytes.Equal(prev, v)):
			j.sent[k] = v
			sink.Put(k, v)
		}
	}
	clear(j.pending)
	sink.Flush()
}

// value is the value a key is handed on with: its first supplier's by name
// (suppliers of a shared event channel write the same record), or nothing
// for an exclusive key of several suppliers, whose dupKey holds the
// duplicate refusal instead.
func (j *join) value(key string) []byte {
	if under, ok := strings.CutPrefix(key, dupPrefix); ok {
		return j.dupRefusal(under)
	}
	s := j.keys[key]
	if len(s) == 0 || (len(s) > 1 && exclusive(key)) {
		return nil
	}
	return s[sortedKeys(s)[0]]
}

// dupRefusal is the duplicate refusal of key while more than one resource
// supplies it, else nil.
func (j *join) dupRefusal(key string) []byte {
	s := j.keys[key]
	if len(s) < 2 {
		return nil
	}
	names := sortedKeys(s)
	named := strings.Join(names[:min(len(names), maxDupNames)], ", ")
	if len(names) > maxDupNames {
		named += ", …"
	}
	var ns string
	if k, err := wire.ParseKey(key); err == nil {
		ns = k.Namespace
	}
	r := wire.Refusal{Kind: fleet.ProblemDuplicate, Namespace: ns, Reason: fmt.Sprintf(
		"%d DynamoWorkerMetadata resources (%s) supply %s: each pod's records carry the id hashed from its name, so two pods claim one identity; every claimant is rejected",
		len(names), named, key)}
	return r.Encode()
}
