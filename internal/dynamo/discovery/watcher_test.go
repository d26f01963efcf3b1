package discovery_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
)

// scripted is a source whose passes are scripted: each entry is how long the
// session stays established (negative: the pass fails before seeding).
type scripted struct {
	clock    *time.Time
	sessions []time.Duration
	passes   int
	cancel   context.CancelFunc
}

func (s *scripted) Name() string { return "scripted" }

func (s *scripted) Run(ctx context.Context, sink discovery.Sink) error {
	if s.passes == len(s.sessions) {
		s.cancel()
		return nil
	}
	d := s.sessions[s.passes]
	s.passes++
	if d < 0 {
		return errors.New("connect refused")
	}
	sink.ResyncBegin()
	sink.Put("v1/instances/dynamo/decode/generate/1", []byte(`{"component":"decode","endpoint":"generate","instance_id":1}`))
	sink.ResyncEnd()
	*s.clock = s.clock.Add(d)
	return errors.New("stream ended")
}

// TestBackoff: delays double from initial to max, and reset to initial only
// after a session that stayed established for at least max, so a source
// that keeps failing soon after connecting keeps backing off.
func TestBackoff(t *testing.T) {
	clock := time.Unix(0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &scripted{clock: &clock, cancel: cancel, sessions: []time.Duration{
		-1, -1, -1, -1, -1, -1, // 500ms 1s 2s 4s 8s 8s
		3 * time.Second, // short session: no reset -> 8s
		8 * time.Second, // session >= max: reset -> 500ms
		-1,              // 1s
	}}
	var delays []time.Duration
	w := &discovery.Watcher{
		Source: src, Registry: fleet.NewRegistry(nil, nil),
		Backoff: discovery.Backoff{Initial: 500 * time.Millisecond, Max: 8 * time.Second},
		Now:     func() time.Time { return clock },
		Sleep: func(_ context.Context, d time.Duration) error {
			delays = append(delays, d)
			clock = clock.Add(d)
			return nil
		},
	}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second, 500 * time.Millisecond, time.Second}
	if len(delays) != len(want) {
		t.Fatalf("delays %v, want %v", delays, want)
	}
	for i := range want {
		if delays[i] != want[i] {
			t.Fatalf("delays %v, want %v", delays, want)
		}
	}
	if w.Registry.Generation() != 1 {
		t.Errorf("generation %d: identical resyncs must publish once", w.Registry.Generation())
	}
}
