package fleet_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/continuum-router/continuum/internal/admin"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/wire"
	"github.com/continuum-router/continuum/internal/testutil"
)

type (
	event = testutil.DynamoEvent
	want  = testutil.DynamoWant
)

var t0 = time.Date(2026, 9, 23, 4, 11, 2, 0, time.UTC)

func apply(t *testing.T, r *fleet.Reducer, events []event, clock *time.Time) {
	t.Helper()
	for _, e := range events {
		*clock = clock.Add(time.Second)
		switch {
		case e.Put != "":
			r.Put(e.Put, e.Bytes(t), *clock)
		case e.Delete != "":
			r.Delete(e.Delete)
		case e.ResyncBegin:
			r.ResyncBegin()
		case e.ResyncEnd:
			r.ResyncEnd()
		}
	}
}

// normalise turns views and wants into comparable JSON values.
func normalise(t *testing.T, v any, worker bool) []any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	for _, item := range out {
		m := item.(map[string]any)
		if !worker {
			continue
		}
		delete(m, "first_seen")
		delete(m, "last_updated")
		if _, ok := m["dp_size"]; !ok {
			m["dp_size"] = 1.0
		}
		for _, k := range []string{"dp_start_rank"} {
			if _, ok := m[k]; !ok {
				m[k] = 0.0
			}
		}
		for _, k := range []string{"block_size", "disaggregated_endpoint"} {
			if _, ok := m[k]; !ok {
				m[k] = nil
			}
		}
		capacity, _ := m["capacity"].(map[string]any)
		if capacity == nil {
			capacity = map[string]any{}
		}
		for _, k := range []string{"total_kv_blocks", "max_num_batched_tokens", "max_num_seqs", "context_length"} {
			if _, ok := capacity[k]; !ok {
				capacity[k] = nil
			}
		}
		m["capacity"] = capacity
	}
	return out
}

func check(t *testing.T, snap *fleet.Snapshot, w want) {
	t.Helper()
	workers, publishers, problems := admin.Views(snap)
	if got, exp := normalise(t, workers, true), normalise(t, orEmpty(w.Workers), true); !reflect.DeepEqual(got, exp) {
		t.Errorf("workers:\n got %s\nwant %s", dump(got), dump(exp))
	}
	if w.Publishers != nil {
		got := normalise(t, publishers, false)
		for _, v := range got {
			if m, ok := v.(map[string]any); ok {
				delete(m, "subject") // derived from the other fields (TestPublisherSubject)
			}
		}
		if exp := normalise(t, w.Publishers, false); !reflect.DeepEqual(got, exp) {
			t.Errorf("publishers:\n got %s\nwant %s", dump(got), dump(exp))
		}
	}
	var gotProblems, wantProblems []string
	for _, p := range problems {
		gotProblems = append(gotProblems, p.Kind+" "+strings.Join(p.Keys, ","))
	}
	for _, p := range w.Problems {
		wantProblems = append(wantProblems, p.Kind+" "+strings.Join(p.Keys, ","))
	}
	if !reflect.DeepEqual(gotProblems, wantProblems) {
		t.Errorf("problems:\n got %q\nwant %q\n(all: %+v)", gotProblems, wantProblems, problems)
	}
}

func orEmpty(v []map[string]any) []map[string]any {
	if v == nil {
		return []map[string]any{}
	}
	return v
}

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", " ")
	return string(b)
}

func TestFixtures(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../../../testdata/dynamo/*.yaml")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			fx := testutil.LoadDynamoFixture(t, file)
			r := fleet.NewReducer()
			clock := t0
			apply(t, r, fx.Events, &clock)
			check(t, r.Build(clock), fx.Want)
			if fx.Then != nil {
				apply(t, r, fx.Then.Events, &clock)
				check(t, r.Build(clock), fx.Then.Want)
			}
		})
	}
}

func endpoint(id int) []byte {
	return fmt.Appendf(nil, `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":%d}`, id)
}

func key(id int) string { return fmt.Sprintf("v1/instances/dynamo/decode/generate/%x", id) }

// TestFirstSeenSurvivesResync: a resync that re-puts the same records keeps
// first_seen and last_updated and leaves the reducer clean.
func TestFirstSeenSurvivesResync(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	r.Put(key(1), endpoint(1), t0)
	first := r.Build(t0.Add(time.Second))
	r.ResyncBegin()
	r.Put(key(1), endpoint(1), t0.Add(time.Hour))
	r.ResyncEnd()
	if r.Dirty() {
		t.Error("an idempotent resync made the reducer dirty")
	}
	second := r.Build(t0.Add(2 * time.Hour))
	if !workers(second)[0].FirstSeen.Equal(workers(first)[0].FirstSeen) || !workers(second)[0].LastUpdated.Equal(t0) {
		t.Errorf("first_seen %v -> %v, last_updated %v", workers(first)[0].FirstSeen, workers(second)[0].FirstSeen, workers(second)[0].LastUpdated)
	}
	// A changed value updates last_updated but not first_seen.
	r.Put(key(1), []byte(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":1,"transport":{"tcp":"new"}}`), t0.Add(3*time.Hour))
	third := r.Build(t0.Add(4 * time.Hour))
	if !workers(third)[0].FirstSeen.Equal(workers(first)[0].FirstSeen) || !workers(third)[0].LastUpdated.Equal(t0.Add(3*time.Hour)) {
		t.Errorf("after update: %+v", workers(third)[0])
	}
	// Gone and back: a new first_seen.
	r.Delete(key(1))
	r.Build(t0.Add(5 * time.Hour))
	r.Put(key(1), endpoint(1), t0.Add(6*time.Hour))
	if got := workers(r.Build(t0.Add(7 * time.Hour)))[0].FirstSeen; !got.Equal(t0.Add(7 * time.Hour)) {
		t.Errorf("returning worker first_seen %v", got)
	}
}

func TestKeyspaceCap(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	for i := range fleet.MaxRecordsPerKeyspace + 10 {
		r.Put(key(i), endpoint(i), t0)
	}
	snap := r.Build(t0)
	if snap.Workers.Len() != fleet.MaxRecordsPerKeyspace {
		t.Fatalf("%d workers held", snap.Workers.Len())
	}
	if len(snap.Problems) != 1 || snap.Problems[0].Kind != fleet.ProblemOverCapacity || !strings.Contains(snap.Problems[0].Reason, "new instances keys refused") {
		t.Fatalf("problems %+v", snap.Problems)
	}
	// Updates of held keys still apply.
	r.Put(key(0), []byte(`{"type":"Endpoint","component":"prefill","endpoint":"generate","instance_id":0}`), t0)
	if w := workers(r.Build(t0)); w[len(w)-1].Role != fleet.RolePrefill {
		t.Errorf("update of a held key was refused")
	}
}

// TestKeyspaceCapDuringResync: during a resync the cap counts the keys put
// again, so a worker that replaced a departed one at the cap is accepted,
// and an identical resync at the cap changes nothing.
func TestKeyspaceCapDuringResync(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	for i := range fleet.MaxRecordsPerKeyspace {
		r.Put(key(i), endpoint(i), t0)
	}
	r.Build(t0)
	r.ResyncBegin()
	for i := 1; i <= fleet.MaxRecordsPerKeyspace; i++ { // worker 0 left, worker 16384 came
		r.Put(key(i), endpoint(i), t0)
	}
	r.ResyncEnd()
	snap := r.Build(t0)
	if snap.Workers.Len() != fleet.MaxRecordsPerKeyspace || len(snap.Problems) != 0 {
		t.Fatalf("%d workers, problems %+v", snap.Workers.Len(), snap.Problems)
	}
	r.Put(key(fleet.MaxRecordsPerKeyspace+1), endpoint(fleet.MaxRecordsPerKeyspace+1), t0) // refused
	r.Build(t0)
	r.ResyncBegin()
	for i := 1; i <= fleet.MaxRecordsPerKeyspace+1; i++ {
		r.Put(key(i), endpoint(i), t0)
	}
	r.ResyncEnd()
	if r.Dirty() {
		t.Error("an identical resync at the cap made the reducer dirty")
	}
}

// TestKeyspaceCapResyncOrder: a resync reads the keyspace again as if it
// were empty, so the cap keeps the first MaxRecordsPerKeyspace keys the
// resync puts, in the order they come, whether held before or not. Held
// keys past that are dropped, and the refusal stays reported: keys refused
// while watching that sort before the held ones must not push the keyspace
// past its cap.
func TestKeyspaceCapResyncOrder(t *testing.T) {
	t.Parallel()
	const extra = 1000
	r := fleet.NewReducer()
	for i := extra; i < extra+fleet.MaxRecordsPerKeyspace; i++ {
		r.Put(key(i), endpoint(i), t0)
	}
	r.Build(t0)
	for i := range extra { // refused while watching
		r.Put(key(i), endpoint(i), t0.Add(time.Minute))
	}
	snap := r.Build(t0.Add(time.Minute))
	if snap.Workers.Len() != fleet.MaxRecordsPerKeyspace || len(snap.Problems) != 1 || snap.Problems[0].Kind != fleet.ProblemOverCapacity {
		t.Fatalf("before the resync: %d workers, problems %+v", snap.Workers.Len(), snap.Problems)
	}
	r.ResyncBegin()
	for i := range extra + fleet.MaxRecordsPerKeyspace { // the refused keys come first
		r.Put(key(i), endpoint(i), t0.Add(time.Hour))
	}
	r.ResyncEnd()
	snap = r.Build(t0.Add(2 * time.Hour))
	if snap.Workers.Len() != fleet.MaxRecordsPerKeyspace || r.Len() != fleet.MaxRecordsPerKeyspace {
		t.Fatalf("after the resync: %d workers, %d keys held; the cap is %d", snap.Workers.Len(), r.Len(), fleet.MaxRecordsPerKeyspace)
	}
	if len(snap.Problems) != 1 || snap.Problems[0].Kind != fleet.ProblemOverCapacity {
		t.Fatalf("the refusal is no longer reported: problems %+v", snap.Problems)
	}
	for i := range extra + fleet.MaxRecordsPerKeyspace {
		w := snap.Workers.Get(fleet.WorkerID{Namespace: "dynamo", InstanceID: uint64(i)})
		ok := w != nil
		switch {
		case i < fleet.MaxRecordsPerKeyspace && !ok:
			t.Fatalf("worker %d, among the first keys of the resync, is missing", i)
		case i >= fleet.MaxRecordsPerKeyspace && ok:
			t.Fatalf("worker %d, past the cap in the resync, is held", i)
		case ok && i >= extra && !w.FirstSeen.Equal(t0):
			t.Fatalf("worker %d held across the resync: first_seen %v, want %v", i, w.FirstSeen, t0)
		case ok && i < extra && !w.FirstSeen.Equal(t0.Add(2*time.Hour)):
			t.Fatalf("worker %d new in the resync: first_seen %v", i, w.FirstSeen)
		}
	}
	// A key deleted during a resync frees its room for the resync's next.
	r.ResyncBegin()
	for i := range fleet.MaxRecordsPerKeyspace {
		r.Put(key(i), endpoint(i), t0.Add(3*time.Hour))
	}
	r.Delete(key(0))
	r.Put(key(fleet.MaxRecordsPerKeyspace), endpoint(fleet.MaxRecordsPerKeyspace), t0.Add(3*time.Hour))
	r.ResyncEnd()
	snap = r.Build(t0.Add(4 * time.Hour))
	if snap.Workers.Len() != fleet.MaxRecordsPerKeyspace || snap.Workers.Get(fleet.WorkerID{Namespace: "dynamo", InstanceID: fleet.MaxRecordsPerKeyspace}) == nil || len(snap.Problems) != 0 {
		t.Fatalf("after a delete in the resync: %d workers, problems %+v", snap.Workers.Len(), snap.Problems)
	}
}

func TestRecordSizeCaps(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	big := make([]byte, fleet.MaxRecordBytes+1)
	r.Put(key(1), big, t0)
	pad := strings.Repeat("x", fleet.MaxRetainedCardBytes)
	r.Put(key(2), endpoint(2), t0)
	r.Put("v1/mdc/dynamo/decode/generate/2", fmt.Appendf(nil, `{"type":"Model","component":"decode","endpoint":"generate","instance_id":2,"card_json":{"display_name":"m","worker_type":"Decode","kv_cache_block_size":16,"migration_limit":2,"runtime_config":{"total_kv_blocks":9},"padding":%q}}`, pad), t0)
	snap := r.Build(t0)
	if snap.Workers.Len() != 1 {
		t.Fatalf("workers %+v", workers(snap))
	}
	w := workers(snap)[0]
	if w.Card == nil || w.Card.Raw != nil || w.Model != "m" || *w.BlockSize != 16 || *w.Capacity.TotalKVBlocks != 9 || w.MigrationLimit != 2 {
		t.Errorf("oversized card: typed fields must stay and the blob go: %+v card=%+v", w, w.Card)
	}
	kinds := map[string]bool{}
	for _, p := range snap.Problems {
		kinds[p.Kind] = true
	}
	if !kinds[fleet.ProblemOversized] || !kinds[fleet.ProblemCardDropped] {
		t.Errorf("problems %+v", snap.Problems)
	}
}

// TestProblemReasonBounded: a malformed record's problem quotes at most
// MaxProblemReasonBytes of what its parser found wrong, however large the
// bad value (an instance id as a megabyte string or array), and the cut
// keeps the reason valid UTF-8.
func TestProblemReasonBounded(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	r.Put(key(1), []byte(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":"`+strings.Repeat("é", 1<<19)+`"}`), t0)
	r.Put(key(2), []byte(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":[`+strings.Repeat("1,", 1<<19)+`1]}`), t0)
	snap := r.Build(t0)
	if len(snap.Problems) != 2 {
		t.Fatalf("problems %+v", snap.Problems)
	}
	for _, p := range snap.Problems {
		if p.Kind != fleet.ProblemMalformed || len(p.Reason) > fleet.MaxProblemReasonBytes+len("…") || !utf8.ValidString(p.Reason) ||
			!strings.Contains(p.Reason, "instance_id") {
			t.Errorf("%s: %d bytes: %.100q", p.Kind, len(p.Reason), p.Reason)
		}
	}
}

// TestUnsupportedChannelReasons: a channel the router cannot subscribe to
// is a problem whose reason names the transport kind or the endpoint's
// scheme, bounded, and never the publisher's address.
func TestUnsupportedChannelReasons(t *testing.T) {
	t.Parallel()
	channel := func(id int, transport string) (string, []byte) {
		return fmt.Sprintf("v1/event_channels/namespace/dynamo/topic/kv_metrics/%x", id),
			[]byte(fmt.Sprintf(`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":"kv_metrics","instance_id":%d,"transport":%s}`, id, transport))
	}
	for _, c := range []struct {
		transport, want, never string
	}{
		{`{"kind":"Zmq","config":{"endpoint":"10.0.0.7:41000"}}`, "(no scheme)", "10.0.0.7"},
		{`{"kind":"Zmq","config":{"endpoint":"ipc:///run/dynamo/pub-7.sock"}}`, `(scheme "ipc")`, "pub-7"},
		{`{"kind":"Zmq","config":{"endpoint":"` + strings.Repeat("h", 1<<20) + `://10.0.0.8:41000"}}`, `(scheme "hhh`, "10.0.0.8"},
		{`{"kind":"` + strings.Repeat("K", 1<<20) + `","config":{}}`, `transport "KKK`, ""},
	} {
		r := fleet.NewReducer()
		k, v := channel(1, c.transport)
		r.Put(k, v, t0)
		snap := r.Build(t0)
		if len(snap.Problems) != 1 {
			t.Fatalf("%.60s: problems %+v", c.transport, snap.Problems)
		}
		p := snap.Problems[0]
		if p.Kind != fleet.ProblemUnsupported || !strings.Contains(p.Reason, c.want) || (c.never != "" && strings.Contains(p.Reason, c.never)) ||
			len(p.Reason) > fleet.MaxProblemReasonBytes {
			t.Errorf("%.60s: %s %d bytes: %.200s", c.transport, p.Kind, len(p.Reason), p.Reason)
		}
	}
}

// TestUndialableEndpoints: a tcp:// endpoint that names no host or port a
// subscriber can connect to (a bind address, a wildcard, port 0, a
// service name) is a malformed channel, reported without the address;
// host names and IPv6 literals are subscribed to.
func TestUndialableEndpoints(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		endpoint string
		ok       bool
	}{
		{"tcp://10.0.0.7:41000", true},
		{"tcp://[fd00::7]:41000", true},
		{"tcp://worker-0.decode.dynamo.svc:41000", true},
		{"tcp://10.0.0.7", false},
		{"tcp://*:41000", false},
		{"tcp://0.0.0.0:41000", false},
		{"tcp://[::]:41000", false},
		{"tcp://:41000", false},
		{"tcp://10.0.0.7:0", false},
		{"tcp://10.0.0.7:65536", false},
		{"tcp://10.0.0.7:zmq", false},
		{"tcp://[fd00::7:41000", false},
	} {
		r := fleet.NewReducer()
		r.Put("v1/event_channels/namespace/dynamo/topic/kv_metrics/1",
			[]byte(`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":"kv_metrics","instance_id":1,"transport":{"kind":"Zmq","config":{"endpoint":"`+c.endpoint+`"}}}`), t0)
		snap := r.Build(t0)
		if c.ok {
			if snap.Publishers.Len() != 1 || len(snap.Problems) != 0 {
				t.Errorf("%s: publishers %d, problems %+v", c.endpoint, snap.Publishers.Len(), snap.Problems)
			}
			continue
		}
		if snap.Publishers.Len() != 0 || len(snap.Problems) != 1 {
			t.Fatalf("%s: publishers %d, problems %+v", c.endpoint, snap.Publishers.Len(), snap.Problems)
		}
		p := snap.Problems[0]
		host := strings.TrimPrefix(c.endpoint, "tcp://")
		if p.Kind != fleet.ProblemMalformed || strings.Contains(p.Reason, host) || !strings.Contains(p.Reason, "treated as quiet") {
			t.Errorf("%s: %s: %s", c.endpoint, p.Kind, p.Reason)
		}
	}
}

// TestCardSharedAcrossSnapshots: the opaque card is parsed once and shared.
func TestCardSharedAcrossSnapshots(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	r.Put(key(2), endpoint(2), t0)
	r.Put("v1/mdc/dynamo/decode/generate/2", []byte(`{"type":"Model","component":"decode","endpoint":"generate","instance_id":2,"card_json":{"display_name":"m"}}`), t0)
	a := r.Build(t0)
	r.Put(key(3), endpoint(3), t0)
	b := r.Build(t0)
	if workers(a)[0].Card == nil || workers(a)[0].Card != workers(b)[1].Card {
		t.Error("card copied between snapshots")
	}
}

// TestRoleProblemReasons: an unknown role names what in the card claims
// nothing (the unrecognised token, encode, no card), and a conflict names
// what in the card says otherwise (a worker_type, or a legacy model_type).
func TestRoleProblemReasons(t *testing.T) {
	fx := testutil.LoadDynamoFixture(t, "../../../testdata/dynamo/worker_types.yaml")
	r := fleet.NewReducer()
	clock := t0
	apply(t, r, fx.Events, &clock)
	reasons := map[string]string{}
	for _, p := range r.Build(clock).Problems {
		reasons[p.Kind+" "+p.Keys[0]] = p.Reason
	}
	for key, want := range map[string]string{
		"unknown_role v1/instances/dynamo/backend/generate/44":  `worker_type "Prefill | Bogus" claims none (unrecognised token "bogus")`,
		"unknown_role v1/instances/dynamo/backend/generate/45":  "encode joined with prefill or decode is not a worker type",
		"unknown_role v1/instances/dynamo/backend/generate/46":  `worker_type "encode" is an encode worker's`,
		"unknown_role v1/instances/dynamo/backend/generate/51":  "the worker has no base model card",
		"unknown_role v1/instances/dynamo/backend/generate/52":  "empty part",
		"unknown_role v1/instances/dynamo/backend/generate/55":  "the card's worker_type claims none (not a string)",
		"role_conflict v1/instances/dynamo/prefill/generate/48": `component "prefill" says prefill but the card's worker_type "decode" says decode`,
		"role_conflict v1/instances/dynamo/decode/generate/49":  `worker_type "Prefill | Decode" says aggregated`,
		"role_conflict v1/instances/dynamo/decode/generate/4a":  "the card's model_type (no worker_type) says prefill",
		"card_fields v1/mdc/dynamo/backend/generate/54":         "model_type",
	} {
		if got, ok := reasons[key]; !ok || !strings.Contains(got, want) {
			t.Errorf("%s: reason %q, want it to contain %q", key, got, want)
		}
	}
}

// TestProblemReasonsBounded: the strings of a record a problem quotes
// (component, endpoint, record type, topic, scope kind, transport kind and
// endpoint) are the fleet's to write, as long as a record may be; a
// problem is kept and logged, so each is quoted cut short.
func TestProblemReasonsBounded(t *testing.T) {
	long := strings.Repeat("x", 64<<10)
	r := fleet.NewReducer()
	put := func(k, v string) { r.Put(k, []byte(v), t0) }
	put("v1/instances/dynamo/p/generate/1", `{"component":"prefill-`+long+`","endpoint":"generate","instance_id":1}`)
	put("v1/mdc/dynamo/p/generate/1", `{"component":"prefill-`+long+`","endpoint":"generate","instance_id":1,"card_json":{"worker_type":"Decode"}}`)
	put("v1/instances/dynamo/b/generate/2", `{"component":"`+long+`","endpoint":"generate","instance_id":2}`)
	put("v1/mdc/dynamo/b/generate/2", `{"component":"`+long+`","endpoint":"`+long+`","instance_id":2}`)
	put("v1/mdc/dynamo/b/generate/20", `{"component":"`+long+`","endpoint":"`+long+`","instance_id":2}`)
	put("v1/instances/dynamo/b/generate/3", `{"type":"`+long+`","instance_id":3}`)
	ch := func(id int, scope, kind, ep string) string {
		return fmt.Sprintf(`{"scope":{"kind":%q},"instance_id":%d,"transport":{"kind":%q,"config":{"endpoint":%q}}}`, scope, id, kind, ep)
	}
	put("v1/event_channels/namespace/dynamo/topic/kv_metrics/4", ch(4, "namespace", "Zmq", "ipc://"+long))
	put("v1/event_channels/namespace/dynamo/topic/kv_metrics/5", ch(5, "namespace", "Nats"+long, ""))
	put("v1/event_channels/namespace/dynamo/topic/kv_metrics/6", ch(6, long, "Zmq", "tcp://a:1"))
	put("v1/event_channels/namespace/dynamo/topic/kv_metrics/7", `{"scope":{"kind":"namespace"},"topic":"`+long+`","instance_id":7}`)
	kinds := map[string]bool{}
	for _, p := range r.Build(t0).Problems {
		kinds[p.Kind] = true
		if len(p.Reason) > 1024 {
			t.Errorf("%s %v: reason of %d bytes: %.200s…", p.Kind, p.Keys, len(p.Reason), p.Reason)
		}
	}
	for _, k := range []string{fleet.ProblemRoleConflict, fleet.ProblemUnknownRole, fleet.ProblemDuplicate, fleet.ProblemMalformed, fleet.ProblemUnsupported} {
		if !kinds[k] {
			t.Errorf("no %s problem: %v", k, kinds)
		}
	}
}

// TestLegacyCardRoleFollowsUpdates: a worker whose card gains a
// worker_type (a rolling upgrade) takes the role it declares, and one
// whose legacy card gains the Prefill flag becomes a prefill worker.
func TestLegacyCardRoleFollowsUpdates(t *testing.T) {
	r := fleet.NewReducer()
	const ek, mk = "v1/instances/dynamo/backend/generate/7", "v1/mdc/dynamo/backend/generate/7"
	r.Put(ek, []byte(`{"type":"Endpoint","component":"backend","endpoint":"generate","instance_id":7}`), t0)
	for _, step := range []struct {
		card string
		role fleet.Role
	}{
		{`{"display_name":"m","model_type":"Chat | Completions","model_input":"Tokens"}`, fleet.RoleAggregated},
		{`{"display_name":"m","model_type":"Prefill","model_input":"Tokens"}`, fleet.RolePrefill},
		{`{"display_name":"m","model_type":"Chat","worker_type":"decode"}`, fleet.RoleDecode},
		{`{"display_name":"m","model_type":"Prefill","worker_type":"Prefill | Decode"}`, fleet.RoleAggregated},
	} {
		r.Put(mk, []byte(`{"type":"Model","component":"backend","endpoint":"generate","instance_id":7,"card_json":`+step.card+`}`), t0)
		snap := r.Build(t0)
		if snap.Workers.Len() != 1 || workers(snap)[0].Role != step.role || len(snap.Problems) != 0 {
			t.Fatalf("card %s: workers %+v problems %+v, want one %s worker", step.card, workers(snap), snap.Problems, step.role)
		}
	}
}

// workers lists a snapshot's workers in order.
func workers(s *fleet.Snapshot) []*fleet.Worker { return slices.Collect(s.Workers.All()) }

// TestAdvertises: a snapshot advertises exactly its publishers' (namespace,
// host, port, topic) as their records spell them.
func TestAdvertises(t *testing.T) {
	t.Parallel()
	fx := testutil.LoadDynamoFixture(t, "../../../testdata/dynamo/channels.yaml")
	r := fleet.NewReducer()
	clock := t0
	apply(t, r, fx.Events, &clock)
	snap := r.Build(clock)
	cases := []struct {
		ns, host string
		port     int
		topic    string
		want     bool
	}{
		{"dynamo", "10.0.0.9", 5555, "kv_events", true},
		{"dynamo", "10.0.0.9", 5555, "kv_metrics", false},
		{"dynamo", "10.0.0.9", 5556, "kv_events", false},
		{"dynamo", "10.0.0.8", 5555, "kv_events", false},
		{"other", "10.0.0.9", 5555, "kv_events", false},
		{"dynamo", "10.0.0.9", 1, "kv-events", false}, // a rejected record
	}
	for _, c := range cases {
		if got := snap.Advertises(c.ns, c.host, c.port, c.topic); got != c.want {
			t.Errorf("Advertises(%s, %s, %d, %s) = %v", c.ns, c.host, c.port, c.topic, got)
		}
	}
}

// TestEventSourceRecord: an EventSource record (the newer name of an
// event channel record, its publisher id in publisher_id) registers its
// publisher as an EventChannel record does; it is not malformed.
func TestEventSourceRecord(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	r.Put("v1/event_channels/namespace/dynamo/topic/kv_metrics/1f3a4b",
		[]byte(`{"type":"EventSource","scope":{"kind":"namespace","name":"dynamo"},"topic":"kv_metrics","publisher_id":2046539,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.7:5557"}}}`), t0)
	s := r.Build(t0)
	if len(s.Problems) != 0 {
		t.Fatalf("problems %+v", s.Problems)
	}
	found := false
	for p := range s.Publishers.All() {
		found = found || p.PublisherID == 2046539 && p.Topic == "kv_metrics"
	}
	if !found {
		t.Errorf("the EventSource's publisher is not registered")
	}
}

// TestPublisherMovesNamespace: a publisher id whose channel leaves one
// namespace and appears in another between two builds is listed once, in
// its new namespace: the list is ordered by namespace, so the old place
// must be given up, not left beside the new one.
func TestPublisherMovesNamespace(t *testing.T) {
	t.Parallel()
	ch := func(ns string) []byte {
		return fmt.Appendf(nil, `{"type":"EventChannel","scope":{"kind":"namespace","name":%q},"topic":"kv_metrics","instance_id":7,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.7:1"}}}`, ns)
	}
	r := fleet.NewReducer()
	r.Put("v1/event_channels/namespace/b/topic/kv_metrics/7", ch("b"), t0)
	r.Build(t0)
	r.Delete("v1/event_channels/namespace/b/topic/kv_metrics/7")
	r.Put("v1/event_channels/namespace/a/topic/kv_metrics/7", ch("a"), t0)
	s := r.Build(t0)
	var got []string
	for p := range s.Publishers.All() {
		got = append(got, fmt.Sprintf("%s/%d", p.Namespace, p.PublisherID))
	}
	if !slices.Equal(got, []string{"a/7"}) || s.Publishers.Len() != 1 {
		t.Errorf("publishers %v (len %d), want [a/7]", got, s.Publishers.Len())
	}
}

// TestPutOversized: a key whose value the source could not read is held
// and refused as oversized; a resync that finds it again changes nothing,
// and a readable value put at the key replaces it.
func TestPutOversized(t *testing.T) {
	t.Parallel()
	r := fleet.NewReducer()
	r.Put(key(1), endpoint(1), t0)
	r.PutOversized(key(1), 64<<20, t0)
	snap := r.Build(t0)
	if snap.Workers.Len() != 0 || len(snap.Problems) != 1 || snap.Problems[0].Kind != fleet.ProblemOversized || snap.Problems[0].Keys[0] != key(1) {
		t.Fatalf("%d workers, problems %+v", snap.Workers.Len(), snap.Problems)
	}
	r.ResyncBegin()
	r.PutOversized(key(1), 64<<20, t0)
	r.ResyncEnd()
	if r.Dirty() || r.Len() != 1 {
		t.Errorf("a resync that read the same unread key: dirty %v, %d keys", r.Dirty(), r.Len())
	}
	r.Put(key(1), endpoint(1), t0)
	if snap := r.Build(t0); snap.Workers.Len() != 1 || len(snap.Problems) != 0 {
		t.Errorf("after a readable put: %d workers, problems %+v", snap.Workers.Len(), snap.Problems)
	}
}

// TestKeepFirstSeen: a reducer that takes over another's view keeps the
// first_seen of the workers its first resync finds again, stamps new ones
// as new, and forgets the rest once that resync is built (a worker that
// comes back later is new).
func TestKeepFirstSeen(t *testing.T) {
	t.Parallel()
	t1, t2 := t0.Add(time.Hour), t0.Add(2*time.Hour)
	old := fleet.NewReducer()
	old.Put(key(1), endpoint(1), t0)
	old.Put(key(2), endpoint(2), t0)
	prev := old.Build(t0)

	r := fleet.NewReducer()
	r.KeepFirstSeen(prev)
	r.ResyncBegin()
	r.Put(key(1), endpoint(1), t1)
	r.Put(key(3), endpoint(3), t1)
	r.ResyncEnd()
	seen := func(s *fleet.Snapshot) map[uint64]time.Time {
		out := map[uint64]time.Time{}
		for w := range s.Workers.All() {
			out[w.ID.InstanceID] = w.FirstSeen
		}
		return out
	}
	if got, want := seen(r.Build(t1)), map[uint64]time.Time{1: t0, 3: t1}; !maps.Equal(got, want) {
		t.Fatalf("after the takeover: %v, want %v", got, want)
	}
	r.Put(key(2), endpoint(2), t2)
	if got, want := seen(r.Build(t2)), map[uint64]time.Time{1: t0, 2: t2, 3: t1}; !maps.Equal(got, want) {
		t.Fatalf("a worker of the old view found after the resync: %v, want %v", got, want)
	}
}

// TestComponentNamesRole: a component names a role when prefill or decode
// is a word of its name; a longer word that starts so (the aggregated
// pools VllmWorker-decodeheavy and VllmWorker-prefillheavy) names none,
// and the card's aggregated worker_type decides without a conflict.
func TestComponentNamesRole(t *testing.T) {
	for comp, want := range map[string]fleet.Role{
		"prefill": fleet.RolePrefill, "VllmPrefillWorker": fleet.RolePrefill, "TRTLLMPrefillWorker": fleet.RolePrefill,
		"sglang-prefill-0": fleet.RolePrefill, "decode": fleet.RoleDecode, "VllmDecodeWorker": fleet.RoleDecode, "decode2": fleet.RoleDecode,
		"VllmWorker-decodeheavy": fleet.RoleAggregated, "VllmWorker-prefillheavy": fleet.RoleAggregated, "backend": fleet.RoleAggregated,
		"predecode": fleet.RoleAggregated,
		// Characters whose lower case is longer or shorter in UTF-8 (Ⱥ
		// becomes ⱥ, a byte longer; İ becomes i̇): the name's own
		// positions, no index past its end.
		"\u023aprefill": fleet.RolePrefill, "\u0130decode": fleet.RoleDecode, "x\u023a\u023a\u023aprefillworker": fleet.RoleAggregated,
		"\u023aPrefill\u023a": fleet.RolePrefill,
	} {
		r := fleet.NewReducer()
		ek, mk := "v1/instances/dynamo/"+comp+"/generate/7", "v1/mdc/dynamo/"+comp+"/generate/7"
		r.Put(ek, []byte(`{"type":"Endpoint","component":"`+comp+`","endpoint":"generate","instance_id":7}`), t0)
		// A card without worker_type says aggregated by default, which a
		// component naming a role overrides.
		r.Put(mk, []byte(`{"type":"Model","component":"`+comp+`","endpoint":"generate","instance_id":7,"card_json":{"display_name":"m","model_type":"Chat"}}`), t0)
		snap := r.Build(t0)
		if snap.Workers.Len() != 1 || workers(snap)[0].Role != want || len(snap.Problems) != 0 {
			t.Errorf("%s: workers %+v problems %+v, want one %s worker", comp, workers(snap), snap.Problems, want)
		}
	}
	// An aggregated card under a pool named decodeheavy: no conflict.
	r := fleet.NewReducer()
	const comp = "VllmWorker-decodeheavy"
	r.Put("v1/instances/dynamo/"+comp+"/generate/7", []byte(`{"type":"Endpoint","component":"`+comp+`","endpoint":"generate","instance_id":7}`), t0)
	r.Put("v1/mdc/dynamo/"+comp+"/generate/7", []byte(`{"type":"Model","component":"`+comp+`","endpoint":"generate","instance_id":7,"card_json":{"display_name":"solar-pro4","worker_type":"Prefill | Decode"}}`), t0)
	if snap := r.Build(t0); snap.Workers.Len() != 1 || workers(snap)[0].Role != fleet.RoleAggregated || len(snap.Problems) != 0 {
		t.Errorf("aggregated pool: workers %+v problems %+v", workers(snap), snap.Problems)
	}
}

// TestCardDroppedMarker: the field a source sets on a card it shrank is
// honoured only with the size of a card over the retained bound, the only
// cards a source shrinks; a small card that carries it (no source wrote
// it so) keeps its opaque JSON and reports nothing, the field ignored as
// any unknown one.
func TestCardDroppedMarker(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		marker  int
		dropped bool
	}{{5, false}, {fleet.MaxRetainedCardBytes, false}, {fleet.MaxRetainedCardBytes + 1, true}} {
		r := fleet.NewReducer()
		r.Put(key(2), endpoint(2), t0)
		r.Put("v1/mdc/dynamo/decode/generate/2", fmt.Appendf(nil, `{"type":"Model","component":"decode","endpoint":"generate","instance_id":2,"%s":%d,"card_json":{"display_name":"m","worker_type":"Decode"}}`,
			wire.CardDroppedField, tt.marker), t0)
		snap := r.Build(t0)
		if snap.Workers.Len() != 1 {
			t.Fatalf("marker %d: workers %+v", tt.marker, workers(snap))
		}
		reported := false
		for _, p := range snap.Problems {
			reported = reported || p.Kind == fleet.ProblemCardDropped
		}
		if w := workers(snap)[0]; w.Card == nil || (w.Card.Raw == nil) != tt.dropped || reported != tt.dropped {
			t.Errorf("marker %d: raw card kept %v, card_dropped reported %v; want dropped %v", tt.marker, w.Card != nil && w.Card.Raw != nil, reported, tt.dropped)
		}
	}
}
