package fleetsim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// Options shape a simulated fleet. Every (namespace, model) pair gets
// Prefill, Decode and Aggregated workers.
type Options struct {
	Model      string
	Models     []string
	Namespace  string
	Namespaces []string
	Prefill    int
	Decode     int
	Aggregated int
	// DPSize > 1 gives each worker that many data-parallel ranks (declared
	// in its card); 0 or 1 declares one rank.
	DPSize int
	// NilSchedulerFields publishes load the way Dynamo 1.4.2 vLLM workers
	// do: active_decode_blocks and active_prefill_tokens nil, only
	// kv_used_blocks set.
	NilSchedulerFields bool
	// Store is where workers register: StoreFile (default) under Root, or
	// StoreEtcd, an in-process etcd server keeping its data under Root.
	Store string
	// Root is the fleet's directory: the file store the workers register
	// in (Dynamo's DYN_FILE_KV layout) or the etcd server's data, and the
	// tokenizer files their cards declare.
	Root string
	// Speed scales every simulated duration down (2 = twice as fast).
	Speed float64
	// BlockSize and TotalKVBlocks are each worker's cache geometry: the
	// tokens of a block (kv_cache_block_size, 16 by default) and the blocks
	// each data-parallel rank caches (total_kv_blocks, 8192 by default).
	BlockSize     int
	TotalKVBlocks int
	// NoKV leaves KV-aware routing off in the demo configuration (the
	// workers still cache prompts and publish kv-events).
	NoKV bool
	// CardDialect is how the workers' cards say their role: DialectEnum
	// (the default, also ""), DialectBitflags, DialectLowercase or
	// DialectLegacy.
	CardDialect string
	// MigrationLimit, when above 0, is the migration_limit every card
	// declares (Dynamo's default, 0, writes none).
	MigrationLimit int
	// LeaseTTL is the TTL of the workers' etcd leases (StoreEtcd; whole
	// seconds, default DefaultLeaseTTL): how long a killed worker's
	// records outlive it.
	LeaseTTL time.Duration
	// Standby is how many more decode workers each (namespace, model) has
	// that start out of the fleet (StoreEtcd only): each joins at a
	// restart fault, as a new worker would.
	Standby int
	// FrontendReplicas is how many frontend replicas serve each namespace
	// (StartDemoOn; default 1), each its own listener that can be killed
	// and restarted.
	FrontendReplicas int
}

// Card dialects: the ways Dynamo revisions have written a card's role.
const (
	// DialectEnum writes worker_type as the names "Prefill", "Decode" and
	// "Aggregated".
	DialectEnum = "enum"
	// DialectBitflags writes worker_type as the bitflags derive does:
	// "Prefill", "Decode", and "Prefill | Decode" for an aggregated worker.
	DialectBitflags = "bitflags"
	// DialectLowercase writes worker_type as later revisions do: "prefill",
	// "decode", "aggregated".
	DialectLowercase = "lowercase"
	// DialectLegacy writes no worker_type, as revisions before worker types
	// did: model_type "Prefill" on prefill workers and "Chat | Completions"
	// on the others, and model_input "Tokens".
	DialectLegacy = "legacy"
)

// CardDialects lists the card dialects, the default first.
var CardDialects = []string{DialectEnum, DialectBitflags, DialectLowercase, DialectLegacy}

// Worker roles, as RoleFields takes them.
const (
	RolePrefill    = "prefill"
	RoleDecode     = "decode"
	RoleAggregated = "aggregated"
)

// RoleFields returns the card fields that say a worker's role (prefill,
// decode or aggregated) in a dialect ("" is DialectEnum).
func RoleFields(dialect, role string) (map[string]any, error) {
	names := map[string]map[string]string{
		DialectEnum:      {RolePrefill: "Prefill", RoleDecode: "Decode", RoleAggregated: "Aggregated"},
		DialectBitflags:  {RolePrefill: "Prefill", RoleDecode: "Decode", RoleAggregated: "Prefill | Decode"},
		DialectLowercase: {RolePrefill: "prefill", RoleDecode: "decode", RoleAggregated: "aggregated"},
	}
	if dialect == "" {
		dialect = DialectEnum
	}
	if role != RolePrefill && role != RoleDecode && role != RoleAggregated {
		return nil, fmt.Errorf("role %q: want %s, %s or %s", role, RolePrefill, RoleDecode, RoleAggregated)
	}
	if dialect == DialectLegacy {
		modelType := "Chat | Completions"
		if role == RolePrefill {
			modelType = "Prefill"
		}
		return map[string]any{"model_type": modelType, "model_input": "Tokens"}, nil
	}
	n, ok := names[dialect]
	if !ok {
		return nil, fmt.Errorf("card dialect %q: want one of %s", dialect, strings.Join(CardDialects, ", "))
	}
	return map[string]any{"worker_type": n[role]}, nil
}

// Simulated engine timings at speed 1.
const (
	prefillPerToken = 50 * time.Microsecond
	decodePerToken  = 20 * time.Millisecond
	keepAlive       = 3 * time.Second
	maxOutputTokens = 256
	// defaultOutputTokens is the length of an answer to a request without
	// max_tokens or max_completion_tokens.
	defaultOutputTokens = 16
)

// Sim is a simulated Dynamo fleet: workers that register in the file store,
// publish ActiveLoad on kv_metrics over real ZMQ PUB sockets, and run the
// requests a direct-mode Frontend (one per namespace, as one per graph)
// pins to them.
type Sim struct {
	opts      Options
	frontends map[string]*Frontend
	workers   map[uint64]*simWorker
	filesMu   sync.Mutex
	files     []string // every record written, removed at Stop
	etcd      *simEtcd // with StoreEtcd
	ctx       context.Context
	cancel    context.CancelFunc
	done      sync.WaitGroup
}

type simWorker struct {
	id, publisherID uint64
	namespace       string
	model           string
	role            string // prefill, decode or backend (aggregated)
	dpSize          int
	declaredDP      bool
	pub             zmq4.Socket
	endpoint        string
	// kv-events: a second publisher, as Dynamo's workers have.
	kvPub         zmq4.Socket
	kvEndpoint    string
	kvPublisherID uint64
	blockSize     int
	totalKV       uint64 // its card's total_kv_blocks
	files         []string
	nilFields     bool

	// kvMu guards the ranks' caches and prefill queues, so that a cache
	// update and the queueing of its events are one step; sendMu orders
	// the kv-events sends of all ranks.
	kvMu   sync.Mutex
	sendMu sync.Mutex
	ranks  []*rankEngine

	mu            sync.Mutex
	seq           uint64
	kvSeq         uint64
	kvEventIDs    []uint64 // per rank
	prefillTokens []uint64 // per rank
	decodeBlocks  []uint64
	// Fault state: dead (records no longer kept alive, requests refused),
	// silent (publisher stopped), paused (requests hang, nothing published),
	// saturated (its load says its KV cache is full).
	dead, silent, paused, saturated bool
	resume                          chan struct{}
	// gone is closed when the worker is killed: the requests it runs end
	// with it. A restart makes a new one.
	gone chan struct{}
	// What the frontends pinned to the worker: how many requests, the
	// last one's arrival, when its Endpoint record was seen deleted (zero
	// while it exists), and the requests pinned to it after that.
	pins          uint64
	lastPin       time.Time
	recordGoneAt  time.Time
	recordGone    bool
	pinsAfterGone []time.Duration // bounded by maxPinsAfterGone
	lateGone      uint64          // all pins after the record went, counted past the bound
	// standby: the worker started out of the fleet (Options.Standby).
	standby bool
	// dupFile is the second claimant's record while FaultDuplicate holds.
	dupFile string
	// With StoreEtcd: the worker's lease, the cancel of its keep-alive,
	// and its records (put again on restart).
	lease     clientv3.LeaseID
	stopLease context.CancelFunc
	records   map[string][]byte
}

// componentOf is the component a role registers as.
var componentOf = map[string]string{"prefill": "prefill", "decode": "decode", "backend": "backend"}

// cardRole is the role a worker's card declares.
var cardRole = map[string]string{"prefill": RolePrefill, "decode": RoleDecode, "backend": RoleAggregated}

// withDefaults fills the options left unset.
func withDefaults(o Options) (Options, error) {
	if len(o.Models) == 0 {
		if o.Model == "" {
			o.Model = "Qwen/Qwen3-32B"
		}
		o.Models = []string{o.Model}
	}
	o.Model = o.Models[0]
	if len(o.Namespaces) == 0 {
		if o.Namespace == "" {
			o.Namespace = "dynamo"
		}
		o.Namespaces = []string{o.Namespace}
	}
	o.Namespace = o.Namespaces[0]
	if o.Speed <= 0 {
		o.Speed = 1
	}
	if o.BlockSize == 0 {
		o.BlockSize = 16
	}
	if o.TotalKVBlocks == 0 {
		o.TotalKVBlocks = 8192
	}
	if o.CardDialect == "" {
		o.CardDialect = DialectEnum
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.FrontendReplicas <= 0 {
		o.FrontendReplicas = 1
	}
	if _, err := RoleFields(o.CardDialect, RolePrefill); err != nil {
		return o, err
	}
	return o, nil
}

// plan returns the workers of a fleet, without their sockets: every
// (namespace, model) pair gets o.Prefill, o.Decode and o.Aggregated workers,
// with instance ids counted from one base in that order.
func plan(o Options) []*simWorker {
	var out []*simWorker
	next := uint64(0x7a00_0000_0100)
	for _, ns := range o.Namespaces {
		for _, model := range o.Models {
			for _, role := range []struct {
				name string
				n    int
			}{{"prefill", o.Prefill}, {"decode", o.Decode + o.Standby}, {"backend", o.Aggregated}} {
				for i := range role.n {
					id := next
					next++
					ranks := max(o.DPSize, 1)
					w := &simWorker{id: id, publisherID: publisherID(id, 0x5a), kvPublisherID: publisherID(id, 0x6b), blockSize: o.BlockSize, totalKV: uint64(o.TotalKVBlocks),
						namespace: ns, model: model, role: role.name,
						dpSize: ranks, declaredDP: o.DPSize > 1, nilFields: o.NilSchedulerFields,
						prefillTokens: make([]uint64, ranks), decodeBlocks: make([]uint64, ranks), kvEventIDs: make([]uint64, ranks),
						standby: role.name == "decode" && i >= o.Decode}
					for range ranks {
						r := &rankEngine{cache: newBlockCache(o.TotalKVBlocks)}
						r.out.init()
						w.ranks = append(w.ranks, r)
					}
					out = append(out, w)
				}
			}
		}
	}
	return out
}

// Start launches the fleet.
func Start(o Options) (*Sim, error) {
	o, err := withDefaults(o)
	if err != nil {
		return nil, err
	}
	if _, err := demoEncoder(); err != nil {
		return nil, err
	}
	if err := writeArtifacts(o.Root); err != nil {
		return nil, fmt.Errorf("tokenizer files: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sim{opts: o, frontends: map[string]*Frontend{}, workers: map[uint64]*simWorker{}, cancel: cancel, ctx: ctx}
	switch o.Store {
	case "", StoreFile:
		if o.Standby > 0 {
			cancel()
			return nil, errors.New("standby workers need the etcd store")
		}
	case StoreEtcd:
		e, err := startSimEtcd(o.Root, o.LeaseTTL)
		if err != nil {
			cancel()
			return nil, err
		}
		s.etcd = e
	default:
		cancel()
		return nil, fmt.Errorf("store %q: want %s or %s", o.Store, StoreFile, StoreEtcd)
	}
	for _, ns := range o.Namespaces {
		s.frontends[ns] = NewFrontend()
		s.frontends[ns].Execute = s.execute
		s.frontends[ns].OnPin = s.pinned
	}
	for _, w := range plan(o) {
		w.pub, w.kvPub = zmq4.NewPub(ctx), zmq4.NewPub(ctx)
		w.gone = make(chan struct{})
		s.workers[w.id] = w
		if err := w.pub.Listen("tcp://127.0.0.1:0"); err != nil {
			s.Stop()
			return nil, fmt.Errorf("worker %x publisher: %w", w.id, err)
		}
		w.endpoint = "tcp://" + w.pub.Addr().String()
		if err := w.kvPub.Listen("tcp://127.0.0.1:0"); err != nil {
			s.Stop()
			return nil, fmt.Errorf("worker %x kv-events publisher: %w", w.id, err)
		}
		w.kvEndpoint = "tcp://" + w.kvPub.Addr().String()
	}
	if err := s.register(); err != nil {
		s.Stop()
		return nil, err
	}
	s.syncFrontends()
	s.done.Add(1)
	go func() { defer s.done.Done(); s.keepAlive(ctx) }()
	if s.etcd != nil {
		// The watch starts from the store's revision now, so that a
		// record removed before the watch is registered is still seen.
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := s.etcd.client.Get(gctx, "v1/instances/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("reading the store's revision: %w", err)
		}
		rev := resp.Header.Revision
		s.done.Add(1)
		go func() { defer s.done.Done(); s.watchRecords(ctx, rev) }()
	}
	s.done.Add(1)
	go func() { defer s.done.Done(); s.republishSaturated(ctx) }()
	for _, w := range s.workers {
		for r := range w.ranks {
			s.done.Add(1)
			go func() { defer s.done.Done(); w.sendLoop(ctx, r) }()
		}
	}
	for _, w := range s.workers {
		w.publishAll() // an idle worker says 0 once, then is silent
	}
	return s, nil
}

// syncFrontends tells each namespace's frontend which live instances serve
// each model.
func (s *Sim) syncFrontends() {
	for _, ns := range s.opts.Namespaces {
		for _, model := range s.opts.Models {
			var prefill, decode []Instance
			for _, w := range s.workers {
				if w.namespace != ns || w.model != model || w.isDead() {
					continue
				}
				if w.role == "prefill" {
					prefill = append(prefill, w.instance())
				} else {
					decode = append(decode, w.instance())
				}
			}
			s.frontends[ns].SetInstances(model, prefill, decode)
		}
	}
}

// Record is one discovery record a simulated worker registers: its bucket
// (v1/instances, v1/mdc or v1/event_channels), its key under the bucket,
// and its value.
type Record struct {
	Bucket, Key string
	Value       any
}

// Records returns the records a fleet of o registers, in the order they
// are written, without starting it: publisher endpoints are the
// placeholder tcp://127.0.0.1:9 (the discard port: a dialable address
// that no publisher listens at).
func Records(o Options) ([]Record, error) {
	o, err := withDefaults(o)
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, w := range plan(o) {
		w.endpoint, w.kvEndpoint = "tcp://127.0.0.1:9", "tcp://127.0.0.1:9"
		out = append(out, records(o, w)...)
	}
	return out, nil
}

// records are a worker's Endpoint, Model and EventChannel records; the
// card says the worker's role in o.CardDialect.
func records(o Options, w *simWorker) []Record {
	comp := componentOf[w.role]
	rel := fmt.Sprintf("%s/%s/generate/%x", w.namespace, comp, w.id)
	in := w.instance() // the same record the frontend's GET /health lists
	out := []Record{{"v1/instances", rel, map[string]any{"type": "Endpoint", "namespace": in.Namespace, "component": in.Component, "endpoint": in.Endpoint,
		"instance_id": in.InstanceID, "transport": in.Transport}}}
	rc := map[string]any{"total_kv_blocks": o.TotalKVBlocks, "max_num_batched_tokens": 8192, "max_num_seqs": 256,
		"context_length": 32768, "data_parallel_start_rank": 0}
	if w.declaredDP {
		rc["data_parallel_size"] = w.dpSize
	}
	card := map[string]any{"display_name": w.model, "kv_cache_block_size": o.BlockSize, "runtime_config": rc}
	if o.MigrationLimit > 0 {
		card["migration_limit"] = o.MigrationLimit
	}
	maps.Copy(card, artifactsIn(o.Root).cardSlots())
	fields, _ := RoleFields(o.CardDialect, cardRole[w.role]) // the dialect was checked by withDefaults
	maps.Copy(card, fields)
	out = append(out, Record{"v1/mdc", rel, map[string]any{"type": "Model", "namespace": w.namespace, "component": comp, "endpoint": "generate", "instance_id": w.id,
		"card_json": card}})
	for _, c := range []struct {
		topic    string
		id       uint64
		endpoint string
	}{{"kv_metrics", w.publisherID, w.endpoint}, {"kv-events", w.kvPublisherID, w.kvEndpoint}} {
		ch := fmt.Sprintf("namespace/%s/component/%s/endpoint/generate/topic/%s/%x", wire.EncodeSegment(w.namespace), wire.EncodeSegment(comp), wire.EncodeSegment(c.topic), c.id)
		out = append(out, Record{"v1/event_channels", ch, map[string]any{"type": "EventChannel",
			"scope": map[string]any{"kind": "endpoint", "endpoint": map[string]string{"namespace": w.namespace, "component": comp, "name": "generate"}},
			"topic": c.topic, "instance_id": c.id,
			"transport": map[string]any{"kind": "Zmq", "config": map[string]string{"endpoint": c.endpoint}}}})
	}
	return out
}

// register writes each worker's Endpoint, Model and EventChannel records
// the way a worker writes them: a temp file, then a rename.
func (s *Sim) register() error {
	for _, w := range s.workers {
		if w.standby {
			// Out of the fleet until a restart puts its records.
			w.dead, w.records = true, map[string][]byte{}
			close(w.gone)
			for _, r := range records(s.opts, w) {
				data, err := json.Marshal(r.Value)
				if err != nil {
					return err
				}
				w.records[r.Bucket+"/"+r.Key] = data
			}
			continue
		}
		if s.etcd != nil {
			lease, stop, err := s.etcd.grant(s.ctx)
			if err != nil {
				return err
			}
			w.lease, w.stopLease, w.records = lease, stop, map[string][]byte{}
		}
		for _, r := range records(s.opts, w) {
			f, err := s.writeRecord(w, r.Bucket, r.Key, r.Value)
			if err != nil {
				return err
			}
			w.files = append(w.files, f)
		}
	}
	return nil
}

// instance is the worker's Endpoint record.
func (w *simWorker) instance() Instance {
	return Instance{Namespace: w.namespace, Component: componentOf[w.role], Endpoint: "generate", InstanceID: w.id,
		Transport: map[string]string{"tcp": fmt.Sprintf("127.0.0.1:0/%x", w.id)}}
}

// writeRecord writes one record of w the way a worker does: in the file
// store a temp file, then a rename; in etcd a put under w's lease. It
// returns the record's handle (a path, or "etcd:" and the key).
func (s *Sim) writeRecord(w *simWorker, bucket, key string, v any) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	if s.etcd != nil {
		full := bucket + "/" + key
		w.mu.Lock()
		lease := w.lease
		w.records[full] = data
		w.mu.Unlock()
		return etcdHandle + full, s.etcd.put(s.ctx, full, data, lease)
	}
	dir := filepath.Join(s.opts.Root, bucket)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".tmp_%016x", time.Now().UnixNano()))
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return "", err
	}
	final := filepath.Join(dir, wire.FileStoreName(key))
	s.filesMu.Lock()
	s.files = append(s.files, final)
	s.filesMu.Unlock()
	return final, os.Rename(tmp, final)
}

// duplicate writes a second Endpoint record claiming w's instance id under
// another component, as a restarted worker whose old record lingers does.
func (s *Sim) duplicate(w *simWorker) (string, error) {
	comp := componentOf[w.role] + "-shadow"
	return s.writeRecord(w, "v1/instances", fmt.Sprintf("%s/%s/generate/%x", w.namespace, comp, w.id), map[string]any{"type": "Endpoint",
		"namespace": w.namespace, "component": comp, "endpoint": "generate", "instance_id": w.id,
		"transport": map[string]string{"tcp": fmt.Sprintf("127.0.0.1:0/%x", w.id)}})
}

// saturatedRepublish is how often a saturated worker publishes its load
// again: a full engine's load changes all the time, so its samples stay
// fresh, where an idle worker's, published only on change, go stale.
const saturatedRepublish = 500 * time.Millisecond

// republishSaturated keeps the saturated workers' samples fresh.
func (s *Sim) republishSaturated(ctx context.Context) {
	t := time.NewTicker(saturatedRepublish)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, w := range s.workers {
			w.mu.Lock()
			saturated := w.saturated && !w.dead
			w.mu.Unlock()
			if saturated {
				w.publishAll()
			}
		}
	}
}

// maxPinsAfterGone bounds the pins after a worker's record went that are
// kept with their times (the rest are only counted).
const maxPinsAfterGone = 1024

// instanceKey is the etcd key of w's Endpoint record.
func (w *simWorker) instanceKey() string {
	return fmt.Sprintf("v1/instances/%s/%s/generate/%x", w.namespace, componentOf[w.role], w.id)
}

// watchRecords notes when a killed worker's Endpoint record leaves etcd
// (its lease expired): from then on no router should pin it, and the
// frontends count the pins that still come.
func (s *Sim) watchRecords(ctx context.Context, rev int64) {
	byKey := map[string]*simWorker{}
	for _, w := range s.workers {
		byKey[w.instanceKey()] = w
	}
	// A watch that ends (etcd restarted, a compaction) is opened again
	// from the last revision seen.
	for ctx.Err() == nil {
		for resp := range s.etcd.client.Watch(clientv3.WithRequireLeader(ctx), "v1/instances/", clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if resp.CompactRevision > rev {
				rev = resp.CompactRevision - 1
			}
			if resp.Header.Revision > rev {
				rev = resp.Header.Revision
			}
			s.noteGone(resp.Events, byKey)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// noteGone marks the killed workers whose Endpoint record a watch saw
// deleted.
func (s *Sim) noteGone(events []*clientv3.Event, byKey map[string]*simWorker) {
	for _, ev := range events {
		w := byKey[string(ev.Kv.Key)]
		if w == nil || ev.Type != clientv3.EventTypeDelete {
			continue
		}
		w.mu.Lock()
		if w.dead && !w.recordGone {
			w.recordGone, w.recordGoneAt, w.pinsAfterGone = true, time.Now(), nil
		}
		w.mu.Unlock()
	}
}

// pinned counts a request a frontend received pinned to workers.
func (s *Sim) pinned(rec Recorded) {
	for _, id := range []*uint64{rec.Worker, rec.Prefill} {
		if id == nil {
			continue
		}
		w := s.workers[*id]
		if w == nil {
			continue
		}
		w.mu.Lock()
		w.pins++
		w.lastPin = rec.ReceivedAt
		if w.recordGone {
			w.lateGone++
			if len(w.pinsAfterGone) < maxPinsAfterGone {
				w.pinsAfterGone = append(w.pinsAfterGone, rec.ReceivedAt.Sub(w.recordGoneAt))
			}
		}
		w.mu.Unlock()
	}
}

// keepAlive touches the records as Dynamo's file store owner does.
func (s *Sim) keepAlive(ctx context.Context) {
	if s.etcd != nil {
		return // leases are kept alive by the etcd client
	}
	t := time.NewTicker(keepAlive)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, w := range s.workers {
				w.mu.Lock()
				dead, dup := w.dead, w.dupFile
				w.mu.Unlock()
				if dead {
					continue // a killed worker's records expire with its TTL
				}
				for _, f := range w.files {
					_ = os.Chtimes(f, now, now)
				}
				if dup != "" {
					_ = os.Chtimes(dup, now, now)
				}
			}
		}
	}
}

// Stop removes the records and closes the publishers.
func (s *Sim) Stop() {
	s.cancel()
	s.done.Wait()
	s.filesMu.Lock()
	for _, f := range s.files {
		_ = os.Remove(f)
	}
	s.filesMu.Unlock()
	if s.etcd != nil {
		s.etcd.close()
	}
	for _, w := range s.workers {
		_ = w.pub.Close()
		_ = w.kvPub.Close()
	}
}

// Model is the (first) model the fleet serves.
func (s *Sim) Model() string { return s.opts.Model }

// Models are the models the fleet serves.
func (s *Sim) Models() []string { return s.opts.Models }

// Namespaces are the fleet's Dynamo namespaces.
func (s *Sim) Namespaces() []string { return s.opts.Namespaces }

// Artifacts are the tokenizer files every worker's card declares, in the
// fleet's root directory.
func (s *Sim) Artifacts() Artifacts { return artifactsIn(s.opts.Root) }

// Frontend is the direct-mode frontend of a namespace.
func (s *Sim) Frontend(ns string) *Frontend { return s.frontends[ns] }

// publish sends one rank's current load (change-driven, as upstream).
func (w *simWorker) publish(rank int) {
	w.mu.Lock()
	if w.silent || w.paused || w.dead {
		w.mu.Unlock()
		return
	}
	l := wire.ActiveLoad{WorkerID: w.id, DPRank: uint32(rank)}
	blocks := w.decodeBlocks[rank]
	if w.saturated {
		blocks += w.totalKV * saturatedShare / 100
	}
	if w.nilFields {
		// Blocks of the card's block size, a prompt's last one partly
		// filled.
		bs := uint64(max(w.blockSize, 1))
		used := blocks + (w.prefillTokens[rank]+bs-1)/bs
		l.KVUsedBlocks = &used
	} else {
		l.ActiveDecodeBlocks, l.ActivePrefillTokens = ptr(blocks), ptr(w.prefillTokens[rank])
	}
	seq := w.seq
	w.seq++
	w.mu.Unlock()
	_ = w.pub.Send(zmq4.NewMsgFrom(wire.EncodeEventMessage("kv_metrics", w.publisherID, seq, uint64(time.Now().UnixMilli()), wire.EncodeActiveLoad(l))...))
}

func (w *simWorker) publishAll() {
	for r := range w.dpSize {
		w.publish(r)
	}
}

func ptr(v uint64) *uint64 { return &v }

func (w *simWorker) adjust(rank int, prefill, decode int64) {
	w.mu.Lock()
	w.prefillTokens[rank] = uint64(int64(w.prefillTokens[rank]) + prefill)
	w.decodeBlocks[rank] = uint64(int64(w.decodeBlocks[rank]) + decode)
	w.mu.Unlock()
	w.publish(rank)
}

func (s *Sim) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(time.Duration(float64(d) / s.opts.Speed))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// execute runs a pinned request: the prompt is encoded as the frontend
// encodes it, then prefilled on the prefill worker's rank (or on the decode
// worker itself), behind the prefill work already queued there and only
// for the tokens its cache does not hold; then decoded, streaming tokens as
// they come (the first one comes with the prefill).
func (s *Sim) execute(w http.ResponseWriter, r *http.Request, rec Recorded) {
	q := parseRequest(rec.Body)
	ids, seed := s.promptIDs(rec.Path, rec.Body, &q)
	if salt := tenantSalt(r.Header); salt != "" {
		seed = wire.BlockHashSeed("", salt)
	}
	prompt := len(ids)
	// Without a limit the answer is defaultOutputTokens long; a limit up to
	// maxOutputTokens is reached (finish reason length), a larger one is not.
	natural := defaultOutputTokens
	if l := q.limit(); l > 0 {
		natural = maxOutputTokens
	}
	if rec.Path != "/v1/chat/completions" {
		q.Tools = nil // text completions call no tools
	}
	answer := q.planAnswer(natural, func(i int) string { return demoWords[i%len(demoWords)] })
	out := answer.tokens()
	decodeW := s.workers[*rec.Worker]
	prefillW := decodeW
	if rec.Prefill != nil {
		prefillW = s.workers[*rec.Prefill]
	}
	decodeRank, prefillRank := rankOf(rec.DPRank, decodeW), 0
	if rec.Prefill != nil {
		prefillRank = rankOf(rec.PrefillDPRank, prefillW)
	} else {
		prefillRank = decodeRank
	}
	switch {
	case decodeW == nil || decodeW.isDead():
		writeDynamoError(w, http.StatusInternalServerError, UnknownInstance(*rec.Worker))
		return
	case prefillW == nil || prefillW.isDead():
		writeDynamoError(w, http.StatusInternalServerError, UnknownInstance(*rec.Prefill))
		return
	}
	// The request lives as long as its decode worker does, and through
	// its prefill as long as its prefill worker does too (the KV cache is
	// handed over then): a kill ends it. Before its answer starts the
	// frontend says the instance is gone (a 500 the router may pin
	// again); a stream already started is cut, as a dead engine's stream
	// is.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	go func() {
		select {
		case <-decodeW.goneCh():
		case <-ctx.Done():
		}
		cancel()
	}()
	go func() {
		select {
		case <-prefillW.goneCh():
		case <-pctx.Done():
		}
		pcancel()
	}()
	killed := func() bool {
		if r.Context().Err() != nil || pctx.Err() == nil {
			return false
		}
		id := *rec.Worker
		if decodeW != prefillW && prefillW.isDead() {
			id = *rec.Prefill
		}
		writeDynamoError(w, http.StatusInternalServerError, UnknownInstance(id))
		return true
	}
	if err := decodeW.waitResumed(pctx); err != nil {
		killed()
		return
	}
	if err := prefillW.waitResumed(pctx); err != nil {
		killed()
		return
	}
	cached, finishAt := prefillW.prefill(prefillRank, promptBlocks(ids, s.opts.BlockSize, seed), prompt, s.opts.Speed)
	w.Header().Set("x-sim-prompt-tokens", strconv.Itoa(prompt))
	w.Header().Set("x-sim-cached-tokens", strconv.Itoa(cached))
	// The time to first token in the simulation's own clock: from the
	// frontend's receipt to the end of the prefill (queue and compute),
	// which a busy host's scheduling delays do not add to.
	w.Header().Set("x-sim-ttft-us", strconv.FormatInt(finishAt.Sub(rec.ReceivedAt).Microseconds(), 10))
	uncached := prompt - cached
	prefillW.adjust(prefillRank, int64(uncached), 0)
	err := sleepUntil(pctx, finishAt)
	prefillW.adjust(prefillRank, -int64(uncached), 0)
	if err != nil {
		killed()
		return
	}
	kvBlocks := int64((prompt+out)/s.opts.BlockSize + 1)
	decodeW.adjust(decodeRank, 0, kvBlocks)
	defer decodeW.adjust(decodeRank, 0, -kvBlocks)
	rep := newReply(rec.Path, &q, prompt)
	rep.cachedTokens = cached
	// The first token comes out of the prefill; each later one takes a
	// decode step.
	cut := false
	answer.write(w, rep, q.Stream, func(i int) error {
		var err error
		if i == 0 {
			err = ctx.Err()
		} else {
			err = s.sleep(ctx, decodePerToken)
		}
		cut = cut || err != nil
		return err
	})
	if cut && r.Context().Err() == nil {
		if q.Stream {
			panic(http.ErrAbortHandler) // the stream has started: cut the connection
		}
		killed()
	}
}

// promptIDs is a request's prompt as the frontend encodes it, and the seed
// of its block hashes; a request the rules cannot render is its text,
// encoded as it is.
func (s *Sim) promptIDs(path string, body []byte, q *openAIRequest) ([]uint32, uint64) {
	enc, err := demoEncoder()
	if err != nil {
		return make([]uint32, estimatePromptTokens(q.promptText())), wire.XXH3Seed // Start checked the encoder
	}
	ids, seed, err := enc.encode(path, body)
	if err != nil {
		return enc.fallbackIDs(q), wire.XXH3Seed
	}
	return ids, seed
}

// tenantSalt is a request's x-tenant-id as the frontend reads it: when not
// empty and readable as text (visible ASCII, space and tab), the request's
// cache salt, over the body's.
func tenantSalt(h http.Header) string {
	v := h.Get("X-Tenant-Id")
	for i := 0; i < len(v); i++ {
		if c := v[i]; c != '\t' && (c < ' ' || c > '~') {
			return ""
		}
	}
	return v
}

// prefill queues a prompt's prefill on a rank: the tokens its cache holds
// (the leading complete blocks, short of the last token, which the engine
// always computes) are not computed again, the rest takes prefillPerToken
// each after the work already queued on the rank. The blocks are cached at
// once (later requests queue behind this one), and their kv-events go out
// when this prefill is done. It returns the cached tokens and when the
// prefill ends.
func (w *simWorker) prefill(rank int, blocks []promptBlock, prompt int, speed float64) (int, time.Time) {
	w.kvMu.Lock()
	defer w.kvMu.Unlock()
	re := w.ranks[rank]
	u := re.cache.compute(blocks)
	cached := min(u.hit*w.blockSize, max(prompt-1, 0))
	now := time.Now()
	start := now
	if re.busyUntil.After(now) {
		start = re.busyUntil
	}
	re.busyUntil = start.Add(time.Duration(float64(prompt-cached) * float64(prefillPerToken) / speed))
	re.arrivals++
	if events := w.updateEvents(rank, blocks, u); len(events) > 0 {
		re.out.push(kvBatch{at: re.busyUntil, events: events})
	}
	return cached, re.busyUntil
}

// sleepUntil waits until t or the end of ctx.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// goneCh is closed when the worker is killed.
func (w *simWorker) goneCh() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gone
}

var demoWords = strings.Fields("Dynamo pinned this request to a prefill and a decode worker chosen by their live load")

// rankOf is the rank a request was pinned to, 0 when absent or out of range.
func rankOf(r *uint64, w *simWorker) int {
	if r == nil || w == nil || *r >= uint64(w.dpSize) {
		return 0
	}
	return int(*r)
}

func (w *simWorker) isDead() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dead
}

// waitResumed blocks while the worker is paused.
func (w *simWorker) waitResumed(ctx context.Context) error {
	w.mu.Lock()
	ch := w.resume
	paused := w.paused
	w.mu.Unlock()
	if !paused {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
		return nil
	}
}

// Fault names a fault to inject into a worker.
type Fault string

// Faults.
const (
	FaultKill          Fault = "kill"           // stop keeping its records alive; refuse its requests
	FaultStopPublisher Fault = "stop-publisher" // publish no more load
	FaultPause         Fault = "pause"          // hang requests and publish nothing (a stalled engine)
	FaultResume        Fault = "resume"         // undo pause, stop-publisher and duplicate
	// FaultDuplicate registers a second record claiming the worker's
	// instance id: discovery rejects every claimant until it goes.
	FaultDuplicate Fault = "duplicate"
	// FaultRestart brings a killed worker back with the same id and an
	// empty cache (its records are kept alive again; kv-events says
	// cleared).
	FaultRestart Fault = "restart"
	// FaultLeave takes the worker out of the fleet at once, as a graceful
	// shutdown does: its lease is revoked (its records go now, StoreEtcd
	// only) and it refuses new requests while those it runs finish;
	// FaultRestart brings it back.
	FaultLeave Fault = "leave"
	// FaultSaturate makes the worker's load say its KV cache is full
	// (saturatedShare of total_kv_blocks in use beyond its real load)
	// until resumed; it still serves what it is sent.
	FaultSaturate Fault = "saturate"
)

// saturatedShare is the percentage of total_kv_blocks a saturated worker
// reports in use on top of its real load.
const saturatedShare = 97

// ErrNoWorker is returned for an unknown worker id.
var ErrNoWorker = errors.New("no such simulated worker")

// workerID reads a worker id as the control API takes it: decimal (as
// worker_id is shown), 0x hex, or bare hex (as discover and top show
// instance ids). A text that reads both ways names the worker it matches
// as decimal first.
func (s *Sim) workerID(text string) (uint64, error) {
	dec, derr := strconv.ParseUint(text, 0, 64)
	if derr == nil && s.workers[dec] != nil {
		return dec, nil
	}
	hex, herr := strconv.ParseUint(text, 16, 64)
	switch {
	case herr == nil && s.workers[hex] != nil:
		return hex, nil
	case derr == nil:
		return dec, nil // no such worker: Inject says so
	case herr == nil:
		return hex, nil
	}
	return 0, errors.New("worker id must be a number: decimal, 0x hex, or hex as discover shows instance ids")
}

// Inject applies a fault to the worker with instance id.
func (s *Sim) Inject(id uint64, f Fault) error {
	w := s.workers[id]
	if w == nil {
		return ErrNoWorker
	}
	if f == FaultDuplicate {
		w.mu.Lock()
		has := w.dupFile != ""
		w.mu.Unlock()
		if has {
			return nil
		}
		path, err := s.duplicate(w)
		if err != nil {
			return err
		}
		w.mu.Lock()
		w.dupFile = path
		w.mu.Unlock()
		return nil
	}
	if f == FaultRestart {
		return s.restart(w)
	}
	if f == FaultLeave {
		return s.leave(w)
	}
	w.mu.Lock()
	var undup string
	switch f {
	case FaultKill:
		if !w.dead {
			close(w.gone)
		}
		w.dead = true
		if w.stopLease != nil {
			w.stopLease() // the lease expires within its TTL
		}
	case FaultStopPublisher:
		w.silent = true
	case FaultSaturate:
		w.saturated = true
	case FaultPause:
		if !w.paused {
			w.paused, w.resume = true, make(chan struct{})
		}
	case FaultResume:
		w.silent, w.saturated = false, false
		undup, w.dupFile = w.dupFile, ""
		if w.paused {
			w.paused = false
			close(w.resume)
		}
	default:
		w.mu.Unlock()
		return fmt.Errorf("unknown fault %q", f)
	}
	w.mu.Unlock()
	if key, ok := strings.CutPrefix(undup, etcdHandle); ok {
		w.mu.Lock()
		delete(w.records, key)
		w.mu.Unlock()
		if err := s.etcd.delete(s.ctx, key); err != nil {
			return err
		}
	} else if undup != "" {
		if err := os.Remove(undup); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	switch f {
	case FaultResume, FaultSaturate:
		w.publishAll()
	case FaultKill:
		s.syncFrontends()
	}
	return nil
}

// restart brings a killed worker back: its records are kept alive again,
// its cache is empty, and kv-events says cleared before anything else.
func (s *Sim) restart(w *simWorker) error {
	w.kvMu.Lock()
	w.mu.Lock()
	if !w.dead {
		w.mu.Unlock()
		w.kvMu.Unlock()
		return nil
	}
	w.dead, w.gone, w.recordGone = false, make(chan struct{}), false
	now := time.Now()
	for _, f := range w.files {
		_ = os.Chtimes(f, now, now)
	}
	w.mu.Unlock()
	if s.etcd != nil {
		if err := s.releaseInEtcd(w); err != nil {
			w.kvMu.Unlock()
			return err
		}
	}
	for _, re := range w.ranks {
		re.cache.clear()
		re.busyUntil = time.Time{}
	}
	w.publishCleared()
	w.kvMu.Unlock()
	w.publishAll()
	s.syncFrontends()
	return nil
}

// leave takes w out of the fleet at once: its lease is revoked, and the
// requests it runs finish.
func (s *Sim) leave(w *simWorker) error {
	if s.etcd == nil {
		return errors.New("leave needs the etcd store (a lease to revoke)")
	}
	w.mu.Lock()
	if w.dead {
		w.mu.Unlock()
		return nil
	}
	w.dead = true // its requests drain: gone stays open
	lease, stop := w.lease, w.stopLease
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.syncFrontends()
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	if _, err := s.etcd.client.Revoke(ctx, lease); err != nil {
		return fmt.Errorf("revoking worker %x's lease: %w", w.id, err)
	}
	return nil
}

// releaseInEtcd puts a restarted worker's records again under a new lease.
func (s *Sim) releaseInEtcd(w *simWorker) error {
	lease, stop, err := s.etcd.grant(s.ctx)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.lease, w.stopLease = lease, stop
	records := maps.Clone(w.records)
	w.mu.Unlock()
	for k, v := range records {
		if err := s.etcd.put(s.ctx, k, v, lease); err != nil {
			return err
		}
	}
	return nil
}

// EtcdEndpoint is the client URL of the fleet's etcd server ("" with the
// file store).
func (s *Sim) EtcdEndpoint() string {
	if s.etcd == nil {
		return ""
	}
	return s.etcd.Endpoint()
}

// RestartEtcd stops the fleet's etcd server and starts it again with its
// data (a fault: discovery must reconnect and resume).
func (s *Sim) RestartEtcd() error {
	if s.etcd == nil {
		return errors.New("the fleet registers in the file store, not etcd")
	}
	return s.etcd.Restart()
}

// WorkerInfo describes a simulated worker.
type WorkerInfo struct {
	InstanceID  uint64 `json:"instance_id"`
	Namespace   string `json:"namespace"`
	Model       string `json:"model"`
	Role        string `json:"role"`
	PublisherID uint64 `json:"publisher_id"`
	// KVPublisherID publishes the worker's kv-events.
	KVPublisherID uint64 `json:"kv_publisher_id"`
	Dead          bool   `json:"dead"`
	Silent        bool   `json:"silent"`
	Paused        bool   `json:"paused"`
	Saturated     bool   `json:"saturated"`
	// Pins counts the requests the frontends received pinned to the
	// worker (as decode or prefill worker), LastPin the last one's arrival.
	Pins    uint64     `json:"pins"`
	LastPin *time.Time `json:"last_pin,omitempty"`
	// RecordGoneAt is when the killed worker's Endpoint record was last
	// seen leaving etcd (its lease expired); PinsAfterGone counts the
	// requests pinned to it after that while it stayed dead, and
	// PinsAfterGoneMS says how long after (the first 1024).
	RecordGoneAt    *time.Time `json:"record_gone_at,omitempty"`
	PinsAfterGone   uint64     `json:"pins_after_gone"`
	PinsAfterGoneMS []float64  `json:"pins_after_gone_ms,omitempty"`
}

// Workers lists the simulated workers.
func (s *Sim) Workers() []WorkerInfo {
	var out []WorkerInfo
	for _, w := range s.workers {
		w.mu.Lock()
		info := WorkerInfo{InstanceID: w.id, Namespace: w.namespace, Model: w.model, Role: w.role, PublisherID: w.publisherID, KVPublisherID: w.kvPublisherID,
			Dead: w.dead, Silent: w.silent, Paused: w.paused, Saturated: w.saturated, Pins: w.pins, PinsAfterGone: w.lateGone}
		if !w.lastPin.IsZero() {
			info.LastPin = new(w.lastPin)
		}
		if !w.recordGoneAt.IsZero() {
			info.RecordGoneAt = new(w.recordGoneAt)
		}
		for _, d := range w.pinsAfterGone {
			info.PinsAfterGoneMS = append(info.PinsAfterGoneMS, float64(d.Microseconds())/1000)
		}
		out = append(out, info)
		w.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int { return cmp.Compare(a.InstanceID, b.InstanceID) })
	return out
}

// Handler serves the namespace's frontend and, under /sim/, the control API
// of the whole fleet: GET /sim/workers,
// POST /sim/workers/{id}/{kill|restart|leave|stop-publisher|pause|resume|duplicate|saturate},
// POST /sim/etcd/restart (with the etcd store).
func (s *Sim) Handler(ns string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sim/workers", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Workers())
	})
	mux.HandleFunc("POST /sim/etcd/restart", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.RestartEtcd(); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /sim/workers/{id}/{fault}", func(w http.ResponseWriter, r *http.Request) {
		id, err := s.workerID(r.PathValue("id"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.Inject(id, Fault(r.PathValue("fault"))); err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, ErrNoWorker) {
				code = http.StatusNotFound
			}
			http.Error(w, err.Error(), code)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.Handle("/", s.frontends[ns])
	return mux
}

// RankView is what one rank of a worker holds for a request, read from
// the simulation itself rather than from what it publishes.
type RankView struct {
	Worker uint64
	Rank   int
	// CachedBlocks are the request's leading complete blocks the rank's
	// cache holds now (blocks of prefills still queued included).
	CachedBlocks int
	// QueuedTokens is the prefill work queued on the rank, in tokens: the
	// time until it is done over the time a token takes.
	QueuedTokens float64
	// PrefillTokens is the prefill backlog the rank publishes
	// (active_prefill_tokens): the tokens of the prefills queued or in
	// progress on it, each counted whole until it is done.
	PrefillTokens uint64
	// DecodeBlocks is the rank's decode backlog.
	DecodeBlocks uint64
	// Arrivals counts the requests the rank has prefilled or queued.
	Arrivals uint64
}

// Probe encodes a request as the frontend would (path is the endpoint, body
// the request) and returns its prompt tokens, the block size and, for each
// rank of the given workers that are live, what the rank holds of it.
func (s *Sim) Probe(path string, body []byte, workers []uint64) (promptTokens, blockSize int, views []RankView) {
	q := parseRequest(body)
	ids, seed := s.promptIDs(path, body, &q)
	blocks := promptBlocks(ids, s.opts.BlockSize, seed)
	now := time.Now()
	perToken := float64(prefillPerToken) / s.opts.Speed
	for _, id := range workers {
		w := s.workers[id]
		if w == nil || w.isDead() {
			continue
		}
		w.kvMu.Lock()
		for r, re := range w.ranks {
			v := RankView{Worker: id, Rank: r, CachedBlocks: re.cache.prefix(blocks), Arrivals: re.arrivals}
			if d := re.busyUntil.Sub(now); d > 0 {
				v.QueuedTokens = float64(d) / perToken
			}
			views = append(views, v)
		}
		w.kvMu.Unlock()
		w.mu.Lock()
		for i := range views[len(views)-len(w.ranks):] {
			views[len(views)-len(w.ranks)+i].DecodeBlocks = w.decodeBlocks[i]
			views[len(views)-len(w.ranks)+i].PrefillTokens = w.prefillTokens[i]
		}
		w.mu.Unlock()
	}
	return len(ids), s.opts.BlockSize, views
}

// maxPublisherID is the largest publisher id Dynamo's event plane draws
// (its ids are kept exact in JSON numbers: 2^53 - 1).
const maxPublisherID = 1<<53 - 1

// publisherID is the simulated worker id's publisher of one kind (its low
// byte), within the range real publishers draw from.
func publisherID(worker uint64, kind byte) uint64 {
	return (worker<<8 | uint64(kind)) & maxPublisherID
}
