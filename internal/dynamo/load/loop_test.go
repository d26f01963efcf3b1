package load_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/continuum-router/continuum/internal/dynamo/fleet"
	"github.com/continuum-router/continuum/internal/dynamo/load"
	"github.com/continuum-router/continuum/internal/telemetry"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// scriptedConnector answers each Connect with the next step: an error, or
// a connection whose far end is a minimal ZMTP publisher that stays up for
// the step's session length (in the bubble's time), then hangs up.
type scriptedConnector struct {
	mu       sync.Mutex
	steps    []time.Duration // < 0: refuse; >= 0: a session that long
	attempts []time.Time
	hungUp   int // sessions whose subscriber closed the connection
}

var errRefused = errors.New("connection refused")

func (c *scriptedConnector) Transport() string { return "direct" }

func (c *scriptedConnector) Connect(ctx context.Context, _ zmtp.Target) (net.Conn, error) {
	c.mu.Lock()
	c.attempts = append(c.attempts, time.Now())
	step := time.Duration(-1)
	if len(c.steps) > 0 {
		step, c.steps = c.steps[0], c.steps[1:]
	}
	c.mu.Unlock()
	if step < 0 {
		return nil, errRefused
	}
	ours, theirs := net.Pipe()
	go func() {
		if publisherPeer(theirs, step) {
			c.mu.Lock()
			c.hungUp++
			c.mu.Unlock()
		}
	}()
	return ours, nil
}

func (c *scriptedConnector) counts() (attempts, hungUp int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.attempts), c.hungUp
}

// publisherPeer speaks the publisher's side of a ZMTP 3.0 NULL handshake,
// reads whatever the subscriber sends, and hangs up after d (or when the
// subscriber does, true).
func publisherPeer(c net.Conn, d time.Duration) bool {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		_, _ = io.Copy(io.Discard, c)
	}()
	greeting := make([]byte, 64)
	greeting[0], greeting[9], greeting[10] = 0xFF, 0x7F, 3
	copy(greeting[12:], "NULL")
	body := []byte("\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB")
	if _, err := c.Write(append(greeting, append([]byte{0x04, byte(len(body))}, body...)...)); err != nil {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	defer func() { _ = c.Close() }()
	select {
	case <-t.C:
		return false
	case <-gone:
		return true
	}
}

// countingHandler counts what a loop reports.
type countingHandler struct {
	mu                   sync.Mutex
	connected, ended     int
	lastErr              error
	messages, oversized  int
	connectedAt, endedAt []time.Time
}

func (h *countingHandler) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.connected++
	h.connectedAt = append(h.connectedAt, time.Now())
}
func (h *countingHandler) Message([][]byte, time.Time) { h.mu.Lock(); h.messages++; h.mu.Unlock() }
func (h *countingHandler) Oversized()                  { h.mu.Lock(); h.oversized++; h.mu.Unlock() }
func (h *countingHandler) Ended(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended++
	h.lastErr = err
	h.endedAt = append(h.endedAt, time.Now())
}

// TestLoopBackoff: failed attempts are retried after a full-jitter delay
// that doubles from 500 ms up to 30 s; a session that lasted 30 s resets
// it, a shorter one does not.
func TestLoopBackoff(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		refuse := time.Duration(-1)
		steps := []time.Duration{refuse, refuse, refuse, refuse, refuse, refuse, refuse, refuse, refuse,
			31 * time.Second, // a long session: the delay starts over
			refuse,
			time.Second, // a short session: the delay keeps growing
			refuse}
		conn := &scriptedConnector{steps: steps}
		h := &countingHandler{}
		var states []string
		l := &load.Loop{Endpoint: "tcp://127.0.0.1:1", Topic: "kv_metrics", Limits: zmtp.LimitsKVMetrics, Connector: conn,
			Handler: h, State: func(s string) { states = append(states, s) }}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); l.Run(ctx) }()
		for {
			synctest.Wait()
			conn.mu.Lock()
			n := len(conn.attempts)
			conn.mu.Unlock()
			if n > len(steps) {
				break
			}
			time.Sleep(time.Second) // let the fake clock run to the next attempt
		}
		cancel()
		<-done

		// The delay before attempt i+1 is at most the backoff in force after
		// attempt i ended: 0.5, 1, 2, 4, 8, 16, 30, 30, 30 s for the
		// refusals, 0.5 s after the long session, then 1 s, then 2 s after
		// the short one.
		bounds := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
			16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second,
			500 * time.Millisecond, time.Second, 2 * time.Second}
		ends := h.endedAt
		if len(ends) < len(bounds) {
			t.Fatalf("%d attempts ended, want at least %d", len(ends), len(bounds))
		}
		for i, bound := range bounds {
			// Attempts and endings alternate; the sleep is in between.
			wait := conn.attempts[i+1].Sub(ends[i])
			if wait < 0 || wait > bound {
				t.Errorf("delay before attempt %d: %v, want within [0, %v]", i+2, wait, bound)
			}
		}
		if h.connected != 2 {
			t.Errorf("%d sessions, want 2", h.connected)
		}
		if !errors.Is(h.lastErr, errRefused) {
			t.Errorf("last error %v", h.lastErr)
		}
		want := map[string]bool{load.StateConnecting: true, load.StateConnected: true, load.StateBackoff: true}
		for _, s := range states {
			if !want[s] {
				t.Errorf("state %q reported", s)
			}
		}
	})
}

// TestLoopStopsWhileConnected: cancelling ends a loop blocked in a read at
// once, without reporting an error.
func TestLoopStopsWhileConnected(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		conn := &scriptedConnector{steps: []time.Duration{time.Hour}}
		h := &countingHandler{}
		l := &load.Loop{Endpoint: "tcp://127.0.0.1:1", Topic: "kv_metrics", Limits: zmtp.LimitsKVMetrics, Connector: conn, Handler: h}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); l.Run(ctx) }()
		synctest.Wait()
		if h.connected != 1 {
			t.Fatalf("connected %d times", h.connected)
		}
		cancel()
		<-done
		if h.ended != 0 {
			t.Errorf("a cancelled session reported its end: %v", h.lastErr)
		}
	})
}

// TestLoopStopInEveryStretch: Stop ends a loop at once wherever it is (not
// started yet, connected and blocked in a read, backing off after a
// refusal), without reporting an error, and closes its session.
func TestLoopStopInEveryStretch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		steps []time.Duration
		// settled: the stretch to stop in has been reached (nil: stop
		// before starting).
		settled func(h *countingHandler, attempts int) bool
		hungUp  int // sessions the stop closes
	}{
		{"before it starts", nil, nil, 0},
		{"connected", []time.Duration{time.Hour}, func(h *countingHandler, _ int) bool { return h.connected == 1 }, 1},
		{"backing off", []time.Duration{-1, -1}, func(h *countingHandler, attempts int) bool { return h.ended == 1 && attempts == 1 }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				conn := &scriptedConnector{steps: tc.steps}
				h := &countingHandler{}
				l := &load.Loop{Endpoint: "tcp://127.0.0.1:1", Topic: "kv_metrics", Limits: zmtp.LimitsKVMetrics, Connector: conn, Handler: h}
				done := make(chan struct{})
				endedBefore := 0
				if tc.settled == nil {
					l.Stop()
					l.Start(t.Context(), func() { close(done) })
				} else {
					l.Start(t.Context(), func() { close(done) })
					synctest.Wait()
					attempts, _ := conn.counts()
					if !tc.settled(h, attempts) {
						t.Fatalf("not settled: %d attempts, %d connected, %d ended", attempts, h.connected, h.ended)
					}
					endedBefore = h.ended
					l.Stop()
				}
				<-done // a loop that does not end deadlocks the bubble
				synctest.Wait()
				if h.ended != endedBefore {
					t.Errorf("a stopped loop reported its end: %v", h.lastErr)
				}
				attempts, hungUp := conn.counts()
				if hungUp != tc.hungUp {
					t.Errorf("%d sessions closed, want %d", hungUp, tc.hungUp)
				}
				if tc.settled == nil && attempts != 0 {
					t.Errorf("a loop stopped before it started dialled %d times", attempts)
				}
			})
		})
	}
}

// TestPoolStopsWithItsContext: the end of the context a pool reconciles
// under stops every subscription and closes its session, and a later
// reconcile under it starts nothing.
func TestPoolStopsWithItsContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		conn := &scriptedConnector{steps: []time.Duration{time.Hour, time.Hour, time.Hour}}
		pool := &load.Pool{Family: "kv_metrics", Limits: zmtp.LimitsKVMetrics, Connector: conn,
			NewHandler: func(fleet.Publisher) load.Handler { return &countingHandler{} }}
		pubs := []*fleet.Publisher{
			{Namespace: "dynamo", Component: "decode", PublisherID: 1, Topic: "kv_metrics", Endpoint: "generate"},
			{Namespace: "dynamo", Component: "decode", PublisherID: 2, Topic: "kv_metrics", Endpoint: "generate"},
		}
		ctx, cancel := context.WithCancel(t.Context())
		pool.Reconcile(ctx, pubs)
		synctest.Wait()
		if n := pool.States()[load.StateConnected]; n != 2 {
			t.Fatalf("%d connected, want 2", n)
		}
		cancel()
		synctest.Wait()
		if _, hungUp := conn.counts(); hungUp != 2 {
			t.Errorf("%d sessions closed when the context ended, want 2", hungUp)
		}
		pool.Reconcile(ctx, append(pubs, &fleet.Publisher{Namespace: "dynamo", Component: "decode", PublisherID: 3,
			Topic: "kv_metrics", Endpoint: "generate"}))
		synctest.Wait()
		if attempts, _ := conn.counts(); attempts != 2 {
			t.Errorf("%d connection attempts after the context ended, want 2", attempts)
		}
		pool.Stop()
	})
}

// TestPoolChanged: Changed is closed when a subscription starts, changes
// state or stops, and stays open while the subscriptions only carry
// messages.
func TestPoolChanged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		conn := &scriptedConnector{steps: []time.Duration{time.Hour, time.Hour}}
		pool := &load.Pool{Family: "kv_metrics", Limits: zmtp.LimitsKVMetrics, Connector: conn,
			NewHandler: func(fleet.Publisher) load.Handler { return &countingHandler{} }}
		closed := func(c <-chan struct{}) bool {
			select {
			case <-c:
				return true
			default:
				return false
			}
		}
		pub := &fleet.Publisher{Namespace: "dynamo", Component: "decode", PublisherID: 1, Topic: "kv_metrics", Endpoint: "generate"}
		changed := pool.Changed()
		if pool.Changed() != changed {
			t.Error("two channels for one change")
		}
		pool.Reconcile(t.Context(), []*fleet.Publisher{pub})
		if !closed(changed) {
			t.Error("Changed not closed when a subscription started")
		}
		synctest.Wait()
		if n := pool.States()[load.StateConnected]; n != 1 {
			t.Fatalf("%d connected, want 1", n)
		}
		// Connected, and nothing more happens.
		changed = pool.Changed()
		time.Sleep(time.Minute)
		synctest.Wait()
		if closed(changed) {
			t.Error("Changed closed while nothing changed")
		}
		pool.Reconcile(t.Context(), nil)
		if !closed(changed) {
			t.Error("Changed not closed when a subscription stopped")
		}
		if closed(pool.Changed()) {
			t.Error("a closed channel given for the next change")
		}
		pool.Stop()
	})
}

// TestPoolSwitchThenDeparture: a connector switch ends the subscriptions
// without telling Stopped (their publishers are still wanted), and the
// reconcile after it tells Stopped of every publisher that left, or whose
// record changed, in between; one still wanted as it was is not told.
func TestPoolSwitchThenDeparture(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		conn := &scriptedConnector{steps: []time.Duration{time.Hour, time.Hour, time.Hour, time.Hour, time.Hour}}
		var stopped []uint64
		pool := &load.Pool{Family: "kv_metrics", Limits: zmtp.LimitsKVMetrics, Connector: conn,
			NewHandler: func(fleet.Publisher) load.Handler { return &countingHandler{} },
			Stopped:    func(p fleet.Publisher) { stopped = append(stopped, p.PublisherID) }}
		pub := func(id uint64, endpoint string) *fleet.Publisher {
			return &fleet.Publisher{Namespace: "dynamo", Component: "decode", PublisherID: id, Topic: "kv_metrics", Endpoint: endpoint}
		}
		pool.Reconcile(t.Context(), []*fleet.Publisher{pub(1, "generate"), pub(2, "generate"), pub(3, "generate")})
		synctest.Wait()
		pool.SetConnector(conn)
		if len(stopped) != 0 {
			t.Fatalf("the switch told Stopped of %v", stopped)
		}
		// 1 left, 2 changed its record, 3 is still wanted as it was.
		pool.Reconcile(t.Context(), []*fleet.Publisher{pub(2, "other"), pub(3, "generate")})
		synctest.Wait()
		slices.Sort(stopped)
		if !slices.Equal(stopped, []uint64{1, 2}) {
			t.Errorf("Stopped told of %v, want [1 2]", stopped)
		}
		if n := pool.States()[load.StateConnected]; n != 2 {
			t.Errorf("%d connected after the switch, want 2", n)
		}
		pool.Stop()
	})
}

// TestPoolStateAccounting: every subscription is in exactly one state, so
// the gauge's series sum to the number of subscriptions and never go
// negative, across connect, backoff, reconnect, replacement and stop.
func TestPoolStateAccounting(t *testing.T) {
	t.Parallel()
	m := telemetry.NewLoadMetrics(nil)
	pool := &load.Pool{Family: "kv_metrics", Limits: zmtp.LimitsKVMetrics, Connector: &zmtp.Direct{}, Gauge: m.Subscriptions,
		NewHandler: func(fleet.Publisher) load.Handler { return &countingHandler{} }}
	states := []string{load.StatePending, load.StateConnecting, load.StateConnected, load.StateBackoff}
	gauge := func() (map[string]float64, float64) {
		out := map[string]float64{}
		sum := 0.0
		for _, s := range states {
			v := promtest.ToFloat64(m.Subscriptions.WithLabelValues(s, "direct"))
			out[s] = v
			sum += v
		}
		return out, sum
	}
	// A sampler checks the series all along.
	stop := make(chan struct{})
	sampled := make(chan error, 1)
	go func() {
		var bad error
		for {
			select {
			case <-stop:
				sampled <- bad
				return
			default:
			}
			byState, _ := gauge()
			for s, v := range byState {
				if v < 0 && bad == nil {
					bad = errors.New("state " + s + " went negative")
				}
			}
			n := 0
			for _, c := range pool.States() {
				n += c
			}
			if n != len(pool.Subscriptions()) && bad == nil {
				bad = errors.New("states do not sum to the subscriptions")
			}
			time.Sleep(time.Millisecond)
		}
	}()
	// settled waits for the listed states, then checks the gauge sums to
	// the subscriptions.
	settled := func(what string, want map[string]int) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, what, func() bool {
			got := pool.States()
			for s, n := range want {
				if got[s] != n {
					return false
				}
			}
			return true
		})
		// The series are read one at a time, so a subscription moving
		// between states can be counted twice or not at all in one read;
		// drift (a state left behind) never settles.
		testutil.Eventually(t, 5*time.Second, what+": the gauge sums to the subscriptions", func() bool {
			_, sum := gauge()
			return int(sum) == len(pool.Subscriptions())
		})
	}

	ctx := t.Context()
	up := testutil.StartGoPublisher(t)
	f := newFleet()
	f.publisher(1, up.Endpoint)
	f.publisher(2, closedEndpoint(t))
	pool.Reconcile(ctx, slices.Collect(f.reg.Snapshot().Publishers.All()))
	settled("one connected, one failing", map[string]int{load.StateConnected: 1})

	up.Close()
	settled("the publisher went away", map[string]int{load.StateConnected: 0})
	testutil.StartGoPublisherAt(t, up.Endpoint)
	settled("reconnected", map[string]int{load.StateConnected: 1})

	// A changed record replaces its subscription; a departed one stops.
	f.removePublisher(2)
	f.publisher(1, closedEndpoint(t))
	pool.Reconcile(ctx, slices.Collect(f.reg.Snapshot().Publishers.All()))
	settled("replaced, other stopped", map[string]int{load.StateConnected: 0})
	if n := len(pool.Subscriptions()); n != 1 {
		t.Errorf("%d subscriptions after replacement", n)
	}

	pool.Stop()
	close(stop)
	if err := <-sampled; err != nil {
		t.Error(err)
	}
	if byState, sum := gauge(); sum != 0 {
		t.Errorf("after stop the gauge reads %v", byState)
	}
}

// closedEndpoint is a loopback address nothing listens on.
func closedEndpoint(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "tcp://" + addr
}

// gatedConnector is a scriptedConnector behind a route that opens and
// closes: Ready answers with the route's change channel while it is
// closed. Its connections name their carrier, and an error step after
// open may be a lost carrier.
type gatedConnector struct {
	scriptedConnector
	gmu     sync.Mutex
	open    bool
	changed chan struct{}
	readies int
}

func newGated(steps ...time.Duration) *gatedConnector {
	return &gatedConnector{scriptedConnector: scriptedConnector{steps: steps}, changed: make(chan struct{})}
}

func (c *gatedConnector) Transport() string          { return "broker" }
func (c *gatedConnector) OpenTimeout() time.Duration { return 30 * time.Second }

func (c *gatedConnector) Ready(zmtp.Target) <-chan struct{} {
	c.gmu.Lock()
	defer c.gmu.Unlock()
	c.readies++
	if c.open {
		return nil
	}
	return c.changed
}

func (c *gatedConnector) setOpen(open bool) {
	c.gmu.Lock()
	defer c.gmu.Unlock()
	c.open = open
	close(c.changed)
	c.changed = make(chan struct{})
}

type carriedConn struct{ net.Conn }

func (carriedConn) Carrier() string { return "broker-a" }

func (c *gatedConnector) Connect(ctx context.Context, t zmtp.Target) (net.Conn, error) {
	conn, err := c.scriptedConnector.Connect(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("stream refused: %w", zmtp.ErrCarrierLost)
	}
	return carriedConn{conn}, nil
}

// TestLoopPendingUntilRouted: with a gated connector and no route, the loop
// waits in state pending without polling (Ready is asked once per change);
// a route wakes it within PendingWakeJitter; the session names its
// carrier; a lost carrier is retried within ReconnectInitial without the
// backoff growing.
func TestLoopPendingUntilRouted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		refuse := time.Duration(-1)
		conn := newGated(refuse, refuse, refuse, refuse, refuse, time.Hour)
		h := &countingHandler{}
		var mu sync.Mutex
		var states, carriers []string
		l := &load.Loop{Endpoint: "tcp://10.0.0.1:5557", Namespace: "dynamo", Topic: "kv_metrics", Limits: zmtp.LimitsKVMetrics,
			Connector: conn, Handler: h,
			State:   func(s string) { mu.Lock(); states = append(states, s); mu.Unlock() },
			Carrier: func(id string) { mu.Lock(); carriers = append(carriers, id); mu.Unlock() }}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); l.Run(ctx) }()

		time.Sleep(time.Hour)
		synctest.Wait()
		conn.gmu.Lock()
		readies := conn.readies
		conn.gmu.Unlock()
		if readies != 1 || len(conn.times()) != 0 {
			t.Fatalf("without a route: %d Ready calls, %d attempts", readies, len(conn.times()))
		}
		mu.Lock()
		if len(states) != 1 || states[0] != load.StatePending {
			t.Fatalf("states %v, want [pending]", states)
		}
		mu.Unlock()

		woken := time.Now()
		conn.setOpen(true)
		synctest.Wait()
		time.Sleep(load.PendingWakeJitter + time.Millisecond)
		synctest.Wait()
		if at := conn.times(); len(at) == 0 || at[0].Sub(woken) > load.PendingWakeJitter {
			t.Fatalf("attempts %v after waking at %v", at, woken)
		}
		// Five lost carriers: each retry within ReconnectInitial, so all
		// six attempts fit in 6 × 500 ms (a growing backoff would not).
		time.Sleep(3 * time.Second)
		synctest.Wait()
		at := conn.times()
		h.mu.Lock()
		ends, sessions := h.endedAt, h.connected
		h.mu.Unlock()
		if len(at) != 6 || sessions != 1 {
			t.Fatalf("%d attempts, %d sessions", len(at), sessions)
		}
		for i := 1; i < len(at); i++ {
			if d := at[i].Sub(ends[i-1]); d > load.ReconnectInitial {
				t.Errorf("retry %d after %v, want within %v", i, d, load.ReconnectInitial)
			}
		}
		mu.Lock()
		if len(carriers) != 1 || carriers[0] != "broker-a" || states[len(states)-1] != load.StateConnected {
			t.Errorf("carriers %v, states %v", carriers, states)
		}
		mu.Unlock()
		cancel()
		<-done
	})
}

func (c *scriptedConnector) times() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.attempts...)
}
