package eventbus_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/eventbus/agent"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// targetOf is the target of a publisher endpoint tcp://host:port.
func targetOf(t *testing.T, ns, endpoint, topic string) eventbus.Target {
	t.Helper()
	host, port, err := zmtp.SplitTCPEndpoint(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return eventbus.Target{Namespace: ns, Host: host, Port: p, Topic: topic}
}

// subscribe runs a ZMTP SUB handshake over a bus stream.
func subscribe(t *testing.T, c net.Conn, topic string) *zmtp.Sub {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	zs, err := zmtp.Subscribe(ctx, c, []byte(topic), zmtp.LimitsKVMetrics)
	if err != nil {
		t.Fatal(err)
	}
	return zs
}

// receive publishes until the subscriber sees a message (a PUB socket
// drops what it sends before the subscription arrives).
func receive(t *testing.T, pub *testutil.GoPublisher, zs *zmtp.Sub, frames [][]byte) [][]byte {
	t.Helper()
	got := make(chan [][]byte, 1)
	go func() {
		f, err := zs.Next()
		if err == nil {
			got <- f
		}
		close(got)
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-got:
			if !ok {
				t.Fatal("the stream ended before a message")
			}
			return f
		case <-tick.C:
			_ = pub.Send(frames)
		case <-deadline:
			t.Fatal("no message through the bus within 10s")
		}
	}
}

// relayed is a bus with broker A covering "dynamo", a publisher, and a
// stream to it through the broker with a ZMTP subscriber on it; stop ends
// the broker.
type relayed struct {
	tb   *testBus
	pub  *testutil.GoPublisher
	stop func()
	c    *eventbus.Stream
	zs   *zmtp.Sub
}

func relay(t *testing.T) *relayed {
	t.Helper()
	r := &relayed{tb: startBus(t, nil), pub: testutil.StartGoPublisher(t)}
	r.stop = r.tb.brokerAgent(t, brokerA, tokenA, []string{"dynamo"}, nil)
	testutil.Eventually(t, 10*time.Second, "namespace covered", func() bool { return r.tb.Covers("dynamo") })
	c, err := r.tb.OpenStream(t.Context(), targetOf(t, "dynamo", r.pub.Endpoint, "kv_metrics"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	r.c, r.zs = c, subscribe(t, c, "kv_metrics")
	return r
}

// TestOpenStreamRelaysPublisher: a broker client relays a real ZMQ
// publisher's bytes; the router's ZMTP subscriber runs over the stream
// as over TCP.
func TestOpenStreamRelaysPublisher(t *testing.T) {
	t.Parallel()
	r := relay(t)
	tb, pub, c, zs := r.tb, r.pub, r.c, r.zs
	want := [][]byte{[]byte("kv_metrics"), []byte("payload over the bus")}
	got := receive(t, pub, zs, want)
	if len(got) != 2 || string(got[1]) != "payload over the bus" {
		t.Errorf("frames %q", got)
	}
	if c.Carrier() != brokerA || tb.SessionCount() != 1 {
		t.Errorf("carrier %q, %d sessions", c.Carrier(), tb.SessionCount())
	}
	if cov := tb.CoveredNamespaces(); len(cov) != 1 || cov[0] != "dynamo" {
		t.Errorf("covered %v", cov)
	}
}

// next is the subscriber's next message, woken when it went quiet.
func next(zs *zmtp.Sub) ([][]byte, error) {
	for {
		f, err := zs.Next()
		if !errors.Is(err, zmtp.ErrQuiet) {
			return f, err
		}
		if err := zs.Wake(); err != nil {
			return nil, err
		}
	}
}

// TestStreamReadDeadline: a stream keeps the net.Conn contract for read
// deadlines, which a ZMTP subscriber relies on to wait for its next
// message with bounded buffers: a read whose deadline passes returns a
// timeout at once, and the stream goes on. Bytes relayed meanwhile are
// read afterwards, in order, and the stream still has its carrier.
func TestStreamReadDeadline(t *testing.T) {
	t.Parallel()
	r := relay(t)
	tb, pub, c, zs := r.tb, r.pub, r.c, r.zs
	if got := receive(t, pub, zs, [][]byte{[]byte("kv_metrics"), []byte("first")}); string(got[1]) != "first" {
		t.Fatalf("frames %q", got)
	}
	// The publisher's resends of "first" before the subscriber saw it may
	// still be on their way: read up to a marker sent after them, so that
	// nothing is in flight and the subscriber has nothing buffered.
	if err := pub.Send([][]byte{[]byte("kv_metrics"), []byte("marker")}); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := next(zs)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[1]) == "marker" {
			break
		}
	}
	if err := c.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n, err := c.Read(make([]byte, 64))
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past its deadline: %d, %v; want a timeout", n, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the timeout came %v after the read, with a deadline of 200ms", d)
	}
	// A deadline already past times out at once, and again. The read
	// started under the first deadline is still outstanding, into a
	// buffer larger than the reads below.
	if err := c.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := c.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a read with a past deadline: %v", err)
		}
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	// The stream goes on: the next messages' bytes come through whole and
	// in order, read here a few at a time, then the subscriber reads on.
	for _, m := range []string{"second", "third"} {
		if err := pub.Send([][]byte{[]byte("kv_metrics"), []byte(m)}); err != nil {
			t.Fatal(err)
		}
	}
	// ZMTP short frames: flags (0x01: more), size, body.
	want := append(append([]byte{1, 10}, "kv_metrics"...), 0, 6)
	want = append(want, "second"...)
	want = append(append(append(want, 1, 10), "kv_metrics"...), 0, 5)
	want = append(want, "third"...)
	var got []byte
	for len(got) < len(want) {
		buf := make([]byte, min(3, len(want)-len(got)))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("relayed % x\nwant     % x", got, want)
	}
	if err := pub.Send([][]byte{[]byte("kv_metrics"), []byte("fourth")}); err != nil {
		t.Fatal(err)
	}
	if f, err := next(zs); err != nil || len(f) != 2 || string(f[1]) != "fourth" {
		t.Fatalf("the subscriber after the timeouts: %q, %v", f, err)
	}
	if n := tb.SessionCount(); n != 1 {
		t.Errorf("%d sessions", n)
	}
}

// TestOpenStreamErrors: each error of the API.
func TestOpenStreamErrors(t *testing.T) {
	t.Parallel()
	tb := startBus(t, func(s *eventbus.Settings, to *eventbus.Timeouts) {
		s.MaxStreamsPerSession = 1
		// Short enough to wait out once, long enough for the streams that
		// do open (and the round trips the test answers) on a loaded
		// machine.
		to.Open = 2 * time.Second
	})
	pub := testutil.StartGoPublisher(t)
	good := targetOf(t, "dynamo", pub.Endpoint, "kv_metrics")

	if _, err := tb.OpenStream(t.Context(), good); !errors.Is(err, eventbus.ErrNoSession) || !errors.Is(err, zmtp.ErrCarrierLost) {
		t.Errorf("no session: %v", err)
	}
	bad := good
	bad.Port = 0
	if _, err := tb.OpenStream(t.Context(), bad); !errors.Is(err, eventbus.ErrInvalidTarget) {
		t.Errorf("port 0: %v", err)
	}

	// A broker that advertises only its publisher.
	tb.brokerAgent(t, brokerA, tokenA, []string{"dynamo"}, func(tg eventbus.Target) bool { return tg == good })
	testutil.Eventually(t, 10*time.Second, "covered", func() bool { return tb.Covers("dynamo") })
	other := good
	other.Host = "10.1.2.3"
	var re *eventbus.RefusedError
	if _, err := tb.OpenStream(t.Context(), other); !errors.As(err, &re) || re.Code != eventbus.CodeTargetNotAdvertised {
		t.Errorf("unadvertised: %v", err)
	}
	notDeclared := good
	notDeclared.Namespace = "other"
	if _, err := tb.OpenStream(t.Context(), notDeclared); !errors.Is(err, eventbus.ErrNoSession) {
		t.Errorf("undeclared namespace: %v", err)
	}
	c, err := tb.OpenStream(t.Context(), good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.OpenStream(t.Context(), good); !errors.Is(err, eventbus.ErrTooManyStreams) {
		t.Errorf("over max_streams_per_session: %v", err)
	}
	_ = c.Close()

	// A session that never opens the data stream: OpenTimeout, then the
	// client is told to unsubscribe.
	rs := openSession(t, tb.dial(t, nil), tokenB, hello(eventbus.RoleBroker, brokerB, []string{"dynamo"}, nil))
	tgt := eventbus.Target{Namespace: "dynamo", Host: "10.9.9.9", Port: 1, Topic: "kv_metrics"}
	var placed *eventbus.Target
	for port := 1; port < 200; port++ {
		tgt.Port = port
		if eventbus.Weight(tgt, brokerB) > eventbus.Weight(tgt, brokerA) {
			placed = &tgt
			break
		}
	}
	if placed == nil {
		t.Fatal("no target that broker B wins")
	}
	errc := make(chan error, 1)
	go func() { _, err := tb.OpenStream(t.Context(), *placed); errc <- err }()
	sub := rs.next(t)
	if sub.Type != eventbus.TypeSubscribe {
		t.Fatalf("%+v", sub)
	}
	if err := <-errc; !errors.Is(err, eventbus.ErrOpenTimeout) {
		t.Errorf("never opened: %v", err)
	}
	if m := rs.next(t); m.Type != eventbus.TypeUnsubscribe || m.StreamID != sub.StreamID {
		t.Errorf("after the timeout: %+v", m)
	}

	// A client's code is passed on when it is a word, and as
	// stream_refused when it is anything else (here an address and an
	// error text).
	for code, want := range map[string]string{
		"publisher_gone": "publisher_gone",
		"connect_failed: dial 10.9.9.9:1 refused": eventbus.CodeStreamRefused,
		"connect_failed\ntoken=secret":            eventbus.CodeStreamRefused,
	} {
		go func() { _, err := tb.OpenStream(t.Context(), *placed); errc <- err }()
		m := rs.next(t)
		if m.Type != eventbus.TypeSubscribe {
			t.Fatalf("%+v", m)
		}
		if _, err := rs.w.Write(eventbus.Encode(&eventbus.Message{Type: eventbus.TypeStreamClosed, StreamID: m.StreamID, Code: code})); err != nil {
			t.Fatal(err)
		}
		err := <-errc
		if !errors.As(err, &re) || re.Code != want || strings.Contains(err.Error(), "10.9.9.9") || strings.Contains(err.Error(), "secret") {
			t.Errorf("stream_closed with code %q: %v, want code %s", code, err, want)
		}
	}

	// The session ends while a stream is pending.
	go func() { _, err := tb.OpenStream(t.Context(), *placed); errc <- err }()
	if m := rs.next(t); m.Type != eventbus.TypeSubscribe {
		t.Fatalf("%+v", m)
	}
	_ = rs.w.Close()
	if err := <-errc; !errors.Is(err, eventbus.ErrSessionClosed) || !errors.Is(err, zmtp.ErrCarrierLost) {
		t.Errorf("session ended: %v", err)
	}
}

// TestWeight pins the rendezvous weight's byte layout, and its placement
// properties: about 1/N of the targets on each of N sessions, and a new
// session taking targets only to itself.
func TestWeight(t *testing.T) {
	t.Parallel()
	tg := eventbus.Target{Namespace: "dynamo", Host: "10.0.0.1", Port: 5557, Topic: "kv_metrics"}
	key := []byte("dynamo\x0010.0.0.1\x005557\x00kv_metrics")
	msg := binary.BigEndian.AppendUint64(nil, uint64(len(key)))
	msg = append(append(msg, key...), "broker-a"...)
	sum := sha256.Sum256(msg)
	if got, want := eventbus.Weight(tg, "broker-a"), binary.BigEndian.Uint64(sum[:8]); got != want {
		t.Fatalf("weight %x, want %x", got, want)
	}
	owner := func(tg eventbus.Target, clients []string) string {
		best, bw := "", uint64(0)
		for _, c := range clients {
			if w := eventbus.Weight(tg, c); best == "" || w > bw {
				best, bw = c, w
			}
		}
		return best
	}
	three := []string{"b1", "b2", "b3"}
	counts := map[string]int{}
	moved := 0
	const n = 3000
	for i := range n {
		tg := eventbus.Target{Namespace: "dynamo", Host: fmt.Sprintf("10.0.%d.%d", i/250, i%250), Port: 5557, Topic: "kv_metrics"}
		before := owner(tg, three)
		counts[before]++
		after := owner(tg, append(three, "b4"))
		if after != before {
			if after != "b4" {
				t.Fatalf("target %d moved from %s to %s, not to the new session", i, before, after)
			}
			moved++
		}
	}
	for _, c := range three {
		if counts[c] < n/3-150 || counts[c] > n/3+150 {
			t.Errorf("session %s holds %d of %d targets", c, counts[c], n)
		}
	}
	if moved < n/4-150 || moved > n/4+150 {
		t.Errorf("a fourth session took %d of %d targets, want about a quarter", moved, n)
	}
}

// TestPlacementFollowsWeight: with two broker sessions, OpenStream puts
// each target on the session its weight names.
func TestPlacementFollowsWeight(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	pub := testutil.StartGoPublisher(t)
	tb.brokerAgent(t, brokerA, tokenA, []string{"dynamo"}, nil)
	tb.brokerAgent(t, brokerB, tokenB, []string{"dynamo"}, nil)
	testutil.Eventually(t, 10*time.Second, "two sessions", func() bool { return tb.SessionCount() == 2 })
	if cov := tb.Coverage([]string{"dynamo", "absent"}); len(cov) != 2 || strings.Join(cov[1].Brokers, ",") != brokerA+","+brokerB || len(cov[0].Brokers) != 0 {
		t.Errorf("coverage %+v", cov)
	}
	for _, topic := range []string{"kv_metrics", "kv-events", "kv_events", "x"} {
		tg := targetOf(t, "dynamo", pub.Endpoint, topic)
		want := brokerA
		if eventbus.Weight(tg, brokerB) > eventbus.Weight(tg, brokerA) {
			want = brokerB
		}
		c, err := tb.OpenStream(t.Context(), tg)
		if err != nil {
			t.Fatal(err)
		}
		if c.Carrier() != want {
			t.Errorf("topic %s on %s, want %s", topic, c.Carrier(), want)
		}
		_ = c.Close()
	}
}

// TestDrainingMovesStreams: a broker that drains (SIGTERM) tells the
// router, which ends its streams as a lost carrier and places no new
// ones on it; the broker's Run returns once they are gone.
func TestDrainingMovesStreams(t *testing.T) {
	t.Parallel()
	r := relay(t)
	tb, pub, zs := r.tb, r.pub, r.zs
	stopA := r.stop
	receive(t, pub, zs, [][]byte{[]byte("kv_metrics"), []byte("x")})
	readErr := make(chan error, 1)
	go func() {
		for {
			if _, err := zs.Next(); err != nil {
				readErr <- err
				return
			}
		}
	}()
	stopped := make(chan struct{})
	go func() { stopA(); close(stopped) }()
	select {
	case err := <-readErr:
		if !errors.Is(err, zmtp.ErrCarrierLost) {
			t.Errorf("the drained stream ended with %v, want a lost carrier", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream outlived the drain")
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the broker did not finish draining")
	}
	if tb.Covers("dynamo") {
		t.Error("a drained broker still covers its namespace")
	}
}

// TestAnnouncedStream: a kv-listener relays its backend's SSE stream,
// resumed from the Last-Event-ID the router asks for; the session with
// the fewest streams is chosen.
func TestAnnouncedStream(t *testing.T) {
	t.Parallel()
	tb := startBus(t, nil)
	var mu sync.Mutex
	var lastIDs []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "id: 6\ndata: {\"event\":6}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer backend.Close()
	defer backend.CloseClientConnections()
	c, err := agent.New(agent.Options{Router: tb.url(), ID: kvID, Role: eventbus.RoleKVListener, Token: tokenKV, RootCAs: tb.roots(t),
		Sources: []string{"vllm-1"}, Opener: &agent.Backends{URLs: map[string]string{"vllm-1": backend.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, c)
	testutil.Eventually(t, 10*time.Second, "the kv-listener session", func() bool { return tb.SessionCount() == 1 })
	if tb.Covers("dynamo") {
		t.Error("a kv_listener covers a namespace")
	}
	if _, err := tb.OpenAnnouncedStream(t.Context(), "vllm-2", nil); !errors.Is(err, eventbus.ErrNoSession) {
		t.Errorf("unannounced backend: %v", err)
	}
	last := uint64(5)
	s, err := tb.OpenAnnouncedStream(t.Context(), "vllm-1", &last)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	buf := make([]byte, 64)
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.ReadAtLeast(s, buf, len("id: 6\n"))
	if err != nil || !strings.HasPrefix(string(buf[:n]), "id: 6\n") {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lastIDs) != 1 || lastIDs[0] != "5" {
		t.Errorf("Last-Event-ID %q", lastIDs)
	}
}

// TestStreamEndNotATimeout: a read under a deadline already past, on a
// stream whose session then goes, reports the lost carrier (the reader
// fails over at once) rather than another timeout, and so does every read
// after it.
func TestStreamEndNotATimeout(t *testing.T) {
	t.Parallel()
	r := relay(t)
	pub, c, zs := r.pub, r.c, r.zs
	stopA := r.stop
	receive(t, pub, zs, [][]byte{[]byte("kv_metrics"), []byte("x")})
	// A quiet subscription: its wait timed out and left a read behind.
	if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	for {
		if _, err := c.Read(buf); errors.Is(err, os.ErrDeadlineExceeded) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	stopA()
	var err2 error
	testutil.Eventually(t, 10*time.Second, "the stream's end reported", func() bool {
		_, err2 = c.Read(buf)
		return !errors.Is(err2, os.ErrDeadlineExceeded)
	})
	if !errors.Is(err2, zmtp.ErrCarrierLost) {
		t.Fatalf("a read after the session went: %v, want a lost carrier", err2)
	}
	if _, err := c.Read(buf); !errors.Is(err, zmtp.ErrCarrierLost) {
		t.Fatalf("the next read: %v", err)
	}
}

// TestClosedStreamSlotReusable: a stream the router closed frees its slot
// on both sides at once: the next stream placed on it (the session at its
// limit of one) is not refused too_many_streams by a client still counting
// the closed one's relay while it winds down.
func TestClosedStreamSlotReusable(t *testing.T) {
	t.Parallel()
	tb := startBus(t, func(s *eventbus.Settings, _ *eventbus.Timeouts) { s.MaxStreamsPerSession = 1 })
	pub := testutil.StartGoPublisher(t)
	tb.brokerAgent(t, brokerA, tokenA, []string{"dynamo"}, nil)
	testutil.Eventually(t, 10*time.Second, "namespace covered", func() bool { return tb.Covers("dynamo") })
	target := targetOf(t, "dynamo", pub.Endpoint, "kv_metrics")
	refused := 0
	for i := range 20 {
		c, err := tb.OpenStream(t.Context(), target)
		if err != nil {
			refused++
			t.Logf("open %d: %v", i, err)
			continue
		}
		_ = c.Close()
	}
	if refused > 0 {
		t.Errorf("%d of 20 opens refused right after the previous stream was closed, with the session under its limit", refused)
	}
}
