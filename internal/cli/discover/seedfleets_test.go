package discover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/continuum-router/continuum/internal/cli/discover"
	"github.com/continuum-router/continuum/internal/testutil"
)

// seedFleet is one fleet as Dynamo writes it: etcd keys (with {ns} for the
// case's namespace) and their values, and what discover must make of it.
type seedFleet struct {
	name    string
	records [][2]string
	// workers: "<instance hex> <role> <model>"; publishers: "<publisher id>
	// <topic>"; problems: "<kind> <keys, comma-separated> <key count>".
	workers, publishers, problems []string
	check                         func(t *testing.T, rep discover.Report)
	// fileOnly: the fleet is too large for the test etcd's request limit.
	fileOnly bool
}

const (
	seedEndpoint = `{"type":"Endpoint","namespace":"dynamo","component":"prefill","endpoint":"generate","instance_id":7465265302745285,` +
		`"transport":{"tcp":"10.0.0.4:31000/1a7f2b/dynamo/prefill/generate"},"device_type":"cuda","request_plane_codec":"msgpack"}`
	seedModel = `{"type":"Model","namespace":"dynamo","component":"prefill","endpoint":"generate","instance_id":7465265302745285,` +
		`"card_json":{"display_name":"Qwen/Qwen3-32B","worker_type":"Prefill","kv_cache_block_size":64,"runtime_config":{` +
		`"total_kv_blocks":12000,"max_num_batched_tokens":8192,"max_num_seqs":256,"context_length":32768,` +
		`"data_parallel_start_rank":0,"data_parallel_size":1,"disaggregated_endpoint":"dynamo/decode/generate"}}}`
	seedChannel = `{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"dynamo","component":"decode","name":"generate"}},` +
		`"topic":"kv_metrics","instance_id":2046539,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.7:41000"}}}`
)

// ep and card write an Endpoint and a Model record of component/generate.
func ep(component string, id any) string {
	return fmt.Sprintf(`{"type":"Endpoint","component":%q,"endpoint":"generate","instance_id":%s,"transport":{"tcp":"10.0.0.9:1/x"}}`, component, jsonOf(id))
}

func card(component string, id any, model, workerType string) string {
	return fmt.Sprintf(`{"type":"Model","component":%q,"endpoint":"generate","instance_id":%s,"card_json":{"display_name":%q,"worker_type":%q}}`,
		component, jsonOf(id), model, workerType)
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func channel(id uint64, port int) string {
	return fmt.Sprintf(`{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"x","component":"backend","name":"generate"}},`+
		`"topic":"kv_metrics","instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.7:%d"}}}`, id, port)
}

const chanKey = "v1/event_channels/namespace/{ns}/component/backend/endpoint/generate/topic/kv_metrics/"

// bigCard is a decode card whose JSON is larger than the 1 MiB a card is
// kept whole up to.
var bigCard = `{"type":"Model","component":"backend","endpoint":"generate","instance_id":1,"card_json":{"display_name":"big","worker_type":"Decode",` +
	`"kv_cache_block_size":32,"runtime_config":{"total_kv_blocks":500},"padding":"` + strings.Repeat("x", 1<<20) + `"}}`

var seedFleets = []seedFleet{
	{
		// The record examples as the design shows them: only the generate
		// endpoint becomes a worker, joined with its card; the channel is a
		// publisher.
		name: "seed-records",
		records: [][2]string{
			{"v1/instances/{ns}/prefill/generate/1a859e868630c5", seedEndpoint},
			{"v1/instances/{ns}/prefill/load_metrics/1a859e868630c5", strings.Replace(seedEndpoint, `"generate"`, `"load_metrics"`, 1)},
			{"v1/instances/{ns}/prefill/clear_kv_blocks/1a859e868630c5", strings.Replace(seedEndpoint, `"generate"`, `"clear_kv_blocks"`, 1)},
			{"v1/mdc/{ns}/prefill/generate/1a859e868630c5", seedModel},
			{"v1/event_channels/namespace/{ns}/component/decode/endpoint/generate/topic/kv_metrics/1f3a4b", seedChannel},
		},
		workers:    []string{"1a859e868630c5 prefill Qwen/Qwen3-32B"},
		publishers: []string{"2046539 kv_metrics"},
		check: func(t *testing.T, rep discover.Report) {
			w := rep.Workers[0]
			c := w.Capacity
			if w.WorkerID != "7465265302745285" || w.BlockSize == nil || *w.BlockSize != 64 || w.DPStartRank != 0 || w.DPSize != 1 ||
				c.TotalKVBlocks == nil || *c.TotalKVBlocks != 12000 || c.MaxNumBatchedTokens == nil || *c.MaxNumBatchedTokens != 8192 ||
				string(w.DisaggregatedEndpoint) != `"dynamo/decode/generate"` {
				t.Errorf("worker %+v", w)
			}
		},
	},
	{
		// An instance id written as a JSON number or a hex string is one
		// key: each worker joins the card that writes it the other way.
		name: "id-forms",
		records: [][2]string{
			{"v1/instances/{ns}/backend/generate/1a859e868630c5", ep("backend", "1a859e868630c5")},
			{"v1/mdc/{ns}/backend/generate/1a859e868630c5", card("backend", 7465265302745285, "m1", "Decode")},
			{"v1/instances/{ns}/backend/generate/1a7f2b", ep("backend", 1736491)},
			{"v1/mdc/{ns}/backend/generate/1a7f2b", card("backend", "1a7f2b", "m2", "Decode")},
		},
		workers: []string{"1a859e868630c5 decode m1", "1a7f2b decode m2"},
	},
	{
		// A legacy card (component and endpoint empty) joins by instance id
		// alone; a scoped base card of the same instance wins over it.
		name: "legacy-cards",
		records: [][2]string{
			{"v1/instances/{ns}/backend/generate/1", ep("backend", 1)},
			{"v1/mdc/{ns}///1", `{"type":"Model","component":"","endpoint":"","instance_id":1,"card_json":{"display_name":"legacy","worker_type":"Decode"}}`},
			{"v1/instances/{ns}/backend/generate/2", ep("backend", 2)},
			{"v1/mdc/{ns}///2", `{"type":"Model","component":"","endpoint":"","instance_id":2,"card_json":{"display_name":"legacy","worker_type":"Decode"}}`},
			{"v1/mdc/{ns}/backend/generate/2", card("backend", 2, "scoped", "Decode")},
		},
		workers: []string{"1 decode legacy", "2 decode scoped"},
	},
	{
		// A card with a model_suffix (a LoRA adapter's) is never joined: a
		// worker with only one has no card; with a base card too, the base
		// card is its card.
		name: "lora-cards",
		records: [][2]string{
			{"v1/instances/{ns}/decode/generate/1", ep("decode", 1)},
			{"v1/mdc/{ns}/decode/generate/1/my-lora", `{"type":"Model","component":"decode","endpoint":"generate","instance_id":1,"model_suffix":"my-lora","card_json":{"display_name":"adapter","worker_type":"Decode"}}`},
			{"v1/instances/{ns}/decode/generate/2", ep("decode", 2)},
			{"v1/mdc/{ns}/decode/generate/2", card("decode", 2, "base", "Decode")},
			{"v1/mdc/{ns}/decode/generate/2/my-lora", `{"type":"Model","component":"decode","endpoint":"generate","instance_id":2,"model_suffix":"my-lora","card_json":{"display_name":"adapter","worker_type":"Decode"}}`},
		},
		workers: []string{"1 decode ", "2 decode base"},
	},
	{
		// Only generate endpoints become workers: an instance that registers
		// load_metrics and clear_kv_blocks and a card, but no generate, is
		// none, and says nothing.
		name: "generate-only",
		records: [][2]string{
			{"v1/instances/{ns}/decode/load_metrics/1", `{"type":"Endpoint","component":"decode","endpoint":"load_metrics","instance_id":1}`},
			{"v1/instances/{ns}/decode/clear_kv_blocks/1", `{"type":"Endpoint","component":"decode","endpoint":"clear_kv_blocks","instance_id":1}`},
			{"v1/mdc/{ns}/decode/generate/1", card("decode", 1, "m", "Decode")},
		},
	},
	{
		// Role agreement: a prefill or decode component and a card naming
		// another role exclude the worker; a component naming no role lets
		// the card decide; a worker without a card follows its component;
		// an unrecognised worker_type claims nothing (the component decides,
		// or the worker is unknown: shown, never routed to).
		name: "roles",
		records: [][2]string{
			{"v1/instances/{ns}/prefill/generate/1", ep("prefill", 1)},
			{"v1/mdc/{ns}/prefill/generate/1", card("prefill", 1, "m", "Decode")},
			{"v1/instances/{ns}/backend/generate/2", ep("backend", 2)},
			{"v1/mdc/{ns}/backend/generate/2", card("backend", 2, "m", "decode")},
			{"v1/instances/{ns}/decode/generate/3", ep("decode", 3)},
			{"v1/instances/{ns}/prefill/generate/4", ep("prefill", 4)},
			{"v1/mdc/{ns}/prefill/generate/4", card("prefill", 4, "m", "Drafter")},
			{"v1/instances/{ns}/backend/generate/5", ep("backend", 5)},
			{"v1/mdc/{ns}/backend/generate/5", card("backend", 5, "m", "Drafter")},
			{"v1/instances/{ns}/backend/generate/6", ep("backend", 6)},
		},
		workers: []string{"3 decode ", "6 unknown ", "2 decode m", "4 prefill m", "5 unknown m"},
		problems: []string{
			"role_conflict v1/instances/{ns}/prefill/generate/1,v1/mdc/{ns}/prefill/generate/1 2",
			"unknown_role v1/instances/{ns}/backend/generate/5 1",
			"unknown_role v1/instances/{ns}/backend/generate/6 1",
		},
	},
	{
		// Every worker_type spelling Dynamo has written claims its role.
		name: "spellings",
		records: [][2]string{
			{"v1/instances/{ns}/backend/generate/1", ep("backend", 1)},
			{"v1/mdc/{ns}/backend/generate/1", card("backend", 1, "m", "Prefill")},
			{"v1/instances/{ns}/backend/generate/2", ep("backend", 2)},
			{"v1/mdc/{ns}/backend/generate/2", card("backend", 2, "m", "prefill")},
			{"v1/instances/{ns}/backend/generate/3", ep("backend", 3)},
			{"v1/mdc/{ns}/backend/generate/3", card("backend", 3, "m", "Decode")},
			{"v1/instances/{ns}/backend/generate/4", ep("backend", 4)},
			{"v1/mdc/{ns}/backend/generate/4", card("backend", 4, "m", "decode")},
			{"v1/instances/{ns}/backend/generate/5", ep("backend", 5)},
			{"v1/mdc/{ns}/backend/generate/5", card("backend", 5, "m", "Prefill | Decode")},
			{"v1/instances/{ns}/backend/generate/6", ep("backend", 6)},
			{"v1/mdc/{ns}/backend/generate/6", card("backend", 6, "m", "aggregated")},
			{"v1/instances/{ns}/backend/generate/7", ep("backend", 7)},
			{"v1/mdc/{ns}/backend/generate/7", card("backend", 7, "m", "Aggregated")},
		},
		workers: []string{"5 aggregated m", "6 aggregated m", "7 aggregated m", "3 decode m", "4 decode m", "1 prefill m", "2 prefill m"},
	},
	{
		// One record that fails to parse (not JSON, or an Endpoint without
		// instance_id) is skipped alone; its neighbours stand.
		name: "isolation",
		records: [][2]string{
			{"v1/instances/{ns}/decode/generate/1", `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":`},
			{"v1/instances/{ns}/decode/generate/2", `{"type":"Endpoint","component":"decode","endpoint":"generate"}`},
			{"v1/instances/{ns}/decode/generate/3", ep("decode", 3)},
			{"v1/mdc/{ns}/decode/generate/3", card("decode", 3, "m", "Decode")},
			{"v1/mdc/{ns}/decode/generate/4", `not json`},
			{chanKey + "5", `{"type":"EventChannel"`},
			{chanKey + "6", channel(6, 4006)},
		},
		workers:    []string{"3 decode m"},
		publishers: []string{"6 kv_metrics"},
		problems: []string{
			"malformed " + chanKey + "5 1",
			"malformed v1/instances/{ns}/decode/generate/1 1",
			"malformed v1/instances/{ns}/decode/generate/2 1",
			"malformed v1/mdc/{ns}/decode/generate/4 1",
		},
	},
	{
		// Two generate records claiming one instance id make no worker
		// (whatever their components, and whichever spelling of the id).
		name: "duplicate-generate",
		records: [][2]string{
			{"v1/instances/{ns}/decode/generate/1", ep("decode", 1)},
			{"v1/instances/{ns}/prefill/generate/1", ep("prefill", "1")},
			{"v1/instances/{ns}/decode/load_metrics/1", `{"type":"Endpoint","component":"decode","endpoint":"load_metrics","instance_id":1}`},
			{"v1/instances/{ns}/decode/generate/2", ep("decode", 2)},
		},
		workers:  []string{"2 decode "},
		problems: []string{"duplicate v1/instances/{ns}/decode/generate/1,v1/instances/{ns}/prefill/generate/1 2"},
	},
	{
		// Two base cards claiming one worker's endpoint: the worker stays,
		// without a card (its component gives its role).
		name: "duplicate-card",
		records: [][2]string{
			{"v1/instances/{ns}/decode/generate/1", ep("decode", 1)},
			{"v1/mdc/{ns}/decode/generate/1", card("decode", 1, "m", "Decode")},
			{"v1/mdc/{ns}/decode/generate/ff", card("decode", 1, "forged", "Decode")},
		},
		workers:  []string{"1 decode "},
		problems: []string{"duplicate v1/mdc/{ns}/decode/generate/1,v1/mdc/{ns}/decode/generate/ff 2"},
	},
	{
		// Two channels claiming one publisher id make no publisher; the
		// worker stays (quiet).
		name: "duplicate-publisher",
		records: [][2]string{
			{"v1/instances/{ns}/backend/generate/1", ep("backend", 1)},
			{"v1/mdc/{ns}/backend/generate/1", card("backend", 1, "m", "Decode")},
			{chanKey + "7", channel(7, 4007)},
			{chanKey + "8", channel(7, 4008)},
			{chanKey + "9", channel(9, 4009)},
		},
		workers:    []string{"1 decode m"},
		publishers: []string{"9 kv_metrics"},
		problems:   []string{"duplicate " + chanKey + "7," + chanKey + "8 2"},
	},
	{
		// Five claimants: every one is rejected, at most four keys are
		// shown and the count says five.
		name: "duplicate-five",
		records: [][2]string{
			{"v1/instances/{ns}/decode/generate/1", ep("decode", 1)},
			{"v1/instances/{ns}/decode/generate/2", ep("decode", 1)},
			{"v1/instances/{ns}/decode/generate/3", ep("decode", 1)},
			{"v1/instances/{ns}/decode/generate/4", ep("decode", 1)},
			{"v1/instances/{ns}/decode/generate/5", ep("decode", 1)},
		},
		problems: []string{"duplicate v1/instances/{ns}/decode/generate/1,v1/instances/{ns}/decode/generate/2," +
			"v1/instances/{ns}/decode/generate/3,v1/instances/{ns}/decode/generate/4 5"},
	},
	{
		// N-2 records: every field optional (the key names what the value
		// leaves out), unknown fields ignored, a typed card field that does
		// not parse costs only that field, and the rest of the card stands.
		name: "n-2",
		records: [][2]string{
			{"v1/instances/{ns}/decode/generate/1", `{"instance_id":1}`},
			{"v1/mdc/{ns}/decode/generate/1", `{"card_json":{"display_name":"old"}}`},
			{"v1/instances/{ns}/backend/generate/2", `{"type":"Endpoint","component":"backend","endpoint":"generate","instance_id":2,` +
				`"future_field":{"nested":[1,2]},"transport":{"quic":"x"},"request_plane_codec":"json"}`},
			{"v1/mdc/{ns}/backend/generate/2", `{"type":"Model","component":"backend","endpoint":"generate","instance_id":2,"future":true,` +
				`"card_json":{"display_name":"m","worker_type":"decode","kv_cache_block_size":"sixty-four","aliases":["x"],` +
				`"runtime_config":{"total_kv_blocks":100,"max_num_seqs":-1,"taints":["a"]}}}`},
		},
		workers:  []string{"2 decode m", "1 decode old"},
		problems: []string{"card_fields v1/mdc/{ns}/backend/generate/2 1"},
		check: func(t *testing.T, rep discover.Report) {
			for _, w := range rep.Workers {
				if w.WorkerID == "2" && (w.BlockSize != nil || w.Capacity.TotalKVBlocks == nil || *w.Capacity.TotalKVBlocks != 100 || w.Capacity.MaxNumSeqs != nil) {
					t.Errorf("worker 2: %+v", w)
				}
			}
		},
	},
	{
		// A card over 1 MiB loses its opaque JSON, not its typed fields:
		// the worker is published with its role, block size and capacity.
		name: "card-over-1mib",
		records: [][2]string{
			{"v1/instances/{ns}/backend/generate/1", ep("backend", 1)},
			{"v1/mdc/{ns}/backend/generate/1", bigCard},
		},
		workers:  []string{"1 decode big"},
		problems: []string{"card_dropped v1/mdc/{ns}/backend/generate/1 1"},
		check: func(t *testing.T, rep discover.Report) {
			if w := rep.Workers[0]; w.BlockSize == nil || *w.BlockSize != 32 || w.Capacity.TotalKVBlocks == nil || *w.Capacity.TotalKVBlocks != 500 {
				t.Errorf("worker %+v", w)
			}
		},
	},
	{
		// A value over 16 MiB is refused before it is parsed; the rest of
		// the fleet stands.
		name:     "record-over-16mib",
		fileOnly: true,
		records: [][2]string{
			{"v1/instances/{ns}/decode/generate/1", `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":1,"pad":"` +
				strings.Repeat("x", 16<<20) + `"}`},
			{"v1/instances/{ns}/decode/generate/2", ep("decode", 2)},
		},
		workers:  []string{"2 decode "},
		problems: []string{"oversized v1/instances/{ns}/decode/generate/1 1"},
	},
}

// TestDiscoverSeedFleets: each fleet, written into a real etcd and into a
// file store laid out as Dynamo's (a directory per bucket, a file per key
// named by the percent-encoded key), gives the same workers, publishers and
// problems through `discover -o json`.
func TestDiscoverSeedFleets(t *testing.T) {
	t.Parallel()
	srv := testutil.StartEtcd(t, testutil.EtcdOptions{})
	c := srv.Client(t, clientv3.Config{})
	for _, tc := range seedFleets {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.name
			sub := func(s string) string { return strings.ReplaceAll(s, "{ns}", ns) }
			root := t.TempDir()
			for _, r := range tc.records {
				key := sub(r[0])
				writeFileStore(t, root, key, r[1])
				if tc.fileOnly {
					continue
				}
				if _, err := c.Put(context.Background(), key, r[1]); err != nil {
					t.Fatal(err)
				}
			}
			for _, src := range []struct{ name string }{{"etcd"}, {"file"}} {
				if tc.fileOnly && src.name == "etcd" {
					continue
				}
				args := []string{"discover", "--namespace", ns, "-o", "json"}
				if src.name == "etcd" {
					args = append(args, "--etcd-endpoints", srv.Endpoint)
				} else {
					args = append(args, "--source", "file", "--file-root", root)
				}
				code, out, errOut := runCLI(t, context.Background(), args...)
				if code != 0 {
					t.Fatalf("%s: exit %d: %s", src.name, code, errOut)
				}
				var rep discover.Report
				if err := json.Unmarshal([]byte(out), &rep); err != nil {
					t.Fatalf("%s: %v\n%s", src.name, err, out)
				}
				var workers, pubs, probs []string
				for _, w := range rep.Workers {
					workers = append(workers, fmt.Sprintf("%s %s %s", w.InstanceID, w.Role, w.Model))
				}
				for _, p := range rep.Publishers {
					pubs = append(pubs, p.PublisherID+" "+p.Topic)
				}
				for _, p := range rep.Problems {
					probs = append(probs, fmt.Sprintf("%s %s %d", p.Kind, strings.Join(p.Keys, ","), p.KeyCount))
				}
				want := func(l []string) []string {
					out := make([]string, len(l))
					for i, s := range l {
						out[i] = sub(s)
					}
					return out
				}
				for _, cmp := range []struct {
					what      string
					got, want []string
				}{{"workers", workers, tc.workers}, {"publishers", pubs, tc.publishers}, {"problems", probs, want(tc.problems)}} {
					if !slices.Equal(cmp.got, cmp.want) {
						t.Errorf("%s: %s:\n  %s\nwant:\n  %s", src.name, cmp.what, strings.Join(cmp.got, "\n  "), strings.Join(cmp.want, "\n  "))
					}
				}
				if tc.check != nil && len(rep.Workers) > 0 {
					tc.check(t, rep)
				}
			}
		})
	}
}

// writeFileStore writes key's value where Dynamo's file store keeps it:
// <root>/<bucket>/<key relative to the bucket, every byte but ASCII letters
// and digits written %XX>, the bucket being the key's first two segments.
func writeFileStore(t *testing.T, root, key, value string) {
	t.Helper()
	parts := strings.SplitN(key, "/", 3)
	dir := filepath.Join(root, parts[0], parts[1])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var name strings.Builder
	for _, c := range []byte(parts[2]) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			name.WriteByte(c)
		} else {
			fmt.Fprintf(&name, "%%%02X", c)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, name.String()), []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
}
