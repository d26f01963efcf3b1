package testutil

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/wire"
)

// FileWorker is one worker of a fleet written to Dynamo's file store by a
// test: its Endpoint and Model records, and an EventChannel record for
// each publisher endpoint that is set.
type FileWorker struct {
	Namespace  string // default dynamo
	Component  string // default backend
	Role       string // the card's worker_type: Decode, Prefill, Aggregated (default Decode)
	Model      string // default test/model
	InstanceID uint64
	// LoadPublisherID and LoadEndpoint are its kv_metrics publisher;
	// KVPublisherID and KVEndpoint its kv-events publisher.
	LoadPublisherID uint64
	LoadEndpoint    string
	KVPublisherID   uint64
	KVEndpoint      string
	BlockSize       int // default 16
	TotalKVBlocks   int // default 1024
}

// FileRecord is one record of a worker: its bucket and key.
type FileRecord struct{ Bucket, Key string }

// WriteFileWorker writes w's records under root (a temp file renamed into
// place, as Dynamo does) and returns them.
func WriteFileWorker(t testing.TB, root string, w FileWorker) []FileRecord {
	t.Helper()
	if w.Namespace == "" {
		w.Namespace = "dynamo"
	}
	if w.Component == "" {
		w.Component = "backend"
	}
	if w.Role == "" {
		w.Role = "Decode"
	}
	if w.Model == "" {
		w.Model = "test/model"
	}
	if w.BlockSize == 0 {
		w.BlockSize = 16
	}
	if w.TotalKVBlocks == 0 {
		w.TotalKVBlocks = 1024
	}
	rel := fmt.Sprintf("%s/%s/generate/%x", w.Namespace, w.Component, w.InstanceID)
	var out []FileRecord
	put := func(bucket, key string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, bucket)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, fmt.Sprintf(".tmp_%x_%d", w.InstanceID, len(out)))
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, wire.FileStoreName(key))); err != nil {
			t.Fatal(err)
		}
		out = append(out, FileRecord{bucket, key})
	}
	put("v1/instances", rel, map[string]any{"type": "Endpoint", "namespace": w.Namespace, "component": w.Component,
		"endpoint": "generate", "instance_id": w.InstanceID, "transport": map[string]string{"tcp": fmt.Sprintf("127.0.0.1:1/%x", w.InstanceID)}})
	put("v1/mdc", rel, map[string]any{"type": "Model", "namespace": w.Namespace, "component": w.Component, "endpoint": "generate",
		"instance_id": w.InstanceID, "card_json": map[string]any{"display_name": w.Model, "kv_cache_block_size": w.BlockSize, "worker_type": w.Role,
			"runtime_config": map[string]any{"total_kv_blocks": w.TotalKVBlocks, "max_num_batched_tokens": 8192, "max_num_seqs": 256,
				"context_length": 32768, "data_parallel_start_rank": 0}}})
	for _, c := range []struct {
		topic, endpoint string
		id              uint64
	}{{"kv_metrics", w.LoadEndpoint, w.LoadPublisherID}, {"kv-events", w.KVEndpoint, w.KVPublisherID}} {
		if c.endpoint == "" {
			continue
		}
		key := fmt.Sprintf("namespace/%s/component/%s/endpoint/generate/topic/%s/%x", wire.EncodeSegment(w.Namespace),
			wire.EncodeSegment(w.Component), wire.EncodeSegment(c.topic), c.id)
		put("v1/event_channels", key, map[string]any{"type": "EventChannel",
			"scope": map[string]any{"kind": "endpoint", "endpoint": map[string]string{"namespace": w.Namespace, "component": w.Component, "name": "generate"}},
			"topic": c.topic, "instance_id": c.id,
			"transport": map[string]any{"kind": "Zmq", "config": map[string]string{"endpoint": c.endpoint}}})
	}
	return out
}

// RemoveFileRecords deletes records a test wrote.
func RemoveFileRecords(t testing.TB, root string, recs []FileRecord) {
	t.Helper()
	for _, r := range recs {
		if err := os.Remove(filepath.Join(root, r.Bucket, wire.FileStoreName(r.Key))); err != nil {
			t.Fatal(err)
		}
	}
}

// KeepFileRecordsAlive touches every record under root every TTL/3, as a
// worker keeps its records alive, until the test ends.
func KeepFileRecordsAlive(t testing.TB, root string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						_ = os.Chtimes(path, now, now)
					}
					return nil
				})
			}
		}
	}()
}
