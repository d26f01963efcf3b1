// Package agent is the in-cluster side of the event bus: a client that
// dials out to the router's listener, keeps one session, and relays the
// streams the router commands from sources it can reach. `continuum
// broker` runs it with publishers (raw ZMTP bytes of the publishers
// discovery advertises); `continuum kv-listener` with announced backends
// (their SSE streams, resumed from a Last-Event-ID).
//
// Imports: eventbus (the protocol) and telemetry.
package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/continuum-router/continuum/internal/eventbus"
	"github.com/continuum-router/continuum/internal/telemetry"
)

// Timings of a client.
const (
	// DialTimeout bounds reaching the router: TCP, TLS and the welcome.
	DialTimeout = 10 * time.Second
	// ReconnectInitial and ReconnectMax bound the full-jitter backoff
	// between sessions; a session that lasted ResetAfter resets it.
	ReconnectInitial = 500 * time.Millisecond
	ReconnectMax     = 30 * time.Second
	ResetAfter       = 30 * time.Second
	// SourceConnectTimeout bounds reaching a source (a publisher, a
	// backend).
	SourceConnectTimeout = 10 * time.Second
	// DefaultDrainGrace bounds draining: after draining is sent, the
	// router moves the streams away; what is left then is cut.
	DefaultDrainGrace = 10 * time.Second
	// receiveWindow is the client's HTTP/2 receive window per stream: what
	// the router sends towards a source (a ZMTP handshake and
	// subscription) is small, and 16 KiB is within every budget.
	receiveWindow = eventbus.MinStreamBuffer
	// maxRelayBuffer bounds each direction's copy buffer of a relay.
	maxRelayBuffer = 32 << 10
	// maxErrorBody bounds a refusal's body read.
	maxErrorBody = 4 << 10
)

// Opener reaches the source of a subscribe: a publisher, an announced
// backend. It returns the source's byte stream, or the code the stream
// is refused with.
type Opener interface {
	Open(ctx context.Context, m *eventbus.Message) (io.ReadWriteCloser, string, error)
}

// Options configure a client.
type Options struct {
	// Router is the listener's URL, https://host:port.
	Router string
	// ID is the client id, the brokers[].id of its credential.
	ID   string
	Role string
	// Token is the bearer token; "" when a client certificate is the
	// credential. It is sent, never logged.
	Token string
	// GetToken, when set, is asked for the token at the start of each
	// session instead (one read from a file that is rotated in place); the
	// session's streams carry the token its opening request did.
	GetToken func() string
	// Certificate, when set, is presented to the listener.
	Certificate *tls.Certificate
	// GetCertificate, when set, is asked for the certificate at each TLS
	// handshake instead (one read from files that a certificate manager
	// renews in place).
	GetCertificate func() (*tls.Certificate, error)
	// RootCAs verifies the listener; the system roots when nil.
	RootCAs *x509.CertPool
	// GetRootCAs, when set, is asked for the roots at each TLS handshake
	// instead (a CA bundle renewed in place).
	GetRootCAs func() *x509.CertPool
	// Namespaces are declared in a broker's hello; Sources announced in a
	// kv_listener's.
	Namespaces []string
	Sources    []string
	Opener     Opener
	// DrainGrace bounds draining at shutdown; DefaultDrainGrace when 0.
	DrainGrace time.Duration
	Metrics    *telemetry.BrokerMetrics
	Logger     *slog.Logger
}

// Client is one event bus client.
type Client struct {
	o    Options
	base *url.URL
	tr   *http.Transport
	// welcomes counts the sessions the router welcomed (Run's goroutine
	// only): an attempt is counted once, as welcomed or as what refused
	// or failed it, never again when a welcomed session later ends.
	welcomes uint64
}

// New checks the options and returns a client; nothing is dialled until
// Run.
func New(o Options) (*Client, error) {
	u, err := url.Parse(o.Router)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("router %q: want https://HOST:PORT", o.Router)
	}
	if o.Token == "" && o.GetToken == nil && o.Certificate == nil && o.GetCertificate == nil {
		return nil, errors.New("no credential: a bearer token or a client certificate")
	}
	if o.Opener == nil {
		return nil, errors.New("no opener")
	}
	hello := eventbus.Message{Type: eventbus.TypeHello, Role: o.Role, ClientID: o.ID, DynamoNamespaces: o.Namespaces,
		Sources: o.Sources, Versions: []int{eventbus.ProtocolVersion}}
	if err := hello.Validate(); err != nil {
		return nil, err
	}
	if o.DrainGrace <= 0 {
		o.DrainGrace = DefaultDrainGrace
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = telemetry.NewBrokerMetrics(nil)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: o.RootCAs, ServerName: u.Hostname(), NextProtos: []string{"h2"}}
	if o.GetRootCAs != nil {
		// crypto/tls takes roots only from the config, so the chain is
		// verified here, with the roots of the moment, exactly as the
		// handshake would have with RootCAs.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyServer(cs, u.Hostname(), o.GetRootCAs())
		}
	}
	switch {
	case o.GetCertificate != nil:
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return o.GetCertificate() }
	case o.Certificate != nil:
		cfg.Certificates = []tls.Certificate{*o.Certificate}
	}
	var protos http.Protocols
	protos.SetHTTP2(true)
	tr := &http.Transport{
		Protocols: &protos, TLSClientConfig: cfg, TLSHandshakeTimeout: DialTimeout, ForceAttemptHTTP2: true,
		DialContext: (&net.Dialer{Timeout: DialTimeout}).DialContext,
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: receiveWindow, MaxReceiveBufferPerConnection: 4 << 20,
			MaxReadFrameSize: 16 << 10, SendPingTimeout: eventbus.KeepalivePing, PingTimeout: eventbus.PingTimeout,
			WriteByteTimeout: 30 * time.Second},
	}
	return &Client{o: o, base: u, tr: tr}, nil
}

// SessionError is a session the listener refused or ended, with its code.
type SessionError struct {
	Status int // the HTTP status of a refusal; 0 when an open session ended
	Code   string
	Detail string
}

func (e *SessionError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("event bus refused the session: %d %s: %s", e.Status, e.Code, e.Detail)
	}
	return fmt.Sprintf("event bus ended the session: %s: %s", e.Code, e.Detail)
}

// Run keeps a session with the router until ctx ends, reconnecting with
// a full-jitter backoff. When ctx ends it drains: draining is sent, new
// streams are refused, and the open ones are given DrainGrace to move.
func (c *Client) Run(ctx context.Context) error {
	backoff := ReconnectInitial
	for {
		started, welcomes := time.Now(), c.welcomes
		err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(started) >= ResetAfter {
			backoff = ReconnectInitial
		}
		if c.welcomes == welcomes {
			c.o.Metrics.Sessions.WithLabelValues(sessionResult(err)).Inc()
		}
		wait := time.Duration(rand.Int64N(int64(backoff) + 1))
		if se := (*SessionError)(nil); errors.As(err, &se) && se.Code == eventbus.CodeSessionSuperseded {
			// Another process holds this credential (a second replica
			// with the same id, or the next pod of a rollout): the newer
			// session keeps it. Coming back at once would take it back
			// and drop its streams, and it would do the same in turn; so
			// the longest wait, and the backoff stays at its ceiling.
			backoff = ReconnectMax
			wait = ReconnectMax/2 + time.Duration(rand.Int64N(int64(ReconnectMax/2)+1))
			c.o.Logger.Error("a newer event bus session with this credential replaced this one: another process runs with the same id and token (a second replica, or the next pod of a rollout)",
				"router", c.base.Host, "retry_in", wait.Round(time.Millisecond))
		} else {
			c.o.Logger.Warn("event bus session ended; reconnecting", "router", c.base.Host, "err", err, "retry_in", wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, ReconnectMax)
	}
}

// dial connects to the listener: TLS 1.3 and h2, within DialTimeout.
func (c *Client) dial(ctx context.Context) (*http.ClientConn, error) {
	dctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	return c.tr.NewClientConn(dctx, "https", c.base.Host)
}

// verifyServer verifies the listener's chain against roots (the system
// roots when nil) for host, as crypto/tls does.
func verifyServer(cs tls.ConnectionState, host string, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the listener presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: host, Roots: roots, Intermediates: inter})
	return err
}

// token is the bearer token for a new session.
func (c *Client) token() string {
	if c.o.GetToken != nil {
		return c.o.GetToken()
	}
	return c.o.Token
}

// request builds a POST to path with the credential and version headers.
func (c *Client) request(ctx context.Context, path, token string, body io.Reader) *http.Request {
	u := *c.base
	u.Path = path
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set(eventbus.HeaderVersion, strconv.Itoa(eventbus.ProtocolVersion))
	return req
}

// sessionResult is the continuum_broker_sessions_total result of a
// session that ended with err: the router's refusal code, or failed. The
// code comes from whatever answered at the router's address, so only the
// listener's own refusal codes become label values; anything else (a proxy's
// answer, a body without a code) counts as failed, and the label set stays
// closed.
func sessionResult(err error) string {
	var se *SessionError
	if errors.As(err, &se) && se.Status != 0 && slices.Contains(eventbus.RefusalCodes, se.Code) {
		return se.Code
	}
	return "failed"
}

// refusal reads a refused request's code.
func refusal(resp *http.Response) *SessionError {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = json.Unmarshal(data, &body)
	return &SessionError{Status: resp.StatusCode, Code: body.Error.Code, Detail: body.Error.Message}
}

// conn is one session: its HTTP/2 connection and control channel.
type conn struct {
	c       *Client
	cc      *http.ClientConn
	ctx     context.Context // ends the session's requests
	token   string          // the bearer token the session opened with
	id      string
	limits  eventbus.Limits
	out     chan []byte
	dead    chan struct{} // closed when the session must end
	deadErr error
	dieOnce sync.Once
}

func (s *conn) die(err error) {
	s.dieOnce.Do(func() {
		s.deadErr = err
		close(s.dead)
	})
}

// send queues a control line; a full queue ends the session.
func (s *conn) send(m *eventbus.Message) {
	select {
	case s.out <- eventbus.Encode(m):
	default:
		s.die(errors.New("the control channel is not draining"))
	}
}

// session opens one session and serves it until it ends, or until ctx
// ends and it has drained.
func (c *Client) session(ctx context.Context) error {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	cc, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	pr, pw := io.Pipe()
	defer func() { _ = pw.Close() }()
	token := c.token()
	req := c.request(sctx, eventbus.PathSession, token, pr)
	type result struct {
		resp *http.Response
		err  error
	}
	rch := make(chan result, 1)
	go func() {
		resp, err := cc.RoundTrip(req) //nolint:bodyclose // handed over; the session closes it
		rch <- result{resp, err}
	}()
	hello := eventbus.Encode(&eventbus.Message{Type: eventbus.TypeHello, Role: c.o.Role, ClientID: c.o.ID,
		DynamoNamespaces: c.o.Namespaces, Sources: c.o.Sources, Versions: []int{eventbus.ProtocolVersion}})
	go func() { _, _ = pw.Write(hello) }()
	timer := time.NewTimer(DialTimeout + eventbus.HelloTimeout)
	defer timer.Stop()
	var res result
	select {
	case res = <-rch:
	case <-timer.C:
		cancel()
		res = <-rch
		if res.err == nil {
			_ = res.resp.Body.Close()
		}
		return errors.New("no answer to the hello in time")
	case <-ctx.Done():
		cancel()
		if r := <-rch; r.err == nil {
			_ = r.resp.Body.Close()
		}
		return nil
	}
	if res.err != nil {
		return res.err
	}
	defer func() { _ = res.resp.Body.Close() }()
	if res.resp.StatusCode != http.StatusOK {
		return refusal(res.resp)
	}
	lr := eventbus.NewLineReader(res.resp.Body, eventbus.MaxLineBytes)
	welcomeTimer := time.AfterFunc(eventbus.HelloTimeout, func() { _ = res.resp.Body.Close() })
	line, err := lr.Next()
	welcomeTimer.Stop()
	if err != nil {
		return fmt.Errorf("reading the welcome: %w", err)
	}
	w, err := eventbus.Decode(line)
	if err != nil {
		return fmt.Errorf("the router's first line: %w", err)
	}
	if w.Type != eventbus.TypeWelcome {
		return fmt.Errorf("the router's first line is a %s, not a welcome", w.Type)
	}
	s := &conn{c: c, cc: cc, ctx: sctx, token: token, id: w.SessionID, limits: *w.Limits,
		out: make(chan []byte, 2*w.Limits.MaxStreams+16), dead: make(chan struct{})}
	c.welcomes++
	c.o.Metrics.Sessions.WithLabelValues("welcomed").Inc()
	c.o.Metrics.Connected.Set(1)
	defer c.o.Metrics.Connected.Set(0)
	c.o.Logger.Info("event bus session open", "router", c.base.Host, "session", s.id, "max_streams", w.Limits.MaxStreams,
		"stream_buffer_bytes", w.Limits.StreamBufferBytes)
	return s.serve(ctx, pw, lr, res.resp.Body)
}

// relayEnd reports a relay that ended.
type relayEnd struct {
	id   string
	r    *relayRef
	code string // "" when the router ended it
}

// relayRef is a relay under way, as the session counts it: from its
// subscribe to its unsubscribe or its end, whichever comes first.
type relayRef struct{ cancel context.CancelFunc }

// serve runs the session: the writer, the reader, and the relays.
func (s *conn) serve(ctx context.Context, pw *io.PipeWriter, lr *eventbus.LineReader, body io.Closer) error {
	c := s.c
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case line := <-s.out:
				if _, err := pw.Write(line); err != nil {
					s.die(fmt.Errorf("writing the control channel: %w", err))
					return
				}
			case <-s.dead:
				_ = pw.Close()
				return
			}
		}
	})
	msgs := make(chan eventbus.Message)
	lastSeen := make(chan struct{}, 1)
	wg.Go(func() {
		defer close(msgs)
		for {
			line, err := lr.Next()
			if err != nil {
				s.die(fmt.Errorf("reading the control channel: %w", err))
				return
			}
			select {
			case lastSeen <- struct{}{}:
			default:
			}
			m, err := eventbus.Decode(line)
			if err != nil {
				c.o.Logger.Warn("the router sent an invalid control line; ignored", "err", err)
				continue
			}
			select {
			case msgs <- m:
			case <-s.dead:
				return
			}
		}
	})
	relays := map[string]*relayRef{}
	var relayWG sync.WaitGroup
	// The relays end first (their requests ride the connection), then the
	// writer and, with the control channel's response closed, the reader.
	defer func() {
		for _, r := range relays {
			r.cancel()
		}
		relayWG.Wait()
		s.die(nil)
		_ = body.Close()
		wg.Wait()
		c.o.Metrics.Streams.Set(0)
	}()
	return s.loop(ctx, msgs, lastSeen, relays, &relayWG)
}

// loop handles the router's messages, heartbeats, relay ends and the
// drain, until the session ends.
func (s *conn) loop(ctx context.Context, msgs <-chan eventbus.Message, lastSeen <-chan struct{}, relays map[string]*relayRef, relayWG *sync.WaitGroup) error {
	c := s.c
	ends := make(chan relayEnd, s.limits.MaxStreams+1)
	// Relays the router unsubscribed no longer count, so more may be
	// under way than ends holds: once the loop returns, theirs are not
	// waited for.
	quit := make(chan struct{})
	defer close(quit)
	interval := time.Duration(s.limits.HeartbeatIntervalMs) * time.Millisecond
	idle := time.Duration(s.limits.IdleTimeoutMs) * time.Millisecond
	hb := time.NewTicker(interval)
	defer hb.Stop()
	seen := time.Now()
	var seq uint64
	draining := false
	var drainTimer <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case <-s.dead:
			return s.deadErr
		case <-lastSeen:
			seen = time.Now()
		case now := <-hb.C:
			if now.Sub(seen) > idle {
				return errors.New("nothing from the router within idle_timeout")
			}
			seq++
			s.send(&eventbus.Message{Type: eventbus.TypeHeartbeat, Seq: seq})
		case <-done:
			done = nil
			draining = true
			s.send(&eventbus.Message{Type: eventbus.TypeDraining})
			c.o.Logger.Info("draining: the router moves the streams away", "streams", len(relays), "grace", c.o.DrainGrace)
			if len(relays) == 0 {
				return nil
			}
			t := time.NewTimer(c.o.DrainGrace)
			defer t.Stop()
			drainTimer = t.C
		case <-drainTimer:
			c.o.Logger.Warn("drain grace over; cutting the streams left", "streams", len(relays))
			return nil
		case e := <-ends:
			if relays[e.id] != e.r {
				continue // unsubscribed: the router knows it ended
			}
			delete(relays, e.id)
			c.o.Metrics.Streams.Set(float64(len(relays)))
			if e.code != "" {
				c.o.Metrics.StreamsBy.WithLabelValues(e.code).Inc()
				s.send(&eventbus.Message{Type: eventbus.TypeStreamClosed, StreamID: e.id, Code: e.code})
			}
			if draining && len(relays) == 0 {
				return nil
			}
		case m, ok := <-msgs:
			if !ok {
				return s.deadErr
			}
			switch m.Type {
			case eventbus.TypeHeartbeat:
				s.send(&eventbus.Message{Type: eventbus.TypeHeartbeatAck, Seq: m.Seq})
			case eventbus.TypeHeartbeatAck, eventbus.TypeWelcome, eventbus.TypeDraining:
			case eventbus.TypeError:
				return &SessionError{Code: m.Code, Detail: m.Detail}
			case eventbus.TypeUnsubscribe:
				// The stream's slot is free at once, as the router counts
				// it: a subscribe that follows may take it while the
				// cancelled relay winds down.
				if r, ok := relays[m.StreamID]; ok {
					r.cancel()
					delete(relays, m.StreamID)
					c.o.Metrics.Streams.Set(float64(len(relays)))
					if draining && len(relays) == 0 {
						return nil
					}
				}
			case eventbus.TypeSubscribe:
				code := ""
				switch {
				case draining:
					code = eventbus.CodeDraining
				case len(relays) >= s.limits.MaxStreams:
					code = eventbus.CodeTooManyStreams
				case relays[m.StreamID] != nil:
					continue
				}
				if code != "" {
					c.o.Metrics.StreamsBy.WithLabelValues(code).Inc()
					s.send(&eventbus.Message{Type: eventbus.TypeStreamClosed, StreamID: m.StreamID, Code: code})
					continue
				}
				rctx, cancel := context.WithCancel(s.ctx)
				r := &relayRef{cancel: cancel}
				relays[m.StreamID] = r
				c.o.Metrics.Streams.Set(float64(len(relays)))
				relayWG.Go(func() {
					defer cancel()
					code := s.relay(rctx, &m)
					select {
					case ends <- relayEnd{id: m.StreamID, r: r, code: code}:
					case <-quit:
					}
				})
			}
		}
	}
}

// relay opens the source of a subscribe and its data stream, and copies
// bytes both ways until either ends or ctx (unsubscribe, the session)
// does. It returns the code to report, "" when the router ended it.
func (s *conn) relay(ctx context.Context, m *eventbus.Message) string {
	c := s.c
	octx, cancel := context.WithTimeout(ctx, SourceConnectTimeout)
	src, code, err := c.o.Opener.Open(octx, m)
	cancel()
	if ctx.Err() != nil {
		// The router ended the stream (unsubscribe, the session) while it
		// opened: nothing to report, and no failure to count.
		if src != nil {
			_ = src.Close()
		}
		return ""
	}
	if code != "" || err != nil {
		if code == "" {
			code = eventbus.CodeConnectFailed
		}
		c.o.Logger.Info("stream refused", "stream", m.StreamID, "code", code, "err", err)
		return code
	}
	defer func() { _ = src.Close() }()
	pr, pw := io.Pipe()
	req := c.request(ctx, eventbus.PathStreams+m.StreamID, s.token, pr)
	resp, err := s.cc.RoundTrip(req)
	if err != nil {
		_ = pw.CloseWithError(err)
		if ctx.Err() != nil {
			return ""
		}
		return eventbus.CodeStreamRefused
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		_ = pw.Close()
		e := refusal(resp)
		c.o.Logger.Warn("the router refused a data stream", "stream", m.StreamID, "status", e.Status, "code", e.Code)
		return eventbus.CodeStreamRefused
	}
	c.o.Metrics.StreamsBy.WithLabelValues(telemetry.BrokerStreamOpened).Inc()
	size := min(max(s.limits.StreamBufferBytes, 4<<10), maxRelayBuffer)
	upDone, downDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(upDone)
		buf := make([]byte, size)
		_, err := io.CopyBuffer(countingWriter{pw, c.o.Metrics.Bytes.WithLabelValues("to_router")}, src, buf)
		if err == nil {
			err = io.EOF
		}
		_ = pw.CloseWithError(err)
	}()
	go func() {
		defer close(downDone)
		buf := make([]byte, size)
		_, _ = io.CopyBuffer(countingWriter{src, c.o.Metrics.Bytes.WithLabelValues("to_source")}, resp.Body, buf)
	}()
	sourceEnded := false
	select {
	case <-upDone:
		sourceEnded = ctx.Err() == nil
	case <-downDone:
	case <-ctx.Done():
	}
	// Either side ending ends the stream.
	_ = src.Close()
	_ = pw.CloseWithError(io.EOF)
	_ = resp.Body.Close()
	<-upDone
	<-downDone
	if !sourceEnded || ctx.Err() != nil {
		return ""
	}
	return eventbus.CodePublisherClosed
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	c interface{ Add(float64) }
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.c.Add(float64(n))
	return n, err
}
