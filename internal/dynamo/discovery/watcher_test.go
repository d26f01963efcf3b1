package discovery_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/discovery"
	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// scripted is a source whose passes are scripted: each entry is how long the
// session stays established (negative: the pass fails before seeding). It
// records when each pass starts.
type scripted struct {
	sessions []time.Duration
	starts   []time.Time
	cancel   context.CancelFunc
	// expires marks the passes whose watch the server ends at its
	// timeout (ErrWatchExpired) rather than breaking.
	expires map[int]bool
}

func (s *scripted) Name() string { return "scripted" }

func (s *scripted) Run(ctx context.Context, sink discovery.Sink) error {
	s.starts = append(s.starts, time.Now())
	if len(s.starts) > len(s.sessions) {
		s.cancel()
		return nil
	}
	d := s.sessions[len(s.starts)-1]
	if d < 0 {
		return errors.New("connect refused")
	}
	sink.ResyncBegin()
	sink.Put("v1/instances/dynamo/decode/generate/1", []byte(`{"component":"decode","endpoint":"generate","instance_id":1}`))
	sink.ResyncEnd()
	time.Sleep(d) // the session stays up this long
	if s.expires[len(s.starts)-1] {
		return discovery.ErrWatchExpired
	}
	return errors.New("stream ended")
}

// delays are the waits between the passes: from one pass's end (its start
// plus its session) to the next one's start.
func (s *scripted) delays() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(s.starts); i++ {
		end := s.starts[i-1].Add(max(s.sessions[i-1], 0))
		out = append(out, s.starts[i].Sub(end))
	}
	return out
}

// TestBackoff: delays double from initial to max, and reset to initial only
// after a session that stayed established for at least max, so a source
// that keeps failing soon after connecting keeps backing off. A watch the
// server ends at its timeout resets them although the pass counted its
// session from a little after the watch opened (so it reads just short of
// the bound); a watch that ends early does not. A zero initial (or max),
// which configuration accepts, waits MinDelay rather than retrying a failing
// source in a tight loop.
func TestBackoff(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	usual := discovery.Backoff{Initial: 500 * ms, Max: 8 * time.Second}
	for _, tc := range []struct {
		name     string
		backoff  discovery.Backoff
		sessions []time.Duration
		expires  map[int]bool
		want     []time.Duration
	}{
		{name: "zero initial", backoff: discovery.Backoff{Max: 4 * ms}, sessions: []time.Duration{
			-1, -1, -1, -1, // 1ms 2ms 4ms 4ms
			4 * ms, // session >= max: reset -> 1ms
			-1,     // 2ms
		}, want: []time.Duration{discovery.MinDelay, 2 * ms, 4 * ms, 4 * ms, discovery.MinDelay, 2 * ms}},
		{name: "zero initial and max", backoff: discovery.Backoff{}, sessions: []time.Duration{-1, -1, ms, -1},
			want: []time.Duration{discovery.MinDelay, discovery.MinDelay, discovery.MinDelay, discovery.MinDelay}},
		{name: "failures and sessions", backoff: usual, sessions: []time.Duration{
			-1, -1, -1, -1, -1, -1, // 500ms 1s 2s 4s 8s 8s
			3 * time.Second, // short session: no reset -> 8s
			8 * time.Second, // session >= max: reset -> 500ms
			-1,              // 1s
		}, want: []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second, 500 * time.Millisecond, time.Second}},
		{name: "watch expiry", backoff: usual, sessions: []time.Duration{
			-1, -1, // 500ms 1s
			7900 * time.Millisecond, // expired just short of 8s: reset -> 500ms
			-1,                      // 1s
			time.Second,             // expired early: no reset -> 2s
		}, expires: map[int]bool{2: true, 4: true},
			want: []time.Duration{500 * time.Millisecond, time.Second, 500 * time.Millisecond, time.Second, 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				src := &scripted{cancel: cancel, sessions: tc.sessions, expires: tc.expires}
				w := &discovery.Watcher{Source: src, Registry: fleet.NewRegistry(nil, nil), Backoff: tc.backoff}
				if err := w.Run(ctx); err != nil {
					t.Fatal(err)
				}
				if delays := src.delays(); !slices.Equal(delays, tc.want) {
					t.Fatalf("delays %v, want %v", delays, tc.want)
				}
				if w.Registry.Generation() != 1 {
					t.Errorf("generation %d: identical resyncs must publish once", w.Registry.Generation())
				}
			})
		})
	}
}

// lingering is a source that does not notice its context ending: it
// applies and ends one more resync a while after the cancellation, as a
// pass blocked in a slow call would.
type lingering struct {
	cancelled chan struct{}
	done      chan struct{}
}

func (l *lingering) Name() string { return "lingering" }

func (l *lingering) Run(ctx context.Context, sink discovery.Sink) error {
	defer close(l.done)
	sink.ResyncBegin()
	sink.Put("v1/instances/dynamo/decode/generate/1", []byte(`{"component":"decode","endpoint":"generate","instance_id":1}`))
	sink.ResyncEnd()
	<-ctx.Done()
	<-l.cancelled // the registry has been reset meanwhile
	sink.ResyncBegin()
	sink.Put("v1/instances/dynamo/decode/generate/2", []byte(`{"component":"decode","endpoint":"generate","instance_id":2}`))
	sink.ResyncEnd()
	sink.Put("v1/instances/dynamo/decode/generate/3", []byte(`{"component":"decode","endpoint":"generate","instance_id":3}`))
	sink.Flush()
	return ctx.Err()
}

// runLingering runs a watcher over a lingering source until its first
// view; Run's result arrives on ran once cancel is called and the source is
// let go (close src.cancelled).
func runLingering(t *testing.T, reg *fleet.Registry, m *telemetry.DiscoveryMetrics) (w *discovery.Watcher, src *lingering, cancel context.CancelFunc, ran chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	src = &lingering{cancelled: make(chan struct{}), done: make(chan struct{})}
	w = &discovery.Watcher{Source: src, Registry: reg, Backoff: discovery.Backoff{Initial: time.Second, Max: time.Second}, Metrics: m}
	ran = make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	select {
	case <-w.Synced():
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("no first view")
	}
	return w, src, cancel, ran
}

// TestNoPublishAfterCancel: once its context ends, a watcher publishes
// nothing, even when its source goes on applying events, so an abandoned
// watcher cannot put its view back over the registry's next owner.
func TestNoPublishAfterCancel(t *testing.T) {
	t.Parallel()
	reg := fleet.NewRegistry(nil, nil)
	w, src, cancel, ran := runLingering(t, reg, nil)
	cancel()
	w.Halt() // no publish under way from here on
	reg.Reset()
	gen := reg.Generation()
	close(src.cancelled)
	<-src.done
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if reg.Generation() != gen || reg.Snapshot().Workers.Len() != 0 {
		t.Errorf("published after its context ended: generation %d → %d, %d workers", gen, reg.Generation(), reg.Snapshot().Workers.Len())
	}
}

// TestHaltHandsOverTheGauge: a halted watcher leaves the connected gauge to
// its successor, which may already run: its own disconnection as it ends
// does not set the gauge to 0 over the successor's 1.
func TestHaltHandsOverTheGauge(t *testing.T) {
	t.Parallel()
	m := telemetry.NewDiscoveryMetrics(nil)
	w, src, cancel, ran := runLingering(t, fleet.NewRegistry(nil, nil), m)
	cancel()
	w.Halt()
	m.Connected.Set(1) // the successor's
	close(src.cancelled)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if v := promtest.ToFloat64(m.Connected); v != 1 {
		t.Errorf("connected gauge %v after the halted watcher ended, want the successor's 1", v)
	}
}
