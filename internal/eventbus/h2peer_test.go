package eventbus_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/testutil"
	"github.com/continuum-router/continuum/internal/zmtp"
)

// The listener's real clients are not built on Go's HTTP/2 stack (a Rust
// broker on hyper/h2, tools on nghttp2). These tests drive it with
// hyper-h2 (Debian's python3-h2), a client that shares no code with the
// listener's, and check what such a peer sees frame by frame: SETTINGS,
// WINDOW_UPDATE, RST_STREAM codes and GOAWAY, besides the contract's
// statuses, bodies and control lines.

// h2Cmd is one command of testdata/h2peer.py.
type h2Cmd map[string]any

// h2Event is one event the peer reports.
type h2Event struct {
	Ev         string            `json:"ev"`
	Stream     int               `json:"stream"`
	Code       int               `json:"code"`
	Delta      int               `json:"delta"`
	Data       []byte            `json:"data"` // base64 on the wire
	Ended      bool              `json:"ended"`
	Headers    map[string]string `json:"headers"`
	Values     map[string]int    `json:"values"`
	LastStream int               `json:"last_stream"`
	Version    string            `json:"version"`
	ALPN       string            `json:"alpn"`
	Send       int               `json:"send"`
	Recv       int               `json:"recv"`
	Early      bool              `json:"early"`
	Err        string            `json:"err"`
}

// HTTP/2 error codes (RFC 9113 section 7) and SETTINGS identifiers.
const (
	h2NoError          = 0x0
	h2FlowControlError = 0x3

	h2SettingMaxConcurrentStreams = "3"
	h2SettingInitialWindowSize    = "4"
	h2SettingMaxFrameSize         = "5"
)

// requireH2 skips the test when hyper-h2 is missing, except in CI, where
// .ci/run installs it.
func requireH2(t testing.TB) {
	t.Helper()
	if err := exec.Command(testutil.Python, "-c", "import h2.connection").Run(); err != nil {
		testutil.SkipOrFailInCI(t, "hyper-h2 through python3-h2 is not installed (apt-get install python3-h2): %v", err)
	}
}

// h2Peer is a running testdata/h2peer.py connected to a bus.
type h2Peer struct {
	t      testing.TB
	in     io.Writer
	events chan h2Event
	// seen keeps every event read, for failure messages; backlog those
	// no expectation took yet, in order.
	seen, backlog []h2Event
	// pending is what a control stream sent past its last full line.
	pending map[int][]byte
}

// startH2Peer connects a hyper-h2 client to tb; first are the commands it
// runs before it reads anything from the listener (its SETTINGS
// included).
func startH2Peer(t testing.TB, tb *testBus, first ...h2Cmd) *h2Peer {
	t.Helper()
	return startH2PeerArgs(t, tb, []string{tb.addr, tb.pki.CAFile}, first...)
}

// startH2PeerCert is startH2Peer presenting a client certificate naming
// ids (by DNS SAN).
func startH2PeerCert(t testing.TB, tb *testBus, ids ...string) *h2Peer {
	t.Helper()
	cf, kf := tb.pki.ClientForNames(t, ids...)
	return startH2PeerArgs(t, tb, []string{tb.addr, tb.pki.CAFile, cf, kf})
}

func startH2PeerArgs(t testing.TB, tb *testBus, args []string, first ...h2Cmd) *h2Peer {
	t.Helper()
	requireH2(t)
	script, err := os.ReadFile("testdata/h2peer.py")
	if err != nil {
		t.Fatal(err)
	}
	_, in, out := testutil.StartPython(t, string(script), args...)
	p := &h2Peer{t: t, in: in, events: make(chan h2Event, 1024), pending: map[int][]byte{}}
	go func() {
		defer close(p.events)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev h2Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("h2peer.py: %q: %v", sc.Text(), err)
				return
			}
			p.events <- ev
		}
	}()
	if first == nil {
		first = []h2Cmd{}
	}
	p.write(first)
	tls := p.expect("the TLS handshake", func(ev h2Event) bool { return ev.Ev == "tls" })
	if tls.Version != "TLSv1.3" || tls.ALPN != "h2" {
		t.Fatalf("negotiated %s with ALPN %q, want TLSv1.3 and h2", tls.Version, tls.ALPN)
	}
	return p
}

func (p *h2Peer) write(v any) {
	p.t.Helper()
	b, _ := json.Marshal(v)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("h2peer.py: %v", err)
	}
}

// do runs a command.
func (p *h2Peer) do(c h2Cmd) { p.t.Helper(); p.write(c) }

// expect returns the first event matching ok within 10 s.
func (p *h2Peer) expect(what string, ok func(h2Event) bool) h2Event {
	p.t.Helper()
	ev, found := p.await(10*time.Second, ok)
	if !found {
		p.t.Fatalf("the h2 peer saw no %s; it saw %s", what, p.trace())
	}
	return ev
}

// await takes the first event not taken yet that matches ok, waiting up
// to d for it.
func (p *h2Peer) await(d time.Duration, ok func(h2Event) bool) (h2Event, bool) {
	for i, ev := range p.backlog {
		if ok(ev) {
			p.backlog = append(p.backlog[:i:i], p.backlog[i+1:]...)
			return ev, true
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, open := <-p.events:
			if !open {
				return h2Event{}, false
			}
			p.seen = append(p.seen, ev)
			if ok(ev) {
				return ev, true
			}
			p.backlog = append(p.backlog, ev)
		case <-timer.C:
			return h2Event{}, false
		}
	}
}

func (p *h2Peer) trace() string {
	var b strings.Builder
	for _, ev := range p.seen {
		if ev.Ev == "data" {
			ev.Headers = map[string]string{"text": string(ev.Data[:min(len(ev.Data), 200)])}
			ev.Data = nil
		}
		j, _ := json.Marshal(ev)
		b.WriteString("\n  ")
		b.Write(j)
	}
	return b.String()
}

// request opens a request and returns its stream id.
func (p *h2Peer) request(path, token string, body []byte, end bool) int {
	p.t.Helper()
	hdr := map[string]string{"continuum-bus-version": "1"}
	if token != "" {
		hdr["authorization"] = "Bearer " + token
	}
	p.do(h2Cmd{"op": "request", "path": path, "headers": hdr, "body": body, "end": end})
	return p.expect("its request opened", func(ev h2Event) bool { return ev.Ev == "opened" }).Stream
}

// response waits for the response headers of stream id.
func (p *h2Peer) response(id int) h2Event {
	p.t.Helper()
	return p.expect("a response", func(ev h2Event) bool { return ev.Ev == "response" && ev.Stream == id })
}

// refusal reads a refusal's status, WWW-Authenticate and JSON body, which
// ends the stream.
func (p *h2Peer) refusal(id int) (status, code, wwwAuth string) {
	p.t.Helper()
	r := p.response(id)
	if ct := r.Headers["content-type"]; ct != "application/json" {
		p.t.Errorf("refusal content-type %q, want application/json", ct)
	}
	var body []byte
	for {
		ev := p.expect("the refusal's body", func(ev h2Event) bool {
			return ev.Stream == id && (ev.Ev == "data" || ev.Ev == "ended" || ev.Ev == "reset")
		})
		if ev.Ev == "data" {
			body = append(body, ev.Data...)
			if !ev.Ended {
				continue
			}
		}
		if ev.Ev == "reset" {
			p.t.Fatalf("refusal stream reset with code %#x", ev.Code)
		}
		break
	}
	var shape struct {
		Error *struct {
			Code    *string `json:"code"`
			Message *string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &shape); err != nil || shape.Error == nil || shape.Error.Code == nil || shape.Error.Message == nil {
		p.t.Fatalf("refusal body %q is not {\"error\":{\"code\",\"message\"}}: %v", body, err)
	}
	return r.Headers[":status"], *shape.Error.Code, r.Headers["www-authenticate"]
}

// line reads the control lines of stream id until one matches ok, and
// returns it; the lines before it are passed over.
func (p *h2Peer) line(id int, what string, ok func(map[string]any) bool) map[string]any {
	p.t.Helper()
	buf := p.pending[id]
	for {
		for {
			i := strings.IndexByte(string(buf), '\n')
			if i < 0 {
				break
			}
			raw := buf[:i]
			buf = buf[i+1:]
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				p.t.Fatalf("control line %q is not JSON: %v", raw, err)
			}
			if ok(m) {
				p.pending[id] = buf
				return m
			}
		}
		ev := p.expect(what, func(ev h2Event) bool {
			return ev.Stream == id && (ev.Ev == "data" || ev.Ev == "ended" || ev.Ev == "reset")
		})
		if ev.Ev != "data" {
			p.t.Fatalf("control stream ended (%s %#x) before %s; saw %s", ev.Ev, ev.Code, what, p.trace())
		}
		buf = append(buf, ev.Data...)
	}
}

func ofType(typ string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["type"] == typ }
}

func helloLine(role, id string, namespaces []string) []byte {
	return eventbus.Encode(hello(role, id, namespaces, nil))
}

// openH2Session opens a control channel with a hello and returns its
// stream id and welcome.
func openH2Session(t testing.TB, p *h2Peer, token string, h []byte) (int, map[string]any) {
	t.Helper()
	id := p.request(eventbus.PathSession, token, h, false)
	if r := p.response(id); r.Headers[":status"] != "200" || r.Headers["content-type"] != "application/x-ndjson" {
		t.Fatalf("session response %v; saw %s", r.Headers, p.trace())
	}
	return id, p.line(id, "a welcome", ofType(eventbus.TypeWelcome))
}

// TestH2PeerHandshakeAndRefusals: a hyper-h2 client negotiates TLS 1.3 and
// h2, sees the listener's SETTINGS carry the per-stream budget as the
// initial window, gets every refusal as a status and an
// {"error":{"code","message"}} body on its stream (the connection goes
// on), and its PING answered.
func TestH2PeerHandshakeAndRefusals(t *testing.T) {
	tb := startBus(t, nil)
	p := startH2Peer(t, tb)
	settings := p.expect("the listener's SETTINGS", func(ev h2Event) bool { return ev.Ev == "settings" })
	budget := eventbus.StreamBudget(tb.settings.MaxSessionBufferBytes, tb.settings.MaxStreamsPerSession)
	if got := settings.Values[h2SettingInitialWindowSize]; got != budget {
		t.Errorf("SETTINGS_INITIAL_WINDOW_SIZE %d, want the stream budget %d", got, budget)
	}
	if got := settings.Values[h2SettingMaxFrameSize]; got != 16<<10 {
		t.Errorf("SETTINGS_MAX_FRAME_SIZE %d, want 16384", got)
	}
	if got := settings.Values[h2SettingMaxConcurrentStreams]; got != tb.settings.MaxStreamsPerSession+8 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want max_streams_per_session + 8", got)
	}

	tests := []struct {
		name, path, token, status, code string
		body                            []byte
	}{
		{"no credential", eventbus.PathSession, "", "401", eventbus.CodeUnauthenticated, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"})},
		{"unknown token", eventbus.PathSession, "not-a-token", "401", eventbus.CodeUnauthenticated, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"})},
		{"another broker's client_id", eventbus.PathSession, tokenA, "403", eventbus.CodeForbidden, helloLine(eventbus.RoleBroker, brokerB, []string{"dynamo"})},
		{"a namespace not allowed", eventbus.PathSession, tokenB, "403", eventbus.CodeForbidden, helloLine(eventbus.RoleBroker, brokerB, []string{"other"})},
		{"a role not the entry's", eventbus.PathSession, tokenKV, "403", eventbus.CodeForbidden, helloLine(eventbus.RoleBroker, kvID, []string{"dynamo"})},
		{"a first line not a hello", eventbus.PathSession, tokenA, "400", eventbus.CodeInvalidHello, []byte(`{"type":"heartbeat","seq":1}` + "\n")},
		{"a stream never commanded", eventbus.PathStreams + strings.Repeat("ab", 16), tokenA, "404", eventbus.CodeUnknownStream, nil},
		{"another path", "/bus/v1/other", tokenA, "404", eventbus.CodeNotFound, nil},
	}
	for _, tt := range tests {
		id := p.request(tt.path, tt.token, tt.body, true)
		status, code, www := p.refusal(id)
		if status != tt.status || code != tt.code {
			t.Errorf("%s: %s %s, want %s %s", tt.name, status, code, tt.status, tt.code)
		}
		if (status == "401") != strings.HasPrefix(www, "Bearer ") {
			t.Errorf("%s: %s with WWW-Authenticate %q", tt.name, status, www)
		}
	}
	// The version header: missing, or not a version.
	for _, v := range []string{"", "0", "one"} {
		hdr := map[string]string{"authorization": "Bearer " + tokenA}
		if v != "" {
			hdr[eventbus.HeaderVersion] = v
		}
		p.do(h2Cmd{"op": "request", "path": eventbus.PathSession, "headers": hdr, "body": helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}), "end": true})
		id := p.expect("its request opened", func(ev h2Event) bool { return ev.Ev == "opened" }).Stream
		if status, code, _ := p.refusal(id); status != "400" || code != eventbus.CodeUnsupportedVersion {
			t.Errorf("%s %q: %s %s, want 400 %s", eventbus.HeaderVersion, v, status, code, eventbus.CodeUnsupportedVersion)
		}
	}
	p.do(h2Cmd{"op": "ping", "data": "0102030405060708"})
	if ack := p.expect("a PING ACK", func(ev h2Event) bool { return ev.Ev == "ping_ack" }); ack.Err != "" {
		t.Fatal(ack.Err)
	}
	// Refused requests leave the connection serving: a session opens on it.
	if _, w := openH2Session(t, p, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"})); w["session_id"] == nil {
		t.Fatalf("welcome %v", w)
	}
}

// TestH2PeerRevokedCredential: a token a reload removed is told
// credential_revoked with 401, on the same connection.
func TestH2PeerRevokedCredential(t *testing.T) {
	tb := startBus(t, nil)
	s := tb.settings
	s.Entries = s.Entries[1:]
	if err := tb.Apply(s); err != nil {
		t.Fatal(err)
	}
	p := startH2Peer(t, tb)
	id := p.request(eventbus.PathSession, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}), true)
	if status, code, www := p.refusal(id); status != "401" || code != eventbus.CodeCredentialRevoked || www == "" {
		t.Fatalf("%s %s (WWW-Authenticate %q), want 401 %s", status, code, www, eventbus.CodeCredentialRevoked)
	}
}

// TestH2PeerControlProtocol: the control channel as a non-Go client sees
// it: a welcome with exactly the contract's fields, heartbeats numbered
// from 1, a heartbeat_ack echoing the client's seq (CRLF and blank lines
// allowed), and at idle_timeout an error line, then the stream's end.
func TestH2PeerControlProtocol(t *testing.T) {
	tb := startBus(t, func(s *eventbus.Settings, _ *eventbus.Timeouts) {
		s.HeartbeatInterval, s.IdleTimeout = 300*time.Millisecond, 2*time.Second
	})
	p := startH2Peer(t, tb)
	id, w := openH2Session(t, p, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}))
	keys := func(m map[string]any) string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return strings.Join(ks, ",")
	}
	if got := keys(w); got != "limits,session_id,type,version" {
		t.Errorf("welcome fields %s", got)
	}
	limits, _ := w["limits"].(map[string]any)
	if got := keys(limits); got != "heartbeat_interval_ms,idle_timeout_ms,max_streams,stream_buffer_bytes" {
		t.Errorf("welcome limits fields %s", got)
	}
	if sid, _ := w["session_id"].(string); !strings.HasPrefix(sid, "sess-") || len(sid) != 37 || w["version"] != 1.0 {
		t.Errorf("welcome %v", w)
	}
	if limits["heartbeat_interval_ms"] != 300.0 || limits["idle_timeout_ms"] != 2000.0 || limits["max_streams"] != 16.0 ||
		limits["stream_buffer_bytes"] != float64(eventbus.StreamBudget(tb.settings.MaxSessionBufferBytes, 16)) {
		t.Errorf("welcome limits %v", limits)
	}
	if hb := p.line(id, "a heartbeat", ofType(eventbus.TypeHeartbeat)); hb["seq"] != 1.0 {
		t.Errorf("first heartbeat %v, want seq 1", hb)
	}
	p.do(h2Cmd{"op": "data", "stream": id, "body": []byte("\r\n\n" + `{"type":"heartbeat","seq":41,"added_later":true}` + "\r\n")})
	if ack := p.line(id, "a heartbeat_ack", ofType(eventbus.TypeHeartbeatAck)); ack["seq"] != 41.0 {
		t.Errorf("heartbeat_ack %v, want seq 41", ack)
	}
	start := time.Now()
	m := p.line(id, "the idle close", ofType(eventbus.TypeError))
	if m["code"] != eventbus.CodeIdleTimeout {
		t.Errorf("closed with %v, want %s", m, eventbus.CodeIdleTimeout)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("idle close %v after the last line, idle_timeout 2s", d)
	}
	if ev := p.expect("the control stream's end", func(ev h2Event) bool {
		return ev.Stream == id && (ev.Ev == "ended" || ev.Ev == "reset" || ev.Ev == "data" && ev.Ended)
	}); ev.Ev == "reset" {
		t.Errorf("control stream reset with %#x, want its end", ev.Code)
	}
}

// openH2Stream has the router open a stream through the peer's session
// (id): the peer reads the subscribe and opens the data stream. It returns
// the router's side and the peer's stream id.
func openH2Stream(t testing.TB, tb *testBus, p *h2Peer, id int, token string) (*eventbus.Stream, int, string) {
	t.Helper()
	type opened struct {
		s   *eventbus.Stream
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		s, err := tb.OpenStream(ctx, eventbus.Target{Namespace: "dynamo", Host: "10.1.2.3", Port: 5557, Topic: "kv_metrics"})
		ch <- opened{s, err}
	}()
	sub := p.line(id, "a subscribe", ofType(eventbus.TypeSubscribe))
	streamID, _ := sub["stream_id"].(string)
	target, _ := sub["target"].(map[string]any)
	if !eventbus.ValidStreamID(streamID) || target["namespace"] != "dynamo" || target["host"] != "10.1.2.3" || target["port"] != 5557.0 || target["topic"] != "kv_metrics" {
		t.Fatalf("subscribe %v", sub)
	}
	ds := p.request(eventbus.PathStreams+streamID, token, nil, false)
	if r := p.response(ds); r.Headers[":status"] != "200" || r.Headers["content-type"] != "application/octet-stream" {
		t.Fatalf("data stream response %v", r.Headers)
	}
	o := <-ch
	if o.err != nil {
		t.Fatal(o.err)
	}
	t.Cleanup(func() { _ = o.s.Close() })
	return o.s, ds, streamID
}

// TestH2PeerDataStream: a commanded data stream carries bytes both ways;
// a second open of it is duplicate_stream and another credential's is
// forbidden; and the router reading it gives the peer its window back.
func TestH2PeerDataStream(t *testing.T) {
	tb := startBus(t, nil)
	p := startH2Peer(t, tb)
	id, _ := openH2Session(t, p, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}))
	st, ds, streamID := openH2Stream(t, tb, p, id, tokenA)

	for _, tt := range []struct{ token, status, code string }{
		{tokenA, "409", eventbus.CodeDuplicateStream},
		{tokenB, "403", eventbus.CodeForbidden},
	} {
		again := p.request(eventbus.PathStreams+streamID, tt.token, nil, true)
		if status, code, _ := p.refusal(again); status != tt.status || code != tt.code {
			t.Errorf("data stream opened again with %s: %s %s, want %s %s", tt.token, status, code, tt.status, tt.code)
		}
	}

	if _, err := st.Write([]byte("to the publisher")); err != nil {
		t.Fatal(err)
	}
	if ev := p.expect("the router's bytes", func(ev h2Event) bool { return ev.Ev == "data" && ev.Stream == ds }); string(ev.Data) != "to the publisher" {
		t.Errorf("peer read %q", ev.Data)
	}
	budget := eventbus.StreamBudget(tb.settings.MaxSessionBufferBytes, tb.settings.MaxStreamsPerSession)
	payload := []byte(strings.Repeat("z", budget))
	p.do(h2Cmd{"op": "data", "stream": ds, "body": payload})
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(st, got); err != nil || string(got) != string(payload) {
		t.Fatalf("router read %d bytes: %v", len(got), err)
	}
	p.expect("the stream's window given back", func(ev h2Event) bool { return ev.Ev == "window" && ev.Stream == ds && ev.Delta > 0 })

}

// TestH2PeerStreamEndsCleanly: a data stream the router is done with
// ends as a finished response (END_STREAM, then at most RST_STREAM
// NO_ERROR for the request half it no longer reads), never reset with
// INTERNAL_ERROR, which a client takes for a fault of the router: when the
// router closes it (after an unsubscribe), and when its session ends.
func TestH2PeerStreamEndsCleanly(t *testing.T) {
	tb := startBus(t, nil)
	p := startH2Peer(t, tb)
	id, _ := openH2Session(t, p, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}))
	st, ds, streamID := openH2Stream(t, tb, p, id, tokenA)
	if _, err := st.Write([]byte("to the publisher")); err != nil {
		t.Fatal(err)
	}
	p.do(h2Cmd{"op": "data", "stream": ds, "body": []byte("from the publisher")})
	got := make([]byte, len("from the publisher"))
	if _, err := io.ReadFull(st, got); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if m := p.line(id, "an unsubscribe", ofType(eventbus.TypeUnsubscribe)); m["stream_id"] != streamID {
		t.Errorf("unsubscribe %v, want stream %s", m, streamID)
	}
	end := p.expect("the data stream's end", func(ev h2Event) bool {
		return ev.Stream == ds && (ev.Ev == "ended" || ev.Ev == "reset")
	})
	if end.Ev == "reset" {
		t.Errorf("the router's close reset the data stream with %#x; a client takes that as a server fault", end.Code)
	}
	// After the response ends, the router may reset the request half it
	// no longer reads, with NO_ERROR only.
	if ev, ok := p.await(500*time.Millisecond, func(ev h2Event) bool { return ev.Stream == ds && ev.Ev == "reset" }); ok && ev.Code != h2NoError {
		t.Errorf("the ended data stream was then reset with %#x", ev.Code)
	}
	// A stream whose session ends (here: the client ends the control
	// channel) ends so too.
	_, ds2, _ := openH2Stream(t, tb, p, id, tokenA)
	p.do(h2Cmd{"op": "reset", "stream": id, "code": 8})
	end = p.expect("the data stream's end", func(ev h2Event) bool {
		return ev.Stream == ds2 && (ev.Ev == "ended" || ev.Ev == "reset")
	})
	if end.Ev == "reset" {
		t.Errorf("the session's end reset its data stream with %#x", end.Code)
	}
}

// TestH2PeerStreamWindow: a peer that sends past the window the listener
// advertised is refused on that stream alone (RST_STREAM
// FLOW_CONTROL_ERROR): the listener buffers no more than the stream's
// budget, and the session and the connection go on.
func TestH2PeerStreamWindow(t *testing.T) {
	tb := startBus(t, func(s *eventbus.Settings, _ *eventbus.Timeouts) { s.HeartbeatInterval = 200 * time.Millisecond })
	p := startH2Peer(t, tb)
	id, _ := openH2Session(t, p, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}))
	_, ds, _ := openH2Stream(t, tb, p, id, tokenA)
	budget := eventbus.StreamBudget(tb.settings.MaxSessionBufferBytes, tb.settings.MaxStreamsPerSession)
	// The router does not read: the budget fills the window.
	p.do(h2Cmd{"op": "data", "stream": ds, "body": []byte(strings.Repeat("y", budget))})
	p.do(h2Cmd{"op": "windows", "stream": ds})
	if w := p.expect("its windows", func(ev h2Event) bool { return ev.Ev == "windows" }); w.Send != 0 {
		t.Fatalf("send window %d after the budget, want 0", w.Send)
	}
	p.do(h2Cmd{"op": "data", "stream": ds, "body": []byte("one byte too many"), "force": true})
	if ev := p.expect("the over-window stream refused", func(ev h2Event) bool { return ev.Stream == ds && ev.Ev == "reset" }); ev.Code != h2FlowControlError {
		t.Fatalf("reset with %#x, want FLOW_CONTROL_ERROR", ev.Code)
	}
	if _, ok := p.await(time.Second, func(ev h2Event) bool { return ev.Ev == "goaway" || ev.Ev == "eof" }); ok {
		t.Fatalf("the connection ended: %s", p.trace())
	}
	p.line(id, "a heartbeat after the refusal", ofType(eventbus.TypeHeartbeat))
}

// TestH2PeerEagerHello: a client may send a request's body right after the
// connection preface, before it reads the listener's SETTINGS (RFC 9113
// section 6.9.2: the stream window is then the default 65,535 bytes). A
// hello within the stream budget is served so. A larger one is served only
// when the listener happened to read the first frames before the next
// arrived; otherwise its stream alone is refused with RST_STREAM
// FLOW_CONTROL_ERROR (RFC 9113 section 6.9.3 allows it: the listener holds
// no stream past its budget), never the connection. Sent after the
// SETTINGS, flow control paces it and it is served.
func TestH2PeerEagerHello(t *testing.T) {
	tb := startBus(t, nil)
	budget := eventbus.StreamBudget(tb.settings.MaxSessionBufferBytes, tb.settings.MaxStreamsPerSession)
	withPadding := func(n int) []byte {
		// A newer client's field this version ignores makes the hello as
		// long as needed.
		base := helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"})
		pad := n - len(base) - len(`,"added_later":""`)
		return []byte(strings.TrimSuffix(string(base), "}\n") + `,"added_later":"` + strings.Repeat("p", pad) + `"}` + "\n")
	}
	hdr := map[string]string{"authorization": "Bearer " + tokenA, eventbus.HeaderVersion: "1"}

	p := startH2Peer(t, tb, h2Cmd{"op": "request", "path": eventbus.PathSession, "headers": hdr, "body": withPadding(budget)})
	if ev := p.expect("the request opened", func(ev h2Event) bool { return ev.Ev == "opened" }); !ev.Early {
		t.Fatal("the hello was not sent before the listener's SETTINGS were read")
	}
	p.line(1, "a welcome to an eager hello of the stream budget", ofType(eventbus.TypeWelcome))

	p = startH2Peer(t, tb, h2Cmd{"op": "request", "path": eventbus.PathSession, "headers": hdr, "body": withPadding(budget + 4096)})
	ev := p.expect("the eager hello answered", func(ev h2Event) bool {
		return ev.Stream == 1 && (ev.Ev == "reset" || ev.Ev == "response") || ev.Ev == "goaway" || ev.Ev == "eof"
	})
	switch {
	case ev.Ev == "reset" && ev.Code == h2FlowControlError:
		t.Logf("an eager hello of %d bytes was refused: RST_STREAM FLOW_CONTROL_ERROR", budget+4096)
	case ev.Ev == "response" && ev.Headers[":status"] == "200":
		t.Logf("an eager hello of %d bytes was served: the listener read its first frames in time", budget+4096)
	default:
		t.Fatalf("an eager hello past the budget: %s, want its stream served or refused alone; saw %s", ev.Ev, p.trace())
	}

	p = startH2Peer(t, tb)
	p.expect("the listener's SETTINGS", func(ev h2Event) bool { return ev.Ev == "settings" })
	if _, w := openH2Session(t, p, tokenA, withPadding(budget+4096)); w["session_id"] == nil {
		t.Fatalf("welcome %v", w)
	}
}

// TestH2PeerSessionLifecycle: a control channel whose hello does not come
// is refused with 408 hello_timeout; while one credential's hello is
// awaited, a second is refused with 429 too_many_sessions; a newer session
// of a credential ends the older with an error line session_superseded
// and the end of its stream; and a data stream may come on another
// connection of the same credential.
func TestH2PeerSessionLifecycle(t *testing.T) {
	tb := startBus(t, func(_ *eventbus.Settings, to *eventbus.Timeouts) { to.Hello = time.Second })
	p := startH2Peer(t, tb)
	// Two handshakes of one credential, neither sending its hello: the
	// listener's handlers may take them in either order, so whichever it
	// takes first holds the credential's slot until its hello times out,
	// and the other is refused at once.
	first := p.request(eventbus.PathSession, tokenA, nil, false)
	second := p.request(eventbus.PathSession, tokenA, nil, false)
	var refusals []string
	for _, id := range []int{first, second} {
		status, code, _ := p.refusal(id)
		refusals = append(refusals, status+" "+code)
	}
	slices.Sort(refusals)
	if want := []string{"408 " + eventbus.CodeHelloTimeout, "429 " + eventbus.CodeTooManySessions}; !slices.Equal(refusals, want) {
		t.Errorf("two handshakes of one credential without a hello: %q, want %q (one awaited until its hello times out, the other refused meanwhile)", refusals, want)
	}

	old, _ := openH2Session(t, p, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}))
	q := startH2Peer(t, tb)
	id, _ := openH2Session(t, q, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}))
	if m := p.line(old, "the superseded session's error", ofType(eventbus.TypeError)); m["code"] != eventbus.CodeSessionSuperseded {
		t.Errorf("older session told %v, want %s", m, eventbus.CodeSessionSuperseded)
	}
	if ev := p.expect("the superseded control stream's end", func(ev h2Event) bool {
		return ev.Stream == old && (ev.Ev == "ended" || ev.Ev == "reset" || ev.Ev == "data" && ev.Ended)
	}); ev.Ev == "reset" && ev.Code != h2NoError {
		t.Errorf("superseded control stream reset with %#x", ev.Code)
	}

	// The subscribe comes on q's session; p's connection carries the data
	// stream.
	type opened struct {
		s   *eventbus.Stream
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		s, err := tb.OpenStream(context.Background(), eventbus.Target{Namespace: "dynamo", Host: "10.1.2.3", Port: 5557, Topic: "kv_metrics"})
		ch <- opened{s, err}
	}()
	sub := q.line(id, "a subscribe", ofType(eventbus.TypeSubscribe))
	ds := p.request(eventbus.PathStreams+sub["stream_id"].(string), tokenA, []byte("relayed"), false)
	if r := p.response(ds); r.Headers[":status"] != "200" {
		t.Fatalf("data stream on another connection: %v", r.Headers)
	}
	o := <-ch
	if o.err != nil {
		t.Fatal(o.err)
	}
	got := make([]byte, len("relayed"))
	if _, err := io.ReadFull(o.s, got); err != nil || string(got) != "relayed" {
		t.Fatalf("read %q: %v", got, err)
	}

	// A write waiting for the peer's window (the peer reads nothing) is
	// freed by Close, within its bound.
	p.do(h2Cmd{"op": "hold", "stream": ds})
	wrote := make(chan error, 1)
	go func() {
		_, err := o.s.Write(make([]byte, 256<<10))
		wrote <- err
	}()
	// The write is blocked once the router may send the peer nothing more
	// on the stream (its window, or the connection's, used up).
	testutil.Eventually(t, 10*time.Second, "the peer's window used up", func() bool {
		p.do(h2Cmd{"op": "windows", "stream": ds})
		return p.expect("its windows", func(ev h2Event) bool { return ev.Ev == "windows" }).Recv == 0
	})
	start := time.Now()
	_ = o.s.Close()
	select {
	case err := <-wrote:
		if err == nil {
			t.Error("a write past the peer's window returned no error after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a write blocked on the peer's window outlived Close")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v with a write blocked", d)
	}
	p.expect("the blocked stream's end", func(ev h2Event) bool { return ev.Stream == ds && (ev.Ev == "reset" || ev.Ev == "ended") })
}

// TestH2PeerClientCertificate: an OpenSSL client's certificate, verified
// by tls.client_ca, authenticates by its DNS SAN; a token naming another
// broker than the certificate is forbidden; a certificate naming no
// configured broker is unauthenticated.
func TestH2PeerClientCertificate(t *testing.T) {
	tb := startBus(t, nil)
	p := startH2PeerCert(t, tb, brokerB)
	if _, w := openH2Session(t, p, "", helloLine(eventbus.RoleBroker, brokerB, []string{"dynamo"})); w["session_id"] == nil {
		t.Fatalf("welcome %v", w)
	}
	id := p.request(eventbus.PathSession, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}), true)
	if status, code, _ := p.refusal(id); status != "403" || code != eventbus.CodeForbidden {
		t.Errorf("token of %s with a certificate of %s: %s %s, want 403 %s", brokerA, brokerB, status, code, eventbus.CodeForbidden)
	}
	q := startH2PeerCert(t, tb, "nobody.dynamo")
	id = q.request(eventbus.PathSession, "", helloLine(eventbus.RoleBroker, brokerB, []string{"dynamo"}), true)
	if status, code, _ := q.refusal(id); status != "401" || code != eventbus.CodeUnauthenticated {
		t.Errorf("a certificate naming no broker: %s %s, want 401 %s", status, code, eventbus.CodeUnauthenticated)
	}
}

// TestH2PeerIdleCloseSaysGoaway: a connection the listener closes as idle
// (idle_timeout after its last accepted request) is first told so with
// GOAWAY NO_ERROR (RFC 9113 sections 6.8 and 9.1), so that a client knows
// the streams it may have opened meanwhile were not processed and opens
// them again elsewhere, whichever way the last request ended: the
// listener ending the session (here at idle_timeout) or the client
// ending the control channel.
func TestH2PeerIdleCloseSaysGoaway(t *testing.T) {
	const idle = time.Second
	tb := startBus(t, func(s *eventbus.Settings, _ *eventbus.Timeouts) {
		s.HeartbeatInterval, s.IdleTimeout = 200*time.Millisecond, idle
	})
	for i := range 6 {
		p := startH2Peer(t, tb)
		id, _ := openH2Session(t, p, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}))
		if i%2 == 1 {
			p.do(h2Cmd{"op": "reset", "stream": id, "code": 8})
		}
		ev, ok := p.await(4*idle+2*time.Second, func(ev h2Event) bool { return ev.Ev == "goaway" || ev.Ev == "eof" })
		switch {
		case !ok:
			t.Fatalf("connection %d still open %v after its last request; saw %s", i, 4*idle+2*time.Second, p.trace())
		case ev.Ev == "eof":
			t.Fatalf("connection %d closed without a GOAWAY; saw %s", i, p.trace())
		case ev.Code != h2NoError:
			t.Fatalf("connection %d: GOAWAY %#x, want NO_ERROR", i, ev.Code)
		}
	}
}

// TestH2PeerClientReports: what a non-Go client reports on its control
// channel reaches the router: stream_closed with a code refuses the
// stream being opened with that code (a data stream opened for it after
// is unknown_stream); draining ends the session's open streams as a lost
// carrier and takes it out of placement, the session going on. And a
// kv_listener's subscribe names its announced backend and where its SSE
// stream resumes.
func TestH2PeerClientReports(t *testing.T) {
	tb := startBus(t, nil)
	p := startH2Peer(t, tb)
	id, _ := openH2Session(t, p, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}))

	refused := make(chan error, 1)
	go func() {
		_, err := tb.OpenStream(context.Background(), eventbus.Target{Namespace: "dynamo", Host: "10.1.2.3", Port: 5558, Topic: "kv_events"})
		refused <- err
	}()
	sub := p.line(id, "a subscribe", ofType(eventbus.TypeSubscribe))
	p.do(h2Cmd{"op": "data", "stream": id, "body": []byte(`{"type":"stream_closed","stream_id":"` + sub["stream_id"].(string) + `","code":"connect_failed"}` + "\n")})
	var re *eventbus.RefusedError
	if err := <-refused; !errors.As(err, &re) || re.Code != eventbus.CodeConnectFailed {
		t.Fatalf("OpenStream after stream_closed connect_failed: %v", err)
	}
	late := p.request(eventbus.PathStreams+sub["stream_id"].(string), tokenA, nil, true)
	if status, code, _ := p.refusal(late); status != "404" || code != eventbus.CodeUnknownStream {
		t.Errorf("data stream of a refused stream: %s %s, want 404 %s", status, code, eventbus.CodeUnknownStream)
	}

	st, _, _ := openH2Stream(t, tb, p, id, tokenA)
	p.do(h2Cmd{"op": "data", "stream": id, "body": []byte(`{"type":"draining"}` + "\n")})
	if _, err := io.ReadAll(st); !errors.Is(err, zmtp.ErrCarrierLost) {
		t.Errorf("a stream of a draining session read %v, want a lost carrier", err)
	}
	testutil.Eventually(t, 5*time.Second, "the draining session out of placement", func() bool { return !tb.Covers("dynamo") })
	if _, err := tb.OpenStream(context.Background(), eventbus.Target{Namespace: "dynamo", Host: "10.1.2.3", Port: 5559, Topic: "kv_events"}); !errors.Is(err, eventbus.ErrNoSession) {
		t.Errorf("OpenStream with only a draining session: %v, want ErrNoSession", err)
	}
	p.line(id, "a heartbeat to the draining session", ofType(eventbus.TypeHeartbeat))

	kv := startH2Peer(t, tb)
	kid, _ := openH2Session(t, kv, tokenKV, eventbus.Encode(hello(eventbus.RoleKVListener, kvID, nil, []string{"vllm-2"})))
	last := uint64(41)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, _ = tb.OpenAnnouncedStream(ctx, "vllm-2", &last)
	}()
	ksub := kv.line(kid, "a kv_listener's subscribe", ofType(eventbus.TypeSubscribe))
	ann, _ := ksub["announced"].(map[string]any)
	if ann["backend"] != "vllm-2" || ann["last_event_id"] != 41.0 || ksub["target"] != nil {
		t.Errorf("kv_listener subscribe %v", ksub)
	}
}

// TestH2PeerShutdownSaysGoaway: when the router shuts down, a session is
// told why on its control stream (shutting_down) and the connection says
// GOAWAY with NO_ERROR before it closes (RFC 9113 section 6.8: a graceful
// close, after which the client knows no stream it opens is served), rather
// than ending with the socket alone.
func TestH2PeerShutdownSaysGoaway(t *testing.T) {
	tb := startBus(t, nil)
	p := startH2Peer(t, tb)
	id, _ := openH2Session(t, p, tokenA, helloLine(eventbus.RoleBroker, brokerA, []string{"dynamo"}))
	idle := startH2Peer(t, tb) // a connection with no request on it
	idle.expect("the router's SETTINGS", func(ev h2Event) bool { return ev.Ev == "settings" })
	idle.expect("the router's SETTINGS ack", func(ev h2Event) bool { return ev.Ev == "settings_ack" })
	stopped := make(chan struct{})
	go func() { defer close(stopped); tb.stop() }()
	line := p.line(id, "the reason the session ended", ofType(eventbus.TypeError))
	if line["code"] != eventbus.CodeShuttingDown {
		t.Errorf("the session ended with %v, want %s", line, eventbus.CodeShuttingDown)
	}
	for name, peer := range map[string]*h2Peer{"a session's": p, "an idle": idle} {
		ev, ok := peer.await(10*time.Second, func(ev h2Event) bool { return ev.Ev == "goaway" || ev.Ev == "eof" })
		switch {
		case !ok:
			t.Fatalf("%s connection still open 10 s after the shutdown began; saw %s", name, peer.trace())
		case ev.Ev == "eof":
			t.Fatalf("%s connection closed without a GOAWAY; saw %s\nlogs:\n%s", name, peer.trace(), tb.logs.String())
		case ev.Code != h2NoError:
			t.Fatalf("%s connection: GOAWAY %#x, want NO_ERROR", name, ev.Code)
		}
		if _, ok := peer.await(10*time.Second, func(ev h2Event) bool { return ev.Ev == "eof" }); !ok {
			t.Errorf("%s connection still open 10 s after its GOAWAY; saw %s", name, peer.trace())
		}
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the bus did not stop within 10 s")
	}
}
