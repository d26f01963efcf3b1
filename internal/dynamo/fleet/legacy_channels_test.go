package fleet_test

import (
	"slices"
	"testing"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// TestLegacyChannelsShareTheWorkerID: a Dynamo 1.2 worker registers its
// channels in the legacy shape, whose instance_id is the worker's own
// instance id, one per topic (upstream's v1.2 DynamoWorkerMetadata fixture:
// kv-events and kv_metrics both with instance_id 42). Their legacy keys
// differ by topic, so they are two publishers, not a duplicate; two legacy
// channels of one topic family with one id, and two scoped channels with
// one publisher id whatever their topics, are still duplicates.
func TestLegacyChannelsShareTheWorkerID(t *testing.T) {
	t.Parallel()
	legacy := func(component, topic, port string) []byte {
		return []byte(`{"type":"EventChannel","namespace":"dynamo","component":"` + component + `","topic":"` + topic + `","instance_id":42,` +
			`"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.1:` + port + `"}}}`)
	}
	r := fleet.NewReducer()
	r.Put("v1/event_channels/dynamo/backend/kv-events/2a", legacy("backend", "kv-events", "5000"), t0)
	r.Put("v1/event_channels/dynamo//kv_metrics/2a", legacy("", "kv_metrics", "5001"), t0)
	snap := r.Build(t0)
	var topics []string
	for p := range snap.Publishers.All() {
		if p.PublisherID != 42 {
			t.Errorf("publisher %+v", *p)
		}
		topics = append(topics, p.Topic)
	}
	slices.Sort(topics)
	if !slices.Equal(topics, []string{"kv-events", "kv_metrics"}) || len(snap.Problems) != 0 {
		t.Fatalf("publishers of topics %v, problems %+v: a 1.2 worker's two channels are two publishers", topics, snap.Problems)
	}

	// A second legacy channel of the kv-events family with the same id is
	// a duplicate of the first: both go, the kv_metrics one stays.
	r.Put("v1/event_channels/dynamo/backend/kv_events/2a", legacy("backend", "kv_events", "5002"), t0)
	snap = r.Build(t0)
	if snap.Publishers.Len() != 1 || len(snap.Problems) != 1 || snap.Problems[0].Kind != fleet.ProblemDuplicate || snap.Problems[0].KeyCount != 2 {
		t.Fatalf("one kv-events family claimed twice: %d publishers, problems %+v", snap.Publishers.Len(), snap.Problems)
	}
	for p := range snap.Publishers.All() {
		if p.Topic != "kv_metrics" {
			t.Errorf("publisher %+v kept", *p)
		}
	}
	r.Delete("v1/event_channels/dynamo/backend/kv_events/2a")
	if snap = r.Build(t0); snap.Publishers.Len() != 2 || len(snap.Problems) != 0 {
		t.Fatalf("after the duplicate left: %d publishers, problems %+v", snap.Publishers.Len(), snap.Problems)
	}

	// Scoped channels carry publisher incarnation ids: one id under two
	// topics is a duplicate, and a scoped claimant makes the legacy ones
	// duplicates too.
	r.Put("v1/event_channels/namespace/dynamo/topic/kv_metrics/2a",
		[]byte(`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":"kv_metrics","instance_id":42,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.2:1"}}}`), t0)
	snap = r.Build(t0)
	if snap.Publishers.Len() != 0 || len(snap.Problems) != 1 || snap.Problems[0].Kind != fleet.ProblemDuplicate || snap.Problems[0].KeyCount != 3 {
		t.Fatalf("a scoped claimant: %d publishers, problems %+v", snap.Publishers.Len(), snap.Problems)
	}
	s := fleet.NewReducer()
	s.Put("v1/event_channels/namespace/dynamo/topic/kv_metrics/7",
		[]byte(`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":"kv_metrics","instance_id":7,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.3:1"}}}`), t0)
	s.Put("v1/event_channels/namespace/dynamo/topic/kv-events/7",
		[]byte(`{"type":"EventChannel","scope":{"kind":"namespace","name":"dynamo"},"topic":"kv-events","instance_id":7,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://10.0.0.3:2"}}}`), t0)
	if snap := s.Build(t0); snap.Publishers.Len() != 0 || len(snap.Problems) != 1 || snap.Problems[0].Kind != fleet.ProblemDuplicate {
		t.Fatalf("scoped channels sharing a publisher id: %d publishers, problems %+v", snap.Publishers.Len(), snap.Problems)
	}
}
