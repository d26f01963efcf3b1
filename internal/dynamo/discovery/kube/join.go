package kube

import (
	"bytes"
	"fmt"
	"log/slog"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// overCapacityKey is the one refusal that stands for every resource
// refused at the source's caps.
const overCapacityKey = wire.PrefixRefusals + "dynamoworkermetadatas-over-capacity"

// join holds one pass's DynamoWorkerMetadata resources and EndpointSlice
// readiness, and the records they supply. A resource supplies its records
// while its pod is ready in some slice. Several suppliers of one key (event
// channels shared by resources) are counted; the key goes when the last
// one does. Only changed keys are handed on.
type join struct {
	namespaces []string
	logger     *slog.Logger

	dwms    map[string]*dwmEntry         // by resource name
	slices  map[string][]string          // slice name → pods ready in it
	ready   map[string]int               // pod name → slices it is ready in
	keys    map[string]map[string][]byte // key → supplier → value
	sent    map[string][]byte            // what the sink holds
	pending map[string]struct{}          // keys to hand on at the next flush
	size    int                          // bytes of records held
	overCap map[string]struct{}          // resources refused at the caps (at most MaxDWMs named)
}

// dwmEntry is one resource: its last valid records and what it supplies.
type dwmEntry struct {
	uid      string
	records  map[string][]byte // last valid records
	size     int
	refusal  *wire.Refusal // refused, mismatch or malformed
	supplied map[string][]byte
}

func newJoin(namespaces []string, logger *slog.Logger) *join {
	return &join{namespaces: namespaces, logger: logger, dwms: map[string]*dwmEntry{}, slices: map[string][]string{},
		ready: map[string]int{}, keys: map[string]map[string][]byte{}, sent: map[string][]byte{}, pending: map[string]struct{}{},
		overCap: map[string]struct{}{}}
}

func refusalKey(name string) string { return wire.PrefixRefusals + "dynamoworkermetadata/" + name }

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
		e = &dwmEntry{}
		j.dwms[d.Name] = e
	}
	switch {
	case d.Malformed != "":
		if e.uid != d.UID { // a new resource under the old name: nothing to keep
			j.size -= e.size
			e.records, e.size = nil, 0
		}
		e.refusal = &wire.Refusal{Kind: "malformed", Reason: d.Malformed}
	case d.Refusal != nil:
		j.size -= e.size
		e.records, e.size = nil, 0
		e.refusal = d.Refusal
	default:
		if j.size-e.size+d.Size > MaxRecordBytes {
			e.refusal = &wire.Refusal{Kind: "malformed", Reason: fmt.Sprintf(
				"DynamoWorkerMetadata %s: its records would take the held total past %d bytes", d.Name, MaxRecordBytes)}
			break
		}
		j.size += d.Size - e.size
		e.records, e.size, e.refusal = d.Records, d.Size, nil
	}
	e.uid = d.UID
	j.supply(d.Name, e, e)
}

// setOverCap keeps the one over-capacity refusal current.
func (j *join) setOverCap() {
	if len(j.overCap) == 0 {
		j.setSupplier(overCapacityKey, "", nil)
		return
	}
	r := wire.Refusal{Kind: "malformed", Reason: fmt.Sprintf(
		"%d DynamoWorkerMetadata resources refused: at most %d resources and %d bytes of records are held", len(j.overCap), MaxDWMs, MaxRecordBytes)}
	j.setSupplier(overCapacityKey, "", r.Encode())
}

// supply recomputes what resource name supplies: its records while its pod
// is ready, and its refusal whatever the readiness.
func (j *join) supply(name string, old, e *dwmEntry) {
	next := map[string][]byte{}
	if e != nil {
		if e.refusal != nil {
			next[refusalKey(name)] = e.refusal.Encode()
		}
		if j.ready[name] > 0 {
			for k, v := range e.records {
				next[k] = v
			}
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
}

// applySlice applies an EndpointSlice's new state (or its deletion).
func (j *join) applySlice(es *discoveryv1.EndpointSlice, deleted bool) {
	var pods []string
	if !deleted {
		if _, known := j.slices[es.Name]; !known && len(j.slices) >= MaxSlices {
			return
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready && ep.TargetRef != nil && ep.TargetRef.Name != "" {
				pods = append(pods, ep.TargetRef.Name)
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
		j.ready[p]--
		changed[p] = true
	}
	for _, p := range pods {
		j.ready[p]++
		changed[p] = true
	}
	for p := range changed {
		if j.ready[p] <= 0 {
			delete(j.ready, p)
		}
		if e := j.dwms[p]; e != nil {
			j.supply(p, e, e)
		}
	}
}

// publishAll hands every key on (a pass's initial read).
func (j *join) publishAll(sink discovery.Sink) {
	clear(j.pending)
	for _, k := range sortedKeys(j.keys) {
		v := j.value(k)
		j.sent[k] = v
		sink.Put(k, v)
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
// (suppliers of a shared event channel write the same record).
func (j *join) value(key string) []byte {
	s := j.keys[key]
	if len(s) == 0 {
		return nil
	}
	return s[sortedKeys(s)[0]]
}
