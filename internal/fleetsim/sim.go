package fleetsim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// Options shape a simulated fleet.
type Options struct {
	Model     string
	Namespace string
	Prefill   int
	Decode    int
	// Root is the file store directory the workers register in (Dynamo's
	// DYN_FILE_KV layout).
	Root string
	// Speed scales every simulated duration down (2 = twice as fast).
	Speed float64
	// BlockSize and TotalKVBlocks are each worker's cache geometry.
	BlockSize     int
	TotalKVBlocks int
}

// Simulated engine timings at speed 1.
const (
	prefillPerToken = 50 * time.Microsecond
	decodePerToken  = 20 * time.Millisecond
	keepAlive       = 3 * time.Second
	maxOutputTokens = 256
)

// Sim is a simulated Dynamo fleet: workers that register in the file store,
// publish ActiveLoad on kv_metrics over real ZMQ PUB sockets, and run the
// requests a direct-mode Frontend pins to them.
type Sim struct {
	opts     Options
	Frontend *Frontend
	workers  map[uint64]*simWorker
	files    []string
	cancel   context.CancelFunc
	done     sync.WaitGroup
}

type simWorker struct {
	id, publisherID uint64
	role            string
	pub             zmq4.Socket
	endpoint        string
	files           []string

	cache *prefixCache

	// Fault state: dead (records no longer kept alive, requests refused),
	// silent (publisher stopped), paused (requests hang, nothing published).
	dead, silent, paused bool
	resume               chan struct{}

	mu            sync.Mutex
	seq           uint64
	prefillTokens uint64
	decodeBlocks  uint64
}

// Start launches the fleet.
func Start(o Options) (*Sim, error) {
	if o.Model == "" {
		o.Model = "Qwen/Qwen3-32B"
	}
	if o.Namespace == "" {
		o.Namespace = "dynamo"
	}
	if o.Speed <= 0 {
		o.Speed = 1
	}
	if o.BlockSize == 0 {
		o.BlockSize = 16
	}
	if o.TotalKVBlocks == 0 {
		o.TotalKVBlocks = 8192
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sim{opts: o, Frontend: NewFrontend(), workers: map[uint64]*simWorker{}, cancel: cancel}
	var prefill, decode []uint64
	add := func(role string, n int, base uint64) error {
		for i := range n {
			id := base + uint64(i)
			w := &simWorker{id: id, publisherID: id<<8 | 0x5a, role: role, pub: zmq4.NewPub(ctx),
				cache: newPrefixCache(o.TotalKVBlocks * o.BlockSize / TraceBlockTokens)}
			if err := w.pub.Listen("tcp://127.0.0.1:0"); err != nil {
				return fmt.Errorf("worker %x publisher: %w", id, err)
			}
			w.endpoint = "tcp://" + w.pub.Addr().String()
			s.workers[id] = w
			if role == "prefill" {
				prefill = append(prefill, id)
			} else {
				decode = append(decode, id)
			}
		}
		return nil
	}
	if err := add("prefill", o.Prefill, 0x7a00_0000_0100); err != nil {
		s.Stop()
		return nil, err
	}
	if err := add("decode", o.Decode, 0x7a00_0000_0200); err != nil {
		s.Stop()
		return nil, err
	}
	if err := s.register(); err != nil {
		s.Stop()
		return nil, err
	}
	s.Frontend.SetWorkers(o.Model, prefill, decode)
	s.Frontend.Execute = s.execute
	s.done.Add(1)
	go func() { defer s.done.Done(); s.keepAlive(ctx) }()
	for _, w := range s.workers {
		w.publish() // an idle worker says 0 once, then is silent
	}
	return s, nil
}

// fileName encodes a key the way Dynamo's file store names files.
func fileName(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// register writes each worker's Endpoint, Model and EventChannel records
// the way a worker writes them: a temp file, then a rename.
func (s *Sim) register() error {
	o := s.opts
	var lastFile string
	write := func(bucket, key string, v any) error {
		dir := filepath.Join(o.Root, bucket)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		tmp := filepath.Join(dir, fmt.Sprintf(".tmp_%016x", time.Now().UnixNano()))
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		final := filepath.Join(dir, fileName(key))
		s.files = append(s.files, final)
		lastFile = final
		return os.Rename(tmp, final)
	}
	for id, w := range s.workers {
		wt := map[string]string{"prefill": "Prefill", "decode": "Decode"}[w.role]
		rel := fmt.Sprintf("%s/%s/generate/%x", o.Namespace, w.role, id)
		if err := write("v1/instances", rel, map[string]any{"type": "Endpoint", "namespace": o.Namespace, "component": w.role, "endpoint": "generate",
			"instance_id": id, "transport": map[string]string{"tcp": fmt.Sprintf("127.0.0.1:0/%x", id)}}); err != nil {
			return err
		}
		w.files = append(w.files, lastFile)
		if err := write("v1/mdc", rel, map[string]any{"type": "Model", "namespace": o.Namespace, "component": w.role, "endpoint": "generate", "instance_id": id,
			"card_json": map[string]any{"display_name": o.Model, "worker_type": wt, "kv_cache_block_size": o.BlockSize,
				"runtime_config": map[string]any{"total_kv_blocks": o.TotalKVBlocks, "max_num_batched_tokens": 8192, "max_num_seqs": 256,
					"context_length": 32768, "data_parallel_start_rank": 0, "data_parallel_size": 1}}}); err != nil {
			return err
		}
		w.files = append(w.files, lastFile)
		ch := fmt.Sprintf("namespace/%s/component/%s/endpoint/generate/topic/kv_metrics/%x", wire.EncodeSegment(o.Namespace), w.role, w.publisherID)
		if err := write("v1/event_channels", ch, map[string]any{"type": "EventChannel",
			"scope": map[string]any{"kind": "endpoint", "endpoint": map[string]string{"namespace": o.Namespace, "component": w.role, "name": "generate"}},
			"topic": "kv_metrics", "instance_id": w.publisherID,
			"transport": map[string]any{"kind": "Zmq", "config": map[string]string{"endpoint": w.endpoint}}}); err != nil {
			return err
		}
	}
	return nil
}

// keepAlive touches the records as Dynamo's file store owner does.
func (s *Sim) keepAlive(ctx context.Context) {
	t := time.NewTicker(keepAlive)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, w := range s.workers {
				w.mu.Lock()
				dead := w.dead
				w.mu.Unlock()
				if dead {
					continue // a killed worker's records expire with its TTL
				}
				for _, f := range w.files {
					_ = os.Chtimes(f, now, now)
				}
			}
		}
	}
}

// Stop removes the records and closes the publishers.
func (s *Sim) Stop() {
	s.cancel()
	s.done.Wait()
	for _, f := range s.files {
		_ = os.Remove(f)
	}
	for _, w := range s.workers {
		_ = w.pub.Close()
	}
}

// Model is the model the fleet serves.
func (s *Sim) Model() string { return s.opts.Model }

// publish sends the worker's current load (change-driven, as upstream).
func (w *simWorker) publish() {
	w.mu.Lock()
	if w.silent || w.paused || w.dead {
		w.mu.Unlock()
		return
	}
	l := wire.ActiveLoad{WorkerID: w.id, ActiveDecodeBlocks: ptr(w.decodeBlocks), ActivePrefillTokens: ptr(w.prefillTokens)}
	seq := w.seq
	w.seq++
	w.mu.Unlock()
	_ = w.pub.Send(zmq4.NewMsgFrom(wire.EncodeEventMessage("kv_metrics", w.publisherID, seq, uint64(time.Now().UnixMilli()), wire.EncodeActiveLoad(l))...))
}

func ptr(v uint64) *uint64 { return &v }

func (w *simWorker) adjust(prefill, decode int64) {
	w.mu.Lock()
	w.prefillTokens = uint64(int64(w.prefillTokens) + prefill)
	w.decodeBlocks = uint64(int64(w.decodeBlocks) + decode)
	w.mu.Unlock()
	w.publish()
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

// execute runs a pinned request: prefill on the prefill worker (or on the
// decode worker itself), then decode, streaming tokens as they come.
func (s *Sim) execute(w http.ResponseWriter, r *http.Request, rec Recorded) {
	var q struct {
		Stream    bool `json:"stream"`
		MaxTokens int  `json:"max_tokens"`
		Messages  []struct {
			Content any `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(rec.Body, &q)
	var text strings.Builder
	for _, m := range q.Messages {
		fmt.Fprint(&text, m.Content, "\n")
	}
	prompt, blocks, shaped := promptShape(text.String())
	if !shaped {
		prompt = text.Len()/4 + 4
	}
	out := q.MaxTokens
	if out <= 0 {
		out = 16
	}
	out = min(out, maxOutputTokens)
	ctx := r.Context()
	decodeW := s.workers[*rec.Worker]
	prefillW := decodeW
	if rec.Prefill != nil {
		prefillW = s.workers[*rec.Prefill]
	}
	if decodeW == nil || prefillW == nil || decodeW.isDead() || prefillW.isDead() {
		http.Error(w, UnknownInstanceError, http.StatusInternalServerError)
		return
	}
	if err := decodeW.waitResumed(ctx); err != nil {
		return
	}
	if err := prefillW.waitResumed(ctx); err != nil {
		return
	}
	cached := 0
	if len(blocks) > 0 {
		cached = min(prefillW.cache.lookupAndInsert(blocks)*TraceBlockTokens, prompt)
	}
	w.Header().Set("x-sim-prompt-tokens", strconv.Itoa(prompt))
	w.Header().Set("x-sim-cached-tokens", strconv.Itoa(cached))
	uncached := prompt - cached
	prefillW.adjust(int64(uncached), 0)
	err := s.sleep(ctx, time.Duration(uncached)*prefillPerToken)
	prefillW.adjust(-int64(uncached), 0)
	if err != nil {
		return
	}
	kvBlocks := int64((prompt+out)/s.opts.BlockSize + 1)
	decodeW.adjust(0, kvBlocks)
	defer decodeW.adjust(0, -kvBlocks)
	if !q.Stream {
		for range out {
			if s.sleep(ctx, decodePerToken) != nil {
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "cmpl-sim", "object": "chat.completion", "model": rec.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "length", "message": map[string]any{"role": "assistant", "content": words(out)}}},
			"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out}})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for i := range out {
		if s.sleep(ctx, decodePerToken) != nil {
			return
		}
		fmt.Fprintf(w, "data: %s\n\n", mustJSON(map[string]any{"id": "cmpl-sim", "object": "chat.completion.chunk", "model": rec.Model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": demoWords[i%len(demoWords)] + " "}}}}))
		if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

var demoWords = strings.Fields("Dynamo pinned this request to a prefill and a decode worker chosen by their live load")

func words(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = demoWords[i%len(demoWords)]
	}
	return strings.Join(parts, " ")
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
	FaultResume        Fault = "resume"         // undo pause and stop-publisher
)

// ErrNoWorker is returned for an unknown worker id.
var ErrNoWorker = errors.New("no such simulated worker")

// Inject applies a fault to the worker with instance id.
func (s *Sim) Inject(id uint64, f Fault) error {
	w := s.workers[id]
	if w == nil {
		return ErrNoWorker
	}
	w.mu.Lock()
	switch f {
	case FaultKill:
		w.dead = true
	case FaultStopPublisher:
		w.silent = true
	case FaultPause:
		if !w.paused {
			w.paused, w.resume = true, make(chan struct{})
		}
	case FaultResume:
		w.silent = false
		if w.paused {
			w.paused = false
			close(w.resume)
		}
	default:
		w.mu.Unlock()
		return fmt.Errorf("unknown fault %q", f)
	}
	w.mu.Unlock()
	if f == FaultResume {
		w.publish()
	}
	return nil
}

// WorkerInfo describes a simulated worker.
type WorkerInfo struct {
	InstanceID  uint64 `json:"instance_id"`
	Role        string `json:"role"`
	PublisherID uint64 `json:"publisher_id"`
	Dead        bool   `json:"dead"`
	Silent      bool   `json:"silent"`
	Paused      bool   `json:"paused"`
}

// Workers lists the simulated workers.
func (s *Sim) Workers() []WorkerInfo {
	var out []WorkerInfo
	for _, w := range s.workers {
		w.mu.Lock()
		out = append(out, WorkerInfo{InstanceID: w.id, Role: w.role, PublisherID: w.publisherID, Dead: w.dead, Silent: w.silent, Paused: w.paused})
		w.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int { return cmp.Compare(a.InstanceID, b.InstanceID) })
	return out
}

// Handler serves the frontend and, under /sim/, the control API:
// GET /sim/workers, POST /sim/workers/{id}/{kill|stop-publisher|pause|resume}.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sim/workers", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Workers())
	})
	mux.HandleFunc("POST /sim/workers/{id}/{fault}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.PathValue("id"), 0, 64)
		if err != nil {
			http.Error(w, "worker id must be a number (decimal or 0x hex)", http.StatusBadRequest)
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
	mux.Handle("/", s.Frontend)
	return mux
}
